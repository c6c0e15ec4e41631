"""Attributor over a fake /proc tree, with and without the Kubernetes sources."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.attribution import Attributor, Identity, PodCache
from tests.fakes.kube_api import FakeKubeApi, load_recording
from tests.fakes.kubelet import GPU0, FakeKubelet
from tests.support.poll import wait_until
from tests.support.procfs import write_proc

NODE = "gpu-node-a"
DOCKER_CID = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d"


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def systemd_cgroup(pod_uid: str, container_id: str, runtime: str = "cri-containerd") -> str:
    return (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{pod_uid.replace('-', '_')}.slice/{runtime}-{container_id}.scope\n"
    )


def recorded(name: str) -> dict[str, Any]:
    return next(p for p in load_recording("pods_list.json")["items"] if p["metadata"]["name"] == name)


def cid(pod: dict[str, Any], container: str) -> str:
    return next(
        s["containerID"].partition("://")[2] for s in pod["status"]["containerStatuses"] if s["name"] == container
    )


# ---- outside Kubernetes ---------------------------------------------------------------


def test_outside_kubernetes_identity_is_pid_and_command(tmp_path: Path) -> None:
    write_proc(tmp_path, 4242, comm="python3")
    write_proc(tmp_path, 4343, comm="trtllm-serve", cgroup=f"0::/system.slice/docker-{DOCKER_CID}.scope\n")
    write_proc(tmp_path, 4444, comm="worker", cgroup="0::/process_api/5f1d0c9e\n")
    attributor = Attributor(NODE, proc_root=tmp_path)
    attributor.start()
    try:
        assert attributor.identify(4242) == Identity(pid=4242, name="python3")
        assert attributor.identify(4343) == Identity(pid=4343, name="trtllm-serve", container_id=DOCKER_CID)
        assert attributor.identify(4444) == Identity(pid=4444, name="worker")
        assert attributor.sources() == ["proc"]
        assert attributor.pod_count == 0
        assert attributor.gpu_owners() == {}
    finally:
        attributor.stop()


def test_vanished_or_invalid_pid_is_identified_by_pid_only(tmp_path: Path) -> None:
    attributor = Attributor(NODE, proc_root=tmp_path)
    assert attributor.identify(99999) == Identity(pid=99999, name=None)
    assert attributor.identify(0) == Identity(pid=0, name=None)
    assert attributor.identify(-3) == Identity(pid=-3, name=None)
    # Half-written or unreadable entries degrade the same way.
    (tmp_path / "777").mkdir()
    (tmp_path / "777" / "stat").write_text("garbage")
    assert attributor.identify(777) == Identity(pid=777, name=None)


def test_command_names_with_spaces_and_parentheses(tmp_path: Path) -> None:
    clock = Clock()
    write_proc(tmp_path, 515, comm="odd) name (x", start=111)
    attributor = Attributor(NODE, proc_root=tmp_path, clock=clock)
    assert attributor.identify(515).name == "odd) name (x"
    write_proc(tmp_path, 515, comm="odd) name (x", start=222)  # same name, new process
    (tmp_path / "515" / "comm").write_text("renamed\n")
    clock.now += 10
    assert attributor.identify(515).name == "renamed"


def test_cached_identity_costs_no_proc_reads(tmp_path: Path) -> None:
    clock = Clock()
    write_proc(tmp_path, 4242)
    attributor = Attributor(NODE, proc_root=tmp_path, clock=clock, revalidate_s=2.0)
    first = attributor.identify(4242)
    shutil.rmtree(tmp_path / "4242")  # any read of /proc would now miss
    clock.now += 1.0
    assert attributor.identify(4242) is first
    clock.now += 1.5  # past revalidate_s: the start time is checked and the process is gone
    assert attributor.identify(4242) == Identity(pid=4242, name=None)


def test_pid_reuse_is_detected_by_start_time(tmp_path: Path) -> None:
    clock = Clock()
    write_proc(tmp_path, 4242, comm="python3", start=1000)
    attributor = Attributor(NODE, proc_root=tmp_path, clock=clock, revalidate_s=2.0)
    assert attributor.identify(4242) == Identity(4242, "python3")
    write_proc(tmp_path, 4242, comm="cuda-burn", cgroup=f"0::/docker/{DOCKER_CID}\n", start=2000)
    clock.now += 0.5
    assert attributor.identify(4242).name == "python3"  # still within the revalidation window
    clock.now += 2.0
    assert attributor.identify(4242) == Identity(4242, "cuda-burn", container_id=DOCKER_CID)
    # The same process re-checked later keeps its identity.
    clock.now += 5.0
    assert attributor.identify(4242) == Identity(4242, "cuda-burn", container_id=DOCKER_CID)


def test_dead_and_idle_pids_are_evicted(tmp_path: Path) -> None:
    clock = Clock()
    write_proc(tmp_path, 10, comm="dead", start=5)
    write_proc(tmp_path, 11, comm="idle", start=6)
    write_proc(tmp_path, 12, comm="busy", start=7)
    attributor = Attributor(NODE, proc_root=tmp_path, clock=clock, sweep_interval_s=30, idle_evict_s=120)
    assert [attributor.identify(pid).name for pid in (10, 11, 12)] == ["dead", "idle", "busy"]
    shutil.rmtree(tmp_path / "10")
    # Rewrite comm but keep the start times: only an evicted entry would notice.
    (tmp_path / "11" / "comm").write_text("idle-2\n")
    clock.now += 31
    attributor.identify(12)  # triggers the sweep: pid 10 is gone from /proc
    write_proc(tmp_path, 10, comm="dead-2", start=5)
    assert attributor.identify(10).name == "dead-2"
    assert attributor.identify(11).name == "idle"  # alive and asked about 31 s ago: kept
    for _ in range(5):  # pid 11 not asked for 150 s
        clock.now += 30
        attributor.identify(12)
    assert attributor.identify(11).name == "idle-2"


def test_the_hot_path_reads_nothing(tmp_path: Path) -> None:
    """Within the revalidation window a known pid costs dict lookups only: with its /proc entries
    gone, it is answered from the cache (the cost per call is measured in
    benchmarks/bench_attribution.py, not asserted here)."""
    clock = Clock()
    pids = list(range(100, 124))
    for pid in pids:
        write_proc(tmp_path, pid)
    attributor = Attributor(NODE, proc_root=tmp_path, clock=clock)
    first = [attributor.identify(pid) for pid in pids]
    for pid in pids:
        shutil.rmtree(tmp_path / str(pid))
    clock.now += 1.0  # inside the default 2 s revalidation window
    assert [attributor.identify(pid) for pid in pids] == first
    assert all(a is b for a, b in zip(first, (attributor.identify(pid) for pid in pids), strict=True))


# ---- inside Kubernetes ----------------------------------------------------------------


@pytest.fixture
def kube_api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as api:
        yield api


@pytest.fixture
def pods(kube_api: FakeKubeApi) -> Iterator[PodCache]:
    cache = PodCache(kube_api.configuration(), NODE)
    cache.start()
    assert cache.wait_synced(5)
    assert kube_api.wait_for(lambda api: len(api.watch_requests()) == 1)
    yield cache
    cache.stop()


def test_kubernetes_processes_get_pod_container_and_service(tmp_path: Path, pods: PodCache) -> None:
    trainer, triton, static = (
        recorded("trainer-7d9c5b6f8-x2k4q"),
        recorded("inference-5f8d7c9b4-qzt6m"),
        recorded("gpu-burn-check-gpu-node-a"),
    )
    write_proc(
        tmp_path, 100, comm="pt_main_thread", cgroup=systemd_cgroup(trainer["metadata"]["uid"], cid(trainer, "main"))
    )
    write_proc(
        tmp_path,
        101,
        comm="tritonserver",
        cgroup=f"12:memory:/kubepods/burstable/pod{triton['metadata']['uid']}/crio-{cid(triton, 'triton')}\n",
    )
    # A static pod's cgroup is named for its config hash, not the mirror pod's UID; this
    # process's container is not in the pod status, so only the pod UID can place it.
    mirror_hash = static["metadata"]["annotations"]["kubernetes.io/config.mirror"]
    write_proc(tmp_path, 102, comm="gpu_burn", cgroup=systemd_cgroup(mirror_hash, "ab" * 32))
    write_proc(tmp_path, 103, comm="kubelet", cgroup="0::/system.slice/kubelet.service\n")
    attributor = Attributor(NODE, proc_root=tmp_path, pods=pods)

    assert attributor.sources() == ["proc", "kubernetes"]
    assert attributor.pod_count == 7
    assert attributor.identify(100) == Identity(
        pid=100,
        name="pt_main_thread",
        namespace="research",
        pod="trainer-7d9c5b6f8-x2k4q",
        container="main",
        service="llm-pretrain",
        container_id=cid(trainer, "main"),
    )
    assert attributor.identify(101) == Identity(
        101, "tritonserver", "serving", "inference-5f8d7c9b4-qzt6m", "triton", "triton", cid(triton, "triton")
    )
    assert attributor.identify(102) == Identity(
        102, "gpu_burn", "kube-system", "gpu-burn-check-gpu-node-a", None, None, "ab" * 32
    )
    assert attributor.identify(103) == Identity(103, "kubelet")


def test_container_not_yet_in_cache_is_resolved_when_the_pod_arrives(
    tmp_path: Path, kube_api: FakeKubeApi, pods: PodCache
) -> None:
    added, modified, _deleted, _bookmark = load_recording("watch_events.jsonl")
    uid = added["object"]["metadata"]["uid"]
    container_id = cid(modified["object"], "notebook")
    write_proc(tmp_path, 200, comm="python", cgroup=systemd_cgroup(uid, container_id))
    clock = Clock()  # frozen: re-resolution must not wait for revalidation
    attributor = Attributor(NODE, proc_root=tmp_path, pods=pods, clock=clock)

    assert attributor.identify(200) == Identity(200, "python", container_id=container_id)
    kube_api.send(added)  # scheduled; container status not reported yet
    wait_until(lambda: attributor.identify(200).pod == "notebook-alice-0",
               timeout=5, interval=0.005, what="attributor.identify(200).pod == 'notebook-alice-0'")
    assert attributor.identify(200) == Identity(
        200, "python", "users", "notebook-alice-0", None, "jupyter", container_id
    )
    kube_api.send(modified)  # running, with its container ID
    wait_until(lambda: attributor.identify(200).container == "notebook",
               timeout=5, interval=0.005, what="attributor.identify(200).container == 'notebook'")


def test_deleted_pod_keeps_identity_of_its_lingering_process(
    tmp_path: Path, kube_api: FakeKubeApi, pods: PodCache
) -> None:
    job = recorded("batch-eval-28843920-9v7tx")
    write_proc(tmp_path, 300, comm="eval", cgroup=systemd_cgroup(job["metadata"]["uid"], cid(job, "eval")))
    attributor = Attributor(NODE, proc_root=tmp_path, pods=pods)
    before = attributor.identify(300)
    assert before.service == "batch-eval-28843920"
    _added, _modified, deleted, _bookmark = load_recording("watch_events.jsonl")
    kube_api.send(deleted)
    wait_until(lambda: pods.lookup_name("research", "batch-eval-28843920-9v7tx") is None,
    # The process is still on the GPU while its pod is torn down; it is still that pod's.
               timeout=5, interval=0.005, what="pods.lookup_name('research', 'batch-eval-28843920-9v7tx') is None")
    assert attributor.identify(300) == before


# ---- from_environment -----------------------------------------------------------------


@pytest.fixture
def no_cluster_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)


def test_from_environment_outside_kubernetes(
    tmp_path: Path, no_cluster_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    write_proc(tmp_path, 4242)
    with caplog.at_level(logging.DEBUG, logger="agent.attribution"):
        attributor = Attributor.from_environment(
            NODE, podresources_socket=str(tmp_path / "no-kubelet.sock"), proc_root=tmp_path
        )
        attributor.start()
        assert attributor.identify(4242) == Identity(4242, "python3")
        assert attributor.identify(5) == Identity(5, None)
        attributor.stop()
    assert attributor.sources() == ["proc"]
    assert [r.levelname for r in caplog.records] == ["INFO", "INFO"]  # sources in use; one missing-pid hint
    assert "sources: proc" in caplog.records[0].getMessage()


def test_from_environment_uses_the_kubelet_socket_when_present(tmp_path: Path, no_cluster_env: None) -> None:
    kubelet = FakeKubelet(tmp_path / "kubelet.sock").start()
    attributor = Attributor.from_environment(
        NODE, podresources_socket=str(kubelet.socket_path), proc_root=tmp_path, podresources_poll_s=0.02
    )
    try:
        attributor.start()
        assert attributor.sources() == ["proc", "podresources"]
        wait_until(lambda: GPU0 in attributor.gpu_owners(),
        # Without the pod cache the holder is known by namespace, pod and container only.
                   timeout=5, interval=0.005, what="GPU0 in attributor.gpu_owners()")
        assert attributor.gpu_owners()[GPU0] == [Identity(None, None, "research", "trainer-7d9c5b6f8-x2k4q", "main")]
    finally:
        attributor.stop()
        kubelet.stop()


def test_from_environment_with_unusable_in_cluster_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with caplog.at_level(logging.WARNING, logger="agent.attribution"):
        attributor = Attributor.from_environment(NODE, podresources_socket=str(tmp_path / "x.sock"), proc_root=tmp_path)
    assert attributor.sources() == ["proc"]
    assert len(caplog.records) == 1 and "in-cluster" in caplog.records[0].getMessage()


def test_from_environment_with_kubeconfig(
    tmp_path: Path, no_cluster_env: None, kube_api: FakeKubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {kube_api.url}
users:
- name: agent
  user:
    token: s3cr3t-agent-token
contexts:
- name: test
  context: {{cluster: test, user: agent}}
current-context: test
"""
    )
    trainer = recorded("trainer-7d9c5b6f8-x2k4q")
    write_proc(tmp_path, 100, cgroup=systemd_cgroup(trainer["metadata"]["uid"], cid(trainer, "main")))
    with caplog.at_level(logging.DEBUG):
        attributor = Attributor.from_environment(
            NODE, kubeconfig=str(kubeconfig), podresources_socket=str(tmp_path / "none.sock"), proc_root=tmp_path
        )
        attributor.start()
        try:
            assert attributor.sources() == ["proc", "kubernetes"]
            wait_until(lambda: attributor.pod_count == 7, timeout=5, interval=0.005, what="attributor.pod_count == 7")
            assert attributor.identify(100).service == "llm-pretrain"
        finally:
            attributor.stop()
    assert kube_api.requests[0].headers["authorization"] == "Bearer s3cr3t-agent-token"
    assert "s3cr3t-agent-token" not in caplog.text


def test_from_environment_without_node_name_skips_the_api(
    tmp_path: Path, no_cluster_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    with caplog.at_level(logging.WARNING, logger="agent.attribution"):
        attributor = Attributor.from_environment("", kubeconfig=str(kubeconfig), proc_root=tmp_path)
    assert attributor.sources() == ["proc"]
    assert "node name" in caplog.text
