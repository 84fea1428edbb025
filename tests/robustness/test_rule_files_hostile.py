"""A pull request that names the runner's files (issue 32, item 1).

A repository that runs gpuaudit in CI or pre-commit is untrusted: a pull
request can add a rule file that is a symlink to the runner's credentials,
set ``policies:`` in ``.gpuaudit.yaml`` to an absolute path or a ``..`` that
leaves the checkout, make the config or a baseline a link, or link a cases
file. Before, such a file was read through the link and, when it held one
text value (a token, a JWT, ``.git-credentials``, an SSH key), the schema
error quoted it whole into every output format and ``rules validate``.

Here a runner-like home folder (a token, a JWT, ``.git-credentials``, an
SSH private key, a docker ``config.json``, the GitHub CLI's ``hosts.yml``)
sits beside the checkout, every way a repository can name a file points at
it, and no part of any secret may reach stdout, any output format, stderr,
``rules validate`` or ``rules test``: each such file is refused, named, and
never read (files.confined).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from gpuaudit.files import OutsideRootError, bounded_quotes, command_line_roots, confined, excerpt, repository_root
from tests.robustness.hostile import PINNED

FORMATS = ("text", "json", "sarif", "github", "gitlab", "junit", "policyreport")

TOKEN = "ghp_R7uNn3rT0k3nS3cr3tV4lu3xQ9w2e8r6t4y1u3i5o7p"
JWT = "eyJhbGciOiJSUzI1NiJ9." + base64.urlsafe_b64encode(b'{"sub":"runner","aud":"ci"}' * 30).decode().rstrip("=")
CREDENTIALS = "https://x-access-token:ghs_Cr3d3nt14lsS3cr3tF0rG1tHubZzYy@github.com\n"
KEY_BODY = [
    base64.b64encode(f"openssh-key-v1 fake private key line {i} ".encode() * 2).decode()[:70] for i in range(12)
]
SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(KEY_BODY) + "\n-----END OPENSSH PRIVATE KEY-----\n"
DOCKER_AUTH = base64.b64encode(b"runner:d0ck3rP4ssw0rdS3cr3t").decode()
GH_TOKEN = "gho_H0st5Yml0Auth70k3nS3cr3tAbCdEf"

# What may never appear anywhere: each secret whole, and pieces of it.
SECRETS = [TOKEN, JWT, CREDENTIALS.strip(), DOCKER_AUTH, GH_TOKEN, *KEY_BODY]


def pieces(secret: str) -> list[str]:
    """Every 16-character piece of ``secret`` that is no common word: a
    quoted excerpt of any part of it shows as one of these."""
    return [secret[i : i + 16] for i in range(0, max(1, len(secret) - 15), 8)]


LEAKS = sorted({piece for secret in SECRETS for piece in pieces(secret)})

GOOD_RULE = """\
id: SITE-001
title: Site rule
category: application
severity: low
scope: [manifest]
target: container
match:
  properties: {gpu: {properties: {requested: {const: true}}}}
violation:
  properties: {cpu_request: {type: number, maximum: 100}}
  required: [cpu_request]
message: "{{ container }} asks for {{ cpu_request }} CPU"
docs: Explains why this rule matters in at least twenty characters.
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A CI runner's home: what a hosted runner or a developer's machine holds."""
    home = tmp_path / "home" / "runner"
    (home / ".ssh").mkdir(parents=True)
    (home / ".docker").mkdir()
    (home / ".config" / "gh").mkdir(parents=True)
    (home / "token").write_text(TOKEN + "\n")
    (home / "jwt").write_text(JWT)
    (home / ".git-credentials").write_text(CREDENTIALS)
    (home / ".ssh" / "id_ed25519").write_text(SSH_KEY)
    (home / ".ssh" / "id_ed25519.yaml").write_text(SSH_KEY)  # a folder of them, named by `policies:`
    (home / ".docker" / "config.json").write_text(json.dumps({"auths": {"ghcr.io": {"auth": DOCKER_AUTH}}}))
    (home / ".config" / "gh" / "hosts.yml").write_text(
        f"github.com:\n    user: runner\n    oauth_token: {GH_TOKEN}\n    git_protocol: https\n"
    )
    (home / ".config" / "gh" / "token.yaml").write_text(TOKEN + "\n")
    return home


@pytest.fixture
def repo(tmp_path: Path, home: Path) -> Path:
    """The pull request's checkout, beside the home folder (as on a runner:
    ``~/work/<repo>/<repo>``), with every way of naming the home's files."""
    repo = home / "work" / "repo" / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pinned.yaml").write_text(PINNED)
    site = repo / "site"
    site.mkdir()
    (site / "good.yaml").write_text(GOOD_RULE)
    for name, target in {
        "token.yaml": "token",
        "jwt.yaml": "jwt",
        "credentials.yaml": ".git-credentials",
        "key.yaml": ".ssh/id_ed25519",
        "docker.yaml": ".docker/config.json",
        "hosts.yaml": ".config/gh/hosts.yml",
        "token.cases.yaml": "token",
        "good.cases.yaml": ".ssh/id_ed25519",
    }.items():
        (site / name).symlink_to(home / target)
    (site / "relative.yaml").symlink_to(os.path.relpath(home / "token", site))
    (repo / "ssh").symlink_to(home / ".ssh")  # a folder link
    (repo / ".gpuaudit.yaml").write_text(
        "policies:\n"
        "- site\n"
        f"- {home / '.config' / 'gh'}\n"  # absolute
        "- ../../../.ssh\n"  # .. out of the checkout
        "- ssh\n"  # a link to a folder outside
    )
    (repo / "baseline.json").symlink_to(home / ".docker" / "config.json")
    return repo


def assert_no_secret(text: str, where: str) -> None:
    for leak in LEAKS:
        assert leak not in text, f"{where} quotes a secret: {leak!r}"


def test_check_reads_no_file_outside_the_repository_in_any_format(run_cli, repo, home):
    out = repo / "out"
    args = [f"--format={fmt}={out / fmt}" for fmt in FORMATS if fmt != "text"]
    proc = run_cli("check", "pinned.yaml", "-o", "text", *args, cwd=repo)

    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert_no_secret(proc.stdout, "text output")
    assert_no_secret(proc.stderr, "stderr")
    for fmt in FORMATS:
        if fmt != "text":
            assert_no_secret((out / fmt).read_text(), fmt)
    # Each linked file and each folder outside is named, and refused.
    report = json.loads((out / "json").read_text())
    refused = {Path(e["file"]).name for e in report["errors"] if "leads outside" in e["message"]}
    assert {"token.yaml", "jwt.yaml", "credentials.yaml", "key.yaml", "docker.yaml", "hosts.yaml"} <= refused
    assert "relative.yaml" in refused
    config_errors = " ".join(e["message"] for e in report["errors"] if e["file"].endswith(".gpuaudit.yaml"))
    for entry in (".config/gh", "../../../.ssh", "'ssh'"):
        assert entry in config_errors, (entry, config_errors)
    rules = {f["rule"] for f in report["findings"]}
    assert {"GPA-PL-001", "SITE-001"} <= rules  # the good site rule and the built-in ones still run


def test_rules_validate_and_rules_test_read_no_link_out(run_cli, repo):
    site = repo / "site"
    files = sorted(str(p.relative_to(repo)) for p in site.iterdir())
    for args in (("validate", "site"), ("validate", *files), ("test", "site")):
        proc = run_cli("rules", *args, cwd=repo)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode != 0, args
        assert_no_secret(proc.stdout + proc.stderr, f"rules {' '.join(args)}")
        assert "leads outside" in proc.stdout + proc.stderr, args


def test_a_config_or_baseline_that_links_out_is_refused(run_cli, repo, home):
    (repo / ".gpuaudit.yaml").unlink()
    (repo / ".gpuaudit.yaml").symlink_to(home / ".docker" / "config.json")
    for args in (("check", "pinned.yaml"), ("check", "pinned.yaml", "--config", ".gpuaudit.yaml")):
        proc = run_cli(*args, cwd=repo)
        assert proc.returncode == 2 and "leads outside" in proc.stderr, proc.stderr
        assert_no_secret(proc.stdout + proc.stderr, "config")

    (repo / ".gpuaudit.yaml").unlink()
    proc = run_cli("check", "pinned.yaml", "--baseline", "baseline.json", cwd=repo)
    assert proc.returncode == 2 and "leads outside" in proc.stderr, proc.stderr
    assert_no_secret(proc.stdout + proc.stderr, "baseline")


def test_what_the_user_names_on_the_command_line_is_read(run_cli, repo, home, tmp_path):
    """The command line may reach outside the repository: a folder of rules
    the user names is theirs (a link inside it may still not lead out of it)."""
    (repo / ".gpuaudit.yaml").unlink()
    shared = tmp_path / "org-rules"
    shared.mkdir()
    (shared / "good.yaml").write_text(GOOD_RULE.replace("SITE-001", "ORG-001"))
    (shared / "leak.yaml").symlink_to(home / "token")
    proc = run_cli("check", "pinned.yaml", "--format", "json", "--policies", str(shared), cwd=repo)
    report = json.loads(proc.stdout)
    assert "ORG-001" in {f["rule"] for f in report["findings"]}
    [error] = report["errors"]
    assert error["file"].endswith("leak.yaml") and "leads outside" in error["message"]
    assert_no_secret(proc.stdout + proc.stderr, "check --policies")


def test_a_config_folder_outside_is_read_when_the_command_line_names_it_too(run_cli, repo, tmp_path):
    shared = tmp_path / "org-rules"
    shared.mkdir()
    (shared / "good.yaml").write_text(GOOD_RULE.replace("SITE-001", "ORG-001"))
    (repo / ".gpuaudit.yaml").write_text(f"policies:\n- {shared}\n")
    proc = run_cli("check", "pinned.yaml", "--format", "json", cwd=repo)
    report = json.loads(proc.stdout)
    assert proc.returncode == 2 and "ORG-001" not in {f["rule"] for f in report["findings"]}
    [error] = report["errors"]
    assert error["file"].endswith(".gpuaudit.yaml") and error["line"] == 2 and "leads outside" in error["message"]

    proc = run_cli("check", "pinned.yaml", "--format", "json", "--policies", str(shared), cwd=repo)
    report = json.loads(proc.stdout)
    assert report["errors"] == [] and "ORG-001" in {f["rule"] for f in report["findings"]}


def test_a_rule_file_inside_the_repository_is_quoted_in_short_excerpts_only(run_cli, tmp_path):
    """Even a file the repository holds (one text value; a mapping with a
    long value) is quoted in a short, escaped excerpt, never whole."""
    (tmp_path / ".git").mkdir()
    site = tmp_path / "site"
    site.mkdir()
    (site / "text.yaml").write_text(TOKEN * 20 + "\n")
    (site / "title.yaml").write_text(GOOD_RULE.replace("severity: low", f"severity: {TOKEN * 20}"))
    proc = run_cli("rules", "validate", "site", cwd=tmp_path)
    assert proc.returncode == 2
    for line in proc.stderr.splitlines():
        assert (TOKEN * 2) not in line and len(line) < 600, line


# --- the functions ---------------------------------------------------------------------


def test_confined_follows_every_link_and_names_the_path_not_the_content(tmp_path, home):
    root = tmp_path / "repo"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "ok.yaml").write_text("x: 1\n")
    (root / "inner").symlink_to(root / "sub")
    (root / "out").symlink_to(home)
    (root / "chain").symlink_to(root / "inner" / "hop")
    (root / "sub" / "hop").symlink_to(home / "token")

    assert confined(root / "inner" / "ok.yaml", [root], what="rule file") == (root / "sub" / "ok.yaml").resolve()
    assert confined(root / "missing.yaml", [root], what="rule file") == (root / "missing.yaml").resolve()
    for bad in (root / "out" / "token", root / "chain", root / ".." / "home", Path("/etc/passwd")):
        with pytest.raises(OutsideRootError) as caught:
            confined(bad, [root], what="rule file")
        assert str(caught.value).startswith(f"{bad}: ")
        assert_no_secret(str(caught.value), "confined")
    # Another root lets it through.
    assert confined(root / "out" / "token", [root, home], what="values file") == (home / "token").resolve()


def test_the_repository_is_the_nearest_git_folder_else_the_working_directory(tmp_path):
    (tmp_path / "a" / ".git").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    assert repository_root(tmp_path / "a" / "b" / "c") == (tmp_path / "a").resolve()
    (tmp_path / "plain" / "d").mkdir(parents=True)
    if not any((p / ".git").exists() for p in tmp_path.resolve().parents):
        assert repository_root(tmp_path / "plain" / "d") == (tmp_path / "plain" / "d").resolve()
    # A path named on the command line: inside the repository, the repository;
    # outside it, the folder named (never the target of a link planted inside).
    (tmp_path / "a" / "link").symlink_to(tmp_path / "plain")
    cwd = tmp_path / "a" / "b"
    assert command_line_roots(Path("../link"), cwd=cwd) == ((tmp_path / "a").resolve(),)
    assert command_line_roots(tmp_path / "plain" / "d", cwd=cwd) == ((tmp_path / "plain" / "d").resolve(),)


def test_excerpts_are_short_and_escaped():
    assert excerpt("short") == "'short'"
    long = excerpt("\u202e\x1b[2J" + "s" * 500)
    assert len(long) < 90 and "\x1b" not in long and "\u202e" not in long
    message = bounded_quotes(f"{TOKEN * 10!r} is not of type 'object'")
    assert TOKEN * 2 not in message and message.endswith("is not of type 'object'")
