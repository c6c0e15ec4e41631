"""Which pods ask to be scraped, and where: their ``gpuwatch.io/scrape-*`` annotations.

A pod opts in with ``gpuwatch.io/scrape-port: "8002"`` (Triton's metrics port; vLLM serves
``/metrics`` on its API port, 8000 by default) and may name the path with
``gpuwatch.io/scrape-path`` (default ``/metrics``). It is scraped at its pod IP while it is
Running. An annotation that cannot be used (a port that is not 1-65535, a path that is not
an absolute path of printable characters) is reported once per pod and value, and the pod
is not scraped: nothing else depends on it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from agent.attribution.pods import PodInfo

log = logging.getLogger(__name__)

PORT_ANNOTATION: Final = "gpuwatch.io/scrape-port"
PATH_ANNOTATION: Final = "gpuwatch.io/scrape-path"
DEFAULT_PATH: Final = "/metrics"
# an absolute path (and query) of printable ASCII without spaces: nothing that could end the request line
_PATH: Final = re.compile(r"/[\x21-\x7e]*")


@dataclass(frozen=True, slots=True)
class Target:
    """One pod's inference endpoint."""

    namespace: str
    pod: str
    host: str
    port: int
    path: str = DEFAULT_PATH

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.pod

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.path}"


def target_of(pod: PodInfo) -> Target | str | None:
    """The pod's target; None when it does not ask (or is not running); why not when it asks wrongly."""
    port_text = pod.annotations.get(PORT_ANNOTATION)
    if port_text is None or pod.pod_ip is None:
        return None
    port = int(port_text) if port_text.strip().isdigit() else 0
    if not 0 < port < 65536:
        return f"annotation {PORT_ANNOTATION}={port_text!r} is not a port (1-65535)"
    path = pod.annotations.get(PATH_ANNOTATION, DEFAULT_PATH)
    if not _PATH.fullmatch(path):
        return f"annotation {PATH_ANNOTATION}={path!r} is not an absolute path"
    return Target(pod.namespace, pod.name, pod.pod_ip, port, path)


class Targets:
    """The targets among this node's pods, reporting each wrong annotation once."""

    def __init__(self) -> None:
        self._reported: set[tuple[str, str, str]] = set()

    def of(self, pods: Iterable[PodInfo]) -> list[Target]:
        found: list[Target] = []
        for pod in pods:
            got = target_of(pod)
            if isinstance(got, Target):
                found.append(got)
            elif got is not None and (pod.namespace, pod.name, got) not in self._reported:
                self._reported.add((pod.namespace, pod.name, got))
                log.warning("pod %s/%s: %s; it is not scraped", pod.namespace, pod.name, got)
        return found
