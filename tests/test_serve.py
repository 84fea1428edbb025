"""`gpuaudit serve`, the report server's command, run as the container runs
it: /metrics with the OpenMetrics content type Prometheus 3 requires, the
reports read-only, nothing outside the folder."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_openmetrics import DEMO, promtool_check

OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def data(tmp_path: Path, run_cli) -> Path:
    """A data volume as the CronJobs leave it: reports/ with the last audit's
    metrics and a month's review, snapshots/ beside it (never served)."""
    reports = tmp_path / "data" / "reports"
    month = reports / "2026-11"
    month.mkdir(parents=True)
    proc = run_cli("audit", "--snapshot", str(DEMO), "-q", "--format", f"openmetrics={reports / 'metrics.txt'}")
    assert proc.returncode == 1, proc.stderr
    (month / "report.html").write_text("<h1>review</h1>")
    (month / "report.json").write_text("{}")
    snapshots = tmp_path / "data" / "snapshots"
    snapshots.mkdir()
    (snapshots / "x.json.gz").write_bytes(b"the cluster's objects")
    (reports / "leak").symlink_to(snapshots)  # a link that leads out of reports/
    (reports / "leak.json").symlink_to(snapshots / "x.json.gz")
    return tmp_path / "data"


@pytest.fixture
def server(data: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    exe = Path(sys.executable).with_name("gpuaudit")
    command = [str(exe), "serve", str(data / "reports"), "--port", str(port), "--bind", "127.0.0.1"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "gpuaudit serve did not start"
                time.sleep(0.2)
        yield "127.0.0.1", port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def ask(server: tuple[str, int], method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(*server, timeout=10)
    try:
        conn.request(method, path)  # sent as written: no client-side normalisation of ..
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_metrics_are_served_as_openmetrics(server, data):
    status, headers, body = ask(server, "GET", "/metrics")
    assert status == 200
    assert headers["content-type"] == OPENMETRICS
    assert body == (data / "reports" / "metrics.txt").read_bytes()
    promtool_check(body.decode())
    status, headers, body = ask(server, "HEAD", "/metrics")
    assert (status, body) == (200, b"")
    assert headers["content-type"] == OPENMETRICS
    assert int(headers["content-length"]) == (data / "reports" / "metrics.txt").stat().st_size
    assert headers["server"] == "gpuaudit"  # no Python version


def test_reports_are_served_and_listed(server):
    status, headers, body = ask(server, "GET", "/2026-11/report.html")
    assert (status, body) == (200, b"<h1>review</h1>")
    assert headers["content-type"] == "text/html; charset=utf-8"
    status, _, body = ask(server, "GET", "/")
    assert status == 200 and b'href="2026-11/"' in body and b'href="metrics.txt"' in body
    assert ask(server, "GET", "/2026-11")[1]["location"] == "/2026-11/"


@pytest.mark.parametrize(
    "path",
    [
        "/../snapshots/x.json.gz",
        "/%2e%2e/snapshots/x.json.gz",
        "/2026-11/..%2f..%2fsnapshots/x.json.gz",
        "/leak/x.json.gz",  # a link to a folder outside
        "/leak.json",  # a link to a file outside
        "/..%5csnapshots/x.json.gz",
        "/metrics.txt%00.html",
        "/missing.html",
    ],
)
def test_nothing_outside_the_folder_is_served(server, path):
    status, _, body = ask(server, "GET", path)
    assert status == 404, path
    assert b"the cluster's objects" not in body


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_only_get_and_head_are_answered(server, method):
    status, headers, _ = ask(server, method, "/metrics")
    assert status == 405 and headers["allow"] == "GET, HEAD"


def test_metrics_before_the_first_audit_are_not_found(tmp_path):
    (tmp_path / "reports").mkdir()
    port = free_port()
    exe = Path(sys.executable).with_name("gpuaudit")
    proc = subprocess.Popen(
        [str(exe), "serve", str(tmp_path / "reports"), "--port", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, _, _ = ask(("127.0.0.1", port), "GET", "/metrics")
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert status == 404
    finally:
        proc.terminate()
        proc.wait(timeout=10)
