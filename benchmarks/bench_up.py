"""First use of ``gpuwatch up``: how long each start, stop and failure takes, as a user sees it.

Wall time of the real command, from ``exec`` to the last banner line (serving) or to its
exit, each repeated and the median kept:

* ``help``: ``gpuwatch --help``, the interpreter and the command line alone (the baseline
  of every ratio);
* ``dead_db``: ``up --db`` a PostgreSQL that refuses (port 1): the one-line error;
* ``busy_metrics_port``: ``up`` on its own database with /metrics' port taken: the error,
  after stopping the PostgreSQL it had started;
* ``cold_start`` (a new data directory: ``initdb``), ``warm_start``, ``stop`` (SIGTERM to
  exit, draining to the database) and ``start_after_kill_9`` (the previous run killed, its
  PostgreSQL in the way).

    python benchmarks/bench_up.py [--repeat 3] [-o docs/bench-runs/up-first-use.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
GPUWATCH = [sys.executable, "-m", "gpuwatch"]


def up(data_dir: Path, *extra: str) -> list[str]:
    return [*GPUWATCH, "up", "--simulate", "2", "--data-dir", str(data_dir), "--log-level", "WARNING", *extra]


def timed_exit(args: list[str], code: int) -> float:
    started = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, env=ENV)
    elapsed = time.perf_counter() - started
    assert proc.returncode == code, (args, proc.returncode, proc.stderr[-2000:])
    return elapsed


def start(data_dir: Path) -> tuple[subprocess.Popen[str], float]:
    """A serving ``up`` and the seconds to its last banner line."""
    started = time.perf_counter()
    proc = subprocess.Popen(up(data_dir, "--metrics-port", "0", "--api-port", "0"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout is not None
    for _ in range(5):
        line = proc.stdout.readline()
        assert line, proc.communicate()[1][-2000:]
    return proc, time.perf_counter() - started


def stop(proc: subprocess.Popen[str]) -> float:
    started = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    return time.perf_counter() - started


def median(runs: int, measure: Callable[[], float]) -> float:
    return round(statistics.median(measure() for _ in range(runs)), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("-o", "--output", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpuwatch-bench-up-"))
    try:
        figures: dict[str, float] = {}
        figures["help"] = median(args.repeat, lambda: timed_exit([*GPUWATCH, "--help"], 0))
        figures["dead_db"] = median(args.repeat, lambda: timed_exit(
            [*GPUWATCH, "up", "--simulate", "1", "--db", "postgresql://x@127.0.0.1:1/x", "--api-port", "-1",
             "--metrics-port", "0"], 1))
        cold: list[float] = []
        warm: list[float] = []
        stops: list[float] = []
        after_kill: list[float] = []
        for i in range(args.repeat):
            data_dir = work / f"d{i}"
            proc, seconds = start(data_dir)
            cold.append(seconds)
            stops.append(stop(proc))
            proc, seconds = start(data_dir)
            warm.append(seconds)
            proc.kill()
            proc.wait()
            proc, seconds = start(data_dir)
            after_kill.append(seconds)
            stops.append(stop(proc))
        figures["cold_start"] = round(statistics.median(cold), 3)
        figures["warm_start"] = round(statistics.median(warm), 3)
        figures["start_after_kill_9"] = round(statistics.median(after_kill), 3)
        figures["stop"] = round(statistics.median(stops), 3)
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = str(busy.getsockname()[1])
            figures["busy_metrics_port"] = median(args.repeat, lambda: timed_exit(
                up(work / "d0", "--metrics-port", port, "--api-port", "-1"), 1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "seconds": figures,
        "ratio_to_help": {k: round(v / figures["help"], 2) for k, v in figures.items() if k != "help"},
        "repeat": args.repeat,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "date": datetime.now(UTC).strftime("%Y-%m-%d"), "euid": os.geteuid()},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
