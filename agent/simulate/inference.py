"""Inference-server figures for a simulated fleet's serving pods (``--simulate``).

Why: with the simulated driver there is no inference server to scrape, yet the dashboards'
inference row, the web page's inference chart and the diagnosis that weighs demand should
show what they do on a real node (`gpuwatch up` is where a new user first looks, and the
live-deployment test checks that every dashboard query returns data). The simulated fleet's
serving pods run "vllm"; their figures follow the GPU's own simulated load the way a vLLM
server's do: requests per second with the load, queue time and waiting requests growing as
it nears saturation, running requests and KV-cache use with the load. Pods that do not
serve get none, as on a real node where only pods that ask are scraped.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.devices import GpuTarget
from agent.stats import Snapshot
from telemetry import keys as k
from telemetry.records import ProcessRecord

SERVER = "vllm"  # the process name of the simulated fleet's inference servers
PEAK_RPS = 120.0  # requests per second at full load


class SimulatedServerFigures:
    """A :class:`agent.runtime.PodFigures` for the simulated driver (no thread, no I/O)."""

    def add_to(self, t: GpuTarget, processes: Sequence[ProcessRecord], metrics: dict[str, float]) -> None:
        if not any(p.name == SERVER for p in processes):
            return
        load = metrics.get(k.SM_ACTIVE)
        if load is None:
            return
        near_full = max(0.0, load - 0.8) / 0.2  # 0 below 80% load, 1 at saturation
        queue = 0.012 + 0.25 * near_full * near_full
        rps = PEAK_RPS * load
        metrics[k.INFERENCE_REQUESTS_PER_SECOND] = round(rps, 3)
        metrics[k.INFERENCE_QUEUE_SECONDS] = round(queue, 4)
        metrics[k.INFERENCE_COMPUTE_SECONDS] = round(0.045 + 0.02 * load, 4)
        metrics[k.INFERENCE_PENDING_REQUESTS] = round(rps * queue, 3)
        metrics[k.INFERENCE_RUNNING_REQUESTS] = round(4.0 + 60.0 * load)
        metrics[k.INFERENCE_TTFT_SECONDS] = round(0.06 + queue, 4)
        metrics[k.INFERENCE_KV_CACHE_RATIO] = round(min(0.97, 0.15 + 0.75 * load), 4)

    def start(self) -> None:
        return None

    def stop(self, timeout: float = 5.0) -> None:
        return None

    def stats(self) -> Sequence[Snapshot]:
        return ()
