"""The agent's HTTP against a real server on loopback: what counts as absent, what is retried and
how often, and that the token travels in a header and nowhere else."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from http_stand_in import Scripted, scripted_server

from trainstack_agent.cloud import CloudError, Http, NotFound, Request, Retry, TooLarge, Unavailable
from trainstack_agent.gcs import Storage
from trainstack_agent.metadata import Metadata
from trainstack_agent.secrets import SecretError, read_secrets

TOKEN = "ya29.secret-token-value"


@pytest.fixture
def server() -> Iterator[Scripted]:
    with scripted_server() as scripted:
        yield scripted


def http(attempts: int = 4) -> tuple[Http, list[float]]:
    waits: list[float] = []
    return Http(timeout=5, retry=Retry(attempts=attempts, first_delay=0.5, max_delay=8), sleep=waits.append), waits


def metadata(server: Scripted, client: Http) -> Metadata:
    server.answer(
        "/m/instance/service-accounts/default/token",
        (200, json.dumps({"access_token": TOKEN, "expires_in": 3600}).encode()),
    )
    return Metadata(client, f"{server.root}/m")


def test_a_404_is_absent_at_once(server: Scripted) -> None:
    client, waits = http()
    assert Metadata(client, f"{server.root}/m").attribute("trainstack-secrets") is None
    assert len(server.requests) == 1
    assert waits == []


def test_a_503_is_retried_and_the_value_then_read(server: Scripted) -> None:
    client, waits = http()
    server.answer("/m/instance/attributes/trainstack-secrets", (503, b""), (503, b""), (200, b"A=b"))
    assert Metadata(client, f"{server.root}/m").attribute("trainstack-secrets") == "A=b"
    assert waits == [0.5, 1.0]


def test_a_503_that_persists_is_unavailable_never_absent(server: Scripted) -> None:
    client, waits = http(attempts=4)
    server.answer("/m/instance/attributes/trainstack-secrets", (503, b""))
    with pytest.raises(Unavailable, match="no answer after 4 attempts"):
        Metadata(client, f"{server.root}/m").attribute("trainstack-secrets")
    assert len(server.requests) == 4
    assert waits == [0.5, 1.0, 2.0]


def test_an_unreachable_server_is_unavailable(server: Scripted) -> None:
    client, _ = http(attempts=2)
    root = server.root
    server.shutdown()
    server.server_close()
    with pytest.raises(Unavailable):
        Metadata(client, f"{root}/m").attribute("trainstack-role")


def test_a_refusal_is_an_error_at_once_and_not_retried(server: Scripted) -> None:
    client, waits = http()
    server.answer("/m/instance/attributes/x", (403, b""))
    with pytest.raises(CloudError, match="HTTP 403") as raised:
        Metadata(client, f"{server.root}/m").attribute("x")
    assert not isinstance(raised.value, (NotFound, Unavailable))
    assert waits == []


def test_an_answer_past_its_bound_is_refused(server: Scripted) -> None:
    client, _ = http()
    server.answer("/big", (200, b"x" * 2000))
    with pytest.raises(TooLarge):
        client.call(Request("GET", f"{server.root}/big", {}), max_bytes=1000)


def test_every_metadata_request_carries_the_flavor_header(server: Scripted) -> None:
    client, _ = http()
    Metadata(client, f"{server.root}/m").attribute("trainstack-role")
    assert server.requests[0]["headers"]["Metadata-Flavor"] == "Google"


def test_storage_calls_carry_the_token_in_a_header_and_nowhere_else(server: Scripted) -> None:
    client, _ = http()
    storage = Storage(client, metadata(server, client), server.root)
    server.answer("/storage/v1/b/bkt/o/jobs%2Ftrain%2Fstatus%2Fchief.json", (200, b"{}"))
    server.answer("/upload/storage/v1/b/bkt/o", (200, b"{}"))
    assert storage.read("gs://bkt/jobs/train/status/chief.json", 1000) == b"{}"
    storage.write("gs://bkt/jobs/train/status/chief.json", b'{"state": "RUNNING"}')
    api_calls = [r for r in server.requests if not r["path"].startswith("/m/")]
    assert [r["method"] for r in api_calls] == ["GET", "POST"]
    for request in api_calls:
        assert request["headers"]["Authorization"] == f"Bearer {TOKEN}"
        assert TOKEN not in request["path"]
    upload = api_calls[1]
    assert upload["path"] == "/upload/storage/v1/b/bkt/o?uploadType=multipart"
    assert upload["headers"]["Content-Type"].startswith("multipart/related; boundary=")
    assert b'{"name": "jobs/train/status/chief.json", "contentType": "application/json"}' in upload["body"]
    assert b'{"state": "RUNNING"}' in upload["body"]
    assert TOKEN.encode() not in upload["body"]
    # One token request: the token is reused until it nears its expiry.
    assert sum(r["path"].endswith("/token") for r in server.requests) == 1


def test_a_missing_object_reads_as_none(server: Scripted) -> None:
    client, _ = http()
    storage = Storage(client, metadata(server, client), server.root)
    assert storage.read("gs://bkt/jobs/train/status/job.json", 1000) is None


def test_secrets_are_read_from_secret_manager_by_exact_request(server: Scripted) -> None:
    client, _ = http()
    meta = metadata(server, client)
    server.answer("/m/project/project-id", (200, b"proj-1"))
    server.answer(
        "/v1/projects/proj-1/secrets/s-wandb/versions/latest:access",
        (200, json.dumps({"payload": {"data": "a2V5LXZhbHVl"}}).encode()),
    )
    values = read_secrets(
        (("WANDB_API_KEY", "s-wandb"),), from_environment=None, http=client, metadata=meta, root=f"{server.root}/v1"
    )
    assert values == {"WANDB_API_KEY": "key-value"}
    [call] = [r for r in server.requests if ":access" in r["path"]]
    assert call["method"] == "GET"
    assert call["headers"]["Authorization"] == f"Bearer {TOKEN}"


def test_a_secret_that_cannot_be_read_names_the_variable_not_a_value(server: Scripted) -> None:
    client, _ = http(attempts=2)
    meta = metadata(server, client)
    server.answer("/m/project/project-id", (200, b"proj-1"))
    server.answer("/v1/projects/proj-1/secrets/s-wandb/versions/latest:access", (403, b""))
    with pytest.raises(SecretError, match="cannot read secret s-wandb \\(for WANDB_API_KEY\\)"):
        read_secrets(
            (("WANDB_API_KEY", "s-wandb"),), from_environment=None, http=client, metadata=meta, root=f"{server.root}/v1"
        )


def test_a_local_run_takes_secrets_from_its_environment_and_fails_without_them(server: Scripted) -> None:
    client, _ = http()
    meta = Metadata(client, f"{server.root}/m")
    secrets = (("WANDB_API_KEY", "s-wandb"),)
    assert read_secrets(secrets, from_environment={"WANDB_API_KEY": "v"}, http=client, metadata=meta, root="") == {
        "WANDB_API_KEY": "v"
    }
    with pytest.raises(SecretError, match="WANDB_API_KEY is not set"):
        read_secrets(secrets, from_environment={}, http=client, metadata=meta, root="")
    assert server.requests == []


@pytest.mark.parametrize("url", ["file:///etc/shadow", "ftp://example.com/x", "data:text/plain,x", "/relative"])
def test_a_request_is_http_or_https_only(url: str) -> None:
    # urllib's opener would read a file: or ftp: URL; nothing the agent asks for is one.
    with pytest.raises(ValueError, match="not an http"):
        Request("GET", url, {})
