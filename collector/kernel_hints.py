"""What a service's kernel statistics suggest doing: fusion, occupancy, pinned copies, fewer syncs, idle GPU.

Why a pure module: the hints are arithmetic on figures the API has already summed
(:mod:`collector.store.kernels`), so they are tested without a database, and the thresholds
live in one place, each with the reason it has that value:

* :data:`FUSION_SHORT_SHARE`, :data:`FUSION_SHORT_PER_S`, :data:`FUSION_GAPS_PER_S`: a kernel
  under 10 µs (:data:`telemetry.kernels.SHORT_KERNEL_NS`) is about as long as launching it
  costs (a few µs of CPU in ``cudaLaunchKernel``, more in Python frameworks), so when at least
  half the launches are that short, come in thousands per second of recording, and the GPU
  shows at least 100 idle gaps (of 10 µs or more) per second between kernels, it waits on
  launches: fusing them (CUDA Graphs, ``torch.compile``) or larger batches remove the gaps.
* :data:`LOW_OCCUPANCY`, :data:`OCCUPANCY_MIN_SHARE`: below a quarter of the SM's warps (16 of
  64 on Hopper) a kernel has few warps to switch to while others wait on memory, so latency
  hiding suffers; it is worth a look only when the kernel takes a real share (5 %) of the
  service's kernel time (below that, even doubling its speed gains little).
* :data:`PAGEABLE_MIN_BYTES`, :data:`PAGEABLE_MIN_SHARE`: a host-to-device copy from pageable
  memory is staged through a driver buffer, blocks the host and runs at a fraction of pinned
  bandwidth; a few small copies (scalars, masks) do not matter, so it takes 1 MiB and 10 % of
  the host-to-device bytes.
* :data:`SYNC_PER_S`, :data:`SYNC_IDLE_SHARE`: time spent waiting in a synchronisation is
  harmless while the GPU stays busy (a training step's one ``loss.item()``); the cost is the
  queue drained by each one, which shows as idle GPU time, so it takes 50 synchronisations per
  second of recording and 10 % idle time between kernels.
* :data:`IDLE_SHARE`, :data:`IDLE_PHASE_SHARE`: a GPU idle a fifth of the time between its
  kernels, or two fifths of it in one time bucket (a phase: data loading, evaluation,
  checkpointing), is waiting on the host.

Severity is ``warning`` when the figure is large enough to cost a visible share of the run
(the ``*_WARN`` values), else ``info``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal

from telemetry.kernels import SHORT_KERNEL_NS

HintKind = Literal["kernel_fusion", "low_occupancy", "pageable_copies", "sync_heavy", "idle_gpu"]
Severity = Literal["info", "warning"]

FUSION_SHORT_SHARE: Final = 0.5
FUSION_SHORT_PER_S: Final = 1000.0
FUSION_GAPS_PER_S: Final = 100.0
FUSION_IDLE_WARN: Final = 0.2
LOW_OCCUPANCY: Final = 0.25
OCCUPANCY_MIN_SHARE: Final = 0.05
OCCUPANCY_SHARE_WARN: Final = 0.2
MAX_OCCUPANCY_HINTS: Final = 3
PAGEABLE_MIN_BYTES: Final = 1 << 20
PAGEABLE_MIN_SHARE: Final = 0.1
PAGEABLE_TIME_WARN: Final = 0.05
SYNC_PER_S: Final = 50.0
SYNC_IDLE_SHARE: Final = 0.1
SYNC_IDLE_WARN: Final = 0.3
IDLE_SHARE: Final = 0.2
IDLE_PHASE_SHARE: Final = 0.4
IDLE_PHASE_MIN_S: Final = 1.0  # a bucket with less recording than this says too little to be a phase
IDLE_WARN: Final = 0.4


@dataclass(frozen=True, slots=True)
class KernelFigure:
    """One kernel over the range."""

    name: str
    calls: int
    total_ns: int
    share: float  # of all kernel time
    occupancy: float | None = None
    registers: int = 0
    shared_bytes: int = 0
    block: tuple[int, int, int] = (0, 0, 0)


@dataclass(frozen=True, slots=True)
class CopyFigure:
    kind: str
    memory: str
    calls: int
    bytes: int
    total_ns: int


@dataclass(frozen=True, slots=True)
class Phase:
    """One time bucket: its start (epoch seconds), recording, and GPU busy and idle time."""

    t: float
    recorded_s: float
    busy_ns: int
    idle_ns: int


@dataclass(frozen=True, slots=True)
class Figures:
    """A service's sums over the range (``kernels``: the heaviest; ``short``: (name, calls under
    10 µs) of the kernels with the most such calls)."""

    recorded_s: float
    calls: int = 0
    short_calls: int = 0
    busy_ns: int = 0
    idle_ns: int = 0
    idle_gaps: int = 0
    sync_calls: int = 0
    sync_ns: int = 0
    launch_calls: int = 0
    kernels: Sequence[KernelFigure] = ()
    short: Sequence[tuple[str, int]] = ()
    copies: Sequence[CopyFigure] = ()
    phases: Sequence[Phase] = ()

    @property
    def idle_share(self) -> float | None:
        """Idle share of the time between the first and last kernel of each window (None: no kernels)."""
        span = self.busy_ns + self.idle_ns
        return self.idle_ns / span if span > 0 else None


@dataclass(frozen=True, slots=True)
class Hint:
    kind: HintKind
    severity: Severity
    message: str  # names the figure and a remedy
    kernels: tuple[str, ...] = field(default_factory=tuple)
    value: float = 0.0  # the figure that triggered it (a share, a rate)


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %" if x >= 0.1 else f"{100 * x:.1f} %"


def _rate(x: float) -> str:
    return f"{x:,.0f}"


def _fusion(f: Figures, per_s: float) -> Hint | None:
    if f.calls <= 0 or per_s <= 0:
        return None
    share = f.short_calls / f.calls
    short_per_s = f.short_calls / per_s
    gaps_per_s = f.idle_gaps / per_s
    if share < FUSION_SHORT_SHARE or short_per_s < FUSION_SHORT_PER_S or gaps_per_s < FUSION_GAPS_PER_S:
        return None
    idle = f.idle_share or 0.0
    names = tuple(name for name, _ in f.short)
    return Hint("kernel_fusion", "warning" if idle >= FUSION_IDLE_WARN else "info",
                f"{_pct(share)} of the kernel launches ({_rate(short_per_s)} per second of recording) ran under "
                f"{SHORT_KERNEL_NS // 1000} µs, with {_rate(gaps_per_s)} idle gaps per second between kernels "
                f"(the GPU idle {_pct(idle)} of the time): it waits on launches. Fuse them: capture the step in "
                "CUDA Graphs (torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs), let torch.compile "
                "fuse the elementwise kernels, or give each launch more work with larger batches.",
                names, round(share, 4))


def _occupancy(f: Figures) -> list[Hint]:
    out: list[Hint] = []
    for k in f.kernels:
        if k.occupancy is None or k.occupancy >= LOW_OCCUPANCY or k.share < OCCUPANCY_MIN_SHARE:
            continue
        threads = k.block[0] * max(k.block[1], 1) * max(k.block[2], 1)
        out.append(Hint(
            "low_occupancy", "warning" if k.share >= OCCUPANCY_SHARE_WARN else "info",
            f"{k.name} takes {_pct(k.share)} of the kernel time at {_pct(k.occupancy)} theoretical occupancy "
            f"({threads} threads per block, {k.registers} registers per thread, {k.shared_bytes:,} bytes of "
            "shared memory per block): too few warps per SM to hide memory latency. For your own kernels, "
            "launch more threads per block or cap registers (__launch_bounds__, -maxrregcount) and shared "
            "memory; for library kernels, a larger batch (bigger matrices) or another algorithm choice "
            "(torch.backends.cudnn.benchmark = True, cuBLASLt heuristics) gives them a better shape.",
            (k.name,), k.occupancy))
        if len(out) == MAX_OCCUPANCY_HINTS:
            break
    return out


def _pageable(f: Figures, per_s: float) -> Hint | None:
    htod = [c for c in f.copies if c.kind == "HtoD"]
    total = sum(c.bytes for c in htod)
    pageable = [c for c in htod if c.memory == "pageable"]
    moved = sum(c.bytes for c in pageable)
    if not pageable or moved < PAGEABLE_MIN_BYTES or total <= 0 or moved / total < PAGEABLE_MIN_SHARE:
        return None
    spent = sum(c.total_ns for c in pageable) / 1e9
    time_share = spent / per_s if per_s > 0 else 0.0
    return Hint("pageable_copies", "warning" if time_share >= PAGEABLE_TIME_WARN else "info",
                f"{_pct(moved / total)} of the host-to-device bytes ({moved / per_s / 1e6:,.1f} MB per second of "
                f"recording, {sum(c.calls for c in pageable):,} copies) came from pageable memory and took "
                f"{_pct(time_share)} of the recorded time: pageable copies are staged through a driver buffer, "
                "block the host and cannot overlap with kernels. Pin the host memory: DataLoader(pin_memory=True) "
                "with .to(device, non_blocking=True), or allocate reused buffers with torch.empty(..., "
                "pin_memory=True).", (), round(moved / total, 4))


def _sync(f: Figures, per_s: float) -> Hint | None:
    idle = f.idle_share
    if per_s <= 0 or idle is None:
        return None
    rate = f.sync_calls / per_s
    if rate < SYNC_PER_S or idle < SYNC_IDLE_SHARE:
        return None
    mean_us = f.sync_ns / f.sync_calls / 1000 if f.sync_calls else 0.0
    return Hint("sync_heavy", "warning" if idle >= SYNC_IDLE_WARN else "info",
                f"{_rate(rate)} synchronisations per second of recording ({mean_us:,.0f} µs each on average) while "
                f"the GPU sat idle {_pct(idle)} of the time between kernels: each one stalls the host until the "
                "GPU's queue is empty, and the GPU then waits for the next launches. Take .item(), .cpu(), "
                "printing tensors and torch.cuda.synchronize() out of the step loop: keep metrics on the GPU and "
                "read them every N steps.", (), round(rate, 2))


def _idle(f: Figures) -> Hint | None:
    idle = f.idle_share
    phases = [(p, p.idle_ns / (p.busy_ns + p.idle_ns)) for p in f.phases
              if p.recorded_s >= IDLE_PHASE_MIN_S and p.busy_ns + p.idle_ns > 0]
    idle_phases = [(p, share) for p, share in phases if share >= IDLE_PHASE_SHARE]
    if idle is None or (idle < IDLE_SHARE and not idle_phases):
        return None
    what = f"The GPU sat idle {_pct(idle)} of the time between its kernels"
    if idle_phases:
        worst, share = max(idle_phases, key=lambda ps: ps[1])
        at = datetime.fromtimestamp(worst.t, UTC).isoformat(timespec="seconds")
        what += (f"{', and' if idle >= IDLE_SHARE else ' overall, but'} {_pct(IDLE_PHASE_SHARE)} or more in "
                 f"{len(idle_phases)} of the {len(phases)} time buckets with recording (worst: {_pct(share)}, "
                 f"in the one from {at})")
    return Hint("idle_gpu", "warning" if idle >= IDLE_WARN else "info",
                what + ": it waits on the host (data loading, Python overhead, synchronisation, evaluation). "
                "Overlap the input pipeline with compute (DataLoader num_workers and prefetch_factor, "
                "non_blocking copies from pinned memory), capture the step in CUDA Graphs, or give the GPU "
                "larger batches.", (), round(idle, 4))


def hints(f: Figures) -> list[Hint]:
    """The hints the figures support, warnings first (the order above within a severity)."""
    per_s = f.recorded_s
    found: list[Hint | None] = [_fusion(f, per_s), *_occupancy(f), _pageable(f, per_s), _sync(f, per_s), _idle(f)]
    out = [h for h in found if h is not None]
    return sorted(out, key=lambda h: h.severity != "warning")
