"""Command line: parse, build the pieces, run, return an exit code.

`check` and `rules` live here; the commands that need a cluster client,
Prometheus, Jinja2 or NVML are imported only when invoked, so `gpuaudit check`
(run by pre-commit on every commit) starts fast.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

import click

from gpuaudit import __version__
from gpuaudit.audit import AuditResult, check_manifests, load_policy
from gpuaudit.config import Config, ConfigError, load_config
from gpuaudit.model import SEVERITIES
from gpuaudit.output import FORMATS, formatter
from gpuaudit.output.files import write_atomic

# Commands defined in their own modules: name -> "module:attribute".
LAZY_COMMANDS = {
    "audit": "gpuaudit.commands.audit:audit",
    "snapshot": "gpuaudit.commands.snapshot:snapshot",
    "fix": "gpuaudit.commands.fix:fix",
    "report": "gpuaudit.commands.report:report",
    "sample": "gpuaudit.commands.sample:sample",
}


class LazyGroup(click.Group):
    """Imports a command's module only when that command runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands:
            return self.commands[name]
        target = LAZY_COMMANDS.get(name)
        if target is None:
            return None
        module, attribute = target.split(":")
        return getattr(import_module(module), attribute)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuaudit")
def main() -> None:
    """Audit GPU capacity on Kubernetes: why jobs queue while the GPUs look idle."""
    from gpuaudit.output.terminal import CleanStream

    if sys.stderr is not None and not isinstance(sys.stderr, CleanStream):  # messages quote input
        sys.stderr = CleanStream(sys.stderr)  # type: ignore[assignment]


# --- shared options ---------------------------------------------------------


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


def split_names(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in value.split(",") if n.strip())


def load_config_or_exit(config_path: Path | None) -> Config:
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        click.echo(f"gpuaudit: {exc}", err=True)
        sys.exit(2)
    return config


def emit(result: AuditResult, formats: Sequence[str], output: Path | None) -> None:
    """Render each requested format to its file, or to stdout."""
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
    for name, file in targets:
        colour = file is None and sys.stdout.isatty() and "NO_COLOR" not in os.environ
        text = formatter(name)(result, colour=colour)
        if file is None:
            click.echo(text, nl=False)
        else:
            write_atomic(file, text)


# --- check ------------------------------------------------------------------


input_options = option_group(
    click.option(
        "--helm-chart",
        "helm_charts",
        multiple=True,
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        help="Render this chart with `helm template` and audit the result (repeatable).",
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
    click.option(
        "--baseline",
        "baseline_path",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Hide the findings recorded in this baseline; report the rest.",
    ),
    click.option(
        "--write-baseline",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Record the current findings in this file (exit 0 unless input errors).",
    ),
)


@main.command()
@click.argument("paths", nargs=-1)
@policy_options
@output_options
@input_options
def check(
    paths: tuple[str, ...],
    config_path: Path | None,
    policy_dirs: tuple[Path, ...],
    include: str,
    exclude: str,
    formats: tuple[str, ...],
    output: Path | None,
    fail_on: str | None,
    helm_charts: tuple[Path, ...],
    helm_values: tuple[Path, ...],
    no_kustomize: bool,
    baseline_path: Path | None,
    write_baseline: Path | None,
) -> None:
    """Audit manifests (files, directories, '-' for stdin; directories with a
    kustomization are rendered) and Helm charts (--helm-chart)."""
    # One short run that builds many small objects and no reference cycles:
    # the cycle collector would only cost time (about 8% on 1,000 files).
    gc.disable()
    if not paths and not helm_charts:
        raise click.UsageError("give manifest PATHS, '-' for stdin, or --helm-chart DIR")
    if helm_values and not helm_charts:
        raise click.UsageError("--values applies to --helm-chart")
    config = load_config_or_exit(config_path)
    rules, rule_errors = load_policy(config, policy_dirs, split_names(include), split_names(exclude))
    result = check_manifests(
        paths,
        config,
        rules,
        render_kustomize=not no_kustomize,
        helm_charts=helm_charts,
        helm_values=helm_values,
        keep_subjects=False,  # no output needs them: lets a large input use all cores
    )
    result.errors[:0] = [*config.warnings, *rule_errors]
    if write_baseline is not None or baseline_path is not None:
        from gpuaudit.engine import baseline

        if write_baseline is not None:
            write_atomic(write_baseline, baseline.dumps(baseline.build(result.findings)))
            click.echo(
                f"gpuaudit: recorded {len(result.findings)} finding(s) in {write_baseline}",
                err=True,
            )
        if baseline_path is not None:
            try:
                baseline.apply_to_result(result, baseline_path)
            except baseline.BaselineError as exc:
                click.echo(f"gpuaudit: {exc}", err=True)
                sys.exit(2)
    emit(result, formats, output)
    if write_baseline is not None:
        sys.exit(2 if any(e.level == "error" for e in result.errors) else 0)
    sys.exit(result.exit_code(fail_on or config.fail_on or "high"))


# --- rules ------------------------------------------------------------------


@main.group()
def rules() -> None:
    """List, explain and validate rules."""


@rules.command("list")
@policy_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def rules_list(config_path: Path | None, policy_dirs: tuple[Path, ...], include: str, exclude: str, fmt: str) -> None:
    """The rules that would run, in diagnostic order."""
    config = load_config_or_exit(config_path)
    loaded, errors = load_policy(config, policy_dirs, split_names(include), split_names(exclude))
    for e in errors:
        click.echo(f"gpuaudit: {e.file}{':' + str(e.line) if e.line else ''}: {e.message}", err=True)
    from gpuaudit.model import CATEGORIES

    loaded.sort(key=lambda r: (CATEGORIES.index(r.category), r.id))
    if fmt == "json":
        import json

        rows = [
            {
                "id": r.id,
                "title": r.title,
                "category": r.category,
                "severity": r.severity,
                "scope": list(r.scope),
                "target": r.target,
                "requires": list(r.requires),
                "params": dict(r.params),
                "remediation": (r.remediation or {}).get("id"),
            }
            for r in loaded
        ]
        click.echo(json.dumps(rows, indent=2))
    else:
        for r in loaded:
            needs = f"  (needs {', '.join(r.requires)})" if r.requires else ""
            click.echo(f"{r.id:<11} {r.severity:<8} {r.category:<11} {r.title}{needs}")
    sys.exit(2 if any(e.level == "error" for e in errors) else 0)


@rules.command("explain")
@click.argument("rule_id")
@policy_options
def rules_explain(
    rule_id: str,
    config_path: Path | None,
    policy_dirs: tuple[Path, ...],
    include: str,
    exclude: str,
) -> None:
    """A rule's docs page: why it matters, what to check first, how to fix."""
    config = load_config_or_exit(config_path)
    loaded, _ = load_policy(config, policy_dirs)
    rule = next((r for r in loaded if r.id == rule_id.upper()), None)
    if rule is None:
        click.echo(f"gpuaudit: no rule {rule_id}", err=True)
        sys.exit(2)
    click.echo(f"{rule.id}: {rule.title}")
    click.echo(
        f"category: {rule.category}   severity: {rule.severity}   scope: {', '.join(rule.scope)}"
        f"   target: {rule.target}" + (f"   needs: {', '.join(rule.requires)}" if rule.requires else "")
    )
    if rule.params:
        click.echo("params: " + ", ".join(f"{k}={v}" for k, v in rule.params.items()))
    if rule.remediation:
        click.echo(f"remediation: {rule.remediation['id']}")
    click.echo("")
    click.echo(rule.docs.rstrip())


@rules.command("validate")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
def rules_validate(paths: tuple[Path, ...]) -> None:
    """Check rule folders or files against the rule schema and the fact
    schema (and the shape of *.cases.yaml files)."""
    from gpuaudit.engine.policy_files import validate_paths

    checked = validate_paths(paths)
    for e in checked.errors:
        click.echo(f"{e}", err=True)
    cases = f", {checked.cases_files} cases file(s) checked" if checked.cases_files else ""
    click.echo(f"{len(checked.rules)} rules valid, {len(checked.errors)} invalid{cases}")
    sys.exit(2 if checked.errors else 0)


@rules.command("test")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("-v", "--verbose", is_flag=True, help="List passing cases too.")
def rules_test(dirs: tuple[Path, ...], verbose: bool) -> None:
    """Run the pass/fail cases (<rule>.cases.yaml) of the rules under DIRS,
    as the built-in rules' cases are run. Exit 1 when a case fails."""
    from gpuaudit.engine.policy_files import run_site_cases

    outcomes = run_site_cases(dirs)
    failed = cases = 0
    for rule in outcomes:
        label = rule.rule_id or str(rule.rule_file)
        if rule.problem:
            failed += 1
            click.echo(f"ERROR {label}: {rule.problem}")
            continue
        for r in rule.results:
            cases += 1
            failed += not r.ok
            if not r.ok or verbose:
                status = "ok   " if r.ok else "FAIL "
                detail = "" if r.ok else f": {r.detail}"
                click.echo(f"{status} {label}  {r.case.name}{detail}")
        missing = {"pass", "fail"} - rule.expects
        if missing and rule.results:
            click.echo(f"note  {label}: no {' or '.join(sorted(missing))} case")
    click.echo(f"{len(outcomes)} rules, {cases} cases, {failed} failed")
    sys.exit(1 if failed else 0)


def kubectl_plugin() -> None:
    """Entry point of `kubectl-gpuaudit`: kubectl runs it for `kubectl gpuaudit ...`,
    so help and usage messages name the command the user typed."""
    main(prog_name="kubectl gpuaudit")


if __name__ == "__main__":
    main()
