"""Inference scraping cost: CPU microseconds per scrape of a realistic vLLM page, against a sampling tick.

Run from the repository root::

    .venv/bin/python benchmarks/bench_inference_scrape.py [--rounds 400] [--gpus 8] [--json out.json]

Why: issue 14 has the agent scrape the Prometheus page of every pod that asks (vLLM's is
hundreds of histogram lines). This measures, in one process and one run:

* the scrape: ``InferenceScraper.scrape_once`` of one target serving
  ``tests/data/inference/vllm_v1.txt`` from a loopback HTTP server (``ThreadingHTTPServer``),
  timed with the calling thread's CPU clock, so the server's own CPU is not counted: the
  agent's cost of connecting, reading, parsing (only the families it reads) and computing
  the figures; the counters are bumped between scrapes, so every round computes rates;
* the parse alone (``parse`` with the scraper's name filter) and a full parse of every line;
* the baseline: one sampling tick of the agent (``Agent.step`` over ``--gpus`` simulated
  H200s, every GPU due), CPU per tick and per GPU-sample, on the simulated driver.

The ratio scrape / tick says what one scraped pod costs next to one round of GPU sampling;
per second, a scrape every 5 s is set against ticks every 1 s (the busy interval).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import MappingProxyType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.attribution.pods import PodInfo  # noqa: E402
from agent.cpuclock import ThreadCpu  # noqa: E402
from agent.driver.simulated import SimulatedFleet  # noqa: E402
from agent.inference.parse import parse  # noqa: E402
from agent.inference.scraper import WANTED, InferenceScraper  # noqa: E402
from agent.inference.targets import PATH_ANNOTATION, PORT_ANNOTATION  # noqa: E402
from agent.runtime import Agent, ScheduleConfig  # noqa: E402

PAGE = (ROOT / "tests" / "data" / "inference" / "vllm_v1.txt").read_text()


def _page(i: int) -> bytes:
    """The vLLM page after ``i`` more requests (counters grow, so each scrape computes rates)."""
    out = []
    for line in PAGE.split("\n"):
        if line.startswith(("vllm:request_success_total{", "vllm:request_queue_time_seconds_count{",
                            "vllm:time_to_first_token_seconds_count{")):
            name, _, value = line.rpartition(" ")
            line = f"{name} {float(value) + i}"
        out.append(line)
    return "\n".join(out).encode()


def bench_scrape(rounds: int) -> dict[str, float]:
    state = {"i": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = _page(state["i"])
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    pod = PodInfo(uid="u", namespace="serving", name="vllm-0", pod_ip="127.0.0.1", annotations=MappingProxyType(
        {PORT_ANNOTATION: str(httpd.server_address[1]), PATH_ANNOTATION: "/metrics"}))
    now = [1000.0]
    scraper = InferenceScraper(lambda: [pod], lambda: {}, cpu=ThreadCpu(), clock=lambda: now[0])
    loop = asyncio.new_event_loop()
    cpu: list[float] = []
    try:
        for i in range(rounds + 20):
            state["i"] = i
            now[0] += 5.0
            t0 = time.thread_time()
            loop.run_until_complete(scraper.scrape_once())
            if i >= 20:  # warm-up rounds left out
                cpu.append(time.thread_time() - t0)
    finally:
        loop.close()
        httpd.shutdown()
        httpd.server_close()
    assert scraper.latest[("serving", "vllm-0")], "the scrape gave no figures"
    return {"scrape_cpu_us_median": 1e6 * statistics.median(cpu), "scrape_cpu_us_mean": 1e6 * statistics.fmean(cpu)}


def bench_parse(rounds: int) -> dict[str, float]:
    def per_call(wanted: frozenset[str] | None) -> float:
        best = []
        for _ in range(5):
            t0 = time.thread_time()
            for _ in range(rounds):
                parse(PAGE, wanted)
            best.append((time.thread_time() - t0) / rounds)
        return 1e6 * min(best)

    return {"parse_wanted_us": per_call(WANTED), "parse_all_lines_us": per_call(None),
            "page_lines": PAGE.count("\n"), "page_bytes": len(PAGE.encode())}


def bench_tick(gpus: int, rounds: int) -> dict[str, float]:
    now = [1000.0]
    fleet = SimulatedFleet(gpus, clock=lambda: now[0], start=0.0)
    config = ScheduleConfig(floor=0.25, ceiling=0.25, busy=0.25, cpu_budget=1.0)
    agent = Agent(fleet, "node", config, clock=lambda: now[0], calibrate_calls=False)
    agent.open()
    cpu = []
    for i in range(rounds + 20):
        now[0] += 0.25  # every GPU due each tick
        t0 = time.thread_time()
        agent.step(now[0])
        if i >= 20:
            cpu.append(time.thread_time() - t0)
    per_tick = statistics.median(cpu)
    return {"tick_cpu_us_median": 1e6 * per_tick, "gpu_sample_cpu_us": 1e6 * per_tick / len(agent.targets),
            "gpu_targets": len(agent.targets)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    logging.disable(logging.WARNING)  # the budget's and the scraper's lines are not what is measured
    out: dict[str, object] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.node(),
        "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "python": platform.python_version(),
    }
    out.update(bench_tick(args.gpus, args.rounds))
    out.update(bench_scrape(args.rounds))
    out.update(bench_parse(max(20, args.rounds // 4)))
    scrape, tick = float(out["scrape_cpu_us_median"]), float(out["tick_cpu_us_median"])  # type: ignore[arg-type]
    out["scrape_per_tick_ratio"] = scrape / tick
    out["scrape_per_gpu_sample_ratio"] = scrape / float(out["gpu_sample_cpu_us"])  # type: ignore[arg-type]
    out["share_of_a_core_per_scraped_pod_at_5s"] = scrape * 1e-6 / 5.0
    out["share_of_a_core_sampling_at_1s"] = tick * 1e-6 / 1.0
    for key, value in out.items():
        print(f"{key:40} {value:.4g}" if isinstance(value, float) else f"{key:40} {value}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
