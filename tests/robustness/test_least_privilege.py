"""Least privilege: every API call each cluster command makes, as a real
process against the stand-in API server (tests/apiserver.py records every
request), is a read the ClusterRole in deploy/ grants; no Secret is ever
requested, though the served cluster holds one.

tests/test_cluster_source.py checks the collector function alone and that the
role grants nothing it does not use; this checks the commands users run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "clusters" / "small.json"


def granted() -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every ClusterRole and Role under deploy/
    (the Kustomize base and components; the Helm chart renders the same files,
    tests/test_deploy.py proves it, and its templates are not YAML)."""
    grants = set()
    chart = ROOT / "deploy" / "helm"
    for path in sorted(p for p in (ROOT / "deploy").rglob("*.yaml") if chart not in p.parents):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") not in ("ClusterRole", "Role"):
                continue
            for rule in doc.get("rules") or []:
                assert "*" not in rule.get("verbs", []) and "*" not in rule.get("resources", [])
                for group in rule.get("apiGroups", []):
                    for resource in rule.get("resources", []):
                        for verb in rule.get("verbs", []):
                            grants.add((group, resource, verb))
    return grants


@pytest.mark.parametrize(
    "command",
    [
        ("audit", "--format", "json"),
        ("snapshot", "-o", "snap.json"),
        ("report", "--out", "report", "--no-record"),
    ],
    ids=lambda c: c[0],
)
def test_each_cluster_command_only_makes_granted_reads_and_never_asks_for_secrets(
    run_cli, apiserver, kubeconfig, command
):
    cluster = json.loads(SMALL.read_text())
    assert cluster.get("secrets"), "the served cluster must hold a Secret to be refused"
    apiserver.load(cluster)
    grants = granted()
    assert grants and not any(resource == "secrets" for _, resource, _ in grants)

    proc = run_cli(*command, "--kubeconfig", str(kubeconfig), "--page-size", "4")

    assert "Traceback" not in proc.stderr, proc.stderr
    assert apiserver.requests, "the command talked to the cluster"
    refused = []
    for request in apiserver.requests:
        target = request.target()
        assert request.method == "GET", request
        assert target is not None, f"not an API resource path: {request.path}"
        group, resource, _, _ = target
        assert resource != "secrets", request.path
        if (group, resource, request.verb) not in grants:
            refused.append(f"{request.verb} {group or 'core'}/{resource} ({request.path})")
    assert refused == [], "calls the ClusterRole does not grant (they would be 403 in a cluster)"
