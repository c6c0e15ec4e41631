"""The agent's receiver of CUPTI probe windows, on a real Unix datagram socket.

Every datagram here is sent through the kernel (no socket is faked), so the pid the receiver
uses is the one the kernel states in ``SCM_CREDENTIALS``: this process's, or a child's that
claims another. Also: malformed, oversize and re-encoded-oversize datagrams counted and
dropped while the next good one flows; a dead agent's socket replaced, a live one refused
(in process, and by ``gpuwatch agent`` and ``gpuwatch up`` in one line); the CPU budget; a
clean stop; and, with hypothesis, no datagram content stopping the receiver.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.attribution import Identity
from agent.cpuclock import ThreadCpu
from agent.kernels import KERNELS, KernelReceiver, KernelReceiverStats, ReceiverConfig
from agent.probe_socket import MAX_PATH_BYTES, ProbeSocket, ProbeSocketError
from agent.stats import families, metric_names
from telemetry.kernels import MAX_VALUE_BYTES, CopyStat, KernelStat, KernelWindow
from telemetry.records import GpuRecord, ProcessRecord
from telemetry.wire import Message, MessageType, stream_headers
from tests.support.poll import wait_until

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
NODE, INSTANCE = "gpu-node-7", "0123456789abcdef"
GPU_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
GPU_B = "GPU-bbbbbbbb-0000-0000-0000-000000000002"
WINDOW = KernelWindow(
    ts=1_760_000_000.0, duration_s=1.0, period_s=10.0, pid=1, command="python train.py",
    kernels=(KernelStat("ampere_sgemm_128x64_nn", 120, 3_600_000, 41_000, (64, 8, 1), (256, 1, 1), 122, 16384, 0.25),
             KernelStat("void at::native::vectorized_elementwise_kernel<4>", 900, 450_000, 900, short_calls=880)),
    copies=(CopyStat("HtoD", "pageable", 3, 3 << 20, 800_000),), launch_calls=1020, launch_ns=4_100_000,
    busy_ns=4_050_000, idle_ns=600_000_000, idle_gaps=1000, records=2043, probe="gpuwatch-probe 0.1, CUPTI 13.0",
    # what a probe cannot make the agent believe: its identity
    node="forged-node", gpu="GPU-forged", namespace="kube-system", pod="forged", container="x", service="forged")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory whose socket paths fit a Unix socket's 107 bytes (pytest's tmp_path may not)."""
    path = Path(tempfile.mkdtemp(prefix="gwk"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Sent:
    """What the receiver handed to the producer (appended from its thread)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def __call__(self, msg: Message) -> None:
        self.messages.append(msg)

    def windows(self) -> list[KernelWindow]:
        return [KernelWindow.decode(m.value) for m in self.messages]


@contextlib.contextmanager
def running(path: Path, *, config: ReceiverConfig | None = None, cpu: ThreadCpu | None = None,
            simulated: bool = False) -> Iterator[tuple[KernelReceiver, Sent]]:
    sent = Sent()
    receiver = KernelReceiver(ProbeSocket(path, 0o600), NODE, INSTANCE, sent,
                              config=config or ReceiverConfig(cpu_budget=1.0), cpu=cpu, simulated=simulated)
    receiver.start()
    try:
        yield receiver, sent
    finally:
        receiver.stop()


def send(path: Path, payload: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        if len(payload) > 150_000:  # a datagram is bounded by the sender's buffer (208 KiB by default)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        s.sendto(payload, str(path))


def handled(receiver: KernelReceiver, n: int) -> None:
    """Wait until the receiver has read ``n`` datagrams and dealt with each."""
    def done() -> bool:
        s = receiver.stats()
        return s.received_total >= n and s.forwarded_total + s.rejected_total + s.budget_dropped_total >= n

    wait_until(done, timeout=10, interval=0.002, what=f"{n} datagrams handled", details=receiver.stats)


def record(gpu: str, *processes: ProcessRecord, ts: float | None = None) -> GpuRecord:
    return GpuRecord(time.time() if ts is None else ts, NODE, gpu, {}, processes=list(processes))


def process(pid: int, pod: str) -> ProcessRecord:
    return ProcessRecord(pid, "python", 1024.0, 80.0, 10.0, "research", pod, "trainer", "llm-pretrain")


# ---- a good window ------------------------------------------------------------------------


def test_a_window_gets_the_identity_of_the_pid_the_kernel_states(short_dir: Path) -> None:
    path = short_dir / "run" / "probe.sock"  # the parent is created
    with running(path) as (receiver, sent):
        assert path.is_socket() and (path.stat().st_mode & 0o777) == 0o600
        receiver.observe(record(GPU_B, process(os.getpid() + 1, "another-pod")))
        receiver.observe(record(GPU_A, process(os.getpid(), "trainer-0")))
        send(path, WINDOW.encode())
        handled(receiver, 1)
    (msg,) = sent.messages
    assert msg.key == NODE.encode()  # keyed like the node's frames
    assert msg.headers == stream_headers(MessageType.KERNELS, NODE, INSTANCE)
    (window,) = sent.windows()
    assert window == replace(WINDOW, pid=os.getpid(), node=NODE, gpu=GPU_A, namespace="research", pod="trainer-0",
                             container="trainer", service="llm-pretrain")
    assert receiver.stats() == KernelReceiverStats(received_total=1, forwarded_total=1)


def test_a_child_that_claims_another_pid_is_filed_under_its_own(short_dir: Path) -> None:
    """The child writes the pid of this process (on GPU A, pod victim) into its window; the kernel
    says who sent it, so its window is the child's own (GPU B, its pod)."""
    path = short_dir / "probe.sock"
    code = ("import socket, sys; data = sys.stdin.buffer.read(); "
            "socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(data, sys.argv[1])")
    with running(path) as (receiver, sent):
        child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE)
        receiver.observe(record(GPU_A, process(os.getpid(), "victim")))
        receiver.observe(record(GPU_B, process(child.pid, "child-pod")))
        child.communicate(replace(WINDOW, pid=os.getpid(), pod="victim").encode(), timeout=30)
        assert child.returncode == 0
        handled(receiver, 1)
        # on no GPU and with no attribution: forwarded under the node, the identity empty, counted
        orphan = subprocess.run([sys.executable, "-c", code, str(path)],
                                input=replace(WINDOW, pid=os.getpid()).encode(), timeout=30, check=True)
        assert orphan.returncode == 0
        handled(receiver, 2)
    first, second = sent.windows()
    assert (first.pid, first.gpu, first.pod) == (child.pid, GPU_B, "child-pod")
    assert second.pid not in (os.getpid(), child.pid) and second.pid > 0
    assert (second.gpu, second.namespace, second.pod, second.container, second.service) == ("", "", "", "", "")
    assert second.node == NODE and sent.messages[1].key == NODE.encode()
    assert receiver.stats() == KernelReceiverStats(received_total=2, forwarded_total=2, unattributed_total=1)


class Pods:
    """The agent's attribution as the receiver sees it: who a pid is, which GPUs the kubelet gave whom."""

    def __init__(self, who: Mapping[int, Identity], owners: Mapping[str, Sequence[Identity]]) -> None:
        self.who, self.owners = who, owners

    def identify(self, pid: int) -> Identity:
        return self.who.get(pid, Identity(pid, None))

    def gpu_owners(self) -> Mapping[str, Sequence[Identity]]:
        return self.owners


def test_a_pid_on_no_gpu_is_attributed_by_the_agents_attribution(short_dir: Path) -> None:
    me = Identity(os.getpid(), "python", "research", "notebook-0", "jupyter", "notebooks")
    holder = Identity(None, None, "research", "notebook-0", "jupyter", "notebooks")
    path = short_dir / "probe.sock"
    with running(path) as (receiver, sent):
        receiver.observe(record(GPU_A, process(os.getpid(), "seen-long-ago"), ts=time.time() - 600))  # a lost GPU
        receiver.attribute_with(Pods({os.getpid(): me}, {GPU_A: [holder], GPU_B: []}))
        send(path, WINDOW.encode())
        handled(receiver, 1)
        receiver.attribute_with(Pods({os.getpid(): me}, {GPU_A: [holder], GPU_B: [holder]}))  # two GPUs: which?
        send(path, WINDOW.encode())
        handled(receiver, 2)
    one, two = sent.windows()
    assert (one.gpu, one.namespace, one.pod, one.container, one.service) == (
        GPU_A, "research", "notebook-0", "jupyter", "notebooks")
    assert (two.gpu, two.pod) == ("", "notebook-0")
    assert receiver.stats().unattributed_total == 0


def test_a_simulated_agent_files_no_window_under_its_made_up_pids(short_dir: Path) -> None:
    path = short_dir / "probe.sock"
    with running(path, simulated=True) as (receiver, sent):
        receiver.observe(record(GPU_A, process(os.getpid(), "simulated-pod")))
        receiver.attribute_with(Pods({os.getpid(): Identity(os.getpid(), "x", "ns", "sim", "c", "s")}, {}))
        send(path, WINDOW.encode())
        handled(receiver, 1)
    (window,) = sent.windows()
    assert (window.pid, window.gpu, window.pod) == (os.getpid(), "", "")
    assert receiver.stats().unattributed_total == 1


# ---- bad datagrams ------------------------------------------------------------------------


def test_malformed_datagrams_are_counted_named_and_dropped_and_the_next_good_one_flows(
        short_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    body = WINDOW.to_dict()
    body["kernels"][0]["calls"] = 0  # type: ignore[index]
    bad = [json.dumps(body).encode(), b"not json at all", b"", b'{"type": "frame"}', b"[" * 100_000,
           b"\xff\xfe\x00", json.dumps({**WINDOW.to_dict(), "period_s": 0.5}).encode()]
    path = short_dir / "probe.sock"
    caplog.set_level(logging.WARNING, logger="agent.kernels")
    with running(path) as (receiver, sent):
        for payload in bad:
            send(path, payload)
        send(path, WINDOW.encode())
        handled(receiver, len(bad) + 1)
        assert receiver.running
    assert receiver.stats() == KernelReceiverStats(received_total=len(bad) + 1, forwarded_total=1,
                                                   rejected_total=len(bad), unattributed_total=1)
    assert sent.windows()[0].pid == os.getpid()
    lines = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    # one line, naming the field and the sender; the rest of the same kind held back by the rate limit
    assert lines == [f"kernel probe datagram from pid {os.getpid()} (uid {os.getuid()}) dropped: kernels message "
                     "field 'kernels[0].calls' must be an integer in [1, 9223372036854775807]"]


def test_datagrams_over_the_size_limit_are_dropped(short_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Over the limit as sent; and a window under it as sent (UTF-8) that the agent's re-encoding
    (JSON escapes: six bytes for an é) would take over it, which the collector would refuse."""
    exact = WINDOW.encode()
    exact += b" " * (MAX_VALUE_BYTES - len(exact))  # trailing whitespace: still JSON, exactly at the limit
    grows = replace(WINDOW, kernels=tuple(KernelStat(f"{i:03d}" + "é" * 500, 1, 10, 10) for i in range(150)))
    grows_utf8 = json.dumps(grows.to_dict(), ensure_ascii=False).encode()
    assert len(grows_utf8) < MAX_VALUE_BYTES < len(grows.encode())
    path = short_dir / "probe.sock"
    caplog.set_level(logging.WARNING, logger="agent.kernels")
    with running(path) as (receiver, sent):
        send(path, b" " * (MAX_VALUE_BYTES + 1))
        send(path, grows_utf8)
        send(path, exact)
        handled(receiver, 3)
    assert receiver.stats() == KernelReceiverStats(received_total=3, forwarded_total=1, rejected_total=2,
                                                   unattributed_total=1)
    assert len(sent.messages) == 1 and len(sent.messages[0].value) < MAX_VALUE_BYTES
    text = " ".join(r.getMessage() for r in caplog.records)
    assert f"over the {MAX_VALUE_BYTES}-byte limit" in text


def test_over_its_cpu_budget_the_receiver_drops_datagrams_undecoded(short_dir: Path) -> None:
    cpu = ThreadCpu()
    path = short_dir / "probe.sock"
    with running(path, config=ReceiverConfig(cpu_budget=0.01, bank_s=10), cpu=cpu) as (receiver, _sent):
        send(path, WINDOW.encode())
        handled(receiver, 1)
        cpu.add(KERNELS, 1.0)  # far past the 0.1 CPU-s it may bank
        send(path, WINDOW.encode())
        handled(receiver, 2)
    assert receiver.stats() == KernelReceiverStats(received_total=2, forwarded_total=1, budget_dropped_total=1,
                                                   unattributed_total=1)
    assert KERNELS in cpu.accounts()


# ---- who holds the path -------------------------------------------------------------------


def test_a_dead_agents_socket_is_replaced(short_dir: Path) -> None:
    path = short_dir / "probe.sock"
    code = ("import sys, time; from pathlib import Path; from agent.probe_socket import ProbeSocket; "
            "ProbeSocket(Path(sys.argv[1]), 0o666); print('ready', flush=True); time.sleep(120)")
    dead = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True, env=ENV)
    assert dead.stdout is not None and dead.stdout.readline().strip() == "ready"
    with pytest.raises(ProbeSocketError, match=f"gpuwatch agent \\(PID {dead.pid}\\) already receives"):
        ProbeSocket(path, 0o600)
    dead.send_signal(signal.SIGKILL)
    dead.wait(10)
    assert path.is_socket()  # left behind by kill -9
    with running(path) as (receiver, sent):
        assert (path.stat().st_mode & 0o777) == 0o600
        send(path, WINDOW.encode())
        handled(receiver, 1)
    assert len(sent.messages) == 1
    # a socket left by anything that died without gpuwatch's lock is a dead one's too
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(path))
    stale.close()
    ProbeSocket(path, 0o600).close()


def test_a_live_receiver_is_refused_in_one_line_and_left_alone(short_dir: Path) -> None:
    path = short_dir / "probe.sock"
    with ProbeSocket(path, 0o666, holder="gpuwatch up") as held:
        with pytest.raises(ProbeSocketError) as caught:
            ProbeSocket(path, 0o600)
        message = str(caught.value)
        assert message.startswith(f"gpuwatch up (PID {os.getpid()}) already receives kernel probe windows on {path}")
        assert "GPUWATCH_PROBE_SOCKET" in message and "\n" not in message
        assert not held.closed and path.is_socket()
    other = short_dir / "other.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as foreign:  # a receiver that took no lock
        foreign.bind(str(other))
        with pytest.raises(ProbeSocketError, match="a live receiver"):
            ProbeSocket(other, 0o600)
        assert other.is_socket()
    plain = short_dir / "plain"
    plain.write_text("not a socket")
    with pytest.raises(ProbeSocketError, match="is not a socket"):
        ProbeSocket(plain, 0o600)
    assert plain.read_text() == "not a socket"
    with pytest.raises(ProbeSocketError, match=f"longer than the {MAX_PATH_BYTES} bytes"):
        ProbeSocket(short_dir / ("x" * MAX_PATH_BYTES), 0o600)


def _held_elsewhere(path: Path) -> subprocess.Popen[str]:
    code = ("import sys, time; from pathlib import Path; from agent.probe_socket import ProbeSocket; "
            "ProbeSocket(Path(sys.argv[1]), 0o600); print('ready', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True, env=ENV)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    return holder


@pytest.mark.parametrize("command", [
    ["agent", "--simulate", "1", "--kafka-bootstrap", "127.0.0.1:1", "--metrics-port", "0"],
    ["up", "--simulate", "1", "--db", "postgresql://gpuwatch@127.0.0.1:1/gpuwatch", "--metrics-port", "0",
     "--api-port", "-1"],
], ids=["agent", "up"])
def test_a_second_agent_or_up_on_the_socket_stops_in_one_line(short_dir: Path, command: list[str]) -> None:
    path = short_dir / "probe.sock"
    holder = _held_elsewhere(path)
    try:
        env = {**ENV, "GPUWATCH_PROBE_SOCKET": str(path), "GPUWATCH_SPOOL_DIR": str(short_dir / "spool"),
               "XDG_DATA_HOME": str(short_dir / "data")}
        done = subprocess.run([sys.executable, "-m", "gpuwatch", *command, "--log-level", "ERROR"],
                              capture_output=True, text=True, timeout=120, env=env)
    finally:
        holder.kill()
        holder.wait(10)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (
        f"gpuwatch {command[0]}: gpuwatch agent (PID {holder.pid}) already receives kernel probe windows on {path}; "
        "stop it, or set GPUWATCH_PROBE_SOCKET to another path, or to an empty string to turn the kernel probe "
        "receiver off")


def test_a_held_socket_on_a_path_nobody_chose_turns_the_receiver_off_not_the_agent(
        short_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Several simulated agents (or `up --db` runs) on one host share the default path: the
    first gets the receiver, the others run on without it and say so in one line. On a path
    that was given (the chart sets GPUWATCH_PROBE_SOCKET), a held socket is still refused."""
    from agent.kernels import socket_from_settings
    from agent.settings import AgentSettings

    path = short_dir / "probe.sock"
    holder = _held_elsewhere(path)
    try:
        with caplog.at_level(logging.WARNING, logger="agent.kernels"):
            assert socket_from_settings(AgentSettings(), path=str(path), explicit=False) is None
        with pytest.raises(ProbeSocketError, match="already receives"):
            socket_from_settings(AgentSettings(), path=str(path), explicit=True)
    finally:
        holder.kill()
        holder.wait(10)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("kernel probe receiver off: gpuwatch agent (PID ")


def test_the_receiver_stops_cleanly_and_gives_the_path_back(short_dir: Path) -> None:
    path = short_dir / "probe.sock"
    cpu = ThreadCpu()
    with running(path, cpu=cpu) as (receiver, _sent):
        thread = receiver._thread
        assert thread is not None and thread.name == "gpuwatch-probe-receiver" and receiver.running
        assert cpu.threads() == 1
    assert not thread.is_alive() and not receiver.running and cpu.threads() == 0
    assert not path.exists() and receiver.sock.closed
    receiver.stop()  # twice is fine
    with running(path) as (again, sent):  # the path and its lock are free
        send(path, WINDOW.encode())
        handled(again, 1)
    assert len(sent.messages) == 1


def test_the_counters_reach_metrics_under_their_names() -> None:
    names = metric_names(KernelReceiverStats)
    assert names == ["gpuwatch_agent_probe_datagrams_total", "gpuwatch_agent_probe_windows_forwarded_total",
                     "gpuwatch_agent_probe_rejected_total", "gpuwatch_agent_probe_unattributed_total",
                     "gpuwatch_agent_probe_budget_dropped_total"]
    exposed = {f.name: f.samples[0].value for f in families([KernelReceiverStats(received_total=3, rejected_total=2)])}
    assert exposed["gpuwatch_agent_probe_datagrams"] == 3 and exposed["gpuwatch_agent_probe_rejected"] == 2


def test_the_socket_settings_load_and_a_bad_one_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.settings import AgentSettings, SettingsError, load

    assert (AgentSettings().probe_socket, AgentSettings().probe_socket_mode) == ("/run/gpuwatch/probe.sock", 0o666)
    for text, mode in (("0600", 0o600), ("660", 0o660), ("0o644", 0o644)):
        monkeypatch.setenv("GPUWATCH_PROBE_SOCKET_MODE", text)
        assert load(AgentSettings, {}).probe_socket_mode == mode
    monkeypatch.setenv("GPUWATCH_PROBE_SOCKET", "")
    assert load(AgentSettings, {}).probe_socket == ""
    for name, value, says in (("GPUWATCH_PROBE_SOCKET_MODE", "0689", "not an octal file mode"),
                              ("GPUWATCH_PROBE_SOCKET", "run/probe.sock", "not an absolute path"),
                              ("GPUWATCH_PROBE_SOCKET", "/" + "x" * 120, "at most 107 bytes")):
        monkeypatch.setenv(name, value)
        with pytest.raises(SettingsError) as caught:
            load(AgentSettings, {})
        assert str(caught.value).startswith(f"invalid setting {name.removeprefix('GPUWATCH_').lower()} (env {name}): ")
        assert says in str(caught.value) and "\n" not in str(caught.value)
        monkeypatch.delenv(name)


# ---- no datagram stops it -----------------------------------------------------------------

_FIELDS = list(WINDOW.to_dict())
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4), max_leaves=12)


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    """A good window with a few fields replaced by any JSON (or removed)."""
    body: dict[str, Any] = WINDOW.to_dict()
    for name in draw(st.lists(st.sampled_from(_FIELDS), min_size=1, max_size=3)):
        if draw(st.booleans()):
            body[name] = draw(_JSON)
        else:
            body.pop(name, None)
    return json.dumps(body, allow_nan=True).encode()


DATAGRAMS = st.one_of(st.binary(max_size=2048), _mutated(),
                      _JSON.map(lambda v: json.dumps(v).encode()),
                      st.integers(1, 20_000).map(lambda n: b'{"type":"kernels","kernels":' + b"[" * n))


def test_no_datagram_content_stops_the_receiver(short_dir: Path) -> None:
    path = short_dir / "probe.sock"
    with running(path) as (receiver, sent):
        count = [0]

        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(payload=DATAGRAMS)
        def one(payload: bytes) -> None:
            send(path, payload)
            count[0] += 1
            handled(receiver, count[0])
            assert receiver.running

        one()
        send(path, WINDOW.encode())
        handled(receiver, count[0] + 1)
    s = receiver.stats()
    assert s.received_total == s.forwarded_total + s.rejected_total == count[0] + 1
    assert sent.windows()[-1].pid == os.getpid()


def test_gpuwatch_agent_receives_windows_and_counts_them_on_metrics(short_dir: Path) -> None:
    """The wiring: ``gpuwatch agent`` with Kafka binds the socket, takes a window from this process,
    hands it to its sender (Kafka is unreachable: it waits in the spool) and counts it on /metrics;
    at exit the socket file is gone."""
    import urllib.request

    path = short_dir / "probe.sock"
    env = {**ENV, "GPUWATCH_PROBE_SOCKET": str(path), "GPUWATCH_SPOOL_DIR": str(short_dir / "spool")}
    agent = subprocess.Popen([sys.executable, "-m", "gpuwatch", "agent", "--simulate", "1", "--kafka-bootstrap",
                              "127.0.0.1:1", "--metrics-host", "127.0.0.1", "--metrics-port", "0", "--log-level",
                              "ERROR"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert agent.stdout is not None
        banner = agent.stdout.readline()
        assert f"; kernel probe windows on {path}" in banner, banner
        assert path.is_socket() and (path.stat().st_mode & 0o777) == 0o666
        url = banner.split("metrics on ", 1)[1].split("/metrics", 1)[0] + "/metrics"
        send(path, WINDOW.encode())
        send(path, b"not a window")

        def counted() -> str | None:
            with urllib.request.urlopen(url, timeout=10) as resp:
                text: str = resp.read().decode()
            # both handled: the window's forward is counted before the second datagram is read
            return text if all(f"gpuwatch_agent_probe_{name}" in text for name in (
                "datagrams_total 2.0", "windows_forwarded_total 1.0", "rejected_total 1.0")) else None

        text = wait_until(counted, timeout=30, what="both datagrams counted on /metrics")
        assert 'gpuwatch_agent_cpu_seconds_total{account="kernels"}' in text
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
    assert not path.exists()
