"""The truth set: hand-labelled findings on real and written manifests, and
precision per rule against it.

``labels.yaml`` holds one entry per (file, object, rule[, container]) that was
reviewed: ``expect: fire`` (an expert signs the finding) or ``expect: silent``
(the rule must not speak there), each with a one-line reason. An entry with
``known: true`` is a finding the tool still makes and should not: it counts
as wrong in the precision, and the tests tolerate it until the rule is fixed.

Files are named relative to ``../shared/corpus`` (``corpus/...``) or to this
folder (``manifests/...``). Every finding on a labelled file must be labelled:
an unreviewed finding counts as wrong, so precision cannot rise by leaving
findings out.

Used by ``tests/test_truth_set.py`` and ``bench/truth.py`` (the table).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
LABELS = HERE / "labels.yaml"


@dataclass(frozen=True)
class Label:
    file: str
    object: str  # Kind/name
    rule: str
    expect: str  # fire | silent
    reason: str
    container: str | None = None
    known: bool = False  # a wrong finding the tool still makes

    @property
    def key(self) -> tuple[str, str, str, str | None]:
        return (self.file, self.object, self.rule, self.container)


@dataclass
class RuleScore:
    right: int = 0  # findings labelled fire
    wrong: int = 0  # findings labelled silent (known false positives)
    unreviewed: int = 0  # findings with no label: counted as wrong
    missed: int = 0  # fire labels with no finding
    category: str = ""
    examples: list[str] = field(default_factory=list)

    @property
    def findings(self) -> int:
        return self.right + self.wrong + self.unreviewed

    @property
    def precision(self) -> float | None:
        return self.right / self.findings if self.findings else None


def load_labels(path: Path = LABELS) -> list[Label]:
    entries = yaml.safe_load(path.read_text()) or []
    return [Label(**entry) for entry in entries]


def resolve(name: str) -> Path:
    head, _, rest = name.partition("/")
    return (CORPUS / rest) if head == "corpus" else (HERE / name)


def label_name(path: str) -> str:
    """A finding's file as labels name it."""
    resolved = Path(path).resolve()
    if resolved.is_relative_to(CORPUS.resolve()):
        return "corpus/" + resolved.relative_to(CORPUS.resolve()).as_posix()
    return resolved.relative_to(HERE).as_posix()


def run_check(files: Sequence[Path], extra_args: Sequence[str] = (), gpuaudit: str | None = None) -> dict:
    """``gpuaudit check`` on ``files``, as a user runs it (JSON out); by
    ``gpuaudit`` (an executable) where given, to judge another build."""
    env = {**os.environ, "NO_COLOR": "1"}
    command = [gpuaudit] if gpuaudit else [sys.executable, "-m", "gpuaudit"]
    proc = subprocess.run(
        [*command, "check", "--no-kustomize", "--format", "json", *extra_args] + [str(f) for f in files],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode not in (0, 1, 2):
        raise RuntimeError(f"gpuaudit check exited {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def finding_key(f: Mapping) -> tuple[str, str, str, str | None]:
    r = f["resource"]
    return (label_name(f["location"]["file"]), f"{r['kind']}/{r['name']}", f["rule"], r.get("container"))


def judge(labels: Iterable[Label], findings: Iterable[Mapping]) -> list[tuple[Mapping, Label | None]]:
    """Each finding with the label that judges it (None: unreviewed). A label
    without a container covers every container of its object."""
    by_key = {label.key: label for label in labels}
    by_object = {(k[0], k[1], k[2]): label for k, label in by_key.items() if k[3] is None}
    out = []
    for f in findings:
        key = finding_key(f)
        out.append((f, by_key.get(key) or by_object.get(key[:3])))
    return out


def score(labels: Iterable[Label], findings: Iterable[Mapping]) -> dict[str, RuleScore]:
    labels = list(labels)
    by_key = {label.key: label for label in labels}
    scores: dict[str, RuleScore] = {}
    seen: Counter[tuple[str, str, str, str | None]] = Counter()
    for f, label in judge(labels, findings):
        key = finding_key(f)
        s = scores.setdefault(f["rule"], RuleScore(category=f["category"]))
        if label is None:
            s.unreviewed += 1
            s.examples.append(f"unreviewed: {key}")
        elif label.expect == "fire":
            s.right += 1
            seen[label.key] += 1
        else:
            s.wrong += 1
            seen[label.key] += 1
            s.examples.append(f"wrong: {key}: {label.reason}")
    for label in by_key.values():
        if label.expect == "fire" and not seen[label.key]:
            s = scores.setdefault(label.rule, RuleScore())
            s.missed += 1
            s.examples.append(f"missed: {label.key}: {label.reason}")
    return scores


def wrong_share(scores: Mapping[str, RuleScore]) -> str:
    """How many findings are not labelled right (wrong, or unreviewed), of all."""
    found = sum(s.findings for s in scores.values())
    wrong = sum(s.wrong + s.unreviewed for s in scores.values())
    return f"{wrong} of {found} findings wrong or unreviewed ({wrong / found:.1%})" if found else "no findings"


def table(scores: Mapping[str, RuleScore]) -> str:
    lines = [
        "| rule | category | findings | right | wrong | unreviewed | missed | precision |",
        "|---|---|---|---|---|---|---|---|",
    ]
    totals: dict[str, RuleScore] = {}
    for rule in sorted(scores):
        s = scores[rule]
        p = "n/a" if s.precision is None else f"{s.precision:.2f}"
        lines.append(
            f"| {rule} | {s.category} | {s.findings} | {s.right} | {s.wrong} | {s.unreviewed} | {s.missed} | {p} |"
        )
        t = totals.setdefault(s.category or "?", RuleScore(category=s.category))
        t.right, t.wrong, t.unreviewed, t.missed = (
            t.right + s.right,
            t.wrong + s.wrong,
            t.unreviewed + s.unreviewed,
            t.missed + s.missed,
        )
    lines += [
        "",
        "| category | findings | right | wrong + unreviewed | missed | precision |",
        "|---|---|---|---|---|---|",
    ]
    for category in sorted(totals):
        t = totals[category]
        p = "n/a" if t.precision is None else f"{t.precision:.2f}"
        lines.append(f"| {category} | {t.findings} | {t.right} | {t.wrong + t.unreviewed} | {t.missed} | {p} |")
    return "\n".join(lines)
