"""Rule messages within bounds (issue 19, item 10): a site rule's message is
hostile input (a pull request from a fork may add one).

Loading refuses everything in a message but facts, literal-argument filters
and tests from a list, `if` and `for` (engine/message_sandbox.py): each input
below used to build a gigabyte string (or run for more than 60 s) and is now
a load error naming the file and line. What the subset still allows is
bounded at run time: past a bound the finding is kept with a short
placeholder, the rule is named (`rule SITE-001: message failed:
MessageLimitError: ...`) and the run exits 2, as for any broken message.

Covered elsewhere: templates that reach for Python internals, `'x' * 10**9`,
`9 ** 9 ** 9 ** 9` (tests/robustness/test_rules_config.py).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuaudit.engine import message_sandbox
from gpuaudit.engine.message_sandbox import MessageLimitError
from gpuaudit.engine.messages import check_template, render
from tests.robustness.hostile import PINNED
from tests.robustness.test_rules_config import rule

GPUAUDIT = str(Path(sys.executable).with_name("gpuaudit"))

# template -> why loading refuses it
REFUSED = {
    "{{ container.center(10**9) }}": "a call is not allowed",
    '{{ "%0999999999d"|format(1) }}': "the filter 'format' is not allowed",
    '{{ "{:>999999999}".format(1) }}': "a call is not allowed",
    "{{ lipsum(n=10**7) }}": "a call is not allowed",
    "{{ '%0999999999d' % 1 }}": "arithmetic (%) is not allowed",
    "{{ container|center(10**9) }}": "the filter 'center' is not allowed",
    "{{ container|indent(10**9, true) }}": "the filter 'indent' is not allowed",
    "{{ range(100000)|join('x' * 5000) }}": "join: arguments must be literals",
    "{{ container|join(sep) }}": "join: arguments must be literals",
    "{{ xs|map('center', 9) }}": "map: only map(attribute=...) is allowed",
    "{{ xs|select('sameas', 1) }}": "select: the test 'sameas' is not allowed",
    "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% else %}{{ s }}{% endif %}{% endmacro %}{{ d('x', 40) }}": (
        "a macro is not allowed"
    ),
    "{% set s = container %}{{ s }}": "set is not allowed",
    "{{ [1]|batch(10**9, 0)|list }}": "the filter 'batch' is not allowed",
    "{{ {'a': 1}|tojson }}": "a dict literal is not allowed",
    "{{ container|tojson(1000000000) }}": "tojson: no arguments",
    "{{ container ~ container }}": "~ is not allowed",
    "{{ container[container] }}": "an index other than a literal name or number is not allowed",
    "{% for x in container recursive %}{{ loop(x) }}{% endfor %}": "a recursive loop is not allowed",
    "{% include 'x' %}": "Include is not allowed",
}

# template -> what the warning says after "MessageLimitError: "; the facts are PINNED's
# (container "cuda"), so sizes come from nesting and chaining alone.
NESTED = "{% for a in container %}" * 9 + "{% endfor %}" * 9
BOUNDED = {
    NESTED: "more than 100,000 loop iterations",
    "{% for a in container %}" * 6 + "{{ container }}" + "{% endfor %}" * 6: "message longer than 10,000 characters",
    "{{ container" + "|tojson" * 20 + " }}": "a string longer than 100,000 characters",
}


@pytest.mark.parametrize("template", list(REFUSED), ids=range(len(REFUSED)))
def test_a_message_beyond_the_subset_is_refused_when_the_rule_loads(template):
    problem = check_template(template)
    assert problem is not None and problem.startswith(REFUSED[template]), problem


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1024**3, 1024**3))


def _check(tmp_path: Path, template: str) -> tuple[subprocess.CompletedProcess, dict, float]:
    (tmp_path / "pinned.yaml").write_text(PINNED)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "big.yaml").write_text(rule(1, template.replace('"', '\\"')))
    started = time.monotonic()
    proc = subprocess.run(
        [GPUAUDIT, "check", "pinned.yaml", "--policies", "site", "--format", "json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limited,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(proc.stdout), time.monotonic() - started


@pytest.mark.parametrize("template", list(BOUNDED), ids=range(len(BOUNDED)))
def test_a_message_past_the_bounds_is_a_placeholder_and_a_named_error(tmp_path, template):
    proc, report, elapsed = _check(tmp_path, template)

    assert proc.returncode == 2, proc.stderr
    [finding] = [f for f in report["findings"] if f["rule"] == "SITE-001"]  # kept
    assert finding["message"] == "Site rule 1 (message unavailable)"
    assert finding["resource"]["name"] == "pinned"
    [error] = [e for e in report["errors"] if "SITE-001" in e["message"]]
    assert error["file"].endswith("site/big.yaml") and error["level"] == "error"
    assert error["message"].startswith("rule SITE-001: message failed: MessageLimitError: "), error
    assert BOUNDED[template] in error["message"], error
    assert "GPA-PL-001" in {f["rule"] for f in report["findings"]}  # the other rules still judged
    assert elapsed < 30, elapsed


def test_a_refused_message_is_a_load_error_naming_file_and_line(tmp_path):
    proc, report, _ = _check(tmp_path, "{{ container.center(10**9) }}")

    assert proc.returncode == 2, proc.stderr
    [error] = report["errors"]
    assert error["file"].endswith("site/big.yaml") and error["line"] == 12
    assert error["message"].startswith("message: a call is not allowed"), error
    assert "SITE-001" not in {f["rule"] for f in report["findings"]}
    assert "GPA-PL-001" in {f["rule"] for f in report["findings"]}


def test_the_bounds_are_where_they_say(monkeypatch):
    width = message_sandbox.MAX_MESSAGE_CHARS
    assert len(render("{% for i in xs %}x{% endfor %}", {"xs": [0] * width})) == width
    with pytest.raises(MessageLimitError, match="message longer than 10,000"):
        render("{% for i in xs %}x{% endfor %}", {"xs": [0] * (width + 1)})

    loops = "{% for a in xs %}{% for b in ys %}{% endfor %}{% endfor %}"
    assert render(loops, {"xs": [0] * 99, "ys": [0] * 1000}) == ""  # 99 + 99,000 iterations
    with pytest.raises(MessageLimitError, match="more than 100,000 loop iterations"):
        render(loops, {"xs": [0] * 100, "ys": [0] * 1000})

    longest = message_sandbox.MAX_STRING
    assert render("{{ s|upper|length }}", {"s": "x" * longest}) == str(longest)
    with pytest.raises(MessageLimitError, match="a string longer than 100,000 characters"):
        render("{{ s|upper|length }}", {"s": "x" * (longest + 1)})
    with pytest.raises(MessageLimitError, match="a value of more than 100,000 elements"):
        render("{{ s|list|length }}", {"s": "x" * (longest + 1)})
    # join's separator: counted before the string is built
    assert render("{{ xs|join('--')|length }}", {"xs": [""] * 50_001}) == str(longest)
    with pytest.raises(MessageLimitError, match="a string longer than 100,000 characters"):
        render("{{ xs|join('--')|length }}", {"xs": [""] * 50_002})

    monkeypatch.setattr(message_sandbox, "MAX_RENDER_SECONDS", 0.0)
    with pytest.raises(MessageLimitError, match="rendering took longer than 0 s"):
        render("{% for i in xs %}{% endfor %}", {"xs": [0]})


def test_ordinary_rich_messages_still_render():
    context = {
        "x": "abc",
        "n": 3,
        "pins": [{"node": "a"}, {"node": "b"}],
        "cpu": 0.26,
        "gpu": {"values": [1, 2]},
        "none": None,
    }
    template = (
        "{{ x|upper }} {{ pins|map(attribute='node')|join(', ') }}"
        " {% for p in pins %}{{ loop.index }}={{ p.node }}{% if not loop.last %};{% endif %}{% endfor %}"
        " {{ cpu|round(1) }} {{ pins|tojson }} {{ gpu.values|join('+') }} {{ none }} {{ missing|lower }}"
        " {{ x if n > 2 else 'few' }} {{ pins|selectattr('node', 'eq', 'b')|map(attribute='node')|first }}"
        " {{ pins.0.node }}{{ pins[1]['node'] }} {{ x|default('n/a') }} {{ missing|default('n/a') }}"
        " {{ 'yes' if x in ['abc', 'def'] else 'no' }} {{ pins|length }}"
    )
    assert check_template(template) is None
    assert render(template, context) == (
        'ABC a, b 1=a;2=b 0.3 [{"node": "a"}, {"node": "b"}] 1+2 unknown unset abc b ab abc n/a yes 2'
    )
