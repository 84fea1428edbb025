"""Which rules run: the built-in rules plus the config's and the command line's
folders, selected by id or category; and which pod-spec locators apply."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import msgspec

from gpuaudit.bundled import policies_dir
from gpuaudit.engine.rule_cache import load_rules_cached
from gpuaudit.engine.rules import Rule
from gpuaudit.kube.podspecs import KindLocator, builtin_locators, parse_locators
from gpuaudit.model import InputError
from gpuaudit.sources.user_config import Config


class PolicyOptions(msgspec.Struct, frozen=True):
    """Which rules the command line asks for: the config file, more rule
    folders, and the rule ids or categories to run and to leave out (none:
    the config's)."""

    config_path: Path | None = None
    policy_dirs: tuple[Path, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def load(self, config: Config) -> tuple[list[Rule], list[InputError]]:
        """The rules that run, and the problems with them (load_policy)."""
        return load_policy(config, self.policy_dirs, self.include, self.exclude)


def load_policy(
    config: Config,
    extra_dirs: Sequence[Path] = (),
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> tuple[list[Rule], list[InputError]]:
    """Built-in rules plus the config's and the command line's folders, selected.
    The loaded and compiled rules come from the user's cache when their files
    are unchanged (engine/rule_cache.py)."""
    rules, errors, known = _catalogue(config, extra_dirs)
    for rule_id in sorted(set(config.params) | set(config.severity)):
        if rule_id not in known:
            errors.append(InputError(str(config.path), None, f"config names unknown rule {rule_id}", "warning"))
    where = (
        "--rules" if include else f"{config.path} rules",
        "--exclude-rules" if exclude else f"{config.path} exclude_rules",
    )
    include, exclude = include or config.rules, exclude or config.exclude_rules
    selected = select(rules, include, exclude)
    errors += selection_problems(rules, selected, include, exclude, where)
    return selected, errors


def load_catalogue(config: Config, extra_dirs: Sequence[Path] = ()) -> tuple[list[Rule], list[InputError]]:
    """Every rule of the built-in and the named folders, opt-in ones too, none
    selected away: what `rules explain` can explain."""
    rules, errors, _ = _catalogue(config, extra_dirs)
    return rules, errors


def _catalogue(config: Config, extra_dirs: Sequence[Path]) -> tuple[list[Rule], list[InputError], set[str]]:
    dirs = [policies_dir(), *config.policies, *extra_dirs]
    rules, rule_errors = load_rules_cached(dirs, config.params, config.severity)
    errors = [*_refused_folders(config, extra_dirs)]
    errors += [InputError(e.file, e.line, e.message) for e in rule_errors]
    known = {r.id for r in rules} | {e.rule_id for e in rule_errors if e.rule_id}
    return rules, errors, known


def _refused_folders(config: Config, extra_dirs: Sequence[Path]) -> list[InputError]:
    """The config's ``policies:`` folders refused for leading outside its
    repository (sources/user_config.py): each is an error, unless the command
    line names it too (``--policies``), which loads it."""
    named = [folder.resolve() for folder in extra_dirs]
    return [error for folder, error in config.refused_policies if folder.resolve() not in named]


def selection_problems(
    rules: Sequence[Rule],
    selected: Sequence[Rule],
    include: Sequence[str],
    exclude: Sequence[str],
    where: tuple[str, str] = ("--rules", "--exclude-rules"),
) -> list[InputError]:
    """A name that is no rule id or category selects nothing (a typo, a
    renamed rule): say so; and when --rules selects no rule at all, the run
    must not pass as if it had audited something."""
    names = {r.id for r in rules} | {r.category for r in rules}
    problems = [
        InputError(
            where[0] if name in include else where[1],
            None,
            f"{name!r} is no rule id or category; it selects nothing",
            "warning",
        )
        for name in dict.fromkeys([*include, *exclude])
        if name not in names
    ]
    if include and not selected:
        problems.append(InputError(where[0], None, "no rule is selected: nothing was audited"))
    return problems


def select(rules: Iterable[Rule], include: Sequence[str], exclude: Sequence[str]) -> list[Rule]:
    """Rules named by id or category in ``include`` (all when empty), minus
    ``exclude``; an opt-in rule only when ``include`` names its id."""

    def named(rule: Rule, names: Sequence[str]) -> bool:
        return rule.id in names or rule.category in names

    def wanted(rule: Rule) -> bool:
        if rule.opt_in:
            return rule.id in include
        return not include or named(rule, include)

    return [r for r in rules if wanted(r) and not named(r, exclude)]


def locators_for(config: Config) -> Mapping[tuple[str, str], KindLocator]:
    """The built-in pod-spec locators, extended by the config's ``podspecs``."""
    if not config.podspecs:
        return builtin_locators()
    return {**builtin_locators(), **parse_locators(config.podspecs)}
