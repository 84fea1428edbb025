"""-n/-l on a snapshot file: kubectl's selector syntax, and what narrowing
keeps (sources/scope.py)."""

from __future__ import annotations

import pytest

from gpuaudit.sources.scope import Scope, SelectorError, label_matcher, narrow_snapshot


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("app=x", {"app": "x"}, True),
        ("app==x", {"app": "y"}, False),
        ("app!=x", {}, True),
        ("app", {"app": ""}, True),
        ("!app", {"app": "x"}, False),
        ("env in (a, b),tier notin (web)", {"env": "b", "tier": "db"}, True),
        ("env in (a,b)", {"env": "c"}, False),
    ],
)
def test_selector_terms_read_as_kubectl_reads_them(selector, labels, matches):
    assert label_matcher(selector)(labels) is matches


def test_a_selector_term_it_cannot_read_is_named():
    with pytest.raises(SelectorError, match="'bad\\(\\('"):
        label_matcher("app=x,bad((")


def test_narrowing_keeps_the_cluster_wide_objects_whole():
    def pod(ns, app):
        return {"metadata": {"namespace": ns, "name": f"{ns}-{app}", "labels": {"app": app}}}

    snapshot = {
        "objects": {
            "pods": [pod("ml", "a"), pod("ml", "b"), pod("web", "a"), {"metadata": {"name": "no-namespace"}}],
            "jobs": [{"metadata": {"namespace": "web", "name": "j"}}],
            "nodes": [{"metadata": {"name": "n1"}}],
        }
    }
    scope = Scope.from_options(["ml,default"], "app=a")
    assert scope.namespaces == ("ml", "default") and scope.narrows
    narrow_snapshot(snapshot, scope)
    objects = snapshot["objects"]
    assert [p["metadata"]["name"] for p in objects["pods"]] == ["ml-a"]
    assert objects["jobs"] == []
    assert objects["nodes"] == [{"metadata": {"name": "n1"}}]
    assert not Scope.from_options([" , "], "").narrows
