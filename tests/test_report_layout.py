"""The review's page in headless Chromium, measured in the DOM (over the
DevTools protocol: the page itself runs no script): no horizontal overflow
at 390, 900 and 1,400 px, no first column squeezed to a character per line,
the money column of the actions and the showback on screen at 390 px, and a
printed PDF of at most twelve pages whose first page carries the decision --
for the demo and for a generated cluster of over 5,000 GPUs (bench/
gen_cluster.py, telemetry on part of it), whose tables are bounded.

With GPUAUDIT_ARTIFACTS set, screenshots at 390 and 1,400 px go to out/."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
websocket = pytest.importorskip("websocket")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
# Letter at the page's 12 mm margins, in CSS pixels
PRINT_WIDTH, PRINT_HEIGHT = 725, 965


class Browser:
    def __init__(self, port: int, profile: Path) -> None:
        self.process = subprocess.Popen(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--remote-debugging-port={port}",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as reply:
                    tabs = json.load(reply)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        tab = next(t for t in tabs if t["type"] == "page")
        self.ws = websocket.create_connection(tab["webSocketDebuggerUrl"], timeout=60)
        self.counter = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.counter += 1
        self.ws.send(json.dumps({"id": self.counter, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.counter:
                assert "error" not in message, message
                return message.get("result") or {}

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"]["value"]

    def open(self, page: Path, width: int, *, media: str = "") -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False)
        self.call("Emulation.setEmulatedMedia", media=media)
        self.call("Page.enable")
        self.call("Page.navigate", url=page.resolve().as_uri())
        deadline = time.monotonic() + 30
        while self.evaluate("document.readyState") != "complete":
            assert time.monotonic() < deadline
            time.sleep(0.1)

    def close(self) -> None:
        self.ws.close()
        self.process.kill()
        self.process.wait()


def _review(snapshot: Path, out: Path) -> Path:
    exe = shutil.which("gpuaudit") or str(Path(ROOT / ".venv" / "bin" / "gpuaudit"))
    proc = subprocess.run(
        [exe, "report", "--snapshot", str(snapshot), "--gpu-hour-price", "2.5", "--out", str(out), "--no-record"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return out / "report.html"


def _large_snapshot(folder: Path) -> Path:
    """2,400 generated nodes (6,516 GPUs, 18,000 pods): telemetry for the
    pods on three nodes in five, so teams, workloads and actions number in
    the hundreds."""
    sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "scripts")]
    try:
        import bench_report

        from gpuaudit.sources.snapshot import write_snapshot

        snapshot = bench_report._snapshot(
            bench_report.argparse.Namespace(snapshot=None, nodes=2400, pods=18_000, seed=1)
        )
        bench_report.add_telemetry(snapshot, 1)
    finally:
        del sys.path[:2]
    kept = {n["metadata"]["name"] for i, n in enumerate(snapshot["objects"]["nodes"]) if i % 5 < 3}
    telemetry = snapshot["telemetry"]
    telemetry["gpus"] = [r for r in telemetry["gpus"] if r["node"] in kept]
    telemetry["pods"] = [r for r in telemetry["pods"] if r["node"] in kept]
    path = folder / "large.json.gz"
    write_snapshot(snapshot, path)
    return path


@pytest.fixture(scope="module", params=["demo", "large"])
def page(request, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp(f"layout-{request.param}")
    snapshot = DEMO if request.param == "demo" else _large_snapshot(folder)
    return _review(snapshot, folder / "out")


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[Browser]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    chrome = Browser(port, tmp_path_factory.mktemp("profile"))
    yield chrome
    chrome.close()


@pytest.mark.parametrize("width", [390, 900, 1400])
def test_no_horizontal_overflow(browser: Browser, page: Path, width: int) -> None:
    browser.open(page, width)
    scroll, client = browser.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert scroll <= client, f"{scroll} px of content in a {client} px window"
    # no text column (names, actions) is squeezed to a few characters per line
    squeezed = browser.evaluate(
        "[...document.querySelectorAll('td:not(.n), th:not(.n)')]"
        ".filter(e => e.textContent.trim().length > 6 && e.getBoundingClientRect().width < 64)"
        ".map(e => e.textContent.trim().slice(0, 30))"
    )
    assert squeezed == []
    # the root causes' workloads keep several words on a line
    narrow = browser.evaluate(
        "[...document.querySelectorAll('td.top')].filter(e => e.getBoundingClientRect().width < 150).length"
    )
    assert narrow == 0


@pytest.mark.parametrize("width", [390, 1400])
def test_the_money_column_is_on_screen(browser: Browser, page: Path, width: int) -> None:
    browser.open(page, width)
    client = browser.evaluate("document.documentElement.clientWidth")
    for table in ("actions", "showback"):
        right = browser.evaluate(
            f"(() => {{ const th = [...document.querySelectorAll('#{table} th')]"
            ".find(e => e.textContent.includes('USD'));"
            " return th ? th.getBoundingClientRect().right : null; })()"
        )
        assert right is not None and right <= client, f"#{table}: the USD column ends at {right} px of {client}"
    if os.environ.get("GPUAUDIT_ARTIFACTS"):
        shot = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
        artefacts = ROOT / "out"
        artefacts.mkdir(exist_ok=True)
        which = page.parent.parent.name.split("-")[1].rstrip("0123456789")  # layout-demo0 -> demo
        (artefacts / f"report-{which}-{width}px.png").write_bytes(shot)


def test_print_is_at_most_twelve_pages_and_the_first_carries_the_decision(browser: Browser, page: Path) -> None:
    browser.open(page, PRINT_WIDTH, media="print")
    first = browser.evaluate("document.getElementById('summary').getBoundingClientRect().height")
    assert first <= PRINT_HEIGHT, f"the first screen is {first:.0f} px in print: more than one page"
    inside = browser.evaluate(
        "!!document.querySelector('#summary #gate-verdict') && !!document.querySelector('#summary #actions')"
    )
    assert inside
    browser.open(page, 1400)
    pdf = base64.b64decode(browser.call("Page.printToPDF", printBackground=True, preferCSSPageSize=True)["data"])
    pages = len(re.findall(rb"/Type\s*/Page(?!s)", pdf))
    assert 1 <= pages <= 12, f"{pages} pages"
