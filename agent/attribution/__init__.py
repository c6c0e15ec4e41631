"""Process attribution: pid → cgroup → container → pod → service, and GPU → holding pod.

The sampler asks ``Attributor.identify(pid)`` for every GPU process each sample and
``Attributor.gpu_owners()`` for GPUs held by pods; the rest of this package are the
sources behind it (/proc cgroup parsing, the Kubernetes API pod cache, the kubelet
PodResources API).
"""

from agent.attribution.cgroup import ContainerRef, parse_cgroup
from agent.attribution.identify import Attributor, Identity
from agent.attribution.podresources import DeviceHolder, PodResourcesClient
from agent.attribution.pods import PodCache, PodInfo, derive_service

__all__ = [
    "Attributor",
    "ContainerRef",
    "DeviceHolder",
    "Identity",
    "PodCache",
    "PodInfo",
    "PodResourcesClient",
    "derive_service",
    "parse_cgroup",
]
