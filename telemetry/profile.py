"""The CPU profile an agent sends back for an anomaly: folded stacks, or why there are none.

Why in the shared contract: the agent writes it (:mod:`agent.profiling`, after a
:class:`telemetry.control.ProfileRequest`), the collector reads and stores it, and the API
and web page say what each status means; the statuses, their sentences, the size limits
and the strict decoder are therefore written once, here.

A :class:`ProfileResult` is the value of a ``profile`` message on the telemetry topic,
keyed like the GPU's frames (the node: :func:`telemetry.wire.partition_key`) with the stream
headers. It names the anomaly (the collector's row id from the request), the node and GPU, and one
:class:`ProcessProfile` per process that was on the GPU: its status (``captured`` or the
reason it was not), and for a captured one its stacks in the folded format that py-spy's
``--format raw`` writes (``outer;inner;leaf count``, root first). The decoder rejects
anything else with a :class:`ValueError` naming the field, so the collector can count it
and set it aside.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias, get_args

from telemetry.wire import MessageType, finite_number, json_object

Status: TypeAlias = Literal[
    "captured", "disabled", "no_process", "not_python", "process_gone", "rate_limited", "cpu_budget",
    "py_spy_missing", "permission_denied", "timeout", "busy", "failed",
]
STATUSES: Final[tuple[Status, ...]] = get_args(Status)

#: What each status means, in words a user reads next to the anomaly.
MEANING: Final[dict[str, str]] = {
    "captured": "stacks sampled with py-spy",
    "disabled": "CPU profiling is off on this agent (GPUWATCH_PROFILE=true, or the chart's agent.profiling.enabled)",
    "no_process": "no process was on the GPU when the request came",
    "not_python": "the process is not a Python program (py-spy profiles Python only)",
    "process_gone": "the process ended before or while it was sampled",
    "rate_limited": "this process was profiled recently (GPUWATCH_PROFILE_PERIOD_S)",
    "cpu_budget": "the agent's profiling CPU budget is spent (GPUWATCH_PROFILE_CPU_BUDGET)",
    "py_spy_missing": "py-spy is not installed on the agent (pip install 'gpuwatch[profile]')",
    "permission_denied": "py-spy may not attach: the agent needs SYS_PTRACE and the host's PID namespace",
    "timeout": "py-spy did not finish in time",
    "busy": "another profile was being taken; this request was not queued",
    "failed": "py-spy failed",
}

#: A profile message's value is cut to fit this (the agent drops the lightest stacks first).
MAX_VALUE_BYTES: Final = 1 << 20
MAX_PROCESSES: Final = 64
MAX_STACKS: Final = 20_000
MAX_STACK_CHARS: Final = 16_384
MAX_REASON_CHARS: Final = 1000

Stack: TypeAlias = tuple[str, int]
"""One folded stack (frames root first, ``;``-separated) and how many samples it had."""


@dataclass(frozen=True, slots=True)
class ProcessProfile:
    """One process on the GPU: its stacks, or why it has none (``reason`` says more than the status)."""

    pid: int
    status: Status
    reason: str = ""
    command: str = ""
    stacks: tuple[Stack, ...] = ()

    @property
    def samples(self) -> int:
        return sum(n for _, n in self.stacks)

    def to_dict(self) -> dict[str, object]:
        return {"pid": self.pid, "status": self.status, "reason": self.reason, "command": self.command,
                "stacks": [[s, n] for s, n in self.stacks]}


@dataclass(frozen=True, slots=True)
class ProfileResult:
    """An agent's answer to one profile request (``processes`` empty: ``status`` says why)."""

    node: str
    gpu: str
    anomaly: int
    ts: float
    processes: tuple[ProcessProfile, ...] = field(default=())
    status: Status = "captured"
    reason: str = ""

    @property
    def overall(self) -> tuple[Status, str]:
        """``captured`` when any process was; else the first process's status and reason (or the result's)."""
        if any(p.status == "captured" for p in self.processes):
            n = sum(1 for p in self.processes if p.status == "captured")
            return "captured", f"{n} of {len(self.processes)} process(es) sampled"
        if self.processes:
            first = self.processes[0]
            return first.status, first.reason or MEANING[first.status]
        return self.status, self.reason or MEANING[self.status]

    def encode(self) -> bytes:
        body = {"type": MessageType.PROFILE.value, "node": self.node, "gpu": self.gpu, "anomaly": self.anomaly,
                "ts": self.ts, "status": self.status, "reason": self.reason,
                "processes": [p.to_dict() for p in self.processes]}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> ProfileResult:
        """A profile message's value; :class:`ValueError` names the field that was wrong."""
        if len(raw) > MAX_VALUE_BYTES:
            raise ValueError(f"profile message of {len(raw)} bytes is over the {MAX_VALUE_BYTES}-byte limit")
        body = json_object(raw, "profile message")
        if body.get("type") != MessageType.PROFILE.value:
            raise ValueError(f"profile message field 'type' is {body.get('type')!r}, not 'profile'")
        node, gpu = _text(body, "node", nonempty=True), _text(body, "gpu", nonempty=True)
        anomaly = _int(body, "anomaly", 1, 2**63 - 1)
        ts = body.get("ts")
        if not finite_number(ts):
            raise ValueError("profile message field 'ts' must be a finite number")
        procs = body.get("processes")
        if not isinstance(procs, list) or len(procs) > MAX_PROCESSES:
            raise ValueError(f"profile message field 'processes' must be a list of at most {MAX_PROCESSES}")
        processes = tuple(_process(p, f"processes[{i}]") for i, p in enumerate(procs))
        return cls(node, gpu, anomaly, float(ts), processes, _status(body, "status"),
                   _text(body, "reason")[:MAX_REASON_CHARS])


#: the frame that stands for samples of a thread without Python frames (native code only)
NO_PYTHON_FRAMES = "<no Python frames>"


def parse_folded(text: str) -> list[Stack]:
    """Stacks from folded text (``a;b;c 12`` per line; py-spy's ``--format raw``), merged by stack.

    A line with a count and no frames (py-spy writes `` 498`` for the samples of a thread with
    no Python frames, such as PyTorch's native worker threads under ``--idle``: seen on the
    real H200) counts under :data:`NO_PYTHON_FRAMES`. A line that is not ``stack count``
    raises :class:`ValueError` naming its line number."""
    counts: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack.strip() and count.isdigit():
            stack = NO_PYTHON_FRAMES
        if not stack or not count.isdigit() or int(count) <= 0:
            raise ValueError(f"folded stacks line {number} is not 'frame;frame;... count': {line[:80]!r}")
        counts[stack] = counts.get(stack, 0) + int(count)
    return list(counts.items())


def _process(obj: object, where: str) -> ProcessProfile:
    if not isinstance(obj, dict):
        raise ValueError(f"profile message field '{where}' must be an object")
    stacks = obj.get("stacks")
    if not isinstance(stacks, list) or len(stacks) > MAX_STACKS:
        raise ValueError(f"profile message field '{where}.stacks' must be a list of at most {MAX_STACKS}")
    out: list[Stack] = []
    for j, item in enumerate(stacks):
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str) or not item[0]
                or len(item[0]) > MAX_STACK_CHARS or "\n" in item[0] or "\0" in item[0]
                or isinstance(item[1], bool) or not isinstance(item[1], int) or item[1] <= 0):
            raise ValueError(f"profile message field '{where}.stacks[{j}]' must be [\"frame;frame;...\", count > 0] "
                             f"(a stack of at most {MAX_STACK_CHARS} characters, no newline or NUL)")
        out.append((item[0], item[1]))
    return ProcessProfile(_int(obj, "pid", 1, 2**31 - 1, where), _status(obj, "status", where),
                          _text(obj, "reason", where=where)[:MAX_REASON_CHARS],
                          _text(obj, "command", where=where)[:MAX_REASON_CHARS], tuple(out))


def _name(key: str, where: str) -> str:
    return f"'{where}.{key}'" if where else f"'{key}'"


def _text(obj: dict[str, object], key: str, *, nonempty: bool = False, where: str = "") -> str:
    value = obj.get(key, "")
    if not isinstance(value, str) or (nonempty and not value) or "\0" in value:
        raise ValueError(f"profile message field {_name(key, where)} must be a{' non-empty' if nonempty else ''} "
                         "string (without NUL)")
    return value


def _int(obj: dict[str, object], key: str, low: int, high: int, where: str = "") -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"profile message field {_name(key, where)} must be an integer in [{low}, {high}]")
    return value


def _status(obj: dict[str, object], key: str, where: str = "") -> Status:
    value = obj.get(key)
    for status in STATUSES:
        if value == status:
            return status
    raise ValueError(f"profile message field {_name(key, where)} is {value!r}, not one of {', '.join(STATUSES)}")
