"""What several commands share: option groups, reading the config, stopping
with a message, and writing the requested output formats."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
import msgspec

from gpuaudit.durations import whole_seconds
from gpuaudit.files import WriteError, source_root, write_atomic
from gpuaudit.model import SEVERITIES, AuditResult
from gpuaudit.output import FORMATS, formatter, wants_source_root
from gpuaudit.sources.user_config import Config, ConfigError, load_config

if TYPE_CHECKING:
    from gpuaudit.pipelines.policy import PolicyOptions
    from gpuaudit.pipelines.publish import Targets
    from gpuaudit.sources.inputs import ManifestOptions


class OptionGroup:
    """Click options declared once and handed to a command as one object:
    ``build`` called with the options' values, passed as the keyword
    ``keyword``. Used as a decorator, it adds the options in the order
    written, where it stands among the command's other options."""

    def __init__(self, keyword: str, build: Callable[..., Any], *options: Callable[[Any], Any]) -> None:
        self.keyword = keyword
        self.build = build
        self.options = options

        # The options' parameter names, as click's decorators record them on a function.
        def probe() -> None: ...

        for option in options:
            option(probe)
        self.names = tuple(param.name for param in getattr(probe, "__click_params__", ()))

    def extended(self, *options: Callable[[Any], Any]) -> OptionGroup:
        """The same group with more options after these (and their values passed to ``build``)."""
        return OptionGroup(self.keyword, self.build, *self.options, *options)

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        keyword, build, names = self.keyword, self.build, self.names

        @functools.wraps(func)
        def command(*args: Any, **kwargs: Any) -> Any:
            kwargs[keyword] = build(**{name: kwargs.pop(name) for name in names})
            return func(*args, **kwargs)

        for option in reversed(self.options):
            command = option(command)
        return command


def split_names(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in value.split(",") if n.strip())


def _policy(config_path: Path | None, policy_dirs: tuple[Path, ...], include: str, exclude: str) -> PolicyOptions:
    from gpuaudit.pipelines.policy import PolicyOptions  # the rule engine: not for `sample` or `serve`

    return PolicyOptions(config_path, policy_dirs, split_names(include), split_names(exclude))


policy_options = OptionGroup(
    "policy",
    _policy,
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


FAIL_ON = (*SEVERITIES, "never")


class OutputSpec(msgspec.Struct, frozen=True):
    """What output_options asked for: formats (NAME or NAME=FILE), the file for
    the one without =FILE, and how text looks."""

    formats: tuple[str, ...] = ("text",)
    output_file: Path | None = None
    fail_on: str | None = None
    color: str = "auto"
    quiet: bool = False

    @classmethod
    def from_options(
        cls,
        output_formats: Sequence[str] = (),
        formats: Sequence[str] = (),
        output_file: Path | None = None,
        fail_on: str | None = None,
        color: str = "auto",
        quiet: bool = False,
    ) -> OutputSpec:
        return cls(tuple(output_formats) + tuple(formats) or ("text",), output_file, fail_on, color, quiet)


def formats_callback(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """Each value is NAME or NAME=FILE; a NAME that is no format is a usage
    error, and one that looks like a path (``-o report.json``) says so."""
    for spec in value:
        name = spec.partition("=")[0]
        if name in FORMATS:
            continue
        hint = param.opts[0] if param.opts else "--format"
        if hint == "-o" or "/" in name or "." in name:
            raise click.BadParameter(
                f"{name!r} is not a format: -o/--output takes a format ({', '.join(FORMATS)}), as in "
                f"kubectl; to write to a file use --output-file {name} (or --format NAME={name})",
                ctx=ctx,
                param=param,
            )
        raise click.BadParameter(f"unknown format {name!r}; choose from {', '.join(FORMATS)}", ctx=ctx, param=param)
    return value


output_options = OptionGroup(
    "output",
    OutputSpec.from_options,
    click.option(
        "-o",
        "--output",
        "output_formats",
        multiple=True,
        metavar="FORMAT",
        callback=formats_callback,
        help=f"Output format, as in kubectl: one of {', '.join(FORMATS)} [default: text]. "
        "FORMAT=FILE writes that format to FILE (repeatable; the same as --format).",
    ),
    click.option(
        "--format",
        "formats",
        multiple=True,
        metavar="FORMAT[=FILE]",
        callback=formats_callback,
        help="The same as -o (repeatable): each format to stdout, or to FILE. At most one goes to stdout.",
    ),
    click.option(
        "--output-file",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write the format that has no =FILE to this file instead of stdout.",
    ),
    click.option(
        "--fail-on",
        type=click.Choice(FAIL_ON),
        default=None,
        help="Exit 1 when a finding is at or above this severity; never: report only [default: config "
        "fail_on, else high].",
    ),
    click.option(
        "--color",
        "--colour",
        "color",
        type=click.Choice(["auto", "always", "never"]),
        default="auto",
        show_default=True,
        help="Colour in text output; auto: on a terminal unless NO_COLOR is set (FORCE_COLOR forces it).",
    ),
    click.option(
        "-q",
        "--quiet",
        is_flag=True,
        help="Text output: only findings, input problems and the summary (no skipped-rules block).",
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


def _manifests(
    helm_charts: tuple[Path, ...],
    helm_values: tuple[Path, ...],
    no_kustomize: bool,
    kustomize_load_restrictor: str,
    plain_files: str | None,
    render_errors: str | None,
    allow_remote_bases: bool,
    changed_files: bool = False,
) -> ManifestOptions:
    from gpuaudit.sources.inputs import ManifestOptions  # not every command reads manifests

    return ManifestOptions(
        helm_charts=helm_charts,
        helm_values=helm_values,
        render=not no_kustomize,
        load_anywhere=kustomize_load_restrictor == "none",
        allow_remote=allow_remote_bases,
        plain_files=plain_files,  # type: ignore[arg-type]
        render_errors=render_errors,
        changed_files=changed_files,
    )


# How manifests are read: Helm charts rendered, kustomize packages rendered or not.
manifest_options = OptionGroup(
    "manifests",
    _manifests,
    click.option(
        "--helm-chart",
        "helm_charts",
        multiple=True,
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        help="Render this chart with `helm template` and read the result (repeatable).",
    ),
    click.option(
        "--values",
        "helm_values",
        multiple=True,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Values file for --helm-chart (repeatable).",
    ),
    click.option(
        "--no-kustomize",
        is_flag=True,
        help="Read directories with a kustomization as plain files instead of rendering them.",
    ),
    kustomize_restrictor_option,
    click.option(
        "--plain-files",
        type=click.Choice(["folder", "file", "tree"]),
        default=None,
        help="Manifests outside kustomizations and charts: one unit per folder, per file, or one unit for "
        "the tree [default: config repository.plain_files, else folder].",
    ),
    click.option(
        "--render-errors",
        type=click.Choice(["fail", "warn"]),
        default=None,
        help="A kustomization or chart that cannot be rendered: an error, exit 2 (fail), or a warning, its "
        "plain resource files judged as files (warn) [default: config repository.render_errors, else fail].",
    ),
    click.option(
        "--allow-remote-bases",
        is_flag=True,
        help="Let kustomize fetch remote resources (https://, github.com/...). Off by default: a pull "
        "request could make the run call any host, and a CI without network waits on them.",
    ),
)


def require_input(paths: Sequence[str], manifests: ManifestOptions) -> None:
    """Usage errors of the manifest options, before anything is read."""
    if not paths and not manifests.helm_charts:
        raise click.UsageError("give manifest PATHS, '-' for stdin, or --helm-chart DIR")
    if manifests.helm_values and not manifests.helm_charts:
        raise click.UsageError("--values applies to --helm-chart")


def seconds_option(value: str, option: str) -> int:
    """A positive duration in whole seconds; a usage error naming ``option`` otherwise."""
    try:
        return whole_seconds(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


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


def use_colour(choice: str, stream: Any = None) -> bool:
    """``--color``: always, never, or auto: on a terminal unless NO_COLOR is set
    to a non-empty value (https://no-color.org); a non-empty FORCE_COLOR (other
    than 0) turns it on off a terminal, as in many CLIs."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR", "") not in ("", "0"):
        return True
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def terminal_width(stream: Any = None) -> int | None:
    """The terminal's width when stdout is one, else None (no wrapping)."""
    stream = sys.stdout if stream is None else stream
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    import shutil  # only on a terminal: pre-commit's output is a pipe

    return shutil.get_terminal_size().columns


def output_targets(formats: Sequence[str], output_file: Path | None) -> list[tuple[str, Path | None]]:
    """(format, file or None for stdout) per requested format; a usage error
    (exit 2) when two would share stdout, or --output-file has no format."""
    targets: list[tuple[str, Path | None]] = []
    for spec in formats:
        name, _, file = spec.partition("=")
        if name not in FORMATS:
            raise click.BadParameter(
                f"unknown format {name!r}; choose from {', '.join(FORMATS)}", param_hint="--format"
            )
        targets.append((name, Path(file) if file else None))
    plain = [i for i, (_, f) in enumerate(targets) if f is None]
    if output_file is not None:
        if len(plain) != 1:
            raise click.UsageError(
                "--output-file takes the one format without =FILE; give exactly one "
                f"(now {len(plain)}: {', '.join(targets[i][0] for i in plain) or 'none'})"
            )
        targets[plain[0]] = (targets[plain[0]][0], output_file)
    elif len(plain) > 1:
        names = ", ".join(targets[i][0] for i in plain)
        raise click.UsageError(
            f"{len(plain)} formats would go to stdout ({names}): give each but one its own file "
            "(--format NAME=FILE, or --output-file FILE for one)"
        )
    return targets


def write_outputs(result: AuditResult, spec: OutputSpec, context: Mapping[str, Any] | None = None) -> list[str]:
    """Render each requested format to its file, or to stdout; the messages
    of the files that could not be written (the other formats still go out).
    ``context``: more keyword arguments for the renderers (openmetrics' ``run``
    and ``gpu_states``)."""
    targets = output_targets(spec.formats, spec.output_file)
    failed: list[str] = []
    context = {"fail_on": spec.fail_on or "high", "quiet": spec.quiet, "source_root": None, **(context or {})}
    if any(wants_source_root(name) for name, _ in targets):
        context["source_root"] = source_root([f.location.file for f in result.findings[:1]])
    for name, file in targets:
        colour = file is None and use_colour(spec.color)
        width = terminal_width() if file is None else None
        text = formatter(name)(result, colour=colour, width=width, **context)
        if file is None:
            # Every format cleans or escapes what it quotes (gpuaudit/safetext.py;
            # JSON and SARIF are ASCII), and text's colours are ours: the result
            # goes beneath the stream that removes control sequences, which
            # would only scan megabytes of SARIF again.
            # color=True: --color always keeps its codes on a pipe, which click would strip.
            click.echo(text, nl=False, file=getattr(sys.stdout, "raw", sys.stdout), color=True if colour else None)
            continue
        try:
            write_atomic(file, text)
        except OSError as exc:  # a full disk, a file-size limit, a read-only folder: the other formats still go out
            failed.append(str(exc) if isinstance(exc, WriteError) else f"cannot write {file}: {exc}")
    return failed


def emit(result: AuditResult, spec: OutputSpec) -> None:
    """Write every requested format; a file that cannot be written ends the
    command with exit 2, naming it, once every other format is out."""
    fail_with(write_outputs(result, spec))


def fail_with(messages: Sequence[str]) -> None:
    """Print each message and end with exit 2 (an output that did not reach
    its target); nothing when there are none."""
    if messages:
        for message in messages[:-1]:
            click.echo(f"gpuaudit: {message}", err=True)
        stop(messages[-1])


def exit_code(result: AuditResult, fail_on: str) -> int:
    """``result.exit_code``, with ``never``: findings never fail the run (input
    errors still exit 2)."""
    if fail_on == "never":
        return 2 if any(e.level == "error" for e in result.errors) else 0
    return result.exit_code(fail_on)


def _url_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An empty value (an unset env var in a CronJob) is off; anything else
    must be an http(s) URL. The message names its origin only: a webhook's
    URL is a secret."""
    if not value:
        return None
    from gpuaudit.webclient import SendFailed, check_url  # only when a URL is given

    try:
        check_url(value, param.opts[0])
    except SendFailed as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return value


def _targets(pushgateway: str | None, webhook_url: str | None, webhook_format: str, report_url: str | None) -> Targets:
    from gpuaudit.pipelines.publish import Targets  # its HTTP sender: not for `check`

    return Targets(pushgateway, webhook_url, webhook_format, report_url)


# Where `audit` and `report` send their results besides their files; the env
# vars are those the Helm chart and deploy/base/scripts set (the webhook's
# from a Secret, so that it is in no argument list).
publish_options = OptionGroup(
    "publishing",
    _targets,
    click.option(
        "--pushgateway",
        envvar="GPUAUDIT_PUSHGATEWAY_URL",
        metavar="URL",
        callback=_url_callback,
        help="Push this run's metrics to the Prometheus Pushgateway at URL (group "
        "job=gpuaudit, command=audit|report; a URL naming /metrics/job/... is used as it is) "
        "[env: GPUAUDIT_PUSHGATEWAY_URL].",
    ),
    click.option(
        "--webhook-url",
        envvar="GPUAUDIT_WEBHOOK_URL",
        metavar="URL",
        callback=_url_callback,
        help="Post the run's headline, decision, first actions and findings to this webhook. The URL is "
        "a secret: prefer the env var GPUAUDIT_WEBHOOK_URL (an argument shows in the process list).",
    ),
    click.option(
        "--webhook-format",
        envvar="GPUAUDIT_WEBHOOK_FORMAT",
        type=click.Choice(["slack", "json"]),
        default="slack",
        show_default=True,
        help="slack: Slack's incoming-webhook JSON (text and blocks); json: the message as plain JSON "
        "[env: GPUAUDIT_WEBHOOK_FORMAT].",
    ),
    click.option(
        "--report-url",
        envvar="GPUAUDIT_REPORT_URL",
        metavar="URL",
        callback=_url_callback,
        help="Where the report is served: the webhook message links to it [env: GPUAUDIT_REPORT_URL].",
    ),
)
