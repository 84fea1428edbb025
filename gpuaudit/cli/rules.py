"""`gpuaudit rules`: list, explain, validate and test rules."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuaudit.cli.groups import SuggestingGroup
from gpuaudit.cli.options import input_errors_code, policy_options, read_config, stop
from gpuaudit.engine.policy_files import validate_paths
from gpuaudit.jsontext import indented
from gpuaudit.model import CATEGORIES
from gpuaudit.nearest import did_you_mean
from gpuaudit.pipelines.policy import load_catalogue
from gpuaudit.pipelines.rules_test import run_site_cases
from gpuaudit.safetext import one_line

if TYPE_CHECKING:
    from gpuaudit.pipelines.policy import PolicyOptions


@click.group(cls=SuggestingGroup)
def rules() -> None:
    """List, explain and validate rules."""


@rules.command("list")
@policy_options
@click.option(
    "-o",
    "--output",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format, as in kubectl.",
)
def rules_list(policy: PolicyOptions, fmt: str) -> int:
    """The rules that would run, in diagnostic order; then the opt-in rules
    left out (they run only when --rules or the config's rules: names them)."""
    config = read_config(policy.config_path)
    loaded, errors = policy.load(config)
    for e in errors:
        click.echo(f"gpuaudit: {e.file}{':' + str(e.line) if e.line else ''}: {e.message}", err=True)

    loaded.sort(key=lambda r: (CATEGORIES.index(r.category), r.id))
    if fmt == "json":
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
                "severity_by_purpose": dict(r.severity_by_purpose),
                "remediation": (r.remediation or {}).get("id"),
            }
            for r in loaded
        ]
        click.echo(indented(rows))
    else:
        for r in loaded:
            needs = f"  (needs {', '.join(r.requires)})" if r.requires else ""
            click.echo(f"{r.id:<11} {r.severity:<8} {r.category:<11} {r.title}{needs}")
        running = {r.id for r in loaded}
        catalogue, _ = load_catalogue(config, policy.policy_dirs)
        left_out = sorted((r for r in catalogue if r.opt_in and r.id not in running), key=lambda r: r.id)
        if left_out:
            click.echo("\nopt-in, not selected (`gpuaudit rules explain ID` says how to run one):")
            for r in left_out:
                click.echo(f"{r.id:<11} {r.severity:<8} {r.category:<11} {r.title}")
    return input_errors_code(errors)


@rules.command("explain")
@click.argument("rule_id")
@policy_options
def rules_explain(rule_id: str, policy: PolicyOptions) -> int:
    """A rule's docs page: why it matters, what to check first, how to fix.
    Every rule, opt-in ones too."""
    config = read_config(policy.config_path)
    catalogue, _ = load_catalogue(config, policy.policy_dirs)
    wanted = rule_id.upper()
    rule = next((r for r in catalogue if r.id == wanted), None)
    if rule is None:
        stop(f"no rule {rule_id}{did_you_mean(wanted, (r.id for r in catalogue))}")
    click.echo(f"{rule.id}: {rule.title}")
    click.echo(
        f"category: {rule.category}   severity: {rule.severity}   scope: {', '.join(rule.scope)}"
        f"   target: {rule.target}" + (f"   needs: {', '.join(rule.requires)}" if rule.requires else "")
    )
    if rule.severity_by_purpose:
        by_purpose = ", ".join(f"{k}={v}" for k, v in rule.severity_by_purpose.items())
        click.echo(f"by purpose (at most): {by_purpose}")
    if rule.opt_in:
        # --rules selects only what it names: the categories keep the other rules running.
        every = ",".join([*CATEGORIES, rule.id])
        click.echo(
            f"opt-in: runs only when named by id: --rules {rule.id} (it alone), "
            f"--rules {every} (with all the others), or that list under rules: in .gpuaudit.yaml"
        )
    if rule.params:
        click.echo("params: " + ", ".join(f"{k}={v}" for k, v in rule.params.items()))
    if rule.remediation:
        click.echo(f"remediation: {rule.remediation['id']}")
    click.echo("")
    click.echo(rule.docs.rstrip())
    return 0


@rules.command("validate")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
def rules_validate(paths: tuple[Path, ...]) -> int:
    """Check rule folders or files against the rule schema and the fact
    schema (and the shape of *.cases.yaml files)."""

    checked = validate_paths(paths)
    for e in checked.errors:
        click.echo(f"{e}", err=True)
    cases = f", {checked.cases_files} cases file(s) checked" if checked.cases_files else ""
    click.echo(f"{len(checked.rules)} rules valid, {len(checked.errors)} invalid{cases}")
    return 2 if checked.errors else 0


@rules.command("test")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("-v", "--verbose", is_flag=True, help="List passing cases too.")
def rules_test(dirs: tuple[Path, ...], verbose: bool) -> int:
    """Run the pass/fail cases (<rule>.cases.yaml) of the rules under DIRS,
    as the built-in rules' cases are run. Exit 1 when a case fails."""

    outcomes = run_site_cases(dirs)
    failed = cases = 0
    for rule in outcomes:
        # Case names and details quote the rule files: one line each.
        label = one_line(rule.rule_id or str(rule.rule_file))
        if rule.problem:
            failed += 1
            click.echo(f"ERROR {label}: {one_line(rule.problem)}")
            continue
        for r in rule.results:
            cases += 1
            failed += not r.ok
            if not r.ok or verbose:
                status = "ok   " if r.ok else "FAIL "
                detail = "" if r.ok else f": {one_line(r.detail)}"
                click.echo(f"{status} {label}  {one_line(r.case.name)}{detail}")
        missing = {"pass", "fail"} - rule.expects
        if missing and rule.results:
            click.echo(f"note  {label}: no {' or '.join(sorted(missing))} case")
    click.echo(f"{len(outcomes)} rules, {cases} cases, {failed} failed")
    return 1 if failed else 0
