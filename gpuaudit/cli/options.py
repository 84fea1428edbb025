"""What several commands share: option groups, reading the config, stopping
with a message, and writing the requested output formats."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from gpuaudit.files import WriteError, write_atomic
from gpuaudit.model import SEVERITIES, AuditResult
from gpuaudit.output import FORMATS, formatter
from gpuaudit.sources.user_config import Config, ConfigError, load_config


def option_group(*options: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """One decorator for several click options, applied in the order written."""

    def apply(func: Any) -> Any:
        for option in reversed(options):
            func = option(func)
        return func

    return apply


policy_options = option_group(
    click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Config file (default: .gpuaudit.yaml found upward from here).",
    ),
    click.option(
        "--policies",
        "policy_dirs",
        multiple=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="Extra rule folder (repeatable).",
    ),
    click.option(
        "--rules",
        "include",
        default="",
        help="Only these rule ids or categories (comma-separated).",
    ),
    click.option("--exclude-rules", "exclude", default="", help="Rule ids or categories to leave out."),
)


output_options = option_group(
    click.option(
        "--format",
        "formats",
        multiple=True,
        default=("text",),
        show_default=True,
        help=f"One of {', '.join(FORMATS)}; NAME=FILE writes that format to FILE (repeatable).",
    ),
    click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write the (single) format to this file instead of stdout.",
    ),
    click.option(
        "--fail-on",
        type=click.Choice(SEVERITIES),
        default=None,
        help="Exit 1 when a finding is at or above this severity [default: high].",
    ),
)


kustomize_restrictor_option = click.option(
    "--kustomize-load-restrictor",
    "kustomize_load_restrictor",
    type=click.Choice(["rootonly", "none"]),
    default="rootonly",
    show_default=True,
    help="none: let kustomizations read files outside their own folder (kustomize's "
    "--load-restrictor LoadRestrictionsNone). Only for repositories you trust: such a file "
    "can end up in object names, and from there in the output.",
)


def split_names(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in value.split(",") if n.strip())


def stop(message: str) -> NoReturn:
    """End the command with exit code 2 (input or usage problem) after ``message``."""
    click.echo(f"gpuaudit: {message}", err=True)
    raise click.exceptions.Exit(2)


def read_config(config_path: Path | None) -> Config:
    try:
        return load_config(config_path)
    except ConfigError as exc:
        stop(str(exc))


def input_errors_code(errors: Sequence[Any]) -> int:
    """2 when any input problem is an error (not a warning), else 0."""
    return 2 if any(e.level == "error" for e in errors) else 0


def emit(result: AuditResult, formats: Sequence[str], output: Path | None) -> None:
    """Render each requested format to its file, or to stdout. A file that
    cannot be written ends the command with exit 2, naming it, once every
    other format is out."""
    targets: list[tuple[str, Path | None]] = []
    for spec in formats:
        name, _, file = spec.partition("=")
        if name not in FORMATS:
            raise click.BadParameter(
                f"unknown format {name!r}; choose from {', '.join(FORMATS)}", param_hint="--format"
            )
        targets.append((name, Path(file) if file else None))
    if output is not None:
        plain = [i for i, (_, f) in enumerate(targets) if f is None]
        if len(plain) != 1:
            raise click.BadParameter("-o needs exactly one --format without =FILE", param_hint="-o")
        targets[plain[0]] = (targets[plain[0]][0], output)
    failed: list[str] = []
    for name, file in targets:
        colour = file is None and sys.stdout.isatty() and "NO_COLOR" not in os.environ
        text = formatter(name)(result, colour=colour)
        if file is None:
            # Every format cleans or escapes what it quotes (gpuaudit/safetext.py;
            # JSON and SARIF are ASCII), and text's colours are ours: the result
            # goes beneath the stream that removes control sequences, which
            # would only scan megabytes of SARIF again.
            click.echo(text, nl=False, file=getattr(sys.stdout, "raw", sys.stdout))
            continue
        try:
            write_atomic(file, text)
        except OSError as exc:  # a full disk, a file-size limit, a read-only folder: the other formats still go out
            failed.append(str(exc) if isinstance(exc, WriteError) else f"cannot write {file}: {exc}")
    if failed:
        for message in failed[:-1]:
            click.echo(f"gpuaudit: {message}", err=True)
        stop(failed[-1])
