"""Inference-server signals: scrape the Prometheus endpoints of pods that ask for it (issue 14).

A pod on the agent's node that carries the annotation ``gpuwatch.io/scrape-port`` (and
optionally ``gpuwatch.io/scrape-path``, default ``/metrics``) is scraped at its pod IP every
``inference_scrape_period`` seconds. What its server says (Triton's ``nv_inference_*``,
vLLM's ``vllm:*``) becomes the catalog's ``gpuwatch_inference_*`` rows on the records of
the GPUs that pod holds. The parts: :mod:`.parse` (the text format), :mod:`.rates`
(increases between two scrapes), :mod:`.triton` and :mod:`.vllm` (each server's names),
:mod:`.targets` (who asks), :mod:`.fetch` (one bounded HTTP GET) and :mod:`.scraper` (the
loop, on a thread of its own, and what the sampler reads).
"""
