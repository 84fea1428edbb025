"""Profile `gpuaudit check` with pyinstrument: where the time of a large
repository and of a pre-commit run goes.

    .venv/bin/python bench/profile.py [--files 1000]

Writes bench/out/profile-repo.{txt,html} and profile-precommit.{txt,html} and
prints the top of each text profile. The repository run is pinned to one CPU
(``taskset -c 0``): `check` then audits every shard in one process, so the
half that would otherwise run in a forked worker shows up in the profile too. Needs pyinstrument in the project's venv
(bench/setup-peers.sh installs it).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import gen_manifests  # noqa: E402

GPUAUDIT = str(Path(sys.executable).parent / "gpuaudit")


def profile(name: str, argv: list[str], out: Path, one_cpu: bool) -> str:
    text, html = out / f"profile-{name}.txt", out / f"profile-{name}.html"
    base = [sys.executable, "-m", "pyinstrument", "--interval", "0.0005"]
    pin = ["taskset", "-c", "0"] if one_cpu and shutil.which("taskset") else []
    for renderer, target in (("text", text), ("html", html)):
        command = [*pin, *base, "-r", renderer, "-o", str(target), GPUAUDIT, *argv]
        subprocess.run(command, check=False, stdout=subprocess.DEVNULL)
    return text.read_text()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--lines", type=int, default=60, help="lines of each profile to print")
    parser.add_argument("--work", type=Path, default=BENCH / "out")
    args = parser.parse_args()
    if importlib.util.find_spec("pyinstrument") is None:
        print("pyinstrument is not installed here: run bench/setup-peers.sh", file=sys.stderr)
        return 2
    out = args.work.resolve()
    repo = out / f"manifests-{args.files}"
    if repo.exists():
        shutil.rmtree(repo)
    gen_manifests.generate(repo, args.files, args.seed)
    commit = out / "precommit"
    if commit.exists():
        shutil.rmtree(commit)
    gen_manifests.generate(commit, 3, args.seed + 1)
    three = sorted(str(p) for p in commit.rglob("*") if p.is_file())
    for name, argv, one_cpu in (
        ("repo", ["check", str(repo)], True),
        ("precommit", ["check", *three], False),
    ):
        report = profile(name, argv, out, one_cpu)
        print(f"== {name}: {out / f'profile-{name}.html'}")
        lines = [line for line in report.splitlines() if line.strip()]
        print("\n".join(lines[: args.lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
