"""The deploy tests' shared fixture: one live stack (:mod:`tests.deploy.live`) for the package.

Package scope: the dashboards' name checks and the live queries read the same running
processes, started once, and stopped when the last test of ``tests/deploy`` is done.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.databases import fresh_database
from tests.deploy.live import Stack, start_stack
from tests.fixtures_pg import PgServer


@pytest.fixture(scope="package")
def stack(pg_server: PgServer, tansu_bin: Path, prometheus_bin: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("live")
    with fresh_database(pg_server, "live") as dsn:
        yield from start_stack(dsn, tansu_bin, prometheus_bin, workdir)
