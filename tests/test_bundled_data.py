"""gpuaudit/data's YAML files are read from parsed.json, parsed ahead, only
while it holds them as they are: the same values as parsing them, and a
stale entry is never used."""

from __future__ import annotations

import json
import shutil

import pytest

from gpuaudit import bundled
from gpuaudit.kube.yaml_lines import load_yaml_with_lines

YAML_FILES = sorted(p.name for p in (bundled.PACKAGE / "data").glob("*.yaml"))


def test_parsed_json_is_current():
    committed = (bundled.PACKAGE / "data" / bundled.PARSED).read_text(encoding="utf-8")
    assert committed == bundled.parsed_data(), "stale: run .venv/bin/python scripts/gen_parsed_data.py"


@pytest.mark.parametrize("name", YAML_FILES)
def test_each_file_reads_as_its_yaml_parses(name):
    parsed = load_yaml_with_lines(bundled.data_text(name))[0]
    assert json.loads(json.dumps(parsed)) == parsed  # JSON holds it exactly (no dates, no int keys)
    first, second = bundled.data_yaml(name), bundled.data_yaml(name)
    assert first == parsed
    assert first is not second  # each caller gets its own values


def test_a_changed_file_is_parsed_not_read_from_the_stale_entry(tmp_path, monkeypatch):
    shutil.copytree(bundled.PACKAGE / "data", tmp_path / "data")
    monkeypatch.setattr(bundled, "PACKAGE", tmp_path)
    path = tmp_path / "data" / "models.yaml"
    path.write_text(path.read_text(encoding="utf-8") + "\nchanged_after_generation: true\n", encoding="utf-8")
    assert bundled.data_yaml("models.yaml")["changed_after_generation"] is True
    for damaged in ("{not json", "[]"):
        (tmp_path / "data" / bundled.PARSED).write_text(damaged, encoding="utf-8")
        bundled._parsed.cache_clear()  # read once per run: this test rewrites it
        assert bundled.data_yaml("gpus.yaml") == load_yaml_with_lines(bundled.data_text("gpus.yaml"))[0]
