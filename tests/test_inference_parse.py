"""The exposition parser: real pages parse whole, bad lines are counted by number, nothing raises."""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.inference import triton, vllm
from agent.inference.parse import Sample, parse, parse_line, quote
from agent.inference.scraper import WANTED

DATA = Path(__file__).resolve().parent / "data" / "inference"


def page(name: str) -> str:
    return (DATA / name).read_text()


def test_the_real_pages_parse_without_a_bad_line() -> None:
    for name in ("triton.txt", "vllm_v1.txt", "vllm_v0.txt"):
        whole = parse(page(name))
        assert whole.bad == [], name
        assert len(whole.samples) > 30, name
        wanted = parse(page(name), WANTED)
        assert wanted.bad == []
        assert {s.name for s in wanted.samples} <= WANTED
    names = {s.name for s in parse(page("triton.txt"), WANTED).samples}
    assert names == triton.NAMES - {triton.CACHE_HITS}  # no response cache on this server
    names = {s.name for s in parse(page("vllm_v1.txt"), WANTED).samples}
    assert names == vllm.NAMES


def test_labels_values_and_escapes() -> None:
    got = parse_line(r'vllm:x{model_name="a \"q\" b\\c\nd",engine="0",} 1.5e3 1700000000000')
    assert got == Sample("vllm:x", (("model_name", 'a "q" b\\c\nd'), ("engine", "0")), 1500.0)
    assert parse_line("up 1") == Sample("up", (), 1.0)
    assert parse_line("x{} +Inf") == Sample("x", (), math.inf)
    nan = parse_line("x NaN")
    assert isinstance(nan, Sample) and math.isnan(nan.value)
    assert parse_line("# TYPE x counter") is None
    assert parse_line("   ") is None
    assert parse_line("other 1", wanted={"x"}) is None  # not wanted: only its name is read


def test_each_bad_line_is_named_and_the_rest_kept() -> None:
    text = "\n".join([
        "# HELP ok a gauge",
        "ok 1",
        '9bad{a="b"} 1',            # 3: no metric name
        'x{a="b" 1',                 # 4: unterminated labels
        'x{a="b",a="c"} 1',          # 5: a label twice
        "x 1_000",                   # 6: Prometheus has no digit separators
        "x",                         # 7: no value
        'x{a=b} 1',                  # 8: unquoted label value
        'x{a="\\q"} 1',              # 9: an escape the format does not have
        "ok 2",
    ])
    parsed = parse(text)
    assert [s.value for s in parsed.samples] == [1.0, 2.0]
    assert [n for n, _ in parsed.bad] == [3, 4, 5, 6, 7, 8, 9]
    assert "twice" in dict(parsed.bad)[5] and "not a number" in dict(parsed.bad)[6]
    assert quote(text, 4) == repr('x{a="b" 1')


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_never_raises(text: str) -> None:
    parsed = parse(text)
    assert len(parsed.samples) + len(parsed.bad) <= text.count("\n") + 1


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_decoded_as_the_scraper_does_never_raise(raw: bytes) -> None:
    parse(raw.decode("utf-8", "replace"), WANTED)


_NAMES = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)
_LABEL_NAMES = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True)
_VALUES = st.floats(allow_nan=False)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_NAMES, st.dictionaries(_LABEL_NAMES, st.text(max_size=12), max_size=4), _VALUES),
                max_size=20))
def test_what_a_server_writes_reads_back(samples: list[tuple[str, dict[str, str], float]]) -> None:
    lines = []
    for name, labels, value in samples:
        body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{body}}} {value!r}" if labels else f"{name} {value!r}")
    parsed = parse("\n".join(lines) + "\n")
    assert parsed.bad == []
    assert parsed.samples == [Sample(n, tuple(labels.items()), v) for n, labels, v in samples]
