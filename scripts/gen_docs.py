"""Generate the parts of docs/ that must not drift from the code.

    .venv/bin/python scripts/gen_docs.py           # rewrite what is stale
    .venv/bin/python scripts/gen_docs.py --check   # exit 1 and name what is stale

- docs/rules.md, whole: every rule in policies/, from its YAML and cases file.
- Marked regions in hand-written pages (docs/ and the root README.md):
  ``<!-- generated: NAME -->`` ... ``<!-- end generated -->`` is replaced by
  the output of GENERATORS[NAME] (the config keys from config.schema.json,
  the snapshot fields from snapshot.schema.json, the Helm chart's values from
  its values.schema.json and values.yaml).
- Command output: ``<!-- run: COMMAND -->`` followed by a fenced block is
  replaced by ``$ COMMAND`` and what the command prints (stdout and stderr),
  run with bash in a scratch folder where ``examples/`` is this repository's,
  with the installed gpuaudit first on PATH, NO_COLOR set and 80 columns. The
  commands of one page run in order in one folder, so a page can write files
  and show them. A command that exits with anything but 0 or 1 is an error,
  unless the page shows its status itself (``...; echo "exit $?"``).

A test (tests/test_docs.py) regenerates everything in memory and fails when
a committed page differs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
POLICIES = ROOT / "policies"
DATA = ROOT / "gpuaudit" / "data"
CHART = ROOT / "deploy" / "helm" / "gpuaudit"
CATEGORIES = ("allocation", "memory", "placement", "application", "sharing")
CATEGORY_QUESTIONS = {
    "allocation": "Who owns which GPUs: whole GPUs held by small, idle, stuck or pending work.",
    "memory": "Models resident in GPU memory without matching compute: unavailable, not idle.",
    "placement": "Selectors, affinity, taints and pins that leave a workload few or no eligible nodes.",
    "application": "GPUs the application starves: too little CPU, no /dev/shm, transfer- or I/O-bound.",
    "sharing": "Time-slicing, MPS and MIG: configured, advertised, and used where work would fit a share.",
}

_REGION = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- end generated -->)", re.S)
_RUN = re.compile(r"(<!-- run: (.+?) -->\n)```(\w*)\n(.*?)```\n", re.S)
_STATUS = re.compile(r'echo "?exit \$\?"?')


class DocsError(RuntimeError):
    pass


# --- docs/rules.md ------------------------------------------------------------------


def _load_rules() -> list[tuple[dict[str, Any], list[dict[str, Any]], Path]]:
    rules = []
    for path in sorted(POLICIES.rglob("*.yaml")):
        if path.name.endswith(".cases.yaml"):
            continue
        rule = yaml.safe_load(path.read_text(encoding="utf-8"))
        cases_path = path.with_name(path.name.removesuffix(".yaml") + ".cases.yaml")
        cases = yaml.safe_load(cases_path.read_text(encoding="utf-8")) if cases_path.exists() else []
        rules.append((rule, cases or [], path))
    rules.sort(key=lambda r: (CATEGORIES.index(r[0]["category"]), r[0]["id"]))
    return rules


def _anchor(rule_id: str) -> str:
    return rule_id.lower()


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _yaml_block(value: Any) -> list[str]:
    text = yaml.safe_dump(value, sort_keys=False, default_flow_style=None, width=100).rstrip()
    return ["```yaml", text, "```"]


def _docs_paragraphs(text: str) -> list[str]:
    """A rule's docs text, with "Check first:" and "Fix:" starting paragraphs."""
    out: list[str] = []
    for line in text.strip().splitlines():
        label = next((lb for lb in ("Check first:", "Fix:") if line.startswith(lb)), None)
        if label:
            out += ["", f"**{label}**{line[len(label) :]}"]
        else:
            out.append(line.rstrip())
    return out


def _rule_section(rule: Mapping[str, Any], cases: list[dict[str, Any]], path: Path) -> list[str]:
    out = [f"### {rule['id']}: {rule['title']}", ""]
    facts = [
        ("severity", rule["severity"]),
        ("scope", ", ".join(rule["scope"])),
        ("judges", f"each {rule['target']}"),
        ("needs", ", ".join(rule.get("requires") or []) or "—"),
        ("fix", f"`gpuaudit fix` ({rule['remediation']['id']})" if rule.get("remediation") else "—"),
        ("file", f"`{path.relative_to(ROOT).as_posix()}`"),
    ]
    out += [" | ".join(f"**{k}**: {v}" for k, v in facts), ""]
    for key, what in (("severity_by_purpose", "purpose"), ("severity_by_context", "file context")):
        if rule.get(key):
            out += [_capped(rule["severity"], rule[key], key, what), ""]
    out += [*_docs_paragraphs(rule["docs"]), ""]
    params = rule.get("params") or {}
    if params:
        out += ["| param | default | meaning |", "|---|---|---|"]
        for name, spec in params.items():
            default = json.dumps(spec.get("default"))
            out.append(f"| `{name}` | `{_cell(default)}` | {_cell(spec.get('description', ''))} |")
        out += ["", f"Set them in `.gpuaudit.yaml`: `params: {{{rule['id']}: {{{next(iter(params))}: ...}}}}`.", ""]
    out += ["Message:", "", "```text", rule["message"].strip(), "```", ""]
    if cases:
        out.append("Cases (`" + path.name.removesuffix(".yaml") + ".cases.yaml`):")
        out.append("")
        out += [f"- {c.get('expect', '?')}: {c.get('name', '')}" for c in cases]
        out.append("")
        example = next((c for c in cases if c.get("expect") == "fail" and "manifest" in c), None)
        if example is not None:
            out += [
                f"An example it reports ({example['name']}):",
                "",
                "```yaml",
                example["manifest"].rstrip(),
                "```",
                "",
            ]
    judged = {k: rule[k] for k in ("match", "violation", "require") if k in rule}
    out += ["<details><summary>What it matches and judges (JSON Schema over the fact document)</summary>", ""]
    out += _yaml_block(judged)
    out += ["", "</details>", ""]
    return out


def _capped(severity: str, caps: Mapping[str, str], key: str, what: str) -> str:
    """One line: for which values of a fact (`purpose`, `file_context`) the
    rule is silent, and the most severe it is for others (``key``)."""
    grouped: dict[str, list[str]] = {}
    for value, cap in caps.items():
        grouped.setdefault(cap, []).append(value)
    parts = [
        ("silent for " if cap == "silent" else f"at most {cap} for ") + ", ".join(values)
        for cap, values in sorted(grouped.items(), key=lambda kv: kv[0] == "silent")
    ]
    return f"**by {what}**: {'; '.join(parts)}; {severity} for any other (`{key}`)"


def rules_markdown() -> str:
    rules = _load_rules()
    out = [
        "# Rule reference",
        "",
        "<!-- Generated by scripts/gen_docs.py from policies/: edit the rule files, then run it. -->",
        "",
        "Every built-in rule, in the order an operator should check them:",
        "allocation → memory → placement → application → sharing. A rule judges the",
        "*facts* gpuaudit computes for each target (documented in",
        "`gpuaudit/facts/facts.schema.json`, generated from their types;",
        "`gpuaudit facts PATH` prints them for your manifests, and",
        "[Write your own rule](write-a-rule.md) adds a rule of yours);",
        "`gpuaudit rules explain ID` prints the same text. Thresholds are `params`,",
        "overridable in `.gpuaudit.yaml` ([configuration](configuration.md)). Rules",
        "that need telemetry or a live cluster are reported as *skipped* without",
        "them, never as passed.",
        "",
        f"{len(rules)} rules.",
        "",
        "| rule | severity | scope | title |",
        "|---|---|---|---|",
    ]
    for rule, _, _ in rules:
        needs = " (needs telemetry)" if "telemetry" in (rule.get("requires") or []) else ""
        out.append(
            f"| [{rule['id']}](#{_anchor(rule['id'])}-{_slug(rule['title'])}) | {rule['severity']} "
            f"| {', '.join(rule['scope'])} | {_cell(rule['title'])}{needs} |"
        )
    out.append("")
    for category in CATEGORIES:
        out += [f"## {category.capitalize()}", "", CATEGORY_QUESTIONS[category], ""]
        for rule, cases, path in rules:
            if rule["category"] == category:
                out += _rule_section(rule, cases, path)
    return "\n".join(out).rstrip() + "\n"


def _slug(title: str) -> str:
    """GitHub's heading anchor for the part after "ID: "."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


# --- schema tables ------------------------------------------------------------------


def _type_of(schema: Mapping[str, Any]) -> str:
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return " or ".join(_type_of(s) for s in schema[key])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        return f"list of {_type_of(schema['items'])}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        return f"map of {_type_of(schema['additionalProperties'])}"
    return str(kind)


def _rows(schema: Mapping[str, Any], prefix: str, definitions: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    for name, sub in (schema.get("properties") or {}).items():
        if "$ref" in sub:
            sub = definitions[sub["$ref"].rsplit("/", 1)[1]]
        key = f"{prefix}{name}"
        required = name in (schema.get("required") or ())
        description = sub.get("description", "")
        if required:
            description = f"**required.** {description}".strip()
        yield key, _type_of(sub), description
        yield from _rows(sub, key + ".", definitions)
        items = sub.get("items")
        if isinstance(items, Mapping) and items.get("properties"):
            yield from _rows(items, key + "[].", definitions)


def schema_table(schema_file: str, *, every_key_described: bool = False) -> str:
    """The keys of a schema as a table. ``every_key_described``: a key whose
    schema has no ``description`` is an error, so a new key cannot reach the
    page without its meaning (what users write needs one; what gpuaudit
    writes, such as snapshot fields, may be self-explanatory)."""
    schema = json.loads((DATA / schema_file).read_text(encoding="utf-8"))
    definitions = schema.get("definitions") or schema.get("$defs") or {}
    rows = list(_rows(schema, "", definitions))
    bare = [key for key, _, description in rows if not description.removeprefix("**required.**").strip()]
    if every_key_described and bare:
        raise DocsError(f"{schema_file}: no description for {', '.join(bare)}")
    lines = ["| key | type | meaning |", "|---|---|---|"]
    lines += [f"| `{key}` | {kind} | {_cell(description)} |" for key, kind, description in rows]
    return "\n".join(lines) + "\n"


def telemetry_keys() -> str:
    """The metric and identity keys of telemetry rows, from the code that makes them."""
    from gpuaudit.model import telemetry

    lines = ["| key | in a pod row, from its GPU rows |", "|---|---|"]
    lines += [f"| `{key}` | {how} |" for key, how in telemetry.ROLLUP.items()]
    lines += ["", "Identity of a GPU row: " + ", ".join(f"`{k}`" for k in telemetry.GPU_KEYS) + "."]
    lines += ["Signals (`signals.<name>`: the metric used, or null): "]
    lines[-1] += ", ".join(f"`{k}`" for k in telemetry.SIGNAL_NAMES) + "."
    return "\n".join(lines) + "\n"


# Kubernetes' own types in the chart's schema: one row each, the default whole.
_KUBERNETES_TYPES = ("resources", "affinity")


def _default(value: Any) -> str:
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    return f"`{_cell(json.dumps(value, separators=(', ', ': ')))}`"


def _chart_type(schema: Mapping[str, Any], definitions: Mapping[str, Any]) -> str:
    """A value's type; Kubernetes' own by their names (ResourceRequirements)."""
    items = schema.get("items")
    if isinstance(items, Mapping) and "$ref" in items:
        return "list of " + definitions[items["$ref"].rsplit("/", 1)[1]]["title"]
    return schema.get("title") or _type_of(schema).replace("``", '`""`')


def _chart_rows(schema: Mapping[str, Any], values: Any, prefix: str, definitions: Mapping[str, Any]) -> Iterator[str]:
    for name, sub in (schema.get("properties") or {}).items():
        if prefix == "" and name == "global":  # Helm's, for subcharts
            continue
        key = f"{prefix}{name}"
        description = sub.get("description", "")
        if not description:
            raise DocsError(f"{CHART.name}/values.schema.json: no description for {key}")
        ref = sub["$ref"].rsplit("/", 1)[1] if "$ref" in sub else None
        target = definitions[ref] if ref else sub
        value = values.get(name) if isinstance(values, dict) else None
        if target.get("additionalProperties") is False and ref not in _KUBERNETES_TYPES:
            yield f"| `{key}` | object | | {_cell(description)} |"
            yield from _chart_rows(target, value, key + ".", definitions)
        else:
            yield f"| `{key}` | {_chart_type(target, definitions)} | {_default(value)} | {_cell(description)} |"


def chart_values() -> str:
    """Every value of the Helm chart: its type and meaning from
    values.schema.json, its default from values.yaml."""
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    lines = ["| value | type | default | meaning |", "|---|---|---|---|"]
    lines += _chart_rows(schema, values, "", schema.get("definitions") or {})
    return "\n".join(lines) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "chart-values": chart_values,
    "config-keys": lambda: schema_table("config.schema.json", every_key_described=True),
    "snapshot-fields": lambda: schema_table("snapshot.schema.json"),
    "telemetry-keys": telemetry_keys,
}


# --- command output -------------------------------------------------------------------


def _environment() -> dict[str, str]:
    venv_bin = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUAUDIT_", "KUBECONFIG"))}
    env.update(PATH=os.pathsep.join([str(venv_bin), env.get("PATH", "")]), NO_COLOR="1", COLUMNS="80")
    env.pop("TERM", None)
    return env


def run_command(command: str, cwd: Path) -> str:
    proc = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    if proc.returncode not in (0, 1) and not _STATUS.search(command):
        raise DocsError(f"`{command}` exited {proc.returncode}:\n{proc.stdout}")
    if "Traceback (most recent call last)" in proc.stdout:  # hidden by a pipe's exit status
        raise DocsError(f"`{command}` crashed:\n{proc.stdout}")
    return proc.stdout


def _scratch() -> tempfile.TemporaryDirectory[str]:
    scratch = tempfile.TemporaryDirectory(prefix="gpuaudit-docs-")
    (Path(scratch.name) / "examples").symlink_to(ROOT / "examples")
    return scratch


def render_page(text: str) -> str:
    """A hand-written page with its generated regions and command outputs current."""

    def region(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in GENERATORS:
            raise DocsError(f"no generator {name!r} (known: {', '.join(GENERATORS)})")
        return match.group(1) + GENERATORS[name]() + match.group(4)

    text = _REGION.sub(region, text)
    if not _RUN.search(text):
        return text
    with _scratch() as folder:

        def run(match: re.Match[str]) -> str:
            command, lang = match.group(2), match.group(3) or "text"
            output = run_command(command, Path(folder))
            if output and not output.endswith("\n"):
                output += "\n"
            return f"{match.group(1)}```{lang}\n$ {command}\n{output}```\n"

        return _RUN.sub(run, text)


def expected_docs() -> dict[Path, str]:
    """Every generated or partly generated page, as it should be: docs/ and
    the root README (its rule list and sample output are command output)."""
    pages = {DOCS / "rules.md": rules_markdown()}
    for path in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        if path in pages:
            continue
        text = path.read_text(encoding="utf-8")
        if _REGION.search(text) or _RUN.search(text):
            pages[path] = render_page(text)
    return pages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is stale; write nothing")
    args = parser.parse_args()
    try:
        pages = expected_docs()
    except DocsError as exc:
        print(f"gen_docs: {exc}", file=sys.stderr)
        return 2
    stale = [p for p, text in pages.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    for path in stale:
        rel = path.relative_to(ROOT)
        if args.check:
            print(f"{rel} is stale: run scripts/gen_docs.py", file=sys.stderr)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(pages[path], encoding="utf-8")
            print(f"wrote {rel}", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
