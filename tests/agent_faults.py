"""Two fault cases of the agent as real processes, shared by the tests and ``benchmarks/bench_agent_faults.py``.

Each case runs ``gpuwatch agent`` against a real Kafka-protocol broker (tansu), breaks what
the fault names, repairs it, stops the agent, then reads the topic back and decodes every
frame, so that what the agent produced is counted against what reached Kafka:

* :func:`torn_spool_after_full_disk` (issue 10 item 6): the broker is down and the spool's
  disk (a small tmpfs) fills up while the agent spools; space comes back, then the broker.
  Before, a write torn by the full disk made the replay skip everything after it while
  the dropped counter stayed 0.
* :func:`cpu_budget_during_outage` (issue 10 item 9): the broker is down for a while.
  Before, reconnects and spool work counted against the sampler's budget and stretched an
  idle GPU's interval to 53 s against a 10 s ceiling. Here the ceiling is an argument.

Both return the fault table's figures: produced, stored (distinct and total), duplicates,
lost, and counted as lost (what ``/metrics`` admits to), with the case's own readings.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from telemetry.codec import FrameDecoder, FrameError
from tests.fixtures_kafka import KafkaBroker, consume_all

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "gpu.telemetry"
_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$")


class MountUnavailable(RuntimeError):
    """A tmpfs cannot be mounted here (not root, or no CAP_SYS_ADMIN)."""


@contextlib.contextmanager
def small_tmpfs(path: Path, size_kib: int) -> Iterator[Path]:
    """A tmpfs of ``size_kib`` at ``path``: a disk that really fills up."""
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise MountUnavailable(proc.stderr.strip() or f"mount exited {proc.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path, leave_bytes: int) -> Path:
    """Fill ``disk`` up to ``leave_bytes`` of free space with a filler file (returned, to delete later)."""
    filler = disk / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))
    return filler


def parse_metrics(text: str) -> dict[str, float]:
    """``name{labels}`` -> value of a Prometheus text exposition."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


@dataclass
class AgentProcess:
    """A running ``gpuwatch agent``; :meth:`stop` returns its shutdown summary as numbers."""

    proc: subprocess.Popen[str]
    metrics_url: str
    log: Path

    @classmethod
    def start(cls, args: list[str], log: Path, env: dict[str, str] | None = None) -> AgentProcess:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuwatch", "agent", "--metrics-host", "127.0.0.1", "--metrics-port", "0", *args],
            stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        if "metrics on " not in banner:
            proc.kill()
            raise RuntimeError(f"the agent did not start: {banner!r}\n{log.read_text()[-3000:]}")
        url = banner.split("metrics on ", 1)[1].split(";", 1)[0].strip()
        return cls(proc, url, log)

    def metrics(self) -> dict[str, float]:
        import urllib.request

        with urllib.request.urlopen(self.metrics_url, timeout=10) as resp:
            return parse_metrics(resp.read().decode())

    def wait_for(self, probe: Callable[[dict[str, float]], bool], timeout: float, what: str) -> dict[str, float]:
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            if probe(m):
                return m
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} within {timeout} s; log:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self, timeout: float = 60.0) -> dict[str, int]:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            raise RuntimeError(f"the agent exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        line = next((x for x in out.splitlines() if "stopped;" in x), "")
        numbers = [int(n) for n in re.findall(r"\b(\d+)\b", line.split("stopped;", 1)[1])] if line else []
        keys = ["samples", "framed", "frames", "sent", "replayed", "left_in_spool", "dropped", "memory_dropped",
                "corrupt_lost", "rejected"]
        if len(numbers) != len(keys):
            raise RuntimeError(f"no shutdown summary in {out!r}")
        return dict(zip(keys, numbers, strict=True))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def stored(bootstrap: str, expected_messages: int) -> dict[str, int]:
    """Read the topic back and decode every frame: samples stored (distinct and total), frames undecodable."""
    got = consume_all(bootstrap, TOPIC, expected_messages, timeout=60)
    decoders: dict[bytes, FrameDecoder] = defaultdict(FrameDecoder)
    seen: set[tuple[str, float]] = set()
    total = undecodable = events = 0
    for c in sorted(got, key=lambda c: (c.partition, c.offset)):
        if dict(c.headers).get("type") != b"frame":
            events += 1
            continue
        try:
            records = decoders[c.key or b""].decode(c.value or b"")
        except FrameError:
            undecodable += 1
            continue
        total += len(records)
        seen.update((r.gpu, r.ts) for r in records)
    return {"messages": len(got), "events": events, "stored_total": total, "stored_distinct": len(seen),
            "undecodable_frames": undecodable}


def _figures(summary: dict[str, int], back: dict[str, int]) -> dict[str, Any]:
    counted = summary["dropped"] + summary["memory_dropped"] + summary["corrupt_lost"] + summary["rejected"]
    return {
        "produced": summary["samples"], "stored_distinct": back["stored_distinct"],
        "stored_total": back["stored_total"], "duplicates": back["stored_total"] - back["stored_distinct"],
        "lost": summary["samples"] - back["stored_distinct"], "counted_as_lost": counted,
        "undecodable_frames": back["undecodable_frames"], "sent_messages": summary["sent"],
        "replayed_messages": summary["replayed"],
    }


def torn_spool_after_full_disk(broker: KafkaBroker, workdir: Path, *, gpus: int = 8, full_s: float = 4.0,
                               disk_kib: int = 1024) -> dict[str, Any]:
    """Broker down; the spool's disk fills, stays full ``full_s`` s, gets space back; then the broker returns.

    ``broker`` must be durable (its topic survives the stop) and running; raises
    :class:`MountUnavailable` where no tmpfs can be mounted.
    """
    broker.stop()
    with small_tmpfs(workdir / "disk", disk_kib) as disk:
        agent = AgentProcess.start(
            ["--simulate", str(gpus), "--kafka-bootstrap", broker.bootstrap, "--spool-dir", str(disk / "spool"),
             "--spool-max-mb", "1", "--spool-segment-mb", "0.0625", "--kafka-reconnect-max-s", "2",
             "--log-level", "WARNING"], workdir / "agent.log",
            {"GPUWATCH_FRAME_MAX_DELAY": "0.25"})  # small frames, often: the last free page fills in a second
        try:
            agent.wait_for(lambda m: m.get("gpuwatch_agent_kafka_spooled_total", 0) > 0, 30, "spooling")
            filler = fill(disk, 0)
            full = agent.wait_for(lambda m: m.get("gpuwatch_agent_spool_write_errors_total", 0) > 0, 60,
                                  "a spool write to fail on the full disk")
            time.sleep(full_s)
            during = agent.metrics()
            filler.unlink()
            agent.wait_for(lambda m: m.get("gpuwatch_agent_memory_messages", 1) == 0, 60,
                           "memory to move to the spool once space is back")
            t_back = time.monotonic()
            broker.start()
            agent.wait_for(lambda m: m.get("gpuwatch_agent_spool_messages", 1) == 0
                           and m.get("gpuwatch_agent_kafka_replayed_total", 0) > 0, 120, "the replay")
            recovery_s = time.monotonic() - t_back
            final = agent.metrics()
            summary = agent.stop()
        finally:
            agent.kill()
    back = stored(broker.bootstrap, summary["sent"])
    return {
        "case": "torn spool entry after a full disk", **_figures(summary, back),
        "spool_write_errors": int(final.get("gpuwatch_agent_spool_write_errors_total", 0)),
        "memory_backlog_peak": int(max(full.get("gpuwatch_agent_memory_messages", 0),
                                       during.get("gpuwatch_agent_memory_messages", 0))),
        "spool_corrupt_regions": int(final.get("gpuwatch_agent_spool_corrupt_total", 0)),
        "recovery_s": round(recovery_s, 1),
    }


def cpu_budget_during_outage(broker: KafkaBroker, workdir: Path, *, gpus: int = 8, outage_s: float = 12.0,
                             ceiling_s: float = 2.0) -> dict[str, Any]:
    """Broker down for ``outage_s`` s from the agent's start; intervals, the budget and CPU by account."""
    broker.stop()
    env = {"GPUWATCH_INTERVAL_CEILING": str(ceiling_s)}
    agent = AgentProcess.start(
        ["--simulate", str(gpus), "--kafka-bootstrap", broker.bootstrap, "--spool-dir", str(workdir / "spool"),
         "--kafka-reconnect-max-s", "2", "--log-level", "WARNING"], workdir / "agent.log", env)
    try:
        first = agent.wait_for(lambda m: m.get("gpuwatch_agent_kafka_spooled_total", 0) > 0, 30, "spooling")
        t0 = time.monotonic()
        worst_interval = worst_stretch = 0.0
        while time.monotonic() - t0 < outage_s:
            m = agent.metrics()
            intervals = [v for k, v in m.items() if k.startswith("gpuwatch_agent_sample_interval_seconds{")]
            worst_interval = max(worst_interval, *intervals)
            worst_stretch = max(worst_stretch, m["gpuwatch_agent_interval_stretch"])
            time.sleep(0.5)
        end = agent.metrics()
        wall = time.monotonic() - t0
        t_back = time.monotonic()
        broker.start()
        agent.wait_for(lambda m: m.get("gpuwatch_agent_spool_messages", 1) == 0
                       and m.get("gpuwatch_agent_kafka_replayed_total", 0) > 0, 120, "the replay")
        recovery_s = time.monotonic() - t_back
        summary = agent.stop()
    finally:
        agent.kill()
    back = stored(broker.bootstrap, summary["sent"])

    def pct(name: str) -> float:
        return round(100 * (end[name] - first[name]) / wall, 3)

    return {
        "case": "agent CPU budget during a broker outage", **_figures(summary, back),
        "outage_s": round(wall, 1), "ceiling_s": ceiling_s, "max_interval_s": worst_interval,
        "max_stretch": worst_stretch,
        "sampling_cpu_pct": pct('gpuwatch_agent_cpu_seconds_total{account="sampling"}'),
        "transport_cpu_pct": pct('gpuwatch_agent_cpu_seconds_total{account="transport"}'),
        "process_cpu_pct": pct("process_cpu_seconds_total"),
        "sampling_budget_pct": 100 * end["gpuwatch_agent_cpu_budget_ratio"],
        "transport_budget_pct": 100 * end["gpuwatch_agent_transport_cpu_budget_ratio"],
        "recovery_s": round(recovery_s, 1),
    }
