"""Which options gpuaudit's commands take, from the click command objects, and
a check of a command line written in docs or deploy scripts against them."""

from __future__ import annotations

import shlex

import click

from gpuaudit.cli.main import main as cli_main


def command_options(*path: str) -> set[str]:
    """Every option string of `gpuaudit <path...>`."""
    ctx = click.Context(cli_main)
    command: click.Command = cli_main
    for name in path:
        assert isinstance(command, click.Group), f"{' '.join(path)}: {name} is not a command"
        sub = command.get_command(ctx, name)
        assert sub is not None, f"gpuaudit has no command {' '.join(path)}"
        command = sub
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)}


def command_path(words: list[str]) -> list[str]:
    """The subcommand names at the start of ``words`` (after `gpuaudit`)."""
    ctx = click.Context(cli_main)
    command: click.Command = cli_main
    path: list[str] = []
    for word in words:
        if not isinstance(command, click.Group) or word.startswith("-"):
            break
        sub = command.get_command(ctx, word)
        if sub is None:
            break
        path.append(word)
        command = sub
    return path


def unknown_options(line: str) -> tuple[list[str], list[str]]:
    """(command path, options it does not take) for one `gpuaudit ...` command
    line; shell syntax after the command (pipes, redirections, ||) ends it."""
    words = shlex.split(line, comments=True)
    start = words.index("gpuaudit") + 1
    words = words[start:]
    for stop in ("|", "||", "&&", ";", ">", "2>&1", "2>"):
        if stop in words:
            words = words[: words.index(stop)]
    path = command_path(words)
    assert path, f"no gpuaudit command in {line!r}"
    known = command_options(*path)
    flags = [w.split("=", 1)[0] for w in words[len(path) :] if w.startswith("-") and w != "-"]
    return path, [f for f in flags if f not in known]
