"""The nearest known name to a mistyped one, as a hint: `chek` -> check,
`polices` -> policies, `GPA-AL-999` -> GPA-AL-009. One way to say it, so every
typo the CLI and the config reader catch reads the same."""

from __future__ import annotations

from collections.abc import Iterable


def nearest(word: str, known: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The known name closest to ``word`` (difflib's ratio at least ``cutoff``), or None."""
    # imported on a typo only: the config reader imports this module on every check
    from difflib import get_close_matches

    found = get_close_matches(word, sorted(set(known)), n=1, cutoff=cutoff)
    return found[0] if found else None


def did_you_mean(word: str, known: Iterable[str], cutoff: float = 0.6) -> str:
    """``"; did you mean NAME?"`` for the nearest known name, or "" when none is near."""
    found = nearest(word, known, cutoff)
    return f"; did you mean {found}?" if found else ""
