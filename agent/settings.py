"""The agent's one settings model: environment (``GPUWATCH_*``) and flags, validated at start.

A bad setting stops the agent before it touches a GPU, with a message that names the
setting, its environment variable and its flag: a DaemonSet that crash-loops with
"interval_floor: must be >= 0.1" is fixed in a minute.
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as EnvParseError

from telemetry.control import DEFAULT_TOPIC
from telemetry.kafka_security import KafkaSecurityFields

if TYPE_CHECKING:
    from agent.kafka_settings import KafkaSettings


def _default_node() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()


def _octal_mode(value: object) -> object:
    """A file mode as written in a variable: octal digits, as chmod takes them ("0666", "600", "0o600")."""
    if isinstance(value, str):
        text = value.strip().lower().removeprefix("0o")
        if not re.fullmatch(r"0?[0-7]{1,3}", text):
            raise ValueError(f"{value!r} is not an octal file mode of permission bits, 0000 to 0777 (e.g. 0666, 0600)")
        return int(text, 8)
    return value


FileMode = Annotated[int, BeforeValidator(_octal_mode), Field(ge=0, le=0o777)]
#: the longest path a Unix socket may have (agent.probe_socket.MAX_PATH_BYTES; not imported: settings load light)
_MAX_SOCKET_PATH = 107


class AgentSettings(BaseSettings, KafkaSecurityFields):
    model_config = SettingsConfigDict(env_prefix="GPUWATCH_", extra="forbid", validate_default=True)

    simulate: int = Field(0, ge=0, le=1024, description="simulate N GPUs instead of NVML (0: real NVML)")
    metrics_host: str = Field("0.0.0.0", description="address /metrics listens on")
    metrics_port: int = Field(9400, ge=0, le=65535, description="port of /metrics (dcgm-exporter's 9400)")
    node_name: str = Field(default_factory=_default_node, min_length=1, description="this node's name")
    interval_floor: float = Field(0.25, ge=0.1, description="shortest sampling interval, s (GPM needs >= 0.1)")
    interval_ceiling: float = Field(10.0, gt=0, le=300, description="longest sampling interval, s")
    busy_interval: float = Field(1.0, gt=0, description="interval while a GPU works steadily, s")
    cpu_budget: float = Field(0.01, gt=0, le=1, description="CPU budget of sampling, fraction of one core")
    transport_cpu_budget: float = Field(
        0.01, gt=0, le=1, description="CPU budget of framing, sending and spooling, fraction of one core")
    slow_call_ms: float = Field(1.0, gt=0, description="a call slower than this gets its own period")
    kubeconfig: str | None = Field(None, description="kubeconfig path when not in a cluster")
    podresources_socket: str = Field(
        "/var/lib/kubelet/pod-resources/kubelet.sock", description="kubelet PodResources socket")
    attribution: bool = Field(True, description="map processes to pods and services")
    host_evidence: bool = Field(
        True, description="read the CPU evidence of GPU processes, their containers and the node (/proc, cgroups, PSI)")
    host_proc_root: str = Field(
        "/proc", min_length=1, description="the host's /proc (e.g. /host/proc when mounted there)")
    host_cgroup_root: str = Field(
        "/sys/fs/cgroup", min_length=1, description="the host's cgroup mount (e.g. /host/sys/fs/cgroup)")
    inference_scrape_period: float = Field(
        5.0, ge=0, le=300, description="seconds between scrapes of the inference endpoints of pods that ask for it "
        "(annotation gpuwatch.io/scrape-port); 0: never scrape")
    inference_scrape_timeout: float = Field(
        1.0, gt=0, le=30, description="longest wait for one inference endpoint's whole page, s")
    log_level: str = Field("INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$", description="log level")
    # sending to the collector (unset: /metrics only, like dcgm-exporter)
    kafka_bootstrap: str | None = Field(None, description="Kafka bootstrap servers; unset = do not send")
    kafka_topic: str = Field(DEFAULT_TOPIC, min_length=1, description="telemetry topic")
    kafka_compression: Literal["zstd", "lz4", "gzip", "none"] = Field("zstd", description="batch compression")
    kafka_reconnect_max_s: float = Field(
        30.0, ge=0.5, le=600, description="longest wait between reconnect attempts (the wait doubles from 0.5 s)")
    spool_dir: Path = Field(Path("/var/lib/gpuwatch/spool"), description="on-disk spool while Kafka is down")
    spool_max_mb: int = Field(512, ge=1, le=1 << 20, description="spool bound; the oldest frames go first")
    spool_segment_mb: float = Field(
        8.0, ge=0.0625, le=1024, description="spool segment size; the bound drops whole segments, oldest first")
    frame_window: int = Field(10, ge=1, le=3600, description="records of one GPU per frame at most")
    frame_max_delay: float = Field(1.0, gt=0, le=60, description="seconds a record may wait for its frame")
    frame_layout: Literal["node", "gpu"] = Field(
        "node", description="one frame per node and flush (node), or one per GPU (gpu: for collectors that predate "
        "node frames)")
    frame_deflate: bool = Field(
        True, description="deflate each node frame as the next part of one stream per keyframe interval (about 30% "
        "fewer bytes on the Kafka log; false for collectors that predate it)")
    # a CPU profile of the Python processes on a GPU when a throughput drop opens there (agent.profiling)
    profile: bool = Field(False, description="take py-spy profiles when the collector asks (needs SYS_PTRACE)")
    profile_duration_s: float = Field(5.0, ge=1, le=60, description="length of one capture, s")
    profile_rate_hz: int = Field(100, ge=1, le=1000, description="py-spy's sampling rate, Hz")
    profile_period_s: float = Field(600.0, ge=10, description="at most one capture per process in this period, s")
    profile_max_kb: int = Field(256, ge=8, le=900, description="folded stacks of one answer at most, KiB")
    profile_cpu_budget: float = Field(
        0.01, gt=0, le=1, description="CPU budget of profiling (py-spy's own CPU included), fraction of one core")
    profile_py_spy: str | None = Field(None, description="the py-spy binary (default: on PATH or beside python)")
    # the windows of the CUPTI kernel probes inside workloads (agent.kernels; the probe is opt-in per workload)
    probe_socket: str = Field(
        "/run/gpuwatch/probe.sock", description="Unix datagram socket the workloads' kernel probes write to "
        "(empty: no receiver)")
    probe_socket_mode: FileMode = Field(
        0o666, description="file mode of the probe socket, octal (0666: processes of any uid may write, as the "
        "chart's workload pods; 0600: the agent's user only)")
    probe_cpu_budget: float = Field(
        0.01, gt=0, le=1, description="CPU budget of the probe receiver, fraction of one core (past it, datagrams "
        "are dropped undecoded)")

    @field_validator("probe_socket")
    @classmethod
    def _socket_path(cls, value: str) -> str:
        if value and not value.startswith("/"):
            raise ValueError(f"{value!r} is not an absolute path (or empty, for no receiver)")
        if len(os.fsencode(value)) > _MAX_SOCKET_PATH or "\0" in value:
            raise ValueError(f"a Unix socket path has at most {_MAX_SOCKET_PATH} bytes and no NUL; {value!r} does not "
                             "fit")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> AgentSettings:
        if self.interval_ceiling < self.interval_floor:
            raise ValueError(f"{where('interval_ceiling')} is {self.interval_ceiling}: it must be at least "
                             f"{where('interval_floor')}, {self.interval_floor}")
        if 0 < self.inference_scrape_period < self.inference_scrape_timeout:
            raise ValueError(f"{where('inference_scrape_timeout', flag=None)} is {self.inference_scrape_timeout} s: "
                             f"it must not exceed {where('inference_scrape_period', flag=None)}, "
                             f"{self.inference_scrape_period} s")
        segment = self.spool_segment_bytes()
        if self.spool_max_mb << 20 < 2 * segment:
            raise ValueError(
                f"{where('spool_max_mb')} is {self.spool_max_mb} MiB: it must hold at least two segments of "
                f"{where('spool_segment_mb')} ({self.spool_segment_mb:g} MiB), so at least "
                f"{math.ceil(2 * segment / (1 << 20))} MiB; or make the segments smaller "
                f"(at most {self.spool_max_mb / 2:g} MiB)")
        return self

    def spool_segment_bytes(self) -> int:
        return int(self.spool_segment_mb * (1 << 20))


    def kafka(self) -> KafkaSettings | None:
        """The sender's settings (agent.sender.KafkaSettings) from these, or None when not sending."""
        if not self.kafka_bootstrap:
            return None
        from agent.kafka_settings import KafkaSettings

        return KafkaSettings(
            bootstrap_servers=self.kafka_bootstrap, topic=self.kafka_topic,
            client_id=f"gpuwatch-agent-{self.node_name}",
            compression=self.kafka_compression, reconnect_backoff_max_ms=int(self.kafka_reconnect_max_s * 1000),
            security_protocol=self.kafka_security_protocol,
            ssl_cafile=self.kafka_ssl_cafile, ssl_certfile=self.kafka_ssl_certfile, ssl_keyfile=self.kafka_ssl_keyfile,
            sasl_mechanism=self.kafka_sasl_mechanism, sasl_username=self.kafka_sasl_username,
            sasl_password=self.kafka_sasl_password, sasl_password_file=self.kafka_sasl_password_file,
        )


class SettingsError(ValueError):
    """A setting failed validation; the message names each bad one, its env var and flag."""


def where(name: str, env_prefix: str = "GPUWATCH_", flag: str | None = "") -> str:
    """A setting as a message names it: ``name (env GPUWATCH_NAME, flag --name)``; ``flag`` is
    the command line's own spelling (``None``: the setting has no flag, only its variable)."""
    if flag == "":
        flag = f"--{name.replace('_', '-')}"
    return f"{name} (env {env_prefix}{name.upper()}" + (f", flag {flag})" if flag else ")")


def load(model: type[BaseSettings], overrides: dict[str, Any], env_prefix: str = "GPUWATCH_",
         flags: Mapping[str, str] | None = None) -> Any:
    """Build a settings model from env plus the flags given (flags win).

    ``overrides`` holds every setting the command line has a flag for (None: not given), so a
    message names a flag only where one exists; ``flags`` spells those whose flag is not
    ``--setting-name`` (the API's ``port`` is ``--api-port``). A variable pydantic-settings
    cannot even parse (a list that is not JSON) is a one-line error like any other."""
    given = {k: v for k, v in overrides.items() if v is not None}

    def named(name: str) -> str:
        top = name.split(".")[0]
        flag = (flags or {}).get(top) or (f"--{top.replace('_', '-')}" if top in overrides else None)
        return where(name, env_prefix, flag)

    try:
        return model(**given)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            if err["loc"]:
                lines.append(f"invalid setting {named('.'.join(str(p) for p in err['loc']))}: "
                             + err["msg"].removeprefix("Value error, "))
            else:  # a check across settings: its message names them
                lines.append("invalid settings: " + err["msg"].removeprefix("Value error, "))
        raise SettingsError("; ".join(lines)) from None
    except EnvParseError as exc:
        m = re.search(r'field "([^"]+)"', str(exc))
        name = m[1] if m else "?"
        raise SettingsError(f"invalid setting {named(name)}: cannot parse its value (a list or a mapping is written "
                            f'as JSON, e.g. ["https://a.example"])') from None
