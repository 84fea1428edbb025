"""The rule pack's cache (engine/rule_cache.py): the same rules as loading
them, invalidated by any change to what loading reads, never trusted when it
is corrupt or writable by others, and never written outside its folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gpuaudit.bundled import policies_dir
from gpuaudit.engine import rule_cache
from gpuaudit.engine.rules import load_rules

FACTS_GPU_POD = {"gpu": {"requested": True, "whole": True, "count": 1.0}, "kind": "Deployment"}


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("GPUAUDIT_NO_CACHE", raising=False)
    return tmp_path / "xdg" / "gpuaudit"


@pytest.fixture
def rule_dir(tmp_path: Path) -> Path:
    """A copy of the built-in rules that a test may change."""
    return Path(shutil.copytree(policies_dir(), tmp_path / "policies"))


def _no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError("the rules were loaded, not read from the cache")

    monkeypatch.setattr(rule_cache, "load_rules", fail)


def _fields(rule) -> dict:
    return {name: getattr(rule, name) for name in rule_cache._RULE_FIELDS}


def test_the_cache_gives_what_loading_gives(cache_home: Path, rule_dir: Path, monkeypatch) -> None:
    fresh, fresh_errors = load_rules([rule_dir])
    first, errors = rule_cache.load_rules_cached([rule_dir])
    assert [_fields(r) for r in first] == [_fields(r) for r in fresh]
    assert [str(e) for e in errors] == [str(e) for e in fresh_errors]
    entries = list(cache_home.glob("rules-*.bin"))
    assert len(entries) == 1

    _no_loading(monkeypatch)
    cached, cached_errors = rule_cache.load_rules_cached([rule_dir])
    assert [_fields(r) for r in cached] == [_fields(r) for r in fresh]
    # the regular expressions each schema holds come with the rule: a run
    # from the cache never walks the schemas for them (rules.Rule.timed)
    assert all(r.timed is not None for r in cached)
    assert [str(e) for e in cached_errors] == [str(e) for e in fresh_errors]
    # the compiled validators judge as freshly compiled ones do
    for cached_rule, fresh_rule in zip(cached, fresh, strict=True):
        assert cached_rule.compiled
        assert cached_rule.applies_to(FACTS_GPU_POD) == fresh_rule.applies_to(FACTS_GPU_POD)
        if cached_rule.applies_to(FACTS_GPU_POD):
            assert cached_rule.violated_by(FACTS_GPU_POD) == fresh_rule.violated_by(FACTS_GPU_POD)


def test_a_changed_rule_file_invalidates_the_cache(cache_home: Path, rule_dir: Path) -> None:
    rules, _ = rule_cache.load_rules_cached([rule_dir])
    path = Path(rules[0].source)
    assert rules[0].title != "A changed title"
    path.write_text(path.read_text().replace(f"title: {rules[0].title}", "title: A changed title", 1))
    again, _ = rule_cache.load_rules_cached([rule_dir])
    assert again[0].title == "A changed title"


def test_a_new_or_removed_rule_file_invalidates_the_cache(cache_home: Path, rule_dir: Path) -> None:
    rules, _ = rule_cache.load_rules_cached([rule_dir])
    Path(rules[-1].source).unlink()
    fewer, _ = rule_cache.load_rules_cached([rule_dir])
    assert [r.id for r in fewer] == [r.id for r in rules[:-1]]
    (rule_dir / "broken.yaml").write_text("id: [unterminated\n")
    _, errors = rule_cache.load_rules_cached([rule_dir])
    assert any("broken.yaml" in e.file for e in errors)


def test_config_params_and_severities_are_part_of_the_key(cache_home: Path, rule_dir: Path) -> None:
    rules, _ = rule_cache.load_rules_cached([rule_dir])
    rule = next(r for r in rules if r.params)
    name, default = next(iter(rule.params.items()))
    value = default + 1 if isinstance(default, (int, float)) and not isinstance(default, bool) else default
    changed, _ = rule_cache.load_rules_cached([rule_dir], {rule.id: {name: value}}, {rule.id: "info"})
    again = next(r for r in changed if r.id == rule.id)
    assert again.severity == "info"
    assert again.params[name] == value
    back, _ = rule_cache.load_rules_cached([rule_dir])
    assert next(r for r in back if r.id == rule.id).severity == rule.severity


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # truncated
        lambda b: b[:-10] + bytes(10),  # the end zeroed
        lambda b: b[:200] + bytes([b[200] ^ 0xFF]) + b[201:],  # one flipped byte
        lambda b: b"",  # empty
        lambda b: b"not a cache entry at all",
    ],
)
def test_a_corrupt_entry_is_ignored_and_rewritten(cache_home: Path, rule_dir: Path, damage) -> None:
    expected, _ = rule_cache.load_rules_cached([rule_dir])
    [entry] = cache_home.glob("rules-*.bin")
    entry.write_bytes(damage(entry.read_bytes()))
    rules, _ = rule_cache.load_rules_cached([rule_dir])  # no crash, the rules as loaded
    assert [_fields(r) for r in rules] == [_fields(r) for r in expected]
    assert rules[0].applies_to(FACTS_GPU_POD) in (True, False)
    # written again, whole
    assert rule_cache.read_entry(cache_home, rule_cache.cache_key([rule_dir], {}, {})) is not None


def test_an_entry_of_another_shape_is_ignored(cache_home: Path, rule_dir: Path) -> None:
    import marshal

    expected, _ = rule_cache.load_rules_cached([rule_dir])
    [entry] = cache_home.glob("rules-*.bin")
    payload = marshal.dumps({"key": "something else", "rules": [], "errors": []})
    entry.write_bytes(rule_cache._MAGIC + rule_cache.checksum(payload) + b"\n" + payload)
    rules, _ = rule_cache.load_rules_cached([rule_dir])
    assert [r.id for r in rules] == [r.id for r in expected]


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
def test_an_entry_others_can_write_is_not_trusted(cache_home: Path, rule_dir: Path, monkeypatch) -> None:
    rule_cache.load_rules_cached([rule_dir])
    key = rule_cache.cache_key([rule_dir], {}, {})
    assert oct(cache_home.stat().st_mode & 0o777) == oct(0o700)
    [entry] = cache_home.glob("rules-*.bin")
    assert entry.stat().st_mode & 0o077 == 0
    assert rule_cache.read_entry(cache_home, key) is not None

    entry.chmod(0o666)  # a file anyone can write
    assert rule_cache.read_entry(cache_home, key) is None
    entry.chmod(0o600)
    cache_home.chmod(0o777)  # a folder anyone can write into
    assert rule_cache.read_entry(cache_home, key) is None
    cache_home.chmod(0o700)
    assert rule_cache.read_entry(cache_home, key) is not None

    me = os.geteuid()
    monkeypatch.setattr(rule_cache.os, "geteuid", lambda: me + 1)  # another user's
    assert rule_cache.read_entry(cache_home, key) is None


@pytest.mark.skipif(os.name != "posix", reason="symlinks")
def test_a_symlinked_entry_is_not_followed(cache_home: Path, rule_dir: Path, tmp_path: Path) -> None:
    rule_cache.load_rules_cached([rule_dir])
    key = rule_cache.cache_key([rule_dir], {}, {})
    [entry] = cache_home.glob("rules-*.bin")
    elsewhere = tmp_path / "elsewhere.bin"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    assert rule_cache.read_entry(cache_home, key) is None


def test_nothing_is_written_outside_the_cache_folder(tmp_path: Path, rule_dir: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored, as XDG says
    monkeypatch.chdir(tmp_path)
    before = sorted(p for p in tmp_path.rglob("*") if p.is_file() and home not in p.parents)
    rule_cache.load_rules_cached([rule_dir])
    after = sorted(p for p in tmp_path.rglob("*") if p.is_file() and home not in p.parents)
    assert before == after
    written = [p.relative_to(home) for p in home.rglob("*") if p.is_file()]
    assert len(written) == 1 and written[0].parent == Path(".cache/gpuaudit")
    assert not (tmp_path / "relative").exists()


def test_an_unwritable_cache_is_no_error(tmp_path: Path, rule_dir: Path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    rules, _ = rule_cache.load_rules_cached([rule_dir])
    assert rules and blocker.read_text().startswith("a file")


def test_no_cache_when_turned_off(cache_home: Path, rule_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("GPUAUDIT_NO_CACHE", "1")
    rules, _ = rule_cache.load_rules_cached([rule_dir])
    assert rules and not cache_home.exists()


def test_old_entries_are_pruned(cache_home: Path, rule_dir: Path) -> None:
    for severity in ("info", "low", "medium", "high", "critical"):
        for rule_id in ("GPA-AL-001", "GPA-AL-002"):
            rule_cache.load_rules_cached([rule_dir], {}, {rule_id: severity})
    assert len(list(cache_home.glob("rules-*.bin"))) <= rule_cache._KEEP
    assert not list(cache_home.glob(".rules-*"))  # no temporary file left behind
