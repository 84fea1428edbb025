"""The pages users read (issue 20, item 12): no path of a development
machine, every `.gpuaudit.yaml` key with its meaning, and the quick start,
rule guide and troubleshooting pages reachable from the READMEs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.test_docs import gen_docs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# docs/testing.md is for whoever runs gpuaudit's own test suite in a clone:
# the tool folders it names are that clone's.
USER_PAGES = sorted(
    [ROOT / "README.md", ROOT / "deploy" / "README.md", *DOCS.rglob("*.md"), *(DOCS / "ci").glob("*.y*ml")]
)
USER_PAGES.remove(DOCS / "testing.md")

DEVELOPMENT_PATHS = {
    "a checkout's place on one machine": r"/work/",
    "a scratch folder of one machine": r"(?<![\w.-])/tmp/",
    "a home folder": r"/(?:home|Users)/[a-z]",
    "a virtual environment's programs instead of the command": r"\.venv/bin/(?!activate\b)",
    "the test suite's tool folder": r"\.tools/bin",
}


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_user_pages_name_no_development_machine_path(page: Path):
    found = [
        f"{page.name}:{number}: {what}: {line.strip()}"
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for what, pattern in DEVELOPMENT_PATHS.items()
        if re.search(pattern, line)
    ]
    assert found == []


def test_every_config_key_has_its_meaning_on_the_page():
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    table = page.split("<!-- generated: config-keys -->", 1)[1].split("<!-- end generated -->", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) > 50
    bare = [row.split("|")[1].strip() for row in rows if not row.split("|")[3].replace("**required.**", "").strip()]
    assert bare == []


def test_the_generator_refuses_a_config_key_without_a_meaning(tmp_path, monkeypatch):
    module = gen_docs()
    schema = {"type": "object", "properties": {"described": {"type": "string", "description": "yes"}, "bare": {}}}
    (tmp_path / "config.schema.json").write_text(json.dumps(schema))
    monkeypatch.setattr(module, "DATA", tmp_path)
    with pytest.raises(module.DocsError, match="bare"):
        module.schema_table("config.schema.json", every_key_described=True)
    assert "| `bare` |" in module.schema_table("config.schema.json")  # tables of what gpuaudit writes may


@pytest.mark.parametrize("page", ["quickstart.md", "write-a-rule.md", "troubleshooting.md"])
def test_new_pages_are_linked_from_both_readmes(page: str):
    assert f"(docs/{page})" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"({page})" in (DOCS / "README.md").read_text(encoding="utf-8")


def test_troubleshooting_quotes_the_messages_gpuaudit_prints():
    """The symptoms are found by their message: each quoted one still exists in the code."""
    sources = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "gpuaudit").rglob("*.py"))
    page = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    for message in (
        "this audit is partial",
        "not auditable until rendered (a chart's template: use --helm-chart",
        "kustomize refuses files outside",
        "insufficient data: needs GPU telemetry",
        "insufficient data: telemetry unavailable",
        "is not a GPU count (a placeholder left unrendered?)",
        "which is not installed: pip install",
        "unknown config key",
    ):
        assert message in page and message in sources, message
