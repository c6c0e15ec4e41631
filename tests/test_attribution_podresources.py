"""PodResourcesClient against a real gRPC server speaking the kubelet's v1 PodResources API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.attribution import Attributor, Identity
from agent.attribution.podresources import DeviceHolder, PodResourcesClient, device_uuid, pb2
from agent.attribution.pods import PodCache
from tests.fakes.kube_api import FakeKubeApi, load_recording
from tests.fakes.kubelet import GPU0, GPU1, GPU2, MIG, FakeKubelet
from tests.support.poll import wait_until


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(tmp_path / "kubelet.sock").start()
    yield fake
    fake.stop()


def test_maps_gpu_uuids_to_holding_containers(kubelet: FakeKubelet) -> None:
    client = PodResourcesClient(str(kubelet.socket_path))
    try:
        assert client.poll()
        holders = client.holders()
    finally:
        client.close()
    assert dict(holders) == {
        GPU0: (DeviceHolder("research", "trainer-7d9c5b6f8-x2k4q", "main", "nvidia.com/gpu"),),
        GPU1: (DeviceHolder("research", "trainer-7d9c5b6f8-x2k4q", "main", "nvidia.com/gpu"),),
        MIG: (DeviceHolder("serving", "inference-5f8d7c9b4-qzt6m", "triton", "nvidia.com/mig-1g.18gb"),),
        GPU2: (
            DeviceHolder("serving", "embedder-6b7f9d5c8-h4mzv", "server", "nvidia.com/gpu"),
            DeviceHolder("research", "evaluator-0", "eval", "nvidia.com/gpu"),
        ),
    }


def test_device_uuid_strips_time_slicing_replica_suffix() -> None:
    assert device_uuid(f"{GPU0}::7") == GPU0
    assert device_uuid(MIG) == MIG


def test_missing_socket_is_no_error(tmp_path: Path) -> None:
    client = PodResourcesClient(str(tmp_path / "absent.sock"))
    assert client.poll() is False
    assert dict(client.holders()) == {}
    attributor = Attributor("gpu-node-a", proc_root=tmp_path, podresources=client)
    assert attributor.gpu_owners() == {}


def test_unanswering_kubelet_keeps_last_answer_until_stale(kubelet: FakeKubelet) -> None:
    now = [1000.0]
    client = PodResourcesClient(str(kubelet.socket_path), timeout_s=1, stale_after_s=30, clock=lambda: now[0])
    try:
        assert client.poll()
        kubelet.stop()  # the kubelet goes away
        now[0] += 10
        assert client.poll() is False
        assert GPU0 in client.holders()
        now[0] += 30
        assert client.poll() is False
        assert dict(client.holders()) == {}
    finally:
        client.close()


def test_recovers_when_the_kubelet_restarts(kubelet: FakeKubelet) -> None:
    client = PodResourcesClient(str(kubelet.socket_path), timeout_s=1)
    try:
        assert client.poll()
        kubelet.stop()
        assert client.poll() is False
        kubelet.start()  # a new kubelet process on the same socket path
        assert client.poll()
        assert GPU0 in client.holders()
    finally:
        client.close()


def test_background_poll_follows_changes_and_stops_promptly(kubelet: FakeKubelet) -> None:
    client = PodResourcesClient(str(kubelet.socket_path), poll_interval_s=0.02)
    client.start()
    try:
        wait_until(lambda: GPU0 in client.holders(), timeout=5, interval=0.005, what="GPU0 in client.holders()")
        generation = client.generation
        kubelet.answer = pb2.ListPodResourcesResponse()  # the trainer finished
        wait_until(lambda: dict(client.holders()) == {}, timeout=5, interval=0.005, what="dict(client.holders()) == {}")
        assert client.generation > generation
    finally:
        started = time.monotonic()
        client.stop(timeout=5)
        assert time.monotonic() - started < 1.0


def test_attributor_joins_gpu_holders_with_the_pod_cache(kubelet: FakeKubelet, tmp_path: Path) -> None:
    with FakeKubeApi() as kube_api:
        pods = PodCache(kube_api.configuration(), "gpu-node-a")
        podresources = PodResourcesClient(str(kubelet.socket_path), poll_interval_s=0.02)
        attributor = Attributor("gpu-node-a", proc_root=tmp_path, pods=pods, podresources=podresources)
        attributor.start()
        try:
            assert pods.wait_synced(5)
            wait_until(lambda: GPU0 in attributor.gpu_owners(),
                       timeout=5, interval=0.005, what="GPU0 in attributor.gpu_owners()")
            owners = attributor.gpu_owners()
        finally:
            attributor.stop()
    trainer = next(p for p in load_recording("pods_list.json")["items"] if p["metadata"]["name"].startswith("trainer-"))
    main_id = next(
        s["containerID"].partition("://")[2] for s in trainer["status"]["containerStatuses"] if s["name"] == "main"
    )
    assert owners[GPU0] == [
        Identity(
            pid=None,
            name=None,
            namespace="research",
            pod="trainer-7d9c5b6f8-x2k4q",
            container="main",
            service="llm-pretrain",
            container_id=main_id,
        )
    ]
    assert [o.service for o in owners[GPU2]] == ["embedder", "evaluator"]
    assert owners[MIG][0].service == "triton"
    owners[GPU0].clear()  # callers get their own copy
    assert attributor.gpu_owners()[GPU0]
