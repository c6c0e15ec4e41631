"""Writes vllm_v1.txt and vllm_v0.txt: /metrics pages as vLLM renders them (run from this directory).

vLLM's server renders its metrics with prometheus_client (its default registry, so the
process and GC families come first). The families below are vLLM's own definitions, names,
help texts, label names and bucket boundaries copied from its sources:
v1 from vllm/v1/metrics/loggers.py (PrometheusStatLogger, vLLM 0.10), v0 from
vllm/engine/metrics.py (Metrics, vLLM 0.6). The values are those of a replica that served a
few hundred requests; the tests change them to make a second scrape.
"""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
REQUEST_LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0]
TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
        80.0, 160.0, 640.0, 2560.0]
ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
TOKENS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000]


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    ProcessCollector(registry=reg)
    PlatformCollector(registry=reg)
    GCCollector(registry=reg)
    return reg


def v1(path: str) -> None:
    rng = random.Random(14)
    reg = registry()
    labels = ["model_name", "engine"]
    values = [MODEL, "0"]
    Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels,
          registry=reg).labels(*values).set(12)
    Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels,
          registry=reg).labels(*values).set(3)
    Gauge("vllm:gpu_cache_usage_perc",
          "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
          labels, registry=reg).labels(*values).set(0.4375)
    Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
          registry=reg).labels(*values).set(0.4375)
    for name, doc, n in (
        ("vllm:num_preemptions", "Cumulative number of preemption from the engine.", 2),
        ("vllm:prompt_tokens", "Number of prefill tokens processed.", 412_345),
        ("vllm:generation_tokens", "Number of generation tokens processed.", 98_765),
        ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", 412_345),
        ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", 120_000),
    ):
        Counter(name, doc, labels, registry=reg).labels(*values).inc(n)
    success = Counter("vllm:request_success", "Count of successfully processed requests.",
                      [*labels, "finished_reason"], registry=reg)
    for reason, n in (("stop", 380), ("length", 20), ("abort", 0)):
        success.labels(*values, reason).inc(n)
    for name, doc, buckets, mean in (
        ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT, 0.18),
        ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL, 0.021),
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", REQUEST_LATENCY, 4.2),
        ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
         REQUEST_LATENCY, 0.05),
        ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
         REQUEST_LATENCY, 4.1),
        ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
         REQUEST_LATENCY, 0.16),
        ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
         REQUEST_LATENCY, 3.9),
        ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", TOKENS, 1030.0),
        ("vllm:request_generation_tokens", "Number of generation tokens processed.", TOKENS, 247.0),
        ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", TOKENS, 512.0),
    ):
        h = Histogram(name, doc, labels, buckets=buckets, registry=reg).labels(*values)
        for _ in range(400):
            h.observe(rng.expovariate(1 / mean))
    Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
          ["block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization", "num_gpu_blocks"],
          registry=reg).labels("16", "auto", "True", "0.9", "27428").set(1)
    with open(path, "wb") as f:
        f.write(generate_latest(reg))


def v0(path: str) -> None:
    rng = random.Random(6)
    reg = registry()
    labels, values = ["model_name"], [MODEL]
    for name, doc, v in (
        ("vllm:num_requests_running", "Number of requests currently running on GPU.", 7),
        ("vllm:num_requests_swapped", "Number of requests swapped to CPU.", 0),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 5),
        ("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", 0.8125),
        ("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", 0.0),
    ):
        Gauge(name, doc, labels, registry=reg).labels(*values).set(v)
    success = Counter("vllm:request_success", "Count of successfully processed requests.",
                      [*labels, "finished_reason"], registry=reg)
    success.labels(*values, "stop").inc(150)
    for name, doc, buckets, mean in (
        ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT[:16], 0.31),
        ("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
         REQUEST_LATENCY[:12], 6.0),
    ):
        h = Histogram(name, doc, labels, buckets=buckets, registry=reg).labels(*values)
        for _ in range(150):
            h.observe(rng.expovariate(1 / mean))
    with open(path, "wb") as f:
        f.write(generate_latest(reg))


if __name__ == "__main__":
    v1("vllm_v1.txt")
    v0("vllm_v0.txt")
