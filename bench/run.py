"""Benchmarks, side by side, printed as one table.

    .venv/bin/python bench/run.py               # everything that can run here
    .venv/bin/python bench/run.py --quick       # 1 repeat, no 10,000-pod telemetry

Every number comes from a child process (wall time and peak RSS through
``os.wait4``; the median of ``--repeat`` runs after one unmeasured warm-up),
with the commands that are compared run interleaved. Rows:

- ``check`` on a generated repository of ``--files`` manifests, next to the
  *floor* (the same files parsed by PyYAML's C loader and nothing else,
  bench/floor.py) and the *peer* (``checkov -d DIR --framework kubernetes``,
  from bench/.venv-checkov: run bench/setup-peers.sh once);
- ``check --no-kustomize`` on the real corpus (../shared/corpus: manifests,
  md_extracts and kustomize, the GPU manifests of public repositories), next
  to the same floor and peer, when that folder is there;
- ``check`` on a many-findings repository (bench/gen_findings.py: small GPU
  workloads with several findings each), next to the same floor and peer;
- ``check`` on 3 files, as pre-commit runs it (interpreter start included);
- telemetry: the PromQL queries one audit sends to a real Prometheus holding
  100 and 10,000 pods of dcgm-exporter series, and how long they take;
- a live-cluster audit of ``--nodes``/``--pods`` through the fake API server
  (tests/apiserver.py, in its own process), and the report from its snapshot:
  these rows run when bench/gen_cluster.py and the commands exist, and say
  "not available" otherwise; then ``audit --snapshot`` of that snapshot
  (the audit alone, no collection).

Generated inputs and outputs go to bench/out/ (ignored by git).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(ROOT))  # for `tests.` helpers (Prometheus, the fake API server)

import gen_findings  # noqa: E402
import gen_manifests  # noqa: E402
import gen_telemetry  # noqa: E402
from measure import Command, Measurement, measure_interleaved  # noqa: E402

from tests.prometheus_server import (  # noqa: E402
    PrometheusProcess,
    backfill,
    tools_available,
    write_openmetrics,
)

PYTHON = sys.executable
GPUAUDIT = str(Path(sys.executable).parent / "gpuaudit")  # --gpuaudit replaces it
# --compare LABEL=EXE: another gpuaudit (a tree before a change), measured in
# the same interleaved rounds as GPUAUDIT, the floor and the peer.
COMPARE: tuple[str, str] | None = None
# The real corpus (see its README): GPU manifests from public repositories.
CORPUS = ROOT.parent / "shared" / "corpus"
CORPUS_DIRS = ("manifests", "md_extracts", "kustomize")
# Issue 22's targets, each a ratio measured in one run.
MAX_FLOOR_RATIO = 1.3
MIN_PEER_SPEEDUP = 20.0
MAX_PRECOMMIT_S = 0.15
MAX_SNAPSHOT_AUDIT_S, MAX_SNAPSHOT_AUDIT_MIB = 5.0, 600.0


@dataclass(frozen=True)
class Row:
    case: str
    tool: str
    size: str
    wall_s: float | None = None
    rate: str = ""
    rss_mib: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Target:
    name: str
    measured: str
    met: bool | None  # None: could not be measured here


@dataclass
class Results:
    rows: list[Row]
    targets: list[Target]


CACHE_HOME = BENCH / "out" / "cache"  # --work moves it


def child_env() -> dict[str, str]:
    """The environment of every measured command: bytecode caches allowed (a
    user's installed tool has them), no colour."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["NO_COLOR"] = "1"
    # gpuaudit's rule-pack cache (engine/rule_cache.py) in a folder of the
    # benchmark's own, as on a user's machine: on a shared one, other runs
    # (a test suite's temporary rule folders) would push its entry out.
    env["XDG_CACHE_HOME"] = str(CACHE_HOME)
    return env


def per_second(count: int, m: Measurement, unit: str) -> str:
    return f"{count / m.wall_s:,.0f} {unit}/s" if m.wall_s else ""


def row(case: str, tool: str, size: str, m: Measurement, rate: str = "", note: str = "") -> Row:
    return Row(case, tool, size, m.wall_s, rate, m.peak_rss_mib, note)


# --- manifests: check, floor, peer ---------------------------------------------------


def find_checkov(explicit: str | None) -> str | None:
    for candidate in (explicit, str(BENCH / ".venv-checkov" / "bin" / "checkov")):
        if candidate and Path(candidate).is_file():
            return candidate
    return shutil.which("checkov")


def checkov_argv(checkov: str, paths: list[Path], directory: bool) -> tuple[str, ...]:
    # --skip-download: no calls home (there is no network here, and waiting for
    # it would be measured as checkov's time). checkov skips paths under a
    # folder whose name starts with a dot: none of these do.
    where = [arg for p in paths for arg in ("-d", str(p))] if directory else ["-f", *map(str, paths)]
    return (
        checkov,
        *where,
        "--framework",
        "kubernetes",
        "--skip-download",
        "--quiet",
        "-o",
        "json",
    )


def manifest_case(
    name: str,
    paths: list[Path],
    out: Path,
    checkov: str | None,
    repeat: int,
    directory: bool,
    check_args: tuple[str, ...] = (),
    variants: bool = True,
    input_errors: bool = False,
    preload: Path | None = None,
) -> dict[str, Measurement]:
    """``paths``: one directory (``directory``) or files; several directories
    are given to checkov as one ``-d`` each. ``preload``: the modules of a
    second floor, ``floor-deps``, that imports them first (floor.py --preload)."""
    files = [str(p) for p in paths]
    commands = {
        "floor": Command((PYTHON, str(BENCH / "floor.py"), *files), out / "floor.out"),
        "check": Command((GPUAUDIT, "check", *check_args, *files), out / "check.txt"),
        # JSON too: what the findings were (bench checks them; compare runs with it).
        "check-json": Command((GPUAUDIT, "check", *check_args, *files, "--format", "json"), out / "check.json"),
    }
    if COMPARE:
        commands["check-compare"] = Command((COMPARE[1], "check", *check_args, *files), out / "check-compare.txt")
    if preload is not None:
        argv = (PYTHON, str(BENCH / "floor.py"), "--preload", str(preload), *files)
        commands["floor-deps"] = Command(argv, out / "floor-deps.out")
    if directory and variants:
        # What CI runs: SARIF to a file.
        # (--format NAME=FILE: the spelling every version of the CLI takes)
        sarif = ("--format", f"sarif={out / 'check.sarif'}")
        commands["check-sarif"] = Command((GPUAUDIT, "check", *files, *sarif), out / "check-sarif.out")
        # The same on one CPU: what auditing on all cores (pipelines/shards.py) buys.
        if shutil.which("taskset"):
            argv = ("taskset", "-c", "0", GPUAUDIT, "check", *files)
            commands["check-1cpu"] = Command(argv, out / "check-1cpu.txt")
    if checkov:
        commands["checkov"] = Command(checkov_argv(checkov, paths, directory), out / "checkov.json")
    out.mkdir(parents=True, exist_ok=True)
    measured = measure_interleaved(commands, repeat=repeat, cwd=ROOT, env=child_env())
    # 1: findings at or above --fail-on; 2: input errors, which the real
    # corpus has (files that are not valid YAML, Helm templates).
    allowed = (0, 1, 2) if input_errors else (0, 1)
    for key, m in measured.items():
        if key.startswith(("check", "floor")) and m.returncode not in allowed:
            raise SystemExit(f"{name}: {key} exited {m.returncode}; see {commands[key].stdout}.err")
    return measured


def compared(m: Measurement, floor: Measurement, peer: Measurement | None) -> str:
    """How a gpuaudit row stands against the floor and the peer: by wall time,
    then by CPU time (user + system, workers included), which a busy machine
    stretches far less."""
    note = f"{m.wall_s / floor.wall_s:.2f}x the floor"
    if peer is not None:
        note += f", {peer.wall_s / m.wall_s:.1f}x faster than checkov"
    if m.cpu_s and floor.cpu_s:
        note += f" (CPU {m.cpu_s:.2f} s: {m.cpu_s / floor.cpu_s:.2f}x the floor's"
        if peer is not None and peer.cpu_s:
            note += f", {peer.cpu_s / m.cpu_s:.1f}x less than checkov's"
        note += ")"
    return note


def repo_rows(
    case: str,
    size: str,
    count: int,
    m: dict[str, Measurement],
    work: Path,
) -> tuple[list[Row], list[Target]]:
    """The rows of one repository case and its targets (issue 22)."""
    rows: list[Row] = []
    check, floor, peer = m["check"], m["floor"], m.get("checkov")
    findings = _findings(work / "check.json")
    for key, tool in (
        ("check", "gpuaudit check"),
        ("check-compare", f"gpuaudit check ({COMPARE[0]})" if COMPARE else ""),
        ("check-sarif", "gpuaudit check --format sarif -o"),
        ("check-1cpu", "gpuaudit check, 1 CPU (taskset -c 0)"),
    ):
        if key in m:
            note = compared(m[key], floor, peer)
            if key == "check" and findings is not None:
                note += f"; {findings:,} findings ({findings / count:.1f} per file)"
            rows.append(row(case, tool, size, m[key], per_second(count, m[key], "files"), note))
    rows.append(row(case, "floor: PyYAML CSafeLoader", size, floor, per_second(count, floor, "files"), "parse only"))
    if peer is not None:
        rows.append(row(case, "peer: checkov -d", size, peer, per_second(count, peer, "files"), _checkov_note(work)))
    else:
        rows.append(Row(case, "peer: checkov -d", size, note=_NO_CHECKOV))
    ratio = check.wall_s / floor.wall_s
    targets = [
        Target(
            f"{case}: check on {size} within {MAX_FLOOR_RATIO}x the floor", f"{ratio:.2f}x", ratio <= MAX_FLOOR_RATIO
        )
    ]
    if peer is not None:
        speedup = peer.wall_s / check.wall_s
        name = f"{case}: check on {size} at least {MIN_PEER_SPEEDUP:g}x faster than checkov"
        targets.append(Target(name, f"{speedup:.1f}x", speedup >= MIN_PEER_SPEEDUP))
    else:
        targets.append(Target(f"{case}: check at least 20x faster than checkov", "checkov absent", None))
    return rows, targets


def _findings(report: Path) -> int | None:
    try:
        return len(json.loads(report.read_text())["findings"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _yaml_files(paths: list[Path]) -> int:
    return sum(1 for p in paths for f in p.rglob("*") if f.is_file() and f.name.endswith((".yaml", ".yml", ".json")))


def manifests(args: argparse.Namespace, work: Path, checkov: str | None) -> Results:
    """The generated repository (bench/gen_manifests.py)."""
    repo = work / f"manifests-{args.files}"
    gen_manifests.generate(_fresh(repo), args.files, args.seed)
    m = manifest_case("repo", [repo], work / "repo", checkov, args.repeat, True)
    rows, targets = repo_rows("manifest repo", f"{args.files:,} files", args.files, m, work / "repo")
    return Results(rows, targets)


def corpus(args: argparse.Namespace, work: Path, checkov: str | None) -> Results:
    """The real corpus, read as plain files (--no-kustomize: the floor renders
    nothing either)."""
    dirs = [CORPUS / d for d in CORPUS_DIRS if (CORPUS / d).is_dir()]
    if not dirs:
        return Results([Row("real corpus", "gpuaudit check", "-", note=f"not available: no {CORPUS}")], [])
    count = _yaml_files(dirs)
    m = manifest_case(
        "corpus",
        dirs,
        work / "corpus",
        checkov,
        args.repeat,
        True,
        ("--no-kustomize",),
        variants=False,
        input_errors=True,
    )
    rows, targets = repo_rows("real corpus", f"{count:,} files", count, m, work / "corpus")
    return Results(rows, targets)


def findings(args: argparse.Namespace, work: Path, checkov: str | None) -> Results:
    """Many findings per file (bench/gen_findings.py)."""
    repo = work / f"findings-{args.files}"
    gen_findings.generate(_fresh(repo), args.files, args.seed)
    m = manifest_case("findings", [repo], work / "findings", checkov, args.repeat, True, variants=False)
    rows, targets = repo_rows("many findings", f"{args.files:,} files", args.files, m, work / "findings")
    found = _findings(work / "findings" / "check.json") or 0
    targets.append(
        Target("many findings: at least 3 findings per file", f"{found / args.files:.1f}", found >= 3 * args.files)
    )
    return Results(rows, targets)


def precommit(args: argparse.Namespace, work: Path, checkov: str | None) -> Results:
    """pre-commit hands the changed files to the hook: three of them. The rule
    pack's cache (engine/rule_cache.py) is warm after the unmeasured run, as
    on a developer's machine after the first commit; the cold row empties it
    before every run."""
    rows: list[Row] = []
    commit = _fresh(work / "precommit")
    gen_manifests.generate(commit, 3, args.seed + 1)
    three = sorted(p for p in commit.rglob("*") if p.is_file())
    imports = _check_imports(three, work / "precommit-out" / "check-imports.txt")
    m = manifest_case("pre-commit", three, work / "precommit-out", checkov, args.repeat, False, preload=imports)
    peer = m.get("checkov")
    note = "interpreter start included; rule-pack cache warm; " + compared(m["check"], m["floor"], peer)
    rows.append(row("pre-commit", "gpuaudit check", "3 files", m["check"], note=note))
    if "check-compare" in m:
        note = "rule-pack cache warm where it has one; " + compared(m["check-compare"], m["floor"], peer)
        rows.append(row("pre-commit", f"gpuaudit check ({COMPARE[0]})", "3 files", m["check-compare"], note=note))
    # A new, empty cache folder for each run (sh and rm add about 2 ms).
    in_cold_cache = 'd=$(mktemp -d) && XDG_CACHE_HOME=$d "$@"; rc=$?; rm -rf "$d"; exit $rc'
    argv = ("sh", "-c", in_cold_cache, "sh", GPUAUDIT, "check", *map(str, three))
    cold = measure_interleaved(
        {"cold": Command(argv, work / "precommit-out" / "cold.txt")},
        repeat=args.repeat,
        cwd=ROOT,
        env=child_env(),
    )["cold"]
    rows.append(
        row("pre-commit", "gpuaudit check, cold cache", "3 files", cold, note="a new, empty cache folder each run")
    )
    rows.append(row("pre-commit", "floor: PyYAML CSafeLoader", "3 files", m["floor"]))
    modules = len(imports.read_text().split())
    own = (m["check"].wall_s - m["floor-deps"].wall_s) * 1000
    note = f"the floor after importing the {modules} modules check imports but its own; check {own:+.0f} ms"
    rows.append(row("pre-commit", "floor + check's dependencies", "3 files", m["floor-deps"], note=note))
    if peer is not None:
        rows.append(row("pre-commit", "peer: checkov -f", "3 files", peer))
    wall = m["check"].wall_s
    targets = [Target(f"check on 3 files in at most {MAX_PRECOMMIT_S} s", f"{wall:.3f} s", wall <= MAX_PRECOMMIT_S)]
    return Results(rows, targets)


# Run as `gpuaudit check FILES`; at exit, lists the modules it imported that
# are not gpuaudit's, in the order they were first imported.
_LIST_IMPORTS = """
import atexit, sys
def _list():
    names = [n for n, m in sys.modules.items() if m is not None and n != "__main__" and n.split(".")[0] != "gpuaudit"]
    with open(listing, "w", encoding="utf-8") as out:
        out.write("\\n".join(names) + "\\n")
atexit.register(_list)
listing, sys.argv = sys.argv[1], ["gpuaudit", "check", *sys.argv[2:]]
from gpuaudit.cli.main import main
main()
"""


def _check_imports(files: list[Path], listing: Path) -> Path:
    """The modules ``gpuaudit check FILES`` imports, gpuaudit's own excepted
    (with the rule pack's cache warm: the second of two runs)."""
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.unlink(missing_ok=True)  # never an earlier run's list
    for _ in range(2):
        argv = [PYTHON, "-c", _LIST_IMPORTS, str(listing), *map(str, files)]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        subprocess.run(argv, cwd=ROOT, env=child_env(), check=False, **quiet)
    if not listing.exists():
        raise SystemExit(f"could not list the modules gpuaudit check imports ({listing})")
    return listing


_NO_CHECKOV = "not available: run bench/setup-peers.sh"


def _checkov_note(out: Path) -> str:
    try:
        report = json.loads((out / "checkov.json").read_text())
    except (OSError, ValueError):
        return ""
    reports = report if isinstance(report, list) else [report]
    summary = [r.get("summary", {}) for r in reports if isinstance(r, dict)]
    checks = sum(s.get("passed", 0) + s.get("failed", 0) for s in summary)
    return f"{checks:,} check results" if checks else ""


def _fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


# --- telemetry: PromQL queries at 100 and 10,000 pods --------------------------------


def telemetry(args: argparse.Namespace, work: Path) -> Results:
    if args.no_telemetry:
        return Results([], [])
    if not tools_available():
        note = "not available: needs promtool and prometheus (Debian package)"
        return Results([Row("telemetry", "PromQL", "-", note=note)], [])
    rows, counts = [], {}
    window, step = 3600, 120
    end = float(int(time.time()) // 60 * 60)
    for pods in args.pods:
        dest = _fresh(work / f"prometheus-{pods}")
        series = dest / "series.om"
        write_openmetrics(series, gen_telemetry.families(pods, end, window, step, args.seed))
        backfill(series, dest / "tsdb")
        series.unlink()
        server = PrometheusProcess(dest / "tsdb", dest)
        url = server.start()
        try:
            before = _prometheus_api_requests(url)
            argv = (
                PYTHON,
                str(BENCH / "telemetry_query.py"),
                url,
                "--window",
                str(window),
                "--end",
                str(end),
            )
            repeat = min(args.repeat, 3)
            m = measure_interleaved(
                {"q": Command(argv, dest / "query.json")}, repeat=repeat, cwd=ROOT, env=child_env()
            )["q"]
            served = (_prometheus_api_requests(url) - before) / (repeat + 1)
        finally:
            server.stop()
        summary = json.loads((dest / "query.json").read_text())
        counts[pods] = summary["queries"]
        note = f"{summary['queries']} queries (server counted {served:g} per run)"
        if summary["errors"]:
            note += f", {len(summary['errors'])} errors"
        rows.append(
            row(
                "telemetry",
                "PromQL aggregates, 1 h window",
                f"{pods:,} pods",
                m,
                per_second(summary["pods"], m, "pods"),
                note,
            )
        )
    targets = []
    if len(counts) > 1:
        values = sorted(set(counts.values()))
        shown = " / ".join(f"{counts[p]} at {p:,} pods" for p in counts)
        targets.append(Target("PromQL queries the same at every pod count", shown, len(values) == 1))
    return Results(rows, targets)


def _prometheus_api_requests(url: str) -> float:
    """Requests Prometheus has answered on its query API (its own counter)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    pattern = re.compile(r'^prometheus_http_requests_total\{[^}]*handler="/api/v1/[^"]*"[^}]*\} (\S+)$')
    return sum(float(m.group(1)) for line in text.splitlines() if (m := pattern.match(line)))


# --- cluster: collection + audit through the fake API server, then the report ----------


def cluster(args: argparse.Namespace, work: Path) -> Results:
    size = f"{args.nodes:,} nodes / {args.pods_cluster:,} pods"
    missing = _cluster_prerequisites()
    if missing:
        rows = [
            Row("cluster", "gpuaudit audit", size, note=f"not available: {missing}"),
            Row("cluster", "gpuaudit report", size, note=f"not available: {missing}"),
        ]
        target = Target(f"cluster of {size} audited in < 60 s and < 2 GB", "not run", None)
        return Results(rows, [target])
    recorded = _cached_cluster(work, args.nodes, args.pods_cluster, args.seed)
    dest = _fresh(work / "cluster")
    rows: list[Row] = []
    env = child_env()
    with _api_server(recorded, dest / "kubeconfig") as kubeconfig:
        snapshot = dest / "snapshot.json.gz"
        commands = {
            "audit": Command(
                (
                    GPUAUDIT,
                    "audit",
                    "--kubeconfig",
                    str(kubeconfig),
                    "--format",
                    f"json={dest / 'audit.json'}",
                ),
                dest / "audit.out",
                timeout_s=600,
            ),
        }
        if _has_command("audit", "--save-snapshot"):
            # What the in-cluster CronJob runs (deploy/base/scripts/audit.sh).
            saved = ("--save-snapshot", str(dest / "saved.json.gz"))
            commands["audit-save"] = Command(
                (GPUAUDIT, "audit", "--kubeconfig", str(kubeconfig), *saved, "--format", f"json={dest / 'saved.json'}"),
                dest / "audit-save.out",
                timeout_s=600,
            )
        if _has_command("snapshot", "--kubeconfig"):
            commands["snapshot"] = Command(
                (GPUAUDIT, "snapshot", "--kubeconfig", str(kubeconfig), _snapshot_output(), str(snapshot)),
                dest / "snapshot.out",
                timeout_s=600,
            )
        m = measure_interleaved(commands, repeat=args.cluster_repeat, cwd=ROOT, env=env)
    audit = m["audit"]
    ok = audit.returncode in (0, 1)
    note = "collection + audit" if ok else f"exit {audit.returncode}: see {dest / 'audit.out.err'}"
    rows.append(
        row(
            "cluster",
            "gpuaudit audit",
            size,
            audit,
            per_second(args.pods_cluster, audit, "pods"),
            note,
        )
    )
    if "audit-save" in m:
        saved = m["audit-save"]
        note = "collection + audit + the snapshot written, as the CronJob runs it"
        if saved.returncode not in (0, 1):
            note = f"exit {saved.returncode}: see {dest / 'audit-save.out.err'}"
        rate = per_second(args.pods_cluster, saved, "pods")
        rows.append(row("cluster", "gpuaudit audit --save-snapshot", size, saved, rate, note))
    if "snapshot" in m:
        rows.append(
            row(
                "cluster",
                "gpuaudit snapshot",
                size,
                m["snapshot"],
                per_second(args.pods_cluster, m["snapshot"], "pods"),
                "collection only",
            )
        )
    targets = [
        Target(
            f"cluster of {size} audited in < 60 s and < 2 GB",
            f"{audit.wall_s:.1f} s, {audit.peak_rss_mib:,.0f} MiB",
            ok and audit.wall_s < 60 and audit.peak_rss_mib < 2048,
        )
    ]
    snapshot_rows, snapshot_target = _snapshot_audit(snapshot, dest, size, args, env)
    rows += snapshot_rows
    targets.append(snapshot_target)
    rows.append(_report_row(snapshot, dest, size, args, env))
    return Results(rows, targets)


def _snapshot_audit(snapshot: Path, dest: Path, size: str, args: argparse.Namespace, env) -> tuple[list[Row], Target]:
    """``audit --snapshot``: the audit alone, from the snapshot just taken
    (and the ``--compare`` gpuaudit's, interleaved, on the same file)."""
    name = f"{size} snapshot audited in <= {MAX_SNAPSHOT_AUDIT_S:g} s and <= {MAX_SNAPSHOT_AUDIT_MIB:g} MiB"
    if not snapshot.exists() or not _has_command("audit", "--snapshot"):
        note = "not available: needs `gpuaudit audit --snapshot` and a snapshot"
        return [Row("cluster", "gpuaudit audit --snapshot", size, note=note)], Target(name, "not run", None)

    def command(gpuaudit: str, out: str) -> Command:
        argv = (gpuaudit, "audit", "--snapshot", str(snapshot), "--format", f"json={dest / f'{out}.json'}")
        return Command(argv, dest / f"{out}.out", timeout_s=600)

    commands = {"audit": command(GPUAUDIT, "audit-snapshot")}
    if COMPARE:
        commands["audit-compare"] = command(COMPARE[1], "audit-snapshot-compare")
    measured = measure_interleaved(commands, repeat=args.cluster_repeat, cwd=ROOT, env=env)
    tools = {"audit": "gpuaudit audit --snapshot"}
    if COMPARE:
        tools["audit-compare"] = f"gpuaudit audit --snapshot ({COMPARE[0]})"
    rows = []
    for key, tool in tools.items():
        m = measured[key]
        ok = m.returncode in (0, 1)
        note = "from the snapshot file: read + audit" if ok else f"exit {m.returncode}: see {commands[key].stdout}.err"
        rows.append(row("cluster", tool, size, m, per_second(args.pods_cluster, m, "pods"), note))
    m = measured["audit"]
    met = m.returncode in (0, 1) and m.wall_s <= MAX_SNAPSHOT_AUDIT_S and m.peak_rss_mib <= MAX_SNAPSHOT_AUDIT_MIB
    return rows, Target(name, f"{m.wall_s:.2f} s, {m.peak_rss_mib:,.0f} MiB", met)


def _snapshot_output() -> str:
    """The option that names `gpuaudit snapshot`'s file (-o before the CLI took
    kubectl's meaning of -o)."""
    return "--output-file" if _has_command("snapshot", "--output-file") else "-o"


def _cluster_prerequisites() -> str | None:
    if not (BENCH / "gen_cluster.py").exists():
        return "bench/gen_cluster.py not written yet"
    if not _has_command("audit", "--kubeconfig"):
        return "`gpuaudit audit --kubeconfig` not there yet"
    return None


def _has_command(name: str, option: str) -> bool:
    """Whether `gpuaudit NAME --help` lists ``option``."""
    help_text = subprocess.run([GPUAUDIT, name, "--help"], capture_output=True, text=True, check=False).stdout
    return option in help_text


def _cached_cluster(work: Path, nodes: int, pods: int, seed: int) -> Path:
    """The recorded cluster for this size and seed, generated once (half a
    minute at 50,000 pods) and again whenever bench/gen_cluster.py changes."""
    digest = hashlib.sha256((BENCH / "gen_cluster.py").read_bytes()).hexdigest()[:12]
    path = work / f"cluster-{nodes}n-{pods}p-seed{seed}-{digest}.json"
    if not path.exists():
        partial = path.with_name(path.name + ".partial.json")
        _generate_cluster(partial, nodes, pods, seed)
        partial.rename(path)
    return path


def _generate_cluster(out: Path, nodes: int, pods: int, seed: int) -> None:
    """bench/gen_cluster.py writes a recorded cluster (the JSON tests/apiserver.py
    serves). Its output is named by whichever option its --help shows."""
    script = str(BENCH / "gen_cluster.py")
    help_text = subprocess.run([PYTHON, script, "--help"], capture_output=True, text=True, check=False).stdout
    where = ["--output", str(out)] if "--output" in help_text else None
    if where is None:
        where = ["-o", str(out)] if re.search(r"(^|\s)-o\b", help_text) else [str(out)]
    argv = [PYTHON, script, *where, "--nodes", str(nodes), "--pods", str(pods)]
    if "--seed" in help_text:
        argv += ["--seed", str(seed)]
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


@contextmanager
def _api_server(recorded: Path, kubeconfig: Path) -> Iterator[Path]:
    """tests/apiserver.py serving ``recorded`` in its own process (its CPU and
    memory are not the audit's)."""
    proc = subprocess.Popen(
        [
            PYTHON,
            str(ROOT / "tests" / "apiserver.py"),
            str(recorded),
            "--kubeconfig",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # its URL: it is listening
        yield kubeconfig
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _report_row(snapshot: Path, dest: Path, size: str, args: argparse.Namespace, env) -> Row:
    if not snapshot.exists() or not _has_command("report", "--snapshot"):
        note = "not available: needs `gpuaudit report --snapshot` and a snapshot"
        return Row("cluster", "gpuaudit report", size, note=note)
    # --no-record: every run reads the same (empty) history, so runs compare.
    out = ("--out", str(dest / "report"), "--no-record")
    argv = (GPUAUDIT, "report", "--snapshot", str(snapshot), *out)
    m = measure_interleaved(
        {"report": Command(argv, dest / "report.out", timeout_s=600)},
        repeat=args.cluster_repeat,
        cwd=ROOT,
        env=env,
    )["report"]
    note = "from the snapshot: HTML, Markdown, JSON"
    if m.returncode != 0:
        note = f"exit {m.returncode}: see {dest / 'report.out.err'}"
    return row("cluster", "gpuaudit report", size, m, note=note)


# --- the table ---------------------------------------------------------------------


def _proc_field(path: str, name: str) -> str:
    """The value of the first ``name:`` line of a /proc file, or ""."""
    try:
        text = Path(path).read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith(name):
            return line.split(":", 1)[1].strip()
    return ""


def machine() -> str:
    mem_kib = _proc_field("/proc/meminfo", "MemTotal").split(" ")[0]
    mem = f", {int(mem_kib) / 1024 / 1024:.0f} GiB RAM" if mem_kib.isdigit() else ""
    cpu = _proc_field("/proc/cpuinfo", "model name") or platform.machine()
    return (
        f"{os.cpu_count()} CPUs ({cpu}){mem}; "
        f"Python {platform.python_version()}; {platform.system()} {platform.release()}"
    )


def table(rows: list[Row]) -> str:
    head = ("case", "tool", "input", "wall s", "throughput", "peak RSS MiB", "note")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        wall = f"{r.wall_s:.3f}" if r.wall_s is not None else "-"
        rss = f"{r.rss_mib:,.0f}" if r.rss_mib is not None else "-"
        cells = (r.case, r.tool, r.size, wall, r.rate or "-", rss, r.note)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(targets: list[Target]) -> str:
    mark = {True: "met", False: "MISSED", None: "not measured"}
    return "\n".join(f"- {t.name}: {t.measured} ({mark[t.met]})" for t in targets)


SECTIONS = ("repo", "corpus", "findings", "precommit", "manifests", "telemetry", "cluster")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=1000, help="manifest files in the repo case")
    p.add_argument("--repeat", type=int, default=5, help="measured runs per command (median)")
    p.add_argument("--seed", type=int, default=8)
    p.add_argument("--checkov", help="checkov executable (default: bench/.venv-checkov)")
    p.add_argument("--no-checkov", action="store_true")
    p.add_argument(
        "--pods",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[100, 10_000],
        help="telemetry pod counts, comma-separated",
    )
    p.add_argument("--no-telemetry", action="store_true")
    p.add_argument("--nodes", type=int, default=5_000, help="cluster nodes")
    p.add_argument("--cluster-pods", dest="pods_cluster", type=int, default=50_000)
    p.add_argument("--cluster-repeat", type=int, default=1)
    p.add_argument("--no-cluster", action="store_true")
    p.add_argument(
        "--only",
        choices=SECTIONS,
        action="append",
        help="run only these sections (repeatable)",
    )
    p.add_argument("--gpuaudit", help="the gpuaudit executable to measure (default: this venv's)")
    p.add_argument(
        "--compare",
        metavar="LABEL=EXE",
        help="also measure this gpuaudit executable in the same rounds (e.g. before=/tmp/old-gpuaudit)",
    )
    p.add_argument("--quick", action="store_true", help="1 repeat, telemetry at 100 pods only")
    p.add_argument("--work", type=Path, default=BENCH / "out")
    args = p.parse_args(argv)
    if args.quick:
        args.repeat, args.pods = 1, [100]
    if args.gpuaudit:
        global GPUAUDIT
        GPUAUDIT = args.gpuaudit
    if args.compare:
        global COMPARE
        label, _, exe = args.compare.partition("=")
        COMPARE = (label, exe) if exe else ("compared", label)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    global CACHE_HOME
    CACHE_HOME = work / "cache"
    checkov = None if args.no_checkov else find_checkov(args.checkov)
    sections: dict[str, Callable[[], Results]] = {
        "repo": lambda: manifests(args, work, checkov),
        "corpus": lambda: corpus(args, work, checkov),
        "findings": lambda: findings(args, work, checkov),
        "precommit": lambda: precommit(args, work, checkov),
        "telemetry": lambda: telemetry(args, work),
        "cluster": lambda: Results([], []) if args.no_cluster else cluster(args, work),
    }
    rows: list[Row] = []
    targets: list[Target] = []
    load_before = os.getloadavg()[0]
    for name, section in sections.items():
        wanted = set(args.only or ())
        if "manifests" in wanted:  # the four manifest sections
            wanted |= {"repo", "corpus", "findings", "precommit"}
        if wanted and name not in wanted:
            continue
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        result = section()
        rows += result.rows
        targets += result.targets
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    # Other work on the machine shows up in every wall time: say how busy it was.
    load = f"load average {load_before:.2f} at the start, {os.getloadavg()[0]:.2f} at the end"
    print(f"gpuaudit benchmarks, {stamp}\n{machine()}\n{load}\n")
    print(table(rows))
    print()
    print(verdicts(targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
