"""Static checks of the agent's image definition (no Docker engine needed).

Dockerfile.agent must build a slim, reproducible, non-root image that asks the NVIDIA
container runtime for NVML only, serves on dcgm-exporter's port and runs ``gpuwatch agent``.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile.agent"
DOCKERIGNORE = ROOT / ".dockerignore"


@dataclass(frozen=True, slots=True)
class Instruction:
    keyword: str
    args: str


def parse(text: str) -> list[Instruction]:
    """Instructions with line continuations joined and comments dropped."""
    instructions: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append(Instruction(keyword.upper(), " ".join(args.split())))
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    assert DOCKERFILE.is_file(), f"{DOCKERFILE} is missing"
    return parse(DOCKERFILE.read_text())


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    out: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            out.append([])
        assert out, f"{ins.keyword} before the first FROM"
        out[-1].append(ins)
    return out


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    return stages(instructions)[-1]


def env_of(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in stage:
        if ins.keyword != "ENV":
            continue
        for token in shlex.split(ins.args):
            key, sep, value = token.partition("=")
            assert sep, f"use ENV KEY=value, not the legacy form: ENV {ins.args}"
            env[key] = value
    return env


_FROM = re.compile(r"^(?:--platform=\S+\s+)?(?P<image>\S+)(?:\s+AS\s+(?P<alias>\S+))?$", re.IGNORECASE)


def test_every_base_image_is_pinned_by_tag(instructions: list[Instruction]) -> None:
    aliases: set[str] = set()
    bases = []
    for ins in instructions:
        if ins.keyword != "FROM":
            continue
        m = _FROM.match(ins.args)
        assert m is not None, f"unparsable FROM {ins.args}"
        image = m["image"]
        if image in aliases:  # an earlier stage of this file
            continue
        bases.append(image)
        name, _, digest = image.partition("@")
        tag = name.rsplit("/", 1)[-1].partition(":")[2]
        assert tag or digest, f"{image} is not pinned: give a tag (and optionally a digest)"
        assert tag != "latest", f"{image}: 'latest' is not a pin"
        assert "$" not in image, f"{image}: the base image must be literal, not a build argument"
        if m["alias"]:
            aliases.add(m["alias"])
    assert bases, "no base image"
    assert all(b.startswith("python:3.11-slim-bookworm") for b in bases), bases


def test_base_python_satisfies_requires_python(instructions: list[Instruction]) -> None:
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    req = re.fullmatch(r">=\s*(\d+)\.(\d+)", requires.strip())
    assert req is not None, f"unexpected requires-python {requires!r}"
    minimum = (int(req[1]), int(req[2]))
    for ins in instructions:
        m = re.match(r"python:(\d+)\.(\d+)", ins.args) if ins.keyword == "FROM" else None
        if m:
            assert (int(m[1]), int(m[2])) >= minimum, f"{ins.args} is older than requires-python {requires}"


def test_the_image_runs_as_a_numeric_non_root_user(instructions: list[Instruction]) -> None:
    users = [ins.args for ins in final_stage(instructions) if ins.keyword == "USER"]
    assert users, "the final stage sets no USER: the agent would run as root"
    user, _, group = users[-1].partition(":")
    # numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd
    assert user.isdigit(), f"USER {users[-1]}: use a numeric UID"
    assert int(user) != 0, f"USER {users[-1]} is root"
    assert not group or (group.isdigit() and int(group) != 0), f"USER {users[-1]}: non-root numeric group"


def test_pip_installs_the_agent_extras_without_a_cache(instructions: list[Instruction]) -> None:
    installs = [ins.args for ins in instructions if ins.keyword == "RUN" and "pip install" in ins.args]
    assert installs, "no pip install"
    assert any(re.search(r"""["']?\.\[agent\]["']?""", run) for run in installs), installs
    for run in installs:
        assert "--no-cache-dir" in run, f"pip install without --no-cache-dir: {run}"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "agent" in extras


def test_nvidia_runtime_gives_nvml_only(instructions: list[Instruction]) -> None:
    env = env_of(final_stage(instructions))
    assert env.get("NVIDIA_VISIBLE_DEVICES") == "all"
    # utility = NVML and nvidia-smi; compute (CUDA) is not needed to read counters
    assert env.get("NVIDIA_DRIVER_CAPABILITIES") == "utility"


def test_exposes_dcgm_exporter_port_and_runs_the_agent(instructions: list[Instruction]) -> None:
    stage = final_stage(instructions)
    ports = {p.split("/")[0] for ins in stage if ins.keyword == "EXPOSE" for p in ins.args.split()}
    assert ports == {"9400"}
    entrypoints = [ins.args for ins in stage if ins.keyword == "ENTRYPOINT"]
    assert entrypoints, "no ENTRYPOINT"
    # exec form, so that SIGTERM reaches the agent (graceful shutdown) rather than a shell
    assert json.loads(entrypoints[-1]) == ["gpuwatch", "agent"]
    assert not [ins for ins in stage if ins.keyword == "CMD"], "flags come from the DaemonSet's args"


def test_final_stage_carries_no_sources_or_build_context(instructions: list[Instruction]) -> None:
    copies = [ins.args for ins in final_stage(instructions) if ins.keyword in ("COPY", "ADD")]
    assert copies, "the final stage copies nothing"
    assert all(c.startswith("--from=") for c in copies), f"the runtime stage copies from the context: {copies}"


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics for a top-level path: the last matching pattern wins."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!").strip().strip("/")
        if fnmatch.fnmatchcase(path, pat) or path.startswith(pat + "/"):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_the_context_to_what_the_build_copies(instructions: list[Instruction]) -> None:
    assert DOCKERIGNORE.is_file(), ".dockerignore is missing"
    patterns = [
        line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    for path in (".git", ".venv", "tests", "build", "shared", ".mypy_cache"):
        assert _ignored(path, patterns), f"{path} would be sent to the Docker daemon"
    sources = []
    for ins in instructions:
        if ins.keyword in ("COPY", "ADD") and not ins.args.startswith("--from="):
            args = [a for a in ins.args.split() if not a.startswith("--")]
            sources += [s.rstrip("/").removeprefix("./") for s in args[:-1]]
    assert sources
    for src in sources:
        assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
        assert not _ignored(src, patterns), f"COPY {src}: excluded by .dockerignore"
