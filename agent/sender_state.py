"""The sender's bookkeeping by time: backoffs, the stop deadline, budget waits, keyframe requests, counts.

Why apart from the loop (:mod:`agent.sender_loop`): each of these is a decision the sender
takes by the clock or by what happened (when to reconnect, when the disk may be tried
again, whether the stop deadline passed, whether a piece of work waits for the CPU budget,
when the collector needs keyframes). Here they are plain classes with no I/O, no lock and
no clock of their own: the loop reads its clock once and passes ``now`` in, so the tests
(``tests/test_sender_state.py``) drive them on made-up times, without a broker or a sleep.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent.scheduler import CpuPacer
from agent.stats import counter, gauge, snapshot

Clock = Callable[[], float]  # monotonic seconds; the Sender's is time.monotonic unless a test passes one

SPOOL_RETRY_S = (1.0, 30.0)  # after a failed spool write: first and longest wait before the next one


class Backoff:
    """Exponential waits after failures: ``first``, doubling to ``longest``; back to ``first`` on success.

    Used for reconnects (``reconnect_backoff_ms`` doubling to ``reconnect_backoff_max_ms``)
    and for spool writes after the disk refused one (1 s doubling to 30 s).
    """

    def __init__(self, first: float, longest: float) -> None:
        self.first = first
        self.longest = longest
        self.delay = first  # the wait the next failure starts
        self.until = 0.0  # no attempt before this (monotonic seconds)

    def failed(self, now: float) -> float:
        """A failure at ``now``: no attempt for the current delay (returned), and the next delay doubles."""
        wait = self.delay
        self.until = now + wait
        self.delay = min(self.longest, self.delay * 2)
        return wait

    def succeeded(self) -> bool:
        """Back to the first delay; True if it had grown (the failures were a condition that cleared)."""
        grown = self.delay > self.first
        self.delay = self.first
        return grown

    def due(self, now: float) -> bool:
        return now >= self.until

    def wait(self, now: float, poll: float) -> float:
        """How long to sleep before looking again: until the next attempt, at most ``poll``."""
        return min(self.until - now, poll)

    def clear(self) -> None:
        """Allow an attempt at once (the last chance at shutdown)."""
        self.until = 0.0


class StopDeadline:
    """Set by ``stop(timeout)``: the loop delivers until the deadline, then spools what is left."""

    def __init__(self) -> None:
        self.stopping = False
        self.at = 0.0

    def request(self, now: float, timeout: float) -> None:
        self.at = now + timeout
        self.stopping = True

    def passed(self, now: float) -> bool:
        return self.stopping and now >= self.at

    def finished(self, now: float, *, connected: bool, drained: Callable[[], bool]) -> bool:
        """Whether the loop ends: stopping, and not connected, the deadline past or everything delivered
        (``drained`` is asked last, and only while stopping: it takes locks)."""
        return self.stopping and (not connected or now >= self.at or drained())

    def left(self, now: float, floor: float = 1.0) -> float:
        """Seconds left for closing the producer (at least ``floor``)."""
        return max(floor, self.at - now)


class BudgetGate:
    """Whether deferrable work waits for the transport's CPU budget: at most one wait in a row per work.

    The work that may not wait (spooling what is sampled during an outage, the control
    topic's client retrying) can keep the bucket empty, and a reconnect or a replay that
    waited for a full bucket would never run (the fault harness found an agent that had not
    reconnected 34 s after the broker was back, everything after the outage in its spool).
    """

    def __init__(self, pacer: CpuPacer) -> None:
        self.pacer = pacer
        self._waited_last: set[str] = set()  # work that waited once: it runs next time

    def delay(self, what: str, *, stopping: bool) -> float:
        """Seconds ``what`` ("connect", "replay") waits now; 0: it runs (after one wait, while stopping)."""
        if stopping or what in self._waited_last:
            self._waited_last.discard(what)
            return 0.0
        return max(self.pacer.delay(), 0.0)

    def waited(self, what: str, seconds: float) -> None:
        """``what`` waited ``seconds`` for the budget: counted, and it will not wait next time."""
        self.pacer.waited(seconds)
        self._waited_last.add(what)


class Breaks:
    """When the frames' base may be lost downstream, so every GPU's next frame must be a keyframe.

    Frames are deltas; a collector that lost a stream's base (a broker that came back empty)
    decodes nothing until a keyframe. Each method returns why keyframes are needed, or None:
    Kafka became unreachable (the spooled frames then start with keyframes), a (re)connect,
    a replay that emptied the spool, frames dropped (from memory or the full spool).
    """

    def __init__(self, drops: int = 0) -> None:
        self.down = False  # a connect or send failed and nothing succeeded since: spool at once
        self.drops_seen = drops  # drops already answered with a keyframe request
        self.replaying = False  # spooled messages were sent since the spool was last empty

    def unreachable(self) -> str | None:
        if self.down:
            return None
        self.down = True
        return "Kafka unreachable"

    def connected(self) -> str:
        self.down = False
        return "connected to Kafka"

    def dropped(self, total: int) -> str | None:
        """``total``: every drop so far (memory and spool); a request when it grew."""
        if total <= self.drops_seen:
            return None
        self.drops_seen = total
        return "frames were dropped"

    def replayed(self) -> None:
        self.replaying = True

    def round_sent(self, *, spool_empty: bool) -> str | None:
        """A round was fully acknowledged: a request when it ended a replay."""
        if not (self.replaying and spool_empty):
            return None
        self.replaying = False
        return "the spool's replay is done"


@dataclass(slots=True)
class Tally:
    """The sender's counts, shared by its loop, its spool side and :meth:`~agent.sender.Sender.snapshots`."""

    sent: int = 0
    spooled: int = 0
    replayed: int = 0
    send_errors: int = 0
    rejected: int = 0
    connects: int = 0


@snapshot
class SenderStats:
    """The sender's counters and levels for ``/metrics`` (the spool's are in :class:`~agent.spool.SpoolStats`)."""

    sent_total: int = counter("gpuwatch_agent_kafka_sent", "Messages acknowledged by Kafka.")
    spooled_total: int = counter("gpuwatch_agent_kafka_spooled", "Messages written to the on-disk spool.")
    replayed_total: int = counter("gpuwatch_agent_kafka_replayed", "Spooled messages sent after an outage.")
    send_errors_total: int = counter("gpuwatch_agent_kafka_send_errors", "Failed connects and sends to Kafka.")
    rejected_total: int = counter(
        "gpuwatch_agent_kafka_rejected", "Messages Kafka refused for themselves (too large, corrupt): dropped.")
    memory_dropped_total: int = counter(
        "gpuwatch_agent_memory_dropped",
        "Oldest messages dropped from memory while the spool could not take them (its disk failing).")
    memory_messages: int = gauge("gpuwatch_agent_memory_messages", "Messages waiting in memory.")
    memory_bytes: int = gauge("gpuwatch_agent_memory_bytes", "Bytes of messages waiting in memory.")
    connected: int = gauge("gpuwatch_agent_kafka_connected", "1 while the producer is connected.")
    connects_total: int = counter("gpuwatch_agent_kafka_connects", "Connections made to Kafka (first and reconnects).")
    paced_seconds_total: float = counter(
        "gpuwatch_agent_transport_paced_seconds",
        "Seconds the transport's deferrable work (replay, reconnects) waited for its CPU budget.")
    cpu_budget_ratio: float = gauge("gpuwatch_agent_transport_cpu_budget_ratio",
                                    "The transport's CPU budget, fraction of one core.")
