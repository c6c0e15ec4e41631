"""Every query the generated dashboards hold, and what Grafana would send for each.

No Grafana server can run here, so the tests do what Grafana does with a query before it
reaches the data source: substitute the template variables and, for SQL, expand the
PostgreSQL data source's macros (``$__timeFilter``, ``$__timeGroupAlias``, ``$__timeFrom``,
``$__timeTo``, ``$__interval``, ``$__interval_ms``, as Grafana's documentation defines them).
Then they run the query against a real Prometheus or PostgreSQL.

Also: the metric names and ``by (...)`` labels of a PromQL expression, found by a small
tokenizer (strings, label matchers, durations and keywords skipped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"


@dataclass(frozen=True)
class Query:
    dashboard: str
    where: str  # panel title / variable / annotation name, and refId
    kind: str  # "promql" or "sql"
    text: str
    fmt: str = "time_series"

    @property
    def id(self) -> str:
        return f"{self.dashboard}:{self.where}"


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def dashboards() -> list[Path]:
    return sorted(DASHBOARDS.glob("*.json"))


def _kind(datasource: Mapping[str, Any] | None) -> str:
    kind = (datasource or {}).get("type", "")
    return "sql" if "postgres" in kind else "promql"


def queries(path: Path) -> Iterator[Query]:
    """Panel targets, variable queries and annotation queries of one dashboard."""
    d = load(path)
    uid = d["uid"]
    for panel in d.get("panels", []):
        for target in panel.get("targets", []) or []:
            kind = _kind(target.get("datasource") or panel.get("datasource"))
            text = target.get("rawSql") if kind == "sql" else target.get("expr")
            assert text, f"{uid}/{panel.get('title')}: a target without a query"
            yield Query(uid, f"{panel['title']}/{target.get('refId')}", kind, text, target.get("format", "time_series"))
    for var in d.get("templating", {}).get("list", []):
        if var["type"] == "query":
            query = var["query"] if isinstance(var["query"], str) else var["query"]["query"]
            yield Query(uid, f"variable {var['name']}", _kind(var.get("datasource")), query, "variable")
    for ann in d.get("annotations", {}).get("list", []):
        target = ann.get("target") or {}
        if target.get("rawSql"):
            yield Query(uid, f"annotation {ann['name']}", "sql", target["rawSql"], "annotation")
        elif ann.get("expr"):
            yield Query(uid, f"annotation {ann['name']}", "promql", ann["expr"], "annotation")


def all_queries() -> list[Query]:
    return [q for p in dashboards() for q in queries(p)]


def variables(uid: str) -> list[dict[str, Any]]:
    for path in dashboards():
        d = load(path)
        if d["uid"] == uid:
            found: list[dict[str, Any]] = d.get("templating", {}).get("list", [])
            return found
    raise KeyError(uid)


# ---- Grafana's substitutions ---------------------------------------------------------------


def substitute(text: str, values: Mapping[str, str | Sequence[str]], *, sql: bool) -> str:
    """Template variables as Grafana formats them: a multi-value SQL variable becomes 'a','b'."""

    def one(m: re.Match[str]) -> str:
        name = m[1] or m[2]
        if name not in values:
            return m[0]
        value = values[name]
        if isinstance(value, str):
            return value
        if sql:
            return ",".join("'" + v.replace("'", "''") + "'" for v in value)
        return "(" + "|".join(re.escape(v) for v in value) + ")"

    # longest names first: $__interval_ms before $__interval
    names = sorted(values, key=len, reverse=True)
    pattern = r"\$\{(" + "|".join(map(re.escape, names)) + r")\}|\$(" + "|".join(map(re.escape, names)) + r")\b"
    return re.sub(pattern, one, text) if names else text


_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(duration: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d)", duration.strip().strip("'\""))
    assert m, f"not a duration: {duration}"
    return int(m[1]) * _UNITS[m[2]]


def expand_sql_macros(sql: str, start: datetime, end: datetime) -> str:
    """Grafana PostgreSQL macros (docs: 'Macros' of the PostgreSQL data source)."""
    frm, to = f"'{start.isoformat()}'", f"'{end.isoformat()}'"
    sql = re.sub(r"\$__timeFilter\(([^)]+)\)", lambda m: f"{m[1].strip()} BETWEEN {frm} AND {to}", sql)
    sql = sql.replace("$__timeFrom()", frm).replace("$__timeTo()", to)

    def group(m: re.Match[str]) -> str:
        s = int(seconds(m[2]))
        return f'floor(extract(epoch from {m[1].strip()})/{s})*{s} AS "time"'

    sql = re.sub(r"\$__timeGroupAlias\(([^,]+),\s*([^)]+)\)", group, sql)
    assert "$__" not in sql, f"an unexpanded macro in {sql}"
    return sql


# ---- PromQL tokens --------------------------------------------------------------------------

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan",
             # aggregation operators, which may be followed by a by/without clause instead of "("
             "sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile",
             "count_values"}
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]|[A-Za-z_:][A-Za-z0-9_:]*|\S')


def metric_names(expr: str) -> set[str]:
    """Metric names of a PromQL expression: identifiers that are not functions, keywords or labels."""
    tokens = _TOKEN.findall(expr)
    names: set[str] = set()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok.lower() in {"by", "without", "on", "ignoring", "group_left", "group_right"} and nxt == "(":
            depth = 0
            while i < len(tokens):  # skip the label list
                depth += tokens[i] == "("
                depth -= tokens[i] == ")"
                i += 1
                if depth == 0 and tokens[i - 1] == ")":
                    break
            continue
        if re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", tok) and tok.lower() not in _KEYWORDS and nxt != "(":
            names.add(tok)
        i += 1
    return names


def grouping_labels(expr: str) -> set[str]:
    """Labels named in ``by (...)``, ``on (...)`` and ``group_left (...)`` clauses."""
    found: set[str] = set()
    for m in re.finditer(r"\b(?:by|on|group_left|group_right)\s*\(([^)]*)\)", expr):
        found.update(x.strip() for x in m[1].split(",") if x.strip())
    return found


def label_matchers(expr: str) -> set[str]:
    """Label names used in ``{...}`` selectors."""
    found: set[str] = set()
    for block in re.findall(r"\{([^}]*)\}", expr):
        found.update(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", block))
    return found
