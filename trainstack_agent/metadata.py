"""The metadata server: instance and project attributes, instance facts and the VM's token.

An attribute that the server answers 404 for is absent (``None``); any other failure is
retried and then raised (:class:`~trainstack_agent.cloud.Unavailable`): a node must never
take "unreachable" for "not set" (a job once ran without its secret, and a worker once
started its trainer with no TF_CONFIG, when a 503 was read as absent).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from trainstack_agent.cloud import NO_RETRY, CloudError, Http, NotFound, Request, Retry

# A metadata value is at most 256 KiB (Compute Engine's limit per value).
MAX_VALUE_BYTES = 256 * 1024
# A VM being preempted has about 30 s before it stops; the question gets 2 s.
PREEMPTED_TIMEOUT_SECONDS = 2.0
# A token is taken again this long before it expires.
TOKEN_MARGIN_SECONDS = 60.0


class MetadataError(CloudError):
    """A metadata value is missing or not what it must be; the message names the key."""


class Metadata:
    """One VM's view of the metadata server at ``root`` (``.../computeMetadata/v1``)."""

    def __init__(self, http: Http, root: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.http = http
        self.root = root.rstrip("/")
        self.clock = clock
        self._token: tuple[str, float] | None = None

    def _request(self, path: str) -> Request:
        # The server refuses requests without this header (and so does the local stand-in).
        return Request("GET", f"{self.root}/{path}", {"Metadata-Flavor": "Google"})

    def get(self, path: str, retry: Retry | None = None, timeout: float | None = None) -> str | None:
        """The value at ``path``, or None when the server says there is none (404 alone)."""
        try:
            data = self.http.call(self._request(path), MAX_VALUE_BYTES, retry=retry, timeout=timeout)
        except NotFound:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise MetadataError(f"metadata {path} is not UTF-8 text") from None

    def require(self, path: str) -> str:
        value = self.get(path)
        if not value:
            raise MetadataError(f"metadata {path} is missing")
        return value

    def attribute(self, key: str) -> str | None:
        """An instance attribute (``instance/attributes/KEY``)."""
        return self.get(f"instance/attributes/{key}")

    def project_attribute(self, key: str) -> str | None:
        return self.get(f"project/attributes/{key}")

    def preempted(self) -> bool:
        """True when Compute Engine is reclaiming this Spot VM; asked once, within 2 s, and
        False when there is no answer in that time."""
        try:
            return self.get("instance/preempted", retry=NO_RETRY, timeout=PREEMPTED_TIMEOUT_SECONDS) == "TRUE"
        except CloudError:
            return False

    def token(self) -> str:
        """The VM's OAuth access token, reused until shortly before it expires. It goes into
        request headers only."""
        now = self.clock()
        if self._token is not None and now < self._token[1]:
            return self._token[0]
        text = self.require("instance/service-accounts/default/token")
        try:
            document = json.loads(text)
            token = document["access_token"]
            expires_in = float(document.get("expires_in", 0))
        except (ValueError, KeyError, TypeError):
            raise MetadataError("the metadata server's token answer is not a token") from None
        if not isinstance(token, str) or not token:
            raise MetadataError("the metadata server's token answer is not a token")
        self._token = (token, now + max(0.0, expires_in - TOKEN_MARGIN_SECONDS))
        return token

    def authorization(self) -> dict[str, str]:
        """The header that authorizes a Google API call as this VM's account."""
        return {"Authorization": f"Bearer {self.token()}"}
