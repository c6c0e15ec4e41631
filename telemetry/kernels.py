"""Kernel statistics from the opt-in CUPTI probe: one window's aggregates, the wire form, the GPU facts.

Why in the shared contract: three parts handle a window. The probe (:mod:`probe`, inside
the workload process) writes it, the node agent (:mod:`agent.kernels`) reads it from a Unix
socket, adds the pod and service identity and forwards it on the telemetry topic as a
``kernels`` message (:class:`telemetry.wire.MessageType`), and the collector stores it and
the API reads it back. So the fields, the size limits, the strict decoder, the kernel
categories and the occupancy arithmetic are written once, here.

A :class:`KernelWindow` covers ``duration_s`` of recording (the probe records about 1 s in
every ``period_s``, 10 s by default) of one process. Its kernels are aggregated per
demangled name (calls, total and p95 duration, launch shape, registers, shared memory, and
the theoretical occupancy of that shape); copies per direction and host memory kind
(pinned or pageable); plus memsets, synchronisations, CPU time in launch calls, and how long
the GPU sat idle between kernels. The decoder rejects anything else with a
:class:`ValueError` naming the field, so the agent and collector can count it and set it
aside.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Final

from telemetry.wire import MessageType, finite_number, json_object

#: a kernels message's value (and one probe datagram) is at most this large
MAX_VALUE_BYTES: Final = 192 << 10  # under Linux's default socket send buffer (208 KiB): one datagram
#: kernels kept per window, heaviest first; the rest are summed into :data:`OTHER_KERNELS`
MAX_KERNELS: Final = 200
MAX_NAME_CHARS: Final = 512
MAX_TEXT_CHARS: Final = 256
OTHER_KERNELS: Final = "(other kernels)"
#: the service name under which windows of processes outside any pod are read back (a
#: workstation under ``gpuwatch up``, a bare-metal node); only unscoped tokens see them
UNATTRIBUTED: Final = "(unattributed)"
#: a kernel shorter than this is a fusion candidate when it comes in numbers (issue 15's hint)
SHORT_KERNEL_NS: Final = 10_000

COPY_KINDS: Final = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other")
HOST_MEMORY: Final = ("pageable", "pinned", "device", "managed", "other")

#: Kernel categories, first match wins (case-insensitive search in the demangled name). The
#: names are those of the libraries that launch them: cuBLAS/cuBLASLt (``gemm``, ``nvjet`` on
#: Hopper, seen on the H200), CUTLASS, FlashAttention and PyTorch's SDPA kernels, NCCL,
#: cuDNN convolutions, and PyTorch's ATen elementwise and reduction templates.
CATEGORIES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = tuple(
    (name, re.compile(pattern, re.IGNORECASE)) for name, pattern in (
        ("communication", r"nccl|allreduce|allgather|reducescatter|all_to_all"),
        ("attention", r"flash|fmha|attention|sdpa|mha_|paged_attention"),
        ("gemm", r"gemm|nvjet|cutlass|cublas|matmul|wgmma|xmma|splitk"),
        ("convolution", r"conv|cudnn|winograd|implicit_convolve"),
        ("normalization", r"norm_|layer_norm|layernorm|rms_?norm|batch_norm|group_norm"),
        ("reduction", r"reduce|softmax|sum_kernel|argmax|topk|scan|cumsum"),
        ("memory", r"copy|memcpy|memset|fill|cat_|index|gather|scatter|transpose|permute"),
        ("elementwise", r"elementwise|vectorized|unrolled|pointwise|triton_poi|add|mul|activation|gelu|silu|relu"),
    ))


def category(name: str) -> str:
    """The category of a demangled kernel name (``other`` when no pattern matches)."""
    for label, pattern in CATEGORIES:
        if pattern.search(name):
            return label
    return "other"


@dataclass(frozen=True, slots=True)
class SmLimits:
    """What one SM can hold, per compute capability (CUDA C Programming Guide, "Compute capabilities")."""

    max_warps: int
    max_blocks: int
    registers: int
    shared_bytes: int
    register_unit: int = 256  # registers are allocated per warp in units of this many
    shared_unit: int = 128  # shared memory per block is allocated in units of this many bytes
    reserved_shared: int = 1024  # the system's share of each block's shared memory (CC 8.0 on)


SM_LIMITS: Final[dict[tuple[int, int], SmLimits]] = {
    (7, 0): SmLimits(64, 32, 65536, 96 << 10, reserved_shared=0),
    (7, 5): SmLimits(32, 16, 65536, 64 << 10, reserved_shared=0),
    (8, 0): SmLimits(64, 32, 65536, 164 << 10),
    (8, 6): SmLimits(48, 16, 65536, 100 << 10),
    (8, 9): SmLimits(48, 24, 65536, 100 << 10),
    (9, 0): SmLimits(64, 32, 65536, 228 << 10),  # H100, H200
    (10, 0): SmLimits(64, 32, 65536, 228 << 10),  # B200
    (12, 0): SmLimits(48, 32, 65536, 100 << 10),
}


def occupancy(cc: tuple[int, int], threads_per_block: int, registers_per_thread: int,
              shared_per_block: int) -> float | None:
    """Theoretical occupancy (resident warps over the SM's maximum) of a launch shape, or None
    for an unknown compute capability or shape. The limits are warps, blocks, registers and
    shared memory per SM, as CUDA's occupancy calculator counts them (registers per warp in
    256-register units; it does not split the register file by scheduler, so it can read a
    little high for kernels near a register limit)."""
    limits = SM_LIMITS.get(cc)
    if limits is None or threads_per_block <= 0:
        return None
    warps = -(-threads_per_block // 32)
    by_warps = limits.max_warps // warps
    per_warp = -(-max(registers_per_thread, 1) * 32 // limits.register_unit) * limits.register_unit
    by_registers = limits.registers // (per_warp * warps)
    if shared_per_block > 0:
        need = -(-(shared_per_block + limits.reserved_shared) // limits.shared_unit) * limits.shared_unit
        by_shared = limits.shared_bytes // need
    else:
        by_shared = limits.max_blocks
    blocks = min(limits.max_blocks, by_warps, by_registers, by_shared)
    return round(min(1.0, blocks * warps / limits.max_warps), 4)


@dataclass(frozen=True, slots=True)
class KernelStat:
    """One kernel (demangled name) in one window."""

    name: str
    calls: int
    total_ns: int
    p95_ns: int
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)
    registers: int = 0
    shared_bytes: int = 0
    occupancy: float | None = None
    short_calls: int = 0  # calls under SHORT_KERNEL_NS

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.calls if self.calls else 0.0

    @property
    def category(self) -> str:
        return category(self.name)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "calls": self.calls, "total_ns": self.total_ns, "p95_ns": self.p95_ns,
                "grid": list(self.grid), "block": list(self.block), "registers": self.registers,
                "shared_bytes": self.shared_bytes, "occupancy": self.occupancy, "short_calls": self.short_calls}


@dataclass(frozen=True, slots=True)
class CopyStat:
    """Copies of one direction and host memory kind in one window."""

    kind: str
    memory: str
    calls: int
    bytes: int
    total_ns: int

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "memory": self.memory, "calls": self.calls, "bytes": self.bytes,
                "total_ns": self.total_ns}


@dataclass(frozen=True, slots=True)
class KernelWindow:
    """One recording window of one process. The probe fills the measurements; the agent the identity."""

    ts: float  # wall-clock start of the recording
    duration_s: float  # how long it recorded
    period_s: float  # one window in every period_s (what a rate per second is scaled by)
    pid: int
    command: str = ""
    kernels: tuple[KernelStat, ...] = ()
    copies: tuple[CopyStat, ...] = ()
    memset_calls: int = 0
    memset_ns: int = 0
    sync_calls: int = 0
    sync_ns: int = 0
    launch_calls: int = 0  # runtime API launch calls (cudaLaunchKernel and kin)
    launch_ns: int = 0  # CPU time inside them
    busy_ns: int = 0  # union of kernel intervals, summed over devices
    idle_ns: int = 0  # gaps between kernels inside the window, summed over devices
    idle_gaps: int = 0  # gaps of SHORT_KERNEL_NS or more
    records: int = 0  # CUPTI records read
    dropped_records: int = 0  # records CUPTI dropped, or the probe did not read
    probe: str = ""  # probe and CUPTI versions
    # identity, from the agent (the probe leaves them empty)
    node: str = ""
    gpu: str = ""
    namespace: str = ""
    pod: str = ""
    container: str = ""
    service: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def kernel_ns(self) -> int:
        return sum(k.total_ns for k in self.kernels)

    def with_identity(self, **identity: str | int) -> KernelWindow:
        """This window with the fields the agent knows (node, gpu, namespace, pod, container,
        service, and the pid from the socket's credentials)."""
        return replace(self, **identity)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, object]:
        return {"type": MessageType.KERNELS.value, "ts": self.ts, "duration_s": self.duration_s,
                "period_s": self.period_s, "pid": self.pid, "command": self.command,
                "kernels": [k.to_dict() for k in self.kernels], "copies": [c.to_dict() for c in self.copies],
                "memset_calls": self.memset_calls, "memset_ns": self.memset_ns, "sync_calls": self.sync_calls,
                "sync_ns": self.sync_ns, "launch_calls": self.launch_calls, "launch_ns": self.launch_ns,
                "busy_ns": self.busy_ns, "idle_ns": self.idle_ns, "idle_gaps": self.idle_gaps,
                "records": self.records, "dropped_records": self.dropped_records, "probe": self.probe,
                "node": self.node, "gpu": self.gpu, "namespace": self.namespace, "pod": self.pod,
                "container": self.container, "service": self.service, "extra": dict(self.extra)}

    def encode(self) -> bytes:
        """The wire form: one compact JSON object of at most :data:`MAX_VALUE_BYTES` (the probe
        keeps at most :data:`MAX_KERNELS` kernels, so a window fits)."""
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> KernelWindow:
        """A kernels message's value (or a probe datagram); :class:`ValueError` names the wrong field."""
        if len(raw) > MAX_VALUE_BYTES:
            raise ValueError(f"kernels message of {len(raw)} bytes is over the {MAX_VALUE_BYTES}-byte limit")
        body = json_object(raw, "kernels message")
        if body.get("type") != MessageType.KERNELS.value:
            raise ValueError(f"kernels message field 'type' is {body.get('type')!r}, not 'kernels'")
        ts = _number(body, "ts", 0.0, 1e11)
        duration = _number(body, "duration_s", 0.0, 3600.0)
        period = _number(body, "period_s", 0.0, 86400.0)
        if period < duration:
            raise ValueError("kernels message field 'period_s' must be at least 'duration_s'")
        kernels = _list(body, "kernels", MAX_KERNELS + 1)
        copies = _list(body, "copies", 64)
        extra = body.get("extra", {})
        if not isinstance(extra, dict) or len(extra) > 32 or not all(
                isinstance(k, str) and len(k) <= 64 and finite_number(v) for k, v in extra.items()):
            raise ValueError("kernels message field 'extra' must be an object of at most 32 finite numbers")
        counts = {name: _int(body, name) for name in (
            "memset_calls", "memset_ns", "sync_calls", "sync_ns", "launch_calls", "launch_ns", "busy_ns",
            "idle_ns", "idle_gaps", "records", "dropped_records")}
        texts = {name: _text(body, name) for name in (
            "command", "probe", "node", "gpu", "namespace", "pod", "container", "service")}
        return cls(ts=ts, duration_s=duration, period_s=period, pid=_int(body, "pid", 0, 2**31 - 1),
                   kernels=tuple(_kernel(k, f"kernels[{i}]") for i, k in enumerate(kernels)),
                   copies=tuple(_copy(c, f"copies[{i}]") for i, c in enumerate(copies)),
                   extra={k: float(v) for k, v in extra.items()}, **counts, **texts)  # type: ignore[arg-type]


def _name(key: str, where: str) -> str:
    return f"'{where}.{key}'" if where else f"'{key}'"


def _number(obj: dict[str, object], key: str, low: float, high: float, where: str = "") -> float:
    value = obj.get(key)
    if not finite_number(value) or not low <= float(value) <= high:
        raise ValueError(f"kernels message field {_name(key, where)} must be a number in [{low:g}, {high:g}]")
    return float(value)


def _int(obj: dict[str, object], key: str, low: int = 0, high: int = 2**63 - 1, where: str = "") -> int:
    value = obj.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"kernels message field {_name(key, where)} must be an integer in [{low}, {high}]")
    return value


def _text(obj: dict[str, object], key: str, where: str = "", limit: int = MAX_TEXT_CHARS,
          nonempty: bool = False) -> str:
    value = obj.get(key, "")
    if not isinstance(value, str) or len(value) > limit or "\0" in value or (nonempty and not value):
        raise ValueError(f"kernels message field {_name(key, where)} must be a{' non-empty' if nonempty else ''} "
                         f"string of at most {limit} characters (without NUL)")
    return value


def _list(obj: dict[str, object], key: str, most: int) -> list[object]:
    value = obj.get(key, [])
    if not isinstance(value, list) or len(value) > most:
        raise ValueError(f"kernels message field '{key}' must be a list of at most {most}")
    return value


def _triple(obj: dict[str, object], key: str, where: str) -> tuple[int, int, int]:
    value = obj.get(key, [0, 0, 0])
    if (not isinstance(value, list) or len(value) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32 for v in value)):
        raise ValueError(f"kernels message field {_name(key, where)} must be three integers in [0, 2^32)")
    return (value[0], value[1], value[2])


def _object(obj: object, where: str) -> dict[str, object]:
    if not isinstance(obj, dict):
        raise ValueError(f"kernels message field '{where}' must be an object")
    return obj


def _kernel(raw: object, where: str) -> KernelStat:
    obj = _object(raw, where)
    occ = obj.get("occupancy")
    if occ is not None and (not finite_number(occ) or not 0.0 <= float(occ) <= 1.0):
        raise ValueError(f"kernels message field '{where}.occupancy' must be null or a number in [0, 1]")
    calls = _int(obj, "calls", 1, where=where)
    return KernelStat(_text(obj, "name", where, MAX_NAME_CHARS, nonempty=True), calls,
                      _int(obj, "total_ns", where=where),
                      _int(obj, "p95_ns", where=where), _triple(obj, "grid", where), _triple(obj, "block", where),
                      _int(obj, "registers", 0, 65536, where), _int(obj, "shared_bytes", 0, 2**32, where),
                      None if occ is None else float(occ),
                      _int(obj, "short_calls", 0, calls, where))


def _copy(raw: object, where: str) -> CopyStat:
    obj = _object(raw, where)
    kind, memory = obj.get("kind"), obj.get("memory")
    if kind not in COPY_KINDS:
        raise ValueError(f"kernels message field '{where}.kind' is {kind!r}, not one of {', '.join(COPY_KINDS)}")
    if memory not in HOST_MEMORY:
        raise ValueError(f"kernels message field '{where}.memory' is {memory!r}, not one of {', '.join(HOST_MEMORY)}")
    return CopyStat(str(kind), str(memory), _int(obj, "calls", 1, where=where), _int(obj, "bytes", where=where),
                    _int(obj, "total_ns", where=where))
