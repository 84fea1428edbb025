"""A real Prometheus for tests: write OpenMetrics, backfill it with promtool, run
the Debian ``prometheus`` binary on a free loopback port; plus a small stdlib
HTTP stub that can sit in front of it to inject failures.

Helpers only; the pytest fixtures are in conftest_telemetry.py.
"""

from __future__ import annotations

import http.server
import math
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

Labels = Mapping[str, str]
Samples = Iterable[tuple[float, float]]


@dataclass
class Family:
    """One metric family: its name and its series (labels, (timestamp s, value)...)."""

    name: str
    series: Iterable[tuple[Labels, Samples]]
    type: str = "gauge"


def tools_available() -> bool:
    return shutil.which("promtool") is not None and shutil.which("prometheus") is not None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _timestamp(ts: float) -> str:
    return str(int(ts)) if float(ts).is_integer() else repr(float(ts))


def write_openmetrics(path: Path, families: Iterable[Family]) -> int:
    """Write OpenMetrics text: each family's TYPE line then its series, each
    series' samples in time order, ``# EOF`` last. Returns the sample count."""
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for family in families:
            out.write(f"# TYPE {family.name} {family.type}\n")
            for labels, samples in family.series:
                inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
                head = f"{family.name}{{{inner}}} " if inner else f"{family.name} "
                lines = [f"{head}{_number(v)} {_timestamp(ts)}\n" for ts, v in sorted(samples, key=lambda s: s[0])]
                out.writelines(lines)
                count += len(lines)
        out.write("# EOF\n")
    return count


def backfill(openmetrics: Path, data_dir: Path) -> None:
    """``promtool tsdb create-blocks-from openmetrics``; raises with promtool's
    output on failure."""
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            "promtool",
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--max-block-duration=24h",
            str(openmetrics),
            str(data_dir),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"promtool failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrometheusProcess:
    """``prometheus`` serving an existing TSDB directory on 127.0.0.1."""

    def __init__(self, data_dir: Path, workdir: Path):
        self.data_dir = data_dir
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"prometheus-{self.port}.log"

    def start(self, timeout: float = 60.0) -> str:
        config = self.workdir / "prometheus.yml"
        # No scrape jobs: the server only serves what was backfilled.
        config.write_text("global:\n  scrape_interval: 1h\n", encoding="utf-8")
        log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={self.data_dir}",
                # backfilled samples are days old; the default 15d would still
                # delete a long trace's first blocks, 10y never does
                "--storage.tsdb.retention.time=10y",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return self.url
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


# --- a stub HTTP server ------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    headers: Message  # case-insensitive, as HTTP header names are
    body: bytes
    query: str  # the PromQL text (from the form body or the URL), "" when none


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    delay: float = 0.0
    content_type: str = "application/json"


# Handler: return a Reply, or None to forward the request to the upstream URL.
Handler = Callable[[Request], "Reply | None"]


class StubServer:
    """A threaded HTTP server on 127.0.0.1 that answers with ``handler`` and
    forwards to ``upstream`` whatever the handler returns None for. Records
    every request in ``requests``."""

    def __init__(self, handler: Handler, upstream: str | None = None):
        self.handler = handler
        self.upstream = upstream.rstrip("/") if upstream else None
        self.requests: list[Request] = []
        stub = self

        class _Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet test output
                pass

            def do_GET(self) -> None:
                stub._serve(self, "GET")

            def do_POST(self) -> None:
                stub._serve(self, "POST")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        # server_close() waits for the handlers, which a delayed reply lets go
        # at once (``_closing``): no request thread outlives its test, where it
        # would keep a later audit from forking its shard workers.
        self.server.block_on_close = True
        self._closing = threading.Event()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()

    def _serve(self, http_handler: http.server.BaseHTTPRequestHandler, method: str) -> None:
        from urllib.parse import parse_qs, urlsplit

        length = int(http_handler.headers.get("Content-Length") or 0)
        body = http_handler.rfile.read(length) if length else b""
        split = urlsplit(http_handler.path)
        form = parse_qs(body.decode() if method == "POST" else split.query)
        request = Request(method, split.path, http_handler.headers, body, (form.get("query") or [""])[0])
        self.requests.append(request)
        reply = self.handler(request)
        if reply is None:
            reply = self._forward(method, http_handler.path, request)
        if reply.delay and self._closing.wait(reply.delay):
            return  # the test is over: no one waits for this reply
        try:
            http_handler.send_response(reply.status)
            http_handler.send_header("Content-Type", reply.content_type)
            http_handler.send_header("Content-Length", str(len(reply.body)))
            http_handler.end_headers()
            http_handler.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass

    def _forward(self, method: str, path: str, request: Request) -> Reply:
        if self.upstream is None:
            return Reply(404, b'{"status":"error","error":"no upstream"}')
        headers = {"Content-Type": request.headers.get("Content-Type", "application/x-www-form-urlencoded")}
        forwarded = urllib.request.Request(
            self.upstream + path, method=method, headers=headers, data=request.body if method == "POST" else None
        )
        try:
            with urllib.request.urlopen(forwarded, timeout=60) as resp:
                return Reply(resp.status, resp.read())
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, exc.read())
