"""`$ref` in a site rule (issue 32, item 3).

A rule's schemas were compiled by fastjsonschema, which resolves a ``$ref``
it does not hold with ``urlopen`` and no timeout: ``http://`` made CI call any
host, a server that never answers hung ``check``, ``file:///dev/zero`` grew
memory to MemoryError, and ``rules validate`` called such rules valid. Now a
rule's ``$ref`` resolves only inside the rule's own schema (``#/...``) or in
the bundled fact schema (by its ``$id``); any other, and an ``$id`` that
would move the base a relative ``$ref`` resolves against, is refused when
the rule loads, at its file and line, and nothing is fetched or read.
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from gpuaudit.engine.rules import RuleError, fact_schema, load_rule, schema_code
from tests.robustness.hostile import PINNED
from tests.robustness.hostile import site_rule as rule


class Recorder(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Recorder.hits.append(self.path)
        body = json.dumps({"type": "object"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Recorder.hits = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture
def silent() -> Iterator[str]:
    """A server that accepts and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def hostile_rules(server: str, silent: str) -> dict[str, tuple[str, int]]:
    """file -> (rule text, line of the refused keyword)."""
    return {
        "http.yaml": (rule(1, f"properties:\n  cpu_request: {{$ref: '{server}/cpu.json'}}"), 9),
        "hang.yaml": (rule(2, f"$ref: '{silent}/never.json'"), 8),
        "base.yaml": (rule(3, f"$id: '{server}/base/'\nproperties:\n  cpu_request: {{$ref: 'cpu.json'}}"), 8),
        "file.yaml": (rule(4, "not: {$ref: 'file:///etc/passwd'}"), 8),
        "relative.yaml": (rule(5, "allOf:\n- $ref: 'other-rule.yaml#/violation'"), 9),
        "data.yaml": (rule(6, "not: {$ref: 'data:application/json,{}'}"), 8),
    }


def test_rules_validate_refuses_every_foreign_ref_at_its_line(run_cli, tmp_path, server, silent):
    site = tmp_path / "site"
    site.mkdir()
    bad = hostile_rules(server, silent)
    for name, (text, _) in bad.items():
        (site / name).write_text(text)
    (site / "zero.yaml").write_text(rule(7, "not: {$ref: 'file:///dev/zero'}"))

    proc = run_cli("rules", "validate", "site")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout.startswith("0 rules valid, 7 invalid"), proc.stdout
    for name, (_, line) in bad.items():
        assert f"site/{name}:{line}: " in proc.stderr, (name, proc.stderr)
    assert "site/zero.yaml:8: violation: $ref 'file:///dev/zero' is refused" in proc.stderr
    assert Recorder.hits == []


def test_check_fetches_nothing_and_never_hangs(tmp_path, server, silent):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    site = tmp_path / "site"
    site.mkdir()
    for name, (text, _) in hostile_rules(server, silent).items():
        (site / name).write_text(text)
    exe = Path(sys.executable).with_name("gpuaudit")
    started = time.monotonic()
    proc = subprocess.run(
        [str(exe), "check", "pinned.yaml", "--policies", "site", "--format", "json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"GPUAUDIT_NO_CACHE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert time.monotonic() - started < 20
    assert Recorder.hits == [], "a rule's $ref made gpuaudit send a request"
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    refused = {Path(e["file"]).name for e in report["errors"] if "$ref" in e["message"] or "$id" in e["message"]}
    assert refused == set(hostile_rules(server, silent))
    assert "GPA-PL-001" in {f["rule"] for f in report["findings"]}  # the rest still runs


def test_refs_inside_the_rule_and_to_the_fact_schema_still_work(tmp_path):
    path = tmp_path / "local.yaml"
    path.write_text(
        rule(
            1,
            "definitions:\n  many: {type: number, minimum: 2}\n"
            "properties:\n  cpu_request: {$ref: '#/definitions/many'}\n"
            "  gpu: {$ref: 'https://gpuaudit.dev/schemas/facts.schema.json#/$defs/gpu'}\n"
            "required: [cpu_request]",
        )
    )
    loaded = load_rule(path)
    check = loaded.violation
    assert check is not None
    assert fact_schema()["$defs"]["gpu"]  # the target of the second $ref
    assert loaded.violated_by({"cpu_request": 4, "gpu": {"requested": True}})
    assert not loaded.violated_by({"cpu_request": 1, "gpu": {"requested": True}})
    # The fact schema is served from the package, never fetched: compiling works offline.
    assert schema_code(check) is not None


def test_a_param_cannot_smuggle_a_ref(tmp_path):
    path = tmp_path / "param.yaml"
    path.write_text(
        rule(1, "properties:\n  cpu_request: {$ref: {$param: where}}").replace(
            "message:", "params:\n  where: {default: '#/definitions/x', description: where the schema is}\nmessage:"
        )
    )
    with pytest.raises(RuleError) as caught:
        load_rule(path, params={"SITE-001": {"where": "http://127.0.0.1:9/x.json"}})
    assert "$ref 'http://127.0.0.1:9/x.json' is refused" in str(caught.value)
