"""A service's kernel statistics (the opt-in CUPTI probe, issue 15) as the API answers them.

Why here: the store (:mod:`collector.store.kernels`) sums the rows of one service's range
within the caller's namespace scope; this module turns the sums into rates and shares, asks
:mod:`collector.kernel_hints` what they suggest, and builds the flame graph's data frame
(:mod:`collector.api.flamegraph`). Rates are per second of recording (the probe records
about 1 s in every 10 s of each process), shares are of the service's kernel time. A range
with no window the caller may see is None, whatever the reason (no probe, no such service,
another namespace's service), so the route answers the same 404 for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from collector import kernel_hints
from collector.api import flamegraph
from collector.api.models import (
    CallTotals,
    CopyOut,
    GpuTimeOut,
    KernelBucketOut,
    KernelCoverage,
    KernelHintOut,
    KernelOut,
    KernelsOut,
)
from collector.store import kernels as store

#: trend buckets over the range
BUCKETS: Final = 12
NO_POD: Final = "(no pod)"


def _per(value: float, seconds: float) -> float:
    return value / seconds if seconds > 0 else 0.0


def _calls(calls: int, ns: int, recorded_s: float) -> CallTotals:
    return CallTotals(calls=calls, time_seconds=ns / 1e9, calls_per_second=_per(calls, recorded_s))


def _trend(per: list[int], total: list[int]) -> list[float | None]:
    return [round(ns / t, 4) if t > 0 else None for ns, t in zip(per, total, strict=True)]


def _kernel(k: store.KernelRow, all_ns: int, recorded_s: float, trend: list[float | None]) -> KernelOut:
    return KernelOut(
        name=k.name, category=k.category, calls=k.calls, calls_per_second=_per(k.calls, recorded_s),
        time_seconds=k.total_ns / 1e9, share=k.total_ns / all_ns if all_ns > 0 else 0.0,
        mean_us=k.total_ns / k.calls / 1e3 if k.calls else 0.0, p95_us=k.p95_ns / 1e3, short_calls=k.short_calls,
        grid=list(k.grid), block=list(k.block), registers=k.registers, shared_bytes=k.shared_bytes,
        occupancy=k.occupancy, trend=trend)


def _figures(t: store.WindowTotals, top: store.KernelTop, shorts: Sequence[store.ShortKernel],
             copies: Sequence[store.CopyRow], phases: Sequence[kernel_hints.Phase]) -> kernel_hints.Figures:
    return kernel_hints.Figures(
        recorded_s=t.recorded_s, calls=top.all_calls, short_calls=top.all_short_calls, busy_ns=t.busy_ns,
        idle_ns=t.idle_ns, idle_gaps=t.idle_gaps, sync_calls=t.sync_calls, sync_ns=t.sync_ns,
        launch_calls=t.launch_calls,
        kernels=[kernel_hints.KernelFigure(k.name, k.calls, k.total_ns, k.total_ns / top.all_ns if top.all_ns else 0.0,
                                           k.occupancy, k.registers, k.shared_bytes, k.block) for k in top.kernels],
        short=[(s.name, s.short_calls) for s in shorts],
        copies=[kernel_hints.CopyFigure(c.kind, c.memory, c.calls, c.bytes, c.total_ns) for c in copies],
        phases=phases)


async def service_kernels(db: Any, sel: store.Selection, limit: int) -> KernelsOut | None:
    """The figures of ``sel`` (None: no window in it)."""
    t = await store.totals(db, sel)
    if t.windows == 0:
        return None
    top = await store.top_kernels(db, sel, limit)
    names = [k.name for k in top.kernels]
    per, total = await store.trend(db, sel, names, BUCKETS)
    copies = await store.copies(db, sel)
    shorts = await store.short_kernels(db, sel)
    width = (sel.until - sel.since).total_seconds() / BUCKETS
    rows = {b.index: b for b in await store.buckets(db, sel, BUCKETS)}
    buckets: list[KernelBucketOut] = []
    phases: list[kernel_hints.Phase] = []
    for i in range(BUCKETS):
        start = sel.since.timestamp() + i * width
        b = rows.get(i, store.BucketRow(i, 0, 0.0, 0, 0, 0))
        span = b.busy_ns + b.idle_ns
        buckets.append(KernelBucketOut(t=start, windows=b.windows, recorded_seconds=b.recorded_s,
                                       kernel_seconds=b.kernel_ns / 1e9,
                                       idle_share=round(b.idle_ns / span, 4) if span > 0 else None))
        phases.append(kernel_hints.Phase(start, b.recorded_s, b.busy_ns, b.idle_ns))
    rec = t.recorded_s
    found = kernel_hints.hints(_figures(t, top, shorts, copies, phases))
    span = t.busy_ns + t.idle_ns
    return KernelsOut(
        service=sel.service, namespace=sel.namespace, since=sel.since, until=sel.until, bucket_seconds=width,
        coverage=KernelCoverage(windows=t.windows, processes=t.processes, pods=t.pods, nodes=t.nodes,
                                recorded_seconds=rec, first=t.first, last=t.last, records=t.records,
                                dropped_records=t.dropped_records),
        kernel_seconds=top.all_ns / 1e9, kernel_names=top.names,
        kernels=[_kernel(k, top.all_ns, rec, _trend(per[k.name], total)) for k in top.kernels],
        buckets=buckets,
        copies=[CopyOut(kind=c.kind, memory=c.memory, calls=c.calls, bytes=c.bytes, time_seconds=c.total_ns / 1e9,
                        bytes_per_second=_per(c.bytes, rec)) for c in copies],
        memsets=_calls(t.memset_calls, t.memset_ns, rec), syncs=_calls(t.sync_calls, t.sync_ns, rec),
        launches=_calls(t.launch_calls, t.launch_ns, rec),
        gpu=GpuTimeOut(busy_seconds=t.busy_ns / 1e9, idle_seconds=t.idle_ns / 1e9, idle_gaps=t.idle_gaps,
                       idle_share=round(t.idle_ns / span, 4) if span > 0 else None),
        hints=[KernelHintOut(kind=h.kind, severity=h.severity, message=h.message, kernels=list(h.kernels),
                             value=h.value) for h in found],
    )


def _label(text: str) -> str:
    return text.replace(";", ",")  # a frame separator inside a name would split it


def folded(service: str, rows: Sequence[store.StackRow]) -> list[tuple[str, int]]:
    """``service;pod;category;kernel`` stacks weighted by kernel time in µs (rows under 1 µs dropped)."""
    out: list[tuple[str, int]] = []
    for r in rows:
        us = round(r.total_ns / 1000)
        if us > 0:
            out.append((";".join(_label(x) for x in (service, r.pod or NO_POD, r.category, r.kernel)), us))
    return out


async def service_flamegraph(db: Any, sel: store.Selection) -> dict[str, Any] | None:
    """The flame graph's data frame of ``sel`` (None: no window in it)."""
    if (await store.totals(db, sel)).windows == 0:
        return None
    stacks = folded(sel.service, await store.stacks(db, sel))
    meta = {"service": sel.service, "namespace": sel.namespace, "since": sel.since.isoformat(),
            "until": sel.until.isoformat(), "unit": "µs of kernel time"}
    frame = flamegraph.data_frame(flamegraph.build(stacks), meta)
    for f in frame["fields"]:
        if f["name"] in ("value", "self"):
            f["config"] = {"unit": "µs"}
    return frame
