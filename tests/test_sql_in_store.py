"""The store is the collector's one way into the database: no SQL statement outside it.

Why a test: import-linter keeps asyncpg inside ``collector/store``, but a module can still
hold SQL text and run it on a connection it was handed (the alerting modules did). Here every
string constant of ``collector/`` outside ``collector/store`` that reads as a statement fails.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

COLLECTOR = Path(__file__).resolve().parents[1] / "collector"
_STATEMENT = re.compile(r"^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|CREATE\s|ALTER\s|DROP\s)")


def test_no_sql_statement_outside_the_store() -> None:
    found = []
    for path in sorted(COLLECTOR.rglob("*.py")):
        if "store" in path.relative_to(COLLECTOR).parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _STATEMENT.match(node.value):
                found.append(f"{path.relative_to(COLLECTOR.parent)}:{node.lineno}: {node.value[:60]!r}")
    assert not found, "SQL outside collector/store (add a function there):\n" + "\n".join(found)
