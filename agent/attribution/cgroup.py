"""Parse /proc/<pid>/cgroup text into the Kubernetes pod UID and container ID.

This is the first link of pid → container → pod → service. It is pure text parsing (no
I/O) so that every cgroup layout seen in the field can be tested from a table:

* cgroup v2 (one ``0::<path>`` line) and v1 (``<id>:<controllers>:<path>`` per hierarchy);
* the kubelet's systemd driver
  (``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/``)
  and cgroupfs driver (``/kubepods/burstable/pod<uid>/``);
* container scopes of containerd (``cri-containerd-<id>.scope``), CRI-O (``crio-<id>.scope``)
  and Docker (``docker-<id>.scope``), or a bare ``<id>`` directory (cgroupfs driver).

A bare 64-hex directory counts as a container only inside a pod cgroup or under
``/docker/``, so that other systems that name cgroups by hex IDs
(e.g. ``0::/process_api/<hex>``) yield "no container". CRI-O's ``crio-conmon-<id>.scope``
is the container monitor, not the container, and is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["CgroupLine", "ContainerRef", "cgroup_lines", "parse_cgroup"]


class CgroupLine(NamedTuple):
    """One line of /proc/<pid>/cgroup: ``<hierarchy id>:<controllers>:<path>``.

    ``controllers`` is empty for the v2 line (``0::/path``); on v1 it names the hierarchy's
    controllers, comma-separated (``cpu,cpuacct``), which is also its directory under the
    cgroup mount. The host-evidence reader (:mod:`agent.host.cgroup`) finds the CPU
    controller's directory from these lines.
    """

    hierarchy: str
    controllers: str
    path: str


def cgroup_lines(text: str) -> Iterator[CgroupLine]:
    """The well-formed lines of a /proc/<pid>/cgroup text (others are skipped). Never raises."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            yield CgroupLine(parts[0], parts[1], parts[2].strip())


class ContainerRef(NamedTuple):
    """Where a process runs: its pod UID and container ID, each None when unknown."""

    pod_uid: str | None
    container_id: str | None


NO_CONTAINER = ContainerRef(None, None)

# Pod cgroup directory: "pod<uid>" (cgroupfs) or "kubepods[-<qos>]-pod<uid_with_underscores>.slice"
# (systemd; nested kubelets such as kind add a prefix: "kubelet-kubepods-burstable-pod...").
# API-server pods have a dashed UUID; static pods use a 32-hex config hash.
_POD_DIR = re.compile(
    r"^(?:[\w.-]+-)?pod"
    r"(?P<uid>[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"
    r"|[0-9a-fA-F]{32})(?:\.slice)?$"
)
# Runtime-prefixed container scope (systemd driver) or directory (CRI-O with cgroupfs).
_PREFIXED_CONTAINER = re.compile(r"^(?:cri-containerd|crio|docker|containerd)-(?P<id>[0-9a-fA-F]{64})(?:\.scope)?$")
_BARE_ID = re.compile(r"^[0-9a-fA-F]{64}$")


def _parse_path(path: str) -> ContainerRef:
    pod_uid: str | None = None
    container_id: str | None = None
    parent = ""
    for segment in path.split("/"):
        if not segment:
            continue
        pod_match = _POD_DIR.match(segment)
        if pod_match is not None:
            pod_uid = pod_match.group("uid").replace("_", "-").lower()
            container_id = None
        else:
            prefixed = _PREFIXED_CONTAINER.match(segment)
            if prefixed is not None:
                container_id = prefixed.group("id").lower()
            elif _BARE_ID.match(segment) and (pod_uid is not None or parent == "docker"):
                container_id = segment.lower()
        parent = segment
    return ContainerRef(pod_uid, container_id)


def parse_cgroup(text: str) -> ContainerRef:
    """Return the pod UID and container ID found in the text of a /proc/<pid>/cgroup file.

    The first line that names a container wins (all v1 hierarchies of a container process
    carry the same path); failing that, the first pod UID seen. Text that is not a cgroup
    file, or a process outside any container, gives ``ContainerRef(None, None)``. Never raises.
    """
    pod_only: str | None = None
    for line in cgroup_lines(text):
        ref = _parse_path(line.path)
        if ref.container_id is not None:
            return ref
        if pod_only is None and ref.pod_uid is not None:
            pod_only = ref.pod_uid
    return ContainerRef(pod_only, None) if pod_only is not None else NO_CONTAINER
