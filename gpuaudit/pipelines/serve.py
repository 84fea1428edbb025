"""`gpuaudit serve`: the reports folder over HTTP, read-only, and the last
run's metrics at /metrics (the in-cluster report server,
deploy/components/report-server).

Python's http.server would serve the folder too, but it answers /metrics
with no content type Prometheus 3 accepts, and it serves whatever a link in
the folder leads to. This one:

- answers GET and HEAD only (405 otherwise);
- serves ``metrics.txt`` (written atomically by the audit CronJob) at
  ``/metrics`` as ``application/openmetrics-text; version=1.0.0``;
- serves only regular files whose real path lies inside the folder: ``..``,
  a link leading out, a device or a FIFO are 404, as is anything missing;
- lists a folder (names escaped), as http.server did, for the months;
- says nothing about itself (no Python version in ``Server:``) and logs
  each request with the client's text cleaned of control characters.
"""

from __future__ import annotations

import html
import os
import shutil
import stat
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from gpuaudit.files import FileReadError, confined, open_regular
from gpuaudit.safetext import one_line

METRICS_PATH = "/metrics"
METRICS_FILE = "metrics.txt"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# What a report folder holds; anything else is served as bytes to download.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".css": "text/css; charset=utf-8",
}
# A report's files are a few MB; this keeps one odd file from being streamed forever.
MAX_FILE_BYTES = 512 * 2**20


class ReportHandler(BaseHTTPRequestHandler):
    root: Path  # set on the subclass server() makes

    def version_string(self) -> str:
        return "gpuaudit"

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _refuse(self) -> None:
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.address_string()} {one_line(format % args)}\n")

    def _answer(self, *, body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        if path == METRICS_PATH:
            self._file(self.root / METRICS_FILE, OPENMETRICS, body=body)
            return
        target = self._inside(path)
        if target is None:
            self._not_found(body)
        elif target.is_dir():
            if not path.endswith("/"):  # relative links in the listing need the slash
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", quote(path + "/"))
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self._listing(target, path, body=body)
        else:
            kind = CONTENT_TYPES.get(target.suffix.lower(), "application/octet-stream")
            self._file(target, kind, body=body)

    def _inside(self, path: str) -> Path | None:
        """The file or folder ``path`` names, when its real path is inside the
        root; None for anything else (``..``, a link out, a NUL byte)."""
        parts = [p for p in path.split("/") if p]
        if any(p in (".", "..") or "\\" in p or "\0" in p for p in parts):
            return None
        try:
            target = confined(self.root.joinpath(*parts), (self.root,), what="file")
        except FileReadError:
            return None
        try:
            mode = os.stat(target).st_mode
        except OSError:
            return None
        return target if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else None

    def _not_found(self, body: bool) -> None:
        text = b"not found\n"
        self.send_response(HTTPStatus.NOT_FOUND)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        if body:
            self.wfile.write(text)

    def _file(self, path: Path, content_type: str, *, body: bool) -> None:
        try:
            with open_regular(path, limit=MAX_FILE_BYTES) as handle:
                size = os.fstat(handle.fileno()).st_size
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(size))
                self.send_header("X-Content-Type-Options", "nosniff")
                self.end_headers()
                if body:
                    shutil.copyfileobj(handle, self.wfile)
        except FileReadError:
            self._not_found(body)

    def _listing(self, folder: Path, path: str, *, body: bool) -> None:
        names = []
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.name.startswith("."):  # atomic writes' temporary files
                continue
            shown = entry.name + ("/" if entry.is_dir() else "")
            names.append(f'<li><a href="{html.escape(quote(shown))}">{html.escape(one_line(shown))}</a></li>')
        title = html.escape(one_line(path))
        page = (
            f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>'
            f"<body><h1>{title}</h1><ul>{''.join(names)}</ul></body></html>\n"
        ).encode()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if body:
            self.wfile.write(page)


def server(root: Path, host: str, port: int) -> ThreadingHTTPServer:
    """A server for ``root`` (resolved once) on ``host:port``, not yet serving."""
    handler = type("Handler", (ReportHandler,), {"root": Path(os.path.realpath(root))})
    httpd = ThreadingHTTPServer((host, port), handler)
    httpd.daemon_threads = True
    return httpd
