"""`gpuaudit facts`: print the fact documents rules judge, one per subject.

For writing a site rule: the names a rule's `match` and `violation` may use
are the keys shown here. Manifest-only like `check`, so no Kubernetes client,
Jinja2 or NVML."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuaudit.cli.options import input_errors_code, manifest_options, read_config, require_input, stop
from gpuaudit.facts import TARGETS
from gpuaudit.files import write_atomic
from gpuaudit.pipelines.facts import dumps, manifest_facts
from gpuaudit.safetext import one_line
from gpuaudit.sources.user_config import ConfigError

if TYPE_CHECKING:
    from gpuaudit.sources.inputs import ManifestOptions


@click.command()
@click.argument("paths", nargs=-1)
@click.option(
    "-o",
    "--output",
    "fmt",
    type=click.Choice(["json", "yaml"]),
    default="json",
    show_default=True,
    help="Output format, as in kubectl.",
)
@click.option("--output-file", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file, not stdout.")
@click.option(
    "--target",
    "targets",
    multiple=True,
    type=click.Choice(TARGETS),
    help="Only subjects of this target, the `target:` of a rule (repeatable).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Config file (default: .gpuaudit.yaml found upward from here): its site facts and podspecs.",
)
@manifest_options
def facts(
    paths: tuple[str, ...],
    fmt: str,
    output_file: Path | None,
    targets: tuple[str, ...],
    config_path: Path | None,
    manifests: ManifestOptions,
) -> int:
    """The fact documents of manifests (files, directories, '-' for stdin,
    --helm-chart), one per subject: its target, the object, where it was read
    and the facts a rule's match and violation name. Exit 2 on input errors,
    after printing what could be read."""
    require_input(paths, manifests)
    config = read_config(config_path)
    try:
        options = manifests.resolve(config)
    except ConfigError as exc:
        stop(str(exc))
    result = manifest_facts(paths, config, targets=targets, options=options)
    for e in result.errors:
        where = f"{e.file}:{e.line}" if e.line else e.file
        click.echo(f"gpuaudit: {e.level}: {one_line(where)}: {one_line(e.message)}", err=True)
    text = dumps(result.documents, fmt)
    if output_file is None:
        click.echo(text, nl=False)
    else:
        try:
            write_atomic(output_file, text)
        except OSError as exc:  # files.WriteError names the file
            stop(str(exc))
    return input_errors_code(result.errors)
