"""The pods on this node, from the Kubernetes API, indexed for attribution.

A process's cgroup gives a container ID and pod UID; turning those into a namespace, pod,
container and service name needs the pod objects. Asking the API server per process
would be slow and would hammer it from every node, so this module keeps a local cache of
only this node's pods (field selector ``spec.nodeName=<node>``), filled by one list and
kept current by a watch (the informer pattern: list, watch from the list's
resourceVersion, re-list on 410 Gone, back off on errors), on a daemon thread.

Requests go through the official ``kubernetes`` client (its configuration carries the
server address, TLS and the service-account token, whose rotation it handles), but the
responses are read as raw JSON rather than deserialized into model objects: the cache
needs a handful of fields and the watch stream must be interruptible by ``stop()``.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

import urllib3

from telemetry.pods import GENERATED_SUFFIX
from telemetry.ratelimit import RateLimitedLog

if TYPE_CHECKING:
    from kubernetes.client import Configuration
    from urllib3.response import HTTPResponse

__all__ = ["PodCache", "PodInfo", "derive_service", "pod_from_api"]

log = logging.getLogger(__name__)

SERVICE_LABELS = ("app.kubernetes.io/name", "app")
# Static pods run under a cgroup named for the kubelet's config hash, which the mirror
# pod in the API carries in this annotation (its metadata.uid is different).
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
# The pod's own annotations to gpuwatch (e.g. gpuwatch.io/scrape-port, agent.inference.targets);
# only these are kept: others can be large (kubectl's last-applied-configuration).
GPUWATCH_ANNOTATION_PREFIX = "gpuwatch.io/"
_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What attribution needs to know about one pod."""

    uid: str
    namespace: str
    name: str
    service: str | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # Container ID (runtime scheme stripped, lower-case hex) → container name, for the
    # current and last-terminated instance of every init, app and ephemeral container.
    containers: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # The UID the pod's cgroup is named for, when it differs from ``uid`` (static pods).
    cgroup_uid: str | None = None
    # status.podIP while the pod is Running (None otherwise): where its own endpoints answer.
    pod_ip: str | None = None
    # Its ``gpuwatch.io/*`` annotations only.
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    def container_id(self, container_name: str) -> str | None:
        """The ID of the named container's current instance, if the kubelet reported one."""
        found = None
        for cid, name in self.containers.items():
            if name == container_name:
                found = cid  # later entries are current instances (see pod_from_api)
        return found


def derive_service(labels: Mapping[str, str], owner_references: object) -> str | None:
    """The workload's service name, as the telemetry contract defines it.

    The ``app.kubernetes.io/name`` label, else the ``app`` label, else the name of the
    owning controller: a ReplicaSet's name loses its pod-template-hash suffix (giving the
    Deployment's name); StatefulSet, DaemonSet, Job and other controllers count as is.
    A static pod (owned by its Node) or a bare pod has no service.
    """
    for key in SERVICE_LABELS:
        value = labels.get(key)
        if value:
            return value
    owner = _controller(owner_references)
    if owner is None:
        return None
    kind, name = owner
    if kind == "Node":
        return None
    if kind == "ReplicaSet":
        return _strip_template_hash(name, labels.get(POD_TEMPLATE_HASH_LABEL))
    return name


def _controller(owner_references: object) -> tuple[str, str] | None:
    if not isinstance(owner_references, list):
        return None
    first: tuple[str, str] | None = None
    for ref in owner_references:
        if not isinstance(ref, dict):
            continue
        kind, name = ref.get("kind"), ref.get("name")
        if not isinstance(kind, str) or not isinstance(name, str) or not name:
            continue
        if ref.get("controller") is True:
            return kind, name
        if first is None:
            first = (kind, name)
    return first


def _strip_template_hash(replicaset: str, template_hash: str | None) -> str:
    if template_hash and replicaset.endswith("-" + template_hash):
        return replicaset[: -len(template_hash) - 1]
    match = GENERATED_SUFFIX.match(replicaset)
    return match.group("base") if match else replicaset


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if v is not None}


def _container_id(value: object) -> str | None:
    """``containerd://<id>``, ``cri-o://<id>`` or ``docker://<id>`` → ``<id>``."""
    if not isinstance(value, str) or not value:
        return None
    return value.rpartition("://")[2].lower() or None


def pod_from_api(obj: Mapping[str, Any]) -> PodInfo | None:
    """Build a PodInfo from a Pod as the API server returns it in JSON (camelCase).

    Returns None for an object that lacks a UID, namespace or name.
    """
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    uid, namespace, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
    if not (isinstance(uid, str) and uid and isinstance(namespace, str) and isinstance(name, str) and name):
        return None
    labels = _str_map(meta.get("labels"))
    annotations = _str_map(meta.get("annotations"))
    containers: dict[str, str] = {}
    status = obj.get("status")
    pod_ip = None
    if isinstance(status, dict):
        ip = status.get("podIP")
        if status.get("phase") == "Running" and isinstance(ip, str) and ip:
            pod_ip = ip
        for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
            statuses = status.get(key)
            if not isinstance(statuses, list):
                continue
            for cs in statuses:
                if not isinstance(cs, dict) or not isinstance(cs.get("name"), str):
                    continue
                last = cs.get("lastState")
                terminated = last.get("terminated") if isinstance(last, dict) else None
                previous = _container_id(terminated.get("containerID")) if isinstance(terminated, dict) else None
                if previous:
                    containers[previous] = cs["name"]
                current = _container_id(cs.get("containerID"))
                if current:
                    containers.pop(current, None)  # keep the current instance last
                    containers[current] = cs["name"]
    mirror = annotations.get(MIRROR_ANNOTATION)
    return PodInfo(
        uid=uid,
        namespace=namespace,
        name=name,
        service=derive_service(labels, meta.get("ownerReferences")),
        labels=MappingProxyType(labels),
        containers=MappingProxyType(containers),
        cgroup_uid=mirror.lower() if mirror and mirror != uid else None,
        pod_ip=pod_ip,
        annotations=MappingProxyType(
            {k: v for k, v in annotations.items() if k.startswith(GPUWATCH_ANNOTATION_PREFIX)}),
    )


class _Expired(Exception):
    """The watch's resourceVersion is too old (HTTP 410 Gone): the cache must re-list."""


class _WatchFailed(Exception):
    """The API server ended a watch with an ERROR event other than 410."""


class PodCache:
    """This node's pods, listed and watched from the Kubernetes API on a daemon thread.

    Lookups (``lookup_container``, ``lookup_uid``, ``lookup_name``) are lock-free dict
    reads, safe from any thread while the watch thread updates the indexes. ``generation``
    increases on every change, so callers can tell when an earlier miss is worth retrying.
    """

    def __init__(
        self,
        configuration: Configuration,
        node_name: str,
        *,
        watch_timeout_s: int = 300,
        request_timeout_s: float = 30.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
    ) -> None:
        from kubernetes.client import ApiClient, CoreV1Api  # imported here: the client takes ~1 s to import

        # The watch loop retries with backoff itself; urllib3's own retries would only
        # add a WARNING per attempt. The caller's configuration is left as it was.
        configuration = copy.copy(configuration)
        configuration.retries = False
        self._client = ApiClient(configuration)
        self._api = CoreV1Api(self._client)
        self.node_name = node_name
        self.server: str = configuration.host  # for logs; never the credentials
        self._field_selector = f"spec.nodeName={node_name}"
        self._watch_timeout_s = watch_timeout_s
        self._request_timeout_s = request_timeout_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s

        self._lock = threading.Lock()  # serializes writers; readers never take it
        self._pods: dict[str, PodInfo] = {}
        self._by_container: dict[str, tuple[PodInfo, str]] = {}
        self._by_name: dict[tuple[str, str], PodInfo] = {}
        self._by_cgroup_uid: dict[str, PodInfo] = {}
        self._generation = 0
        self._resource_version: str | None = None

        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: HTTPResponse | None = None
        self._response_lock = threading.Lock()
        self._errors = RateLimitedLog(log, every_s=300.0)

    # ---- lookups (hot path) -------------------------------------------------------

    def lookup_container(self, container_id: str) -> tuple[PodInfo, str] | None:
        """The pod and container name that a container ID belongs to."""
        return self._by_container.get(container_id)

    def lookup_uid(self, pod_uid: str) -> PodInfo | None:
        """The pod whose cgroup is named for this UID (a static pod's config hash works too)."""
        return self._pods.get(pod_uid) or self._by_cgroup_uid.get(pod_uid)

    def lookup_name(self, namespace: str, name: str) -> PodInfo | None:
        return self._by_name.get((namespace, name))

    def pods(self) -> list[PodInfo]:
        return list(self._pods.values())

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    @property
    def synced(self) -> bool:
        """Whether the first list has completed."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    # ---- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpuwatch-pod-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the watch thread (interrupting a watch that waits for events); close connections."""
        self._stop.set()
        with self._response_lock:
            response = self._response
        if response is not None:
            _interrupt(response)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("pod watch thread did not stop within %.1f s", timeout)
                return
        self._client.close()  # type: ignore[no-untyped-call]

    # ---- index maintenance ----------------------------------------------------------

    def _replace_all(self, pods: list[PodInfo]) -> None:
        by_uid: dict[str, PodInfo] = {}
        by_container: dict[str, tuple[PodInfo, str]] = {}
        by_name: dict[tuple[str, str], PodInfo] = {}
        by_cgroup_uid: dict[str, PodInfo] = {}
        for pod in pods:
            by_uid[pod.uid] = pod
            by_name[(pod.namespace, pod.name)] = pod
            for cid, container in pod.containers.items():
                by_container[cid] = (pod, container)
            if pod.cgroup_uid:
                by_cgroup_uid[pod.cgroup_uid] = pod
        with self._lock:
            self._pods, self._by_container, self._by_name, self._by_cgroup_uid = (
                by_uid,
                by_container,
                by_name,
                by_cgroup_uid,
            )
            self._generation += 1

    def _upsert(self, pod: PodInfo) -> None:
        with self._lock:
            old = self._pods.get(pod.uid)
            if old is not None:
                self._unindex(old)
            self._pods[pod.uid] = pod
            self._by_name[(pod.namespace, pod.name)] = pod
            for cid, container in pod.containers.items():
                self._by_container[cid] = (pod, container)
            if pod.cgroup_uid:
                self._by_cgroup_uid[pod.cgroup_uid] = pod
            self._generation += 1

    def _remove(self, uid: str) -> None:
        with self._lock:
            old = self._pods.pop(uid, None)
            if old is not None:
                self._unindex(old)
                self._generation += 1

    def _unindex(self, old: PodInfo) -> None:
        for cid in old.containers:
            entry = self._by_container.get(cid)
            if entry is not None and entry[0].uid == old.uid:
                del self._by_container[cid]
        if (named := self._by_name.get((old.namespace, old.name))) is not None and named.uid == old.uid:
            del self._by_name[(old.namespace, old.name)]
        mirrored = self._by_cgroup_uid.get(old.cgroup_uid) if old.cgroup_uid else None
        if old.cgroup_uid and mirrored is not None and mirrored.uid == old.uid:
            del self._by_cgroup_uid[old.cgroup_uid]

    # ---- list + watch -----------------------------------------------------------------

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException

        need_list = True
        consistent_list = False  # the first list may be served from the API server's cache
        expired_before = False
        backoff = self._backoff_initial_s
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list(consistent_list)
                    need_list = False
                events = self._watch()
                expired_before = False
                self._errors.resolved("watch", "pod watch for node %s recovered", self.node_name)
                if events:
                    backoff = self._backoff_initial_s
            except (ApiException, _Expired, _WatchFailed, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if self._stop.is_set():
                    break
                if isinstance(exc, _Expired) or (isinstance(exc, ApiException) and exc.status == 410):
                    log.debug("pod watch resourceVersion expired; re-listing")
                    need_list, consistent_list = True, True
                    self._resource_version = None
                    if expired_before:  # a server that expires every fresh watch must not spin us
                        backoff = self._pause(backoff)
                    expired_before = True
                    continue
                self._errors.warning(
                    "watch",
                    "pod %s for node %s failed (%s); retrying",
                    "list" if need_list else "watch",
                    self.node_name,
                    _describe(exc),
                )
                backoff = self._pause(backoff)

    def _pause(self, backoff: float) -> float:
        self._stop.wait(backoff * random.uniform(0.5, 1.0))
        return min(backoff * 2, self._backoff_max_s)

    def _list(self, consistent: bool) -> None:
        raw: Any = self._api.list_pod_for_all_namespaces(
            field_selector=self._field_selector,
            resource_version=None if consistent else "0",
            _preload_content=False,
            _request_timeout=self._request_timeout_s,
        )
        response = cast("HTTPResponse", raw)
        try:
            body = json.loads(response.data)
        finally:
            response.release_conn()
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise ValueError("pod list response is not a PodList")
        pods = [pod for pod in map(pod_from_api, body["items"]) if pod is not None]
        self._replace_all(pods)
        metadata = body.get("metadata")
        rv = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        self._resource_version = rv if isinstance(rv, str) and rv else None
        if not self._synced.is_set():
            log.info("pod cache for node %s synced: %d pods", self.node_name, len(pods))
            self._synced.set()

    def _watch(self) -> int:
        """Follow one watch request to its end; return how many events it delivered."""
        raw: Any = self._api.list_pod_for_all_namespaces(
            field_selector=self._field_selector,
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self._resource_version,
            timeout_seconds=self._watch_timeout_s,
            _preload_content=False,
            _request_timeout=(self._request_timeout_s, self._watch_timeout_s + self._request_timeout_s),
        )
        response = cast("HTTPResponse", raw)
        with self._response_lock:
            self._response = response
        if self._stop.is_set():  # stop() ran before the response was there to interrupt
            with self._response_lock:
                self._response = None
            response.close()
            return 0
        events = 0
        clean = False
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    return events
                self._handle_event(line)
                events += 1
            clean = True
        finally:
            with self._response_lock:
                self._response = None
            if clean:
                response.release_conn()
            else:
                response.close()
        return events

    def _handle_event(self, line: bytes) -> None:
        event = json.loads(line)
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise ValueError("malformed watch event")
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            code, reason = obj.get("code"), obj.get("reason") or obj.get("message")
            if code == 410:
                raise _Expired(str(reason))
            raise _WatchFailed(f"watch error {code}: {reason}")
        if kind in ("ADDED", "MODIFIED"):
            pod = pod_from_api(obj)
            if pod is not None:
                self._upsert(pod)
        elif kind == "DELETED":
            uid = obj.get("metadata", {}).get("uid")
            if isinstance(uid, str):
                self._remove(uid)
        metadata = obj.get("metadata")
        rv = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        if isinstance(rv, str) and rv:
            self._resource_version = rv


def _lines(response: HTTPResponse) -> Iterator[bytes]:
    """The newline-delimited JSON events of a watch response, as they arrive."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def _interrupt(response: HTTPResponse) -> None:
    """Unblock a thread reading a watch response (urllib3 2.3+ can shut the socket down)."""
    shutdown = getattr(response, "shutdown", None)
    try:
        if shutdown is not None:
            shutdown()
        else:
            response.close()
    except (OSError, ValueError, RuntimeError) as exc:
        log.debug("could not interrupt pod watch: %s", exc)


def _describe(exc: BaseException) -> str:
    """A short error description that never includes request headers (the token)."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
