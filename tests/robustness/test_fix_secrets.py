"""`gpuaudit fix --snapshot` writes the cluster's objects as the overlay's base,
into files meant for a commit: no env value but those the audit reads, and
no credential at all -- not in env, not in args, not in a ClusterPolicy
(issue 32, item 8: `HF_TOKEN` values and `--hf-token=` arguments were copied,
world-readable, into base/).

The patterns a value is judged a credential by are
`gpuaudit/pipelines/fix_live.py` (CREDENTIAL_*), listed in docs/robustness.md.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from gpuaudit.pipelines.fix_live import looks_like_credential, redacted
from tests.robustness.hostile import SMALL_CLUSTER

ROOT = Path(__file__).resolve().parents[2]

# One of each kind of secret a runner's cluster holds, and a harmless value.
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
OPENAI = "sk-proj-Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0"
DB_PASSWORD = "s3cr3t-Pa55w0rd"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0.c2lnbmF0dXJlLXRoYXQtaXMtbG9uZw"
PLAIN = "a-setting-nobody-needs-to-see"
SECRETS = (HF, OPENAI, DB_PASSWORD, JWT, PLAIN)

ENV = [
    {"name": "HF_TOKEN", "value": HF},
    {"name": "OPENAI_API_KEY", "value": OPENAI},
    {"name": "DB_URL", "value": f"postgres://svc:{DB_PASSWORD}@db.internal/x"},
    {"name": "SOME_SETTING", "value": PLAIN},
    {"name": "MODEL_ID", "value": "meta-llama/Llama-3.1-8B-Instruct"},  # read by the audit: kept
    {"name": "TOKEN_FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
]


@pytest.fixture
def kubectl(monkeypatch):
    monkeypatch.setenv("PATH", f"{ROOT / '.tools' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (scripts/install-kube-tools.py)")


def _with_secrets(cluster: dict) -> dict:
    """llm-serving's pods and Deployment (patched by fix) carry credentials
    in env and in a sidecar's args; the ClusterPolicy's device plugin in env."""
    for obj in [*cluster["deployments"], *cluster["pods"]]:
        if obj["metadata"]["name"].startswith("llm-serving"):
            spec = obj["spec"]["template"]["spec"] if "template" in obj["spec"] else obj["spec"]
            spec["containers"][0]["env"] = [dict(e) for e in ENV]
            spec["containers"].append(
                {
                    "name": "fetch",
                    "image": "fetch:1",
                    "args": ["--hf-token", HF, f"--api-key={OPENAI}", f"--header=Authorization: Bearer {JWT}"],
                }
            )
    policy = cluster["clusterpolicies"][0]
    policy["spec"]["devicePlugin"]["env"] = [{"name": "REGISTRY_PASSWORD", "value": DB_PASSWORD}]
    return cluster


def test_a_live_fix_writes_no_credential_and_no_env_value_it_does_not_need(
    tmp_path, run_cli, kubectl, apiserver, kubeconfig
):
    apiserver.load(_with_secrets(json.loads(SMALL_CLUSTER.read_text())))
    snap = tmp_path / "cluster.json"
    proc = run_cli("snapshot", "-o", str(snap), "--kubeconfig", str(kubeconfig))
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "overlay"
    proc = run_cli("fix", "--snapshot", str(snap), "--out", str(out), "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 unplanned difference(s)" in proc.stdout

    written = {p: p.read_text() for p in out.rglob("*") if p.is_file()}
    leaks = sorted(
        {(p.relative_to(out).as_posix(), s[:12]) for p, text in written.items() for s in SECRETS if s in text}
    )
    assert leaks == [], f"secrets in the overlay: {leaks}"
    for text in [proc.stdout, proc.stderr]:
        assert not any(s in text for s in SECRETS)

    bases = {p.name: yaml.safe_load(p.read_text()) for p in (out / "base").iterdir()}
    serving = next(o for o in bases.values() if o["kind"] == "Deployment" and o["metadata"]["name"] == "llm-serving")
    containers = {c["name"]: c for c in serving["spec"]["template"]["spec"]["containers"]}
    env = {e["name"]: e for e in containers["vllm"]["env"]}
    assert set(env) == {e["name"] for e in ENV}  # every variable is still named
    assert env["MODEL_ID"]["value"] == "meta-llama/Llama-3.1-8B-Instruct"  # what the audit reads
    assert "value" not in env["SOME_SETTING"] and "value" not in env["HF_TOKEN"]
    assert env["TOKEN_FROM_SECRET"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert containers["vllm"]["args"][:2] == ["--model", "meta-llama/Llama-3.1-8B-Instruct"]  # no credential: kept
    assert "args" not in containers["fetch"]  # a credential in it: left out whole (the cluster keeps its own)
    name = next(p for p, o in bases.items() if o is serving)
    header = [line for line in (out / "base" / name).read_text().splitlines() if line.startswith("#")]
    assert any("kubectl apply --server-side" in line for line in header)


@pytest.mark.parametrize(
    "text",
    [
        HF,
        OPENAI,
        JWT,
        f"--hf-token={HF}",
        "--password=hunter2",
        "--api_key=abc",
        "ghp_" + "a" * 36,
        "github_pat_" + "b" * 40,
        "glpat-" + "c" * 20,
        "xoxb-123-456-abc",
        "AKIA" + "A" * 16,
        "https://user:pw@registry.example.com/x",
        "Authorization: Bearer abc.def",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "python -m x --token abc123",
    ],
)
def test_credential_patterns(text):
    assert looks_like_credential(text)


@pytest.mark.parametrize(
    "text",
    [
        "--tokenizer=meta-llama/Llama-3.1-8B",
        "--max-num-batched-tokens=8192",
        "--hf-token-file=/var/run/secrets/hf/token",
        "--tensor-parallel-size",
        "meta-llama/Llama-3.1-8B-Instruct",
        "https://huggingface.co/meta-llama",
        "--api-key-path=/etc/key",
    ],
)
def test_not_credentials(text):
    assert not looks_like_credential(text)


def test_redacted_keeps_the_structure_patches_point_into():
    obj = {
        "kind": "Deployment",
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [{"name": "i", "env": [{"name": "A", "value": "1"}]}],
                    "containers": [
                        {"name": "a", "args": ["--tp", "$(TP)"], "env": [{"name": "TP", "value": "2"}]},
                        {"name": "b", "command": ["sh", "-c", f"serve --hf-token {HF}"]},
                    ],
                }
            }
        },
    }
    clean, notes = redacted(obj)
    spec = clean["spec"]["template"]["spec"]
    assert spec["initContainers"][0]["env"] == [{"name": "A"}]
    assert spec["containers"][0]["env"] == [{"name": "TP", "value": "2"}]  # named in args: $(TP)
    assert "command" not in spec["containers"][1] and spec["containers"][1]["name"] == "b"
    assert len(spec["containers"]) == 2  # list indices stay what the patches point at
    assert notes and all(HF not in n for n in notes)
    assert obj["spec"]["template"]["spec"]["containers"][1]["command"][2].endswith(HF)  # the input is untouched
