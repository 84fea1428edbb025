"""Baselines: adopt gpuaudit on a repository with existing findings.

`check --write-baseline FILE` records today's findings; `check --baseline
FILE` then hides exactly those and reports everything else. A finding is
identified by its fingerprint: file (relative to the working directory),
kind, namespace, name, container and rule — not its line, so editing the
file above a finding does not bring it back. Several findings with one
fingerprint (two pod templates of one workload) are counted, and only as
many are hidden as were recorded. Entries that no longer match any finding
(the debt was paid, or the object renamed) are returned, so they can be
listed and the baseline pruned.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from gpuaudit import __version__
from gpuaudit.files import FileReadError, command_line_roots, confined_file, read_bytes
from gpuaudit.jsontext import indented
from gpuaudit.model import Finding

VERSION = 1
# An entry is about 200 bytes: 64 MiB is some 300,000 distinct findings,
# far more than any repository adopts a baseline for.
MAX_BASELINE_BYTES = 64 * 1024 * 1024
FIELDS = ("rule", "file", "kind", "namespace", "name", "container")

Fingerprint = tuple[str, str, str, str, str, str]


class BaselineError(ValueError):
    pass


class Applied(msgspec.Struct, frozen=True):
    kept: list[Finding]
    hidden: list[Finding]
    stale: list[dict[str, Any]]  # baseline entries that matched nothing


def relative_file(file: str, cwd: Path | None = None) -> str:
    """A finding's file as stored in a baseline: relative to the working
    directory, with forward slashes, so the baseline works on any checkout."""
    if not file or file.startswith("<"):
        return file
    path = Path(file)
    if path.is_absolute():
        try:
            path = Path(os.path.relpath(path, cwd or Path.cwd()))
        except ValueError:  # another drive on Windows
            return path.as_posix()
    return Path(os.path.normpath(path)).as_posix()


def fingerprint(f: Finding, cwd: Path | None = None) -> Fingerprint:
    r = f.resource
    return (
        f.rule,
        relative_file(f.location.file, cwd),
        r.kind,
        r.namespace or "",
        r.name,
        r.container or "",
    )


def build(findings: Iterable[Finding], cwd: Path | None = None) -> dict[str, Any]:
    counts: Counter[Fingerprint] = Counter(fingerprint(f, cwd) for f in findings)
    entries = [{**dict(zip(FIELDS, key, strict=True)), "count": n} for key, n in sorted(counts.items())]
    return {
        "version": VERSION,
        "tool": {"name": "gpuaudit", "version": __version__},
        "findings": entries,
    }


def dumps(baseline: Mapping[str, Any]) -> str:
    return indented(baseline) + "\n"


def load(path: Path) -> dict[Fingerprint, int]:
    """The counts of the baseline ``path`` (named with ``--baseline``; never
    read through a link that leads out of its repository: files.confined)."""
    try:
        confined_file(path, command_line_roots(path), what="baseline")
        data = json.loads(read_bytes(path, limit=MAX_BASELINE_BYTES, what="baseline"))
    except FileReadError as exc:
        raise BaselineError(str(exc)) from None
    except ValueError as exc:  # invalid JSON or UTF-8; an integer past Python's 4,300 digits
        raise BaselineError(f"{path}: not a gpuaudit baseline (invalid JSON: {exc})") from None
    except RecursionError:
        raise BaselineError(f"{path}: not a gpuaudit baseline (nested too deep to parse)") from None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise BaselineError(f"{path}: not a gpuaudit baseline of version {VERSION}")
    entries = data.get("findings")
    if not isinstance(entries, list):
        raise BaselineError(f"{path}: `findings` must be a list")
    counts: dict[Fingerprint, int] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in FIELDS):
            raise BaselineError(f"{path}: findings[{i}] needs string fields {', '.join(FIELDS)}")
        key: Fingerprint = tuple(entry[k] for k in FIELDS)  # type: ignore[assignment]
        count = entry.get("count", 1)
        counts[key] = counts.get(key, 0) + (count if isinstance(count, int) and count > 0 else 1)
    return counts


def apply(findings: Sequence[Finding], baseline: Mapping[Fingerprint, int], cwd: Path | None = None) -> Applied:
    left = dict(baseline)
    kept: list[Finding] = []
    hidden: list[Finding] = []
    for f in findings:
        key = fingerprint(f, cwd)
        if left.get(key, 0) > 0:
            left[key] -= 1
            hidden.append(f)
        else:
            kept.append(f)
    stale = [
        {**dict(zip(FIELDS, key, strict=True)), "count": n}
        for key, n in sorted(left.items())
        if n > 0 and baseline[key] == n  # entries that matched nothing at all
    ]
    return Applied(kept, hidden, stale)


def describe(entry: Mapping[str, Any]) -> str:
    who = f"{entry['kind']} {entry['namespace'] + '/' if entry['namespace'] else ''}{entry['name']}"
    if entry["container"]:
        who += f" [{entry['container']}]"
    return f"{entry['rule']} {who} in {entry['file'] or '?'}"


def apply_to_result(result: Any, path: Path, cwd: Path | None = None) -> None:
    """Move baselined findings of an AuditResult to its suppressed list
    (reason: the baseline file) and list stale entries as warnings."""
    from gpuaudit.model import InputError

    applied = apply(result.findings, load(path), cwd)
    result.findings[:] = applied.kept
    reason = f"in baseline {path}"
    result.suppressed.extend((f, reason) for f in applied.hidden)
    result.errors.extend(
        InputError(
            str(path),
            None,
            f"baseline entry no longer matches any finding: {describe(entry)}",
            level="warning",
        )
        for entry in applied.stale
    )
