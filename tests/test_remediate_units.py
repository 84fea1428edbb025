"""The pure core of `gpuaudit fix`: edit semantics, patch encoders, templates
that only substitute, sizing from evidence, and the planner's choices."""

from __future__ import annotations

import copy
from pathlib import Path

import msgspec
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaudit import gpus
from gpuaudit.bundled import policies_dir, remediations_dir
from gpuaudit.engine.rules import load_rules
from gpuaudit.pipelines.check import check_manifests
from gpuaudit.pipelines.policy import load_policy, locators_for
from gpuaudit.remediate import overlay, patches, sizing, templates
from gpuaudit.remediate.edits import Edit, EditError, apply_edits
from gpuaudit.remediate.plan import Settings, Source, describe_manifests, plan_fixes
from gpuaudit.remediate.planners import PLANNERS
from gpuaudit.remediate.planners.declined import DECLINED
from gpuaudit.sources.user_config import Config

# --- edits -----------------------------------------------------------------------


def test_merge_removes_keys_and_the_maps_it_empties():
    obj = {"spec": {"nodeSelector": {"kubernetes.io/hostname": "n1"}, "containers": []}}
    after = apply_edits(obj, [Edit("/spec/nodeSelector", {"kubernetes.io/hostname": None})])
    assert after == {"spec": {"containers": []}}
    assert obj["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "n1"}  # input untouched


def test_merge_keeps_a_map_that_still_has_keys_and_never_drops_top_level_fields():
    obj = {"spec": {"nodeSelector": {"a": "b", "kubernetes.io/hostname": "n1"}}}
    after = apply_edits(obj, [Edit("/spec/nodeSelector", {"kubernetes.io/hostname": None})])
    assert after == {"spec": {"nodeSelector": {"a": "b"}}}
    assert apply_edits({"spec": {"x": 1}}, [Edit("/spec", {"x": None})]) == {"spec": {}}


def test_removals_under_a_missing_path_change_nothing_and_additions_create_it():
    obj = {"spec": {}}
    assert apply_edits(obj, [Edit("/spec/a/b", {"c": None})]) == obj
    after = apply_edits(obj, [Edit("/spec/a/b", {"c": 1, "d": None, "e": {"f": None}})])
    assert after == {"spec": {"a": {"b": {"c": 1}}}}
    assert apply_edits(obj, [Edit("/spec", {"emptyDir": {}})]) == {"spec": {"emptyDir": {}}}


def test_append_and_remove_list_items():
    obj = {"c": {"env": [{"name": "A"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}]}}
    after = apply_edits(
        obj,
        [
            Edit("/c", append={"volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}),
            Edit("/c", remove={"env": [{"name": "NVIDIA_VISIBLE_DEVICES"}]}),
        ],
    )
    assert after["c"]["env"] == [{"name": "A"}]
    assert after["c"]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    emptied = apply_edits(after, [Edit("/c", remove={"env": [{"name": "A"}]})])
    assert "env" not in emptied["c"]


def test_edits_refuse_missing_list_items():
    with pytest.raises(EditError):
        apply_edits({"spec": {"containers": []}}, [Edit("/spec/containers/0", {"x": 1})])


# --- patch encoders -------------------------------------------------------------------


def apply_json_patch(doc, ops):
    """A small RFC 6902 applier (add, remove, replace, test) for checking the encoder."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        if op["op"] == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent[last]
            assert current == op["value"], op
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif isinstance(parent, list):
            if last == "-":
                parent.append(op["value"])
            elif op["op"] == "add":
                parent.insert(int(last), op["value"])
            else:
                parent[int(last)] = op["value"]
        else:
            parent[last] = op["value"]
    return doc


scalars = st.one_of(st.integers(-5, 5), st.text("ab/~", max_size=3), st.booleans())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text("xyz/~", max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)
documents = st.dictionaries(st.text("abc", min_size=1, max_size=2), values, max_size=4)


@settings(max_examples=300, deadline=None)
@given(documents, documents)
def test_json6902_turns_before_into_after(before, after):
    ops = patches.json6902(before, after)
    assert apply_json_patch(before, ops) == after


def test_json6902_guards_every_list_item_it_descends_into():
    before = {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}
    after = copy.deepcopy(before)
    after["spec"]["containers"][1]["image"] = "z"
    ops = patches.json6902(before, after)
    assert ops[0] == {"op": "test", "path": "/spec/containers/1/name", "value": "b"}
    assert ops[1] == {"op": "replace", "path": "/spec/containers/1/image", "value": "z"}


def test_strategic_merge_for_a_builtin_kind_uses_merge_keys_and_nulls():
    before = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "n"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "n1"},
            "containers": [{"name": "a", "env": [{"name": "X"}, {"name": "Y"}]}, {"name": "b"}],
        },
    }
    after = copy.deepcopy(before)
    del after["spec"]["nodeSelector"]
    after["spec"]["containers"][1]["resources"] = {"requests": {"cpu": "2"}}
    after["spec"]["containers"][0]["env"] = [{"name": "X"}]
    patch = patches.encode(before, after, ("gpuaudit.io/remediated", "R"), False)
    assert patch.format == "strategic-merge"
    assert patch.document == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "n", "annotations": {"gpuaudit.io/remediated": "R"}},
        "spec": {
            "nodeSelector": None,
            "containers": [
                {"name": "a", "env": [{"name": "Y", "$patch": "delete"}]},
                {"name": "b", "resources": {"requests": {"cpu": "2"}}},
            ],
        },
    }


def test_a_custom_resource_list_change_is_json6902_and_a_map_change_is_not():
    before = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "spec": {"runPolicy": {}, "containers": [{"name": "c"}]},
    }
    maps = copy.deepcopy(before)
    maps["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 60
    assert patches.encode(before, maps, ("k", "v"), False).format == "strategic-merge"
    lists = copy.deepcopy(before)
    lists["spec"]["containers"][0]["image"] = "x"
    patch = patches.encode(before, lists, ("k", "v"), False)
    assert patch.format == "json6902"
    assert patch.document[-1] == {"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}


# --- templates ---------------------------------------------------------------------------


def test_every_template_only_substitutes():
    found = sorted(remediations_dir().glob("*/*.yaml.j2"))
    assert len(found) >= 20
    for path in found:
        assert templates.check_template(path.read_text()) is None, path.relative_to(remediations_dir())


def test_each_remediation_is_one_folder_of_templates_params_and_cases():
    root = remediations_dir()
    # A file beside the folders (the old <id>.yaml.j2 layout) would never be read.
    assert [p.name for p in root.iterdir() if not p.is_dir()] == ["README.md"]
    assert set(templates.remediation_ids()) <= set(PLANNERS)
    for remediation in templates.remediation_ids():
        folder = root / remediation
        names = {p.name for p in folder.iterdir()}
        assert {n for n in names if not n.endswith(".yaml.j2")} <= {"params.yaml", "cases.yaml"}, remediation
        assert "cases.yaml" in names, remediation  # proven end to end (test_fix_remediations.py)
        if "params.yaml" in names:
            spec = yaml.safe_load((folder / "params.yaml").read_text())
            assert spec, remediation  # an id without params has no params.yaml
            for name, param in spec.items():
                assert set(param) == {"default", "description"}, f"{remediation}.{name}"
                assert isinstance(param["description"], str) and param["description"], f"{remediation}.{name}"


@pytest.mark.parametrize(
    "source",
    [
        "{% if x %}a{% endif %}",
        "{{ x | upper }}",
        "{{ x() }}",
        "{% set y = 1 %}",
        "{{ a + b }}",
        "{% for i in xs if i %}{% endfor %}",
    ],
)
def test_logic_in_a_template_is_rejected(source):
    assert templates.check_template(source) is not None


def test_a_hostile_value_cannot_change_the_structure_of_a_patch():
    name = 'x"\nedits: []\n# {{'
    rendered = templates.render(
        "cpu-request-per-gpu",
        None,
        {
            "kind": "Job",
            "name": name,
            "namespace": "n",
            "role": "main",
            "container": name,
            "resources_pointer": "/spec/template/spec/containers/0/resources",
            "cpu": "4",
            "cores": 4,
            "min_cpu_per_gpu": 2,
        },
    )
    assert [e.at for e in rendered.edits] == ["/spec/template/spec/containers/0/resources"]
    assert rendered.edits[0].merge == {"requests": {"cpu": "4"}}
    assert "edits: []" in rendered.summary  # the name, as text


def test_every_remediation_a_rule_names_is_planned_or_declined_with_a_reason():
    rules, errors = load_rules([policies_dir()])
    assert not errors
    named = {r.remediation["id"] for r in rules if r.remediation}
    assert named - set(PLANNERS) == set()
    for remediation in set(PLANNERS) - DECLINED:
        assert (remediations_dir() / templates.template_name(remediation)).is_file(), remediation
        assert remediation in templates.param_defaults(), remediation


def test_no_object_name_places_a_file_outside_the_overlay():
    for hostile in ("../../etc/passwd", "..", "/abs/path", "a/../../b", "...", ""):
        name = overlay.safe_name(hostile)
        assert "/" not in name and not name.startswith(".") and name


# --- sizing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "need", "profile", "whole"),
    [
        ("A100-80GB", 7000, "1g.10gb", False),
        ("A100-80GB", 12000, "1g.20gb", False),
        ("A100-80GB", 40000, "7g.80gb", True),
        ("A100-40GB", 4000, "1g.5gb", False),
        ("H200-141GB", 30000, "1g.35gb", False),
    ],
)
def test_smallest_mig_profile_that_holds_the_need(model, need, profile, whole):
    choice = sizing.smallest_mig_profile(gpus.lookup(model), need)
    assert (choice.profile, choice.whole_gpu) == (profile, whole)


def test_no_profile_holds_more_than_the_gpu():
    assert sizing.smallest_mig_profile(gpus.lookup("A100-80GB"), 90000) is None


def test_shm_is_capped_by_the_memory_limit():
    size, capped = sizing.shm_size_bytes(16 * 2**30, [8 * 2**30], 0.5)
    assert (sizing.format_bytes(size), capped) == ("4Gi", True)
    assert sizing.shm_size_bytes(16 * 2**30, [], 0.5) == (16 * 2**30, False)


# --- planning from evidence -------------------------------------------------------------

SERVICE = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: chat, namespace: llm}
spec:
  replicas: 2
  template:
    spec:
      nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
      containers:
      - name: server
        args: [--model=Qwen/Qwen2.5-0.5B-Instruct]
        resources:
          requests: {cpu: "4"}
          limits: {nvidia.com/gpu: 1}
"""
POLICY = """\
apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata: {name: cluster-policy}
spec:
  devicePlugin: {enabled: true}
"""


def _findings(text: str, rules: str):
    loaded, _ = load_policy(Config(), include=rules.split(","))
    return check_manifests(["-"], Config(), loaded, stdin_text=text).findings


def _with_telemetry(finding, measured):
    """The finding with telemetry in its pod's facts: ``measured``, every other signal unknown."""
    from gpuaudit.facts.types import Telemetry

    telemetry = {f.encode_name: None for f in msgspec.structs.fields(Telemetry)} | {"extra": {}} | measured
    subject = finding.subject
    facts = {**subject.facts, "telemetry": telemetry}
    return msgspec.structs.replace(finding, subject=msgspec.structs.replace(subject, facts=facts))


def _plan(findings, **overrides):
    source = Source("app.yaml", Path("app.yaml"), "file")
    items = [(f, source) for f in findings]
    return plan_fixes(items, locators_for(Config()), Settings(overrides=overrides))


def test_telemetry_sizes_a_mig_slice_on_the_pinned_gpu():
    (finding,) = _findings(SERVICE, "GPA-AL-001")
    measured = _with_telemetry(finding, {"fb_used_max_mib": 7000, "window_seconds": 7 * 86400, "compute_p95": 0.1})
    plan = _plan([measured])
    (change,) = plan.changes
    assert change.variant == "mig"
    assert change.proposal.confidence == "measured"
    container = change.after["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": 1}
    assert "7,000 MiB" in change.proposal.basis and "A100-80GB" in change.proposal.basis


def test_more_headroom_picks_a_larger_slice():
    (finding,) = _findings(SERVICE, "GPA-AL-001")
    measured = _with_telemetry(finding, {"fb_used_max_mib": 9000, "compute_p95": 0.1})
    (change,) = _plan([measured], headroom=0.5).changes
    assert change.proposal.params["profile"] == "1g.20gb"


def test_a_slice_is_sized_by_compute_too():
    # 0.15 of a GPU does not fit a 1g slice (1/7 of an A100): 2g.20gb
    (finding,) = _findings(SERVICE, "GPA-AL-001")
    measured = _with_telemetry(finding, {"fb_used_max_mib": 7000, "compute_p95": 0.15})
    (change,) = _plan([measured]).changes
    assert change.proposal.params["profile"] == "2g.20gb"
    assert "2/7" in change.proposal.basis


def test_without_compute_telemetry_no_slice_is_chosen():
    (finding,) = _findings(SERVICE, "GPA-AL-001")
    plan = _plan([_with_telemetry(finding, {"fb_used_max_mib": 7000})])
    assert plan.changes == []
    assert "no compute telemetry" in plan.skipped[0].reason


def test_without_telemetry_the_share_needs_confirmation():
    (finding,) = _findings(SERVICE, "GPA-AL-001")
    (change,) = _plan([finding]).changes
    assert change.variant is None
    assert change.proposal.confidence == "needs confirmation"
    limits = change.after["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu.shared": 1}


def test_a_workload_that_needs_the_whole_gpu_is_not_moved():
    (finding,) = _findings(SERVICE, "GPA-AL-001")
    measured = _with_telemetry(finding, {"fb_used_max_mib": 60000})
    plan = _plan([measured])
    assert plan.changes == []
    assert "needs the whole A100-80GB" in plan.skipped[0].reason


def test_time_slicing_replicas_come_from_the_workloads_that_share():
    l4 = SERVICE.replace("NVIDIA-A100-SXM4-80GB", "NVIDIA-L4")
    findings = _findings(l4 + "---\n" + POLICY, "GPA-AL-001,GPA-SH-001")
    sharing = [f for f in findings if f.rule == "GPA-SH-001"]
    service = [_with_telemetry(f, {"fb_used_max_mib": 5000}) for f in findings if f.rule != "GPA-SH-001"]
    plan = _plan([*sharing, *service])
    by_rule = {c.rules[0]: c for c in plan.changes}
    # 24 GiB L4 / (5000 MiB x 1.2) = 4 per GPU, the max_replicas cap
    assert by_rule["GPA-SH-001"].proposal.params["replicas"] == 4
    config = by_rule["GPA-SH-001"].new_objects[0]["data"]["shared"]
    assert yaml.safe_load(config)["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 4
    unmeasured = _plan([*sharing, *[f for f in findings if f.rule != "GPA-SH-001"]])
    replicas = {c.rules[0]: c for c in unmeasured.changes}["GPA-SH-001"].proposal.params
    assert replicas["replicas"] == 2  # the service's two pods, without telemetry


def test_files_kustomize_cannot_take_are_reported():
    assert describe_manifests("a: [")[1].startswith("not valid YAML")
    assert "generateName" in describe_manifests("apiVersion: v1\nkind: Pod\nmetadata: {generateName: x-}\n")[1]
    assert "not a Kubernetes object" in describe_manifests("version: v1\nflags: {}\n")[1]
    ids, problem = describe_manifests(SERVICE + "---\n" + POLICY)
    assert problem is None and len(ids) == 2
