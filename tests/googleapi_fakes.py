"""Answers of Google's REST APIs for tests, held to the APIs' published schemas.

No Google API is reachable here, so a test hands the real client (google-api-python-client)
the library's own HttpMockSequence. Each answer a test writes is checked first against the
response schema of the method in the discovery document the client itself is built from: a
misspelt field, a number where the API sends a string, an enum value it does not have, or an
answer for a method that does not exist fails the test instead of passing a fake the real API
would never send. Error answers follow Google's documented error model (google.rpc.Status in
JSON, with ``errors`` for Compute Engine's v1 style and ``details`` for ErrorInfo).
"""

from __future__ import annotations

import json
from typing import Any

from googleapiclient.http import HttpMockSequence

from trainstack.base.discovery import discovery_document, schema_problems


def _methods(resource: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {m["id"]: m for m in resource.get("methods", {}).values()}
    for child in resource.get("resources", {}).values():
        found.update(_methods(child))
    return found


def method(api: str, version: str, method_id: str) -> dict[str, Any]:
    methods = _methods(discovery_document(api, version))
    if method_id not in methods:
        raise AssertionError(f"{api} {version} has no method {method_id}")
    return methods[method_id]


def ok(api: str, version: str, method_id: str, body: dict[str, Any]) -> tuple[dict[str, str], str]:
    """A 200 answer of ``method_id`` (e.g. ``compute.regions.get``), checked against its schema."""
    response = method(api, version, method_id).get("response")
    if response is None:
        raise AssertionError(f"{method_id} returns no body")
    problems = schema_problems(api, version, response, body)
    if problems:
        raise AssertionError(f"not a {method_id} answer the API could send:\n" + "\n".join(problems))
    return {"status": "200", "content-type": "application/json"}, json.dumps(body)


def off_schema(body: dict[str, Any]) -> tuple[dict[str, str], str]:
    """A 200 answer that is not one the API could send: what a broken proxy or a hostile
    endpoint answers, for the tests that the reader holds its ground."""
    return {"status": "200", "content-type": "application/json"}, json.dumps(body)


def error(
    status: int, message: str, *, reason: str | None = None, error_info: str | None = None, service: str | None = None
) -> tuple[dict[str, str], str]:
    """A failed call as Google's APIs answer it: google.rpc.Status in JSON."""
    statuses = {
        400: "INVALID_ARGUMENT",
        401: "UNAUTHENTICATED",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        429: "RESOURCE_EXHAUSTED",
    }
    body: dict[str, Any] = {"code": status, "message": message, "status": statuses.get(status, "UNKNOWN")}
    if reason is not None:
        body["errors"] = [{"message": message, "domain": "global", "reason": reason}]
    if error_info is not None:
        info: dict[str, Any] = {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": error_info,
            "domain": "googleapis.com",
        }
        if service is not None:
            info["metadata"] = {"service": service, "consumer": "projects/123456789012"}
        body["details"] = [info]
    return {"status": str(status), "content-type": "application/json"}, json.dumps({"error": body})


def api_disabled(service: str) -> tuple[dict[str, str], str]:
    """The answer of an API that is not enabled in the project (403 SERVICE_DISABLED)."""
    message = (
        f"{service.split('.')[0].title()} API has not been used in project 123456789012 before or it is disabled. "
        f"Enable it by visiting https://console.developers.google.com/apis/api/{service}/overview?project=123456789012"
    )
    return error(403, message, reason="accessNotConfigured", error_info="SERVICE_DISABLED", service=service)


# A refusal by a VPC Service Controls perimeter, as Google's APIs send it (google.rpc.Status with
# a PreconditionFailure of type VPC_SERVICE_CONTROLS and an ErrorInfo SECURITY_POLICY_VIOLATED).
PERIMETER_VIOLATION_ID = "eYhDkfYCu-dOCjuj8X4Am9-spkxs0-kX5Ynh"


def perimeter_refused_body(service: str) -> dict[str, Any]:
    message = (
        f"Request is prohibited by organization's policy. vpcServiceControlsUniqueIdentifier: {PERIMETER_VIOLATION_ID}"
    )
    return {
        "error": {
            "code": 403,
            "message": message,
            "status": "PERMISSION_DENIED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.PreconditionFailure",
                    "violations": [{"type": "VPC_SERVICE_CONTROLS", "description": PERIMETER_VIOLATION_ID}],
                },
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "SECURITY_POLICY_VIOLATED",
                    "domain": "googleapis.com",
                    "metadata": {
                        "service": service,
                        "uid": PERIMETER_VIOLATION_ID,
                        "consumer": "projects/123456789012",
                    },
                },
            ],
        }
    }


def perimeter_refused(service: str) -> tuple[dict[str, str], str]:
    return {"status": "403", "content-type": "application/json"}, json.dumps(perimeter_refused_body(service))


class FakeGoogle(HttpMockSequence):  # type: ignore[misc]
    """HttpMockSequence that says which requests were made and which answers were left unused."""

    def __init__(self, answers: list[tuple[dict[str, str], str]]) -> None:
        super().__init__(list(answers))

    @property
    def uris(self) -> list[str]:
        return [uri for uri, *_ in self.request_sequence]

    def assert_all_used(self) -> None:
        assert self._iterable == [], f"{len(self._iterable)} answer(s) never asked for"
