"""What a user reads when a command cannot go on: one or two lines, never a traceback.

Subprocess runs of the real ``gpuwatch`` command: a dead database (port 1 refuses at
once), an invalid DSN, a role or database that does not exist, a wrong flag, a closed
pipe. Each must exit non-zero with a line that names what was wrong and what to do, and
no password given in a DSN may appear in it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gpuwatch.errors import redact
from tests.support.poll import wait_until

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("GPUWATCH_DB", None)
PASSWORD = "s3cret-Pw"
DEAD = f"postgresql://nobody:{PASSWORD}@127.0.0.1:1/x"


def gpuwatch(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuwatch", *args], capture_output=True, text=True,
                          timeout=timeout, env=env or ENV)


def assert_one_clear_line(proc: subprocess.CompletedProcess[str], *expected: str, code: int = 1) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == code, (proc.returncode, err)
    assert "Traceback" not in err and PASSWORD not in err + proc.stdout, err
    assert len(err.splitlines()) <= 2, err
    for text in expected:
        assert text in err, err
    return err


@pytest.mark.parametrize("command", [
    ["up", "--simulate", "1", "--db", DEAD, "--metrics-port", "0", "--api-port", "-1"],
    ["collector", "--db", DEAD, "--api-port", "-1", "--db-wait", "0"],
    ["token", "list", "--db", DEAD],
    ["token", "create", "--role", "viewer", "--db", DEAD],
], ids=["up", "collector", "token-list", "token-create"])
def test_a_dead_database_is_one_line_with_the_password_redacted(command: list[str]) -> None:
    err = assert_one_clear_line(gpuwatch(*command), "cannot connect to PostgreSQL at postgresql://nobody:***@127.0.0.1:1/x",
                                "connection refused", "--db")
    assert err.startswith(f"gpuwatch {command[0]}")


def test_the_collector_waits_a_while_for_its_database_then_says_why_it_gave_up() -> None:
    """A collector may start before its database (a rolling deploy): it waits --db-wait seconds,
    saying so once, then ends with the same one line as without the wait."""
    proc = gpuwatch("collector", "--db", DEAD, "--api-port", "-1", "--db-wait", "1.5")
    err = assert_one_clear_line(proc, "cannot connect to PostgreSQL at postgresql://nobody:***@127.0.0.1:1/x")
    first, last = err.splitlines()
    assert "waiting up to" in first and "--db-wait" in first
    assert last.startswith("gpuwatch collector: cannot connect")


def test_the_dsn_from_a_file_or_the_environment_is_redacted_too(tmp_path: Path) -> None:
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text(DEAD + "\n")
    assert_one_clear_line(gpuwatch("token", "list", "--db-file", str(dsn_file)), "nobody:***@127.0.0.1:1")
    assert_one_clear_line(gpuwatch("token", "list", env={**ENV, "GPUWATCH_DB": DEAD}), "nobody:***@127.0.0.1:1")


@pytest.mark.parametrize("dsn", ["notadsn", f"postgresql://u:{PASSWORD}@[::1/db"])
def test_an_invalid_dsn_says_what_a_dsn_looks_like(dsn: str) -> None:
    assert_one_clear_line(gpuwatch("token", "list", "--db", dsn), "invalid DSN", "postgresql://USER")


def test_a_role_or_database_that_does_not_exist(pg_dsn: str) -> None:
    bad_role = pg_dsn.replace("postgres@", f"nobody:{PASSWORD}@", 1)
    assert_one_clear_line(gpuwatch("token", "list", "--db", bad_role), 'role "nobody" does not exist',
                          "check the user name and password")
    no_db = pg_dsn.rsplit("/", 1)[0] + "/no_such_db"
    assert_one_clear_line(gpuwatch("collector", "--db", no_db, "--api-port", "-1"),
                          'database "no_such_db" does not exist')


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    assert_one_clear_line(gpuwatch("token", "list", "--db-file", str(tmp_path / "nope")), str(tmp_path / "nope"),
                          "No such file")


def test_up_answers_a_wrong_flag_with_its_own_usage() -> None:
    proc = gpuwatch("up", "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: gpuwatch up ") and "unrecognized arguments: --bogus" in proc.stderr
    proc = gpuwatch("token", "create", "--role", "viewer", "--bogus")
    assert proc.returncode == 2 and proc.stderr.startswith("usage: gpuwatch token create ")


def test_up_has_the_flags_its_setting_errors_name() -> None:
    err = assert_one_clear_line(gpuwatch("up", "--simulate", "1", "--cpu-budget", "5", "--interval-floor", "0.01"),
                                "flag --cpu-budget", "flag --interval-floor", code=2)
    assert "invalid setting" in err
    help_text = gpuwatch("up", "--help").stdout
    for flag in ("--cpu-budget", "--interval-floor", "--interval-ceiling", "--busy-interval", "--price-per-gpu-hour"):
        assert flag in help_text
    assert "also as root" in help_text
    for flags, text in ((["--price-per-gpu-hour", "-1"], "a price is a number >= 0, not -1"),
                        (["--api-port", "70000"], "70000 is not a port: give 1-65535, 0 (any free port) or -1 (off)")):
        proc = gpuwatch("up", *flags)  # argparse's own errors: up's usage, then the line
        assert proc.returncode == 2 and proc.stderr.startswith("usage: gpuwatch up ")
        assert proc.stderr.strip().splitlines()[-1] == f"gpuwatch up: error: argument {flags[0]}: {text}"


def test_a_closed_pipe_ends_the_command_quietly() -> None:
    """``gpuwatch catalog | head``: the reader is gone before the command writes."""
    proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "catalog"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(30) == 141, err
    assert err == ""


_PASSWORDS = st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="@/*'\\"),
                     min_size=1, max_size=40)


@given(_PASSWORDS)
def test_redact_hides_any_password_of_a_dsn(password: str) -> None:
    quoted = quote(password, safe="")
    for dsn, secret in ((f"postgresql://user:{quoted}@db.example:5432/gpuwatch", quoted),
                        (f"postgresql://user@db.example/gpuwatch?password={quoted}&sslmode=require", quoted),
                        (f"host=db.example user=user password={password} dbname=gpuwatch", password)):
        text = f"cannot connect to {dsn}: refused"
        assume(text.count(secret) == 1)  # the secret occurs only as the password
        message = redact(text, dsn)
        assert secret not in message, (dsn, message)
        assert "***" in message and "db.example" in message, message


def test_the_collector_names_its_busy_api_port(kafka_broker: Any, pg_db: str) -> None:
    broker = kafka_broker()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = gpuwatch("collector", "--db", pg_db, "--kafka-bootstrap", broker.bootstrap, "--api-port", str(port),
                        "--log-level", "WARNING")
    assert_one_clear_line(proc, f"cannot listen (--api-port {port}): Address already in use")


@pytest.mark.parametrize(("command", "var", "value", "expected"), [
    (["collector", "--db", DEAD], "GPUWATCH_API_CORS_ORIGINS", "https://a.example",
     "invalid setting cors_origins (env GPUWATCH_API_CORS_ORIGINS): cannot parse its value"),
    (["collector", "--db", DEAD], "GPUWATCH_API_PORT", "abc",
     "invalid setting port (env GPUWATCH_API_PORT, flag --api-port)"),
    (["agent", "--simulate", "1", "--metrics-port", "0"], "GPUWATCH_FRAME_WINDOW", "-5",
     "invalid setting frame_window (env GPUWATCH_FRAME_WINDOW)"),
], ids=["list-not-json", "api-port-flag-spelled", "env-only-setting"])
def test_a_bad_variable_is_one_line_naming_it_and_only_a_flag_that_exists(
        command: list[str], var: str, value: str, expected: str) -> None:
    err = assert_one_clear_line(gpuwatch(*command, env={**ENV, var: value}), expected, code=2)
    if "flag" not in expected:
        assert "flag" not in err, err  # the setting has no flag: the message must not invent one


def test_a_collector_waiting_for_kafka_answers_its_probes_and_stops_on_sigterm(pg_db: str) -> None:
    """Kafka may come up after the collector (a rolling deploy): the API listens first, so the
    liveness probe sees a live process, readiness says what it waits for, and SIGTERM ends it."""
    import json
    import signal
    import urllib.error
    import urllib.request

    from tests.ports import free_port

    dead_kafka, port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "collector", "--db", pg_db, "--kafka-bootstrap",
                             f"127.0.0.1:{dead_kafka}", "--api-port", str(port), "--log-level", "ERROR"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        def get(path: str) -> tuple[int, dict[str, Any]]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        def healthz() -> tuple[int, dict[str, Any]] | None:
            try:
                return get("/healthz")
            except OSError:
                assert proc.poll() is None, proc.communicate()
                return None

        health = wait_until(healthz, timeout=30, interval=0.2, what="the collector's /healthz to answer")
        assert health == (200, {"status": "ok"})
        status, body = get("/readyz")
        assert status == 503 and "has not joined group" in body["reason"], body
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_the_agents_commands_start_without_the_collectors_libraries() -> None:
    """The agent's image (and the GPU machine) has no asyncpg or FastAPI: `gpuwatch export`
    and `gpuwatch agent` must import without them (found when `export` failed on the H200)."""
    import subprocess
    import sys

    code = ("import sys\nfor m in ('asyncpg', 'fastapi', 'uvicorn'):\n    sys.modules[m] = None\n"
            "from gpuwatch.cli import main\n"
            "for cmd in (['export', '--help'], ['agent', '--help']):\n"
            "    try:\n        main(cmd)\n    except SystemExit as e:\n        assert e.code in (0, None), e.code\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_connection_left_mid_operation_while_opening_the_store_is_waited_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen in CI with PostgreSQL restarted under a starting collector: asyncpg raised
    "cannot switch to state 15; another operation (2) is in progress" from the migrations, and
    the collector died with a traceback. It is a lost connection like any other: the store is
    opened again while the database wait lasts."""
    import asyncio
    import types

    import asyncpg

    from collector import store as store_pkg
    from gpuwatch.cmd_collector import open_store

    calls: list[int] = []

    async def opening(dsn: str, profile: str = "auto", chunk_interval: float | None = None) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise asyncpg.exceptions.InternalClientError("cannot switch to state 15; another operation (2) is in "
                                                         "progress")
        return "store"

    monkeypatch.setattr(store_pkg.Store, "open", staticmethod(opening))
    settings = types.SimpleNamespace(db_wait=30.0, dsn=lambda: "postgresql://x/y", db_profile="auto",
                                     chunk_interval=None)
    assert asyncio.run(open_store(settings, asyncio.Event())) == "store"
    assert len(calls) == 2
