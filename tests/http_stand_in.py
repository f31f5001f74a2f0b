"""A real HTTP server on loopback that answers each path from a script: the stand-in for the
metadata server and Google's APIs where a test needs their exact requests."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar


class Scripted(ThreadingHTTPServer):
    """Answers each path with the next (status, body) of its script, the last one for ever;
    records every request's method, path and headers."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[tuple[int, bytes]]] = {}
        self.requests: list[dict[str, Any]] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, path: str, *answers: tuple[int, bytes]) -> None:
        self.scripts[path] = list(answers)


class _Handler(BaseHTTPRequestHandler):
    server: Scripted

    def _serve(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests.append(
            {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
        )
        path = self.path.split("?")[0]
        script = self.server.scripts.get(path, [(404, b"")])
        status, data = script.pop(0) if len(script) > 1 else script[0]
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _serve  # noqa: N815 (http.server's naming)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


Server = TypeVar("Server", bound=socketserver.BaseServer)


@contextmanager
def serving(server: Server) -> Iterator[Server]:
    """``server`` answering from a thread of its own until the block ends, then closed."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def scripted_server() -> Iterator[Scripted]:
    with serving(Scripted()) as scripted:
        yield scripted
