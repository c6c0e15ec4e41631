"""Property tests: any stream of windows comes back from the frame codec.

Lossless mode must give back every record bit for bit (NaN, -0.0, huge integers, int vs
float); quantised mode must keep every float metric with a catalog resolution within half
a quantum and everything else exact. The streams mix missing metrics, metrics that appear
later (a keyframe), keys not in the catalog, processes coming and going, and attributes
that change mid-window.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.catalog import BY_KEY
from telemetry.codec import FrameDecoder, FrameEncoder, peek_header
from telemetry.records import GpuRecord, ProcessRecord

GPU = "GPU-97b75092-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
KEYS = [
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "gpuwatch_process_cpu_cores",  # host evidence (issue 14): field ids 60001-60012
    "gpuwatch_process_blocked_threads",
    "gpuwatch_node_pressure_cpu_waiting_ratio",
    "custom.metric",
    "clé_ünïcode",
]
IDENTITIES = [
    (101, "python", "research", "trainer-1", "main", "llm"),
    (202, "tritonserver", "serving", "chat-7", "server", None),
    (303, None, None, None, None, None),
    (101, "python", "research", "trainer-1", "main", "llm"),  # the same identity twice is allowed
]

KINDS: dict[str, st.SearchStrategy[Any]] = {
    "int": st.integers(min_value=-1000, max_value=1000),
    "decimal": st.integers(min_value=-(10**7), max_value=10**7).map(lambda k: k / 1000),
    "ratio": st.integers(min_value=0, max_value=10**4).map(lambda k: k / 10**4),
    "float": st.floats(),
    "mixed": st.one_of(st.integers(min_value=-5, max_value=5), st.floats(width=32)),
    "const": st.sampled_from([0, 3]),
    "big": st.integers(min_value=-(2**80), max_value=2**80),
    "nan": st.sampled_from([math.nan, -math.nan, 0.0, -0.0, math.inf]),
}
NUMBERS = st.one_of(st.none(), st.integers(min_value=0, max_value=2**33), st.floats(width=32))


@st.composite
def streams(draw: st.DrawFn, max_windows: int = 4, max_records: int = 10) -> list[list[GpuRecord]]:
    """Windows of one GPU's consecutive records."""
    kinds = {key: draw(st.sampled_from(sorted(KINDS))) for key in draw(st.lists(st.sampled_from(KEYS), unique=True))}
    late = draw(st.sampled_from([*KEYS, None]))  # a metric that only appears after the first window
    ts = draw(st.floats(min_value=0, max_value=2e9))
    step = draw(st.sampled_from([1.0, 0.25, 1e-6, 3.7]))
    windows = []
    for w in range(draw(st.integers(min_value=1, max_value=max_windows))):
        window = []
        for _ in range(draw(st.integers(min_value=1, max_value=max_records))):
            ts = ts + step if draw(st.booleans()) else ts + draw(st.floats(min_value=0, max_value=10))
            metrics = {}
            for key, kind in kinds.items():
                if draw(st.integers(min_value=0, max_value=5)):  # now and then a metric is missing
                    metrics[key] = draw(KINDS[kind])
            if late is not None and w > 0 and late not in metrics:
                metrics[late] = draw(KINDS["decimal"])
            procs = [
                ProcessRecord(pid, name, draw(NUMBERS), draw(NUMBERS), draw(NUMBERS), ns, pod, ctr, svc)
                for pid, name, ns, pod, ctr, svc in draw(st.lists(st.sampled_from(IDENTITIES), max_size=3))
            ]
            window.append(
                GpuRecord(
                    ts=ts,
                    node=draw(st.sampled_from(["node-a", "node-a", "nœud-b"])),
                    gpu=GPU,
                    metrics=metrics,
                    gpu_index=draw(st.sampled_from([0, 0, 1, None])),
                    model=draw(st.sampled_from(["NVIDIA H200", None])),
                    processes=procs,
                    pci_bus_id="00000000:1B:00.0",
                    driver_version=draw(st.sampled_from(["580.159.04", "580.159.04", "590.1"])),
                    mig_profile=draw(st.sampled_from([None, None, "1g.18gb"])),
                    parent_gpu=None,
                )
            )
        windows.append(window)
    return windows


def exact(value: object) -> object:
    """A value's identity on the wire: its type and, for floats, its bits."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    return (type(value).__name__, value)


def exact_process(p: ProcessRecord) -> tuple[object, ...]:
    numbers = (exact(p.pid), exact(p.used_memory_mib), exact(p.sm_util), exact(p.mem_util))
    return (*numbers, p.name, p.namespace, p.pod, p.container, p.service)


def exact_record(r: GpuRecord) -> tuple[object, ...]:
    return (
        exact(r.ts),
        r.node,
        r.gpu,
        r.gpu_index,
        r.model,
        r.pci_bus_id,
        r.driver_version,
        r.mig_profile,
        r.parent_gpu,
        sorted((k, exact(v)) for k, v in r.metrics.items()),
        [exact_process(p) for p in r.processes],
    )


def assert_within_quantum(sent: GpuRecord, got: GpuRecord) -> None:
    assert sent.metrics.keys() == got.metrics.keys()
    for key, value in sent.metrics.items():
        back = got.metrics[key]
        metric = BY_KEY.get(key)
        if metric is None or metric.resolution == 0 or not isinstance(value, float) or not math.isfinite(value):
            assert exact(back) == exact(value), key
            continue
        assert isinstance(back, float)
        assert abs(back - value) <= metric.resolution / 2 * (1 + 1e-9) + 4 * math.ulp(value), (key, value, back)
    assert exact_record(GpuRecord(sent.ts, sent.node, sent.gpu, {}, sent.gpu_index, sent.model, sent.processes)) == (
        exact_record(GpuRecord(got.ts, got.node, got.gpu, {}, got.gpu_index, got.model, got.processes))
    )


COMMON = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@COMMON
@given(streams(), st.integers(min_value=1, max_value=3), st.sampled_from([None, 1]))
def test_lossless_streams_come_back_bit_for_bit(
    windows: list[list[GpuRecord]], keyframe_every: int, zstd_level: int | None
) -> None:
    encoder = FrameEncoder(quantize=False, keyframe_every=keyframe_every, zstd_level=zstd_level)
    decoder = FrameDecoder()
    for window in windows:
        frame = encoder.encode(window)
        assert [exact_record(r) for r in decoder.decode(frame)] == [exact_record(r) for r in window]


@COMMON
@given(streams(), st.integers(min_value=1, max_value=3))
def test_quantised_streams_come_back_within_half_a_quantum(windows: list[list[GpuRecord]], keyframe_every: int) -> None:
    encoder = FrameEncoder(quantize=True, keyframe_every=keyframe_every)
    decoder = FrameDecoder()
    for window in windows:
        got = decoder.decode(encoder.encode(window))
        assert len(got) == len(window)
        for sent, back in zip(window, got, strict=True):
            assert_within_quantum(sent, back)


@COMMON
@given(streams(max_windows=5), st.integers(min_value=1, max_value=3))
def test_a_decoder_that_joins_mid_stream_resyncs_at_the_next_keyframe(
    windows: list[list[GpuRecord]], keyframe_every: int
) -> None:
    encoder = FrameEncoder(quantize=False, keyframe_every=keyframe_every)
    frames = [encoder.encode(w) for w in windows]
    late = FrameDecoder()
    synced = False
    for frame, window in zip(frames[1:], windows[1:], strict=True):
        synced = synced or peek_header(frame).keyframe
        if synced:
            assert [exact_record(r) for r in late.decode(frame)] == [exact_record(r) for r in window]


def test_the_host_rows_cross_the_wire_by_field_id_within_their_resolution() -> None:
    """Every host row (issue 14) in a window, some absent in some records (a first reading, no PSI):
    sent by field id (no key text in the frame), back within half its quantum, absent stays absent."""
    from telemetry.catalog import HOST_KEYS

    values = [(key, 3 if BY_KEY[key].is_integer else 0.12345 + j / 7) for j, key in enumerate(HOST_KEYS)]
    window = [
        GpuRecord(ts=1000.0 + i, node="n", gpu=GPU, metrics={
            "DCGM_FI_DEV_GPU_UTIL": 50, **{key: v * (1 + i) for j, (key, v) in enumerate(values) if (i + j) % 3}})
        for i in range(6)
    ]
    frame = FrameEncoder(quantize=True, zstd_level=None).encode(window)
    assert not any(key.encode() in frame for key in HOST_KEYS)
    back = FrameDecoder().decode(frame)
    for sent, got in zip(window, back, strict=True):
        assert set(got.metrics) == set(sent.metrics)
        for key, value in sent.metrics.items():
            assert abs(got.metrics[key] - value) <= BY_KEY[key].resolution / 2 + 1e-12, key
