"""Static checks of the image definitions (no Docker engine here, so nothing is built).

Dockerfile.agent and Dockerfile.collector must build slim, reproducible, non-root images
from an exactly pinned base, in two stages (the runtime stage gets the virtualenv, no
sources), with OCI labels and a HEALTHCHECK, and install an extra that pyproject.toml
defines and run a ``gpuwatch`` subcommand that exists. The agent's asks the NVIDIA runtime
for NVML only and serves on dcgm-exporter's port. What they COPY must exist in the
repository and survive .dockerignore.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IMAGES = {"agent": ("Dockerfile.agent", 9400), "collector": ("Dockerfile.collector", 8080)}
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


@pytest.fixture(params=sorted(IMAGES), scope="module")
def image(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def instructions(image: str) -> list[Instruction]:
    path = ROOT / IMAGES[image][0]
    assert path.is_file(), f"{path} is missing"
    return parse(path.read_text())


def entrypoint_and_ports(dockerfile: Path) -> tuple[list[str], set[int]]:
    """The final stage's exec-form ENTRYPOINT and EXPOSEd ports (the chart's tests compare them)."""
    stage = final_stage(parse(dockerfile.read_text()))
    entrypoints = [json.loads(ins.args) for ins in stage if ins.keyword == "ENTRYPOINT"]
    ports = {int(p.split("/")[0]) for ins in stage if ins.keyword == "EXPOSE" for p in ins.args.split()}
    return (entrypoints[-1] if entrypoints else []), ports


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
_EXACT_PYTHON = re.compile(r"^python:\d+\.\d+\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?$")


def _bases(instructions: list[Instruction]) -> list[str]:
    aliases: set[str] = set()
    bases = []
    for ins in instructions:
        if ins.keyword != "FROM":
            continue
        m = _FROM.match(ins.args)
        assert m is not None, f"unparsable FROM {ins.args}"
        if m["image"] not in aliases:  # not an earlier stage of this file
            bases.append(m["image"])
        if m["alias"]:
            aliases.add(m["alias"])
    return bases


def test_every_base_image_is_pinned_to_an_exact_release(instructions: list[Instruction]) -> None:
    bases = _bases(instructions)
    assert bases, "no base image"
    for image in bases:
        assert "$" not in image, f"{image}: the base image must be literal, not a build argument"
        # an exact Python patch release on a named Debian suite (optionally a digest), never latest
        assert _EXACT_PYTHON.match(image), f"{image} is not pinned to an exact python:X.Y.Z-slim-<suite>"
    assert len(set(bases)) == 1, f"build and runtime stages should share one base: {bases}"


def test_multi_stage_with_a_runtime_stage_free_of_sources(instructions: list[Instruction]) -> None:
    assert len(stages(instructions)) >= 2, "a build stage and a runtime stage"
    copies = [ins.args for ins in final_stage(instructions) if ins.keyword in ("COPY", "ADD")]
    assert copies, "the final stage copies nothing"
    assert all(c.startswith("--from=") for c in copies), f"the runtime stage copies from the context: {copies}"


def test_base_python_satisfies_requires_python(instructions: list[Instruction]) -> None:
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    req = re.fullmatch(r">=\s*(\d+)\.(\d+)", requires.strip())
    assert req is not None, f"unexpected requires-python {requires!r}"
    minimum = (int(req[1]), int(req[2]))
    for image in _bases(instructions):
        m = re.match(r"python:(\d+)\.(\d+)", image)
        assert m and (int(m[1]), int(m[2])) >= minimum, f"{image} is older than requires-python {requires}"


def test_the_image_runs_as_a_numeric_non_root_user(instructions: list[Instruction]) -> None:
    users = [ins.args for ins in final_stage(instructions) if ins.keyword == "USER"]
    assert users, "the final stage sets no USER: the process would run as root"
    user, _, group = users[-1].partition(":")
    # numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd
    assert user.isdigit(), f"USER {users[-1]}: use a numeric UID"
    assert int(user) != 0, f"USER {users[-1]} is root"
    assert not group or (group.isdigit() and int(group) != 0), f"USER {users[-1]}: non-root numeric group"


def test_pip_installs_an_extra_that_exists_without_a_cache(instructions: list[Instruction], image: str) -> None:
    installs = [ins.args for ins in instructions if ins.keyword == "RUN" and "pip install" in ins.args]
    assert installs, "no pip install"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    wanted = [m for run in installs for m in re.findall(r"\.\[([a-z,]+)\]", run)]
    # the agent's also brings py-spy (.[agent,profile]) for the opt-in CPU profiles
    assert len(wanted) == 1 and wanted[0].split(",")[0] == image, \
        f"the {image} image should install .[{image}], installs {wanted}"
    for extra in wanted[0].split(","):
        assert extra in extras, f".[{extra}] is not an extra of pyproject.toml"
    for run in installs:
        assert "--no-cache-dir" in run, f"pip install without --no-cache-dir: {run}"


def test_the_entry_point_and_subcommand_exist(instructions: list[Instruction], image: str) -> None:
    entrypoint, ports = entrypoint_and_ports(ROOT / IMAGES[image][0])
    # exec form, so that SIGTERM reaches the process (graceful shutdown) rather than a shell
    assert entrypoint == ["gpuwatch", image]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts.get("gpuwatch") == "gpuwatch.cli:main"
    # the subcommand is real: its --help answers (the build stage runs the same check)
    proc = subprocess.run([sys.executable, "-m", "gpuwatch", image, "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, check=False)
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr
    assert ports == {IMAGES[image][1]}
    assert not [ins for ins in final_stage(instructions) if ins.keyword == "CMD"], "flags come from the chart's args"


def test_healthcheck_probes_the_served_port(instructions: list[Instruction], image: str) -> None:
    checks = [ins.args for ins in final_stage(instructions) if ins.keyword == "HEALTHCHECK"]
    assert len(checks) == 1, "one HEALTHCHECK in the final stage"
    options, _, command = checks[0].partition("CMD ")
    assert "--interval=" in options and "--timeout=" in options
    argv = json.loads(command)  # exec form: no shell in the image is needed
    assert argv[:2] == ["python", "-c"]
    assert str(IMAGES[image][1]) in argv[2]
    compile(argv[2], "HEALTHCHECK", "exec")


def test_oci_labels(instructions: list[Instruction], image: str) -> None:
    labels: dict[str, str] = {}
    for ins in final_stage(instructions):
        if ins.keyword == "LABEL":
            for token in shlex.split(ins.args):
                key, _, value = token.partition("=")
                labels[key] = value
    for key in ("title", "description", "version", "revision", "licenses", "base.name"):
        assert labels.get(f"org.opencontainers.image.{key}"), f"missing OCI label org.opencontainers.image.{key}"
    assert labels["org.opencontainers.image.title"] == f"gpuwatch-{image}"
    license_ = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"]
    assert labels["org.opencontainers.image.licenses"] == license_
    assert labels["org.opencontainers.image.base.name"].endswith(_bases(instructions)[0])


def test_nvidia_runtime_gives_the_agent_nvml_only(instructions: list[Instruction], image: str) -> None:
    env = env_of(final_stage(instructions))
    if image != "agent":
        assert "NVIDIA_VISIBLE_DEVICES" not in env, "the collector needs no GPU"
        return
    assert env.get("NVIDIA_VISIBLE_DEVICES") == "all"
    # utility = NVML and nvidia-smi; compute (CUDA) is not needed to read counters
    assert env.get("NVIDIA_DRIVER_CAPABILITIES") == "utility"


def test_paths_the_images_create_are_the_settings_defaults(instructions: list[Instruction], image: str) -> None:
    text = " ".join(ins.args for ins in final_stage(instructions))
    if image == "agent":
        from agent.settings import AgentSettings

        spool = str(AgentSettings.model_fields["spool_dir"].default)
        assert f"install -d -o 65532 -g 65532 {spool}" in text
        assert json.loads(next(i.args for i in final_stage(instructions) if i.keyword == "VOLUME")) == [spool]
    else:
        assert env_of(final_stage(instructions)).get("GPUWATCH_API_HOST") == "0.0.0.0"


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
