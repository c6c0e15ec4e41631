"""NVIDIA Triton Inference Server's metric names, turned into the catalog's inference rows.

Names and meanings from Triton's documentation (docs/user_guide/metrics.md, "Inference
Request Metrics"): every family is per model and version (labels ``model``, ``version``);
the latencies are cumulative counters in microseconds. The documentation pairs the queue
counter with the request counter ("the ``_count`` and ``_sum`` of a summary should generally
match the counter metric equivalents": ``nv_inference_request_success`` with
``nv_inference_queue_duration_us``), so a mean per request divides by successful requests,
not by ``nv_inference_count``, which counts a batch of n as n inferences. The compute time
"does not include cached requests", so its mean divides by the requests less the response
cache's hits (``nv_cache_num_hits_per_model``, present only where the cache is on).

Triton reports neither running requests, time to first token nor KV-cache use: those rows
stay absent for a Triton pod.
"""

from __future__ import annotations

from typing import Final

from agent.inference.rates import Scrape, rate, ratio
from telemetry import keys as k

SUCCESS: Final = "nv_inference_request_success"
QUEUE_US: Final = "nv_inference_queue_duration_us"
COMPUTE_INFER_US: Final = "nv_inference_compute_infer_duration_us"
PENDING: Final = "nv_inference_pending_request_count"
CACHE_HITS: Final = "nv_cache_num_hits_per_model"
_US: Final = 1e-6

#: the sample names this module reads (the parser skips the others)
NAMES: Final = frozenset({SUCCESS, QUEUE_US, COMPUTE_INFER_US, PENDING, CACHE_HITS})


def figures(prev: Scrape | None, cur: Scrape) -> dict[str, float]:
    """The inference rows a Triton page gives: the pending gauge from ``cur`` alone, rates and
    means only with a previous scrape."""
    out: dict[str, float] = {}
    pending = cur.total(PENDING)
    if pending is not None:
        out[k.INFERENCE_PENDING_REQUESTS] = pending
    if prev is None:
        return out
    for key, value in (
        (k.INFERENCE_REQUESTS_PER_SECOND, rate(prev, cur, SUCCESS)),
        (k.INFERENCE_QUEUE_SECONDS, ratio(prev, cur, QUEUE_US, SUCCESS, _US)),
        (k.INFERENCE_COMPUTE_SECONDS, ratio(prev, cur, COMPUTE_INFER_US, SUCCESS, _US, less=CACHE_HITS)),
    ):
        if value is not None:
            out[key] = value
    return out
