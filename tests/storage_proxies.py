"""Cloud Storage as strict as Google's, in front of the emulator (which checks neither
preconditions nor permissions): :class:`PreconditionProxy` answers ifGenerationMatch as Cloud
Storage does; :class:`IamStorageProxy` also enforces the plan's own bucket grants, and a job
token's Credential Access Boundary, on every request, evaluating their IAM conditions with a
CEL implementation (cel-python), as IAM does."""

from __future__ import annotations

import email
import http.client
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit


class PreconditionProxy(ThreadingHTTPServer):
    """Forwards every request to the emulator, one at a time; a request with ifGenerationMatch
    whose object (read through the emulator) has another generation gets Cloud Storage's 412."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream).netloc
        self.lock = threading.Lock()
        self.refused = 0
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def call(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> Any:
        connection = http.client.HTTPConnection(self.upstream, timeout=30)
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.getheaders(), response.read()

    def refusal(self, call: Call) -> tuple[int, bytes] | None:
        """Cloud Storage's answer where it refuses ``call`` (the emulator would not), or None:
        a request with ifGenerationMatch whose object has another generation gets its 412."""
        expected = call.query.get("ifGenerationMatch")
        if expected and self.generation(*call.target()) != int(expected[0]):
            self.refused += 1
            return 412, error_body(
                412, "At least one of the pre-conditions you specified did not hold.", "conditionNotMet"
            )
        return None

    def generation(self, bucket: str, name: str) -> int:
        status, _, data = self.call("GET", f"/storage/v1/b/{bucket}/o/{quote(name, safe='')}")
        return 0 if status == 404 else int(json.loads(data)["generation"])


@dataclass(frozen=True)
class Call:
    """One JSON API request, as the proxy sees it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: Any
    body: bytes

    def target(self) -> tuple[str, str]:
        return _target(self.path, self.query, self.headers, self.body)


def error_body(code: int, message: str, reason: str) -> bytes:
    """Cloud Storage's JSON error document."""
    return json.dumps(
        {
            "error": {
                "code": code,
                "message": message,
                "errors": [{"message": message, "domain": "global", "reason": reason}],
            }
        }
    ).encode()


def _target(path: str, query: dict[str, list[str]], headers: Any, body: bytes) -> tuple[str, str]:
    """The bucket and object a JSON API request names: in its path, or an upload's metadata
    ("" for the bucket itself: a listing)."""
    parts = path.split("/")
    bucket = parts[parts.index("b") + 1]
    if "o" in parts and parts.index("o") + 1 < len(parts):
        # The emulator's mediaLink leaves the name's slashes unquoted.
        return bucket, unquote("/".join(parts[parts.index("o") + 1 :]))
    if "name" in query:
        return bucket, query["name"][0]
    if not body:
        return bucket, ""
    message = email.message_from_bytes(f"Content-Type: {headers['Content-Type']}\r\n\r\n".encode() + body)
    metadata = message.get_payload()[0].get_payload()  # type: ignore[index,union-attr]
    return bucket, json.loads(metadata)["name"]


class _ProxyHandler(BaseHTTPRequestHandler):
    server: PreconditionProxy
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        with self.server.lock:
            refusal = self.server.refusal(Call(self.command, url.path, query, self.headers, body))
            if refusal is not None:
                status, headers, data = refusal[0], [("Content-Type", "application/json")], refusal[1]
            else:
                forwarded = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "content-length")}
                status, headers, data = self.server.call(self.command, self.path, body, forwarded)
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815 (http.server's naming)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


# The object permissions of Cloud Storage's predefined roles that trainstack grants or a
# boundary names (https://cloud.google.com/storage/docs/access-control/iam-roles; folders,
# managed folders and multipart uploads left out: nothing here uses them).
ROLE_PERMISSIONS: Mapping[str, frozenset[str]] = {
    "roles/storage.objectViewer": frozenset({"storage.objects.get", "storage.objects.list"}),
    "roles/storage.objectCreator": frozenset({"storage.objects.create"}),
    "roles/storage.objectUser": frozenset(
        {
            "storage.objects.create",
            "storage.objects.delete",
            "storage.objects.get",
            "storage.objects.list",
            "storage.objects.restore",
            "storage.objects.update",
        }
    ),
}
LIST_PREFIX = "storage.googleapis.com/objectListPrefix"


@dataclass(frozen=True)
class Grant:
    """One bucket binding: the bucket, the member, its role, and its IAM condition (None:
    every object)."""

    bucket: str
    member: str
    role: str
    expression: str | None = None


def _request_attributes(bucket: str, name: str, list_prefix: str | None) -> dict[str, Any]:
    """What IAM evaluates a condition on: the resource (an object, or the bucket for a
    listing) and, for a listing, the prefix it lists."""
    from celpy import celtypes

    if list_prefix is None:
        resource = {"name": f"projects/_/buckets/{bucket}/objects/{name}", "type": "storage.googleapis.com/Object"}
    else:
        resource = {"name": f"projects/_/buckets/{bucket}", "type": "storage.googleapis.com/Bucket"}
    api = {LIST_PREFIX: list_prefix} if list_prefix is not None else {}
    return {
        "resource": celtypes.MapType({celtypes.StringType(k): celtypes.StringType(v) for k, v in resource.items()}),
        "api": celtypes.MapType({celtypes.StringType(k): celtypes.StringType(v) for k, v in api.items()}),
    }


def holds(expression: str | None, attributes: dict[str, Any]) -> bool:
    """Whether an IAM condition holds (None: there is none): CEL, as IAM evaluates it."""
    if expression is None:
        return True
    import celpy

    environment = celpy.Environment()
    program = environment.program(
        environment.compile(expression),
        functions={"getAttribute": lambda api, key, default: api.get(key, default)},
    )
    return bool(program.evaluate(attributes))


class IamStorageProxy(PreconditionProxy):
    """Every request is made as the principal its bearer token stands for, and refused with
    Cloud Storage's 403 unless that principal holds the permission it needs on the object (the
    bucket, for a listing) through ``grants`` whose condition holds; a job's downscoped token
    (``boundaries``: token -> (the member it was exchanged from, its access boundary)) also
    needs a boundary rule on the bucket whose role holds the permission and whose condition
    holds. Overwriting an object takes storage.objects.delete too, as in Cloud Storage. Each
    refusal is recorded in ``denied`` as "MEMBER PERMISSION gs://BUCKET/OBJECT"."""

    def __init__(
        self,
        upstream: str,
        grants: list[Grant],
        members: dict[str, str],
        boundaries: Callable[[str], tuple[str, dict[str, Any]] | None] = lambda token: None,
    ) -> None:
        """``members``: token -> the member it stands for (the node's token, a teammate's)."""
        self.grants = grants
        self.members = members
        self.boundaries = boundaries
        self.denied: list[str] = []
        super().__init__(upstream)

    def refusal(self, call: Call) -> tuple[int, bytes] | None:
        bucket, name = call.target()
        token = str(call.headers.get("Authorization", "")).removeprefix("Bearer ")
        boundary = None
        member = self.members.get(token)
        if member is None:
            exchanged = self.boundaries(token)
            if exchanged is None:
                return 401, error_body(401, "Invalid Credentials", "authError")
            member, boundary = exchanged
        listing = call.method == "GET" and not name
        attributes = _request_attributes(bucket, name, call.query.get("prefix", [""])[0] if listing else None)
        for permission in self._permissions(call, bucket, name, listing):
            if not self._allowed(member, boundary, bucket, permission, attributes):
                where = f"gs://{bucket}/{name}" if name else f"gs://{bucket}"
                self.denied.append(f"{member} {permission} {where}")
                message = (
                    f"{member.split(':', 1)[-1]} does not have {permission} access to the Google Cloud Storage "
                    f"{'object' if name else 'bucket'}. Permission '{permission}' denied on resource (or it may "
                    "not exist)."
                )
                return 403, error_body(403, message, "forbidden")
        return super().refusal(call)

    def _permissions(self, call: Call, bucket: str, name: str, listing: bool) -> list[str]:
        if listing or call.method == "GET":
            return ["storage.objects.list" if listing else "storage.objects.get"]
        if call.method == "DELETE":
            return ["storage.objects.delete"]
        if call.method == "PATCH":
            return ["storage.objects.update"]
        creating = call.query.get("ifGenerationMatch") == ["0"]
        exists = not creating and self.generation(bucket, name) != 0
        return ["storage.objects.create", *(["storage.objects.delete"] if exists else [])]

    def _allowed(
        self, member: str, boundary: dict[str, Any] | None, bucket: str, permission: str, attributes: dict[str, Any]
    ) -> bool:
        granted = any(
            g.bucket == bucket
            and g.member == member
            and permission in ROLE_PERMISSIONS.get(g.role, ())
            and holds(g.expression, attributes)
            for g in self.grants
        )
        if not granted or boundary is None:
            return granted
        return any(
            rule["availableResource"] == f"//storage.googleapis.com/projects/_/buckets/{bucket}"
            and any(
                permission in ROLE_PERMISSIONS.get(p.removeprefix("inRole:"), ()) for p in rule["availablePermissions"]
            )
            and holds(rule.get("availabilityCondition", {}).get("expression"), attributes)
            for rule in boundary["accessBoundaryRules"]
        )
