"""No metric key is spelled outside ``telemetry/``: code uses the named constants of ``telemetry.keys``.

Why a lint test: a key typed as a string is a metric that silently goes missing when it is
misspelt (``metrics.get`` answers None) and a second copy of a fact the catalog holds. The
check reads the source of ``agent/``, ``collector/`` and ``gpuwatch/`` and fails on any string
literal (f-string parts included) that holds ``DCGM_FI_`` in any case, so SQL column names
(``dcgm_fi_...``) count too. Docstrings are documentation and may name keys. Tests and
benchmarks may spell keys: a test that pins the wire names literally is what catches a
constant whose value changed, and benchmark traces are data.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("agent", "collector", "gpuwatch")
NEEDLE = "dcgm_fi_"


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the Constant nodes that are module, class or function docstrings."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def key_literals(source: str, filename: str) -> list[str]:
    """``file:line: text`` for each string literal outside docstrings that spells a metric key."""
    tree = ast.parse(source, filename)
    docs = _docstrings(tree)
    hits = [
        node for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and NEEDLE in node.value.lower() and id(node) not in docs
    ]
    return [f"{filename}:{node.lineno}: {node.value!r}" for node in sorted(hits, key=lambda n: n.lineno)]


def test_no_metric_key_literal_outside_telemetry() -> None:
    found: list[str] = []
    files = [p for package in CHECKED for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 50
    for path in files:
        found += key_literals(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "use the constants of telemetry.keys:\n" + "\n".join(found)


def test_the_lint_sees_literals_fstrings_and_sql_but_not_docstrings() -> None:
    source = '''"""Module doc naming DCGM_FI_DEV_GPU_UTIL is fine."""
def f(m, x):
    """So is a function's: DCGM_FI_PROF_SM_ACTIVE."""
    a = m.get("DCGM_FI_DEV_GPU_UTIL")
    b = f"x {x} DCGM_FI_DRIVER_VERSION"
    return "SELECT dcgm_fi_dev_power_usage FROM gpu_samples"
'''
    found = key_literals(source, "mod.py")
    assert [line.split(":")[1] for line in found] == ["4", "5", "6"]
