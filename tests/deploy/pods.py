"""Run a container of a rendered manifest as a local process, from the manifest itself.

No Kubernetes can run here, so this does what the kubelet would, on loopback: it takes the
container's ``command``, ``args``, ``env`` (``value``, ``valueFrom`` field and Secret refs,
``envFrom`` Secrets) and ``volumeMounts`` from the rendered pod template, gives each mounted
volume a temporary directory filled from the rendered Secret or ConfigMap it names
(``hostPath`` and ``emptyDir``: empty), and rewrites every mount path in the env and args to
that directory. The only other changes, stated by the caller: ``0.0.0.0`` listen addresses
become ``127.0.0.1``, and extra flags (``--simulate N``) may be appended.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.deploy.helm import Rendered

VENV_BIN = Path(sys.executable).parent


def _secret_data(doc: Mapping[str, Any]) -> dict[str, str]:
    data = {k: base64.b64decode(v).decode() for k, v in (doc.get("data") or {}).items()}
    data.update(doc.get("stringData") or {})
    return data


@dataclass
class LocalPod:
    """A container of a rendered workload, ready to start as a process."""

    argv: list[str]
    env: dict[str, str]
    mounts: dict[str, Path]  # mountPath in the container -> directory here
    log: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def host_path(self, container_path: str) -> str:
        """Where a path of the container is on this machine."""
        for mount, local in sorted(self.mounts.items(), key=lambda kv: -len(kv[0])):
            if container_path == mount or container_path.startswith(mount.rstrip("/") + "/"):
                return str(local) + container_path[len(mount.rstrip("/")):]
        return container_path

    def start(self) -> LocalPod:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (what the kubelet sends), SIGKILL after ``timeout``."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def materialize(rendered: Rendered, kind: str, container: str, workdir: Path, *,
                node_name: str, pod_name: str, extra_args: Sequence[str] = (),
                existing_secrets: Mapping[str, Mapping[str, str]] | None = None) -> LocalPod:
    """The container ``container`` of the one ``kind`` object in ``rendered``, as a :class:`LocalPod`."""
    workload = rendered.one(kind)
    pod = workload["spec"]["template"]["spec"]
    spec = next(c for c in pod["containers"] if c["name"] == container)
    secrets = {d["metadata"]["name"]: _secret_data(d) for d in rendered.of_kind("Secret")}
    secrets.update({k: dict(v) for k, v in (existing_secrets or {}).items()})
    config_maps = {d["metadata"]["name"]: dict(d.get("data") or {}) for d in rendered.of_kind("ConfigMap")}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts: dict[str, Path] = {}
    for mount in spec.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        local = workdir / "volumes" / mount["name"]
        local.mkdir(parents=True, exist_ok=True)
        source: dict[str, str] = {}
        items: list[dict[str, str]] | None = None
        if "secret" in volume:
            source = secrets[volume["secret"]["secretName"]]
            items = volume["secret"].get("items")
        elif "configMap" in volume:
            source = config_maps[volume["configMap"]["name"]]
            items = volume["configMap"].get("items")
        else:
            assert {"hostPath", "emptyDir"} & set(volume), f"volume {volume} is neither a Secret, a ConfigMap, " \
                                                           "a hostPath nor an emptyDir"
        for item in items if items is not None else [{"key": k, "path": k} for k in source]:
            (local / item["path"]).write_text(source[item["key"]])
        mounts[mount["mountPath"]] = local

    local_pod = LocalPod([], {}, mounts, workdir / f"{container}.log")

    def rewrite(value: str) -> str:
        return local_pod.host_path(value) if value.startswith("/") else value

    env: dict[str, str] = {"PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}", "LANG": "C.UTF-8",
                           "HOME": str(workdir)}
    for source_ref in spec.get("envFrom", []):
        env.update(secrets[source_ref["secretRef"]["name"]])
    fields = {"spec.nodeName": node_name, "metadata.name": pod_name}
    for item in spec.get("env", []):
        if "value" in item:
            value = str(item["value"])
        elif "fieldRef" in item.get("valueFrom", {}):
            value = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            value = secrets[ref["name"]][ref["key"]]
        env[item["name"]] = rewrite("127.0.0.1" if value == "0.0.0.0" else value)
    command = list(spec["command"])
    command[0] = str(VENV_BIN / command[0])  # the image's PATH puts its venv first; so does this
    local_pod.argv = [*command, *(rewrite(a) for a in spec.get("args", [])), *extra_args]
    local_pod.env = env
    return local_pod


@contextlib.contextmanager
def running(*pods: LocalPod) -> Iterator[None]:
    try:
        for p in pods:
            p.start()
        yield
    finally:
        for p in reversed(pods):
            p.stop()
