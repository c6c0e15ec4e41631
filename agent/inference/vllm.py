"""vLLM's metric names (the ``vllm:`` families), turned into the catalog's inference rows.

Names from vLLM's sources (``vllm/v1/metrics/loggers.py``; ``vllm/engine/metrics.py`` for
the v0 engine) and its design notes (docs/design/v1/metrics.md): every family carries
``model_name`` (v1 adds ``engine``, one per data-parallel engine); request counters end in
``_total``; latencies are histograms in seconds, whose ``_sum`` over ``_count`` increase is
the mean over the interval. KV-cache use is ``vllm:kv_cache_usage_perc`` in v1 and
``vllm:gpu_cache_usage_perc`` in v0 (v0.10 reports both, the old one marked deprecated); both
are shares 0..1 despite the name, averaged over engines here.
"""

from __future__ import annotations

from typing import Final

from agent.inference.rates import Scrape, rate, ratio
from telemetry import keys as k

SUCCESS: Final = "vllm:request_success_total"
QUEUE: Final = "vllm:request_queue_time_seconds"
INFERENCE: Final = "vllm:request_inference_time_seconds"
TTFT: Final = "vllm:time_to_first_token_seconds"
WAITING: Final = "vllm:num_requests_waiting"
RUNNING: Final = "vllm:num_requests_running"
KV_CACHE: Final = "vllm:kv_cache_usage_perc"
KV_CACHE_V0: Final = "vllm:gpu_cache_usage_perc"
_HISTOGRAMS: Final = (
    (k.INFERENCE_QUEUE_SECONDS, QUEUE),
    (k.INFERENCE_COMPUTE_SECONDS, INFERENCE),
    (k.INFERENCE_TTFT_SECONDS, TTFT),
)

#: the sample names this module reads (the parser skips the others, buckets included)
NAMES: Final = frozenset(
    {SUCCESS, WAITING, RUNNING, KV_CACHE, KV_CACHE_V0}
    | {f"{h}_{part}" for _, h in _HISTOGRAMS for part in ("sum", "count")}
)


def figures(prev: Scrape | None, cur: Scrape) -> dict[str, float]:
    """The inference rows a vLLM page gives: gauges from ``cur`` alone, rates and means only with a
    previous scrape."""
    out: dict[str, float] = {}
    kv = cur.mean(KV_CACHE) if cur.has(KV_CACHE) else cur.mean(KV_CACHE_V0)
    for key, value in (
        (k.INFERENCE_PENDING_REQUESTS, cur.total(WAITING)),
        (k.INFERENCE_RUNNING_REQUESTS, cur.total(RUNNING)),
        (k.INFERENCE_KV_CACHE_RATIO, kv),
    ):
        if value is not None:
            out[key] = value
    if prev is None:
        return out
    found = rate(prev, cur, SUCCESS)
    if found is not None:
        out[k.INFERENCE_REQUESTS_PER_SECOND] = found
    for key, family in _HISTOGRAMS:
        mean = ratio(prev, cur, f"{family}_sum", f"{family}_count")
        if mean is not None:
            out[key] = mean
    return out
