"""The CUPTI probe's windows: read from the probe socket, given their pod's identity, sent to the collector.

Why in the agent: a probe inside a workload process (:mod:`probe`, opt-in, ``GPUWATCH_PROBE=1``)
knows its kernels but not who it is in the cluster, and it must not be trusted to say: a
process could claim to be another pod. The agent knows both. So a probe sends each window
(:class:`telemetry.kernels.KernelWindow`, about 1 s of recording in every 10 s) as one datagram
to :mod:`agent.probe_socket`, and :class:`KernelReceiver`, on a thread of its own:

* takes the sender's pid from the kernel's ``SCM_CREDENTIALS``, never from the window;
* finds that pid on the GPUs the agent last sampled (:meth:`KernelReceiver.observe`, a record
  sink, as the profiler's): the GPU and the process's namespace, pod, container and service;
  a process on several GPUs (its window sums them) is filed under the first by UUID;
* else, where the agent has attribution (Kubernetes), asks it who the pid is (an O(1) cache hit
  once the sampler has seen the pid; else one read of ``/proc/<pid>/cgroup``) and, when the
  kubelet allocated that container exactly one GPU, takes that GPU;
* else forwards the window with an empty identity (counted as unattributed);
* sends it as a ``kernels`` message through the agent's producer, keyed by the GPU (or, with
  none, by the node), like the profiler's answers.

A datagram that is not a window (not JSON, a wrong field, over :data:`MAX_VALUE_BYTES`,
without credentials) is counted, logged in one rate-limited line that names what was wrong,
and dropped; nothing a sender writes stops the receiver. The thread's CPU is the ``kernels``
account of :mod:`agent.cpuclock`, under a budget of its own (a fraction of a core, banked
for one probe period): past it, datagrams are read and dropped undecoded (and counted), so a
flood from a broken probe costs the node a bounded share of a core.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from agent.cpuclock import ThreadCpu
from agent.probe_socket import Credentials, Datagram, ProbeSocket, ProbeSocketError
from agent.profiling import CpuAllowance
from agent.sampler import Identity
from agent.stats import counter, snapshot
from telemetry.kernels import MAX_TEXT_CHARS, MAX_VALUE_BYTES, KernelWindow
from telemetry.ratelimit import RateLimitedLog
from telemetry.records import GpuRecord, ProcessRecord
from telemetry.wire import Message, MessageType, partition_key, stream_headers

if TYPE_CHECKING:
    from agent.settings import AgentSettings

log = logging.getLogger(__name__)

KERNELS = "kernels"  # the agent.cpuclock account of the receiver (present once it runs)
DRAIN = 64  # datagrams read per wake-up before the stop flag is looked at again
STALE_S = 60.0  # a GPU's processes older than this (a lost GPU) no longer attribute a pid
IDENTITY = ("namespace", "pod", "container", "service")  # what the agent sets besides node, gpu and pid
Submit = Callable[[Message], None]


@snapshot
class KernelReceiverStats:
    received_total: int = counter(
        "gpuwatch_agent_probe_datagrams", "Datagrams the kernel probe receiver read from its socket.")
    forwarded_total: int = counter(
        "gpuwatch_agent_probe_windows_forwarded", "Kernel probe windows sent on to the collector.")
    rejected_total: int = counter(
        "gpuwatch_agent_probe_rejected",
        "Probe datagrams dropped: not JSON, a wrong field, over the size limit, or without the sender's credentials.")
    unattributed_total: int = counter(
        "gpuwatch_agent_probe_unattributed",
        "Probe windows forwarded with no GPU and no pod: the sender was on no GPU and in no known pod.")
    budget_dropped_total: int = counter(
        "gpuwatch_agent_probe_budget_dropped",
        "Probe datagrams dropped undecoded while the receiver was over its CPU budget (GPUWATCH_PROBE_CPU_BUDGET).")


Who = Identity  # what the receiver reads of an attribution identity: the sampler's view of it


class PodLookup(Protocol):
    """The agent's attribution, as the receiver uses it (agent.attribution.Attributor)."""

    def identify(self, pid: int) -> Who: ...
    def gpu_owners(self) -> Mapping[str, Sequence[Who]]: ...


@dataclass(frozen=True, slots=True)
class ReceiverConfig:
    cpu_budget: float = 0.01  # fraction of one core
    bank_s: float = 10.0  # the budget banks at most this long (one probe period)


class KernelReceiver:
    """Reads ``sock`` on a thread of its own and sends each window through ``submit``."""

    def __init__(self, sock: ProbeSocket, node: str, instance: str, submit: Submit, *,
                 config: ReceiverConfig | None = None, cpu: ThreadCpu | None = None,
                 clock: Callable[[], float] = time.time, simulated: bool = False) -> None:
        """``simulated``: the agent's GPUs are simulated, their pids made up; a real process that
        happens to have one of them must not be filed under a simulated pod, so pids are not looked up."""
        self.sock, self.node, self.submit, self.simulated = sock, node, submit, simulated
        self.config = config or ReceiverConfig()
        self.cpu = cpu or ThreadCpu()
        self.clock = clock
        self.headers = stream_headers(MessageType.KERNELS, node, instance)
        self.allowance = CpuAllowance(self.cpu, KERNELS, self.config.cpu_budget, self.config.bank_s)
        self.pods: PodLookup | None = None
        self._log = RateLimitedLog(log)
        self._lock = threading.Lock()
        self._gpus: dict[str, tuple[float, Sequence[ProcessRecord]]] = {}  # gpu -> (record ts, its processes)
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._closed = False
        self.received_total = self.forwarded_total = self.rejected_total = 0
        self.unattributed_total = self.budget_dropped_total = 0

    def stats(self) -> KernelReceiverStats:
        return KernelReceiverStats(received_total=self.received_total, forwarded_total=self.forwarded_total,
                                   rejected_total=self.rejected_total, unattributed_total=self.unattributed_total,
                                   budget_dropped_total=self.budget_dropped_total)

    # ---- from the agent's threads ----
    def observe(self, record: GpuRecord) -> None:
        """A record sink: the processes each GPU had at its newest sample."""
        if self.simulated:
            return
        with self._lock:
            self._gpus[record.gpu] = (record.ts, record.processes)

    def attribute_with(self, pods: PodLookup | None) -> None:
        """Use the agent's attribution for pids on no GPU (None, or a simulated agent: do not)."""
        self.pods = None if self.simulated else pods

    # ---- the thread ----
    def start(self) -> None:
        if self._thread is None:
            self._thread = self.cpu.spawn(KERNELS, self._run, "gpuwatch-probe-receiver")
            self._thread.start()
            log.info("kernel probe receiver on %s (mode %o)", self.sock.path, self.sock.mode)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and give the socket path back; safe to call twice."""
        self._stopping.set()
        if self._thread is not None:
            os.write(self._wake_w, b"x")
            self._thread.join(timeout)
            self._thread = None
        self.sock.close()
        if not self._closed:
            self._closed = True
            os.close(self._wake_r)
            os.close(self._wake_w)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._stopping.is_set():
            poller.poll()
            for _ in range(DRAIN):
                if self._stopping.is_set():
                    return
                try:
                    got = self.sock.receive()
                except OSError as exc:  # not the sender's doing: say so, wait, go on
                    self._log.error("socket", "reading the kernel probe socket %s failed: %s", self.sock.path, exc)
                    self._stopping.wait(1.0)
                    break
                if got is None:
                    break
                self.handle(got)

    # ---- one datagram (on the receiver's thread) ----
    def handle(self, got: Datagram) -> None:
        self.received_total += 1
        if self.allowance.left() <= 0:
            self.budget_dropped_total += 1
            self._log.warning("budget", "kernel probe datagrams dropped: the receiver is over its CPU budget "
                              "(%g%% of a core, GPUWATCH_PROBE_CPU_BUDGET)", 100 * self.config.cpu_budget)
            return
        creds = got.credentials
        window: KernelWindow | None = None
        if creds is None:
            key, why = "credentials", "it came without the sender's credentials (SCM_CREDENTIALS)"
        elif got.truncated:
            key, why = "size", f"it is over the {MAX_VALUE_BYTES}-byte limit"
        else:
            key, why = "decode", ""
            try:
                window = KernelWindow.decode(got.data)
            except ValueError as exc:
                why = str(exc)
            except RecursionError:  # json.loads of thousands of nested brackets
                why = "kernels message is nested too deeply to be a window"
        if window is None or creds is None:
            self._reject(key, creds, why)
            return
        try:
            self._forward(window, creds.pid)
        except Exception as exc:  # noqa: BLE001 - a bug here must not stop the receiver: counted, logged
            self._reject(f"forward:{type(exc).__name__}", creds, f"it could not be forwarded: {exc!r}")

    def _forward(self, window: KernelWindow, pid: int) -> None:
        gpu, who = self._identity(pid)
        identity = {name: str(getattr(who, name, None) or "")[:MAX_TEXT_CHARS] for name in IDENTITY}
        window = window.with_identity(pid=pid, node=self.node[:MAX_TEXT_CHARS], gpu=gpu, **identity)
        value = window.encode()
        if len(value) > MAX_VALUE_BYTES:
            self._reject("size", None, f"with its identity the window of pid {pid} is {len(value)} bytes, over "
                                       f"the {MAX_VALUE_BYTES}-byte limit")
            return
        if not gpu and not identity["pod"]:
            self.unattributed_total += 1
        self.submit(Message(partition_key(self.node), value, self.headers))
        self.forwarded_total += 1

    def _identity(self, pid: int) -> tuple[str, Who | None]:
        """(GPU UUID or "", who the process is or None) for a pid from the kernel's credentials."""
        if pid <= 0:  # the kernel's pid 0: the sender is in a PID namespace the agent does not see
            self._log.warning("pid0", "a kernel probe window came from a process outside the agent's PID namespace "
                              "(the agent needs the host's, hostPID): forwarded without its identity")
            return "", None
        oldest = self.clock() - STALE_S
        with self._lock:
            gpus = sorted(self._gpus.items())
        for gpu, (ts, processes) in gpus:
            if ts >= oldest:
                for p in processes:
                    if p.pid == pid:
                        return gpu, p
        if self.pods is None:
            return "", None
        who = self.pods.identify(pid)
        if not who.pod:
            return "", None
        held = [gpu for gpu, owners in self.pods.gpu_owners().items()
                if any((o.namespace, o.pod, o.container) == (who.namespace, who.pod, who.container) for o in owners)]
        return (held[0] if len(held) == 1 else ""), who

    def _reject(self, key: str, creds: Credentials | None, why: str) -> None:
        self.rejected_total += 1
        sender = f" from pid {creds.pid} (uid {creds.uid})" if creds is not None else ""
        self._log.warning(f"rejected:{key}", "kernel probe datagram%s dropped: %s", sender, why)


def socket_from_settings(settings: AgentSettings, *, path: str | None = None, mode: int | None = None,
                         holder: str = "gpuwatch agent", explicit: bool | None = None) -> ProbeSocket | None:
    """The probe socket of an agent's settings, bound and locked (``path`` and ``mode`` override
    theirs: ``gpuwatch up`` puts an owner-only socket in its data directory); None when the path is
    empty. Bound before anything else starts, so that a second agent on a path it was given
    (``explicit``: GPUWATCH_PROBE_SOCKET is set, as the chart does) stops at once:
    :class:`~agent.probe_socket.ProbeSocketError` says who holds it. On a path nobody chose (the
    default), the receiver is optional: a held or unwritable path turns it off with one line, and
    the agent runs on (several simulated agents on one host, a user without /run/gpuwatch)."""
    if explicit is None:
        explicit = bool(os.environ.get("GPUWATCH_PROBE_SOCKET"))
    path = settings.probe_socket if path is None else path
    if not path:
        log.info("kernel probe receiver off (GPUWATCH_PROBE_SOCKET is empty)")
        return None
    if not hasattr(socket, "SO_PASSCRED"):  # macOS: no sender credentials, so no way to know who wrote
        log.warning("kernel probe receiver off: this platform has no SO_PASSCRED (Linux only)")
        return None
    try:
        return ProbeSocket(Path(path), settings.probe_socket_mode if mode is None else mode, holder)
    except ProbeSocketError as exc:
        if explicit:
            raise
        log.warning("kernel probe receiver off: %s", exc)
        return None


def from_settings(settings: AgentSettings, sock: ProbeSocket, instance: str, submit: Submit,
                  cpu: ThreadCpu) -> KernelReceiver:
    """The receiver of an agent's settings on ``sock`` (not started)."""
    return KernelReceiver(sock, settings.node_name, instance, submit, cpu=cpu, simulated=bool(settings.simulate),
                          config=ReceiverConfig(cpu_budget=settings.probe_cpu_budget))
