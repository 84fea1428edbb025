"""Rule messages within bounds (issue 19, item 10): a user rule's rich
message renders in a sandbox that bounds size and time before anything big
is built. Past a bound the finding is kept with a short placeholder, the
rule is named (`rule SITE-001: message failed: MessageLimitError: ...`) and
the run exits 2, as for any broken message template.

Through the real `gpuaudit check` under a 1 GiB address-space limit: each of
these inputs used to build a gigabyte string (or run for more than 60 s).

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

from gpuaudit.engine import messages
from gpuaudit.engine.messages import MessageLimitError, render
from tests.robustness.hostile import PINNED
from tests.robustness.test_rules_config import rule

GPUAUDIT = str(Path(sys.executable).with_name("gpuaudit"))

# template -> what the warning says after "MessageLimitError: " (or the error's name)
HOSTILE = {
    "{{ container.center(10**9) }}": "a width of 1000000000 is more than 10,000",
    '{{ "%0999999999d"|format(1) }}': "a width of 999999999 is more than 10,000",
    '{{ "{:>999999999}".format(1) }}': "a width of 999999999 is more than 10,000",
    "{{ lipsum(n=10**7) }}": "UndefinedError: 'lipsum' is undefined",
    "{{ '%0999999999d' % 1 }}": "a width of 999999999 is more than 10,000",
    "{{ '%*d' % (10**9, 1) }}": "a width of 1000000000 is more than 10,000",
    "{{ '{:{w}}'.format(1, w=10**9) }}": "a width of 1000000000 is more than 10,000",
    "{{ container|center(10**9) }}": "a width of 1000000000 is more than 10,000",
    "{{ container.zfill(10**9) }}": "a width of 1000000000 is more than 10,000",
    "{{ container|indent(10**9, true) }}": "a string longer than 100,000 characters",
    "{{ (container * 2000).replace('c', 'c' * 100) }}": "a string longer than 100,000 characters",
    "{{ range(100000)|join('x' * 5000) }}": "a string longer than 100,000 characters",
    # doubling a string, or a list's shared halves, 40 times over (2^40)
    "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% else %}{{ s }}{% endif %}{% endmacro %}{{ d('x', 40) }}": (
        "a string longer than 100,000 characters"
    ),
    "{% macro d(x, n) %}{% if n %}{{ d([x, x], n - 1) }}{% else %}{{ x }}{% endif %}{% endmacro %}{{ d([1], 40) }}": (
        "a value of more than 100,000 elements"
    ),
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}": (
        "more than 100,000 loop iterations"
    ),
    "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}": (
        "rendering took longer than 2 s"
    ),
    "{{ [1]|batch(10**9, 0)|list }}": "1000000000 is more than 100,000 elements",
    "{{ [1]|slice(10**9)|list }}": "1000000000 is more than 100,000 elements",
    "{{ {'a': 1}|tojson(10**9) }}": "an indent of more than 16",
    "{{ (1).to_bytes(10**9, 'big') }}": "SecurityError: access to attribute 'to_bytes' of 'int' object is unsafe.",
    "{{ container.translate({99: 'y' * 9000}) }}": "SecurityError: access to attribute 'translate'",
    "{% for i in range(20) %}{{ 'x' * 1000 }}{% endfor %}": "message longer than 10,000 characters",
}


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1024**3, 1024**3))


@pytest.mark.parametrize("template", list(HOSTILE), ids=range(len(HOSTILE)))
def test_a_message_past_the_bounds_is_a_placeholder_and_a_named_error(tmp_path, template):
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
    elapsed = time.monotonic() - started

    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    [finding] = [f for f in report["findings"] if f["rule"] == "SITE-001"]  # kept
    assert finding["message"] == "Site rule 1 (message unavailable)"
    assert finding["resource"]["name"] == "pinned"
    [error] = [e for e in report["errors"] if "SITE-001" in e["message"]]
    assert error["file"].endswith("site/big.yaml") and error["level"] == "error"
    assert error["message"].startswith("rule SITE-001: message failed: "), error
    assert HOSTILE[template] in error["message"], error
    assert "GPA-PL-001" in {f["rule"] for f in report["findings"]}  # the other rules still judged
    assert elapsed < 30, elapsed


def test_the_bounds_are_where_they_say():
    context = {"x": "abc", "n": 3}
    width = messages.MAX_MESSAGE_CHARS
    assert len(render(f"{{{{ x.center({width}) }}}}", context)) == width
    with pytest.raises(MessageLimitError, match="a width of 10001"):
        render(f"{{{{ x.center({width + 1}) }}}}", context)
    assert len(render(f"{{{{ '%0{width}d' % n }}}}", context)) == width
    with pytest.raises(MessageLimitError):
        render(f"{{{{ '%0{width + 1}d' % n }}}}", context)
    assert len(render("{% for i in range(9999) %}x{% endfor %}", context)) == 9999
    with pytest.raises(MessageLimitError, match="message longer than 10,000"):
        render("{% for i in range(10001) %}x{% endfor %}", context)


def test_ordinary_rich_messages_still_render():
    context = {"x": "abc", "n": 3, "pins": [{"node": "a"}, {"node": "b"}], "cpu": 0.26}
    template = (
        "{{ x|upper }} {{ n * 2 }} {{ '%05.1f'|format(2.5) }} {{ '{:>6}'.format(x) }} {{ x.center(7) }}"
        " {{ pins|map(attribute='node')|join(', ') }}"
        " {% for p in pins %}{{ loop.index }}={{ p.node }}{% if not loop.last %};{% endif %}{% endfor %}"
        " {{ x ~ n }} {{ cpu|round(1) }} {{ 'a b c'.replace(' ', '-') }} {{ [1, 2] + [3] }} {{ x + 'd' }}"
        " {{ {'k': 1}|tojson }} {{ 'x'|indent(2, true) }}"
    )
    assert render(template, context) == (
        'ABC 6 002.5    abc   abc   a, b 1=a;2=b abc3 0.3 a-b-c [1, 2, 3] abcd {"k": 1}   x'
    )
