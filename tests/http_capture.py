"""A local HTTP server that records each request and answers as a test
says: the webhook and Pushgateway tests' other end (the fixture ``capture``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class Capture:
    """A local HTTP server: each request recorded, answered by ``answer``."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler], None]):
        self.requests: list[dict[str, Any]] = []
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                capture.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": self.rfile.read(length),
                    }
                )
                answer(self)

            do_POST = do_PUT = do_GET = _any

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def reply(status: int, body: bytes = b"ok", headers: dict[str, str] | None = None) -> Callable[..., None]:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return answer


@pytest.fixture
def capture() -> Iterator[Callable[..., Capture]]:
    servers: list[Capture] = []

    def start(answer: Callable[..., None] | None = None) -> Capture:
        servers.append(Capture(answer or reply(200)))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
