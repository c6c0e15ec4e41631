"""/proc/<pid>/cgroup parsing: every layout the node agent meets in the field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.attribution.cgroup import ContainerRef, parse_cgroup

CID = "3f6b8a2c9d1e4f70a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c"
CID_UPPER = CID.upper()
UID = "0f3c2b1a-9e8d-4c7b-a6f5-e4d3c2b1a098"
UID_US = UID.replace("-", "_")
STATIC_UID = "4c2f0e7a9b1d3f5e6a8c0b2d4f6e8a1c"

V1_SYSTEMD = "\n".join(
    [
        f"12:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_US}.slice/cri-containerd-{CID}.scope",
        f"11:devices:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_US}.slice/cri-containerd-{CID}.scope",
        "10:misc:/",
        f"1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_US}.slice/cri-containerd-{CID}.scope",
        "0::/",
    ]
)

CASES: list[tuple[str, str, ContainerRef]] = [
    (
        "v2 systemd containerd burstable",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice/cri-containerd-{CID}.scope\n",
        ContainerRef(UID, CID),
    ),
    (
        "v2 systemd cri-o besteffort",
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_US}.slice/crio-{CID}.scope\n",
        ContainerRef(UID, CID),
    ),
    (
        "v2 systemd docker (cri-dockerd) guaranteed",
        f"0::/kubepods.slice/kubepods-pod{UID_US}.slice/docker-{CID}.scope\n",
        ContainerRef(UID, CID),
    ),
    (
        "v2 cgroupfs driver",
        f"0::/kubepods/burstable/pod{UID}/{CID}\n",
        ContainerRef(UID, CID),
    ),
    (
        "v2 cgroupfs guaranteed (no QoS level)",
        f"0::/kubepods/pod{UID}/{CID}\n",
        ContainerRef(UID, CID),
    ),
    (
        "v2 cgroupfs cri-o",
        f"0::/kubepods/besteffort/pod{UID}/crio-{CID}\n",
        ContainerRef(UID, CID),
    ),
    (
        "v1 cgroupfs memory line",
        f"12:memory:/kubepods/besteffort/pod{UID}/{CID}\n",
        ContainerRef(UID, CID),
    ),
    ("v1 systemd, many hierarchies", V1_SYSTEMD, ContainerRef(UID, CID)),
    (
        "v1 with root-only hierarchies first",
        f"13:rdma:/\n12:pids:/kubepods/burstable/pod{UID}/{CID}\n",
        ContainerRef(UID, CID),
    ),
    (
        "nested kubelet (kind / k3d) prefix",
        f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
        f"kubelet-kubepods-burstable-pod{UID_US}.slice/cri-containerd-{CID}.scope\n",
        ContainerRef(UID, CID),
    ),
    (
        "static pod (config hash as UID)",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice/cri-containerd-{CID}.scope\n",
        ContainerRef(STATIC_UID, CID),
    ),
    (
        "upper-case hex is normalized",
        f"0::/kubepods/burstable/pod{UID.upper()}/{CID_UPPER}\n",
        ContainerRef(UID, CID),
    ),
    (
        "pod cgroup without a container (pod-level process)",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice\n",
        ContainerRef(UID, None),
    ),
    (
        "cri-o conmon is not the container",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice/crio-conmon-{CID}.scope\n",
        ContainerRef(UID, None),
    ),
    ("host service", "0::/system.slice/containerd.service\n", ContainerRef(None, None)),
    ("user session", "0::/user.slice/user-1000.slice/session-3.scope\n", ContainerRef(None, None)),
    ("init / root cgroup", "0::/\n", ContainerRef(None, None)),
    ("non-Kubernetes hex-named cgroup", f"0::/process_api/{CID}\n", ContainerRef(None, None)),
    ("non-Kubernetes short hex", "0::/process_api/5f1d0c\n", ContainerRef(None, None)),
    (
        "plain Docker outside Kubernetes (systemd)",
        f"0::/system.slice/docker-{CID}.scope\n",
        ContainerRef(None, CID),
    ),
    ("plain Docker outside Kubernetes (v1 cgroupfs)", f"4:cpuset:/docker/{CID}\n", ContainerRef(None, CID)),
    ("empty file (process exited)", "", ContainerRef(None, None)),
    ("garbage", "not a cgroup file\x00\x01", ContainerRef(None, None)),
    (
        "too-short container id",
        f"0::/kubepods/burstable/pod{UID}/{CID[:60]}\n",
        ContainerRef(UID, None),
    ),
]


@pytest.mark.parametrize(("text", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_parse_cgroup(text: str, expected: ContainerRef) -> None:
    assert parse_cgroup(text) == expected


def test_result_unpacks_as_pod_uid_and_container_id() -> None:
    pod_uid, container_id = parse_cgroup(f"0::/kubepods/burstable/pod{UID}/{CID}\n")
    assert (pod_uid, container_id) == (UID, CID)


_SEGMENTS = st.sampled_from(
    [
        "kubepods.slice",
        "kubepods",
        "burstable",
        "kubepods-burstable.slice",
        f"kubepods-burstable-pod{UID_US}.slice",
        f"pod{UID}",
        f"cri-containerd-{CID}.scope",
        f"crio-{CID}.scope",
        f"docker-{CID}.scope",
        CID,
        "docker",
        "system.slice",
        "process_api",
        "",
        "::",
        "pod",
        "\n",
    ]
)


@given(st.text())
def test_never_raises_on_arbitrary_text(text: str) -> None:
    ref = parse_cgroup(text)
    assert isinstance(ref, ContainerRef)


@given(st.lists(st.tuples(st.text(max_size=8), st.lists(st.one_of(_SEGMENTS, st.text(max_size=12)), max_size=8))))
def test_never_raises_on_cgroup_shaped_text(lines: list[tuple[str, list[str]]]) -> None:
    text = "\n".join(f"{prefix}::/" + "/".join(segments) for prefix, segments in lines)
    ref = parse_cgroup(text)
    assert ref.container_id is None or len(ref.container_id) == 64
    assert ref.pod_uid is None or len(ref.pod_uid) in (32, 36)
