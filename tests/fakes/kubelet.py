"""A kubelet PodResources API stand-in: a real gRPC server on a Unix socket.

It implements ``v1.PodResourcesLister/List`` with the same generated messages the agent
uses, answering what a kubelet on a GPU node with the NVIDIA device plugin reports.
"""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from agent.attribution.podresources import pb2

GPU0 = "GPU-97b75092-4a4c-0f9b-7a8e-1f2d3c4b5a69"
GPU1 = "GPU-3c1f8e2a-6b7d-4e9f-8a0b-1c2d3e4f5a6b"
GPU2 = "GPU-0d9e8f7a-6b5c-4d3e-2f1a-0b9c8d7e6f5a"
MIG = "MIG-5e4f3a2b-1c0d-5e9f-8a7b-6c5d4e3f2a1b"


def _devices(resource: str, *ids: str, numa: int = 0) -> Any:
    return pb2.ContainerDevices(
        resource_name=resource, device_ids=list(ids), topology=pb2.TopologyInfo(nodes=[pb2.NUMANode(ID=numa)])
    )


def kubelet_answer() -> Any:
    """What a kubelet on an 8-GPU node with the NVIDIA device plugin reports (abridged)."""
    return pb2.ListPodResourcesResponse(
        pod_resources=[
            pb2.PodResources(
                name="trainer-7d9c5b6f8-x2k4q",
                namespace="research",
                containers=[
                    pb2.ContainerResources(
                        name="main",
                        devices=[_devices("nvidia.com/gpu", GPU0, GPU1)],
                        cpu_ids=[2, 3, 4, 5],
                        memory=[pb2.ContainerMemory(memory_type="memory", size=256 << 30)],
                    ),
                    pb2.ContainerResources(name="log-shipper"),
                ],
            ),
            pb2.PodResources(
                name="inference-5f8d7c9b4-qzt6m",
                namespace="serving",
                containers=[
                    pb2.ContainerResources(name="triton", devices=[_devices("nvidia.com/mig-1g.18gb", MIG, numa=1)])
                ],
            ),
            # Two time-sliced replicas of one GPU, held by two pods.
            pb2.PodResources(
                name="embedder-6b7f9d5c8-h4mzv",
                namespace="serving",
                containers=[pb2.ContainerResources(name="server", devices=[_devices("nvidia.com/gpu", f"{GPU2}::0")])],
            ),
            pb2.PodResources(
                name="evaluator-0",
                namespace="research",
                containers=[pb2.ContainerResources(name="eval", devices=[_devices("nvidia.com/gpu", f"{GPU2}::3")])],
            ),
            # Not GPUs: a NIC from another device plugin, and a pod with CPUs only.
            pb2.PodResources(
                name="router-0",
                namespace="net",
                containers=[
                    pb2.ContainerResources(name="vpp", devices=[_devices("intel.com/sriov_netdevice", "0000:3b:02.1")])
                ],
            ),
            pb2.PodResources(name="idle", namespace="default", containers=[pb2.ContainerResources(name="c")]),
        ]
    )


class FakeKubelet:
    """A gRPC server on a Unix socket that implements v1.PodResourcesLister/List."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.answer: Any = kubelet_answer()
        self.calls = 0
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None

    def _list(self, request: Any, context: grpc.ServicerContext) -> Any:
        assert isinstance(request, pb2.ListPodResourcesRequest)
        with self._lock:
            self.calls += 1
            return self.answer

    def start(self) -> FakeKubelet:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.unary_unary_rpc_method_handler(
            self._list,
            request_deserializer=pb2.ListPodResourcesRequest.FromString,
            response_serializer=pb2.ListPodResourcesResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1.PodResourcesLister", {"List": handler}),)
        )
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
