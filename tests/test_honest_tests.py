"""The test suite's own rules (issue 13): fixtures live in tests/support, waits go through one poll.

* Nothing under tests/ imports ``benchmarks`` except the tests of benchmark code itself
  (the codec benchmark's baselines, the NAB scorer): a fixture belongs in tests/support or
  agent/simulate, which benchmarks may import, never the other way round.
* No test names a path outside the repository (the data contract is docs/telemetry-contract.md).
* No hand-rolled deadline loop: waiting is tests/support/poll.py's job.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
BENCHMARK_TESTS = {"tests/test_codec_bench.py", "tests/detect/test_nab_scoring.py"}  # their subject is a benchmark


def _sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sorted(TESTS.rglob("*.py"))
            if "node_modules" not in p.parts}


def _imports(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_tests_import_no_benchmark_module() -> None:
    bad = {path: sorted(n for n in _imports(src) if n.split(".")[0] == "benchmarks")
           for path, src in _sources().items() if path not in BENCHMARK_TESTS}
    assert not {p: n for p, n in bad.items() if n}, "move the fixture to tests/support/ or agent/simulate/"


def test_no_test_reads_outside_the_repository() -> None:
    outside = re.compile(r"""["'](?:\.\./|/work/)|shared/design|parents\[[3-9]\]""")
    bad = [f"{path}:{n}" for path, src in _sources().items() if path != "tests/test_honest_tests.py"
           for n, line in enumerate(src.splitlines(), 1) if outside.search(line) and "tests/support/" not in path]
    assert not bad, bad


def test_waits_use_the_one_poll() -> None:
    loop = re.compile(r"while .*deadline|deadline = (time|asyncio|loop)")
    own = {"tests/support/poll.py", "tests/test_honest_tests.py"}
    bad = [f"{path}:{n}" for path, src in _sources().items() if path not in own
           for n, line in enumerate(src.splitlines(), 1) if loop.search(line)]
    assert not bad, f"use tests.support.poll.wait_until / await_until: {bad}"
