"""The Attributor: who a GPU process is (pid → cgroup → container → pod → service).

This is what the sampling path calls for every GPU process on every sample, so a pid
seen before costs dict lookups only: the cgroup file, comm and start time are read once
per process, and the pod lookups that follow are O(1) index reads in the PodCache. Each
cached entry is re-checked against /proc/<pid>/stat's start time (field 22) at most every
``revalidate_s`` seconds, so a pid reused by a new process is resolved again, and pids
not asked about for a while or gone from /proc are evicted.

It composes whichever sources exist: /proc always; the Kubernetes API pod cache and the
kubelet PodResources API only inside Kubernetes. Without them, an identity is just the
pid and command name.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent.attribution.cgroup import NO_CONTAINER, ContainerRef, parse_cgroup
from agent.attribution.podresources import DEFAULT_SOCKET, DeviceHolder, PodResourcesClient
from agent.attribution.pods import PodCache, PodInfo

if TYPE_CHECKING:
    from kubernetes.client import Configuration

__all__ = ["Attributor", "Identity"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a GPU user is. Fields are None where unknown (e.g. outside Kubernetes)."""

    pid: int | None
    name: str | None  # command name (/proc/<pid>/comm)
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    service: str | None = None
    container_id: str | None = None


@dataclass(slots=True)
class _Entry:
    present: bool  # whether /proc/<pid> existed when last checked
    start_time: int | None
    ref: ContainerRef
    identity: Identity
    pods_generation: int  # the PodCache generation the identity was resolved at
    checked_at: float
    seen_at: float


class Attributor:
    """Resolves pids to identities from /proc, the pod cache and the kubelet's device map."""

    def __init__(
        self,
        node_name: str,
        proc_root: Path = Path("/proc"),
        pods: PodCache | None = None,
        podresources: PodResourcesClient | None = None,
        *,
        revalidate_s: float = 2.0,
        idle_evict_s: float = 120.0,
        sweep_interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_name = node_name
        self._proc = proc_root
        self._pods = pods
        self._podresources = podresources
        self._revalidate_s = revalidate_s
        self._idle_evict_s = idle_evict_s
        self._sweep_interval_s = sweep_interval_s
        self._clock = clock
        self._cache: dict[int, _Entry] = {}
        self._lock = threading.Lock()  # for cache writers; cache hits take no lock
        self._next_sweep = clock() + sweep_interval_s
        self._owners: dict[str, list[Identity]] = {}
        self._owners_key: tuple[int, int] | None = None
        self._started = False
        self._missing_pid_logged = False

    @classmethod
    def from_environment(
        cls,
        node_name: str,
        kubeconfig: str | None = None,
        podresources_socket: str = DEFAULT_SOCKET,
        proc_root: Path = Path("/proc"),
        *,
        podresources_poll_s: float = 10.0,
    ) -> Attributor:
        """Use the Kubernetes API and the kubelet socket where they exist, /proc always.

        Kubernetes config: in-cluster (service account) when KUBERNETES_SERVICE_HOST is set,
        else ``kubeconfig`` if given, else none. A config that cannot be loaded disables pod
        attribution with one warning; it never stops the agent. The kubelet's PodResources
        socket is used when it exists, polled every ``podresources_poll_s`` seconds.
        """
        pods: PodCache | None = None
        if node_name:
            configuration = _kubernetes_configuration(kubeconfig)
            if configuration is not None:
                pods = PodCache(configuration, node_name)
        elif os.environ.get("KUBERNETES_SERVICE_HOST") or kubeconfig:
            log.warning("no node name given; pod attribution from the Kubernetes API is disabled")
        podresources = (
            PodResourcesClient(podresources_socket, poll_interval_s=podresources_poll_s)
            if os.path.exists(podresources_socket)
            else None
        )
        return cls(node_name, proc_root, pods, podresources)

    # ---- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        """Start the pod watch and the kubelet poll (if those sources exist)."""
        if self._started:
            return
        self._started = True
        log.info("process attribution sources: %s", ", ".join(self._describe_sources()))
        if self._pods is not None:
            self._pods.start()
        if self._podresources is not None:
            self._podresources.start()

    def stop(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        if self._pods is not None:
            self._pods.stop(timeout)
        if self._podresources is not None:
            self._podresources.stop(max(0.0, deadline - time.monotonic()))
        self._started = False

    def sources(self) -> list[str]:
        """The attribution sources in use, e.g. ["proc", "kubernetes", "podresources"]."""
        found = ["proc"]
        if self._pods is not None:
            found.append("kubernetes")
        if self._podresources is not None:
            found.append("podresources")
        return found

    def pods(self) -> list[PodInfo]:
        """This node's pods from the pod cache (none without Kubernetes): for the inference scraper."""
        return self._pods.pods() if self._pods is not None else []

    @property
    def pod_count(self) -> int:
        """Pods on this node in the pod cache (0 without Kubernetes)."""
        return self._pods.pod_count if self._pods is not None else 0

    # ---- identify (hot path) -------------------------------------------------------

    def identify(self, pid: int) -> Identity:
        """The identity of a process. Never raises; unknown parts are None."""
        now = self._clock()
        if now >= self._next_sweep:
            self._sweep(now)
        entry = self._cache.get(pid)
        if entry is None or now - entry.checked_at >= self._revalidate_s:
            entry = self._load(pid, entry, now)
        entry.seen_at = now
        pods = self._pods
        if pods is not None and entry.pods_generation != pods.generation and entry.ref != NO_CONTAINER:
            # The pod cache changed since this entry was resolved: a container that was
            # missing may be known now (and labels may have changed). Dict lookups only.
            entry.pods_generation = pods.generation
            identity = self._resolve(pid, entry.identity.name, entry.ref)
            # A process outliving its deleted pod (termination grace period) stays that pod's.
            if identity.pod is not None or entry.identity.pod is None:
                entry.identity = identity
        return entry.identity

    def _load(self, pid: int, entry: _Entry | None, now: float) -> _Entry:
        """Read /proc for a new pid, or re-check a cached one against its start time."""
        present, start_time = self._start_time(pid)
        with self._lock:
            if entry is not None and entry.present == present and entry.start_time == start_time:
                entry.checked_at = now
                return entry
            generation = self._pods.generation if self._pods is not None else -1
            if not present:
                self._note_missing(pid)
                entry = _Entry(False, None, NO_CONTAINER, Identity(pid=pid, name=None), generation, now, now)
            else:
                name = self._comm(pid)
                ref = parse_cgroup(self._read(pid, "cgroup"))
                entry = _Entry(True, start_time, ref, self._resolve(pid, name, ref), generation, now, now)
            self._cache[pid] = entry
            return entry

    def _resolve(self, pid: int, name: str | None, ref: ContainerRef) -> Identity:
        cid = ref.container_id
        pods = self._pods
        if pods is not None:
            hit = pods.lookup_container(cid) if cid else None
            if hit is not None:
                pod, container = hit
                return Identity(pid, name, pod.namespace, pod.name, container, pod.service, cid)
            # The container may not be in the pod's status yet: its pod still names it.
            owner = pods.lookup_uid(ref.pod_uid) if ref.pod_uid else None
            if owner is not None:
                return Identity(pid, name, owner.namespace, owner.name, None, owner.service, cid)
        return Identity(pid, name, container_id=cid)

    # ---- GPU holders ------------------------------------------------------------------

    def gpu_owners(self) -> dict[str, list[Identity]]:
        """GPU/MIG UUID → the containers the kubelet assigned it to (pid and name None)."""
        if self._podresources is None:
            return {}
        key = (self._podresources.generation, self._pods.generation if self._pods is not None else -1)
        if key != self._owners_key:
            self._owners = {
                uuid: [self._holder_identity(holder) for holder in holders]
                for uuid, holders in self._podresources.holders().items()
            }
            self._owners_key = key
        return {uuid: list(identities) for uuid, identities in self._owners.items()}

    def _holder_identity(self, holder: DeviceHolder) -> Identity:
        pod = self._pods.lookup_name(holder.namespace, holder.pod) if self._pods is not None else None
        return Identity(
            pid=None,
            name=None,
            namespace=holder.namespace,
            pod=holder.pod,
            container=holder.container,
            service=pod.service if pod is not None else None,
            container_id=pod.container_id(holder.container) if pod is not None else None,
        )

    # ---- /proc ------------------------------------------------------------------------

    def _read(self, pid: int, name: str) -> str:
        try:
            return (self._proc / str(pid) / name).read_bytes().decode("utf-8", "replace")
        except OSError:
            return ""

    def _comm(self, pid: int) -> str | None:
        return self._read(pid, "comm").rstrip("\n") or None

    def _start_time(self, pid: int) -> tuple[bool, int | None]:
        """(process exists, its start time in clock ticks since boot: /proc/<pid>/stat field 22)."""
        if pid <= 0:
            return False, None
        try:
            stat = (self._proc / str(pid) / "stat").read_bytes()
        except OSError:
            return False, None
        # Field 2 (comm) is parenthesized and may itself contain spaces and ')'.
        fields = stat.rpartition(b")")[2].split()
        try:
            return True, int(fields[19])
        except (IndexError, ValueError):
            return True, None

    def _note_missing(self, pid: int) -> None:
        if not self._missing_pid_logged:
            self._missing_pid_logged = True
            log.info(
                "pid %d is not in %s (process exited, or the agent does not share the host PID namespace);"
                " such processes are identified by pid only",
                pid,
                self._proc,
            )

    def _sweep(self, now: float) -> None:
        with self._lock:
            self._next_sweep = now + self._sweep_interval_s
            for pid, entry in list(self._cache.items()):
                if now - entry.seen_at >= self._idle_evict_s or not (self._proc / str(pid)).exists():
                    del self._cache[pid]

    def _describe_sources(self) -> list[str]:
        described = [f"proc ({self._proc})"]
        if self._pods is not None:
            described.append(f"kubernetes ({self._pods.server}, pods of node {self._pods.node_name})")
        if self._podresources is not None:
            described.append(f"podresources ({self._podresources.socket_path})")
        return described


def _kubernetes_configuration(kubeconfig: str | None) -> Configuration | None:
    """A client configuration, in-cluster or from a kubeconfig; None without either."""
    if not os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
        return None
    # Imported only when needed: the client takes about a second to import.
    from kubernetes import config as kube_config
    from kubernetes.client import Configuration
    from kubernetes.config import ConfigException

    configuration = Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except (ConfigException, OSError) as exc:
            log.warning("in-cluster Kubernetes config unusable (%s); pod attribution disabled", exc)
            return None
    elif kubeconfig:
        try:
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration, persist_config=False
            )
        except (ConfigException, OSError, ValueError, TypeError) as exc:
            log.warning("kubeconfig %s unusable (%s); pod attribution disabled", kubeconfig, exc)
            return None
    return configuration
