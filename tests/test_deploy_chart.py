"""The Helm chart's values (deploy/helm/gpuaudit): the schema that refuses a
key it does not know, what each value changes in the rendering, Helm's
standard labels, NOTES.txt, and each rendering of the values files in ci/
accepted by a real kube-apiserver (server-side dry run, strict field
validation) of tests/controlplane, with the CRDs of tests/schemas installed.

That the defaults render exactly deploy/ (less Helm's labels) is
tests/test_deploy.py's; everything here runs the real helm and kubectl of
.tools/bin.
"""

# The fixtures helm and kubectl are tests/test_deploy.py's, imported by name.
# ruff: noqa: F811

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

import gpuaudit
from tests.cli_options import command_options
from tests.controlplane import controlplane
from tests.test_deploy import (  # noqa: F401
    CHART,
    HELM_LABELS,
    ROOT,
    helm,
    helm_run,
    kubectl,
    label_holders,
    pod_spec,
    script_command,
    scripts,
    workloads,
)

CI = CHART / "ci"
CI_FILES = sorted(CI.glob("*-values.yaml"))
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
CRDS = sorted((ROOT / "tests" / "schemas").glob("*.yaml"))
RELEASE = "gpuaudit-ci"


def render(helm: str, tmp_path: Path, *values: Path, sets: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    args = [a for f in values for a in ("--values", str(f))] + [a for s in sets for a in ("--set", s)]
    proc = helm_run(helm, "template", RELEASE, str(CHART), *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def ci(name: str) -> Path:
    return CI / f"{name}-values.yaml"


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(obj)
    return [*spec.get("initContainers", []), *spec["containers"]]


def runs_gpuaudit(container: dict[str, Any]) -> bool:
    """A container that runs a deploy/ script (gpuaudit), not http.server or kubectl."""
    return (container.get("command") or [""])[0] == "/bin/sh"


# --- the schema -------------------------------------------------------------------


def _object_schemas(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if "$ref" in schema:
        return
    if schema.get("type") == "object":
        yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from _object_schemas(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _object_schemas(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _object_schemas(schema["additionalProperties"], f"{path}.*")
    for name, sub in (schema.get("definitions") or {}).items():
        yield from _object_schemas(sub, f"#{name}")


# Objects whose insides are Kubernetes' own types: the API server checks them
# (the dry run below), and `global` is Helm's, for charts used as subcharts.
KUBERNETES_TYPES = {
    "$.global",
    "#affinity.nodeAffinity",
    "#affinity.podAffinity",
    "#affinity.podAntiAffinity",
    "#envVar.valueFrom",
    "$.networkPolicy.extraEgress[].to[]",
    "$.networkPolicy.extraEgress[].ports[]",
}


def test_schema_is_draft_07_and_every_object_is_closed():
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    open_objects, free_maps = [], []
    for path, schema in _object_schemas(SCHEMA, "$"):
        extra = schema.get("additionalProperties", True)
        if isinstance(extra, dict):
            free_maps.append(path)  # annotations, labels, settings, nodeSelector: any key, typed values
        elif extra is not False and path not in KUBERNETES_TYPES:
            open_objects.append(path)
    assert open_objects == []
    assert "$.serviceAccount.annotations" in free_maps and "$.settings" in free_maps


# Kubernetes' types (ResourceRequirements, Affinity...): values.yaml shows
# the parts deploy/ sets, not every field the type has.
KUBERNETES_DEFINITIONS = {"resources", "affinity", "toleration", "envVar", "envFrom"}


def _definition(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema a $ref names (leaves for Kubernetes' types), or the schema."""
    if "$ref" not in schema:
        return schema
    name = schema["$ref"].rsplit("/", 1)[1]
    return {} if name in KUBERNETES_DEFINITIONS else SCHEMA["definitions"][name]


def _keys(values: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
    """Every key of values.yaml under the schema's closed objects."""
    schema = _definition(schema)
    if not isinstance(values, dict) or schema.get("additionalProperties") is not False:
        return
    for key, value in values.items():
        yield f"{path}{key}"
        yield from _keys(value, schema["properties"].get(key, {}), f"{path}{key}.")


def _schema_keys(schema: dict[str, Any], path: str) -> Iterator[str]:
    schema = _definition(schema)
    if schema.get("additionalProperties") is not False:
        return
    for key, sub in schema["properties"].items():
        yield f"{path}{key}"
        yield from _schema_keys(sub, f"{path}{key}.")


def test_values_yaml_and_the_schema_name_the_same_keys():
    """A value without a schema entry is refused by helm; a schema entry
    without a default in values.yaml is one nobody sees."""
    in_values = set(_keys(VALUES, SCHEMA, ""))
    in_schema = set(_schema_keys(SCHEMA, "")) - {"global"}
    assert sorted(in_schema - in_values) == [] and sorted(in_values - in_schema) == []
    jsonschema.Draft7Validator(SCHEMA).validate(VALUES)


@pytest.mark.parametrize("values", CI_FILES, ids=lambda p: p.name)
def test_each_ci_values_file_meets_the_schema_and_lints_strict(helm, tmp_path, values):
    """helm lint checks the values, merged with values.yaml, against the schema."""
    proc = helm_run(helm, "lint", "--strict", str(CHART), "--values", str(values), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout
    assert "[ERROR]" not in proc.stdout and "[WARNING]" not in proc.stdout


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["reportServr.enabled=true"], "additional properties 'reportServr' not allowed"),
        (["audit.schedul=0 4 * * *"], "additional properties 'schedul' not allowed"),
        (["persistence.storageclass=gp3"], "additional properties 'storageclass' not allowed"),
        (["notify.webhook.format=teams"], "at '/notify/webhook/format'"),
        (["notify.webhook.enabled=true"], "at '/notify/webhook/existingSecret': minLength"),  # no Secret named
        (["audit.schedule=daily"], "at '/audit/schedule'"),
        (["persistence.size=lots"], "at '/persistence/size'"),
        (["image.digest=latest"], "at '/image/digest'"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else None,
)
def test_helm_refuses_values_the_schema_does_not_allow(helm, tmp_path, sets, message):
    args = [a for s in sets for a in ("--set", s)]
    for command in ("template", "install"):
        extra = ["--dry-run=client"] if command == "install" else []
        proc = helm_run(helm, command, RELEASE, str(CHART), *extra, *args, cwd=tmp_path)
        assert proc.returncode == 1, proc.stdout
        assert "values don't meet the specifications of the schema(s)" in proc.stderr
        assert message in proc.stderr, proc.stderr


# --- labels and NOTES -------------------------------------------------------------


@pytest.mark.parametrize("values", CI_FILES, ids=lambda p: p.name)
def test_every_object_and_pod_carries_the_standard_labels(helm, tmp_path, values):
    expected = {
        "helm.sh/chart": f"gpuaudit-{gpuaudit.__version__}",
        "app.kubernetes.io/name": "gpuaudit",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/version": gpuaudit.__version__,
        "app.kubernetes.io/managed-by": "Helm",
    }
    assert set(HELM_LABELS) < set(expected)
    docs = render(helm, tmp_path, values)
    assert docs
    for obj in docs:
        for metadata in label_holders(obj):
            labels = metadata["labels"]
            assert {k: labels.get(k) for k in expected} == expected, obj["metadata"]["name"]
            assert labels.get("app.kubernetes.io/component"), obj["metadata"]["name"]


def notes(helm: str, tmp_path: Path, *values: Path) -> str:
    args = [a for f in values for a in ("--values", str(f))]
    proc = helm_run(helm, "install", RELEASE, str(CHART), "--dry-run=client", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "NOTES:" in proc.stdout
    return proc.stdout.split("NOTES:", 1)[1]


def test_notes_say_what_was_installed_and_where_results_are(helm, tmp_path):
    text = notes(helm, tmp_path, ci("defaults"))
    assert "installed in namespace gpuaudit" in text
    assert '"17 3 * * *"' in text and '"47 5 1 * *"' in text
    assert "kubectl -n gpuaudit create job gpuaudit-now --from=cronjob/gpuaudit-audit" in text
    assert "a placeholder: set image.repository" in text
    assert "port-forward" not in text and "PolicyReports" not in text and "webhook" not in text

    text = notes(helm, tmp_path, ci("everything-on"))
    for shown in (
        "gpuaudit-policyreports-apply",
        "DaemonSet gpuaudit-nvml-sampler",
        "kubectl -n gpuaudit port-forward svc/gpuaudit-report-server 8080:http",
        "kubectl get policyreports -A",
        "create secret generic gpuaudit-webhook --from-literal=url=",
        "http://prometheus-pushgateway.monitoring.svc:9091",
        "registry.example.com/platform/gpuaudit:0.1.0",
    ):
        assert shown in text, shown
    assert "placeholder" not in text and "not readable" not in text

    text = notes(helm, tmp_path, ci("existing-claim"))
    assert "kubectl -n platform-gpuaudit" in text and "the volume gpuaudit-history" in text


# --- what each value changes -----------------------------------------------------------


def test_cloud_identity_and_scheduling_values(helm, tmp_path):
    values = yaml.safe_load(ci("cloud-iam-scheduling").read_text())
    docs = render(helm, tmp_path, ci("cloud-iam-scheduling"))
    account = named(docs, "ServiceAccount", "gpuaudit")
    assert account["metadata"]["annotations"] == values["serviceAccount"]["annotations"]
    assert "annotations" not in named(docs, "ClusterRole", "gpuaudit-reader")["metadata"]

    audit, report = named(docs, "CronJob", "gpuaudit-audit"), named(docs, "CronJob", "gpuaudit-report")
    assert (audit["spec"]["schedule"], report["spec"]["schedule"]) == ("30 2 * * 1-5", "@monthly")
    assert {job["spec"]["timeZone"] for job in (audit, report)} == {"Europe/Berlin"}
    (container,) = containers(audit)
    assert container["resources"] == values["audit"]["resources"]
    assert container["args"] == ["--in-cluster", "--max-list-bytes=512Mi", "--max-list-bytes=1Gi"]
    assert container["image"] == f"{values['image']['repository']}:0.1.0@{values['image']['digest']}"
    (container,) = containers(report)
    assert container["resources"] == VALUES["report"]["resources"]  # not the audit's

    pods = workloads(docs)
    assert {d["metadata"]["name"] for d in pods} == {"gpuaudit-audit", "gpuaudit-report", "gpuaudit-report-server"}
    for obj in pods:
        spec = pod_spec(obj)
        assert spec["nodeSelector"] == values["nodeSelector"]
        assert spec["tolerations"] == values["tolerations"]
        assert spec["priorityClassName"] == "gpuaudit-low"
        assert spec["imagePullSecrets"] == [{"name": "ecr-pull"}]
        assert spec["affinity"]["nodeAffinity"] == values["affinity"]["nodeAffinity"]
        # the report server's pod affinity joins the user's on the CronJobs only
        beside_server = "podAffinity" in spec["affinity"]
        assert beside_server == (obj["kind"] == "CronJob"), obj["metadata"]["name"]

    claim = named(docs, "PersistentVolumeClaim", "gpuaudit-data")
    assert claim["spec"]["storageClassName"] == "gp3"
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert claim["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}


def test_existing_claim_and_namespace_values(helm, tmp_path):
    docs = render(helm, tmp_path, ci("existing-claim"))
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"Namespace", "PersistentVolumeClaim", "NetworkPolicy"}
    cluster_scoped = ("ClusterRole", "ClusterRoleBinding")
    assert {d["metadata"]["namespace"] for d in docs if d["kind"] not in cluster_scoped} == {"platform-gpuaudit"}
    claims = {
        obj["metadata"]["name"]: {
            v["persistentVolumeClaim"]["claimName"] for v in pod_spec(obj)["volumes"] if "persistentVolumeClaim" in v
        }
        for obj in workloads(docs)
    }
    assert claims["gpuaudit-audit"] == {"gpuaudit-history", "gpu-samples"}
    assert claims["gpuaudit-report"] == claims["gpuaudit-policyreports"] == {"gpuaudit-history"}
    assert claims["gpuaudit-nvml-sampler"] == {"gpu-samples"}
    sampler = pod_spec(named(docs, "DaemonSet", "gpuaudit-nvml-sampler"))
    assert sampler["nodeSelector"] == {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    assert "tolerations" not in sampler and "runtimeClassName" not in sampler
    assert sampler["hostPID"] is True  # what the values do not touch stays deploy/'s


def test_a_shared_volume_frees_the_cronjobs_from_the_report_servers_node(helm, tmp_path):
    docs = render(helm, tmp_path, ci("shared-volume"))
    claim = named(docs, "PersistentVolumeClaim", "gpuaudit-data")
    assert claim["spec"]["storageClassName"] == "" and claim["spec"]["accessModes"] == ["ReadWriteMany"]
    jobs = [d for d in docs if d["kind"] == "CronJob"]
    assert len(jobs) == 4 and not any("affinity" in pod_spec(job) for job in jobs)
    assert named(docs, "CronJob", "gpuaudit-policyreports")["spec"]["schedule"] == "0 4 * * *"
    assert named(docs, "CronJob", "gpuaudit-policyreports-apply")["spec"]["schedule"] == "30 4 * * *"
    (server,) = containers(named(docs, "Deployment", "gpuaudit-report-server"))
    assert server["resources"]["limits"] == {"memory": "256Mi"}
    # with a ReadWriteOnce volume, the same values pin them again
    docs = render(helm, tmp_path, ci("shared-volume"), sets=("persistence.accessModes={ReadWriteOnce}",))
    assert all("podAffinity" in pod_spec(d)["affinity"] for d in docs if d["kind"] == "CronJob")


def test_results_leave_the_cluster_through_a_secret_and_arguments(helm, tmp_path):
    docs = render(helm, tmp_path, ci("everything-on"))
    rendered = json.dumps(docs)
    for name, command in (("gpuaudit-audit", "audit.sh"), ("gpuaudit-report", "report.sh")):
        (container,) = containers(named(docs, "CronJob", name))
        assert container["command"][1].endswith(command)
        webhook = [e for e in container["env"] if e["name"] == "GPUAUDIT_WEBHOOK_URL"]
        # the URL is the Secret's: the chart names the Secret, never holds the URL
        secret = {"secretKeyRef": {"name": "gpuaudit-webhook", "key": "url"}}
        assert webhook == [{"name": "GPUAUDIT_WEBHOOK_URL", "valueFrom": secret}]
        args = container["args"]
        assert args[:2] == ["--in-cluster", "--max-list-bytes=512Mi"]
        assert {
            "--webhook-format=slack",
            "--report-url=https://gpuaudit.example.com/",
            "--pushgateway=http://prometheus-pushgateway.monitoring.svc:9091",
        } <= set(args)
        assert args[-1] != "--webhook-format=slack"  # the user's extraArgs come last, to override
    (writer,) = containers(named(docs, "CronJob", "gpuaudit-policyreports"))
    assert not any(a.startswith(("--webhook", "--pushgateway", "--report-url")) for a in writer["args"])
    assert writer["args"][-1] == "--rules=allocation,memory,placement"
    assert "hooks.slack" not in rendered
    # the Pushgateway's port is let out, with the user's own egress rules
    egress = named(docs, "NetworkPolicy", "gpuaudit-egress")["spec"]["egress"]
    assert {"ports": [{"protocol": "TCP", "port": 9091}]} in egress
    assert egress[-1]["ports"] == [{"protocol": "TCP", "port": 8481}]


def test_extra_environment_reaches_every_container_that_runs_gpuaudit(helm, tmp_path):
    values = yaml.safe_load(ci("everything-on").read_text())
    docs = render(helm, tmp_path, ci("everything-on"))
    reached = set()
    for obj in workloads(docs):
        for container in containers(obj):
            env, env_from = container.get("env", []), container.get("envFrom", [])
            if runs_gpuaudit(container):
                reached.add(obj["metadata"]["name"])
                assert all(e in env for e in values["extraEnv"]), obj["metadata"]["name"]
                assert env_from[-1] == values["envFrom"][-1]
                assert env_from[0] == {"configMapRef": {"name": "gpuaudit-settings"}}  # deploy/'s first
            else:  # the report server's http.server and the kubectl steps
                assert not any(e["name"] == "GPUAUDIT_PROMETHEUS_PASSWORD" for e in env)
                assert values["envFrom"][-1] not in env_from
    assert reached == {"gpuaudit-audit", "gpuaudit-report", "gpuaudit-policyreports", "gpuaudit-nvml-sampler"}
    for obj in workloads(docs):
        template = label_holders(obj)[1]
        assert template["labels"]["team"] == "platform"
        assert template["annotations"] == values["podAnnotations"]
        kubectl_steps = [c for c in containers(obj) if c["name"] in ("apply", "label", "prune")]
        for step in kubectl_steps:
            assert step["image"] == "registry.example.com/mirror/kubectl:v1.32.9"
            assert step["resources"] == VALUES["policyReports"]["apply"]["resources"]


def test_pod_labels_never_replace_the_labels_selectors_use(helm, tmp_path):
    docs = render(
        helm,
        tmp_path,
        sets=("reportServer.enabled=true", "podLabels.app\\.kubernetes\\.io/component=other", "podLabels.tier=ops"),
    )
    server = named(docs, "Deployment", "gpuaudit-report-server")
    labels = server["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "report-server" and labels["tier"] == "ops"
    assert server["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_every_argument_the_chart_gives_a_script_is_a_gpuaudit_option(helm, tmp_path):
    """The CronJobs' args go to the scripts, which pass them to gpuaudit."""
    notifier = {"--webhook-format", "--report-url", "--pushgateway"}
    checked = 0
    for values in CI_FILES:
        for obj in workloads(render(helm, tmp_path, values)):
            for container in filter(runs_gpuaudit, containers(obj)):
                command, _ = script_command(scripts()[Path(container["command"][1]).name].read_text())
                flags = {a.split("=")[0] for a in container.get("args", []) if a.startswith("--")}
                known = command_options(command)
                if not notifier <= command_options("audit"):  # issue 37 item 4 not merged yet
                    flags -= notifier
                assert flags <= known, (values.name, obj["metadata"]["name"], flags - known)
                checked += 1
    assert checked >= 12
    if not notifier <= command_options("audit"):
        pytest.skip(f"gpuaudit has no {sorted(notifier - command_options('audit'))} yet (issue 37, item 4)")


# --- the real API server ------------------------------------------------------------


def _kubectl_run(
    kubectl_bin: str, config: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl_bin, "--kubeconfig", str(config), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.fixture(scope="module")
def api_server(kubectl, tmp_path_factory) -> Iterator[Path]:
    """A real kube-apiserver and etcd, with the CRDs of tests/schemas and the
    namespaces the ci values name (a dry run does not create a namespace for
    the objects after it). Yields an admin kubeconfig."""
    reason = controlplane.missing()
    if reason:
        pytest.skip(f"no real control plane: {reason}")
    with controlplane.running(tmp_path_factory.mktemp("controlplane"), scheduler=False) as plane:
        admin = plane.kubeconfig(controlplane.ADMIN_TOKEN, "admin")
        for crd in CRDS:
            proc = _kubectl_run(kubectl, admin, "apply", "--server-side", "-f", str(crd))
            assert proc.returncode == 0, proc.stderr
        established = _kubectl_run(kubectl, admin, "wait", "--for=condition=Established", "crd", "--all")
        assert established.returncode == 0, established.stderr
        for name in ("gpuaudit", "platform-gpuaudit"):
            assert _kubectl_run(kubectl, admin, "create", "namespace", name).returncode == 0
        yield admin


def dry_run(kubectl_bin: str, config: Path, docs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    return _kubectl_run(
        kubectl_bin,
        config,
        "apply",
        "--server-side",
        "--dry-run=server",
        "--validate=strict",
        "--field-manager=helm",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(docs),
    )


@pytest.mark.parametrize("values", CI_FILES, ids=lambda p: p.name)
def test_the_api_server_accepts_each_ci_rendering(helm, kubectl, api_server, tmp_path, values):
    docs = render(helm, tmp_path, values)
    proc = dry_run(kubectl, api_server, docs)
    assert proc.returncode == 0, proc.stderr
    applied = [line for line in proc.stdout.splitlines() if line.endswith("serverside-applied (server dry run)")]
    assert len(applied) == len(docs), proc.stdout


def test_the_dry_run_refuses_what_the_api_server_would(helm, kubectl, api_server, tmp_path):
    """The check above can fail: a field the API does not have, and a
    value it does not accept, are refused by the same dry run."""
    docs = render(helm, tmp_path, ci("everything-on"))
    job = named(docs, "CronJob", "gpuaudit-audit")
    pod_spec(job)["containers"][0]["resourcez"] = {}
    proc = dry_run(kubectl, api_server, docs)
    assert proc.returncode != 0 and 'containers[name="audit"].resourcez: field not declared in schema' in proc.stderr
    docs = render(helm, tmp_path, ci("everything-on"))
    named(docs, "CronJob", "gpuaudit-audit")["spec"]["timeZone"] = "Mars/Olympus_Mons"
    proc = dry_run(kubectl, api_server, docs)
    assert proc.returncode != 0 and "timeZone" in proc.stderr


# --- the docs ------------------------------------------------------------------------

DOCS_PAGE = ROOT / "docs" / "helm.md"


def test_the_docs_quote_helms_refusal_as_helm_prints_it(helm, tmp_path):
    page = DOCS_PAGE.read_text()
    block = page[page.index("\n$ helm template") + 1 :].split("```", 1)[0]
    command, *printed = block.strip().splitlines()
    args = command.removeprefix("$ helm ").split()
    assert args[:3] == ["template", "gpuaudit", "deploy/helm/gpuaudit"]
    proc = helm_run(helm, *args[:2], str(CHART), *args[3:], cwd=tmp_path)
    assert proc.returncode == 1
    # less helm's notices about the chart's links (files/) and a blank last line
    shown = [line for line in proc.stderr.splitlines() if line and not line.startswith("level=")]
    assert shown == printed


def test_the_docs_list_every_ci_values_file():
    page = DOCS_PAGE.read_text()
    assert [f.name for f in CI_FILES if f"`{f.name}`" not in page] == []


def test_the_values_table_refuses_a_value_without_a_meaning(tmp_path, monkeypatch):
    from tests.test_docs import gen_docs

    module = gen_docs()
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "values.yaml").write_text("described: 1\nbare: 2\n")
    schema = {"type": "object", "properties": {"described": {"type": "integer", "description": "yes"}, "bare": {}}}
    (chart / "values.schema.json").write_text(json.dumps(schema))
    monkeypatch.setattr(module, "CHART", chart)
    with pytest.raises(module.DocsError, match="bare"):
        module.chart_values()
    del schema["properties"]["bare"]
    (chart / "values.schema.json").write_text(json.dumps(schema))
    assert "| `described` | integer | `1` | yes |" in module.chart_values()
