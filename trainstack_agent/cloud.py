"""HTTP for every cloud call the agent makes: urllib, bounded in time, size and retries.

Only a 404 means "there is no such thing". Any other failure (a refused connection, a
timeout, 429 or a 5xx) is retried with back-off, a bounded number of times, and then raised
as :class:`Unavailable`: a caller that cannot tell absent from unreachable fails closed.
Credentials travel in request headers built in this process; no URL, message or argv ever
holds a token, and no redirect is followed (urllib would send the request's headers, the
token among them, to whatever host the answer names): a redirect is refused as an error.
"""

from __future__ import annotations

import hashlib
import http.client
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# Answers retried: request timeout, too many requests, and the server errors that Google's
# APIs ask clients to retry (https://cloud.google.com/storage/docs/retry-strategy).
RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
CHUNK_BYTES = 1 << 20


class CloudError(Exception):
    """A call that failed for good; the message names the call (method and URL, no token)."""


class NotFound(CloudError):
    """The server answered 404: no such object, attribute or instance."""


class PreconditionFailed(CloudError):
    """The server answered 412: the object's generation is not the one the request required
    (``ifGenerationMatch=0``: the object exists already)."""


class Redirected(CloudError):
    """The server answered with a redirect, which the agent never follows."""


class Unavailable(CloudError):
    """No usable answer after every retry: the service is unreachable or failing."""


class TooLarge(CloudError):
    """The answer is larger than the caller's bound."""


@dataclass(frozen=True)
class Retry:
    """Attempts and the waits between them: ``first_delay`` doubling up to ``max_delay``."""

    attempts: int = 6
    first_delay: float = 0.5
    max_delay: float = 8.0

    def delays(self) -> list[float]:
        """The waits before the 2nd, 3rd ... attempt."""
        waits, delay = [], self.first_delay
        for _ in range(self.attempts - 1):
            waits.append(delay)
            delay = min(self.max_delay, delay * 2)
        return waits


REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: the answer stays an HTTP error (see :meth:`Http._send`)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: object,
        code: int,
        msg: str,
        headers: object,
        newurl: str,
    ) -> None:
        return None


# One try: for calls that must answer at once or not at all (is this VM being preempted?).
NO_RETRY = Retry(attempts=1)


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None = None

    def __post_init__(self) -> None:
        # urllib's opener also reads file: and ftp: URLs; the agent speaks HTTP(S) only.
        if urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError(f"not an http(s) URL: {self.url[:100]!r}")


def _describe(request: Request) -> str:
    # The query string may hold object names but never credentials; it is kept short anyway.
    return f"{request.method} {request.url[:300]}"


class Http:
    """Sends requests with a per-attempt timeout and :class:`Retry`; ``sleep`` is injectable
    so tests count retries without waiting."""

    def __init__(self, timeout: float = 30.0, retry: Retry = Retry(), sleep: Callable[[float], None] = time.sleep):
        self.timeout = timeout
        self.retry = retry
        self.sleep = sleep
        # No proxy: the metadata server and Google's APIs are reached directly from a VM, and
        # a local run's stand-ins are on loopback, which a user's proxy settings must not divert.
        # No redirect either: urllib's own handler would carry the Authorization header to
        # any host a redirect names.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects())

    def call(
        self,
        request: Request,
        max_bytes: int,
        retry: Retry | None = None,
        timeout: float | None = None,
    ) -> bytes:
        """The response body, at most ``max_bytes`` (TooLarge past it)."""
        result: list[bytes] = []

        def read(response: BinaryIO) -> None:
            data = response.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise TooLarge(f"{_describe(request)}: answer larger than {max_bytes} bytes")
            result.append(data)

        self._send(request, read, retry, timeout)
        return result[0]

    def download(self, request: Request, destination: Path, max_bytes: int, retry: Retry | None = None) -> str:
        """Streams the body into ``destination`` (replaced whole on each attempt); returns its
        sha256 in hex."""
        digest: list[str] = []

        def save(response: BinaryIO) -> None:
            sha, size = hashlib.sha256(), 0
            with destination.open("wb") as handle:
                while chunk := response.read(CHUNK_BYTES):
                    size += len(chunk)
                    if size > max_bytes:
                        raise TooLarge(f"{_describe(request)}: object larger than {max_bytes} bytes")
                    sha.update(chunk)
                    handle.write(chunk)
            digest.append(sha.hexdigest())

        self._send(request, save, retry, None)
        return digest[0]

    def _send(
        self,
        request: Request,
        consume: Callable[[BinaryIO], None],
        retry: Retry | None,
        timeout: float | None,
    ) -> None:
        policy = retry or self.retry
        delays = policy.delays()
        last = ""
        for attempt in range(policy.attempts):
            outgoing = urllib.request.Request(  # noqa: S310 - Request admits http(s) only
                request.url, data=request.body, headers=dict(request.headers), method=request.method
            )
            try:
                with self._opener.open(outgoing, timeout=timeout or self.timeout) as response:
                    consume(response)
                    return
            except urllib.error.HTTPError as error:
                error.close()
                if error.code == 404:
                    raise NotFound(f"{_describe(request)}: not found") from None
                if error.code == 412:
                    raise PreconditionFailed(f"{_describe(request)}: precondition failed") from None
                if error.code in REDIRECT_STATUSES:
                    raise Redirected(
                        f"{_describe(request)}: HTTP {error.code} redirect refused (the agent sends its requests "
                        "to no host but the one it called)"
                    ) from None
                if error.code not in RETRIED_STATUSES:
                    raise CloudError(f"{_describe(request)}: HTTP {error.code} {error.reason}") from None
                last = f"HTTP {error.code} {error.reason}"
            except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as error:
                last = f"{type(error).__name__}: {getattr(error, 'reason', error)}"
            if attempt < len(delays):
                self.sleep(delays[attempt])
        raise Unavailable(f"{_describe(request)}: no answer after {policy.attempts} attempts ({last})")
