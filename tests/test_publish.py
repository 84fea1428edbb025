"""What a run sends out: its metrics to a real Pushgateway (Debian's
prometheus-pushgateway), its message to a webhook (a local HTTP server that
captures each request). The webhook's URL is a secret: it is never in a
payload, an error or the output. No redirect is followed, no answer waits
past the deadline, no answer is read past its bound."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuaudit.output import webhook
from gpuaudit.webclient import SendFailed, send, shown_url
from tests.http_capture import reply

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"
SECRET = "T0AAAA/B0BBBB/s3cr3t-t0ken"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    found = shutil.which("prometheus-pushgateway")
    if found is None:
        pytest.skip("prometheus-pushgateway not installed (scripts/test.sh installs Debian's)")
    port = free_port()
    log = (tmp_path_factory.mktemp("pushgateway") / "log").open("w")
    proc = subprocess.Popen([found, f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=2).read()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the Pushgateway did not start"
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def pushed(url: str) -> dict[str, list]:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    return {f.name: list(f.samples) for f in text_string_to_metric_families(text)}


# --- the Pushgateway ------------------------------------------------------------------------


def test_audit_and_report_push_their_metrics_to_a_real_pushgateway(run_cli, tmp_path, pushgateway):
    proc = run_cli(
        "audit", "--snapshot", str(DEMO), "-q", "--format", f"json={tmp_path / 'a.json'}",
        env={"GPUAUDIT_PUSHGATEWAY_URL": pushgateway},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # the demo's findings, nothing about the push
    findings = json.loads((tmp_path / "a.json").read_text())["findings"]
    families = pushed(pushgateway)
    audit = [s for s in families["gpuaudit_findings"] if s.labels.get("command") == "audit"]
    assert {s.labels["job"] for s in audit} == {"gpuaudit"}
    assert sum(s.value for s in audit) == len(findings)
    assert any(s.labels.get("state") == "resident_idle" for s in families["gpuaudit_gpus"])

    # the report's push is a group of its own: it does not replace the audit's
    proc = run_cli("report", "--snapshot", str(DEMO), "--out", str(tmp_path / "r"), "--pushgateway", pushgateway)
    assert proc.returncode == 0, proc.stderr
    families = pushed(pushgateway)
    commands = {s.labels.get("command") for s in families["gpuaudit_findings"]}
    assert commands == {"audit", "report"}
    # the Pushgateway's own record of each group's last successful push
    assert {s.labels["command"] for s in families["push_time_seconds"] if s.labels.get("job") == "gpuaudit"} == {
        "audit",
        "report",
    }


def test_a_pushgateway_that_is_down_fails_the_run_after_its_files(run_cli, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    proc = run_cli(
        "audit", "--snapshot", str(DEMO), "-q", "--format", f"json={tmp_path / 'a.json'}", "--pushgateway", url
    )
    assert proc.returncode == 2
    assert "metrics not pushed: Pushgateway" in proc.stderr and "cannot send" in proc.stderr
    assert json.loads((tmp_path / "a.json").read_text())["findings"]  # the rest of the run is out


# --- the webhook ----------------------------------------------------------------------------


def test_report_posts_a_slack_message_with_the_decision_and_no_secret(run_cli, tmp_path, capture):
    hook = capture()
    link = "https://reports.example.com/2026-11/report.html"
    proc = run_cli(
        "report", "--snapshot", str(DEMO), "--out", str(tmp_path / "r"), "--report-url", link,
        env={"GPUAUDIT_WEBHOOK_URL": f"{hook.url}/services/{SECRET}"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [request] = hook.requests
    assert request["method"] == "POST" and request["path"] == f"/services/{SECRET}"
    assert request["headers"]["Content-Type"] == "application/json"
    assert SECRET not in request["body"].decode() and "s3cr3t" not in proc.stdout + proc.stderr
    payload = json.loads(request["body"])
    (tmp_path / "slack-payload.json").write_text(json.dumps(payload, indent=2))  # quoted in docs
    review = json.loads((tmp_path / "r" / "report.json").read_text())
    gate = review["first_screen"]["gate"]
    assert set(payload) == {"text", "blocks"}
    assert payload["text"].startswith(f"{review['cluster']}, {review['period']['name']}: {gate['headline']}.")
    kinds = [b["type"] for b in payload["blocks"]]
    assert kinds[0] == "header" and kinds[-1] == "context"
    texts = "\n".join(b["text"]["text"] for b in payload["blocks"] if b["type"] == "section")
    assert f"*Decision: {gate['headline']}* ({gate['decision']})" in texts
    assert "*Top findings*" in texts
    shown = review["first_screen"]["actions"][: webhook.TOP]
    assert shown and all(a["workload"]["name"] in texts for a in shown)
    assert payload["blocks"][-1]["elements"][0]["text"] == f"<{link}|Open the report>"
    # Slack's limits: header text 150 characters, section text 3,000
    assert len(payload["blocks"][0]["text"]["text"]) <= 150
    assert all(len(b["text"]["text"]) <= 3000 for b in payload["blocks"] if b["type"] == "section")


def test_audit_posts_the_plain_json_message(run_cli, tmp_path, capture):
    hook = capture()
    proc = run_cli(
        "audit", "--snapshot", str(DEMO), "-q", "--format", f"json={tmp_path / 'a.json'}",
        "--webhook-url", f"{hook.url}/hook/{SECRET}",
        env={"GPUAUDIT_WEBHOOK_FORMAT": "json"},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    [request] = hook.requests
    message = json.loads(request["body"])
    findings = json.loads((tmp_path / "a.json").read_text())["findings"]
    assert message["kind"] == "gpuaudit-notification" and message["command"] == "audit"
    assert message["findings"]["total"] == len(findings)
    assert message["findings"]["high"] == sum(1 for f in findings if f["severity"] == "high")
    assert message["decision"] is None and message["report_url"] is None  # an audit has no gate
    severities = [r["severity"] for r in message["top_findings"]]
    assert severities == sorted(severities, key=["critical", "high", "medium", "low", "info"].index)
    assert message["headline"].startswith("demo: 91.86 of 112 GPUs allocated")
    assert message["cluster"] == "demo"  # the kubeconfig context, as the review names it
    assert SECRET not in request["body"].decode()


def test_a_redirect_is_not_followed_and_the_rest_of_the_run_is_written(run_cli, tmp_path, capture):
    elsewhere = capture()
    hook = capture(reply(302, b"", {"Location": f"{elsewhere.url}/collect"}))
    proc = run_cli(
        "audit", "--snapshot", str(DEMO), "-q", "--format", f"json={tmp_path / 'a.json'}",
        env={"GPUAUDIT_WEBHOOK_URL": f"{hook.url}/services/{SECRET}?token=abc"},
    )  # fmt: skip
    assert proc.returncode == 2  # an output that did not reach its target
    assert len(hook.requests) == 1 and elsewhere.requests == []
    assert f"notification not sent: webhook {hook.url}/…: answered HTTP 302, a redirect, which is not followed" in (
        proc.stderr
    )
    assert SECRET not in proc.stderr and "token=abc" not in proc.stderr
    assert json.loads((tmp_path / "a.json").read_text())["findings"]


def test_an_error_answer_is_quoted_without_the_secret(capture):
    def echo(handler: BaseHTTPRequestHandler) -> None:
        reply(500, f"no such hook: {handler.path}".encode())(handler)

    hook = capture(echo)
    with pytest.raises(SendFailed) as failed:
        send(f"{hook.url}/services/{SECRET}", b"{}", what="webhook", content_type="application/json")
    assert str(failed.value).startswith(f"webhook {hook.url}/…: answered HTTP 500: no such hook: ")
    assert SECRET not in str(failed.value)


def test_no_answer_within_the_timeout_ends_the_request(capture):
    release = threading.Event()

    def trickle(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        while not release.wait(0.2):  # a byte now and then: a socket timeout alone never fires
            try:
                handler.wfile.write(b"x")
                handler.wfile.flush()
            except OSError:
                return

    hook = capture(trickle)
    try:
        with pytest.raises(SendFailed, match=r"no answer within 1s"):
            send(f"{hook.url}/x", b"{}", what="webhook", content_type="application/json", timeout=1)
    finally:
        release.set()


def test_an_oversized_answer_is_read_only_to_its_bound(capture):
    size = 8 * 2**20
    hook = capture(reply(200, b"y" * size))
    answer = send(f"{hook.url}/x", b"{}", what="webhook", content_type="application/json", max_answer_bytes=4096)
    assert answer.status == 200 and answer.body == b"y" * 4096


def test_a_webhook_url_that_is_no_http_url_is_a_usage_error_that_hides_it(run_cli):
    proc = run_cli("audit", "--snapshot", str(DEMO), "--webhook-url", f"ftp://hooks.example.com/{SECRET}")
    assert proc.returncode == 2
    assert "not an http:// or https:// URL" in proc.stderr and SECRET not in proc.stderr
    assert shown_url(f"https://user:pw@hooks.example.com:8443/{SECRET}?q=1") == "https://hooks.example.com:8443/…"


def test_cluster_text_cannot_make_slack_links_or_mentions():
    msg = {
        "command": "report",
        "headline": "team <!channel> & <https://evil.example|click>",
        "decision": {"decision": "hold", "headline": "No purchase <@U1>", "reason": "a > b"},
        "actions": [{"workload": "Deployment ns/<!here>", "gpus_freed": 2, "usd_per_month": 1000, "how": "x"}],
        "top_findings": [],
        "report_url": "https://r.example.com/a|b>c",
    }
    body = json.dumps(webhook.slack(msg))
    assert "<!channel>" not in body and "<!here>" not in body and "<@U1>" not in body
    assert "&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;" in body
    assert "<https://r.example.com/a%7Cb%3Ec|Open the report>" in body


def test_a_webhook_needs_no_metrics_extra(tmp_path, capture):
    """Only -o openmetrics and --pushgateway need prometheus-client."""
    import sys

    hook = capture()
    blocked = "import sys; sys.modules['prometheus_client'] = None; from gpuaudit.cli.main import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", blocked, "audit", "--snapshot", str(DEMO), "-q", "--webhook-url", f"{hook.url}/h"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    # the cluster as the review names it (the kubeconfig context), not its API server's address
    assert json.loads(hook.requests[0]["body"])["text"].startswith("demo: 91.86 of 112 GPUs allocated")
