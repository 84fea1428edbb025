"""What the tool writes, when what it read is hostile: terminal text carries
no escape sequences, machine formats stay valid and carry the text intact,
no name places a file outside `--out`, and writes are atomic even when the
process is killed half-way.

Covered elsewhere: HTML and Markdown escaping of cluster text in a real
Chromium (tests/test_report.py::test_cluster_text_is_escaped_never_executed),
the history database under concurrent writers
(tests/test_report.py::test_history_survives_concurrent_writers), an object
name climbing out of the overlay and input files never overwritten
(tests/test_fix_command.py), a failed snapshot write keeping the old file
(tests/test_cluster_source.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

import jsonschema
import pytest
import yaml

from gpuaudit.files import write_atomic
from gpuaudit.model import AuditResult, Finding, InputError, Location, Resource, Skipped
from gpuaudit.output import FORMATS, formatter
from tests.robustness.processes import on_a_terminal

ROOT = Path(__file__).resolve().parents[2]
SARIF_SCHEMA = json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text())
# What a terminal must never receive from data: CSI/OSC sequences, C0/C1 controls.
TERMINAL_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
ESCAPES = "\x1b[2J\x1b[31m\x1b]0;pwned\x07\x9b1m\r\b"
# Text that is special somewhere: XML/HTML, SARIF/JSON, GitHub commands, YAML, Markdown.
SPECIAL = "</testcase>]]><!--&amp;\"'`|*_\\%0A::error::x\n::warning file=a::b\u2028\ufffe"


def hostile_manifest(tag: str) -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: v1
        kind: Pod
        metadata:
          name: {json.dumps("pod" + tag)}
          namespace: {json.dumps("ns" + tag)}
          annotations: {{note: {json.dumps(tag)}}}
        spec:
          # A name no node can have is a placeholder, not a pin (GPA-PL-001):
          # the pin is a real one, the hostile text in the pod's own fields.
          nodeSelector: {{kubernetes.io/hostname: gpu-7, note: {json.dumps("node" + tag)}}}
          containers:
          - name: {json.dumps("c" + tag)}
            resources:
              requests: {{cpu: "1"}}
              limits: {{nvidia.com/gpu: {json.dumps("$GPU" + tag)}}}
        ---
        apiVersion: v1
        kind: Pod
        metadata: {{name: {json.dumps("two" + tag)}}}
        spec:
          nodeName: gpu-1
          containers:
          - name: c
            resources: {{limits: {{nvidia.com/gpu: 1}}}}
        """
    )


def test_terminal_output_never_carries_escape_sequences(run_cli, tmp_path):
    name = "evil" + ESCAPES.replace("\r", "").replace("\b", "") + ".yaml"
    (tmp_path / name).write_text(hostile_manifest(ESCAPES))
    for args in (["check", "."], ["check", "-"]):
        stdin = hostile_manifest(ESCAPES) if args[-1] == "-" else None
        proc = run_cli(*args, stdin=stdin, env={"NO_COLOR": "1"})
        assert "Traceback" not in proc.stderr
        assert not TERMINAL_CONTROL.search(proc.stdout), repr(proc.stdout)
        assert not TERMINAL_CONTROL.search(proc.stderr), repr(proc.stderr)
    out = run_cli("check", ".", env={"NO_COLOR": "1"}).stdout
    assert "  Pod ns/pod\n" in out  # reported, the escape sequences removed whole


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals here")
def test_messages_on_a_terminal_carry_no_escape_sequences(tmp_path):
    (tmp_path / f"evil{ESCAPES.replace(chr(13), '').replace(chr(8), '')}.yaml").write_text("kind: Pod\n  bad: [\n")
    (tmp_path / ".gpuaudit.yaml").write_text(f"policies: [{json.dumps('rules' + ESCAPES)}]\n")
    snapshot = tmp_path / f"snap{ESCAPES.replace(chr(13), '').replace(chr(8), '')}.json"
    snapshot.write_text("{not json")
    for args in (["fix", ".", "--out", "out"], ["rules", "list"], ["audit", "--snapshot", snapshot.name]):
        stderr = on_a_terminal(args, tmp_path, stream="stderr")
        assert b"rules" in stderr or b"evil" in stderr or b"snap" in stderr, (args, stderr)
        assert not TERMINAL_CONTROL.search(stderr.decode(errors="replace").replace("\r\n", "\n")), (
            args,
            stderr,
        )


def _everything_hostile(text: str) -> AuditResult:
    """A result whose every string field holds ``text``: what a hostile
    cluster or snapshot could put in front of each formatter."""
    resource = Resource("v1", "Pod", "ns" + text, "pod" + text, "c" + text, "node" + text)
    finding = Finding(
        rule="GPA-PL-001",
        title="title" + text,
        severity="high",
        category="placement",
        message="message" + text,
        resource=resource,
        location=Location("file" + text + ".yaml", 3, "/spec" + text),
        evidence={"pinned": "node" + text, "nested": {"k" + text: ["v" + text]}},
        remediation={"id": "drop-hostname-pin", "params": {"p": text}},
    )
    return AuditResult(
        findings=[finding],
        suppressed=[(finding, "reason" + text)],
        skipped=[Skipped("GPA-ME-001", "insufficient data for pod" + text)],
        errors=[InputError("file" + text, 2, "problem" + text), InputError("", None, text, "warning")],
        resources=1,
        gpu_workloads=1,
        telemetry={
            "source": "prometheus" + text,
            "signal": "SM" + text,
            "window_seconds": 3600,
            "queries": 3,
            "gpu_pods": 1,
            "gpu_pods_with_data": 0,
        },
        cluster={
            "gpu_nodes": 1,
            "gpus_total": 8,
            "gpus_allocated": 1,
            "pending_gpu_pods": 1,
            "pending_by_cause": {"cause" + text: 1},
            "kueue_pending": 0,
        },
    )


@pytest.mark.parametrize("text", [ESCAPES, SPECIAL, "\ud800lone surrogate", "\x00\x01\x7f"])
def test_every_format_renders_hostile_text_validly(text):
    result = _everything_hostile(text)
    for name in FORMATS:
        rendered = formatter(name)(result, colour=False)
        rendered.encode("utf-8")  # a stream or file can take it
        if name == "text":
            assert not TERMINAL_CONTROL.search(rendered), repr(rendered)
        elif name == "json":
            report = json.loads(rendered)
            assert report["findings"][0]["resource"]["name"] == "pod" + text  # intact
        elif name == "sarif":
            jsonschema.validate(json.loads(rendered), SARIF_SCHEMA)
        elif name == "junit":
            ET.fromstring(rendered.split("\n", 1)[1])
        elif name == "github":
            commands = rendered.rstrip("\n").split("\n")  # the runner splits on \n only
            assert len(commands) == 3  # one finding, two input problems: nothing injected
            assert all(
                re.match(r"^::(error|warning|notice)( [a-z]+=[^,:\n]*(,[a-z]+=[^,:\n]*)*)?::", c) for c in commands
            )
        elif name == "policyreport":
            reports = [d for d in yaml.safe_load_all(rendered) if d]
            assert reports and all(d["apiVersion"] == "wgpolicyk8s.io/v1alpha2" for d in reports)


def test_machine_formats_carry_manifest_text_intact(run_cli, tmp_path):
    (tmp_path / "m.yaml").write_text(hostile_manifest(SPECIAL))
    proc = run_cli("check", "m.yaml", "--format", "json")
    report = json.loads(proc.stdout)
    names = {f["resource"]["name"] for f in report["findings"]}
    assert "two" + SPECIAL in names  # byte for byte, in JSON
    sarif = json.loads(run_cli("check", "m.yaml", "--format", "sarif").stdout)
    jsonschema.validate(sarif, SARIF_SCHEMA)
    junit = run_cli("check", "m.yaml", "--format", "junit").stdout
    cases = [c.get("name") for c in ET.fromstring(junit.split("\n", 1)[1]).iter("testcase")]
    assert any("</testcase>]]><!--" in (c or "") for c in cases)


# --- nothing outside --out ------------------------------------------------------------------

FIXABLE = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  template:
    spec:
      nodeSelector: {{kubernetes.io/hostname: gpu-node-07}}
      containers:
      - name: {container}
        image: vllm:1
        resources:
          requests: {{cpu: "1", memory: 8Gi}}
          limits: {{nvidia.com/gpu: 8}}
"""


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.mark.parametrize(
    "names",
    [
        {"name": "../../../escaped", "namespace": "ok", "container": "c"},
        {"name": "ok", "namespace": "../../../../ns-escape", "container": "c"},
        {"name": "ok", "namespace": "ok", "container": "../../../c-escape"},
        {"name": "/etc/passwd", "namespace": "/tmp", "container": "~root"},
        {"name": "'..\\\\..\\\\win'", "namespace": "'.'", "container": "'..'"},
    ],
    ids=["name", "namespace", "container", "absolute", "backslashes"],
)
def test_no_hostile_name_writes_outside_out(run_cli, tmp_path, names):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    (work / "app.yaml").write_text(FIXABLE.format(**names))
    before = _files(tmp_path)
    out = work / "overlay"

    proc = run_cli("fix", str(work / "app.yaml"), "--out", str(out))

    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    new = _files(tmp_path) - before
    assert new and all(out in p.parents for p in new), sorted(map(str, new))
    assert "patches" in {p.parent.name for p in new}


@pytest.mark.parametrize("planted", ["patches", "kustomization.yaml", "REVIEW.md"])
def test_a_symlink_planted_in_out_is_not_followed_outside(run_cli, tmp_path, planted):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "kustomization.yaml").write_text("precious\n")
    (outside / "REVIEW.md").write_text("precious\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.yaml").write_text(FIXABLE.format(name="app", namespace="ml", container="c"))
    out = work / "overlay"
    out.mkdir()
    target = outside if planted == "patches" else outside / planted
    (out / planted).symlink_to(target)

    proc = run_cli("fix", str(work / "app.yaml"), "--out", str(out), "--force")

    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2 and "would be written outside" in proc.stderr
    assert sorted(p.name for p in outside.iterdir()) == ["REVIEW.md", "kustomization.yaml"]
    assert all(p.read_text() == "precious\n" for p in outside.iterdir())


# --- atomic writes -------------------------------------------------------------------------

_KILLED_WRITER = """
import os, sys, time
from pathlib import Path
target, how = Path(sys.argv[1]), sys.argv[2]
class Stalling:  # the file object, but the process stops for good half-way through
    def __init__(self, raw): self.raw, self.written = raw, 0
    def __enter__(self): return self
    def __exit__(self, *exc): return self.raw.__exit__(*exc)
    def __getattr__(self, name): return getattr(self.raw, name)
    def write(self, data):
        part = data[: len(data) // 2] if len(data) > 4096 else data
        self.raw.write(part)
        self.written += len(part)
        if self.written > 4096:
            self.raw.flush()
            print("half written", flush=True)
            time.sleep(60)
real_fdopen = os.fdopen
os.fdopen = lambda *a, **k: Stalling(real_fdopen(*a, **k))
if how == "write_atomic":
    from gpuaudit.files import write_atomic
    write_atomic(target, "new " * 100000)
else:
    from gpuaudit.sources.snapshot import write_snapshot
    write_snapshot({"objects": {"pods": [{"metadata": {"name": "p"}}] * 1000}}, target)
"""


@pytest.mark.parametrize("how", ["write_atomic", "write_snapshot"])
def test_a_writer_killed_half_way_leaves_the_old_file_whole(tmp_path, how):
    target = tmp_path / ("out.txt" if how == "write_atomic" else "snap.json")
    target.write_text("old contents\n")
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(target), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "half written", child.stderr.read()
        temps = [p for p in tmp_path.iterdir() if p != target]
        assert temps and temps[0].stat().st_size > 0  # the half file exists, beside it
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert target.read_text() == "old contents\n"  # never the half file


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    write_atomic(target, "old")

    def refuse(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_history_writer_killed_inside_its_transaction_corrupts_nothing(tmp_path):
    history = pytest.importorskip("gpuaudit.report.history")
    database = tmp_path / "history.sqlite"

    def run(cluster: str, hour: int):
        return history.RunSummary(
            cluster=cluster,
            collected_at=datetime(2026, 11, 1, hour, tzinfo=timezone.utc),
            command="audit",
            gpus={"total": 8.0, "allocated": 4.0},
        )

    history.record(database, run("c", 1))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "db.execute('BEGIN IMMEDIATE')\n"
            'db.execute("UPDATE runs SET gpus_total = -1")\n'
            'db.execute("INSERT INTO runs (cluster, collected_at, recorded_at, command) '
            "VALUES ('c', 'x', 'x', 'half')\")\n"
            "print('in transaction', flush=True)\n"
            "time.sleep(60)\n",
            str(database),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "in transaction"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)

    history.record(database, run("c", 2))  # the lock died with its holder

    runs = history.runs(database, "c")
    assert [r.collected_at.hour for r in runs] == [1, 2]
    assert all(r.gpus["total"] == 8.0 and r.command == "audit" for r in runs)
    with sqlite3.connect(database) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
