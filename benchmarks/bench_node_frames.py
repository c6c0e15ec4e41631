"""Node frames against GPU frames on real GPU telemetry: bytes on the Kafka log and decoding CPU.

Why real traces: how many bytes a value costs depends on how much the values move, and a
simulator's noise is a choice. The repository holds the real labelled traces recorded on an
H200 and on H100s with the agent's own sampler (``benchmarks/data/*.jsonl``, about 1 Hz, 20-40
metrics, processes). This lays them out as a fleet, ``--gpus-per-node`` traces per node, each
trace a GPU of its own (its own UUID and sampling phase), aligned to one start. Each node's
records then go, in time order, through the agent's real :class:`agent.framing.Framer` with its
default window (10 records) and maximum delay (1 s), its timer ticking every 0.25 s on the
records' clock, once with ``layout="gpu"`` and once with ``layout="node"``.

Bytes on the log: the messages one agent hands its producer at one tick (within its 20-ms
linger) make one Kafka record batch, built by aiokafka's own batch builder with zstd, key and
headers included: the bytes a broker stores. Decoding: the collector's decoders over every
node's messages, CPU µs per GPU-sample, in this one process.
Ingest: the collector's CPU path without the database, in this process: ``Ingestor.handle``
(routing, decoding, validation) over batches of 5,000 messages into a store that builds the
COPY rows (``collector.store.writer.prepare``, what ``Store.write`` does before the database),
then the detectors (``DetectionEngine.feed_batch``). Both are the best of ``--repeat`` runs with
the layouts alternated (the whole-collector figures of bench_pipeline.py move by 10-20% between runs on
this VM; this one does not wait on PostgreSQL or Kafka).

    .venv/bin/python benchmarks/bench_node_frames.py --json docs/bench-runs/node-frames-real-2026-12-06.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiokafka.record.default_records import DefaultRecordBase, DefaultRecordBatchBuilder

from agent.framing import Framer
from telemetry.codec import FrameDecoder, peek_header
from telemetry.codec.node import NodeFrameDecoder, peek_node_header
from telemetry.records import GpuRecord, read_jsonl
from telemetry.wire import Message

DATA = Path(__file__).resolve().parent / "data"
TICK_S = 0.25  # the Framer's timer: max_delay / 4


def load_fleet(gpus_per_node: int, min_records: int) -> list[list[GpuRecord]]:
    """Each node's records in time order: every real trace a GPU of its own, aligned to one start."""
    traces = []
    for path in sorted(DATA.glob("*.jsonl")):
        records = [r for r in read_jsonl(path) if isinstance(r, GpuRecord)]
        if len(records) >= min_records:
            traces.append(records)
    t0 = 1.8e9
    nodes: list[list[GpuRecord]] = []
    for n in range(len(traces) // gpus_per_node):
        node = f"real-node-{n}"
        merged: list[GpuRecord] = []
        for i, trace in enumerate(traces[n * gpus_per_node : (n + 1) * gpus_per_node]):
            gpu = f"GPU-{n:08x}-0000-4000-8000-{i:012x}"
            shift = t0 + 0.09 * i - trace[0].ts  # the agent samples a node's GPUs one after another
            merged += [dataclasses.replace(r, ts=r.ts + shift, gpu=gpu, node=node, gpu_index=i) for r in trace]
        merged.sort(key=lambda r: r.ts)
        nodes.append(merged)
    return nodes


LAYOUTS = ("gpu", "node", "node+deflate")  # the last: node frames as the agent sends them by default


def frame(records: list[GpuRecord], node: str, layout: str) -> list[list[Message]]:
    """The node's messages as its Framer emits them, grouped by the tick that emitted them."""
    ticks: list[list[Message]] = []
    current: list[Message] = []
    framer = Framer(current.append, node=node, instance="0123456789abcdef", layout=layout.split("+")[0],
                    deflate=layout.endswith("+deflate"), clock=lambda: 0.0)
    now = records[0].ts
    for r in records:
        while now + TICK_S <= r.ts:
            now += TICK_S
            framer.flush_due(now)
            if current:
                ticks.append(list(current))
                current.clear()
        framer.add(r)
        if current:  # a full window emits at once
            ticks.append(list(current))
            current.clear()
    framer.flush()
    if current:
        ticks.append(list(current))
    return ticks


def log_bytes(ticks: list[list[Message]], codec: int = DefaultRecordBase.CODEC_ZSTD) -> tuple[int, int]:
    """(bytes of the Kafka record batches, zstd, as a broker stores them; raw frame bytes)."""
    total = raw = 0
    for tick in ticks:
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 20)
        for offset, m in enumerate(tick):
            builder.append(offset, 1_800_000_000_000, m.key, m.value, list(m.headers))
            raw += len(m.value)
        total += len(builder.build())
    return total, raw


def decode_cpu(messages: list[list[Message]], layout: str) -> float:
    """CPU seconds to decode every node's messages with fresh decoders."""
    t = time.process_time()
    for node_messages in messages:
        if layout.startswith("node"):
            decoder = NodeFrameDecoder()
            for m in node_messages:
                decoder.decode_checked(m.value, peek_node_header(m.value))
        else:
            decoders: dict[str, FrameDecoder] = {}
            for m in node_messages:
                h = peek_header(m.value)
                decoders.setdefault(h.gpu, FrameDecoder()).decode_checked(m.value, h)
    return time.process_time() - t


class _RowsStore:
    """What ``Store.write`` does before the database: validate and build the COPY rows."""

    async def write(self, records: Any, events: Any = ()) -> int:
        from collector.store.writer import prepare

        return len(prepare(records, events).samples)


def ingest_cpu(messages: list[list[Message]], batch: int = 5000) -> float:
    """CPU seconds for the collector's path over every message, the database left out."""
    import asyncio

    from collector.detect.engine import DetectionEngine
    from collector.ingest import Inbound, Ingestor

    engine = DetectionEngine()

    async def dead(_msg: Inbound, reason: str) -> None:
        raise AssertionError(reason)

    ingestor = Ingestor(_RowsStore(), dead, on_committed=engine.feed_batch)  # type: ignore[arg-type]
    inbound = [Inbound(p, i, m.key, m.value, m.headers) for p, node in enumerate(messages)
               for i, m in enumerate(node)]
    inbound.sort(key=lambda m: (m.offset, m.partition))  # the partitions' messages interleaved, as fetched

    async def go() -> None:
        for i in range(0, len(inbound), batch):
            await ingestor.handle(inbound[i : i + batch])

    t = time.process_time()
    asyncio.run(go())
    return time.process_time() - t


def run(gpus_per_node: int, min_records: int, repeat: int) -> dict[str, Any]:
    nodes = load_fleet(gpus_per_node, min_records)
    samples = sum(len(n) for n in nodes)
    values = sum(len(r.metrics) for n in nodes for r in n)
    out: dict[str, Any] = {"nodes": len(nodes), "gpus_per_node": gpus_per_node, "gpu_samples": samples,
                           "metric_values": values, "framer": "window 10, max_delay 1 s, tick 0.25 s",
                           "python": platform.python_version(), "machine": platform.machine()}
    for layout in LAYOUTS:
        ticks = [frame(n, n[0].node, layout) for n in nodes]
        batches = [t for node_ticks in ticks for t in node_ticks]
        total, raw = log_bytes(batches)
        plain, _ = log_bytes(batches, DefaultRecordBase.CODEC_NONE)
        messages = [[m for t in node_ticks for m in t] for node_ticks in ticks]
        frames = sum(len(m) for m in messages)
        out[layout] = {"frames": frames, "batches": len(batches), "records_per_frame": round(samples / frames, 2),
                       "frame_bytes_per_value": round(raw / values, 3),
                       "log_bytes_per_value": round(total / values, 3),
                       "log_bytes_per_value_uncompressed_batches": round(plain / values, 3),
                       "log_bytes_per_gpu_sample": round(total / samples, 1)}
    layouts = {layout: [[m for t in frame(n, n[0].node, layout) for m in t] for n in nodes] for layout in LAYOUTS}
    decode = dict.fromkeys(LAYOUTS, float("inf"))
    best = dict(decode)
    for _ in range(repeat):  # alternated, so a slower minute of the VM weighs on both
        for layout, messages in layouts.items():
            decode[layout] = min(decode[layout], decode_cpu(messages, layout))
            best[layout] = min(best[layout], ingest_cpu(messages))
    for layout in best:
        out[layout]["decode_us_per_gpu_sample"] = round(decode[layout] / samples * 1e6, 2)
        out[layout]["ingest_detect_us_per_gpu_sample"] = round(best[layout] / samples * 1e6, 2)
    out["ratio_ingest_detect"] = round(best["node"] / best["gpu"], 3)
    out["ratio_decode"] = round(decode["node"] / decode["gpu"], 3)
    out["ratio_log_bytes"] = round(out["node"]["log_bytes_per_value"] / out["gpu"]["log_bytes_per_value"], 3)
    deflated = out["node+deflate"]
    out["ratio_deflate_log_bytes"] = round(deflated["log_bytes_per_value"] / out["node"]["log_bytes_per_value"], 3)
    out["ratio_deflate_decode"] = round(decode["node+deflate"] / decode["node"], 3)
    out["ratio_deflate_ingest_detect"] = round(best["node+deflate"] / best["node"], 3)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--min-records", type=int, default=300, help="traces shorter than this are left out")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", help="write the result here")
    args = p.parse_args()
    result = run(args.gpus_per_node, args.min_records, args.repeat)
    text = json.dumps(result, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
