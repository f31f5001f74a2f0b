"""Google's REST APIs (Compute Engine, Cloud TPU, Cloud Billing Catalog) through their discovery
documents, with every failure turned into one line that says what to do.

google-api-python-client ships the discovery document of each API it knows, so a client is
built offline from the same published schema the tests build their response documents from
(tests/googleapi_fakes.py); the only network traffic is the calls themselves. ``http`` is
injectable: the tests hand in the library's own HttpMockSequence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from trainstack.base.errors import one_line

# How long one request may take before it counts as unreachable (httplib2's timeout, seconds).
REQUEST_TIMEOUT_SECONDS = 60
# Google's messages can be long; a line quotes at most this much of one.
MAX_MESSAGE_CHARS = 300
# A listing stops after this many pages: a response that keeps naming a next page (a broken
# proxy, a hostile endpoint) must not keep the command running for ever.
MAX_PAGES = 200
CREDENTIALS_HINT = "run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)"
READ_ONLY_SCOPE = "https://www.googleapis.com/auth/cloud-platform.read-only"


# What Google answers when a VPC Service Controls perimeter refuses a request, whatever the
# caller's IAM roles: a 403 "Request is prohibited by organization's policy.
# vpcServiceControlsUniqueIdentifier: ID" whose ErrorInfo reason is SECURITY_POLICY_VIOLATED
# (Cloud Storage's JSON API gives errors[].reason vpcServiceControls instead).
PERIMETER_VIOLATION = re.compile(r"vpcServiceControlsUniqueIdentifier:\s*(?P<id>[A-Za-z0-9_-]{1,200})")
PERIMETER_REASONS = frozenset({"SECURITY_POLICY_VIOLATED", "vpcServiceControls"})
PERIMETER_DOCS = "docs/deploying.md#vpc-service-controls"


def perimeter_refusal(message: str, reasons: Iterable[str] = ()) -> str | None:
    """What to say when a VPC Service Controls perimeter refused the request (None: it did not)."""
    found = PERIMETER_VIOLATION.search(message)
    if found is None and not PERIMETER_REASONS & set(reasons):
        return None
    violation = f" (violation {found['id']}: the perimeter's audit log names it)" if found else ""
    return (
        f"refused by a VPC Service Controls perimeter{violation}, not for want of an IAM role: run it from inside "
        f"the perimeter, or have its admins admit you with an ingress rule ({PERIMETER_DOCS})"
    )


class GoogleApiError(Exception):
    """A call to a Google API failed for a reason outside this program; ``str()`` is one line."""


def build_service(api: str, version: str, http: Any = None) -> Any:
    """A client for ``api`` (``compute``, ``tpu``, ``cloudbilling``) built from the discovery
    document shipped with google-api-python-client, authorised with the user's application
    default credentials (read-only scope) unless ``http`` is given."""
    from googleapiclient import discovery

    if http is None:
        http = _authorised_http()
    return discovery.build(api, version, http=http, static_discovery=True, cache_discovery=False)


def _authorised_http() -> Any:
    import google.auth
    import google_auth_httplib2
    import httplib2
    from google.auth import exceptions as auth

    try:
        credentials, _ = google.auth.default(scopes=[READ_ONLY_SCOPE])
    except auth.DefaultCredentialsError as error:
        raise GoogleApiError(f"no Google Cloud credentials found: {CREDENTIALS_HINT}") from error
    return google_auth_httplib2.AuthorizedHttp(credentials, http=httplib2.Http(timeout=REQUEST_TIMEOUT_SECONDS))


def execute(request: Any, what: str, project: str | None = None) -> dict[str, Any]:
    """Run one request; any failure becomes a GoogleApiError whose line names ``what`` was asked."""
    from google.auth import exceptions as auth
    from googleapiclient import errors

    try:
        response = request.execute(num_retries=2)
    except errors.HttpError as error:
        raise GoogleApiError(f"{what}: {http_error_line(error, project)}") from error
    except auth.GoogleAuthError as error:
        raise GoogleApiError(
            f"{what}: Google Cloud credentials refused ({_first_line(error)}); {CREDENTIALS_HINT}"
        ) from error
    except (OSError, errors.Error) as error:
        # httplib2's connection errors are OSErrors; the library's own (a response that is not
        # JSON, a malformed page token) derive from errors.Error.
        raise GoogleApiError(f"{what}: no usable answer from Google Cloud ({_first_line(error)})") from error
    if not isinstance(response, dict):
        raise GoogleApiError(f"{what}: the answer was not a JSON object")
    return response


def pages(
    request: Any, next_method: Callable[[Any, Any], Any], what: str, project: str | None = None
) -> Iterator[dict[str, Any]]:
    """Every page of a listing from its first request (``service.x().list(...)``) and
    ``service.x().list_next``, at most MAX_PAGES."""
    for _ in range(MAX_PAGES):
        if request is None:
            return
        response = execute(request, what, project)
        yield response
        request = next_method(request, response)
    raise GoogleApiError(f"{what}: more than {MAX_PAGES} pages; the answer looks endless")


def http_error_line(error: Any, project: str | None = None) -> str:
    """What an HttpError means and what to do about it, in one line."""
    status = int(getattr(getattr(error, "resp", None), "status", 0) or 0)
    body = _error_body(getattr(error, "content", b""))
    message = _first_line_of(str(body.get("message") or getattr(error, "reason", "") or f"HTTP {status}"))
    reasons = {str(e.get("reason")) for e in body.get("errors", []) if isinstance(e, Mapping)}
    info = [
        d for d in body.get("details", []) if isinstance(d, Mapping) and str(d.get("@type", "")).endswith("ErrorInfo")
    ]
    info_reasons = {str(d.get("reason")) for d in info}
    where = f" --project {project}" if project else ""
    if "SERVICE_DISABLED" in info_reasons or "accessNotConfigured" in reasons:
        metadata = info[0].get("metadata", {}) if info else {}
        service = str(metadata.get("service", "")) if isinstance(metadata, Mapping) else ""
        enable = f"gcloud services enable {service}{where}" if service else "enable it in the console (APIs & Services)"
        return f"the API is disabled in the project: {enable} ({message})"
    if status == 401:
        return f"Google Cloud credentials refused ({message}); {CREDENTIALS_HINT}"
    if status == 403 and ("rateLimitExceeded" in reasons or "RATE_LIMIT_EXCEEDED" in info_reasons):
        return f"rate limited; try again in a minute ({message})"
    refusal = perimeter_refusal(message, reasons | info_reasons) if status == 403 else None
    if refusal is not None:
        return refusal
    if status == 403:
        return f"permission denied ({message})"
    if status == 404:
        return f"not found ({message})"
    if status == 429:
        return f"rate limited; try again in a minute ({message})"
    return f"HTTP {status}: {message}"


def _error_body(content: Any) -> dict[str, Any]:
    try:
        text = content.decode("utf-8", "replace") if isinstance(content, bytes) else str(content)
        data = json.loads(text)
    except ValueError:
        return {}
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else {}


def _first_line(error: BaseException) -> str:
    return _first_line_of(str(error) or type(error).__name__)


def _first_line_of(text: str) -> str:
    lines = text.strip().splitlines()
    return one_line(lines[0])[:MAX_MESSAGE_CHARS] if lines else ""


def api_reasons(error: Any) -> set[str]:
    """The reasons a google.api_core error carries: its ErrorInfo's and its errors[] entries'."""
    reasons = {str(error.reason)} if getattr(error, "reason", None) else set()
    for entry in getattr(error, "errors", None) or []:
        if isinstance(entry, Mapping) and entry.get("reason"):
            reasons.add(str(entry["reason"]))
    return reasons
