"""``gpuwatch agent``: the node agent (DaemonSet pod), serving dcgm-exporter-compatible /metrics."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.cpuclock import ThreadCpu
    from agent.runtime import Agent, EventSink, RecordSink
    from agent.stats import Snapshot

log = logging.getLogger("gpuwatch.agent")


def add_agent_flags(p: argparse.ArgumentParser) -> None:
    """Flags shared by ``agent`` and ``export`` (both run the sampler)."""
    p.add_argument("--simulate", type=int, metavar="N", help="simulate N GPUs instead of NVML")
    p.add_argument("--node-name", help="this node's name (default: $NODE_NAME or the hostname)")
    p.add_argument("--interval-floor", type=float, metavar="S", help="shortest interval (default 0.25)")
    p.add_argument("--interval-ceiling", type=float, metavar="S", help="longest interval (default 10)")
    p.add_argument("--busy-interval", type=float, metavar="S", help="interval while busy (default 1)")
    p.add_argument("--cpu-budget", type=float, metavar="F",
                   help="CPU budget of sampling, fraction of a core (default 0.01); never thins sampling below "
                        "the interval ceiling")
    p.add_argument("--kubeconfig", help="kubeconfig, when not running in a cluster")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser("agent", help="run the node agent")
    add_agent_flags(p)
    p.add_argument("--metrics-port", type=int, metavar="PORT", help="port of /metrics (default 9400)")
    p.add_argument("--metrics-host", help="address of /metrics (default 0.0.0.0)")
    p.add_argument("--kafka-bootstrap", help="send frames to this Kafka (default: don't send, /metrics only)")
    p.add_argument("--kafka-topic", help="telemetry topic (default gpu.telemetry)")
    p.add_argument("--kafka-reconnect-max-s", type=float, metavar="S",
                   help="longest wait between reconnects to Kafka (default 30)")
    p.add_argument("--spool-dir", help="on-disk spool while Kafka is down (default /var/lib/gpuwatch/spool)")
    p.add_argument("--spool-max-mb", type=int, help="spool bound in MiB (default 512)")
    p.add_argument("--spool-segment-mb", type=float, help="spool segment size in MiB (default 8; the bound holds "
                   "at least two)")
    p.add_argument("--transport-cpu-budget", type=float, metavar="F",
                   help="CPU budget of framing, sending and spooling, fraction of a core (default 0.01): replay "
                        "and reconnects wait for it")
    p.set_defaults(func=run)


def settings_from(args: argparse.Namespace) -> Any:
    from agent.settings import AgentSettings, load

    keys = AgentSettings.model_fields
    return load(AgentSettings, {k: v for k, v in vars(args).items() if k in keys})


def build_agent(settings: Any, *, cpu: ThreadCpu | None = None, instance: str | None = None,
                record_sinks: Sequence[RecordSink] = (), event_sinks: Sequence[EventSink] = ()) -> Agent:
    """The agent for these settings: real NVML, or a simulated fleet; attribution to match.

    ``cpu`` and ``instance`` are made first by a caller whose transport needs them (the framer
    stamps the instance and bills the agent's CPU accounts); the sinks get every record and event."""
    from agent.runtime import Agent, ScheduleConfig

    config = ScheduleConfig(
        floor=settings.interval_floor, ceiling=settings.interval_ceiling, busy=settings.busy_interval,
        cpu_budget=settings.cpu_budget, slow_call_threshold=settings.slow_call_ms / 1000.0,
    )
    attribution: Any = None
    if settings.simulate:
        import zlib

        from agent.driver.simulated import SimulatedFleet
        from agent.simulate.attribution import SimulatedAttribution

        # seeded by the node's name: two simulated nodes have GPUs of their own (one UUID on two
        # nodes is a fault the collector reports, not what a simulation should show)
        driver: Any = SimulatedFleet(settings.simulate, seed=zlib.crc32(settings.node_name.encode()) & 0xFFFF)
        attribution = SimulatedAttribution(driver) if settings.attribution else None
    else:
        from agent.driver.nvml import NvmlDriver

        driver = NvmlDriver()
        if settings.attribution:
            from agent.attribution import Attributor

            attribution = Attributor.from_environment(
                settings.node_name, kubeconfig=settings.kubeconfig,
                podresources_socket=settings.podresources_socket, proc_root=Path(settings.host_proc_root),
            )
    host = None
    if settings.host_evidence:
        from agent.host import HostReader

        # a simulated GPU's pids are not processes of this machine: only the node's figures are real
        host = HostReader(settings.host_proc_root, settings.host_cgroup_root, processes=not settings.simulate)
    from agent.cpuclock import ThreadCpu

    cpu = cpu or ThreadCpu()
    agent = Agent(driver, settings.node_name, config, attribution, cpu=cpu, instance=instance,
                  record_sinks=record_sinks, event_sinks=event_sinks, host=host,
                  pod_figures=_inference_scraper(settings, attribution, cpu))
    log.info("agent instance %s (the 'instance' header of its messages)", agent.instance)
    return agent


def _inference_scraper(settings: Any, attribution: Any, cpu: ThreadCpu) -> Any:
    """The scraper of pods' inference endpoints, where the agent sees this node's pods (Kubernetes);
    with ``--simulate``, the simulated serving pods' figures (agent/simulate/inference.py)."""
    if not settings.inference_scrape_period:
        log.info("inference scraping is off (GPUWATCH_INFERENCE_SCRAPE_PERIOD=0)")
        return None
    if settings.simulate:
        from agent.simulate.inference import SimulatedServerFigures

        return SimulatedServerFigures()
    if attribution is None or "kubernetes" not in attribution.sources():
        return None
    from agent.inference.scraper import InferenceScraper

    return InferenceScraper(attribution.pods, attribution.gpu_owners, cpu=cpu,
                            period=settings.inference_scrape_period, timeout=settings.inference_scrape_timeout)


def wait_for_signal() -> None:
    """Block until SIGTERM or SIGINT (graceful shutdown for Kubernetes)."""
    done = threading.Event()

    def _handler(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: shutting down", signum)
        done.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    while not done.wait(3600):
        pass


def run(args: argparse.Namespace) -> int:
    from agent.probe_socket import ProbeSocketError
    from agent.settings import SettingsError

    try:
        settings = settings_from(args)
    except SettingsError as exc:
        print(f"gpuwatch agent: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import pynvml

    from agent.cpuclock import ThreadCpu
    from agent.exposition import Exposition
    from agent.runtime import new_instance_id
    from agent.server import MetricsServer

    cpu, instance = ThreadCpu(), new_instance_id()
    try:
        pipeline = build_sending(settings, instance, cpu)  # nothing runs yet: the agent's sinks need it
    except (SpoolOpenError, ProbeSocketError) as exc:
        print(f"gpuwatch agent: {exc}", file=sys.stderr)
        return 1
    agent = build_agent(settings, cpu=cpu, instance=instance,
                        record_sinks=pipeline.record_sinks() if pipeline else (),
                        event_sinks=pipeline.event_sinks() if pipeline else ())
    if pipeline is not None and pipeline.kernels is not None:
        pipeline.kernels.attribute_with(agent.attribution)  # for probes whose pid is on no GPU (yet)
    try:
        agent.open()
    except pynvml.NVMLError as exc:
        print(f"gpuwatch agent: NVML could not start ({exc}); use --simulate N on a machine without GPUs",
              file=sys.stderr)
        if pipeline is not None:
            pipeline.stop()
        return 1
    try:
        server = MetricsServer(settings.metrics_host, settings.metrics_port,
                               Exposition(agent, pipeline.stats if pipeline else None))
    except OSError as exc:
        print(f"gpuwatch agent: cannot listen on {settings.metrics_host}:{settings.metrics_port}: {exc}",
              file=sys.stderr)
        agent.stop()
        if pipeline is not None:
            pipeline.stop()
        return 1
    if pipeline is not None:
        pipeline.start()
    agent.start()
    server.start()
    kind = "simulated" if settings.simulate else "NVML"
    sending = f"; sending to {settings.kafka_topic} at {settings.kafka_bootstrap}" if pipeline else ""
    if pipeline is not None and pipeline.kernels is not None:
        sending += f"; kernel probe windows on {pipeline.kernels.sock.path}"
    print(f"gpuwatch agent: {len(agent.targets)} {kind} GPU targets on {settings.node_name}; "
          f"metrics on http://{settings.metrics_host}:{server.port}/metrics{sending}", flush=True)
    wait_for_signal()
    server.stop()
    agent.stop()  # sampling first, then the frames it made, then the sender (which spools what it cannot send)
    summary = f"gpuwatch agent: stopped; {agent.samples_total} samples"
    if pipeline is not None:
        pipeline.stop()
        summary += "; " + pipeline.summary()
    print(summary, flush=True)
    return 0


class SpoolOpenError(RuntimeError):
    """The spool directory cannot be used; the message names it and the flag."""


class Sending:
    """What ``--kafka-bootstrap`` adds to the agent: framer, sender (with spool), control listener,
    the profiler that answers the collector's profile requests and the kernel probe receiver
    (None when ``GPUWATCH_PROBE_SOCKET`` is empty; without Kafka its windows would have nowhere to go)."""

    def __init__(self, framer: Any, sender: Any, control: Any, profiler: Any, kernels: Any = None) -> None:
        self.framer, self.sender, self.control, self.profiler = framer, sender, control, profiler
        self.kernels = kernels

    def record_sinks(self) -> tuple[RecordSink, ...]:
        sinks: tuple[RecordSink, ...] = (self.framer.add,)
        if self.profiler.config.enabled:
            sinks += (self.profiler.observe,)
        if self.kernels is not None:
            sinks += (self.kernels.observe,)
        return sinks

    def event_sinks(self) -> tuple[EventSink, ...]:
        return (self.framer.add_event,)

    def stats(self) -> tuple[Snapshot, ...]:
        """The snapshots of every part, for /metrics."""
        kernels = (self.kernels.stats(),) if self.kernels is not None else ()
        return (*self.sender.snapshots(), self.framer.stats(), self.control.stats(), self.profiler.stats(), *kernels)

    def start(self) -> None:
        self.sender.start()
        self.framer.start()
        self.profiler.start()
        if self.kernels is not None:
            self.kernels.start()
        self.control.start()

    def stop(self) -> None:
        self.control.stop()
        if self.kernels is not None:
            self.kernels.stop()  # it submits to the sender: before it
        self.profiler.stop()
        self.framer.stop()
        self.sender.stop(10.0)

    def summary(self) -> str:
        """What was framed, sent and lost (one line, for the shutdown message)."""
        f, st = self.framer.stats(), self.sender.stats()
        return (f"{f.records_total} in {f.frames_total} frames; Kafka: {st['sent_total']} messages sent "
                f"({st['replayed_total']} from the spool), {st['spool_messages']} left in the spool; lost: "
                f"{st['dropped_total']} dropped by the spool bound, {st['memory_dropped_total']} from memory, "
                f"{st['corrupt_messages_total']} to spool damage, {st['rejected_total']} rejected by Kafka")


def build_sending(settings: Any, instance: str, cpu: ThreadCpu) -> Sending | None:
    """Frames to Kafka through the spool, when a bootstrap server is configured (binds the kernel
    probe socket, opens the spool; starts nothing: :meth:`Sending.start` does, once the agent is open).
    :class:`~agent.probe_socket.ProbeSocketError` when another agent holds the probe socket."""
    kafka = settings.kafka()
    if kafka is None:
        if settings.probe_socket:
            log.info("kernel probe receiver off: without --kafka-bootstrap its windows would have nowhere to go")
        return None
    from agent import kernels
    from agent.control import ControlListener
    from agent.framing import Framer
    from agent.producer import Producer
    from agent.profiling import from_settings
    from agent.sender import Sender
    from agent.spool import Spool, SpoolLockedError

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # it logs an ERROR per reconnect attempt
    probe_socket = kernels.socket_from_settings(settings)  # first: the cheaper refusal
    try:
        spool = Spool(settings.spool_dir, max_bytes=settings.spool_max_mb << 20,
                      segment_bytes=settings.spool_segment_bytes())
    except SpoolLockedError as exc:
        if probe_socket is not None:
            probe_socket.close()
        raise SpoolOpenError(f"{exc}: another agent runs on this node, or give this one its own --spool-dir") from None
    except OSError as exc:
        if probe_socket is not None:
            probe_socket.close()
        raise SpoolOpenError(f"cannot use the spool directory {settings.spool_dir} ({exc.strerror or exc}); "
                             "choose another with --spool-dir (env GPUWATCH_SPOOL_DIR)") from None

    def keyframes(why: str) -> None:  # called by the sender (its loop thread), after the framer exists
        log.info("keyframes for every GPU: %s", why)
        framer.request_keyframe(None)

    node = settings.node_name
    sender = Sender(kafka, spool, on_keyframe_needed=keyframes, cpu=cpu,
                    transport_cpu_budget=settings.transport_cpu_budget)
    producer: Producer = sender  # the agent's transport seam: Kafka here, in-process in `up`
    framer = Framer(producer.submit, node=node, instance=instance, window=settings.frame_window,
                    max_delay_s=settings.frame_max_delay, cpu=cpu)
    profiler = from_settings(settings, instance, producer.submit, cpu)
    control = ControlListener(kafka, node, instance, framer.request_keyframe, on_profile=profiler.request, cpu=cpu)
    receiver = None if probe_socket is None else kernels.from_settings(settings, probe_socket, instance,
                                                                        producer.submit, cpu)
    return Sending(framer, sender, control, profiler, receiver)
