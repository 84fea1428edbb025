"""Terminal controls in what gpuaudit prints and writes (issue 19, item 5).

Every text for people is free of C0 controls (but newline and tab), DEL, C1
controls, escape sequences and bidi overrides; a name never starts a line of
its own; machine formats keep the text, encoded. One definition does it
(gpuaudit/safetext.py): renderers clean what they place, JSON encodes, and
both streams pass through a CleanStream as the backstop. Asserted on the exact
bytes printed or written, through the real CLI; on a pseudo-terminal too,
where click strips nothing.

Covered elsewhere: every format with hostile text in every field, and the
stderr of `fix`, `rules list` and `audit` on a terminal
(tests/robustness/test_output.py).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from gpuaudit.safetext import clean, clean_tree, escape_json, one_line
from tests.robustness.hostile import PINNED, cluster_seed
from tests.robustness.processes import on_a_terminal
from tests.robustness.test_rules_config import rule

# What a terminal acts on: C0 but \n and \t, DEL, C1, bidi embeddings/overrides/isolates.
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# OSC title (BEL-ended), CSI clear screen, RLO, 8-bit CSI, NEL.
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\u202e\x9b31m\x85"
GPUAUDIT = str(Path(sys.executable).with_name("gpuaudit"))


def strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def pinned_named(name: str) -> str:
    return PINNED.replace("name: pinned", f"name: {json.dumps(name)}")


# --- the one definition ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "plain ascii, 100% \\ <b>&amp;</b> `code` | *x* _y_",
        "עברית ومرحبا 中文 emoji 🚀 tab\there",
        "multi\nline",
        "\u200f\u200e marks stay",  # RLM/LRM are marks, not overrides
    ],
)
def test_legitimate_text_is_left_as_it_is(text):
    assert clean(text) == text
    assert clean(clean(text)) == text
    assert escape_json(json.dumps(text, ensure_ascii=False)) == json.dumps(text, ensure_ascii=False)


def test_controls_go_whole_and_cleaning_is_idempotent():
    assert clean("a" + ESCAPES + "b\n\tc") == "ab\n\tc"
    assert clean("\x1bP1;2|payload\x1b\\x\x9d8;;http://evil\x9cy\x1bcz\ud800") == "xyz\ufffd"
    assert one_line("name\nforged\u2028line\u2029") == "name forged line "
    hostile = ESCAPES + "\x00\x7f\u2066\u2069\x1b[?1049h\x1b(B"
    assert clean(clean(hostile)) == clean(hostile) == ""
    assert clean_tree({"k" + ESCAPES: ["v" + ESCAPES, 1, None]}) == {"k": ["v", 1, None]}


def test_json_keeps_the_text_but_not_the_raw_characters():
    text = "x" + ESCAPES + "\u2028\ud800y"
    encoded = escape_json(json.dumps(text, ensure_ascii=False))
    assert json.loads(encoded) == text
    assert not CONTROLS.search(encoded) and "\u2028" not in encoded
    assert encoded == '"x\\u001b]0;pwned\\u0007\\u001b[2J\\u202e\\u009b31m\\u0085\\u2028\\ud800y"'


# --- through the CLI ------------------------------------------------------------------------


def test_text_output_keeps_each_name_on_its_line(run_cli, tmp_path):
    forged = "\nHIGH     GPA-XX-999  forged.yaml:1  Pod ml/fake"
    (tmp_path / "m.yaml").write_text(pinned_named("pinned" + ESCAPES + forged))

    proc = run_cli("check", "m.yaml", env={"NO_COLOR": "1"})

    lines = proc.stdout.splitlines()
    assert lines[:3] == [
        "PLACEMENT",
        "  HIGH     GPA-PL-001  m.yaml:5  Pod ml/pinned HIGH     GPA-XX-999  forged.yaml:1  Pod ml/fake",
        "           Pod pinned HIGH     GPA-XX-999  forged.yaml:1  Pod ml/fake (pod) can only run on node "
        "gpu-node-1 (pinned by nodeName)",
    ]
    assert not CONTROLS.search(proc.stdout + proc.stderr)
    assert sum(line.lstrip().startswith("HIGH") for line in lines) == 1  # nothing forged


def test_github_annotations_carry_no_c1_or_bidi(run_cli, tmp_path):
    (tmp_path / "m.yaml").write_text(pinned_named("pinned" + ESCAPES + "\u2066x\u2069"))

    proc = run_cli("check", "m.yaml", "--format", "github")

    assert proc.stdout.splitlines()[0] == (
        "::error file=m.yaml,line=5,title=GPA-PL-001 GPU workload pinned to a single node (high)::"
        "Pod ml/pinnedx: Pod pinnedx (pod) can only run on node gpu-node-1 (pinned by nodeName)"
    )
    assert not CONTROLS.search(proc.stdout)


def test_machine_formats_encode_what_they_carry(run_cli, tmp_path):
    name = "pinned" + ESCAPES
    (tmp_path / "m.yaml").write_text(pinned_named(name))
    for fmt in ("json", "sarif", "gitlab"):
        proc = run_cli("check", "m.yaml", "--format", f"{fmt}=out.{fmt}", "--format", fmt)
        written = (tmp_path / f"out.{fmt}").read_text()
        assert proc.stdout == written, fmt  # the stream takes nothing out of encoded text
        assert not CONTROLS.search(written), fmt
        assert any(name in text for text in strings(json.loads(written))), fmt  # the text, intact
    report = json.loads((tmp_path / "out.json").read_text())
    assert {f["resource"]["name"] for f in report["findings"]} == {name}


FIXABLE = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: ml}}
spec:
  template:
    spec:
      nodeSelector: {{kubernetes.io/hostname: gpu-node-07}}
      containers:
      - name: c
        image: vllm:1
        resources:
          requests: {{cpu: "1", memory: 8Gi}}
          limits: {{nvidia.com/gpu: 8}}
"""


def test_fix_diff_headers_name_the_object_on_one_clean_line(run_cli, tmp_path):
    name = "web" + ESCAPES + "\n+++ b/forged"
    (tmp_path / "app.yaml").write_text(FIXABLE.format(name=json.dumps(name)))
    # No kustomize on PATH: the diff gpuaudit computes itself, the same every time.
    proc = run_cli("fix", "app.yaml", "--diff", env={"PATH": str(Path(sys.executable).parent)})

    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["--- a/Deployment/ml/web +++ b/forged", "+++ b/Deployment/ml/web +++ b/forged"]
    assert sum(line.startswith(("--- ", "+++ ")) for line in lines) == 2  # no forged header
    # The body is YAML, which writes the name escaped.
    assert '   name: "web\\e]0;pwned\\a\\e[2J\\x9B31m\\N\\n+++ b/forged"' in lines
    assert not CONTROLS.search(proc.stdout + proc.stderr)


def test_rules_test_case_names_are_printed_on_one_clean_line(run_cli, tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "r.yaml").write_text(rule(1))
    cases = [
        {"name": "fails" + ESCAPES + "\nok    SITE-999  forged", "expect": "fail", "manifest": PINNED},
        {"name": "\u202epasses", "expect": "pass", "manifest": PINNED.replace('cpu: "4"', 'cpu: "400"')},
    ]
    (tmp_path / "site" / "r.cases.yaml").write_text(yaml.safe_dump(cases, allow_unicode=True))

    proc = run_cli("rules", "test", "site", "-v")

    assert proc.returncode == 0, proc.stdout
    assert proc.stdout == (
        "ok    SITE-001  fails ok    SITE-999  forged\nok    SITE-001  passes\n1 rules, 2 cases, 0 failed\n"
    )


def test_the_report_written_from_a_hostile_context_is_clean(run_cli, tmp_path):
    snapshot = cluster_seed()
    snapshot["cluster"] = {"context": "prod" + ESCAPES + "\x07\x1b[8m-eu", "server": "https://k"}
    snapshot["objects"]["pods"][0]["metadata"]["name"] += ESCAPES
    (tmp_path / "snap.json").write_text(json.dumps(snapshot))

    proc = run_cli("report", "--snapshot", "snap.json", "--out", "out", "--no-record")

    assert proc.returncode in (0, 1), proc.stderr
    md = (tmp_path / "out" / "report.md").read_bytes().decode()
    assert md.splitlines()[0] == "# GPU capacity review: prod-eu, 2026-01"
    for name in ("report.md", "report.html", "report.json"):
        written = (tmp_path / "out" / name).read_text()
        assert not CONTROLS.search(written), name
        assert "prod-eu" in written, name
    assert json.loads((tmp_path / "out" / "report.json").read_text())["cluster"] == "prod-eu"
    assert not CONTROLS.search(proc.stdout + proc.stderr)


# --- on a terminal, where click strips nothing ----------------------------------------------


# gpuaudit's own colours: SGR only.
OUR_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals here")
def test_on_a_terminal_only_our_colours_reach_stdout(tmp_path):
    (tmp_path / "m.yaml").write_text(pinned_named("pinned" + ESCAPES))
    (tmp_path / "app.yaml").write_text(FIXABLE.format(name=json.dumps("web" + ESCAPES)))
    (tmp_path / "site").mkdir()
    title = f"title: {json.dumps('T' + ESCAPES)}"
    (tmp_path / "site" / "r.yaml").write_text(rule(1).replace("title: Site rule 1", title))
    runs = {
        "check": (["check", "m.yaml"], {}),
        "fix --diff": (["fix", "app.yaml", "--diff"], {"PATH": str(Path(sys.executable).parent)}),
        "rules list": (["rules", "list", "--policies", "site"], {}),
    }
    for what, (args, env) in runs.items():
        out = on_a_terminal(args, tmp_path, stream="stdout", env=env).decode(errors="replace").replace("\r\n", "\n")
        assert "pinned" in out or "web" in out or "SITE-001" in out, (what, out)
        assert not CONTROLS.search(OUR_COLOURS.sub("", out)), (what, out)
    coloured = on_a_terminal(["check", "m.yaml"], tmp_path, stream="stdout").decode(errors="replace")
    assert "\x1b[31mHIGH\x1b[0m" in coloured  # colours still reach the terminal
