"""CPU time of the agent's own threads, by account, read from per-thread CPU clocks.

Why: the agent's CPU budget is a promise about the agent, not about the process it runs
in. In ``gpuwatch up`` the same process runs the collector, the REST API and the web
page; measured on the process (``time.process_time``), ten seconds of API calls made the
budget stretch sampling a hundredfold. So every agent thread is registered under an
account, and an account's CPU time is the sum of its threads' CPU clocks:

* ``sampling``: the sampling thread and the XID event thread (what the CPU budget governs);
* ``transport``: the framer's timer, the Kafka sender's loop and spool worker, the control
  consumer, and frame encoding done on the sampling thread (moved over with
  :meth:`ThreadCpu.transfer`), paid from the transport's own budget;
* ``http``: the CPU of each ``/metrics`` request, added by the handler;
* ``inference``: the thread that scrapes the inference servers of pods that ask for it
  (:mod:`agent.inference.scraper`), on its own period, outside the sampling budget.

Cost: a reading is one ``clock_gettime(2)`` per registered thread (about a microsecond:
Linux has no vDSO path for another thread's CPU clock), against tens of microseconds to
open and parse ``/proc/self/task/<tid>/stat``. The agent reads once per sampling step.

A thread's clock id encodes its kernel thread id, which a later thread may reuse, so a
thread leaves the ledger before it ends (:meth:`ThreadCpu.spawn` does that); its last
reading stays in the account, which therefore never goes backwards. A clock that fails
to read (the thread ended without leaving) is retired the same way. Where the platform
has no ``pthread_getcpuclockid`` (macOS), a thread's time is read with ``time.thread_time``
when that thread itself reads the ledger (the sampling thread does, at every step), and
is otherwise its last such reading.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

SAMPLING = "sampling"
TRANSPORT = "transport"
HTTP = "http"
INFERENCE = "inference"
ACCOUNTS = (SAMPLING, TRANSPORT, HTTP, INFERENCE)


@dataclass(slots=True)
class _Clock:
    account: str
    clock_id: int | None  # None: no per-thread clock id on this platform
    base: float  # the thread's CPU time when it joined the ledger
    last: float  # at the last reading

    @property
    def used(self) -> float:
        return self.last - self.base


class ThreadCpu:
    """A ledger of CPU seconds per account: registered threads' clocks plus added amounts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clocks: dict[int, _Clock] = {}  # thread ident -> its clock
        self._extra: defaultdict[str, float] = defaultdict(float)  # retired threads, transfers, per-request charges

    def register(self, account: str) -> None:
        """Count the calling thread's CPU time in ``account`` from now on."""
        ident = threading.get_ident()
        clock_id = time.pthread_getcpuclockid(ident) if hasattr(time, "pthread_getcpuclockid") else None
        now = time.thread_time() if clock_id is None else time.clock_gettime(clock_id)
        clock = _Clock(account, clock_id, now, now)
        with self._lock:
            self._retire(ident)
            self._clocks[ident] = clock

    def unregister(self) -> None:
        """The calling thread leaves the ledger (call it before the thread ends); its time stays."""
        with self._lock:
            self._retire(threading.get_ident())

    def spawn(self, account: str, target: Callable[[], object], name: str) -> threading.Thread:
        """A daemon thread (not started) that runs ``target`` with its CPU counted in ``account``."""

        def run() -> None:
            self.register(account)
            try:
                target()
            finally:
                self.unregister()

        return threading.Thread(target=run, name=name, daemon=True)

    def add(self, account: str, seconds: float) -> None:
        """Charge ``seconds`` to ``account`` (e.g. one HTTP request's CPU)."""
        with self._lock:
            self._extra[account] += seconds

    def transfer(self, source: str, dest: str, seconds: float) -> None:
        """Move ``seconds`` from ``source`` to ``dest``: work a thread of one account did for another."""
        with self._lock:
            self._extra[source] -= seconds
            self._extra[dest] += seconds

    def seconds(self, account: str) -> float:
        """CPU seconds of ``account`` so far."""
        with self._lock:
            total = self._extra.get(account, 0.0)
            for ident, clock in list(self._clocks.items()):
                if clock.account == account:
                    total += self._read(ident, clock)
            return total

    def accounts(self) -> dict[str, float]:
        """CPU seconds of every account (the known ones always present)."""
        with self._lock:
            totals = dict.fromkeys(ACCOUNTS, 0.0)
            for account, seconds in self._extra.items():
                totals[account] = totals.get(account, 0.0) + seconds
            for ident, clock in list(self._clocks.items()):
                totals[clock.account] = totals.get(clock.account, 0.0) + self._read(ident, clock)
            return totals

    def threads(self) -> int:
        with self._lock:
            return len(self._clocks)

    # ---- under the lock ----
    def _read(self, ident: int, clock: _Clock) -> float:
        if clock.clock_id is None:
            if ident == threading.get_ident():
                clock.last = time.thread_time()
            return clock.used
        try:
            clock.last = time.clock_gettime(clock.clock_id)
        except OSError:  # the thread ended without unregistering: keep what it had used
            self._extra[clock.account] += clock.used
            del self._clocks[ident]
            return 0.0
        return clock.used

    def _retire(self, ident: int) -> None:
        clock = self._clocks.pop(ident, None)
        if clock is None:
            return
        if clock.clock_id is None:
            if ident == threading.get_ident():
                clock.last = time.thread_time()
        else:
            with contextlib.suppress(OSError):  # already gone: its last reading stands
                clock.last = time.clock_gettime(clock.clock_id)
        self._extra[clock.account] += clock.used
