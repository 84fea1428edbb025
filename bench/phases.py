"""Where the time of one `gpuaudit check` goes, by phase, in one process.

    .venv/bin/python bench/phases.py [--repeat 5] [--json OUT] -- CHECK-ARGS...

Runs ``gpuaudit check CHECK-ARGS`` in one process (so one process does all
shards: nothing hides in a forked worker) with timers around the phases,
``--repeat`` times in fresh interpreters, and prints the median of each.
The timers read the process's CPU time (``time.process_time``), not the
wall clock: on a shared machine other work stretches wall times, far less
the CPU time a run needs.

- start: the interpreter and gpuaudit's imports (the CPU time of the process
  up to the command's first line);
- rule pack: reading the config and loading (or reading the cached) rules;
- read + parse: files to documents with their lines;
- model: documents to workloads, and the context of the whole input;
- facts: fact documents of every subject;
- rules: matching and judging (evaluate() less the findings it makes);
- findings: making each finding (message, evidence, location);
- output + rest: rendering the report, and everything not timed above.

Pass ``PYTHONPATH`` to measure another tree (a frozen copy before a change).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

PHASES = ("start", "rule pack", "read + parse", "model", "facts", "rules", "findings", "output + rest")


def child(argv: list[str]) -> dict[str, float]:
    """One instrumented run in this (fresh) process."""
    spent = dict.fromkeys(PHASES, 0.0)
    import gpuaudit.cli.check as cli_check
    import gpuaudit.engine.evaluate as evaluate_module
    import gpuaudit.pipelines.check as pipeline
    import gpuaudit.pipelines.policy as policy
    import gpuaudit.pipelines.shards as shards
    from gpuaudit.cli.main import main

    spent["start"] = time.process_time()  # CPU time since the process started

    def timed(phase: str, fn):
        def wrapper(*args, **kwargs):
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[phase] += time.process_time() - t

        return wrapper

    shards.workers_for = lambda *a: 1  # every shard here, so every phase is seen
    pipeline.workers_for = shards.workers_for
    cli_check.read_config = timed("rule pack", cli_check.read_config)
    policy.load_policy = timed("rule pack", policy.load_policy)  # PolicyOptions.load calls it
    pipeline.read_items = timed("read + parse", pipeline.read_items)
    pipeline.build_workloads = timed("model", pipeline.build_workloads)
    pipeline.build_context = timed("model", pipeline.build_context)
    evaluate_module.make_finding = timed("findings", evaluate_module.make_finding)
    evaluate = pipeline.evaluate

    def judged(rules, group, **kwargs):
        t = time.process_time()
        subjects = list(group)  # the facts, computed as the subjects are made
        spent["facts"] += time.process_time() - t
        before = spent["findings"]
        t = time.process_time()
        try:
            return evaluate(rules, subjects, **kwargs)
        finally:
            spent["rules"] += time.process_time() - t - (spent["findings"] - before)

    pipeline.evaluate = judged
    t = time.process_time()
    sys.argv = ["gpuaudit", "check", *argv]
    with contextlib.suppress(SystemExit):
        main()
    total = time.process_time() - t
    spent["output + rest"] = total - sum(spent[p] for p in PHASES[1:-1])
    return spent


def main() -> int:
    if os.environ.get("PHASES_CHILD"):
        with open(os.devnull, "w") as sink:
            real, sys.stdout = sys.stdout, sink
            try:
                spent = child(sys.argv[1:])
            finally:
                sys.stdout = real
        print(json.dumps(spent))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", help="write the medians here too")
    p.add_argument("args", nargs=argparse.REMAINDER)
    args = p.parse_args()
    argv = args.args[1:] if args.args[:1] == ["--"] else args.args
    runs = []
    for i in range(args.repeat + 1):  # the first is not counted (caches)
        env = {**os.environ, "PHASES_CHILD": "1"}
        out = subprocess.run([sys.executable, __file__, *argv], env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0 or not out.stdout.strip():
            raise SystemExit(f"phases: the run failed:\n{out.stderr[-2000:]}")
        if i:
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    medians = {phase: statistics.median(r[phase] for r in runs) for phase in PHASES}
    total = sum(medians.values())
    print("| phase | ms | share |\n|---|---|---|")
    for phase in PHASES:
        print(f"| {phase} | {medians[phase] * 1000:.0f} | {medians[phase] / total:.0%} |")
    print(f"| total (sum of medians) | {total * 1000:.0f} | |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(medians, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
