"""What a Kubernetes pod's generated name says about the workload that made it.

Why here: the agent strips a ReplicaSet's pod-template-hash to name a pod's service, and the
detectors ask whether a pod is a replica of a Deployment (a server that answers requests,
whose activity follows its demand) rather than a Job's or a StatefulSet's (a training job's
ranks, a batch job). Both read the same naming rule, so it is written once.

The rule is the controllers': a generated suffix uses ``rand.SafeEncodeString``'s alphabet
(no vowels, no 0, 1 or 3). A Deployment's pod is ``<deployment>-<pod-template-hash>-<5>``;
the hash is a 32-bit FNV hash so encoded, 6 to 10 characters. A Job's pod is
``<job>-<5>``, a StatefulSet's ``<name>-<ordinal>``, a bare pod whatever its author wrote.
"""

from __future__ import annotations

import re
from typing import Final

SAFE_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
GENERATED_SUFFIX: Final = re.compile(rf"^(?P<base>.+)-[{SAFE_ALPHABET}]{{5,10}}$")
_DEPLOYMENT_POD: Final = re.compile(rf"^.+-[{SAFE_ALPHABET}]{{6,10}}-[{SAFE_ALPHABET}]{{5}}$")


def deployment_pod(name: str | None) -> bool:
    """Whether ``name`` is a Deployment's pod by its name (a ReplicaSet's hash, then the pod's
    own suffix). A false answer says nothing: a bare pod may be anything."""
    return bool(name) and _DEPLOYMENT_POD.match(name or "") is not None
