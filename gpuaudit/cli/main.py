"""The `gpuaudit` command group: every command lives in its own module and is
imported only when it runs, so `gpuaudit check` (run by pre-commit on every
commit) never loads the cluster client, Jinja2 or NVML.

Commands return their exit code: 0 clean, 1 findings at or above --fail-on,
2 input errors or a partial run. A crash exits 3, so it never reads as 1,
with one line on stderr (and the trace with --debug).
"""

from __future__ import annotations

import gc
import sys
from importlib import import_module
from typing import Any

import click

from gpuaudit import __version__
from gpuaudit.cli.groups import SuggestingGroup
from gpuaudit.output.terminal import CleanStream

# name -> "module:attribute"
COMMANDS = {
    "audit": "gpuaudit.cli.audit:audit",
    "check": "gpuaudit.cli.check:check",
    "facts": "gpuaudit.cli.facts:facts",
    "fix": "gpuaudit.cli.fix:fix",
    "report": "gpuaudit.cli.report:report",
    "rules": "gpuaudit.cli.rules:rules",
    "sample": "gpuaudit.cli.sample:sample",
    "serve": "gpuaudit.cli.serve:serve",
    "snapshot": "gpuaudit.cli.snapshot:snapshot",
}
# Commands that run until stopped: they keep Python's cycle collector.
LONG_RUNNING = frozenset({"sample", "serve"})
CRASH_EXIT_CODE = 3
DEBUG = "gpuaudit.debug"  # ctx.meta key: print the trace of a crash

# The light install (pip install gpuaudit) runs `check` and `rules`; these
# packages come with extras: module -> (distribution, extra).
OPTIONAL = {
    "kubernetes": ("kubernetes", "cluster"),
    "jinja2": ("jinja2", "report"),
    "markupsafe": ("jinja2", "report"),
    "pynvml": ("nvidia-ml-py", "nvml"),
    "prometheus_client": ("prometheus-client", "metrics"),
}
# `fix` renders its patches with Jinja2: its own extra names what it is for.
EXTRA_FOR_COMMAND = {("jinja2", "fix"): "fix"}


def missing_extra(exc: BaseException, command: str | None) -> str | None:
    """The one-line message for an optional package that is not installed,
    or None when ``exc`` is something else."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    module = exc.name.split(".")[0]
    if module not in OPTIONAL:
        return None
    package, extra = OPTIONAL[module]
    extra = EXTRA_FOR_COMMAND.get((package, command or ""), extra)
    what = f"`gpuaudit {command}`" if command else "this command"
    return f"{what} needs {package}, which is not installed: pip install 'gpuaudit[{extra}]' (or 'gpuaudit[all]')"


class _NeedsExtra(click.Command):
    """Stands for a command whose module needs a package this install lacks:
    it lists in --help, and running it says what to install (exit 2)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(
            name,
            help=f"(needs an extra: {message.split(': ', 1)[-1]})",
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        )
        self.message = message

    def invoke(self, ctx: click.Context) -> Any:
        click.echo(f"gpuaudit: {self.message}", err=True)
        ctx.exit(2)


class LazyGroup(SuggestingGroup):
    """Imports a command's module only when that command runs, and turns the
    command's return value into the exit code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attribute = target.split(":")
        try:
            return getattr(import_module(module), attribute)
        except ModuleNotFoundError as exc:
            message = missing_extra(exc, name)
            if message is None:
                raise
            return _NeedsExtra(name, message)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        # Every other command is one run that builds its objects, keeps most of
        # them to its end and makes no reference cycles worth collecting: the
        # cycle collector would only walk them again and again (what it cost:
        # bench/RESULTS.md, "Measurements behind design choices"). Turned off
        # before the command's module is imported, so start-up pays no
        # collections either.
        if args and args[0] not in LONG_RUNNING:
            gc.disable()
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            code = super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            message = missing_extra(exc, ctx.invoked_subcommand)
            if message is not None:  # a command reached a package of an extra this install lacks
                click.echo(f"gpuaudit: {message}", err=True)
                ctx.exit(2)
            if ctx.meta.get(DEBUG):
                import traceback

                traceback.print_exc()
            where = "" if ctx.meta.get(DEBUG) else "; --debug shows where"
            click.echo(f"gpuaudit: internal error (a bug{where}): {type(exc).__name__}: {exc}", err=True)
            ctx.exit(CRASH_EXIT_CODE)
        ctx.exit(code if isinstance(code, int) else 0)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuaudit")
@click.option("--debug", is_flag=True, help="On an internal error, print the trace.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Audit GPU capacity on Kubernetes: why jobs queue while the GPUs look idle."""
    ctx.meta[DEBUG] = debug
    # What is printed quotes input: no terminal control reaches either stream.
    if sys.stdout is not None and not isinstance(sys.stdout, CleanStream):
        sys.stdout = CleanStream(sys.stdout)  # type: ignore[assignment]
    if sys.stderr is not None and not isinstance(sys.stderr, CleanStream):
        sys.stderr = CleanStream(sys.stderr)  # type: ignore[assignment]


def kubectl_plugin() -> None:
    """Entry point of `kubectl-gpuaudit`: kubectl runs it for `kubectl gpuaudit ...`,
    so help and usage messages name the command the user typed."""
    main(prog_name="kubectl gpuaudit")
