"""Shared pytest fixtures and helpers.

Sections (add new fixtures to the section they belong to, or start a new one):

* ports and HTTP: :func:`free_port`, :func:`http_get`, :func:`wait_until`
* external tools: ``promtool`` and ``prometheus_bin`` (Debian's ``prometheus`` package;
  a missing binary fails the test, it is never skipped: CI installs it)
* a real Prometheus server: ``prometheus_server`` (per test) and
  ``module_prometheus_server`` (shared by a module), both factories
* a simulated agent serving ``/metrics``: ``sim_agent`` (per test) and
  ``module_sim_agent`` (shared by a module), both factories

Every process, thread and socket a fixture starts is stopped at teardown, also when the
test fails. Heavy imports (the agent, NVML bindings) happen inside the helpers so that
tests of other packages do not pay for them.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import pytest

# Real PostgreSQL and Kafka-protocol broker fixtures live in their own plugin modules.
pytest_plugins = ["tests.fixtures_pg", "tests.fixtures_kafka"]

if TYPE_CHECKING:
    from agent.driver.simulated import Profile, SimulatedFleet
    from agent.runtime import Agent, Attribution, ScheduleConfig
    from agent.server import MetricsServer


# --------------------------------------------------------------------------------------
# ports and HTTP
# --------------------------------------------------------------------------------------


from tests.ports import free_port  # noqa: E402  (re-exported: fixtures import it from here)
from tests.support.poll import WaitTimeout, wait_until  # noqa: E402  (re-exported, as free_port)


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes
    content_type: str

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


def http_get(url: str, timeout: float = 5.0) -> HttpResponse:
    """GET ``url``; HTTP error statuses are returned, not raised (connection errors are)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return HttpResponse(resp.status, resp.read(), resp.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as exc:
        with exc:
            return HttpResponse(exc.code, exc.read(), exc.headers.get("Content-Type", ""))


# --------------------------------------------------------------------------------------
# external tools
# --------------------------------------------------------------------------------------

_INSTALL_HINT = "install it with `apt-get install -y prometheus` (CI does; these tests are never skipped)"


def _require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` was not found on PATH; {_INSTALL_HINT}", pytrace=False)
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of ``promtool`` (Debian package ``prometheus``)."""
    return _require_tool("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    """Path of the ``prometheus`` server binary (Debian package ``prometheus``)."""
    return _require_tool("prometheus")


# --------------------------------------------------------------------------------------
# a real Prometheus server
# --------------------------------------------------------------------------------------


@dataclass
class PrometheusServer:
    """A Prometheus process scraping loopback targets; query it with :meth:`query`."""

    url: str
    process: subprocess.Popen[bytes]
    workdir: Path
    log_path: Path
    job: str

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no Prometheus log)"
        return "Prometheus log (tail):\n" + "\n".join(text.splitlines()[-lines:])

    def api(self, path: str, params: dict[str, str | list[str]]) -> Any:
        """GET an HTTP API path (e.g. ``/api/v1/query``); returns ``data`` of a success answer."""
        resp = http_get(f"{self.url}{path}?{urllib.parse.urlencode(params, doseq=True)}", timeout=10.0)
        try:
            answer = resp.json()
        except ValueError:
            answer = {}
        if resp.status != 200 or answer.get("status") != "success":
            pytest.fail(f"Prometheus {path} {params} answered {resp.status}: {resp.text}", pytrace=False)
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; the result vector (``[{"metric": {...}, "value": [ts, "v"]}, ...]``)."""
        data = self.api("/api/v1/query", {"query": expr})
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's ``label_values(match, label)`` returns."""
        values: list[str] = self.api(f"/api/v1/label/{label}/values", {"match[]": [match]})
        return values

    def wait_for(
        self,
        expr: str,
        accept: Callable[[list[dict[str, Any]]], bool] = bool,
        *,
        timeout: float = 20.0,
    ) -> list[dict[str, Any]]:
        """Poll ``expr`` until ``accept(result)`` (by default: a non-empty result)."""
        last: list[list[dict[str, Any]]] = [[]]

        def probe() -> list[dict[str, Any]] | None:
            last[0] = self.query(expr)
            return last[0] if accept(last[0]) else None

        return wait_until(
            probe, timeout=timeout, interval=0.2, what=f"Prometheus query {expr!r}",
            details=lambda: f"last result: {json.dumps(last[0])[:2000]}\n{self.log_tail(15)}",
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _prometheus_config(targets: Sequence[str], job: str, scrape_interval: str) -> str:
    # JSON is YAML, so no YAML library is needed to write the config.
    config = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                   "evaluation_interval": scrape_interval},
        "scrape_configs": [{
            "job_name": job,
            # dcgm-exporter's ServiceMonitor sets honorLabels: the exporter's pod/namespace/
            # container labels name the GPU's workload, not the exporter's own pod.
            "honor_labels": True,
            "static_configs": [{"targets": list(targets)}],
        }],
    }
    return json.dumps(config, indent=2)


def start_prometheus(
    prometheus: str,
    workdir: Path,
    targets: Sequence[str],
    *,
    job: str = "gpuwatch",
    scrape_interval: str = "1s",
    ready_timeout: float = 30.0,
    attempts: int = 3,
) -> PrometheusServer:
    """Start Prometheus in ``workdir`` scraping ``targets`` (``host:port``) and wait for ``/-/ready``.

    A port taken between :func:`free_port` and Prometheus binding it makes Prometheus exit;
    that is retried on a new port. The caller must :meth:`PrometheusServer.stop` it.
    """
    config_path = workdir / "prometheus.yml"
    config_path.write_text(_prometheus_config(targets, job, scrape_interval))
    failures: list[str] = []
    for attempt in range(attempts):
        port = free_port()
        data = workdir / f"data-{attempt}"
        log_path = workdir / f"prometheus-{attempt}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [prometheus, f"--config.file={config_path}", f"--storage.tsdb.path={data}",
                 f"--web.listen-address=127.0.0.1:{port}"],
                cwd=workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        server = PrometheusServer(f"http://127.0.0.1:{port}", process, workdir, log_path, job)
        def ready_or_exited(server: PrometheusServer = server) -> bool:
            if server.process.poll() is not None:
                return True
            with contextlib.suppress(OSError):
                return http_get(f"{server.url}/-/ready", timeout=2.0).status == 200
            return False

        try:
            with contextlib.suppress(WaitTimeout):  # a timeout tries another port, as an exit does
                wait_until(ready_or_exited, timeout=ready_timeout, what=f"Prometheus ready on port {port}")
                if process.poll() is None:
                    return server
        except BaseException:
            server.stop()
            raise
        server.stop()
        failures.append(f"attempt {attempt + 1} (port {port}, exit code {process.returncode}):\n{server.log_tail()}")
    pytest.fail("Prometheus did not become ready:\n" + "\n".join(failures), pytrace=False)


class PrometheusFactory(Protocol):
    def __call__(
        self, targets: Sequence[str], *, job: str = "gpuwatch", scrape_interval: str = "1s",
    ) -> PrometheusServer: ...


@contextlib.contextmanager
def _prometheus_factory(prometheus: str, new_dir: Callable[[], Path]) -> Iterator[PrometheusFactory]:
    servers: list[PrometheusServer] = []

    def factory(targets: Sequence[str], *, job: str = "gpuwatch", scrape_interval: str = "1s") -> PrometheusServer:
        server = start_prometheus(prometheus, new_dir(), targets, job=job, scrape_interval=scrape_interval)
        servers.append(server)
        return server

    try:
        yield factory
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def prometheus_server(prometheus_bin: str, tmp_path: Path) -> Iterator[PrometheusFactory]:
    """Factory: ``prometheus_server(["127.0.0.1:PORT"])`` starts Prometheus scraping every 1 s.

    The server lives in ``tmp_path`` and is terminated when the test ends.
    """
    counter = itertools.count()

    def new_dir() -> Path:
        path = tmp_path / f"prometheus-{next(counter)}"
        path.mkdir()
        return path

    with _prometheus_factory(prometheus_bin, new_dir) as factory:
        yield factory


@pytest.fixture(scope="module")
def module_prometheus_server(
    prometheus_bin: str, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PrometheusFactory]:
    """Like ``prometheus_server``, but its servers live until the module's last test."""
    with _prometheus_factory(prometheus_bin, lambda: tmp_path_factory.mktemp("prometheus")) as factory:
        yield factory


# --------------------------------------------------------------------------------------
# a simulated agent serving /metrics
# --------------------------------------------------------------------------------------


@dataclass
class SimAgent:
    """A running agent over a :class:`SimulatedFleet`, with its HTTP server on 127.0.0.1."""

    fleet: SimulatedFleet
    agent: Agent
    server: MetricsServer
    _stopped: bool = field(default=False, repr=False)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def target(self) -> str:
        """``host:port`` for a Prometheus scrape config."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.target}"

    def get(self, path: str) -> HttpResponse:
        return http_get(self.url + path)

    def metrics(self) -> str:
        resp = self.get("/metrics")
        assert resp.status == 200, resp.text
        return resp.text

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self.server.stop()
        finally:
            self.agent.stop()


def start_sim_agent(
    count: int = 4,
    *,
    node: str = "node-a",
    models: Sequence[str] | None = None,
    mig: dict[int, list[str]] | None = None,
    profiles: Sequence[Profile] | None = None,
    config: ScheduleConfig | None = None,
    attribution: Callable[[SimulatedFleet], Attribution] | None = None,
    start_sampling: bool = True,
    ready_timeout: float = 10.0,
) -> SimAgent:
    """Open an agent over ``count`` simulated GPUs and serve it on 127.0.0.1 (a free port).

    ``attribution`` builds the attribution from the fleet (default: the simulated one,
    which names the pods of the fleet's workloads). With ``start_sampling`` (the default)
    the sampling threads run and this returns once every GPU has been sampled; without
    it the HTTP server answers but nothing is sampled until ``agent.start()``.
    """
    from agent.driver.simulated import SimulatedFleet
    from agent.exposition import Exposition
    from agent.runtime import Agent, ScheduleConfig
    from agent.server import MetricsServer
    from agent.simulate.attribution import SimulatedAttribution

    fleet = SimulatedFleet(count, models=models, mig=mig, profiles=profiles)
    # SimulatedAttribution answers like the Attribution protocol (its gpu_owners' list type differs)
    attr = attribution(fleet) if attribution is not None else cast("Attribution", SimulatedAttribution(fleet))
    agent = Agent(fleet, node, config or ScheduleConfig(), attr)
    agent.open()
    try:
        server = MetricsServer("127.0.0.1", 0, Exposition(agent))
    except BaseException:
        agent.stop()
        raise
    sim = SimAgent(fleet, agent, server)
    try:
        server.start()
        if start_sampling:
            agent.start()
            if not agent.ready.wait(ready_timeout):
                pytest.fail(f"the agent did not sample every GPU within {ready_timeout} s", pytrace=False)
    except BaseException:
        sim.stop()
        raise
    return sim


# Called like :func:`start_sim_agent`; the fixture stops every agent it started.
SimAgentFactory = Callable[..., SimAgent]


@contextlib.contextmanager
def _sim_agent_factory() -> Iterator[SimAgentFactory]:
    agents: list[SimAgent] = []

    def factory(count: int = 4, **kwargs: Any) -> SimAgent:
        sim = start_sim_agent(count, **kwargs)
        agents.append(sim)
        return sim

    try:
        yield factory
    finally:
        for sim in reversed(agents):
            sim.stop()


@pytest.fixture
def sim_agent() -> Iterator[SimAgentFactory]:
    """Factory: ``sim_agent(4, models=[...], mig={0: ["1g.18gb"]})`` -> a running :class:`SimAgent`.

    Stopped (HTTP server, then the agent's threads) when the test ends.
    """
    with _sim_agent_factory() as factory:
        yield factory


@pytest.fixture(scope="module")
def module_sim_agent() -> Iterator[SimAgentFactory]:
    """Like ``sim_agent``, but its agents live until the module's last test."""
    with _sim_agent_factory() as factory:
        yield factory
