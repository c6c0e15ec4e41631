"""Which pod and container hold each GPU, from the kubelet's PodResources API.

Process attribution only sees pods that run a process on a GPU. A pod that was given a
GPU but is idle, crashed or still loading is invisible to it, yet it is exactly what an
operator looking for wasted GPUs wants to see. The kubelet knows every device it handed
out: its PodResources gRPC service (``v1.PodResourcesLister/List`` on
``/var/lib/kubelet/pod-resources/kubelet.sock``) lists, per pod and container, the device
IDs of each extended resource. For the NVIDIA device plugin these IDs are GPU UUIDs
(``GPU-...``) for ``nvidia.com/gpu`` and MIG UUIDs (``MIG-...``) for ``nvidia.com/mig-*``,
the same UUIDs NVML reports.

The kubelet is polled every few seconds on a daemon thread; the sampling path only reads
the last answer.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from telemetry.ratelimit import RateLimitedLog

if TYPE_CHECKING:
    import grpc

__all__ = [
    "DEFAULT_SOCKET",
    "GPU_RESOURCE_PREFIXES",
    "DeviceHolder",
    "PodResourcesClient",
    "device_uuid",
    "gpu_holders",
]

log = logging.getLogger(__name__)



def _pb2() -> Any:
    """The protoc-generated module, imported on first use: its classes are built at import
    time, which type checkers cannot see, and protobuf costs memory on nodes without a kubelet
    socket."""
    return importlib.import_module("agent.attribution.podresources_pb2")


def __getattr__(name: str) -> Any:
    if name == "pb2":
        return _pb2()
    raise AttributeError(name)


DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# nvidia.com/gpu (and renamed shared variants such as nvidia.com/gpu.shared) and the MIG
# resources of the device plugin's "mixed" strategy (nvidia.com/mig-1g.10gb, ...).
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
LIST_METHOD = "/v1.PodResourcesLister/List"
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # the kubelet's own limit for this API


@dataclass(frozen=True, slots=True)
class DeviceHolder:
    """A container that the kubelet assigned a device to."""

    namespace: str
    pod: str
    container: str
    resource: str


def device_uuid(device_id: str) -> str:
    """The GPU UUID behind a device plugin ID: time-sliced replicas are ``<uuid>::<n>``."""
    return device_id.split("::", 1)[0]


def gpu_holders(
    response: Any, resource_prefixes: tuple[str, ...] = GPU_RESOURCE_PREFIXES
) -> dict[str, tuple[DeviceHolder, ...]]:
    """Map each GPU/MIG UUID in a ListPodResourcesResponse to the containers holding it."""
    holders: dict[str, list[DeviceHolder]] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                resource = devices.resource_name
                if not resource.startswith(resource_prefixes):
                    continue
                holder = DeviceHolder(pod.namespace, pod.name, container.name, resource)
                for device_id in devices.device_ids:
                    uuid = device_uuid(device_id)
                    listed = holders.setdefault(uuid, [])
                    if holder not in listed:
                        listed.append(holder)
    return {uuid: tuple(listed) for uuid, listed in holders.items()}


class PodResourcesClient:
    """Polls the kubelet PodResources API over its Unix socket and keeps the GPU holders.

    A missing socket or a failing call is not an error for the caller: ``holders()`` keeps
    the last good answer for ``stale_after_s`` and then becomes empty.
    """

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        *,
        poll_interval_s: float = 10.0,
        timeout_s: float = 5.0,
        stale_after_s: float = 60.0,
        resource_prefixes: tuple[str, ...] = GPU_RESOURCE_PREFIXES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.socket_path = socket_path
        self._poll_interval_s = poll_interval_s
        self._timeout_s = timeout_s
        self._stale_after_s = stale_after_s
        self._resource_prefixes = resource_prefixes
        self._clock = clock
        self._channel: grpc.Channel | None = None
        self._list: Any = None
        self._holders: Mapping[str, tuple[DeviceHolder, ...]] = MappingProxyType({})
        self._last_success: float | None = None
        self._generation = 0
        self._poll_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors = RateLimitedLog(log, every_s=300.0)

    def holders(self) -> Mapping[str, tuple[DeviceHolder, ...]]:
        """GPU/MIG UUID → containers holding it, as of the last successful poll."""
        return self._holders

    @property
    def generation(self) -> int:
        """Increases whenever the holders change."""
        return self._generation

    def poll(self) -> bool:
        """Ask the kubelet once; return whether it answered. Never raises."""
        import grpc  # here, not at the top: grpc costs ~20 MB of RSS on nodes without the socket

        with self._poll_lock:
            if not os.path.exists(self.socket_path):
                self._fail("socket", "kubelet PodResources socket %s is missing", self.socket_path)
                return False
            try:
                response = self._stub()(_pb2().ListPodResourcesRequest(), timeout=self._timeout_s)
            except grpc.RpcError as exc:
                code = exc.code() if isinstance(exc, grpc.Call) else None
                self._fail("rpc", "kubelet PodResources List failed: %s", getattr(code, "name", exc))
                # A restarted kubelet listens on a new socket; a fresh channel reaches it on the next
                # poll instead of waiting out the old channel's reconnect backoff.
                self._close_channel()
                return False
            holders = gpu_holders(response, self._resource_prefixes)
            self._last_success = self._clock()
            for key in ("rpc", "socket"):
                self._errors.resolved(key, "kubelet PodResources API at %s answers again", self.socket_path)
            self._set(holders)
            return True

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpuwatch-podresources", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
        self.close()

    def close(self) -> None:
        with self._poll_lock:
            self._close_channel()

    def _close_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel, self._list = None, None

    def _run(self) -> None:
        self.poll()
        while not self._stop.wait(self._poll_interval_s):
            self.poll()

    def _stub(self) -> Any:
        import grpc

        if self._list is None:
            pb2 = _pb2()
            self._channel = grpc.insecure_channel(
                "unix://" + os.path.abspath(self.socket_path),
                options=[("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES)],
            )
            self._list = self._channel.unary_unary(
                LIST_METHOD,
                request_serializer=pb2.ListPodResourcesRequest.SerializeToString,
                response_deserializer=pb2.ListPodResourcesResponse.FromString,
            )
        return self._list

    def _fail(self, key: str, msg: str, *args: object) -> None:
        self._errors.warning(key, msg, *args)
        if self._last_success is None or self._clock() - self._last_success >= self._stale_after_s:
            self._set({})

    def _set(self, holders: dict[str, tuple[DeviceHolder, ...]]) -> None:
        if holders != self._holders:
            self._holders = MappingProxyType(holders)
            self._generation += 1
