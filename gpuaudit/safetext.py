"""Text from input, made safe to show: the one definition of what gpuaudit
never prints or writes for people.

Object names, messages, file names and server answers are quoted in every
output. A terminal (or a CI log that renders ANSI, or an editor) acts on
control characters in them: an escape sequence can clear the screen, retitle
the window or hide a line, a newline in a name can forge a finding of its
own, and a bidi override (U+202E) reverses the text that follows. So:

- ``clean``: escape sequences go whole (CSI with its parameters, OSC/DCS/APC
  strings with their payload, 7- or 8-bit), then every control left: C0 but
  ``\\n`` and ``\\t``, DEL, C1, and the bidi embeddings, overrides and isolates
  (U+202A-U+202E, U+2066-U+2069). Lone surrogates (JSON can carry one) become
  U+FFFD, so any stream can take the text.
- ``one_line``: ``clean``, and line breaks (``\\n``, U+2028, U+2029) become a
  space: for names and every field that is one line in its format.
- ``escape_json``: for JSON written with ``ensure_ascii=False``, the same
  characters as ``\\u`` escapes: the data is kept, the bytes are inert.

Removal is idempotent (``clean(clean(x)) == clean(x)``) and touches nothing
else: printable text in any script, backslashes, ``%`` and markup characters
are left to the format's own escaping, which runs once, after this.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_BIDI = "\u202a-\u202e\u2066-\u2069"
_SEQUENCES = (
    # OSC, DCS, SOS, PM, APC strings (7- or 8-bit), up to BEL or ST
    r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|(?:\x1b\[|\x9b)[0-9;:?<=>]*[ -/]*[@-~]"  # CSI
    r"|\x1b[ -/]*[0-~]"  # other escape sequences (charset selection, ESC c, ...)
)
# Patterns, not compiled ones: most text is printable and never needs them,
# and compiling these ranges cost a pre-commit run 1%. ``re`` compiles each
# on first use and keeps it.
_CONTROL = f"{_SEQUENCES}|[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI}]"
_ANY = f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI}\ud800-\udfff]"  # what either removes
_SURROGATE = "[\ud800-\udfff]"
_LINE_BREAK = "[\n\u2028\u2029]"
_JSON_UNSAFE = f"[\\x7f-\\x9f\u2028\u2029{_BIDI}\ud800-\udfff]"


def clean(text: object) -> str:
    """``text`` without terminal controls or bidi overrides (newlines and tabs kept)."""
    text = str(text)
    if text.isprintable() or not re.search(_ANY, text):  # most text: one quick look
        return text
    return re.sub(_SURROGATE, "\ufffd", re.sub(_CONTROL, "", text))


def one_line(text: object) -> str:
    """``clean(text)`` on one line: a name cannot start a line of its own."""
    text = str(text)
    if text.isprintable():
        return text
    return re.sub(_LINE_BREAK, " ", clean(text))


def clean_tree(value: Any) -> Any:
    """Every string in ``value`` (mapping keys included, recursively) cleaned."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, Mapping):
        return {clean_tree(k): clean_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_tree(v) for v in value]
    return value


def escape_json(text: str) -> str:
    """JSON text with the characters ``clean`` removes written as ``\\u``
    escapes (JSON escapes C0 itself), lone surrogates too (no UTF-8 stream
    takes them raw). Only for JSON: there these characters can stand inside
    strings only, so the escaped text means the same."""
    return re.sub(_JSON_UNSAFE, lambda m: f"\\u{ord(m.group()):04x}", text)
