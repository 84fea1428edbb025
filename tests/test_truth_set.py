"""The truth set (tests/truth/labels.yaml): hand-labelled findings on the real
corpus and on manifests written for each class of past mistakes. Every
finding on a labelled file must be labelled, every expected finding made,
and every rule with five or more findings right at least nine times in ten
(counting known mistakes and unreviewed findings as wrong)."""

from __future__ import annotations

import pytest

from tests.truth.truth import CORPUS, HERE, judge, load_labels, resolve, run_check, score

LABELS = load_labels()
USE_CORPUS = CORPUS.is_dir()
# Labels on corpus files count only where ../shared/corpus is here.
AUDITED = [label for label in LABELS if USE_CORPUS or not label.file.startswith("corpus/")]


@pytest.fixture(scope="module")
def audit() -> dict:
    files = sorted({resolve(label.file) for label in AUDITED})
    files += sorted((HERE / "manifests").glob("*.yaml"))
    return run_check(sorted(set(files)))


def test_every_finding_on_a_labelled_file_is_labelled(audit: dict) -> None:
    unreviewed = [
        f"{f['rule']} {f['location']['file']}:{f['location']['line']}"
        for f, label in judge(LABELS, audit["findings"])
        if label is None
    ]
    assert not unreviewed, "label these (tests/truth/labels.yaml):\n" + "\n".join(unreviewed)


def test_every_expected_finding_is_made(audit: dict) -> None:
    missed = [e for s in score(AUDITED, audit["findings"]).values() for e in s.examples if e.startswith("missed")]
    assert not missed, "\n".join(missed)


def test_no_silent_label_fires_unless_known(audit: dict) -> None:
    wrong = [
        f"{f['rule']} {f['location']['file']}:{f['location']['line']}: {label.reason}"
        for f, label in judge(LABELS, audit["findings"])
        if label is not None and label.expect == "silent" and not label.known
    ]
    assert not wrong, "\n".join(wrong)


def test_known_mistakes_are_still_made(audit: dict) -> None:
    """A known mistake the tool no longer makes: drop `known`, so the gain counts."""
    made = {label.key for _, label in judge(LABELS, audit["findings"]) if label is not None}
    stale = [label.key for label in AUDITED if label.known and label.key not in made]
    assert not stale, stale


@pytest.mark.skipif(not USE_CORPUS, reason="../shared/corpus is not here")
def test_precision_per_rule_at_least_nine_in_ten(audit: dict) -> None:
    low = {
        rule: f"{s.precision:.2f} ({s.right}/{s.findings})"
        for rule, s in score(LABELS, audit["findings"]).items()
        if s.findings >= 5 and (s.precision or 0) < 0.9
    }
    assert not low, low


def test_unknown_kinds_holding_gpus_are_workloads_with_a_warning(audit: dict) -> None:
    warnings = [e["message"] for e in audit["errors"] if "not in the pod-spec table" in e["message"]]
    assert any(w.startswith("Workspace") for w in warnings), warnings
    # NIMService is in the table now: audited exactly, without a warning.
    assert not any(w.startswith("NIMService") for w in warnings), warnings


def test_placeholder_gpu_counts_are_input_errors(audit: dict) -> None:
    errors = [e for e in audit["errors"] if e["file"].endswith("placeholders.yaml")]
    assert {e["line"] for e in errors} == {15, 29}, errors
    assert all("not a GPU count" in e["message"] for e in errors)
