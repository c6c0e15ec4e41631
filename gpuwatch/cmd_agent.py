"""``gpuwatch agent``: the node agent (DaemonSet pod), serving dcgm-exporter-compatible /metrics."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

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
    from agent.runtime import new_instance_id
    from gpuwatch.agent_stack import AgentStack, MetricsPortError, SpoolOpenError, kafka_producer

    cpu, instance = ThreadCpu(), new_instance_id()
    stack: AgentStack | None = None

    def keyframes(why: str) -> None:  # called by the sender (its loop thread), once the stack exists
        if stack is not None:
            stack.request_keyframes(why)

    probe_socket = None
    try:
        if settings.kafka() is None:
            if settings.probe_socket:
                log.info("kernel probe receiver off: without --kafka-bootstrap its windows would have nowhere to go")
        else:
            from agent import kernels

            probe_socket = kernels.socket_from_settings(settings)  # first: the cheaper refusal
        sender = kafka_producer(settings, cpu, keyframes)
    except (SpoolOpenError, ProbeSocketError) as exc:
        if probe_socket is not None:
            probe_socket.close()
        print(f"gpuwatch agent: {exc}", file=sys.stderr)
        return 1
    # the agent's one producer seam: Kafka here, the in-process transport in `up`, none: /metrics only
    stack = AgentStack(settings, sender, cpu=cpu, instance=instance, probe_socket=probe_socket, sender=sender,
                       control=True)
    try:
        stack.open()
    except pynvml.NVMLError as exc:
        print(f"gpuwatch agent: NVML could not start ({exc}); use --simulate N on a machine without GPUs",
              file=sys.stderr)
        return 1
    except MetricsPortError as exc:
        print(f"gpuwatch agent: {exc}", file=sys.stderr)
        return 1
    stack.start()
    kind = "simulated" if settings.simulate else "NVML"
    sending = f"; sending to {settings.kafka_topic} at {settings.kafka_bootstrap}" if sender is not None else ""
    if stack.receiver is not None:
        sending += f"; kernel probe windows on {stack.receiver.sock.path}"
    print(f"gpuwatch agent: {len(stack.agent.targets)} {kind} GPU targets on {settings.node_name}; "
          f"metrics on http://{settings.metrics_host}:{stack.server.port}/metrics{sending}", flush=True)
    wait_for_signal()
    stack.shutdown()  # sampling first, then the frames it made, then the sender (which spools what it cannot send)
    print(f"gpuwatch agent: stopped; {stack.summary()}", flush=True)
    return 0
