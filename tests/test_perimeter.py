"""Inside a landing zone a VPC Service Controls perimeter can refuse a request whatever the
caller's IAM roles. The status and queue paths tell that apart from a missing role, through the
real google-cloud-storage client against a loopback server answering as Cloud Storage does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from http_stand_in import Scripted

from trainstack.base.bucket import BucketError, GcsBucket

PROJECT, BUCKET = "team-project", "team-bucket"
VIOLATION = "VQQnKfXtZ16NHnOmdJAy0E92tVT_8fZZRGvnndBWXZLKFx_KItn1EA"
# Cloud Storage's JSON API names a perimeter's refusal in errors[].reason.
REFUSED = json.dumps(
    {
        "error": {
            "code": 403,
            "message": f"Request is prohibited by organization's policy. vpcServiceControlsUniqueIdentifier: {VIOLATION}",
            "errors": [
                {
                    "message": "Request is prohibited by organization's policy.",
                    "domain": "global",
                    "reason": "vpcServiceControls",
                }
            ],
        }
    }
).encode()
MISSING_ROLE = json.dumps(
    {
        "error": {
            "code": 403,
            "message": "someone@example.com does not have storage.objects.get access",
            "errors": [{"message": "no access", "domain": "global", "reason": "forbidden"}],
        }
    }
).encode()


@pytest.fixture
def storage(monkeypatch: pytest.MonkeyPatch) -> Iterator[Scripted]:
    server = Scripted()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.root)
    yield server
    server.shutdown()
    server.server_close()


OBJECT = "jobs/j1/status/chief.json"


def test_a_status_read_refused_by_the_perimeter_says_so(storage: Scripted) -> None:
    storage.answer(f"/download/storage/v1/b/{BUCKET}/o/{OBJECT.replace('/', '%2F')}", (403, REFUSED))
    storage.answer(f"/storage/v1/b/{BUCKET}/o", (403, REFUSED))
    objects = GcsBucket(PROJECT, BUCKET)
    for attempt in (lambda: objects.read(OBJECT), lambda: objects.names("jobs/", 10)):
        with pytest.raises(BucketError) as caught:
            attempt()
        line = str(caught.value)
        assert "refused by a VPC Service Controls perimeter" in line, line
        assert f"violation {VIOLATION}" in line
        assert "permission denied" not in line


def test_a_queue_write_refused_by_the_perimeter_says_so(storage: Scripted) -> None:
    storage.answer(f"/upload/storage/v1/b/{BUCKET}/o", (403, REFUSED))
    with pytest.raises(BucketError) as caught:
        GcsBucket(PROJECT, BUCKET).write_if_generation("trainstack/queue/index.json", b"{}", 0)
    assert "refused by a VPC Service Controls perimeter" in str(caught.value)


def test_a_missing_role_is_still_permission_denied(storage: Scripted) -> None:
    storage.answer(f"/download/storage/v1/b/{BUCKET}/o/{OBJECT.replace('/', '%2F')}", (403, MISSING_ROLE))
    with pytest.raises(BucketError) as caught:
        GcsBucket(PROJECT, BUCKET).read(OBJECT)
    line = str(caught.value)
    assert "permission denied" in line
    assert "storage.objects.get" in line
    assert "perimeter" not in line
