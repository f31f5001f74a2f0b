"""Objects in the stack's bucket: read, written and downloaded by URI.

``gs://BUCKET/NAME`` goes to Cloud Storage's JSON API (download with ``alt=media``, a
multipart upload with the object's metadata and bytes in one request, as Google's client
libraries send small objects: https://cloud.google.com/storage/docs/uploading-objects),
authorized by the VM's token in a header. A plain path is a file: ``trainstack local`` stands a directory in for
the bucket. Both bound what they read.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.parse
from pathlib import Path

from trainstack_agent.cloud import CloudError, Http, NotFound, PreconditionFailed, Request, TooLarge
from trainstack_agent.metadata import Metadata

GS = "gs://"


def split_gs(uri: str) -> tuple[str, str]:
    bucket, _, name = uri[len(GS) :].partition("/")
    return bucket, name


class Storage:
    """The bucket's objects, whichever stands for the bucket."""

    def __init__(self, http: Http, metadata: Metadata, api_root: str) -> None:
        self.http = http
        self.metadata = metadata
        self.api_root = api_root.rstrip("/")

    def _object_url(self, uri: str, media: bool) -> str:
        bucket, name = split_gs(uri)
        quoted = urllib.parse.quote(name, safe="")
        return f"{self.api_root}/storage/v1/b/{bucket}/o/{quoted}" + ("?alt=media" if media else "")

    def read(self, uri: str, max_bytes: int) -> bytes | None:
        """The object's bytes, or None when there is no such object."""
        if uri.startswith(GS):
            try:
                return self.http.call(
                    Request("GET", self._object_url(uri, media=True), self.metadata.authorization()), max_bytes
                )
            except NotFound:
                return None
        path = Path(uri)
        try:
            with path.open("rb") as handle:
                data = handle.read(max_bytes + 1)
        except FileNotFoundError:
            return None
        if len(data) > max_bytes:
            raise TooLarge(f"{uri} is larger than {max_bytes} bytes")
        return data

    def write(self, uri: str, data: bytes, content_type: str = "application/json") -> None:
        """Replaces the object whole (a reader never sees half of it)."""
        if uri.startswith(GS):
            self._upload(uri, data, content_type)
            return
        path = Path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, path)

    def create(self, uri: str, data: bytes) -> bool:
        """Writes the object only if there is none (``ifGenerationMatch=0``): True when this call
        created it, False when it existed. A retried upload whose first attempt landed also
        answers False; a caller tells the two apart by what the object holds."""
        if uri.startswith(GS):
            try:
                self._upload(uri, data, "application/json", if_generation_match=0)
            except PreconditionFailed:
                return False
            return True
        path = Path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_bytes(data)
        try:
            # A hard link fails if the name exists: whole, and at most one creator wins.
            os.link(temporary, path)
        except FileExistsError:
            return False
        finally:
            temporary.unlink()
        return True

    def _upload(self, uri: str, data: bytes, content_type: str, if_generation_match: int | None = None) -> None:
        """A multipart upload: the object's metadata and bytes in one request, under Cloud
        Storage's generation precondition when ``if_generation_match`` is given."""
        bucket, name = split_gs(uri)
        boundary = f"trainstack-{os.urandom(12).hex()}"
        description = json.dumps({"name": name, "contentType": content_type})
        body = (
            (
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{description}\r\n"
                f"--{boundary}\r\nContent-Type: {content_type}\r\n\r\n"
            ).encode()
            + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        headers = {**self.metadata.authorization(), "Content-Type": f"multipart/related; boundary={boundary}"}
        url = f"{self.api_root}/upload/storage/v1/b/{bucket}/o?uploadType=multipart"
        if if_generation_match is not None:
            url += f"&ifGenerationMatch={if_generation_match}"
        self.http.call(Request("POST", url, headers, body), 1 << 20)

    def download(self, uri: str, destination: Path, max_bytes: int) -> str:
        """Copies the object to ``destination``; returns the sha256 of what was written."""
        destination.parent.mkdir(parents=True, exist_ok=True)
        if uri.startswith(GS):
            try:
                return self.http.download(
                    Request("GET", self._object_url(uri, media=True), self.metadata.authorization()),
                    destination,
                    max_bytes,
                )
            except NotFound:
                raise CloudError(f"{uri} does not exist") from None
        source = Path(uri)
        if not source.is_file():
            raise CloudError(f"{uri} does not exist")
        if source.stat().st_size > max_bytes:
            raise TooLarge(f"{uri} is larger than {max_bytes} bytes")
        sha = hashlib.sha256()
        with source.open("rb") as reader, destination.open("wb") as writer:
            while chunk := reader.read(1 << 20):
                sha.update(chunk)
                writer.write(chunk)
        return sha.hexdigest()
