"""deploy/ (the Kustomize base, its components and overlays, the Helm chart
that wraps them), the container image recipe, and the kubectl plugin.

The manifests are built with the real kubectl (embedded kustomize) and the
chart with the real helm (template, package), both from .tools/bin (the
chart's values, lint and dry run against a real API server:
tests/test_deploy_chart.py); no
API server or container runtime runs here, so the scripts the CronJobs and
the DaemonSet run are run directly, as the image would, against
the stand-in API server (tests/apiserver.py) and a fake NVML (tests/fake_pynvml.py).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

import gpuaudit
from tests.cli_options import command_options

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
TOOLS = ROOT / ".tools" / "bin"
VENV_BIN = Path(sys.executable).parent
SMALL = ROOT / "tests" / "clusters" / "small.json"
SCHEMAS = ROOT / "tests" / "schemas"
BUILDS = {
    "base": DEPLOY,
    "policyreports": DEPLOY / "overlays" / "policyreports",
    "nvml-sampler": DEPLOY / "overlays" / "nvml-sampler",
    "ml-operators": DEPLOY / "overlays" / "ml-operators",
    "report-server": DEPLOY / "overlays" / "report-server",
    "monitoring": DEPLOY / "overlays" / "monitoring",
}
# A neutral placeholder the user replaces (Kustomize `images:`, the chart's
# image.repository): the name `docker build -t` gives a local build.
IMAGE = f"gpuaudit:{gpuaudit.__version__}"
CHART = DEPLOY / "helm" / "gpuaudit"
# The components in the order a site lists them (report-server last, so that
# its pod affinity reaches every CronJob), and the chart's value for each.
COMPONENTS = {
    "policyreports": "policyReports",
    "nvml-sampler": "nvmlSampler",
    "ml-operators": "mlOperators",
    "report-server": "reportServer",
}

# Components the chart turns on with values of their own (not `<value>.enabled`).
MONITORING = {
    "monitoring": [
        "monitoring.prometheusRule.enabled=true",
        "monitoring.serviceMonitor.enabled=true",
        "monitoring.dashboard.enabled=true",
    ]
}


# --- helpers ------------------------------------------------------------------


def tool_path() -> str:
    """PATH with the venv (gpuaudit, kubectl-gpuaudit) and .tools/bin (kubectl) first."""
    return os.pathsep.join([str(VENV_BIN), str(TOOLS), "/usr/local/bin", "/usr/bin", "/bin"])


@pytest.fixture(scope="module")
def kubectl() -> str:
    found = shutil.which("kubectl", path=tool_path())
    if found is None:
        pytest.skip("kubectl not found (scripts/install-kube-tools.py installs it in .tools/bin)")
    return found


def kustomize(kubectl: str, directory: Path) -> list[dict[str, Any]]:
    proc = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.fixture(scope="module")
def built(kubectl: str) -> dict[str, list[dict[str, Any]]]:
    return {name: kustomize(kubectl, path) for name, path in BUILDS.items()}


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("CronJob", "DaemonSet", "Deployment")]


def rules_of(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def script_command(text: str) -> tuple[str, set[str]]:
    """The gpuaudit command a deploy script runs, and every --option it uses
    (outside comments; the scripts' other tools only take single-dash flags)."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    commands = set(re.findall(r"\bgpuaudit ([a-z]+)", code))
    assert len(commands) == 1, f"expected one gpuaudit command, found {commands}"
    return commands.pop(), set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", code))


def scripts() -> dict[str, Path]:
    return {p.name: p for p in DEPLOY.rglob("scripts/*.sh")}


def run_script(name: str, *args: str, env: dict[str, str], timeout: float = 180):
    return subprocess.run(
        ["/bin/sh", str(scripts()[name]), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        # PYTHONPATH: a worktree's gpuaudit first, where the venv's is another checkout's
        env={
            "PATH": tool_path(),
            "HOME": str(env.get("DATA_DIR", "/tmp")),
            **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ},
            **env,
        },
    )


# --- the builds -----------------------------------------------------------------


def test_base_builds_the_objects_the_readme_lists(built):
    docs = built["base"]
    kinds = sorted((d["kind"], d["metadata"]["name"].rsplit("-", 1)[0]) for d in docs)
    assert ("CronJob", "gpuaudit") in kinds  # gpuaudit-audit, gpuaudit-report
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "CronJob"} == {
        "gpuaudit-audit",
        "gpuaudit-report",
    }
    for kind, name in [
        ("Namespace", "gpuaudit"),
        ("ServiceAccount", "gpuaudit"),
        ("ClusterRole", "gpuaudit-reader"),
        ("ClusterRoleBinding", "gpuaudit-reader"),
        ("PersistentVolumeClaim", "gpuaudit-data"),
        ("ConfigMap", "gpuaudit-settings"),
        ("ConfigMap", "gpuaudit-config"),
        ("ConfigMap", "gpuaudit-scripts"),
    ]:
        one(docs, kind, name)
    namespaced = [d for d in docs if d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding")]
    assert {d["metadata"].get("namespace") for d in namespaced} == {"gpuaudit"}
    assert not any(d["kind"] == "DaemonSet" for d in docs)  # the sampler is opt-in
    # so are the operators' custom resources and the report server
    assert not any(d["metadata"]["name"] in ("gpuaudit-ml-operators", "gpuaudit-report-server") for d in docs)


@pytest.mark.parametrize("build", list(BUILDS))
def test_every_build_keeps_the_reader_role_of_deploy_rbac(built, build):
    source = next(
        d for d in yaml.safe_load_all((DEPLOY / "base" / "rbac.yaml").read_text()) if d["kind"] == "ClusterRole"
    )
    assert rules_of(one(built[build], "ClusterRole", "gpuaudit-reader")) == rules_of(source)


def test_only_the_policyreports_overlay_can_write_and_only_policyreports(built):
    for build, docs in built.items():
        writes = {
            (d["metadata"]["name"], g, r, v)
            for d in docs
            if d["kind"] in ("ClusterRole", "Role")
            for g, r, v in rules_of(d)
            if v not in ("get", "list", "watch")
        }
        if build != "policyreports":
            assert writes == set(), build
            continue
        assert {(g, r) for _, g, r, _ in writes} == {
            ("wgpolicyk8s.io", "policyreports"),
            ("wgpolicyk8s.io", "clusterpolicyreports"),
        }
        # create, update and patch to apply; delete to prune the reports no run writes any more
        assert {v for *_, v in writes} <= {"create", "update", "patch", "delete"}
        # its own ServiceAccount, for the kubectl step alone: the daily audit's
        # identity stays read-only, and so does gpuaudit's in the PolicyReport job
        writer = one(docs, "ClusterRoleBinding", "gpuaudit-policyreport-writer")
        assert [s["name"] for s in writer["subjects"]] == ["gpuaudit-policyreports"]
        jobs = {d["metadata"]["name"]: pod_spec(d) for d in docs if d["kind"] == "CronJob"}
        assert jobs["gpuaudit-policyreports-apply"]["serviceAccountName"] == "gpuaudit-policyreports"
        assert jobs["gpuaudit-policyreports"]["serviceAccountName"] == "gpuaudit"
        reader = [b for b in docs if b["kind"] == "ClusterRoleBinding" and b["roleRef"]["name"] == "gpuaudit-reader"]
        assert {s["name"] for b in reader for s in b["subjects"]} == {"gpuaudit"}


def site_build(kubectl: str, tmp_path: Path, components: list[str]) -> list[dict[str, Any]]:
    """The base plus these components, as a site's own kustomization lists
    them (components/images last, as deploy/README.md says)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    rel = os.path.relpath(DEPLOY, site)
    (site / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"{rel}/base"],
                "components": [f"{rel}/components/{name}" for name in [*components, "images"]],
            }
        )
    )
    return kustomize(kubectl, site)


def test_every_component_composes_in_one_kustomization(kubectl, tmp_path):
    # the opt-in components, and the images every build pins
    assert sorted(p.name for p in (DEPLOY / "components").iterdir()) == sorted([*COMPONENTS, *MONITORING, "images"])
    docs = site_build(kubectl, tmp_path, list(COMPONENTS))
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("CronJob", "gpuaudit-policyreports") in names
    assert ("DaemonSet", "gpuaudit-nvml-sampler") in names
    assert ("ClusterRole", "gpuaudit-ml-operators") in names
    assert ("Deployment", "gpuaudit-report-server") in names
    script_files = one(docs, "ConfigMap", "gpuaudit-scripts")["data"]
    assert set(script_files) == {"audit.sh", "report.sh", "policyreports.sh", "sample.sh"}
    # every CronJob that mounts the ReadWriteOnce volume runs beside the server
    for job in (d for d in docs if d["kind"] == "CronJob"):
        term = pod_spec(job)["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "report-server"


def test_workloads_reference_the_generated_config_maps(built):
    for build, docs in built.items():
        generated = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
        for obj in workloads(docs):
            spec = pod_spec(obj)
            used = {v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v}
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                used |= {e["configMapRef"]["name"] for e in container.get("envFrom", [])}
            assert used <= generated, (build, obj["metadata"]["name"], used - generated)
            claims = {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
            pvcs = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
            assert claims <= pvcs, (build, claims - pvcs)


def test_every_gpuaudit_image_is_this_version(built):
    for docs in built.values():
        for obj in workloads(docs):
            spec = pod_spec(obj)
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                if "gpuaudit" in container["image"]:
                    assert container["image"] == IMAGE


def _restricted(spec: dict[str, Any], container: dict[str, Any]) -> None:
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert not sc.get("privileged")
    assert "limits" in container["resources"] and "memory" in container["resources"]["limits"]


def test_cronjobs_run_restricted(built):
    for docs in built.values():
        for job in (d for d in docs if d["kind"] == "CronJob"):
            spec = pod_spec(job)
            assert not any(spec.get(k) for k in ("hostPID", "hostNetwork", "hostIPC"))
            assert not any("hostPath" in v for v in spec["volumes"])
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                _restricted(spec, container)
            # a read-only root filesystem needs somewhere to write temporary files
            mounts = {m["mountPath"] for c in spec["containers"] for m in c["volumeMounts"]}
            assert "/tmp" in mounts
            assert job["spec"]["concurrencyPolicy"] == "Forbid"


def test_the_sampler_has_exactly_the_privileges_the_readme_explains(built):
    docs = built["nvml-sampler"]
    daemon = one(docs, "DaemonSet", "gpuaudit-nvml-sampler")
    spec = pod_spec(daemon)
    (container,) = spec["containers"]
    _restricted(spec, container)  # as non-root, no capabilities, read-only root
    assert spec["hostPID"] is True
    assert not spec.get("hostNetwork") and not spec.get("hostIPC")
    assert spec["automountServiceAccountToken"] is False
    host_paths = [v for v in spec["volumes"] if "hostPath" in v]
    assert [v["hostPath"]["path"] for v in host_paths] == ["/proc"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == host_paths[0]["name"])
    assert mount["readOnly"] is True
    assert not any("nvidia.com/gpu" in r for r in container["resources"].get("limits", {}))
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"

    readme = (DEPLOY / "README.md").read_text()
    section = readme[readme.index("## The NVML sampler") :]
    section = section[: section.find("\n## ", 3) if "\n## " in section[3:] else None]
    explained = [
        "hostPID",
        "/proc",
        spec["runtimeClassName"],
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        *spec["nodeSelector"],
        *(t["key"] for t in spec["tolerations"]),
        "privileged",  # the namespace's Pod Security level
        "ReadWriteMany",
    ]
    missing = [word for word in explained if word not in section]
    assert missing == [], f"deploy/README.md does not explain {missing}"
    namespace = one(docs, "Namespace", "gpuaudit")["metadata"]["labels"]
    assert namespace["pod-security.kubernetes.io/enforce"] == "privileged"
    assert namespace["pod-security.kubernetes.io/warn"] == "restricted"


def test_every_option_the_deploy_scripts_use_exists(built):
    for name, path in scripts().items():
        command, options = script_command(path.read_text())
        unknown = options - command_options(command)
        assert unknown == set(), f"{name}: gpuaudit {command} has no {sorted(unknown)}"
    # and the arguments the manifests give the scripts
    for docs in built.values():
        for obj in workloads(docs):
            spec = pod_spec(obj)
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                cmd = container.get("command") or []
                if len(cmd) == 2 and cmd[0] == "/bin/sh":
                    script = scripts()[Path(cmd[1]).name]
                    command, _ = script_command(script.read_text())
                    flags = {a.split("=")[0] for a in container.get("args", []) if a.startswith("--")}
                    assert flags <= command_options(command), (obj["metadata"]["name"], flags)


def test_scripts_are_valid_posix_sh():
    for path in scripts().values():
        proc = subprocess.run(["/bin/sh", "-n", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{path}: {proc.stderr}"


# --- the scripts, run as the CronJobs run them ----------------------------------


@pytest.fixture
def small_cluster(apiserver):
    return apiserver.load(json.loads(SMALL.read_text()))


def base_env(data: Path, **extra: str) -> dict[str, str]:
    return {
        "DATA_DIR": str(data),
        "GPUAUDIT_CONFIG": str(DEPLOY / "base" / "config" / "gpuaudit.yaml"),
        **extra,
    }


def test_audit_script_records_the_run_and_succeeds_with_findings(small_cluster, kubeconfig, tmp_path):
    data = tmp_path / "data"
    proc = run_script("audit.sh", "--kubeconfig", str(kubeconfig), env=base_env(data))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "PLACEMENT" in proc.stdout  # the text report, for kubectl logs
    (audit,) = (data / "audits").glob("*.json")
    report = json.loads(audit.read_text())
    assert report["version"] == 1 and report["summary"]["by_severity"]["high"] > 0
    (snapshot,) = (data / "snapshots").glob("*.json.gz")
    assert snapshot.name.removesuffix(".json.gz") == audit.stem
    assert json.loads(gzip.decompress(snapshot.read_bytes()))["kind"] == "gpuaudit-snapshot"
    assert (data / "history.db").stat().st_size > 0

    # the saved snapshot replays to the same findings
    replay = subprocess.run(
        [
            str(VENV_BIN / "gpuaudit"),
            "audit",
            "--snapshot",
            str(snapshot),
            "--format",
            "json",
            "--config",
            base_env(data)["GPUAUDIT_CONFIG"],
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert len(json.loads(replay.stdout)["findings"]) == len(report["findings"])


def test_audit_script_writes_the_metrics_the_server_serves_and_notifies(small_cluster, kubeconfig, tmp_path, capture):
    """reports/metrics.txt for /metrics; the webhook and the Pushgateway from
    the env vars the chart sets, empty ones off; a failed notification fails
    the Job (exit 2) with every file written."""
    from tests.test_openmetrics import promtool_check

    hook = capture()
    data = tmp_path / "data"
    env = base_env(
        data, GPUAUDIT_WEBHOOK_URL=f"{hook.url}/services/secret", GPUAUDIT_WEBHOOK_FORMAT="json",
        GPUAUDIT_REPORT_URL="", GPUAUDIT_PUSHGATEWAY_URL="",
    )  # fmt: skip
    proc = run_script("audit.sh", "--kubeconfig", str(kubeconfig), env=env)
    assert proc.returncode == 0, proc.stderr
    promtool_check((data / "reports" / "metrics.txt").read_text())
    [request] = hook.requests
    assert json.loads(request["body"])["command"] == "audit"

    refused = capture(lambda handler: handler.send_error(503))
    env["GPUAUDIT_WEBHOOK_URL"] = f"{refused.url}/services/secret"
    proc = run_script("audit.sh", "--kubeconfig", str(kubeconfig), env=env)
    assert proc.returncode != 0
    assert "notification not sent: webhook" in proc.stderr and "secret" not in proc.stderr
    assert len(list((data / "audits").glob("*.json"))) == 2  # this run's audit is written all the same


def test_audit_script_fails_the_job_when_the_audit_cannot_run(tmp_path):
    bad = tmp_path / "gpuaudit.yaml"
    bad.write_text("fail_on: sometimes\n")
    proc = run_script(
        "audit.sh",
        "--kubeconfig",
        str(tmp_path / "none"),
        env={**base_env(tmp_path / "d"), "GPUAUDIT_CONFIG": str(bad)},
    )
    assert proc.returncode != 0
    assert "gpuaudit.yaml" in proc.stderr


def test_audit_script_keeps_only_recent_results(small_cluster, kubeconfig, tmp_path):
    data = tmp_path / "data"
    (data / "audits").mkdir(parents=True)
    old = data / "audits" / "2020-01-01T000000Z.json"
    old.write_text("{}")
    stamp = time.time() - 100 * 86400
    os.utime(old, (stamp, stamp))
    proc = run_script("audit.sh", "--kubeconfig", str(kubeconfig), env=base_env(data, KEEP_DAYS="90"))
    assert proc.returncode == 0, proc.stderr
    assert not old.exists() and len(list((data / "audits").glob("*.json"))) == 1


def _month_before(moment: datetime) -> datetime:
    return moment.replace(day=1) - timedelta(days=1)


def test_report_script_reports_the_month_that_ended(small_cluster, kubeconfig, tmp_path):
    data = tmp_path / "data"
    assert run_script("audit.sh", "--kubeconfig", str(kubeconfig), env=base_env(data)).returncode == 0
    (this_month,) = (data / "snapshots").glob("*.json.gz")
    # an audit of the last day of last month, as the daily CronJob left it
    last_day = _month_before(datetime.now(timezone.utc)).replace(hour=3, minute=17, second=0, microsecond=0)
    snapshot = json.loads(gzip.decompress(this_month.read_bytes()))
    snapshot["collected_at"] = last_day.strftime("%Y-%m-%dT%H:%M:%SZ")
    earlier = data / "snapshots" / f"{last_day:%Y-%m-%dT%H%M%SZ}.json.gz"
    earlier.write_bytes(gzip.compress(json.dumps(snapshot).encode()))

    # no cluster source: it must not need one when a snapshot exists
    proc = run_script("report.sh", env=base_env(data))
    assert proc.returncode == 0, proc.stderr
    period = f"{last_day:%Y-%m}"
    out = data / "reports" / period
    assert sorted(p.name for p in out.iterdir()) == ["metrics.txt", "report.html", "report.json", "report.md"]
    report = json.loads((out / "report.json").read_text())
    assert report["period"]["name"] == period
    assert report["collected_at"] == snapshot["collected_at"]
    assert proc.stdout == (out / "report.md").read_text()  # the Markdown report in the Job log


def test_report_script_first_run_collects_from_the_cluster(small_cluster, kubeconfig, tmp_path):
    data = tmp_path / "data"
    proc = run_script("report.sh", "--kubeconfig", str(kubeconfig), env=base_env(data))
    assert proc.returncode == 0, proc.stderr
    month = datetime.now(timezone.utc).strftime("%Y-%m")
    assert (data / "reports" / month / "report.html").exists()


def _crd_schema(name: str) -> dict[str, Any]:
    crd = yaml.safe_load((SCHEMAS / f"wgpolicyk8s.io_{name}.yaml").read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2")
    return version["schema"]["openAPIV3Schema"]


def test_policyreports_script_writes_reports_the_crds_accept(small_cluster, kubeconfig, tmp_path):
    data = tmp_path / "data"
    assert run_script("audit.sh", "--kubeconfig", str(kubeconfig), env=base_env(data)).returncode == 0
    out = tmp_path / "policyreports.yaml"
    # --in-cluster as in the CronJob: it must replay the snapshot, not read the cluster
    proc = run_script("policyreports.sh", "--in-cluster", env=base_env(data, REPORTS_FILE=str(out)))
    assert proc.returncode == 0, proc.stderr
    docs = list(yaml.safe_load_all(out.read_text()))
    schemas = {"PolicyReport": _crd_schema("policyreports"), "ClusterPolicyReport": _crd_schema("clusterpolicyreports")}
    for doc in docs:
        jsonschema.validate(doc, schemas[doc["kind"]])
    namespaces = {d["metadata"].get("namespace") for d in docs if d["kind"] == "PolicyReport"}
    assert {"inference", "research", "notebooks"} <= namespaces
    failed = sum(d["summary"]["fail"] for d in docs)
    (audit,) = (data / "audits").glob("*.json")
    assert failed == len(json.loads(audit.read_text())["findings"])


SHIM = """
import sys
from tests.fake_pynvml import FakeGpu, FakeNvml, FakeProcess
GIB = 2**30
sys.modules[__name__] = FakeNvml([FakeGpu(
    "NVIDIA A100-SXM4-80GB", "GPU-aaaaaaaa-0000-0000-0000-000000000000",
    total_bytes=80 * GIB, used_bytes=30 * GIB, util=(0, 0), pcie_kbps=(10, 20),
    processes=[FakeProcess(4242, 30 * GIB)], mig=[])])
"""


def test_sampler_script_feeds_the_audit(small_cluster, kubeconfig, tmp_path):
    """sample.sh on a node (fake NVML: one A100 holding 30 GiB at 0 % for
    pod llm-serving-...-2xk4p), then audit.sh reading its files."""
    pod = next(p for p in json.loads(SMALL.read_text())["pods"] if p["metadata"]["name"].endswith("2xk4p"))
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pynvml.py").write_text(SHIM)
    proc_root = tmp_path / "proc" / "4242"
    proc_root.mkdir(parents=True)
    (proc_root / "cgroup").write_text(f"0::/kubepods/pod{pod['metadata']['uid']}/{'ab' * 32}\n")
    samples = tmp_path / "samples"
    env = {
        "PATH": tool_path(),
        "HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(shim), str(ROOT)]),
        "SAMPLES_DIR": str(samples),
        "NODE_NAME": "gpu-a100-0",
        "PROC_ROOT": str(tmp_path / "proc"),
        "SAMPLE_INTERVAL": "100ms",
        "SAMPLE_FILE_DURATION": "1s",
    }
    sampler = subprocess.Popen(
        ["/bin/sh", str(scripts()["sample.sh"])],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(samples.glob("*.jsonl"))) < 2 and time.monotonic() < deadline:
            assert sampler.poll() is None, sampler.stderr.read() if sampler.stderr else ""
            time.sleep(0.2)
    finally:
        os.killpg(sampler.pid, signal.SIGTERM)
        sampler.wait(timeout=30)
    done = sorted(samples.glob("*.jsonl"))
    assert len(done) >= 2 and all(p.name.startswith("gpu-a100-0-") for p in done)
    # the file being written when the sampler stopped is never read
    (samples / "gpu-a100-0-9999-12-31T000000Z.jsonl.part").write_text('{"kind": "gpu", "ts": ')

    data = tmp_path / "data"
    # a few seconds of samples: below the rules' default min_span_hours (1 h),
    # which would make it insufficient data, not a verdict
    config = tmp_path / "gpuaudit.yaml"
    config.write_text(
        (DEPLOY / "base" / "config" / "gpuaudit.yaml").read_text() + "\nparams:\n  GPA-ME-003: {min_span_hours: 0}\n"
    )
    env = base_env(data, SAMPLES_DIR=str(samples), GPUAUDIT_CONFIG=str(config))
    proc = run_script("audit.sh", "--kubeconfig", str(kubeconfig), env=env)
    assert proc.returncode == 0, proc.stderr
    (audit,) = (data / "audits").glob("*.json")
    report = json.loads(audit.read_text())
    assert report["summary"]["telemetry"]["source"] == "nvml"
    # 30 GiB resident at 0 %: a GPU essentially never used
    resident = [f for f in report["findings"] if f["rule"] == "GPA-ME-003"]
    assert [f["evidence"]["pod"] for f in resident] == [pod["metadata"]["name"]]


# --- the image ------------------------------------------------------------------


def _gen_constraints():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_constraints", ROOT / "scripts" / "gen_constraints.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_constraints_pin_every_runtime_dependency():
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    tomllib = pytest.importorskip("tomllib")
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    needed, _ = _gen_constraints().runtime_closure()
    assert set(needed) <= set(pins), f"unpinned: {sorted(set(needed) - set(pins))}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for text in project["dependencies"]:
        requirement = Requirement(text)
        pinned = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(pinned), f"{requirement} excludes the pinned {pinned}"
    test_only = {canonicalize_name(Requirement(t).name) for t in project["optional-dependencies"]["test"]}
    assert not test_only & set(pins)


def test_dockerfile_is_what_deploy_expects(built):
    dockerfile = (ROOT / "Dockerfile").read_text()
    instructions = [line.split(None, 1) for line in dockerfile.splitlines() if line and not line.startswith(("#", " "))]
    assert instructions[0] == ["FROM", "python:3.12-slim"]
    user = next(arg for op, arg in instructions if op == "USER").split(":")[0]
    for docs in built.values():
        for obj in workloads(docs):
            assert str(pod_spec(obj)["securityContext"]["runAsUser"]) == user
    assert next(arg for op, arg in instructions if op == "ENTRYPOINT") == '["gpuaudit"]'
    assert "--constraint constraints.txt" in dockerfile
    copied = {src for op, arg in instructions if op == "COPY" for src in arg.split()[:-1]}
    assert {"gpuaudit", "policies", "remediations", "constraints.txt", "pyproject.toml"} <= copied
    allowed = {
        line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")
    }
    assert copied <= allowed  # the build context holds what the image copies


# --- the kubectl plugin -----------------------------------------------------------


def plugin(kubectl: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "PATH": tool_path(), "NO_COLOR": "1"},
    )


def direct(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "gpuaudit"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "NO_COLOR": "1"},
    )


def test_kubectl_finds_the_plugin(kubectl):
    listed = plugin(kubectl, "plugin", "list")
    assert str(VENV_BIN / "kubectl-gpuaudit") in listed.stdout, listed.stdout + listed.stderr
    usage = plugin(kubectl, "gpuaudit", "--help")
    assert usage.returncode == 0 and usage.stdout.startswith("Usage: kubectl gpuaudit ")


@pytest.mark.parametrize(
    "args", [("rules", "list"), ("check", "examples/"), ("check", "examples/", "--format", "sarif")], ids=" ".join
)
def test_kubectl_gpuaudit_is_gpuaudit(kubectl, args):
    through_kubectl = plugin(kubectl, "gpuaudit", *args)
    assert "Traceback" not in through_kubectl.stderr
    expected = direct(*args)
    assert through_kubectl.returncode == expected.returncode
    assert through_kubectl.stdout == expected.stdout and through_kubectl.stdout


def test_kubectl_gpuaudit_audit_reads_the_cluster(kubectl, small_cluster, kubeconfig, tmp_path):
    args = ("audit", "--kubeconfig", str(kubeconfig), "--format", "json")
    through_kubectl = plugin(kubectl, "gpuaudit", *args, cwd=tmp_path)
    assert through_kubectl.returncode == 1, through_kubectl.stderr  # high findings
    report = json.loads(through_kubectl.stdout)
    assert report["summary"]["cluster"] and report["findings"]
    expected = json.loads(direct(*args, cwd=tmp_path).stdout)
    assert [f["rule"] for f in report["findings"]] == [f["rule"] for f in expected["findings"]]
    bad = plugin(kubectl, "gpuaudit", "audit", "--no-such-option")
    assert bad.returncode == 2 and "kubectl gpuaudit audit --help" in bad.stderr


def test_the_readme_authentication_patch_builds(kubectl, tmp_path):
    readme = (DEPLOY / "README.md").read_text()
    section = readme[readme.index("### Prometheus with authentication") :]
    block = section[section.index("```yaml\n") + 8 : section.index("```\n", section.index("```yaml"))]
    site = tmp_path / "site"
    site.mkdir()
    config = yaml.safe_load(block)
    config.update(
        apiVersion="kustomize.config.k8s.io/v1beta1",
        kind="Kustomization",
        resources=[os.path.relpath(DEPLOY, site)],
    )
    (site / "kustomization.yaml").write_text(yaml.safe_dump(config))
    job = one(kustomize(kubectl, site), "CronJob", "gpuaudit-audit")
    (container,) = pod_spec(job)["containers"]
    flag, _, path = container["args"][-1].partition("=")
    assert flag in command_options("audit")
    assert any(path.startswith(m["mountPath"]) for m in container["volumeMounts"])


# --- the opt-in ML-operators role and the report server ---------------------------


def test_ml_operators_component_grants_list_on_every_custom_resource_that_owns_pods(built):
    """Exactly the `plural:` entries of gpuaudit/data/podspecs.yaml (what the
    collector may list), `list` only, bound to the audit's ServiceAccount."""
    from gpuaudit.kube import owners

    docs = built["ml-operators"]
    role = one(docs, "ClusterRole", "gpuaudit-ml-operators")
    expected = {(group, plural, "list") for (group, _), plural in owners.plurals().items()}
    assert rules_of(role) == expected
    binding = one(docs, "ClusterRoleBinding", "gpuaudit-ml-operators")
    assert binding["roleRef"]["name"] == "gpuaudit-ml-operators"
    assert [(s["kind"], s["namespace"], s["name"]) for s in binding["subjects"]] == [
        ("ServiceAccount", "gpuaudit", "gpuaudit")
    ]
    # the base grants none of them: without the component they are warnings
    base = rules_of(one(built["base"], "ClusterRole", "gpuaudit-reader"))
    assert not {(g, r) for g, r, _ in expected} & {(g, r) for g, r, _ in base}


def test_report_server_serves_the_reports_read_only(built):
    docs = built["report-server"]
    server = one(docs, "Deployment", "gpuaudit-report-server")
    spec = pod_spec(server)
    (container,) = spec["containers"]
    _restricted(spec, container)  # non-root, no capabilities, read-only root filesystem
    assert spec["automountServiceAccountToken"] is False  # no Kubernetes API token
    assert not any(spec.get(k) for k in ("hostPID", "hostNetwork", "hostIPC"))
    assert container["image"] == IMAGE
    # the data volume, read-only twice over: the claim and the mount
    (volume,) = spec["volumes"]
    assert volume["persistentVolumeClaim"] == {"claimName": "gpuaudit-data", "readOnly": True}
    assert [(m["name"], m["readOnly"]) for m in container["volumeMounts"]] == [("data", True)]
    # it serves reports/ only, never the snapshots (the cluster's objects),
    # and the last audit's metrics at /metrics (tests/test_serve.py)
    command = container["command"]
    assert command[:3] == ["gpuaudit", "serve", "/data/reports"]
    assert [p["name"] for p in container["ports"]] == ["http"]  # the ServiceMonitor's port
    service = one(docs, "Service", "gpuaudit-report-server")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == server["spec"]["selector"]["matchLabels"]
    assert server["spec"]["strategy"] == {"type": "Recreate"}  # ReadWriteOnce
    for job in (d for d in docs if d["kind"] == "CronJob"):
        assert "podAffinity" in pod_spec(job)["affinity"], job["metadata"]["name"]


def test_report_server_command_serves_a_reports_folder(tmp_path):
    """The container's command, run here: it lists reports/ and nothing above."""
    import socket
    import urllib.request

    (tmp_path / "reports" / "2026-11").mkdir(parents=True)
    (tmp_path / "reports" / "2026-11" / "report.html").write_text("<h1>review</h1>")
    (tmp_path / "snapshots").mkdir()
    (tmp_path / "snapshots" / "x.json.gz").write_bytes(b"secret-ish")
    server = one(kustomize_cached(), "Deployment", "gpuaudit-report-server")
    command = list(pod_spec(server)["containers"][0]["command"])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command[command.index("8080")] = str(port)
    command[command.index("/data/reports")] = str(tmp_path / "reports")
    command[0] = str(Path(sys.executable).with_name("gpuaudit"))
    proc = subprocess.Popen([*command, "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/2026-11/report.html", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert page == b"<h1>review</h1>"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/../snapshots/x.json.gz", timeout=2)
        with pytest.raises(urllib.error.HTTPError):  # no metrics before the first audit
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


_CACHE: dict[str, list[dict[str, Any]]] = {}


def kustomize_cached() -> list[dict[str, Any]]:
    if "report-server" not in _CACHE:
        found = shutil.which("kubectl", path=tool_path())
        if found is None:
            pytest.skip("kubectl not found")
        _CACHE["report-server"] = kustomize(found, BUILDS["report-server"])
    return _CACHE["report-server"]


# --- the Helm chart: the same manifests ------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> str:
    found = shutil.which("helm", path=tool_path())
    if found is None:
        pytest.skip("helm not found (scripts/install-kube-tools.py installs it in .tools/bin)")
    return found


def helm_run(helm: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={
            "PATH": tool_path(),
            "HOME": str(cwd),
            "HELM_CACHE_HOME": str(cwd / ".helm-cache"),
            "HELM_CONFIG_HOME": str(cwd / ".helm-config"),
            "HELM_DATA_HOME": str(cwd / ".helm-data"),
        },
    )


def helm_template(helm: str, tmp_path: Path, *sets: str, chart: Path = CHART) -> list[dict[str, Any]]:
    args = [a for s in sets for a in ("--set", s)]
    proc = helm_run(helm, "template", "gpuaudit", str(chart), *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


_GENERATED = re.compile(r"\b(gpuaudit-(?:settings|config|scripts))-[a-z0-9]{10}\b")


def by_identity(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Objects by (kind, namespace, name), Kustomize's generated-name hashes
    removed (names and references): Helm names the ConfigMaps plainly."""
    out = {}
    for doc in docs:
        doc = json.loads(_GENERATED.sub(r"\1", json.dumps(doc)))
        key = (doc["kind"], doc["metadata"].get("namespace") or "", doc["metadata"]["name"])
        assert key not in out, key
        out[key] = doc
    return out


# The labels only Helm adds (templates/_values.tpl): every object and pod the
# chart renders carries them, deploy/'s do not. Everything else must be equal.
HELM_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
)


def label_holders(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The metadata of an object and, for a workload, of its pods."""
    holders = [obj["metadata"]]
    if obj["kind"] in ("CronJob", "DaemonSet", "Deployment"):
        spec = obj["spec"]["jobTemplate"]["spec"] if obj["kind"] == "CronJob" else obj["spec"]
        holders.append(spec["template"]["metadata"])
    return holders


def without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as deploy/ has it: Helm's labels, which must be there, removed."""
    obj = json.loads(json.dumps(obj))
    for metadata in label_holders(obj):
        labels = metadata.get("labels") or {}
        missing = [key for key in HELM_LABELS if key not in labels]
        assert missing == [], f"{obj['kind']} {obj['metadata']['name']}: no {missing}"
        for key in HELM_LABELS:
            del labels[key]
    return obj


def _same_objects(kustomized: list[dict[str, Any]], templated: list[dict[str, Any]]) -> None:
    want, got = by_identity(kustomized), by_identity([without_helm_labels(d) for d in templated])
    assert set(got) == set(want)
    for key in want:
        if key[0] in ("ClusterRole", "Role"):
            assert rules_of(got[key]) == rules_of(want[key]), key
            assert got[key]["rules"] == want[key]["rules"], key
        assert got[key] == want[key], key


def test_helm_template_with_defaults_is_the_kustomize_base(helm, built, tmp_path):
    _same_objects(built["base"], helm_template(helm, tmp_path))


@pytest.mark.parametrize("component", list(COMPONENTS))
def test_helm_template_with_a_component_is_its_overlay(helm, built, tmp_path, component):
    _same_objects(built[component], helm_template(helm, tmp_path, f"{COMPONENTS[component]}.enabled=true"))


def test_helm_template_with_every_component_is_base_plus_components(helm, kubectl, tmp_path):
    kustomized = site_build(kubectl, tmp_path, list(COMPONENTS))
    templated = helm_template(helm, tmp_path, *(f"{value}.enabled=true" for value in COMPONENTS.values()))
    _same_objects(kustomized, templated)


def test_helm_values_set_the_image_namespace_settings_and_config(helm, tmp_path):
    docs = helm_template(
        helm,
        tmp_path,
        "image.repository=registry.example.com/team/gpuaudit",
        "image.tag=9.9.9",
        "image.pullPolicy=Always",
        "namespace.name=gpu-audit",
        "settings.WINDOW=24h",
        "settings.KEEP_DAYS=30",
        "config=fail_on: critical",
        *(f"{value}.enabled=true" for value in COMPONENTS.values()),
    )
    for obj in workloads(docs):
        spec = pod_spec(obj)
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            if container["name"] in ("apply", "label", "prune"):  # the kubectl image of the PolicyReports job
                assert container["image"].startswith("registry.k8s.io/kubectl:")
                continue
            assert container["image"] == "registry.example.com/team/gpuaudit:9.9.9"
            assert container["imagePullPolicy"] == "Always"
    cluster_scoped = ("Namespace", "ClusterRole", "ClusterRoleBinding")
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] not in cluster_scoped} == {"gpu-audit"}
    assert one(docs, "Namespace", "gpu-audit")
    for binding in (d for d in docs if d["kind"] == "ClusterRoleBinding"):
        assert {s["namespace"] for s in binding["subjects"]} == {"gpu-audit"}
    settings = one(docs, "ConfigMap", "gpuaudit-settings")["data"]
    assert settings["WINDOW"] == "24h" and settings["KEEP_DAYS"] == "30"
    assert settings["SAMPLES_DIR"] == "/samples"  # the sampler's, merged as Kustomize merges it
    assert one(docs, "ConfigMap", "gpuaudit-config")["data"] == {"gpuaudit.yaml": "fail_on: critical"}
    # without the namespace: the user's own (with the Pod Security labels)
    docs = helm_template(helm, tmp_path, "namespace.create=false")
    assert not any(d["kind"] == "Namespace" for d in docs)


def test_helm_package_carries_the_manifests_it_links_to(helm, tmp_path):
    """files/ links to deploy/base and deploy/components; a packaged chart
    holds their contents and renders the same."""
    proc = helm_run(helm, "package", str(CHART), "--destination", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (archive,) = tmp_path.glob("gpuaudit-*.tgz")
    assert archive.name == f"gpuaudit-{gpuaudit.__version__}.tgz"
    sets = [f"{value}.enabled=true" for value in COMPONENTS.values()]
    assert by_identity(helm_template(helm, tmp_path, *sets, chart=archive)) == by_identity(
        helm_template(helm, tmp_path, *sets)
    )


def test_chart_version_is_gpuaudits():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == chart["version"] == gpuaudit.__version__
    assert (CHART / "files" / "base").resolve() == (DEPLOY / "base").resolve()
    assert (CHART / "files" / "components").resolve() == (DEPLOY / "components").resolve()


def test_monitoring_is_opt_in_and_the_chart_installs_what_the_overlay_does(helm, built, tmp_path):
    """The PrometheusRule, the ServiceMonitor of the report server's /metrics
    and the dashboard ConfigMap Grafana's sidecar loads: none by default, the
    same objects from the chart and from deploy/overlays/monitoring."""
    kinds = {"PrometheusRule", "ServiceMonitor"}
    assert not [d for d in helm_template(helm, tmp_path) if d["kind"] in kinds]
    assert not [d for d in built["report-server"] if d["kind"] in kinds]
    docs = built["monitoring"]
    rule = one(docs, "PrometheusRule", "gpuaudit")
    assert {g["name"] for g in rule["spec"]["groups"]} == {"gpuaudit-gpu", "gpuaudit-availability", "gpuaudit-alerts"}
    monitor = one(docs, "ServiceMonitor", "gpuaudit-report-server")
    service = one(docs, "Service", "gpuaudit-report-server")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "1m"}]
    assert [p["name"] for p in service["spec"]["ports"]] == ["http"]
    dashboard = one(docs, "ConfigMap", "gpuaudit-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["gpuaudit-dashboard.json"])["uid"] == "gpuaudit-gpus"
    templated = helm_template(helm, tmp_path, "reportServer.enabled=true", *MONITORING["monitoring"])
    _same_objects(docs, templated)
    labelled = helm_template(
        helm,
        tmp_path,
        *MONITORING["monitoring"],
        "monitoring.prometheusRule.labels.release=kps",
        "monitoring.serviceMonitor.interval=30s",
    )
    assert one(labelled, "PrometheusRule", "gpuaudit")["metadata"]["labels"]["release"] == "kps"
    assert one(labelled, "ServiceMonitor", "gpuaudit-report-server")["spec"]["endpoints"][0]["interval"] == "30s"


def test_the_monitoring_component_holds_what_gpuaudit_monitoring_writes(run_cli, tmp_path):
    """The chart and the component embed the files `gpuaudit monitoring` makes
    from the default policy pack: regenerate them when a rule changes."""
    folder = DEPLOY / "components" / "monitoring"
    assert run_cli("monitoring", "rules", "--namespace", "gpuaudit", "--out", str(tmp_path)).returncode == 0
    assert run_cli("monitoring", "dashboard", "--out", str(tmp_path)).returncode == 0
    for name in ("gpuaudit-prometheusrule.yaml", "gpuaudit-dashboard.json"):
        assert (folder / name).read_text() == (tmp_path / name).read_text(), (
            f"{name} is stale: gpuaudit monitoring rules|dashboard --out deploy/components/monitoring"
        )
