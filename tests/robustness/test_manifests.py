"""Broken and hostile manifests, through the real `gpuaudit check` process:
each gets a clear error with its file (and line where there is one), the run
exits 2, and everything else is still audited and reported.

Reader-level tests of the same inputs live in tests/test_manifest_reader.py;
the upstream corpus (files that do not parse, Helm templates, placeholders)
in tests/test_corpus.py. This module adds what only the whole process shows,
and the limits: a 50 MB file, very deep nesting, stdin, FIFOs, out-of-range
quantities and wrong types at every field the facts read.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuaudit.kube.yaml_lines import MAX_DEPTH
from gpuaudit.pipelines.check import check_manifests
from gpuaudit.pipelines.policy import load_policy
from gpuaudit.sources.manifests import MAX_FILE_BYTES
from gpuaudit.sources.user_config import Config
from tests.robustness.hostile import NASTY_STRINGS, PINNED, manifest_seeds

POD_WITH = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  containers:
  - name: c
    resources:
      limits: {{nvidia.com/gpu: {gpus}, cpu: {cpu}}}
"""


def alias_bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]")
    body = "\n".join("  " + line for line in lines)
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: lol}}\ndata:\n{body}\n"


def merge_key_bomb(levels: int = 9) -> str:
    """The alias bomb again, each level reached only through a merge key
    (``<<:``), whose merged keys may be overridden but still count."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        keys = ", ".join(f"k{k}: *a{i - 1}" for k in range(10))
        lines.append(f"a{i}: &a{i} {{<<: {{{keys}}}, k0: overridden}}")
    body = "\n".join("  " + line for line in lines)
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: lol}}\ndata:\n{body}\n"


def nested(depth: int) -> str:
    """A ConfigMap whose data nests ``depth`` mappings deep (block style)."""
    body = "".join("  " * (i + 1) + "k:\n" for i in range(depth))
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: deep}}\ndata:\n{body}"


# file -> (content, what its error says, its line or None, level). A file
# found by walking that does not read and names no apiVersion or kind is
# likely no manifest: a warning (binary.yaml, latin1.yaml, deep-flow.yaml),
# an error when named (test_a_named_broken_file_stays_an_error).
BROKEN: dict[str, tuple[str | bytes, str, int | None, str]] = {
    "invalid.yaml": ("kind: Pod\n  bad: [\n", "invalid YAML", 2, "error"),
    "bomb.yaml": (alias_bomb(), "alias bomb", 1, "error"),
    "merge-bomb.yaml": (merge_key_bomb(), "alias bomb", 1, "error"),
    "binary.yaml": (b"\x7fELF\x00\x01\x02", "binary file", None, "warning"),
    "latin1.yaml": ("name: caf\xe9\n".encode("latin-1"), "not valid UTF-8", 1, "warning"),
    "dup.yaml": ("apiVersion: v1\nkind: Pod\nmetadata: {name: d}\nkind: Service\n", "duplicate key 'kind'", 4, "error"),
    "helm.yaml": (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Values.name }}\n",
        "not auditable until rendered",
        4,
        "warning",
    ),
    "placeholder.yaml": (
        POD_WITH.format(name="ph", gpus="$GPU_PER_NODE", cpu=4),
        "'$GPU_PER_NODE' is not a GPU count",
        8,
        "error",
    ),
    "null-gpus.yaml": (POD_WITH.format(name="nul", gpus="null", cpu=4), "None is not a GPU count", 8, "error"),
    "placeholder-cpu.yaml": (
        POD_WITH.format(name="phc", gpus=1, cpu="$POD_CPU"),
        "limits.cpu: '$POD_CPU' is not a quantity (a placeholder left unrendered?)",
        8,
        "error",
    ),
    "negative.yaml": (POD_WITH.format(name="neg", gpus=-2, cpu=4), "-2 is negative", 8, "error"),
    "overflow.yaml": (POD_WITH.format(name="big", gpus='"1e400"', cpu=4), "out of range", 8, "error"),
    "deep-flow.yaml": ("[" * 100_000 + "\n", "nesting", 1, "warning"),
    "deep-block.yaml": (nested(MAX_DEPTH + 50), f"deeper than {MAX_DEPTH}", 1, "error"),
    "deep-libyaml.yaml": (nested(1500), "nesting", None, "error"),
}
# Inputs that are fine and contribute nothing: no error, no object.
QUIET = {
    "empty.yaml": "",
    "blank.yaml": "\n\n   \n",
    "comments.yaml": "# nothing here\n---\n# nor here\n",
    "separators.yaml": "---\n---\n...\n",
    "values.yaml": "replicaCount: 1\nresources: {limits: {nvidia.com/gpu: 1}}\n",
    "unknown-kind.yaml": "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g}\n"
    "spec: {template: {spec: {containers: [{name: c}]}}}\n",
    "scalar.yaml": "just a string\n",
    "sequence.yaml": "- 1\n- two\n",
    # A CPU of null, a chart's way to drop a default, is no value: unset.
    "null-cpu.yaml": POD_WITH.format(name="nulc", gpus=1, cpu="null"),
    # YAML merge keys, a key beside `<<:` overriding a merged one: no duplicate.
    "docker-compose.yaml": "x-common: &common\n  environment: {A: '1'}\n  depends_on: [db]\n"
    "x-more: &more {environment: {B: '1'}, ports: ['80']}\n"
    "services:\n  web:\n    <<: [*common, *more]\n    environment: {A: '2'}\n",
}


def write(folder: Path, files: dict[str, str | bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = folder / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())


def report_of(proc: subprocess.CompletedProcess) -> dict:
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def errors_by_file(report: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for e in report["errors"]:
        found.setdefault(Path(e["file"]).name, []).append(e)
    return found


def test_every_kind_of_broken_file_is_named_and_the_rest_is_still_audited(run_cli, tmp_path):
    repo = tmp_path / "repo"
    write(repo, {**{n: c for n, (c, *_) in BROKEN.items()}, **QUIET, "pinned.yaml": PINNED})
    (repo / "sub").mkdir()
    (repo / "sub" / "loop").symlink_to(repo / "sub")  # a directory symlink loop
    (repo / "sub" / "list.json").write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(PINNED)]},
                    "not an object",
                    None,
                ],
            }
        )
    )

    proc = run_cli("check", "repo", "--format", "json")
    report = report_of(proc)

    assert proc.returncode == 2
    found = errors_by_file(report)
    for name, (_, message, line, level) in BROKEN.items():
        [error] = found.pop(name)
        assert message in error["message"], (name, error)
        assert error["level"] == level, (name, error)
        if line is not None:
            assert error["line"] == line, (name, error)
    # The pod of pinned.yaml is defined again in sub/: another folder (the
    # one-folder-per-environment layout), so no "defined again" warning.
    assert found == {}, "quiet inputs raised no error"
    # Still audited: the pin in pinned.yaml, and the same pod inside the nested List.
    pins = [f for f in report["findings"] if f["rule"] == "GPA-PL-001"]
    assert sorted(Path(f["location"]["file"]).name for f in pins) == ["list.json", "pinned.yaml"]
    assert [f["location"]["line"] for f in pins if f["location"]["file"].endswith("list.json")]
    # The placeholder pod is still a GPU workload whose count is unknown, not zero.
    assert report["summary"]["gpu_workloads"] >= 5


def test_a_named_broken_file_stays_an_error(run_cli, tmp_path):
    names = ["binary.yaml", "deep-flow.yaml", "latin1.yaml"]  # warnings when found by walking
    write(tmp_path, {n: BROKEN[n][0] for n in names})
    proc = run_cli("check", *names, "--format", "json")
    report = report_of(proc)
    assert proc.returncode == 2
    assert sorted(Path(e["file"]).name for e in report["errors"] if e["level"] == "error") == names


def _limited(max_bytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))

    return apply


def test_an_alias_bomb_stays_within_bounded_memory(tmp_path):
    """A billion laughs (10^9 leaves) under a 1 GiB address-space limit and a
    60 s timeout: refused, never expanded."""
    (tmp_path / "bomb.yaml").write_text(alias_bomb(levels=9))
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("gpuaudit")), "check", "bomb.yaml", "--format", "json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limited(1024**3),
    )
    report = report_of(proc)
    assert proc.returncode == 2
    assert "alias bomb" in report["errors"][0]["message"]


def test_a_50_mb_file_is_refused_by_size_without_being_read(run_cli, tmp_path):
    with (tmp_path / "huge.yaml").open("wb") as handle:
        handle.truncate(50 * 1024 * 1024)  # sparse: the size is what counts
    (tmp_path / "pinned.yaml").write_text(PINNED)

    report = report_of(proc := run_cli("check", ".", "--format", "json"))

    assert proc.returncode == 2
    [error] = errors_by_file(report)["huge.yaml"]
    assert error["message"] == (f"file is {50 * 1024 * 1024:,} bytes; the limit is {MAX_FILE_BYTES:,} bytes")
    assert [f["rule"] for f in report["findings"]] == ["GPA-PL-001"]


def test_stdin_has_the_same_limits_and_checks_as_a_file(run_cli, tmp_path):
    big = PINNED + "---\n" + ("# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    report = report_of(run_cli("check", "-", "--format", "json", stdin=big))
    assert "limit is" in report["errors"][0]["message"]
    assert report["findings"] == []  # nothing from a refused input

    latin1 = subprocess.run(
        [str(Path(sys.executable).with_name("gpuaudit")), "check", "-", "--format", "json"],
        input=PINNED.replace("pinned", "caf\xe9").encode("latin-1"),
        capture_output=True,
        timeout=60,
    )
    assert b"Traceback" not in latin1.stderr
    [error] = json.loads(latin1.stdout)["errors"]
    assert error["file"] == "<stdin>" and error["message"] == "not valid UTF-8 text"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_in_a_folder_is_skipped_not_waited_on(run_cli, tmp_path):
    os.mkfifo(tmp_path / "pipe.yaml")
    (tmp_path / "pinned.yaml").write_text(PINNED)
    proc = run_cli("check", ".", "--format", "json")  # run_cli's timeout bounds a hang
    report = report_of(proc)
    assert errors_by_file(report)["pipe.yaml"][0]["message"] == "not a regular file, not read"
    assert [f["rule"] for f in report["findings"]] == ["GPA-PL-001"]


# --- wrong types at every field the facts read ------------------------------------------

WRONG = (
    None,
    True,
    "two",
    "$GPU",
    "1e400",
    "-3",
    [],
    [1, {"a": None}],
    {},
    {"nvidia.com/gpu": "x"},
    float("nan"),
    -(10**30),
    "\x1b[2J<script>",
)
# One seed per pod-spec shape: core controllers, inline specs, roles, resources-only.
SHAPES = (
    "Deployment",
    "CronJob",
    "PyTorchJob",
    "MPIJob",
    "RayCluster",
    "RayService",
    "InferenceService",
    "LLMInferenceService",
    "LeaderWorkerSet",
    "JobSet",
    "Workflow",
    "TrainJob",
    "ConfigMap",
    "ClusterPolicy",
    "HorizontalPodAutoscaler",
    "ResourceClaim",
)


def _leaves(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*path, key)
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield (*path, index)
            yield from _leaves(value, (*path, index))


def _replaced(obj, path, value):
    import copy

    obj = copy.deepcopy(obj)
    parent = obj
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return obj


@pytest.mark.parametrize("kind", SHAPES)
def test_a_wrong_type_at_any_field_is_reported_or_ignored_never_a_crash(kind):
    """Each field of a real manifest of this kind, replaced in turn by each of
    the wrong values: the audit finishes, every finding still has a file and
    a line, and a wrong GPU count is an error, never a silent zero."""
    seed = next((s for s in reversed(manifest_seeds()) if s.get("kind") == kind), None)
    if seed is None:
        pytest.skip(f"no {kind} among the rule cases")
    rules, _ = load_policy(Config())
    runs = 0
    for path in _leaves(seed):
        for value in WRONG:
            text = yaml.safe_dump(_replaced(seed, path, value), allow_unicode=True)
            result = check_manifests(["-"], Config(), rules, stdin_text=text)
            runs += 1
            assert all(f.location.file == "<stdin>" and f.location.line for f in result.findings)
            if path[-1] == "nvidia.com/gpu" and path[-2] in ("limits", "requests"):
                assert any("GPU count" in e.message for e in result.errors), (path, value)
    assert runs >= 50


def test_extreme_quantities_are_errors_never_infinities(run_cli, tmp_path):
    """Quantities Kubernetes could not hold (negative, 1e400, 9Ei) are field
    errors; finite extremes (1e-300 GPUs, 8Ei CPUs) keep every output finite."""
    pods = [
        POD_WITH.format(name=f"q{i}", gpus=gpus, cpu=cpu)
        for i, (gpus, cpu) in enumerate(
            [
                ("1e-300", "8Ei"),
                ("-1", "4"),
                ('"1e400"', "4"),
                ("1", '"-1e300"'),
                ("1", "9Ei"),
                ("1", ".inf"),
                ("1", ".nan"),
                ("9223372036854775808", "1"),
            ]
        )
    ]
    (tmp_path / "q.yaml").write_text("---\n".join(pods))
    for fmt in ("json", "sarif"):
        proc = run_cli("check", "q.yaml", "--format", fmt)
        assert proc.returncode == 2, proc.stderr
        json.loads(proc.stdout)  # strict JSON: no NaN, no Infinity
    report = json.loads(run_cli("check", "q.yaml", "--format", "json").stdout)
    messages = " | ".join(e["message"] for e in report["errors"])
    for expected in (
        "-1 is negative",
        "'1e400' is out of range",
        "'-1e300' is negative",
        "'9Ei' is out of range",
        "inf is not a finite",
        "nan is not a finite",
    ):
        assert expected in messages
    assert report["summary"]["resources"] == len(pods)  # none lost


YAML_NUMBERS = (
    "0",
    "-0",
    "-1",
    ".nan",
    ".inf",
    "-.inf",
    "1e308",
    "2e-300",
    "1e999",
    "0x10",
    "9223372036854775808",
    "99999999999999999999999999",
    "1_000",
    "0o17",
    "+12",
)


@pytest.mark.parametrize("value", [*map(json.dumps, NASTY_STRINGS), *YAML_NUMBERS])
def test_every_nasty_scalar_as_a_gpu_count_never_crashes(value):
    rules, _ = load_policy(Config())
    text = POD_WITH.format(name="p", gpus=value, cpu=value)
    result = check_manifests(["-"], Config(), rules, stdin_text=text)
    assert result.resources == 1
