"""The node agent's stack: sampler, framer, profiler, kernel probe receiver and /metrics on one producer.

Why one place: ``gpuwatch agent`` sends through Kafka (the sender, with its spool, and the
control listener that brings the collector's keyframe and profile requests), ``gpuwatch up``
through the in-process transport, and ``gpuwatch agent`` without ``--kafka-bootstrap`` only
serves /metrics. The parts and the order they start and stop in are the same; only the
producer differs, and it is passed in. Every part is built with what it needs (the framer
with the producer's ``submit``, the sampler with the framer's sinks), then :meth:`start`
starts them, and :meth:`shutdown` stops them last-started first under one deadline: sampling
first, then the frames it made, then the sender (which spools what it cannot send).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwatch.lifecycle import Parts, ThreadLifecycle

if TYPE_CHECKING:
    from agent.cpuclock import ThreadCpu
    from agent.producer import Producer
    from agent.runtime import Agent, EventSink, RecordSink
    from agent.stats import Snapshot

log = logging.getLogger("gpuwatch.agent")
SHUTDOWN_S = 20.0  # the agent's, the framer's and the profiler's 5 s each, the sender's 10 s


class SpoolOpenError(RuntimeError):
    """The spool directory cannot be used; the message names it and the flag."""


class MetricsPortError(RuntimeError):
    """/metrics cannot listen where it was asked to; the message names the address and the flag."""


def build_agent(settings: Any, *, cpu: ThreadCpu | None = None, instance: str | None = None,
                record_sinks: Sequence[RecordSink] = (), event_sinks: Sequence[EventSink] = ()) -> Agent:
    """The sampler for these settings: real NVML, or a simulated fleet; attribution to match.

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


def kafka_producer(settings: Any, cpu: ThreadCpu, keyframes: Callable[[str], None]) -> Any:
    """The sender to Kafka, spooling to disk while Kafka is away (None without ``--kafka-bootstrap``).
    :class:`SpoolOpenError` when the spool directory cannot be used. ``keyframes`` is called (from
    the sender's thread) when every stream needs a keyframe (the spool dropped messages)."""
    kafka = settings.kafka()
    if kafka is None:
        return None
    from agent.sender import Sender
    from agent.spool import Spool, SpoolLockedError

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # it logs an ERROR per reconnect attempt
    try:
        spool = Spool(settings.spool_dir, max_bytes=settings.spool_max_mb << 20,
                      segment_bytes=settings.spool_segment_bytes())
    except SpoolLockedError as exc:
        raise SpoolOpenError(f"{exc}: another agent runs on this node, or give this one its own --spool-dir") from None
    except OSError as exc:
        raise SpoolOpenError(f"cannot use the spool directory {settings.spool_dir} ({exc.strerror or exc}); "
                             "choose another with --spool-dir (env GPUWATCH_SPOOL_DIR)") from None
    return Sender(kafka, spool, on_keyframe_needed=keyframes, cpu=cpu,
                  transport_cpu_budget=settings.transport_cpu_budget)


class AgentStack:
    """The agent's parts on one producer (None: /metrics only). Built in order (producer, framer,
    profiler, probe receiver, sampler, control listener), nothing running until :meth:`start`.

    ``probe_socket`` is the kernel probe's bound socket (None: no receiver); ``control`` says
    whether the collector's requests come over Kafka (the control listener), as they do for
    ``gpuwatch agent``; in ``gpuwatch up`` the collector calls the framer and profiler itself."""

    def __init__(self, settings: Any, producer: Producer | None, *, cpu: ThreadCpu, instance: str,
                 probe_socket: Any = None, sender: Any = None, control: bool = False) -> None:
        self.settings = settings
        self.producer = producer
        self.sender = sender  # the producer when it is Kafka's (its counters and summary)
        self.framer: Any = None
        self.profiler: Any = None
        self.receiver: Any = None
        self.control: Any = None
        self.server: Any = None
        self._parts = Parts()
        sinks: tuple[RecordSink, ...] = ()
        events: tuple[EventSink, ...] = ()
        if producer is not None:
            from agent.framing import Framer
            from agent.profiling import from_settings

            self.framer = Framer(producer.submit, node=settings.node_name, instance=instance,
                                 window=settings.frame_window, max_delay_s=settings.frame_max_delay, cpu=cpu,
                                 layout=settings.frame_layout, deflate=settings.frame_deflate)
            self.profiler = from_settings(settings, instance, producer.submit, cpu)
            sinks, events = (self.framer.add,), (self.framer.add_event,)
            if self.profiler.config.enabled:
                sinks += (self.profiler.observe,)
            if probe_socket is not None:
                from agent import kernels

                self.receiver = kernels.from_settings(settings, probe_socket, instance, producer.submit, cpu)
                sinks += (self.receiver.observe,)
        elif probe_socket is not None:
            probe_socket.close()
        self.agent = build_agent(settings, cpu=cpu, instance=instance, record_sinks=sinks, event_sinks=events)
        if self.receiver is not None:
            self.receiver.attribute_with(self.agent.attribution)  # for probes whose pid is on no GPU (yet)
        if control and producer is not None and settings.kafka() is not None:
            from agent.control import ControlListener

            self.control = ControlListener(settings.kafka(), settings.node_name, instance,
                                           self.framer.request_keyframe, on_profile=self.profiler.request, cpu=cpu)

    def request_keyframes(self, why: str) -> None:
        """Every stream starts again from a keyframe (the sender's spool dropped messages)."""
        log.info("keyframes for every GPU: %s", why)
        if self.framer is not None:
            self.framer.request_keyframe(None)

    def stats(self) -> tuple[Snapshot, ...]:
        """The snapshots of every transport part, for /metrics."""
        out: tuple[Snapshot, ...] = tuple(self.sender.snapshots()) if self.sender is not None else ()
        if self.framer is not None:
            out += (self.framer.stats(), self.profiler.stats())
        if self.control is not None:
            out += (self.control.stats(),)
        if self.receiver is not None:
            out += (self.receiver.stats(),)
        return out

    def open(self) -> None:
        """Open the driver (``pynvml.NVMLError`` when NVML cannot start), then bind /metrics
        (:class:`MetricsPortError`); nothing samples or sends yet. What was opened is closed
        again when the other fails."""
        from agent.exposition import Exposition
        from agent.server import MetricsServer

        s = self.settings
        try:
            self.agent.open()
        except BaseException:
            self._stop_unstarted()
            raise
        try:
            self.server = MetricsServer(s.metrics_host, s.metrics_port, Exposition(self.agent, self.stats))
        except OSError as exc:
            self.agent.stop()
            self._stop_unstarted()
            raise MetricsPortError(f"cannot serve /metrics on {s.metrics_host}:{s.metrics_port}: {exc.strerror}; "
                                   "choose another --metrics-port (0: any free port)") from exc

    def _stop_unstarted(self) -> None:
        """Release what the parts hold before any ran (the probe socket, the spool's lock)."""
        for part in (self.control, self.receiver, self.profiler, self.framer):
            if part is not None:
                part.stop()
        if self.sender is not None:
            self.sender.stop(10.0)

    def start(self) -> None:
        """Start every part (after :meth:`open`), the producer first and the sampler last but one:
        each part's consumer runs before it makes anything."""
        p = self._parts
        if self.sender is not None:
            self.sender.start()
            p.add("the sender", self.sender.stop, most=10.0)  # it spools what it cannot send
        if self.framer is not None:
            self.framer.start()
            p.add("the framer", self.framer.stop, most=5.0)  # it emits what is pending
            self.profiler.start()
            p.add("the profiler", self.profiler.stop, most=5.0)  # after the capture under way
        if self.receiver is not None:
            self.receiver.start()
            p.add("the kernel probe receiver", self.receiver.stop, most=2.0)  # it submits to the producer
        if self.control is not None:
            self.control.start()
            p.add("the control listener", self.control.stop, most=5.0)
        self.agent.start()
        p.add("the sampler", self.agent.stop, most=5.0)
        if self.server is not None:
            self.server.start()
            p.add("/metrics", lambda _t: self.server.stop())

    def flush(self, timeout: float) -> bool:
        """Hand what the framer holds to the producer, and (Kafka) wait up to ``timeout`` for it to be sent."""
        if self.framer is not None:
            self.framer.flush()
        return self.sender.flush(timeout) if self.sender is not None else True

    def shutdown(self, timeout: float = SHUTDOWN_S) -> None:
        """Stop every part, last-started first, under one deadline."""
        self._parts.shutdown_sync(timeout)

    def summary(self) -> str:
        """What was sampled, framed, sent and lost (one line, for the shutdown message)."""
        text = f"{self.agent.samples_total} samples"
        if self.framer is None or self.sender is None:
            return text
        f, st = self.framer.stats(), self.sender.stats()
        return (f"{text}; {f.records_total} in {f.frames_total} frames; Kafka: {st['sent_total']} messages sent "
                f"({st['replayed_total']} from the spool), {st['spool_messages']} left in the spool; lost: "
                f"{st['dropped_total']} dropped by the spool bound, {st['memory_dropped_total']} from memory, "
                f"{st['corrupt_messages_total']} to spool damage, {st['rejected_total']} rejected by Kafka")


def _conforms(stack: AgentStack) -> ThreadLifecycle:
    return stack  # mypy checks that the stack has the one lifecycle
