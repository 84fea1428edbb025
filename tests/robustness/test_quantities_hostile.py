"""Values gpuaudit must not misread (issue 19, item 20 and the quantities
around it): an unreadable or absurd quantity is unknown, never zero.

- A node whose GPU capacity cannot be read ("1e400", "-8", "1.5", "many")
  is named in an input error with the field, left out of every GPU total
  (and said so in the summary), the run exits 2 and is not recorded in the
  history's trend. A pod's GPU count the same, naming the pod.
- Manifests are read as Kubernetes reads them: `1:20` is text (YAML 1.1's
  base 60 would make it 80); a replica count is an int32 >= 0 (`1.5`, `"3"`,
  2^31 are errors on their line); a `!!python/...` tag is an error naming
  its line; the same object defined twice is a warning naming both places.

Covered elsewhere: placeholders, null, negative and out-of-range GPU counts
in manifests (tests/robustness/test_manifests.py).
"""

from __future__ import annotations

import copy
import json
import sqlite3
from pathlib import Path

import pytest

from tests.robustness.hostile import PINNED, cluster_seed

NODE = 1  # gpu-a100-0: 8 GPUs, 4 pods holding 2 each
FULL = {"gpu_nodes": 5, "gpus_total": 26.0, "gpus_allocated": 17.0}
WITHOUT_NODE = {"gpu_nodes": 4, "gpus_total": 18.0, "gpus_allocated": 9.0}


def snapshot_with(tmp_path: Path, change) -> str:
    snapshot = copy.deepcopy(cluster_seed())
    change(snapshot)
    (tmp_path / "snap.json").write_text(json.dumps(snapshot))
    return "snap.json"


def audit(run_cli, *args: str) -> tuple[int, dict, str]:
    proc = run_cli("audit", *args, "--format", "json")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def totals(report: dict) -> dict:
    return {k: report["summary"]["cluster"][k] for k in FULL}


def test_the_recorded_cluster_as_it_is(run_cli, tmp_path):
    code, report, _ = audit(run_cli, "--snapshot", snapshot_with(tmp_path, lambda s: None))
    assert code == 1 and report["errors"] == [] and totals(report) == FULL


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("capacity", "1e400", "status.capacity.nvidia.com/gpu: '1e400' is out of range"),
        ("capacity", "9Ei", "status.capacity.nvidia.com/gpu: '9Ei' is out of range"),
        ("capacity", "-8", "status.capacity.nvidia.com/gpu: '-8' is negative"),
        ("capacity", "1.5", "status.capacity.nvidia.com/gpu: '1.5' is not a whole number of devices"),
        ("capacity", "many", "status.capacity.nvidia.com/gpu: 'many' is not a quantity"),
        ("capacity", None, "status.capacity.nvidia.com/gpu: null is not a quantity"),
        ("capacity", "1e18", "status.capacity.nvidia.com/gpu: '1e18' is more devices than a node has"),
        ("allocatable", "1e400", "status.allocatable.nvidia.com/gpu: '1e400' is out of range"),
    ],
)
def test_a_node_with_an_unreadable_gpu_capacity_is_unknown_not_zero(run_cli, tmp_path, field, value, says):
    def change(snapshot: dict) -> None:
        snapshot["objects"]["nodes"][NODE]["status"][field]["nvidia.com/gpu"] = value

    code, report, _ = audit(run_cli, "--snapshot", snapshot_with(tmp_path, change))

    assert code == 2
    assert report["errors"] == [
        {
            "file": "cluster",
            "line": None,
            "message": f"node gpu-a100-0: {says}; its GPUs are unknown: the node is left out of the GPU totals",
            "level": "error",
        }
    ]
    assert totals(report) == WITHOUT_NODE  # out of the totals (its pods' GPUs too), never 0 GPUs in them
    assert "gpu-a100-0" not in {f["resource"]["name"] for f in report["findings"] if f["resource"]["kind"] == "Node"}


def test_the_summary_says_which_nodes_are_left_out_and_the_trend_is_kept_clean(run_cli, tmp_path):
    def change(snapshot: dict) -> None:
        snapshot["objects"]["nodes"][NODE]["status"]["capacity"]["nvidia.com/gpu"] = "1e400"

    name = snapshot_with(tmp_path, change)
    proc = run_cli("audit", "--snapshot", name, "--history", "h.db", env={"NO_COLOR": "1"})

    assert proc.returncode == 2
    cluster_line = next(line for line in proc.stdout.splitlines() if line.startswith("Cluster: "))
    assert cluster_line == (
        "Cluster: 9 of 18 GPUs allocated on 4 GPU nodes; 2 GPU pods pending (2 allocation); 1 queued in Kueue. "
        "GPUs unknown on 1 node(s), left out of these totals: gpu-a100-0."
    )
    assert (
        "  error: cluster: node gpu-a100-0: status.capacity.nvidia.com/gpu: '1e400' is out of range; "
        "its GPUs are unknown: the node is left out of the GPU totals\n"
    ) in proc.stdout
    assert proc.stderr == (
        "gpuaudit: history not recorded: the GPUs of 1 node(s) are unknown (gpu-a100-0): "
        "totals without them would distort the trend\n"
    )
    assert not (tmp_path / "h.db").exists() or not _runs(tmp_path / "h.db")

    # The capacity review: written, with the warning; the run is not a trend point either.
    proc = run_cli("report", "--snapshot", name, "--out", "out")
    assert proc.returncode == 2, proc.stderr
    assert "this run is not recorded: the GPUs of 1 node(s) are unknown (gpu-a100-0)" in proc.stderr
    assert (tmp_path / "out" / "report.md").exists()
    assert not _runs(tmp_path / "out" / "history.sqlite")


def _runs(database: Path) -> list:
    if not database.exists():
        return []
    with sqlite3.connect(database) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return db.execute("SELECT * FROM runs").fetchall() if "runs" in tables else []


def test_a_pod_gpu_count_that_cannot_be_read_names_the_pod(run_cli, tmp_path):
    def change(snapshot: dict) -> None:
        resources = snapshot["objects"]["pods"][4]["spec"]["containers"][0]["resources"]
        resources["limits"]["nvidia.com/gpu"] = resources["requests"]["nvidia.com/gpu"] = "1e400"

    code, report, _ = audit(run_cli, "--snapshot", snapshot_with(tmp_path, change))

    assert code == 2
    pod = "pod inference/rag-reranker-5f8b9c7d6-j4x8q"
    assert [e["message"] for e in report["errors"]] == [
        f"{pod}: {section}.nvidia.com/gpu: '1e400' is out of range, not a GPU count; this request cannot be judged"
        for section in ("requests", "limits")
    ]
    assert {e["level"] for e in report["errors"]} == {"error"}
    assert report["summary"]["cluster"]["gpus_total"] == FULL["gpus_total"]
    # What it holds is unknown: not in the allocated total, and the error says why.
    assert report["summary"]["cluster"]["gpus_allocated"] == FULL["gpus_allocated"] - 1


# --- manifests ------------------------------------------------------------------------------

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: ml}}
spec:
  replicas: {replicas}
  template:
    spec:
      containers:
      - name: c
        resources:
          limits: {{nvidia.com/gpu: {gpus}}}
"""


def check(run_cli, *args: str) -> tuple[int, dict]:
    proc = run_cli("check", *args, "--format", "json")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def messages(report: dict) -> list[tuple[str, int | None, str, str]]:
    return [(e["file"], e["line"], e["level"], e["message"]) for e in report["errors"]]


INT32 = "Kubernetes expects a whole number from 0 to 2,147,483,647"


@pytest.mark.parametrize(
    ("replicas", "says"),
    [
        ("1.5", f"replicas: 1.5 is not a whole number; {INT32}"),
        ('"3"', f"replicas: '3' is text, not a count; {INT32}"),
        ("2147483648", f"replicas: 2147483648 is out of range; {INT32}"),
        ("-1", f"replicas: -1 is negative; {INT32}"),
        ("true", f"replicas: True is not a number; {INT32}"),
        ("[3]", f"replicas: list is not a number; {INT32}"),
        ("1:20", f"replicas: '1:20' is text, not a count; {INT32}"),
        (".inf", f"replicas: inf is not a whole number; {INT32}"),
    ],
)
def test_a_replica_count_kubernetes_would_refuse_is_an_error_on_its_line(run_cli, tmp_path, replicas, says):
    (tmp_path / "d.yaml").write_text(DEPLOYMENT.format(name="web", replicas=replicas, gpus=1))
    code, report = check(run_cli, "d.yaml")
    assert code == 2
    assert messages(report) == [("d.yaml", 5, "error", says)]


@pytest.mark.parametrize("replicas", ["0", "3", "3.0", "2147483647"])
def test_replica_counts_kubernetes_takes_are_taken(run_cli, tmp_path, replicas):
    (tmp_path / "d.yaml").write_text(DEPLOYMENT.format(name="web", replicas=replicas, gpus=1))
    code, report = check(run_cli, "d.yaml")
    assert report["errors"] == [] and code in (0, 1)


def test_a_base_60_gpu_count_is_text_not_80(run_cli, tmp_path):
    (tmp_path / "d.yaml").write_text(DEPLOYMENT.format(name="web", replicas=1, gpus="1:20"))
    code, report = check(run_cli, "d.yaml")
    assert code == 2
    assert messages(report) == [
        (
            "d.yaml",
            11,
            "error",
            "limits.nvidia.com/gpu: '1:20' is text, not a GPU count (YAML 1.1 would read base 60; "
            "Kubernetes reads text); this request cannot be judged",
        )
    ]
    assert all("80" not in f["message"] for f in report["findings"])


def test_a_python_tag_is_an_error_naming_its_line(run_cli, tmp_path):
    pod = PINNED.replace(
        "metadata: {name: pinned, namespace: ml}", "metadata:\n  name: !!python/name:os.system p\n  namespace: ml"
    )
    text = (
        "--- !!python/object/apply:os.system\n"
        "args: ['touch pwned']\n"
        f"---\n{pod}"
        "--- !!python/object/apply:subprocess.call [['touch', 'pwned']]\n"
    )
    (tmp_path / "t.yaml").write_text(text)
    lines = text.splitlines()
    name_line = lines.index("  name: !!python/name:os.system p") + 1
    last_line = len(lines)
    code, report = check(run_cli, "t.yaml")

    assert code == 2
    python_object = "asks for a Python object"
    assert messages(report) == [
        (
            "t.yaml",
            1,
            "error",
            f"YAML tag !!python/object/apply:os.system {python_object}: this document is not audited",
        ),
        (
            "t.yaml",
            name_line,
            "error",
            f"YAML tag !!python/name:os.system {python_object}: not constructed; the value is read as plain data",
        ),
        (
            "t.yaml",
            last_line,
            "error",
            f"YAML tag !!python/object/apply:subprocess.call {python_object}: this document is not audited",
        ),
    ]
    assert not (tmp_path / "pwned").exists()
    [pin] = [f for f in report["findings"] if f["rule"] == "GPA-PL-001"]  # the Pod between them is audited
    assert pin["resource"]["name"] == "p"


def test_an_object_defined_again_differently_in_one_file_is_a_warning_naming_both(run_cli, tmp_path):
    (tmp_path / "a.yaml").write_text(PINNED)
    (tmp_path / "b.yaml").write_text("# the same pod\n" + PINNED)  # alike: applying both changes nothing
    (tmp_path / "c.yaml").write_text(PINNED.replace("namespace: ml", "namespace: other"))  # another object
    twice = PINNED.replace("name: pinned", "name: twice")
    (tmp_path / "d.yaml").write_text(twice + "---\n" + twice.replace("gpu-node-1", "gpu-node-2"))
    code, report = check(run_cli, "a.yaml", "b.yaml", "c.yaml", "d.yaml")

    assert code == 1  # a warning: the findings decide the exit code
    assert messages(report) == [
        (
            "d.yaml",
            12,  # the second document, after PINNED's ten lines and `---`
            "warning",
            "v1 Pod ml/twice is defined again (first at d.yaml:1); the cluster keeps one: the last applied",
        )
    ]
    assert len([f for f in report["findings"] if f["rule"] == "GPA-PL-001"]) == 5  # each still judged
