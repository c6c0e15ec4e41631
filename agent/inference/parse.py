"""A strict parser of the Prometheus text exposition format, for the few families the agent reads.

Why not ``prometheus_client.parser``: it stops at the first bad line (one ``ValueError`` for
the whole page), so a single malformed line from a server would lose every figure of that
scrape; and it walks every line character by character in Python, where a vLLM page is
hundreds of histogram buckets the agent never reads. Here each line stands alone: a bad one
is counted and named by its line number, the rest are kept, and nothing raises. Only lines
whose metric name is wanted are parsed beyond their name (the name itself is checked on
every sample line), which keeps a scrape of a vLLM page to a fraction of a millisecond.

The grammar is the text format's (version 0.0.4): ``name{label="value",...} value
[timestamp]``, label values escaped with ``\\\\``, ``\\"`` and ``\\n`` only; values are Go
floats (``NaN``, ``+Inf``, ``-Inf``, exponents); comments and blank lines are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Final

Labels = tuple[tuple[str, str], ...]

_NAME: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_ESCAPED: Final = r'(?:[^"\\\n]|\\[\\"n])*'
_LABEL: Final = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"(' + _ESCAPED + r')"[ \t]*(,|(?=\}))')
_REST: Final = re.compile(r"[ \t]+([^ \t]+)(?:[ \t]+(-?[0-9]+))?[ \t]*")
_UNESCAPE: Final = re.compile(r"\\([\\\"n])")
_ESCAPES: Final = {"\\": "\\", '"': '"', "n": "\n"}
#: longest line quoted in a report of a bad line
QUOTE_CHARS: Final = 120


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample line: its metric name, labels (in the order written) and value."""

    name: str
    labels: Labels
    value: float


@dataclass(slots=True)
class Parsed:
    """The samples of a page, and its bad lines as ``(line number, why)``."""

    samples: list[Sample] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)


def _value(text: str) -> float | None:
    if "_" in text:  # Python's float() takes "1_0"; Prometheus does not
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _labels(text: str, start: int) -> tuple[Labels, int] | str:
    """The label set starting after ``{`` at ``start``: (labels, index after ``}``), or why not."""
    labels: list[tuple[str, str]] = []
    pos = start
    while True:
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and text[pos] == "}":
            break
        m = _LABEL.match(text, pos)
        if m is None:
            return "malformed label set"
        name, value = m.group(1), m.group(2)
        if any(name == seen for seen, _ in labels):
            return f"label {name} given twice"
        if "\\" in value:
            value = _UNESCAPE.sub(lambda e: _ESCAPES[e.group(1)], value)
        labels.append((name, value))
        pos = m.end()
    return tuple(labels), pos + 1


def parse_line(line: str, wanted: Container[str] | None = None) -> Sample | str | None:
    """One line: its sample, None (comment, blank, or a metric not wanted), or why it is bad."""
    text = line.strip()
    if not text or text[0] == "#":
        return None
    m = _NAME.match(text)
    if m is None:
        return "no metric name"
    name = m.group(0)
    if wanted is not None and name not in wanted:
        return None
    pos = m.end()
    labels: Labels = ()
    if pos < len(text) and text[pos] == "{":
        got = _labels(text, pos + 1)
        if isinstance(got, str):
            return got
        labels, pos = got
    rest = _REST.fullmatch(text, pos)
    if rest is None:
        return "no value after the metric name and labels"
    value = _value(rest.group(1))
    if value is None:
        return f"value {rest.group(1)[:32]!r} is not a number"
    return Sample(name, labels, value)


def parse(text: str, wanted: Container[str] | None = None) -> Parsed:
    """Every sample of ``text`` whose name is in ``wanted`` (all when None); never raises."""
    out = Parsed()
    samples, bad = out.samples, out.bad
    for number, line in enumerate(text.split("\n"), start=1):
        if not line or line[0] == "#":
            continue
        got = parse_line(line, wanted)
        if got is None:
            continue
        if isinstance(got, str):
            bad.append((number, got))
        else:
            samples.append(got)
    return out


def quote(text: str, number: int) -> str:
    """Line ``number`` of ``text`` (1-based), cut to a printable length, for a log line."""
    lines = text.split("\n")
    line = lines[number - 1] if 0 < number <= len(lines) else ""
    return repr(line[:QUOTE_CHARS] + ("..." if len(line) > QUOTE_CHARS else ""))
