"""PodCache against a recorded-response Kubernetes API (real HTTP, real kubernetes client)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client import Configuration

from agent.attribution.pods import PodCache, PodInfo, derive_service, pod_from_api
from telemetry.pods import deployment_pod
from tests.fakes.kube_api import FakeKubeApi, load_recording
from tests.support.poll import wait_until

NODE = "gpu-node-a"


def recorded_pod(name: str, recording: str = "pods_list.json") -> dict[str, Any]:
    for item in load_recording(recording)["items"]:
        if item["metadata"]["name"] == name:
            return dict(item)
    raise KeyError(name)


def container_id_of(pod: dict[str, Any], container: str) -> str:
    for status in pod["status"]["containerStatuses"]:
        if status["name"] == container:
            return str(status["containerID"]).partition("://")[2]
    raise KeyError(container)


@pytest.fixture
def kube_api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as api:
        yield api


@pytest.fixture
def cache(kube_api: FakeKubeApi) -> Iterator[PodCache]:
    pods = PodCache(kube_api.configuration(), NODE, backoff_initial_s=0.01, backoff_max_s=0.05)
    pods.start()
    assert pods.wait_synced(5)
    assert kube_api.wait_for(lambda api: len(api.watch_requests()) == 1)
    yield pods
    pods.stop()


def test_lists_only_this_nodes_pods(kube_api: FakeKubeApi, cache: PodCache) -> None:
    first = kube_api.list_requests()[0]
    assert first.query["fieldSelector"] == f"spec.nodeName={NODE}"
    assert cache.pod_count == 7  # the recording holds 8 pods, one of them on gpu-node-b
    assert all(pod.name != "trainer-7d9c5b6f8-zz9wd" for pod in cache.pods())


def test_container_ids_map_to_pod_and_container(cache: PodCache) -> None:
    trainer = recorded_pod("trainer-7d9c5b6f8-x2k4q")
    hit = cache.lookup_container(container_id_of(trainer, "main"))
    assert hit is not None
    pod, container = hit
    assert (pod.namespace, pod.name, container, pod.service) == (
        "research",
        "trainer-7d9c5b6f8-x2k4q",
        "main",
        "llm-pretrain",
    )
    assert cache.lookup_container(container_id_of(trainer, "log-shipper")) == (pod, "log-shipper")
    assert cache.lookup_uid(trainer["metadata"]["uid"]) is pod
    assert cache.lookup_name("research", "trainer-7d9c5b6f8-x2k4q") is pod
    # CRI-O's scheme is stripped the same way.
    triton = recorded_pod("inference-5f8d7c9b4-qzt6m")
    assert str(triton["status"]["containerStatuses"][0]["containerID"]).startswith("cri-o://")
    hit = cache.lookup_container(container_id_of(triton, "triton"))
    assert hit is not None and hit[1] == "triton"


def test_service_derivation_precedence(cache: PodCache) -> None:
    services = {pod.name: pod.service for pod in cache.pods()}
    assert services == {
        "trainer-7d9c5b6f8-x2k4q": "llm-pretrain",  # app.kubernetes.io/name beats app
        "inference-5f8d7c9b4-qzt6m": "triton",  # app label
        "embedder-6b7f9d5c8-h4mzv": "embedder",  # ReplicaSet owner minus pod-template-hash
        "evaluator-0": "evaluator",  # StatefulSet owner as is
        "nvidia-device-plugin-daemonset-8xk2p": "nvidia-device-plugin-daemonset",  # DaemonSet
        "batch-eval-28843920-9v7tx": "batch-eval-28843920",  # Job as is
        "gpu-burn-check-gpu-node-a": None,  # static pod, owned by its Node
    }


@pytest.mark.parametrize(
    ("labels", "owners", "expected"),
    [
        ({"app.kubernetes.io/name": "a", "app": "b"}, [{"kind": "StatefulSet", "name": "c"}], "a"),
        ({"app": "b"}, [{"kind": "StatefulSet", "name": "c"}], "b"),
        ({"app.kubernetes.io/name": ""}, [{"kind": "DaemonSet", "name": "ds", "controller": True}], "ds"),
        ({"pod-template-hash": "58b9d7c4f"}, [{"kind": "ReplicaSet", "name": "api-58b9d7c4f"}], "api"),
        ({}, [{"kind": "ReplicaSet", "name": "web-frontend-6d4cf56db6"}], "web-frontend"),  # hash label absent
        ({}, [{"kind": "ReplicaSet", "name": "handmade"}], "handmade"),
        ({}, [{"kind": "Job", "name": "nightly-28843920"}], "nightly-28843920"),
        ({}, [{"kind": "Node", "name": "gpu-node-a"}], None),
        ({}, [], None),
        ({}, None, None),
        (
            {},
            [{"kind": "Workflow", "name": "not-controller"}, {"kind": "Job", "name": "ctl", "controller": True}],
            "ctl",
        ),
    ],
)
def test_derive_service(labels: dict[str, str], owners: object, expected: str | None) -> None:
    assert derive_service(labels, owners) == expected


def test_pod_from_api_keeps_previous_instances_and_rejects_incomplete_objects() -> None:
    trainer = recorded_pod("trainer-7d9c5b6f8-x2k4q")
    pod = pod_from_api(trainer)
    assert isinstance(pod, PodInfo)
    # fetch-weights (init), log-shipper, main and main's OOM-killed previous instance.
    assert sorted(pod.containers.values()) == ["fetch-weights", "log-shipper", "main", "main"]
    assert pod.container_id("main") == container_id_of(trainer, "main")
    assert pod_from_api({"metadata": {"name": "x", "namespace": "y"}}) is None
    assert pod_from_api({"kind": "Status"}) is None


def test_pod_added_by_watch_is_attributed_once_its_container_starts(kube_api: FakeKubeApi, cache: PodCache) -> None:
    added, modified, _deleted, _bookmark = load_recording("watch_events.jsonl")
    uid = added["object"]["metadata"]["uid"]
    before = cache.generation
    kube_api.send(added)
    wait_until(lambda: cache.lookup_uid(uid) is not None,
               timeout=5, interval=0.005, what="cache.lookup_uid(uid) is not None")
    assert cache.generation > before
    pod = cache.lookup_uid(uid)
    assert pod is not None and pod.containers == {}  # still ContainerCreating: no container ID yet
    assert (pod.namespace, pod.name, pod.service) == ("users", "notebook-alice-0", "jupyter")

    kube_api.send(modified)
    cid = container_id_of(modified["object"], "notebook")
    wait_until(lambda: cache.lookup_container(cid) is not None,
               timeout=5, interval=0.005, what="cache.lookup_container(cid) is not None")
    hit = cache.lookup_container(cid)
    assert hit is not None and (hit[0].name, hit[1]) == ("notebook-alice-0", "notebook")
    assert cache.pod_count == 8


def test_deleted_pod_disappears(kube_api: FakeKubeApi, cache: PodCache) -> None:
    _added, _modified, deleted, _bookmark = load_recording("watch_events.jsonl")
    job = recorded_pod("batch-eval-28843920-9v7tx")
    cid = container_id_of(job, "eval")
    assert cache.lookup_container(cid) is not None
    kube_api.send(deleted)
    wait_until(lambda: cache.lookup_container(cid) is None,
               timeout=5, interval=0.005, what="cache.lookup_container(cid) is None")
    assert cache.lookup_name("research", "batch-eval-28843920-9v7tx") is None
    assert cache.lookup_uid(job["metadata"]["uid"]) is None
    assert cache.pod_count == 6


def test_watch_resumes_from_last_resource_version(kube_api: FakeKubeApi, cache: PodCache) -> None:
    assert kube_api.watch_requests()[0].query["resourceVersion"] == "48213"  # the list's resourceVersion
    assert kube_api.watch_requests()[0].query["allowWatchBookmarks"] == "true"
    for event in load_recording("watch_events.jsonl"):
        kube_api.send(event)
    wait_until(lambda: cache.pod_count == 7 and cache.lookup_name("users", "notebook-alice-0") is not None,
               timeout=5, interval=0.005, what="all 7 pods, notebook-alice-0 among them")
    kube_api.close_watch()  # as the server does when timeoutSeconds runs out
    assert kube_api.wait_for(lambda api: len(api.watch_requests()) == 2)
    assert kube_api.watch_requests()[1].query["resourceVersion"] == "48301"  # from the BOOKMARK
    assert len(kube_api.list_requests()) == 1  # no re-list needed


def test_relists_after_410_gone(kube_api: FakeKubeApi, cache: PodCache) -> None:
    old_trainer = recorded_pod("trainer-7d9c5b6f8-x2k4q")
    new_trainer = recorded_pod("trainer-7d9c5b6f8-r8wp2", "pods_relist.json")
    kube_api.queue_list("pods_relist.json")
    kube_api.expire_watch()
    wait_until(lambda: cache.lookup_container(container_id_of(new_trainer, "main")) is not None,
               timeout=5, interval=0.005, what="the new trainer's container in the cache")
    assert cache.lookup_container(container_id_of(old_trainer, "main")) is None
    relist = kube_api.list_requests()[1]
    assert "resourceVersion" not in relist.query  # a consistent read after expiry, not the cache's "0"
    assert relist.query["fieldSelector"] == f"spec.nodeName={NODE}"
    assert kube_api.wait_for(lambda api: len(api.watch_requests()) >= 2)
    assert kube_api.watch_requests()[1].query["resourceVersion"] == "49871"


def test_stop_ends_an_idle_watch_promptly(kube_api: FakeKubeApi) -> None:
    pods = PodCache(kube_api.configuration(), NODE)
    pods.start()
    assert kube_api.wait_for(lambda api: len(api.watch_requests()) == 1)
    started = time.monotonic()
    pods.stop(timeout=5)
    assert time.monotonic() - started < 1.0
    assert not any(t.name == "gpuwatch-pod-watch" for t in threading.enumerate())


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_api_retries_quietly(caplog: pytest.LogCaptureFixture) -> None:
    configuration = Configuration(host=f"http://127.0.0.1:{_closed_port()}")
    configuration.api_key = {"authorization": "Bearer secret-token-value"}
    pods = PodCache(configuration, NODE, backoff_initial_s=0.01, backoff_max_s=0.02, request_timeout_s=1)
    with caplog.at_level(logging.DEBUG, logger="agent.attribution"):
        pods.start()
        wait_until(lambda: pods._errors.suppressed_total >= 2,  # it retried; the repeats were not logged
                   timeout=5, interval=0.005, what="pods._errors.suppressed_total >= 2")
        pods.stop()
    assert not pods.synced and pods.pod_count == 0
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "secret-token-value" not in caplog.text


def test_pod_from_api_keeps_the_ip_of_a_running_pod_and_only_gpuwatch_annotations() -> None:
    obj: dict[str, Any] = {
        "metadata": {"uid": "u1", "namespace": "serving", "name": "vllm-0", "annotations": {
            "gpuwatch.io/scrape-port": "8000", "gpuwatch.io/scrape-path": "/metrics",
            "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 5000 + "}"}},
        "status": {"phase": "Running", "podIP": "10.1.2.3"},
    }
    pod = pod_from_api(obj)
    assert pod is not None and pod.pod_ip == "10.1.2.3"
    assert dict(pod.annotations) == {"gpuwatch.io/scrape-port": "8000", "gpuwatch.io/scrape-path": "/metrics"}
    obj["status"]["phase"] = "Pending"
    pending = pod_from_api(obj)
    assert pending is not None and pending.pod_ip is None  # nothing answers there yet


@pytest.mark.parametrize(("name", "expected"), [
    ("embed-bge-5nh9wtdnmq-vhxlg", True),  # <deployment>-<pod-template-hash>-<suffix>
    ("chat-70b-cbm9hzspt-7zqpx", True),
    ("lora-code-7085-mtmcp", False),  # a Job's pod: <job>-<suffix> (7085: 0 is not in the alphabet)
    ("lora-legal-8266-bgnl9", False),  # (8266 is, but a template hash is 6 to 10 characters)
    ("sft-gemma-8b-502-worker-0", False),  # a StatefulSet's or a training operator's
    ("web-5d8f7c9b4-aeiou", False),  # vowels: not generated
    ("", False),
    (None, False),
])
def test_a_deployments_pod_is_told_by_its_generated_name(name: str | None, expected: bool) -> None:
    assert deployment_pod(name) is expected


@given(st.one_of(st.none(), st.text(max_size=300)))
def test_any_pod_name_is_read_without_error(name: str | None) -> None:
    """A pod name comes from the agent's records: whatever it holds, the answer is a bool, and a name
    that is not ``<base>-<6 to 10 safe characters>-<5 safe characters>`` is no Deployment's."""
    got = deployment_pod(name)
    assert isinstance(got, bool)
    if got:
        assert name is not None and len(name.rsplit("-", 2)) == 3
