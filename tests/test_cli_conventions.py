"""The conventions users bring from kubectl, checkov, kube-linter and Polaris
(issue 20): -o is the format, one document on stdout, SARIF for code
scanning, JUnit failures that match the exit code, colour, --quiet,
--fail-on never, completion, -n/-l, wrapping, a per-rule summary, the
explain hint, the extras split and no address that is not ours."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from gpuaudit.cli.options import use_colour
from gpuaudit.output import text as text_format
from gpuaudit.sources.units import discover, units_for_changed
from tests.manifests import PINNED
from tests.robustness.test_rules_config import rule as site_rule

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"
EXAMPLES = ROOT / "examples" / "manifests"
SARIF_SCHEMA = json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text())
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def pods(n: int, prefix: str = "pinned") -> str:
    return "---\n".join(PINNED.replace("name: pinned", f"name: {prefix}-{i}") for i in range(n))


# --- 1. -o is the format ------------------------------------------------------------


def test_dash_o_is_the_format_and_output_file_the_path(run_cli, tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    proc = run_cli("check", "pinned.yaml", "-o", "json")
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["findings"][0]["rule"] == "GPA-PL-001"
    assert not (tmp_path / "json").exists()

    proc = run_cli("check", "pinned.yaml", "-o", "sarif", "--output-file", "out.sarif")
    assert proc.returncode == 1 and proc.stdout == ""
    jsonschema.validate(json.loads((tmp_path / "out.sarif").read_text()), SARIF_SCHEMA)

    proc = run_cli("check", "pinned.yaml", "--output", "junit=out.xml", "-o", "text")
    assert "GPA-PL-001" in proc.stdout and ET.parse(tmp_path / "out.xml").getroot().tag == "testsuites"


@pytest.mark.parametrize("value", ["report.json", "out/report.sarif", "jsn"])
def test_a_path_or_unknown_name_after_dash_o_is_a_usage_error(run_cli, tmp_path, value):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    proc = run_cli("check", "pinned.yaml", "-o", value)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    if value != "jsn":
        assert f"--output-file {value}" in proc.stderr
    assert "json" in proc.stderr  # the formats are listed
    assert not (tmp_path / value).exists()


# --- 2. one document on stdout ------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("--format", "sarif", "--format", "json"),
        ("-o", "sarif", "-o", "json"),
        ("-o", "json", "-o", "text", "--format", "junit=x.xml"),
        ("-o", "json", "-o", "sarif", "--output-file", "one.out"),
    ],
)
def test_two_formats_for_stdout_are_a_usage_error(run_cli, tmp_path, args):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    proc = run_cli("check", "pinned.yaml", *args)
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert "stdout" in proc.stderr or "--output-file" in proc.stderr
    assert not any((tmp_path / n).exists() for n in ("x.xml", "one.out"))


def test_two_formats_each_with_a_file_are_fine(run_cli, tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    proc = run_cli("check", "pinned.yaml", "-o", "sarif=a.sarif", "-o", "json", "--output-file", "a.json")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert json.loads((tmp_path / "a.json").read_text())["version"] == 1
    assert json.loads((tmp_path / "a.sarif").read_text())["version"] == "2.1.0"


# --- 3. SARIF for code scanning -------------------------------------------------------------


def _sarif_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    for team in ("team-a", "team-b"):
        (repo / "apps" / team).mkdir(parents=True)
        (repo / "apps" / team / "pod.yaml").write_text(PINNED)  # the same object name in two files
    return repo


def test_sarif_uris_are_repository_relative_and_fingerprints_keep_files_apart(run_cli, tmp_path):
    repo = _sarif_repo(tmp_path)
    proc = run_cli("check", "team-a/pod.yaml", "team-b/pod.yaml", "-o", "sarif", cwd=repo / "apps")
    sarif = json.loads(proc.stdout)
    jsonschema.validate(sarif, SARIF_SCHEMA)
    run = sarif["runs"][0]
    assert run["originalUriBaseIds"] == {"%SRCROOT%": {"uri": repo.resolve().as_uri() + "/"}}
    pinned = [r for r in run["results"] if r["ruleId"] == "GPA-PL-001"]
    locations = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in pinned]
    assert sorted(loc["uri"] for loc in locations) == ["apps/team-a/pod.yaml", "apps/team-b/pod.yaml"]
    assert {loc["uriBaseId"] for loc in locations} == {"%SRCROOT%"}
    prints = {r["partialFingerprints"]["gpuaudit/v2"] for r in pinned}
    assert len(prints) == 2  # two alerts, not one

    # the same file from another folder: the same URI and fingerprint
    again = json.loads(run_cli("check", "apps/team-a/pod.yaml", "-o", "sarif", cwd=repo).stdout)
    first = next(r for r in again["runs"][0]["results"] if r["ruleId"] == "GPA-PL-001")
    assert first["partialFingerprints"]["gpuaudit/v2"] in prints
    assert first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "apps/team-a/pod.yaml"


def test_sarif_file_outside_the_repository_is_an_absolute_uri(run_cli, tmp_path):
    repo = _sarif_repo(tmp_path)
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text(PINNED)
    sarif = json.loads(run_cli("check", str(outside), "-o", "sarif", cwd=repo).stdout)
    jsonschema.validate(sarif, SARIF_SCHEMA)
    (result,) = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "GPA-PL-001"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": outside.resolve().as_uri()}


def test_sarif_rules_carry_their_own_help_and_no_foreign_address(run_cli, tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    sarif = json.loads(run_cli("check", "pinned.yaml", "-o", "sarif").stdout)
    driver = sarif["runs"][0]["tool"]["driver"]
    assert "informationUri" not in driver
    for rule in driver["rules"]:
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]*", rule["name"]), rule["name"]
        assert "helpUri" not in rule
        assert rule["help"]["text"] and rule["help"]["markdown"].startswith(f"**{rule['id']}: ")
        assert f"gpuaudit rules explain {rule['id']}" in rule["help"]["markdown"]
    pl001 = next(r for r in driver["rules"] if r["id"] == "GPA-PL-001")
    assert pl001["name"] == "GPUWorkloadPinnedToASingleNode"
    assert "http" not in json.dumps(driver).replace("https://json.schemastore.org", "")


# --- 4. JUnit failures follow --fail-on ---------------------------------------------------


def _junit(run_cli, *args: str) -> tuple[ET.Element, int]:
    proc = run_cli("check", str(EXAMPLES), "-o", "junit", *args)
    return ET.fromstring(proc.stdout), proc.returncode


def test_junit_fails_only_findings_at_or_above_fail_on(run_cli):
    findings = json.loads(run_cli("check", str(EXAMPLES), "-o", "json").stdout)["findings"]
    high = [f for f in findings if f["severity"] in ("critical", "high")]
    assert high and len(high) < len(findings)

    root, code = _junit(run_cli)
    assert code == 1 and int(root.get("failures")) == len(high)
    failed = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert {c.find("failure").get("type") for c in failed} <= {"critical", "high"}
    below = [c for c in root.iter("testcase") if "below --fail-on high" in (c.findtext("system-out") or "")]
    assert len(below) == len(findings) - len(high)

    root, code = _junit(run_cli, "--fail-on", "never")
    assert code == 0 and int(root.get("failures")) == 0  # a green job shows no failed test
    root, code = _junit(run_cli, "--fail-on", "info")
    assert code == 1 and int(root.get("failures")) == len(findings)


# --- 6. colour -----------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("choice", "env", "tty", "expected"),
    [
        ("auto", {}, True, True),
        ("auto", {}, False, False),
        ("auto", {"NO_COLOR": "1"}, True, False),
        ("auto", {"NO_COLOR": ""}, True, True),  # only a non-empty NO_COLOR counts
        ("auto", {"FORCE_COLOR": "1"}, False, True),
        ("auto", {"FORCE_COLOR": "0"}, False, False),
        ("always", {"NO_COLOR": "1"}, False, True),
        ("never", {"FORCE_COLOR": "1"}, True, False),
    ],
)
def test_colour_choice(monkeypatch, choice, env, tty, expected):
    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert use_colour(choice, _Tty() if tty else io.StringIO()) is expected


def test_coloured_columns_align(run_cli):
    proc = run_cli("check", str(EXAMPLES), "--color", "always")
    assert "\x1b[" in proc.stdout
    plain = run_cli("check", str(EXAMPLES), "--color", "never").stdout
    assert "\x1b[" not in plain
    assert ANSI.sub("", proc.stdout) == plain  # colour adds codes, never columns
    heads = [line for line in plain.splitlines() if re.match(r"  [A-Z]+ +GPA-", line)]
    assert heads and len({line.index("GPA-") for line in heads}) == 1


# --- 7. quiet, soft fail, completion, namespaces, wrapping, summary, explain ----------------


def test_quiet_leaves_out_the_skipped_rules(run_cli):
    loud = run_cli("check", str(EXAMPLES)).stdout
    quiet = run_cli("check", str(EXAMPLES), "--quiet")
    assert "SKIPPED" in loud and "SKIPPED" not in quiet.stdout
    assert "GPA-PL-001" in quiet.stdout and quiet.returncode == 1
    assert quiet.stdout.rstrip().splitlines()[-1].endswith("rules skipped")  # the summary stays


def test_fail_on_never_reports_without_failing(run_cli, tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    proc = run_cli("check", "pinned.yaml", "--fail-on", "never")
    assert proc.returncode == 0 and "GPA-PL-001" in proc.stdout
    (tmp_path / "broken.yaml").write_text("kind: Pod\nmetadata: {name: [\n")
    assert run_cli("check", "pinned.yaml", "broken.yaml", "--fail-on", "never").returncode == 2


def test_shell_completion_as_documented(run_cli):
    proc = run_cli("--help", env={"_GPUAUDIT_COMPLETE": "bash_source"})
    assert proc.returncode == 0 and "complete " in proc.stdout and "_GPUAUDIT_COMPLETE" in proc.stdout
    words = run_cli(
        env={"_GPUAUDIT_COMPLETE": "bash_complete", "COMP_WORDS": "gpuaudit check --fail-on ", "COMP_CWORD": "3"}
    ).stdout
    assert "never" in words and "high" in words
    assert "_GPUAUDIT_COMPLETE=bash_source gpuaudit" in (ROOT / "docs" / "output.md").read_text()


def test_namespace_and_selector_narrow_a_snapshot_audit(run_cli):
    whole = json.loads(run_cli("audit", "--snapshot", str(DEMO), "-o", "json").stdout)
    namespaces = {f["resource"]["namespace"] for f in whole["findings"]} - {""}
    assert len(namespaces) > 2
    one = sorted(namespaces)[0]
    narrowed = json.loads(run_cli("audit", "--snapshot", str(DEMO), "-n", one, "-o", "json").stdout)
    assert {f["resource"]["namespace"] for f in narrowed["findings"]} - {""} == {one}
    assert narrowed["summary"]["cluster"]["gpus_total"] == whole["summary"]["cluster"]["gpus_total"]
    two = sorted(namespaces)[:2]
    both = run_cli("audit", "--snapshot", str(DEMO), "-n", ",".join(two), "-o", "json").stdout
    assert {f["resource"]["namespace"] for f in json.loads(both)["findings"]} - {""} == set(two)
    none = json.loads(run_cli("audit", "--snapshot", str(DEMO), "-l", "app=no-such-app", "-o", "json").stdout)
    assert not [f for f in none["findings"] if f["resource"]["kind"] == "Pod" or f["evidence"].get("pods")]
    bad = run_cli("audit", "--snapshot", str(DEMO), "-l", "app in (a")
    assert bad.returncode == 2 and "selector" in bad.stderr and "Traceback" not in bad.stderr


def test_selector_goes_to_the_api_server_and_nodes_stay_whole(run_cli, apiserver, kubeconfig):
    small = json.loads((ROOT / "tests" / "clusters" / "small.json").read_text())
    apiserver.load(small)
    pod_namespaces = {p["metadata"].get("namespace") for p in small.get("pods", [])}
    one = sorted(n for n in pod_namespaces if n)[0]
    whole = json.loads(run_cli("audit", "--kubeconfig", str(kubeconfig), "-o", "json").stdout)
    apiserver.requests.clear()
    proc = run_cli("audit", "--kubeconfig", str(kubeconfig), "-n", one, "-l", "app", "-o", "json")
    assert proc.returncode in (0, 1), proc.stderr
    pod_lists = [r for r in apiserver.requests if r.path == "/api/v1/pods"]
    assert pod_lists and all(r.query.get("labelSelector") == "app" for r in pod_lists)
    node_lists = [r for r in apiserver.requests if r.path == "/api/v1/nodes"]
    assert node_lists and not any("labelSelector" in r.query for r in node_lists)
    narrowed = json.loads(proc.stdout)
    assert {f["resource"]["namespace"] for f in narrowed["findings"]} - {""} <= {one}
    assert narrowed["summary"]["cluster"]["gpus_total"] == whole["summary"]["cluster"]["gpus_total"]


def test_text_wraps_to_the_width_given_and_not_otherwise(run_cli, tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    result = _result(tmp_path / "pinned.yaml")
    wide = text_format.render(result)
    narrow = text_format.render(result, width=50)
    long_lines = [line for line in wide.splitlines() if line.startswith(" " * 11) and len(line) > 50]
    assert long_lines
    for line in narrow.splitlines():
        if line.startswith(" " * 11) and "explain:" not in line:  # a command is never broken
            assert len(line) <= 50, line
    assert " ".join(narrow.split()) == " ".join(wide.split())  # the same words


def test_many_findings_end_with_a_count_per_rule_and_every_finding_names_explain(run_cli, tmp_path):
    (tmp_path / "many.yaml").write_text(pods(25))
    out = run_cli("check", "many.yaml").stdout
    assert "BY RULE" in out
    by_rule = out[out.index("BY RULE") :]
    assert re.search(r"^\s+25\s+GPA-PL-001\s+high\s+GPU workload pinned", by_rule, re.M)
    assert out.count("explain: gpuaudit rules explain GPA-PL-001") == 25
    (tmp_path / "few.yaml").write_text(pods(2))
    assert "BY RULE" not in run_cli("check", "few.yaml").stdout
    explained = run_cli("rules", "explain", "GPA-PL-001")
    assert explained.returncode == 0 and "GPU workload pinned to a single node" in explained.stdout


def _result(path: Path):
    from gpuaudit.pipelines.check import check_manifests
    from gpuaudit.pipelines.policy import load_policy
    from gpuaudit.sources.user_config import Config

    config = Config()
    rules, _ = load_policy(config)
    return check_manifests([str(path)], config, rules)


# --- 8. the extras ----------------------------------------------------------------------------

_WITHOUT_EXTRAS = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("kubernetes", "jinja2", "markupsafe", "pynvml"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
from gpuaudit.cli.main import main
main()
"""


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (("audit", "--kubeconfig", "nowhere"), "cluster"),
        (("report", "--snapshot", str(DEMO), "--out", "review"), "report"),
        (("fix", str(EXAMPLES), "--diff"), "fix"),
        (("sample", "--duration", "1s"), "nvml"),
    ],
)
def test_a_command_without_its_extra_says_what_to_install(tmp_path, args, extra):
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS, *args], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"pip install 'gpuaudit[{extra}]'" in line


def test_check_runs_without_any_extra(tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS, "check", "pinned.yaml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 1 and "GPA-PL-001" in proc.stdout, proc.stderr
    helped = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS, "--help"], capture_output=True, text=True, timeout=120
    )
    assert helped.returncode == 0 and "gpuaudit[report]" in helped.stdout


def test_a_site_message_beyond_placeholders_without_jinja2_names_the_rule_and_the_extra(tmp_path):
    (tmp_path / "pinned.yaml").write_text(PINNED)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "rich.yaml").write_text(site_rule(1, "{{ container|upper }}"))
    (tmp_path / "site" / "plain.yaml").write_text(site_rule(2, "{{ container }} asks for {{ cpu_request }} CPU"))
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS, "check", "pinned.yaml", "--policies", "site"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "rich.yaml:12: message: " in proc.stdout and "pip install 'gpuaudit[report]'" in proc.stdout
    assert "SITE-002" in proc.stdout and "cuda asks for 4 CPU" in proc.stdout  # a plain site message needs no extra


def test_the_base_install_is_light_and_all_holds_every_extra():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {re.split(r"[<>=\[ ;]", d)[0].lower() for d in project["dependencies"]}
    assert base == {"pyyaml", "jsonschema", "fastjsonschema", "click", "msgspec"}
    extras = project["optional-dependencies"]
    named = {
        re.split(r"[<>=\[ ;]", d)[0].lower() for key in ("cluster", "nvml", "report", "metrics") for d in extras[key]
    }
    assert named == {"kubernetes", "nvidia-ml-py", "jinja2", "prometheus-client"}
    assert {re.split(r"[<>=\[ ;]", d)[0].lower() for d in extras["all"]} >= named
    assert "gpuaudit[all]" in extras["test"]
    assert "'.[all" in (ROOT / "scripts" / "test.sh").read_text()
    assert "'.[all]'" in (ROOT / "Dockerfile").read_text()
    assert "install '.[all]'" in (ROOT / "README.md").read_text()


def test_a_changed_file_stands_for_the_units_that_read_it(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    base, overlay, plain = repo / "apps" / "base", repo / "apps" / "overlays" / "prod" / "patches", repo / "plain"
    for folder in (base, overlay, plain):
        folder.mkdir(parents=True)
    (base / "kustomization.yaml").write_text("resources: [pod.yaml]\n")
    (base / "pod.yaml").write_text(PINNED)
    (overlay.parent / "kustomization.yaml").write_text("resources: [../../base]\n")
    (overlay / "pin.yaml").write_text("kind: Pod\n")
    (plain / "a.yaml").write_text(PINNED)
    monkeypatch.chdir(repo)
    repository = discover(repo, ".")
    assert [(u.kind, u.name) for u in repository.units] == [("kustomize", "apps/overlays/prod"), ("files", "plain")]

    def touched(*files: str) -> tuple[list[str], list[str]]:
        units, alone = units_for_changed(repository, [Path(f) for f in files])
        return [u.name for u in units], [str(p.relative_to(repo)) for p in alone]

    # a base's file, its kustomization, a fragment below the overlay: the overlay, once
    assert touched("apps/base/pod.yaml", "apps/base/kustomization.yaml", "apps/overlays/prod/patches/pin.yaml") == (
        ["apps/overlays/prod"],
        [],
    )
    assert touched("plain/a.yaml", "README.md") == (["plain"], ["README.md"])


# --- 9. no address that is not ours ---------------------------------------------------------


def test_no_file_points_at_the_unrelated_github_project():
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    offenders = []
    for name in listed.stdout.splitlines():
        path = ROOT / name
        if not path.is_file() or path.suffix in (".gz", ".png", ".sqlite") or name == "tests/test_cli_conventions.py":
            continue
        try:
            if "github.com/gpuaudit" in path.read_text(encoding="utf-8"):
                offenders.append(name)
        except UnicodeDecodeError:
            continue
    assert offenders == []


def test_docs_show_dash_o_as_a_format_only():
    pages = [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md", ROOT / "deploy" / "README.md"]
    pages += [*(ROOT / "docs" / "ci").glob("*.y*ml"), *(ROOT / "deploy").rglob("*.sh")]
    formats = "text|json|sarif|junit|github|gitlab|policyreport|openmetrics"
    for page in pages:
        for line in page.read_text().splitlines():
            for match in re.finditer(r"gpuaudit (?:check|audit)\b[^|;&]*?\s(?:-o|--output)[ =](\S+)", line):
                assert re.fullmatch(rf"(?:{formats})(?:=\S+)?", match.group(1).strip("`\"'")), (page, line)


if os.name != "posix":  # pragma: no cover
    pytestmark = pytest.mark.skip("POSIX paths")
