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
* :func:`busy_api_in_up` (issue 11 item 1): ``gpuwatch up --simulate`` while threads hammer
  its REST API; the samples stored per GPU and the longest gap between two of them. Before,
  the budget counted the whole process, and the API's load stopped sampling.

``code`` runs another checkout's ``gpuwatch`` (the benchmark's baseline), where a figure
that the old code cannot give is None.

Both return the fault table's figures: produced, stored (distinct and total), duplicates,
lost, and counted as lost (what ``/metrics`` admits to), with the case's own readings.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from telemetry.codec import FrameDecoder, FrameError, peek_header
from telemetry.codec.node import NodeFrameDecoder, is_node_frame
from tests.fixtures_kafka import KafkaBroker, consume_all
from tests.support.poll import wait_until

ROOT = Path(__file__).resolve().parents[2]
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
    def start(cls, args: list[str], log: Path, env: dict[str, str] | None = None,
              code: Path = ROOT) -> AgentProcess:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuwatch", "agent", "--metrics-host", "127.0.0.1", "--metrics-port", "0", *args],
            stdout=subprocess.PIPE, stderr=log.open("w"), text=True, cwd=code,
            env={**os.environ, "PYTHONPATH": str(code), **(env or {})})
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        if "metrics on " not in banner:
            proc.kill()
            raise RuntimeError(f"the agent did not start: {banner!r}\n{log.read_text()[-3000:]}")
        url = banner.split("metrics on ", 1)[1].split(";", 1)[0].strip()
        return cls(proc, url, log)

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as resp:
            return parse_metrics(resp.read().decode())

    def wait_for(self, probe: Callable[[dict[str, float]], bool], timeout: float, what: str) -> dict[str, float]:
        def scrape() -> dict[str, float] | None:
            m = self.metrics()
            return m if probe(m) else None

        return wait_until(scrape, timeout=timeout, interval=0.2, what=what,
                          details=lambda: f"log:\n{self.log.read_text()[-3000:]}")

    def stop(self, timeout: float = 60.0) -> dict[str, int] | None:
        """SIGTERM; the numbers of the agent's shutdown summary (None from code that prints none)."""
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            raise RuntimeError(f"the agent exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        line = next((x for x in out.splitlines() if "stopped;" in x), "")
        numbers = [int(n) for n in re.findall(r"\b(\d+)\b", line.split("stopped;", 1)[1])] if line else []
        keys = ["samples", "framed", "frames", "sent", "replayed", "left_in_spool", "dropped", "memory_dropped",
                "corrupt_lost", "rejected"]
        return dict(zip(keys, numbers, strict=True)) if len(numbers) == len(keys) else None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def stored(bootstrap: str, expected_messages: int) -> tuple[dict[str, int], set[tuple[str, float]]]:
    """Read the topic back and decode every frame: counts, and the (GPU, time) of each sample stored."""
    got = consume_all(bootstrap, TOPIC, expected_messages, timeout=60)
    # one decoder per stream: the agent instance and the GPU its frame header names (messages are
    # keyed by node, so one key carries every GPU of the node)
    decoders: dict[tuple[bytes | None, str], FrameDecoder] = defaultdict(FrameDecoder)
    nodes: dict[bytes | None, NodeFrameDecoder] = defaultdict(NodeFrameDecoder)  # the agent's default frames
    seen: set[tuple[str, float]] = set()
    total = undecodable = events = 0
    for c in sorted(got, key=lambda c: (c.partition, c.offset)):
        if dict(c.headers).get("type") != b"frame":
            events += 1
            continue
        try:
            value = c.value or b""
            instance = dict(c.headers).get("instance")
            if is_node_frame(value):
                records = [r for g in nodes[instance].decode(value) for r in g]
            else:
                records = decoders[(instance, peek_header(value).gpu)].decode(value)
        except FrameError:
            undecodable += 1
            continue
        total += len(records)
        seen.update((r.gpu, r.ts) for r in records)
    return {"messages": len(got), "events": events, "stored_total": total, "stored_distinct": len(seen),
            "undecodable_frames": undecodable}, seen


def _figures(summary: dict[str, int] | None, bootstrap: str, last: dict[str, float], last_at: float,
             sent: float) -> dict[str, Any]:
    """The fault table's figures: exact from the agent's shutdown summary; from code that prints none,
    the samples counted at the last scrape against those stored from before it."""
    back, seen = stored(bootstrap, summary["sent"] if summary else int(sent))
    if summary is None:
        produced = int(sum(v for k, v in last.items() if k.startswith("gpuwatch_agent_samples_total{")))
        before = sum(1 for _, ts in seen if ts < last_at)
        return {"produced": produced, "stored_distinct": before, "lost": produced - before,
                "undecodable_frames": back["undecodable_frames"], "counted_as_lost": None,
                "note": "produced as counted at the last scrape, stored = samples from before it"}
    counted = summary["dropped"] + summary["memory_dropped"] + summary["corrupt_lost"] + summary["rejected"]
    return {
        "produced": summary["samples"], "stored_distinct": back["stored_distinct"],
        "stored_total": back["stored_total"], "duplicates": back["stored_total"] - back["stored_distinct"],
        "lost": summary["samples"] - back["stored_distinct"], "counted_as_lost": counted,
        "undecodable_frames": back["undecodable_frames"], "sent_messages": summary["sent"],
        "replayed_messages": summary["replayed"],
    }


def _broker_back(agent: AgentProcess, broker: KafkaBroker) -> tuple[float, dict[str, float], float, Any]:
    """Start the broker, wait for the spool's replay, take a last scrape, stop the agent:
    (recovery seconds, the last scrape, its time, the shutdown summary)."""
    t_back = time.monotonic()
    broker.start()
    agent.wait_for(lambda m: m.get("gpuwatch_agent_spool_messages", 1) == 0
                   and m.get("gpuwatch_agent_kafka_replayed_total", 0) > 0, 120, "the replay")
    recovery_s = time.monotonic() - t_back
    time.sleep(1.0)  # a sample or two after the replay, so the last scrape sees the live stream again
    final_at = time.time()
    final = agent.metrics()
    return recovery_s, final, final_at, agent.stop()


def torn_spool_after_full_disk(broker: KafkaBroker, workdir: Path, *, gpus: int = 8, full_s: float = 4.0,
                               disk_kib: int = 1024, spool_mb: int = 1, segment_mb: float | None = 0.0625,
                               code: Path = ROOT) -> dict[str, Any]:
    """Broker down; the spool's disk fills, stays full ``full_s`` s, gets space back; then the broker returns.

    ``broker`` must be durable (its topic survives the stop) and running; raises
    :class:`MountUnavailable` where no tmpfs can be mounted. ``segment_mb`` None: the code's
    default segment size (code without that setting).
    """
    broker.stop()
    with small_tmpfs(workdir / "disk", disk_kib) as disk:
        args = ["--simulate", str(gpus), "--kafka-bootstrap", broker.bootstrap, "--spool-dir", str(disk / "spool"),
                "--spool-max-mb", str(spool_mb), "--log-level", "WARNING"]
        if segment_mb is not None:
            args += ["--spool-segment-mb", str(segment_mb)]
        # small frames, often: the last free page fills within a second
        env = {"GPUWATCH_FRAME_MAX_DELAY": "0.25", "GPUWATCH_KAFKA_RECONNECT_MAX_S": "2"}
        agent = AgentProcess.start(args, workdir / "agent.log", env, code)
        try:
            agent.wait_for(lambda m: m.get("gpuwatch_agent_kafka_spooled_total", 0) > 0, 30, "spooling")
            filler = fill(disk, 0)
            t_full = time.monotonic()
            full = agent.wait_for(lambda m: m.get("gpuwatch_agent_spool_write_errors_total", 1) > 0
                                  and time.monotonic() - t_full > 2, 60, "a spool write to fail on the full disk")
            time.sleep(full_s)
            during = agent.metrics()
            filler.unlink()
            agent.wait_for(lambda m: m.get("gpuwatch_agent_memory_messages", 0) == 0, 60,
                           "memory to move to the spool once space is back")
            recovery_s, final, final_at, summary = _broker_back(agent, broker)
        finally:
            agent.kill()
    return {
        "case": "torn spool entry after a full disk",
        **_figures(summary, broker.bootstrap, final, final_at, final.get("gpuwatch_agent_kafka_sent_total", 0)),
        "spool_write_errors": final.get("gpuwatch_agent_spool_write_errors_total"),
        "memory_backlog_peak": max(full.get("gpuwatch_agent_memory_messages", 0),
                                   during.get("gpuwatch_agent_memory_messages", 0)),
        "spool_corrupt_regions": final.get("gpuwatch_agent_spool_corrupt_total"),
        "spool_dropped": final.get("gpuwatch_agent_spool_dropped_total"),
        "recovery_s": round(recovery_s, 1),
    }


def cpu_budget_during_outage(broker: KafkaBroker, workdir: Path, *, gpus: int = 8, outage_s: float = 12.0,
                             ceiling_s: float = 2.0, code: Path = ROOT) -> dict[str, Any]:
    """Broker down for ``outage_s`` s from the agent's start; intervals, the budget and CPU by account."""
    broker.stop()
    env = {"GPUWATCH_INTERVAL_CEILING": str(ceiling_s), "GPUWATCH_KAFKA_RECONNECT_MAX_S": "2"}
    agent = AgentProcess.start(
        ["--simulate", str(gpus), "--kafka-bootstrap", broker.bootstrap, "--spool-dir", str(workdir / "spool"),
         "--log-level", "WARNING"], workdir / "agent.log", env, code)
    try:
        first = agent.wait_for(lambda m: m.get("gpuwatch_agent_kafka_spooled_total", 0) > 0, 30, "spooling")
        t0 = time.monotonic()
        worst_interval = worst_stretch = worst_sampling = 0.0
        polls: list[tuple[float, float]] = []  # (when, sampling's own CPU seconds)
        while time.monotonic() - t0 < outage_s:
            m = agent.metrics()
            now = time.monotonic()
            intervals = [v for k, v in m.items() if k.startswith("gpuwatch_agent_sample_interval_seconds{")]
            worst_interval = max(worst_interval, *intervals)
            worst_stretch = max(worst_stretch, m["gpuwatch_agent_interval_stretch"])
            polls.append((now, m.get('gpuwatch_agent_cpu_seconds_total{account="sampling"}', 0.0)))
            # sampling's own CPU over the last 5 s or more (the budget judges half its 10-s window at least)
            old = next((p for p in reversed(polls) if now - p[0] >= 5.0), None)
            if old is not None:
                worst_sampling = max(worst_sampling, (polls[-1][1] - old[1]) / (now - old[0]))
            time.sleep(0.5)
        end = agent.metrics()
        wall = time.monotonic() - t0
        recovery_s, final, final_at, summary = _broker_back(agent, broker)
    finally:
        agent.kill()

    def pct(name: str) -> float | None:
        return round(100 * (end[name] - first[name]) / wall, 3) if name in end else None

    return {
        "case": "agent CPU budget during a broker outage",
        **_figures(summary, broker.bootstrap, final, final_at, final.get("gpuwatch_agent_kafka_sent_total", 0)),
        "outage_s": round(wall, 1), "ceiling_s": ceiling_s, "max_interval_s": worst_interval,
        "max_stretch": worst_stretch, "max_sampling_window_pct": round(100 * worst_sampling, 3),
        "sampling_cpu_pct": pct('gpuwatch_agent_cpu_seconds_total{account="sampling"}'),
        "transport_cpu_pct": pct('gpuwatch_agent_cpu_seconds_total{account="transport"}'),
        "process_cpu_pct": pct("process_cpu_seconds_total"),
        "sampling_budget_pct": 100 * end["gpuwatch_agent_cpu_budget_ratio"],
        "transport_budget_pct": (100 * end["gpuwatch_agent_transport_cpu_budget_ratio"]
                                 if "gpuwatch_agent_transport_cpu_budget_ratio" in end else None),
        "recovery_s": round(recovery_s, 1),
    }


async def _sql(dsn: str, sql: str, *args: object) -> list[Any]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def _admin_token(dsn: str) -> str:
    import asyncpg

    from collector.api import tokens

    conn = await asyncpg.connect(dsn)
    try:
        secret, _ = await tokens.create(conn, "admin", None, name="agent fault case: busy API")
        return secret
    finally:
        await conn.close()


def _process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _hammer(host: str, port: int, token: str, paths: list[str], stop: threading.Event,
            count: list[int], bad: list[str]) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"}
    i = 0
    while not stop.is_set():
        path = paths[i % len(paths)]
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            bad.append(f"{path}: {resp.status} {body[:200]!r}")
        count[0] += 1
        i += 1
    conn.close()


def busy_api_in_up(dsn: str, workdir: Path, *, gpus: int = 4, load_s: float = 12.0, ceiling_s: float = 2.0,
                   clients: int = 4, code: Path = ROOT) -> dict[str, Any]:
    """``gpuwatch up --simulate`` on ``dsn`` while ``clients`` threads call its API for ``load_s`` s."""
    env = {**os.environ, "PYTHONPATH": str(code), "GPUWATCH_INTERVAL_CEILING": str(ceiling_s)}
    log = workdir / "up.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "up", "--simulate", str(gpus), "--db", dsn, "--metrics-port", "0",
         "--api-port", "0", "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env=env, cwd=code)
    try:
        assert proc.stdout is not None
        banner = "".join(proc.stdout.readline() for _ in range(4))
        api = re.search(r"API:\s+http://([\d.]+):(\d+)/api/v1", banner)
        metrics = re.search(r"metrics:\s+(http://\S+)", banner)
        if not (api and metrics):
            raise RuntimeError(f"`up` did not start: {banner}\n{log.read_text()[-3000:]}")
        host, port = api.group(1), int(api.group(2))
        token = asyncio.run(_admin_token(dsn))
        def stored() -> list[str] | None:
            found = [r["gpu"] for r in asyncio.run(_sql(dsn, "SELECT DISTINCT gpu FROM gpu_samples"))]
            return found if len(found) >= gpus else None

        uuids = wait_until(stored, timeout=60, interval=0.5, what=f"all {gpus} GPUs stored",
                           details=lambda: log.read_text()[-3000:])
        since = int(time.time()) - 600
        paths = ["/api/v1/gpus", "/api/v1/nodes", *(f"/api/v1/gpus/{g}/series?start={since}&step=1" for g in uuids)]
        stop = threading.Event()
        count = [0]
        bad: list[str] = []
        threads = [threading.Thread(target=_hammer, args=(host, port, token, paths, stop, count, bad), daemon=True)
                   for _ in range(clients)]
        t0, cpu0 = time.time(), _process_cpu_s(proc.pid)
        for th in threads:
            th.start()
        time.sleep(load_s)
        stop.set()
        for th in threads:
            th.join(30)
        t1, cpu1 = time.time(), _process_cpu_s(proc.pid)
        with urllib.request.urlopen(metrics.group(1), timeout=10) as resp:
            scrape = parse_metrics(resp.read().decode())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    if proc.returncode != 0:
        raise RuntimeError(f"`up` exited {proc.returncode}:\n{log.read_text()[-3000:]}")
    rows = asyncio.run(_sql(
        dsn, "SELECT gpu, extract(epoch FROM ts)::float8 AS t FROM gpu_samples "
        "WHERE ts BETWEEN to_timestamp($1) AND to_timestamp($2) ORDER BY gpu, ts", t0, t1))
    by_gpu: dict[str, list[float]] = {g: [] for g in uuids}
    for r in rows:
        by_gpu[r["gpu"]].append(r["t"])
    gaps = {g: max(b - a for a, b in zip([t0, *ts], [*ts, t1], strict=True)) for g, ts in by_gpu.items()}
    windows = max(1, int((t1 - t0) // ceiling_s))
    kept = [sum(1 for w in range(windows) if any(t0 + w * ceiling_s <= t < t0 + (w + 1) * ceiling_s for t in ts))
            / windows for ts in by_gpu.values()]
    lost = asyncio.run(_sql(dsn, "SELECT count(*) AS n FROM anomalies WHERE kind = 'gpu_lost'"))
    return {
        "case": "busy API in gpuwatch up", "gpus": gpus, "load_s": round(t1 - t0, 1), "ceiling_s": ceiling_s,
        "api_calls": count[0], "api_errors": bad[:5], "up_cpu_pct": round(100 * (cpu1 - cpu0) / (t1 - t0), 1),
        "samples_per_gpu_s": round(len(rows) / len(uuids) / (t1 - t0), 3),
        "max_gap_s": round(max(gaps.values()), 2), "ceiling_windows_kept": round(min(kept), 3),
        "stretch": scrape.get("gpuwatch_agent_interval_stretch"), "gpu_lost_anomalies": int(lost[0]["n"]),
    }
