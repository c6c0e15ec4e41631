"""The inference scraper against a real HTTP server on loopback serving Triton's and vLLM's pages.

One server (a ThreadingHTTPServer on a free port) serves every test: each path is a page the
test sets, or a fault (a hang past the timeout, a 500, garbage). Scrape times come from a
fake clock, so rates are exact; waits are polls. Covers the figures of each server, the
first scrape (gauges only), counter resets, a hanging endpoint that costs only its own
figures, a 500, garbage, the records and /metrics of the GPUs a scraped pod holds, discovery
through the pod cache (the fake Kubernetes API), and the scraper's thread and CPU account.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import MappingProxyType

import pytest

from agent.attribution.pods import PodCache, PodInfo
from agent.cpuclock import INFERENCE, ThreadCpu
from agent.driver.simulated import SimulatedFleet
from agent.exposition import Exposition
from agent.inference.scraper import SCRAPED_KEYS, InferenceScraper
from agent.inference.targets import PATH_ANNOTATION, PORT_ANNOTATION
from agent.runtime import Agent, ScheduleConfig
from agent.simulate.attribution import SimulatedAttribution
from telemetry import keys as k
from tests.fakes.kube_api import FakeKubeApi
from tests.support.poll import wait_until

DATA = Path(__file__).resolve().parent / "data" / "inference"
TRITON, VLLM, VLLM_V0 = ((DATA / n).read_text() for n in ("triton.txt", "vllm_v1.txt", "vllm_v0.txt"))
PERIOD = 5.0


def bump(text: str, deltas: dict[str, float]) -> str:
    """``text`` with ``deltas[name]`` added to every sample of that name (a later scrape of the server)."""
    out = []
    for line in text.split("\n"):
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if m and m.group(1) in deltas:
            line = f"{m.group(1)}{m.group(2) or ''} {float(m.group(3)) + deltas[m.group(1)]!r}"
        out.append(line)
    return "\n".join(out)


class Pages:
    """What each path of the test server answers; ``/hang`` holds its answer until released."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, bytes]] = {}
        self.release = threading.Event()

    def set(self, path: str, body: str | bytes, status: int = 200) -> None:
        self.pages[path] = (status, body.encode() if isinstance(body, str) else body)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Pages, int]]:
    pages = Pages()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.startswith("/hang"):
                pages.release.wait(10)
            if self.path.startswith("/chunked"):
                status, body = pages.pages["/vllm"]
                self.send_response(status)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(body), 1000):
                    part = body[i:i + 1000]
                    self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
                return
            status, body = pages.pages.get(self.path, (404, b"not found"))
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield pages, httpd.server_address[1]
    pages.release.set()
    httpd.shutdown()
    httpd.server_close()


def pod(name: str, port: int | str | None, path: str | None = None, ip: str | None = "127.0.0.1",
        namespace: str = "serving") -> PodInfo:
    annotations = {} if port is None else {PORT_ANNOTATION: str(port)}
    if path is not None:
        annotations[PATH_ANNOTATION] = path
    return PodInfo(uid=f"uid-{name}", namespace=namespace, name=name, pod_ip=ip,
                   annotations=MappingProxyType(annotations))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scraper_for(pods: list[PodInfo], clock: Clock, timeout: float = 1.0) -> InferenceScraper:
    return InferenceScraper(lambda: pods, lambda: {}, cpu=ThreadCpu(), period=PERIOD, timeout=timeout, clock=clock)


def two_scrapes(s: InferenceScraper, clock: Clock, change: callable) -> tuple[dict, dict]:  # type: ignore[valid-type]
    asyncio.run(s.scrape_once())
    first = dict(s.latest)
    change()
    clock.now += PERIOD
    asyncio.run(s.scrape_once())
    return first, dict(s.latest)


def test_triton_figures(server: tuple[Pages, int]) -> None:
    pages, port = server
    pages.set("/triton", TRITON)
    clock = Clock()
    s = scraper_for([pod("triton-0", port, "/triton")], clock)
    # both models: +500 requests each, resnet50 queued 1 s and computed 4 s more in all, 100 cached hits
    later = bump(TRITON, {"nv_inference_request_success": 500, "nv_inference_queue_duration_us": 500_000,
                          "nv_inference_compute_infer_duration_us": 2_250_000})
    first, second = two_scrapes(s, clock, lambda: pages.set("/triton", later))
    key = ("serving", "triton-0")
    assert first == {key: {k.INFERENCE_PENDING_REQUESTS: 7.0}}  # the first scrape: no interval, no rates
    got = second[key]
    assert got[k.INFERENCE_REQUESTS_PER_SECOND] == pytest.approx(1000 / PERIOD)
    assert got[k.INFERENCE_QUEUE_SECONDS] == pytest.approx(1.0 / 1000)
    assert got[k.INFERENCE_COMPUTE_SECONDS] == pytest.approx(4.5 / 1000)
    assert got[k.INFERENCE_PENDING_REQUESTS] == 7.0
    assert not set(got) & {k.INFERENCE_RUNNING_REQUESTS, k.INFERENCE_TTFT_SECONDS, k.INFERENCE_KV_CACHE_RATIO}


def test_vllm_v1_figures_and_a_chunked_page(server: tuple[Pages, int]) -> None:
    pages, port = server
    pages.set("/vllm", VLLM)
    clock = Clock()
    s = scraper_for([pod("vllm-0", port, "/vllm"), pod("vllm-chunked", port, "/chunked")], clock)
    later = bump(VLLM, {"vllm:request_success_total": 25, "vllm:request_queue_time_seconds_sum": 2.5,
                        "vllm:request_queue_time_seconds_count": 50, "vllm:request_inference_time_seconds_sum": 200,
                        "vllm:request_inference_time_seconds_count": 50, "vllm:time_to_first_token_seconds_sum": 10,
                        "vllm:time_to_first_token_seconds_count": 50})
    first, second = two_scrapes(s, clock, lambda: pages.set("/vllm", later))
    gauges = {k.INFERENCE_PENDING_REQUESTS: 3.0, k.INFERENCE_RUNNING_REQUESTS: 12.0, k.INFERENCE_KV_CACHE_RATIO: 0.4375}
    assert first[("serving", "vllm-0")] == gauges
    got = second[("serving", "vllm-0")]
    assert got == pytest.approx({**gauges, k.INFERENCE_REQUESTS_PER_SECOND: 75 / PERIOD,  # 3 series x 25
                                 k.INFERENCE_QUEUE_SECONDS: 0.05, k.INFERENCE_COMPUTE_SECONDS: 4.0,
                                 k.INFERENCE_TTFT_SECONDS: 0.2})
    assert second[("serving", "vllm-chunked")] == got  # the same page, sent in chunks


def test_vllm_v0_names(server: tuple[Pages, int]) -> None:
    pages, port = server
    pages.set("/vllm0", VLLM_V0)
    clock = Clock()
    s = scraper_for([pod("vllm-old", port, "/vllm0")], clock)
    later = bump(VLLM_V0, {"vllm:request_success_total": 10, "vllm:time_to_first_token_seconds_sum": 3,
                           "vllm:time_to_first_token_seconds_count": 10})
    _, second = two_scrapes(s, clock, lambda: pages.set("/vllm0", later))
    assert second[("serving", "vllm-old")] == pytest.approx({
        k.INFERENCE_KV_CACHE_RATIO: 0.8125, k.INFERENCE_PENDING_REQUESTS: 5.0, k.INFERENCE_RUNNING_REQUESTS: 7.0,
        k.INFERENCE_REQUESTS_PER_SECOND: 2.0, k.INFERENCE_TTFT_SECONDS: 0.3})  # v0: no queue nor inference time


def test_a_counter_reset_counts_from_zero(server: tuple[Pages, int]) -> None:
    pages, port = server
    pages.set("/reset", VLLM)
    clock = Clock()
    s = scraper_for([pod("vllm-r", port, "/reset")], clock)
    # the server restarted between the scrapes: its counters start again from 0
    restarted = "\n".join(
        re.sub(r" \S+$", " 10.0", line) if 'finished_reason="stop"' in line and "_total" in line
        else re.sub(r" \S+$", " 0.0", line) if line.startswith("vllm:request_success_total")
        else re.sub(r" \S+$", " 10.0", line) if line.startswith("vllm:request_queue_time_seconds_count")
        else re.sub(r" \S+$", " 1.5", line) if line.startswith("vllm:request_queue_time_seconds_sum")
        else line
        for line in VLLM.split("\n"))
    _, second = two_scrapes(s, clock, lambda: pages.set("/reset", restarted))
    got = second[("serving", "vllm-r")]
    assert got[k.INFERENCE_REQUESTS_PER_SECOND] == pytest.approx(10 / PERIOD)  # reset: what it counts now
    assert got[k.INFERENCE_QUEUE_SECONDS] == pytest.approx(1.5 / 10)
    assert all(v >= 0 for v in got.values())


def test_a_hanging_500_or_refusing_endpoint_costs_only_its_own_figures(
        server: tuple[Pages, int], caplog: pytest.LogCaptureFixture) -> None:
    pages, port = server
    pages.set("/vllm-ok", VLLM)
    pages.set("/boom", "internal error", status=500)
    clock = Clock()
    pods = [pod("hangs", port, "/hang"), pod("fails", port, "/boom"), pod("ok", port, "/vllm-ok"),
            pod("refuses", 1, "/metrics")]
    s = scraper_for(pods, clock, timeout=0.3)
    with caplog.at_level(logging.WARNING):
        asyncio.run(s.scrape_once())
    assert set(s.latest) == {("serving", "ok")}
    (stats,) = s.stats()
    assert (stats.timeouts_total, stats.http_errors_total, stats.connect_errors_total, stats.scrapes_total) == (
        1, 1, 1, 1)
    assert stats.targets == 4
    text = caplog.text
    assert "pod serving/hangs" in text and "within 0.3 s" in text
    assert "pod serving/fails" in text and "HTTP status 500" in text
    assert "pod serving/refuses" in text and "cannot connect" in text
    assert "Traceback" not in text


def test_garbage_is_counted_named_and_the_good_lines_used(
        server: tuple[Pages, int], caplog: pytest.LogCaptureFixture) -> None:
    pages, port = server
    lines = VLLM.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("vllm:num_requests_waiting"))
    lines[at + 1:at + 1] = ['vllm:num_requests_running{engine="0" 7', "vllm:num_requests_running 1_0"]
    pages.set("/mixed", "\n".join(lines))
    pages.set("/garbage", bytes(range(256)) * 40)
    clock = Clock()
    s = scraper_for([pod("mixed", port, "/mixed"), pod("garbage", port, "/garbage")], clock)
    with caplog.at_level(logging.WARNING):
        asyncio.run(s.scrape_once())
    assert s.latest[("serving", "mixed")][k.INFERENCE_PENDING_REQUESTS] == 3.0
    assert ("serving", "garbage") not in s.latest  # nothing usable: no figures, no error out
    (stats,) = s.stats()
    assert stats.bad_lines_total >= 2 and stats.scrapes_total == 2
    line = next(r.getMessage() for r in caplog.records if "serving/mixed" in r.getMessage())
    assert f"line {at + 2} is malformed" in line and "2 bad line(s) skipped" in line and "\n" not in line


def test_bad_annotations_are_reported_once_and_not_scraped(caplog: pytest.LogCaptureFixture) -> None:
    pods = [pod("p1", "http"), pod("p2", 70000), pod("p3", 8000, "metrics"), pod("p4", 8000, "/a b"),
            pod("p5", None), pod("p6", 8000, ip=None)]
    s = scraper_for(pods, Clock())
    with caplog.at_level(logging.WARNING):
        asyncio.run(s.scrape_once())
        asyncio.run(s.scrape_once())
    assert s.stats()[0].targets == 0
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 4, warnings
    assert any("serving/p1" in w and "'http' is not a port" in w for w in warnings)


def test_records_and_metrics_of_the_gpus_a_scraped_pod_holds(server: tuple[Pages, int]) -> None:
    """The simulated fleet's serving pods: one is scraped, its GPU records carry its figures."""
    pages, port = server
    pages.set("/gpu-vllm", VLLM)
    now = [1000.0]
    fleet = SimulatedFleet(8, clock=lambda: now[0], start=0.0)
    attribution = SimulatedAttribution(fleet)
    holder: list[tuple[str, str]] = []
    scraper = InferenceScraper(lambda: [pod(holder[0][1], port, "/gpu-vllm", namespace=holder[0][0])],
                               attribution.gpu_owners, cpu=ThreadCpu(), clock=lambda: now[0])
    agent = Agent(fleet, "n", ScheduleConfig(), attribution, clock=lambda: now[0], calibrate_calls=False,
                  pod_figures=scraper)
    agent.open()
    agent.step(now[0])
    pods = sorted({(p.namespace, p.pod) for _, r in agent.snapshot() if r for p in r.processes if p.pod and
                   p.namespace})
    holder.append(pods[0])
    asyncio.run(scraper.scrape_once())
    now[0] += 5.0
    agent.step(now[0])
    held = {t.key for t, r in agent.snapshot() if r and any((p.namespace, p.pod) == pods[0] for p in r.processes)}
    assert held
    for t, record in agent.snapshot():
        assert record is not None
        inference = {key: v for key, v in record.metrics.items() if key in SCRAPED_KEYS}
        if t.key in held:
            assert inference == {k.INFERENCE_PENDING_REQUESTS: 3.0, k.INFERENCE_RUNNING_REQUESTS: 12.0,
                                 k.INFERENCE_KV_CACHE_RATIO: 0.4375}
        else:
            assert inference == {}
    text = Exposition(agent).render().decode()
    assert "# TYPE gpuwatch_inference_pending_requests gauge" in text
    assert text.count("gpuwatch_inference_pending_requests{") == len(held)
    assert f'pod="{pods[0][1]}"' in next(line for line in text.split("\n")
                                         if line.startswith("gpuwatch_inference_pending_requests{"))
    assert "gpuwatch_agent_inference_scrapes_total 1.0" in text
    pages.set("/gpu-vllm", "down", status=503)  # the endpoint fails: the figures go, from /metrics too
    asyncio.run(scraper.scrape_once())
    now[0] += 5.0
    agent.step(now[0])
    assert all(not set(r.metrics) & set(SCRAPED_KEYS) for _, r in agent.snapshot() if r)
    assert "gpuwatch_inference_pending_requests{" not in Exposition(agent).render().decode()


def test_pods_found_through_the_pod_cache_are_scraped_on_the_scrapers_thread(server: tuple[Pages, int]) -> None:
    pages, port = server
    pages.set("/kube", TRITON)
    cpu = ThreadCpu()
    with FakeKubeApi() as api:
        cache = PodCache(api.configuration(), "gpu-node-a", backoff_initial_s=0.01, backoff_max_s=0.05)
        cache.start()
        try:
            assert cache.wait_synced(5)
            api.send({"type": "ADDED", "object": {
                "metadata": {"uid": "u-triton", "namespace": "serving", "name": "triton-7", "resourceVersion": "900",
                             "annotations": {PORT_ANNOTATION: str(port), PATH_ANNOTATION: "/kube",
                                             "kubectl.kubernetes.io/last-applied-configuration": "{...}"}},
                "spec": {"nodeName": "gpu-node-a"},
                "status": {"phase": "Running", "podIP": "127.0.0.1"}}})
            scraper = InferenceScraper(cache.pods, lambda: {}, cpu=cpu, period=0.2, timeout=1.0)
            scraper.start()
            try:
                wait_until(lambda: scraper.latest.get(("serving", "triton-7")), timeout=10,
                           what="the annotated pod's figures")
                info = cache.lookup_name("serving", "triton-7")
                assert info is not None and dict(info.annotations) == {PORT_ANNOTATION: str(port),
                                                                       PATH_ANNOTATION: "/kube"}
                assert cpu.accounts()[INFERENCE] > 0  # the scraper's thread is on the ledger
            finally:
                scraper.stop(timeout=5)
            scraper.stop()  # twice is fine
        finally:
            cache.stop()


def test_stop_ends_the_thread_while_a_target_hangs(server: tuple[Pages, int]) -> None:
    _, port = server
    scraper = InferenceScraper(lambda: [pod("hangs", port, "/hang-stop")], lambda: {}, cpu=ThreadCpu(),
                               period=1.0, timeout=30.0)
    scraper.start()
    wait_until(lambda: scraper.stats()[0].targets == 0 and scraper._thread is not None, timeout=5,
               what="the scraper thread")
    scraper.stop(timeout=5)
    assert scraper._thread is None
