"""A container's command line as the process will see it.

Kubernetes expands ``$(VAR)`` in command and args from the container's env;
a shell (``sh -c "..."``) expands ``${VAR}``/``$VAR`` and splits words. Both
are done here with what the manifest says, so ``--model=$(MODEL_ID)`` reads
as the model it names. Unknown variables stay as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import msgspec

_K8S_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_SHELL_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_INNER_SPACE = re.compile(r"\S\s+\S")  # words to split, once the ends are stripped
# What a shell line treats apart from str.split: quotes, the escape, and
# whitespace str.split splits on but the shell does not (beyond ASCII, and these).
_NOT_PLAIN = re.compile(r"""['"\\\x0b\x0c\x1c-\x1f]""")
# A shell line as shlex.split(line, comments=False) reads it: whitespace is
# " \t\r\n" only; a word is plain characters, backslash escapes, '...' and
# "..." pieces; anything else left (an unclosed quote, a trailing backslash)
# is what shlex refuses. shlex reads one character at a time in Python: on
# real manifests it was a third of the facts' time.
_SHELL_SCAN = re.compile(r"""[ \t\r\n]+|((?:[^ \t\r\n'"\\]+|\\.|'[^']*'|"(?:[^"\\]|\\.)*")+)|(.)""", re.DOTALL)
_SHELL_PIECE = re.compile(r"""([^'"\\]+)|"((?:[^"\\]|\\.)*)"|\\(.)|'([^']*)'""", re.DOTALL)
_ESCAPED_IN_DOUBLE_QUOTES = re.compile(r'\\([\\"])')  # any other backslash stays


class Token(msgspec.Struct, frozen=True):
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


class Words(list[Token]):
    """The tokens of a command line, and the value each flag has in it (facts
    look up dozens of flag spellings per container)."""

    def __init__(self, items: Iterable[Token] = ()) -> None:
        super().__init__(items)
        # flag -> (position, value) of its last occurrence that has a value
        self.flags: dict[str, tuple[int, Token]] = {}
        for i, word in enumerate(self):
            if not word.text.startswith("-"):
                continue
            head, eq, value = word.text.partition("=")
            if eq:
                self.flags[head] = (i, Token(value, word.field, word.index))
            elif i + 1 < len(self) and not self[i + 1].text.startswith("-"):
                self.flags[head] = (i, self[i + 1])


def tokens(command: Sequence[str], args: Sequence[str], env: Mapping[str, str]) -> Words:
    """Words of command + args; items holding a shell line are split."""
    out: list[Token] = []
    for field, items in (("command", command), ("args", args)):
        for i, item in enumerate(items):
            text = expand(item, env)
            if not _INNER_SPACE.search(text):
                words = [text.strip()]
            elif text.isascii() and not _NOT_PLAIN.search(text):
                words = text.split()  # what shlex gives: nothing to unquote, the same whitespace
            else:
                try:
                    words = shell_words(text)
                except ValueError:  # unbalanced quotes: split on whitespace
                    words = text.split()
            out.extend(Token(w, field, i) for w in words if w)
    return Words(out)


def shell_words(line: str) -> list[str]:
    """The words ``shlex.split(line, comments=False)`` gives; ValueError where
    it raises (an unclosed quote, a backslash at the end)."""
    words = []
    for scanned in _SHELL_SCAN.finditer(line):
        word, refused = scanned.groups()
        if refused is not None:
            raise ValueError(f"not a complete shell line at character {scanned.start()}")
        if word is None:  # whitespace
            continue
        if "'" in word or '"' in word or "\\" in word:
            word = "".join(map(_unquoted, _SHELL_PIECE.finditer(word)))
        words.append(word)
    return words


def _unquoted(piece: re.Match[str]) -> str:
    plain, double, escaped, single = piece.groups()
    if double is not None:
        return _ESCAPED_IN_DOUBLE_QUOTES.sub(r"\1", double)
    return plain if plain is not None else escaped if escaped is not None else single


def flag(words: Sequence[Token], names: Sequence[str]) -> Token | None:
    """The value of the last ``--name value`` or ``--name=value`` among ``names``
    (each starting with "-")."""
    flags = (words if isinstance(words, Words) else Words(words)).flags
    found = [flags[name] for name in names if name in flags]
    return max(found, key=lambda hit: hit[0])[1] if found else None
