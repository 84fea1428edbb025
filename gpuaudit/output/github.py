"""GitHub Actions workflow commands: one annotation per finding and input
problem (`::error file=…,line=…,title=…::message`), shown on the diff.

Severity maps to the annotation level: critical/high -> error, medium ->
warning, low/info -> notice. Values are escaped as the runner expects, so a
manifest's text can never end an annotation or start a new command.
"""

from __future__ import annotations

from typing import Any

from gpuaudit.model import AuditResult, Finding
from gpuaudit.safetext import clean, one_line

_LEVEL = {
    "critical": "error",
    "high": "error",
    "medium": "warning",
    "low": "notice",
    "info": "notice",
}


def _data(text: str) -> str:
    # No terminal control (C0, C1, bidi overrides) reaches the log; a newline
    # is encoded, as the runner expects (gpuaudit/safetext.py).
    return clean(text).replace("%", "%25").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(one_line(text)).replace(":", "%3A").replace(",", "%2C")


def _command(level: str, message: str, **props: object) -> str:
    fields = ",".join(f"{k}={_property(str(v))}" for k, v in props.items() if v not in (None, ""))
    return f"::{level}{' ' + fields if fields else ''}::{_data(message)}"


def _annotation(f: Finding) -> str:
    subject = one_line(f.resource.label())
    return _command(
        _LEVEL[f.severity],
        f"{subject}: {f.message}",
        file=f.location.file if f.location.file not in ("", "<stdin>") else None,
        line=f.location.line,
        title=f"{f.rule} {f.title} ({f.severity})",
    )


def render(result: AuditResult, **_: Any) -> str:
    lines = [_annotation(f) for f in result.findings]
    for e in result.errors:
        lines.append(
            _command(
                "error" if e.level == "error" else "warning",
                e.message,
                file=e.file if e.file not in ("", "<stdin>", "config", "telemetry") else None,
                line=e.line,
                title="gpuaudit input problem",
            )
        )
    return "".join(line + "\n" for line in lines)
