"""gpuaudit.jsontext.indented is json.dumps(indent=2), byte for byte, made
compact by json's C encoder and indented by msgspec."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaudit import jsontext
from gpuaudit.jsontext import indented

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(),  # NaN and the infinities too: json writes them unless allow_nan is False
    st.text(st.characters()),  # lone surrogates, controls, astral characters
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(st.characters(), max_size=5), inner, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=2000, deadline=None)
@given(VALUES, st.booleans())
def test_the_text_is_json_dumps_with_an_indent_of_two(value, ensure_ascii):
    assert indented(value, ensure_ascii=ensure_ascii) == json.dumps(value, indent=2, ensure_ascii=ensure_ascii)


def test_what_json_refuses_it_refuses():
    with pytest.raises(ValueError, match="Out of range float values"):
        indented({"gpus": math.inf}, allow_nan=False)
    with pytest.raises(TypeError):
        indented({"when": object()})


def test_json_indents_only_what_msgspec_cannot(monkeypatch):
    indents = []
    dumps = json.dumps

    def recording(value, **options):
        indents.append(options.get("indent"))
        return dumps(value, **options)

    monkeypatch.setattr(jsontext.json, "dumps", recording)
    report = {"findings": [{"rule": "GPA-AL-001", "message": "caf\u00e9 \U0001f600", "gpus": 2.5e-07}], "empty": {}}
    assert indented(report) == dumps(report, indent=2)
    assert indents == [None]  # compact, then msgspec's indent
    indents.clear()
    assert indented(["\ud800"]) == dumps(["\ud800"], indent=2)  # an escape msgspec refuses
    assert indents == [None, 2]
