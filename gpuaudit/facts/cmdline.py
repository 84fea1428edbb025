"""A container's command line as the process will see it.

Kubernetes expands ``$(VAR)`` in command and args from the container's env;
a shell (``sh -c "..."``) expands ``${VAR}``/``$VAR`` and splits words. Both
are done here with what the manifest says, so ``--model=$(MODEL_ID)`` reads
as the model it names. Unknown variables stay as written.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_K8S_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_SHELL_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_INNER_SPACE = re.compile(r"\S\s+\S")  # words to split, once the ends are stripped


@dataclass(frozen=True)
class Token:
    text: str
    field: str  # "command" or "args"
    index: int  # item of that list the token came from


def expand(text: str, env: Mapping[str, str]) -> str:
    if "$" not in text:
        return text
    def k8s(m: re.Match[str]) -> str:
        return env.get(m.group(1), m.group(0))

    def shell(m: re.Match[str]) -> str:
        return env.get(m.group(1) or m.group(2), m.group(0))

    return _SHELL_VAR.sub(shell, _K8S_VAR.sub(k8s, text))


def tokens(command: Sequence[str], args: Sequence[str], env: Mapping[str, str]) -> list[Token]:
    """Words of command + args; items holding a shell line are split."""
    out: list[Token] = []
    for field, items in (("command", command), ("args", args)):
        for i, item in enumerate(items):
            text = expand(item, env)
            if _INNER_SPACE.search(text):
                try:
                    words = shlex.split(text, comments=False)
                except ValueError:  # unbalanced quotes: split on whitespace
                    words = text.split()
            else:
                words = [text.strip()]
            out.extend(Token(w, field, i) for w in words if w)
    return out


def flag(words: Sequence[Token], names: Sequence[str]) -> Token | None:
    """The value of the last ``--name value`` or ``--name=value`` among ``names``."""
    found: Token | None = None
    for i, word in enumerate(words):
        if not word.text.startswith("-"):  # most words are values, not flags
            continue
        head, eq, value = word.text.partition("=")
        if head not in names:
            continue
        if eq:
            found = Token(value, word.field, word.index)
        elif i + 1 < len(words) and not words[i + 1].text.startswith("-"):
            found = words[i + 1]
    return found
