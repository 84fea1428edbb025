"""A repository shaped like a GitOps tree, judged as deployable units (issue 31).

    .venv/bin/python bench/repository.py                 # 38 apps: 155 kustomizations
    .venv/bin/python bench/repository.py --apps 10 --repeat 1 --keep /tmp/tree

Generates, in a temporary folder, a git repository with:

- ``apps/app-NN/base``: a GPU Deployment (``nvidia.com/gpu`` limits) and its
  Service; ``apps/app-NN/overlays/{dev,staging,prod}``: ``namePrefix``, a
  strategic-merge patch (replicas, GPU count, memory), and in staging/prod
  the components under ``components/`` (``kind: Component``);
- ``charts/trainer``: ``Chart.yaml``, ``values.yaml``, a template with a GPU
  Deployment and ``ci/gpu-values.yaml`` (two variants);
- ``examples/app-NN``: plain Deployments with the same names as the bases.

Then measures, in one run, on this machine:

- the render floor: ``kubectl kustomize`` of each kustomize root and
  ``helm template`` of each chart variant, one after another (what any tool
  that renders the tree pays, on one core);
- ``gpuaudit check <tree> -o json`` with a cold render cache (a fresh
  ``XDG_CACHE_HOME``: the rule pack is compiled again too) and a warm one;
- a pre-commit run: ``gpuaudit check --changed-files <a base file>`` from
  inside the tree, warm cache, after changing that file (its roots render
  again, nothing else does).

Wall times; each warm or pre-commit figure is the median of ``--repeat``
runs. The units are counted with ``sources.units.discover``; findings and
"defined again" warnings from the cold run's JSON (the warm runs must agree).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPUAUDIT = ROOT / ".venv" / "bin" / "gpuaudit"
TOOLS = ROOT / ".tools" / "bin"
COMPONENTS = ("monitoring", "gpu-tolerations", "spot-nodes")
OVERLAYS = {"dev": (1, 1, []), "staging": (2, 1, ["monitoring"]), "prod": (4, 2, list(COMPONENTS))}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def deployment(name: str, gpus: int, env: str = "base") -> str:
    return f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  labels: {{app: {name}}}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: server
          image: nvcr.io/nvidia/tritonserver:24.05-py3
          env:
            - {{name: STAGE, value: "{env}"}}
          ports:
            - containerPort: 8000
          resources:
            requests: {{cpu: "2", memory: 8Gi}}
            limits:
              memory: 8Gi
              nvidia.com/gpu: {gpus}
"""


def generate(tree: Path, apps: int) -> list[Path]:
    """The tree; returns the kustomize roots (what `kubectl kustomize` builds)."""
    roots: list[Path] = []
    for name, (text, kind) in {
        "monitoring": ("commonLabels: {monitoring: enabled}\n", "label"),
        "gpu-tolerations": ("patch-tolerations.yaml", "patch"),
        "spot-nodes": ("patch-spot.yaml", "patch"),
    }.items():
        folder = tree / "components" / name
        if kind == "label":
            write(
                folder / "kustomization.yaml", f"apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n{text}"
            )
            continue
        write(
            folder / "kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
            f"patches:\n  - path: {text}\n    target: {{kind: Deployment}}\n",
        )
        spec = (
            "tolerations:\n        - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}"
            if name == "gpu-tolerations"
            else 'nodeSelector:\n        cloud.google.com/gke-spot: "true"'
        )
        write(
            folder / text,
            f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: any\nspec:\n  template:\n    spec:\n      {spec}\n",  # noqa: E501
        )
    for i in range(apps):
        app = f"app-{i:02d}"
        base = tree / "apps" / app / "base"
        write(base / "deployment.yaml", deployment(app, 1))
        write(
            base / "service.yaml",
            f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {app}\nspec:\n"
            f"  selector: {{app: {app}}}\n  ports:\n    - port: 80\n      targetPort: 8000\n",
        )
        write(base / "kustomization.yaml", "resources:\n  - deployment.yaml\n  - service.yaml\n")
        for env, (replicas, gpus, components) in OVERLAYS.items():
            folder = tree / "apps" / app / "overlays" / env
            uses = "".join(f"  - ../../../../components/{c}\n" for c in components)
            write(
                folder / "kustomization.yaml",
                f"namePrefix: {env}-\nresources:\n  - ../../base\n"
                + (f"components:\n{uses}" if uses else "")
                + "patches:\n  - path: patch-gpu.yaml\n",
            )
            write(
                folder / "patch-gpu.yaml",
                f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {app}\nspec:\n  replicas: {replicas}\n"
                "  template:\n    spec:\n      containers:\n        - name: server\n          resources:\n"
                f"            limits:\n              memory: {8 * gpus}Gi\n              nvidia.com/gpu: {gpus}\n",
            )
            roots.append(folder)
        if i % 3 == 0:  # examples reuse the bases' names: other units, never "defined again"
            write(tree / "examples" / app / "deployment.yaml", deployment(app, 1, "example"))
    chart = tree / "charts" / "trainer"
    write(chart / "Chart.yaml", "apiVersion: v2\nname: trainer\nversion: 0.1.0\n")
    write(chart / "values.yaml", "replicas: 1\ngpus: 1\nimage: nvcr.io/nvidia/pytorch:24.05-py3\n")
    write(chart / "ci" / "gpu-values.yaml", "replicas: 2\ngpus: 4\n")
    write(
        chart / "templates" / "deployment.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}-trainer\nspec:\n"
        "  replicas: {{ .Values.replicas }}\n  selector:\n    matchLabels: {app: trainer}\n  template:\n"
        "    metadata:\n      labels: {app: trainer}\n    spec:\n      containers:\n        - name: train\n"
        "          image: {{ .Values.image }}\n          resources:\n            limits:\n"
        "              nvidia.com/gpu: {{ .Values.gpus }}\n",
    )
    return roots


def git(tree: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", *args],
        cwd=tree,
        check=True,
        capture_output=True,
    )


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    return time.perf_counter() - started, done


def check(tree: Path, env: dict[str, str], *args: str, cwd: Path | None = None) -> tuple[float, dict]:
    seconds, done = timed([str(GPUAUDIT), "check", *args, "-o", "json", "--fail-on", "never"], cwd or ROOT, env)
    if done.returncode != 0:
        sys.exit(f"gpuaudit check {' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)


def counts(report: dict) -> tuple[int, int, int]:
    again = sum(1 for e in report["errors"] if "is defined again" in e["message"])
    errors = sum(1 for e in report["errors"] if e.get("level", "error") == "error")
    return len(report["findings"]), again, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", type=int, default=38, help="apps (4 kustomizations each) [38: 155 in all]")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each warm and pre-commit case [3]")
    parser.add_argument("--keep", type=Path, help="generate the tree here and keep it")
    args = parser.parse_args()

    env = {**os.environ, "PATH": f"{TOOLS}:{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"}
    env.pop("GPUAUDIT_NO_CACHE", None)
    work = Path(tempfile.mkdtemp(prefix="gpuaudit-repository-"))
    tree = args.keep or work / "tree"
    try:
        roots = generate(tree, args.apps)
        git(tree, "init", "-q")
        git(tree, "add", "-A")
        git(tree, "commit", "-q", "-m", "tree")
        kustomizations = sum(1 for _ in tree.rglob("kustomization.yaml"))

        sys.path.insert(0, str(ROOT))
        from gpuaudit.sources.units import discover

        units = discover(tree, str(tree)).units
        kinds = {k: sum(1 for u in units if u.kind == k) for k in ("kustomize", "helm", "files")}

        # (a) the floor: each root and chart variant rendered once, one after another
        kubectl, helm = str(TOOLS / "kubectl"), str(TOOLS / "helm")
        chart = tree / "charts" / "trainer"
        renders = [[kubectl, "kustomize", str(r)] for r in roots]
        renders += [[helm, "template", "trainer", str(chart)]]
        renders += [[helm, "template", "trainer", str(chart), "-f", str(chart / "ci" / "gpu-values.yaml")]]
        started = time.perf_counter()
        for command in renders:
            subprocess.run(command, env=env, check=True, capture_output=True)
        floor = time.perf_counter() - started

        # (b) check, cold render cache (and rule pack), then warm
        env["XDG_CACHE_HOME"] = str(work / "cache")
        cold, report = check(tree, env, str(tree))
        findings, again, errors = counts(report)
        warm_runs = []
        for _ in range(args.repeat):
            seconds, warm_report = check(tree, env, str(tree))
            warm_runs.append(seconds)
            if counts(warm_report) != (findings, again, errors):
                sys.exit(f"a warm run disagrees: {counts(warm_report)} != {(findings, again, errors)}")
        warm = statistics.median(warm_runs)

        # (c) pre-commit: one base file changed (new content each run), warm cache
        changed = tree / "apps" / "app-00" / "base" / "deployment.yaml"
        original = changed.read_text()
        pre_runs = []
        for n in range(args.repeat):
            changed.write_text(original.replace('value: "base"', f'value: "base-{n}-{time.time_ns()}"'))
            seconds, pre_report = check(tree, env, "--changed-files", str(changed.relative_to(tree)), cwd=tree)
            pre_runs.append(seconds)
        pre_units = sorted({u for f in pre_report["findings"] for u in f.get("units") or ()})
        pre_findings, pre_again, pre_errors = counts(pre_report)
        precommit = statistics.median(pre_runs)
        changed.write_text(original)

        print(
            f"{kustomizations} kustomizations ({len(roots)} roots), {len(units)} units "
            f"({kinds['kustomize']} kustomize, {kinds['helm']} helm, {kinds['files']} files), "
            f"{len(renders)} renders in the floor; {os.cpu_count()} CPUs\n"
        )
        print("| case | wall s | findings | defined again | errors |")
        print("|---|---:|---:|---:|---:|")
        print(f"| render floor (kubectl kustomize + helm template, serial) | {floor:.2f} | | | |")
        print(f"| `check <tree>`, cold cache | {cold:.2f} | {findings} | {again} | {errors} |")
        print(
            f"| `check <tree>`, warm cache (median of {args.repeat}) | {warm:.2f} | {findings} | {again} | {errors} |"
        )
        print(
            f"| pre-commit `--changed-files` 1 base, warm (median of {args.repeat}) | {precommit:.2f} "
            f"| {pre_findings} | {pre_again} | {pre_errors} |"
        )
        print(f"\npre-commit: findings name the units {', '.join(pre_units) or '(none)'}")
        if again:
            sys.exit(f"{again} 'defined again' warnings across units: expected 0")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
