"""Exit codes mean one thing each: a crash of gpuaudit itself is 3, with one
line on stderr (the trace only with --debug), never 1 ("findings")."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gpuaudit.cli import check as check_command
from gpuaudit.cli.main import CRASH_EXIT_CODE, main
from tests.manifests import PINNED


@pytest.fixture
def crashing_check(monkeypatch):
    def crash(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(check_command, "run_check", crash)


def test_a_crash_exits_3_with_one_line(tmp_path, crashing_check):
    (tmp_path / "pod.yaml").write_text(PINNED)
    result = CliRunner().invoke(main, ["check", str(tmp_path / "pod.yaml")])
    assert result.exit_code == CRASH_EXIT_CODE == 3
    lines = result.stderr.strip().splitlines()
    assert lines == ["gpuaudit: internal error (a bug; --debug shows where): RuntimeError: boom"]


def test_debug_prints_the_trace(tmp_path, crashing_check):
    (tmp_path / "pod.yaml").write_text(PINNED)
    result = CliRunner().invoke(main, ["--debug", "check", str(tmp_path / "pod.yaml")])
    assert result.exit_code == 3
    assert "Traceback (most recent call last)" in result.stderr
    assert 'raise RuntimeError("boom")' in result.stderr


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["check", "pod.yaml"], 1),  # a high finding (a pinned pod)
        (["check", "pod.yaml", "--fail-on", "critical"], 0),
        (["check", "missing.yaml"], 2),  # an input error
        (["check"], 2),  # a usage error
        (["rules", "explain", "GPA-XX-999"], 2),
    ],
)
def test_commands_return_their_exit_code(tmp_path, monkeypatch, args, code):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pod.yaml").write_text(PINNED)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code, result.output
