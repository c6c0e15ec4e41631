"""The metric catalog: one table that drives sampling, the exporter, the codec and the docs.

Every GPU key is a DCGM field name exactly as NVIDIA's dcgm-exporter exposes it, in DCGM's
units (see shared/design/TELEMETRY.md); the host evidence (cost ``host``, field ids from
60001) and the inference-server signals (cost ``scrape``, from 60101) are gpuwatch's own.
Keeping the list as data (the habit of Datadog's ``dcgm`` check) means a test can assert that
the sampler fills every row, the exporter emits every row with the declared type, and
``docs/metrics.md`` lists every row.

``source`` names the one driver call that yields the metric; several metrics can share a
call (``memory`` yields used, free and reserved). ``cost`` says how the scheduler treats
that call: ``fast`` calls run every sample, ``slow`` calls run on a period stretched to
their measured latency, ``gpm`` metrics come from two GPM samples, and ``event`` metrics
come from the XID event thread, not from polling. ``host`` metrics are not the GPU's: the
agent reads them from ``/proc``, the cgroup tree and PSI for the GPU's processes and their
containers (:mod:`agent.host`), once per sampling tick for all GPUs; their keys are
``gpuwatch_...`` (not DCGM fields) in node-exporter's and cAdvisor's units, and their
``source`` says which files (``proc``, ``cgroup``, ``node``: /proc/stat, ``psi``).
``scrape`` metrics come from the inference server of the pod that holds the GPU
(:mod:`agent.inference`), scraped on a period of their own and present only for pods that
ask to be scraped.

``resolution`` is the quantum the frame codec may round a float to: never coarser than
1e-4 for ratios, and never coarser than the source's own resolution otherwise (NVML
reports power in mW, hence 0.001 W). ``0`` means the value is an integer and is sent
exactly.

``nvml_divisor`` turns the driver's number into the key's DCGM unit: the value is the
driver's divided by it (NVML reports power in mW, memory in bytes, GPM utilisations in
percent and GPM bandwidths in MiB/s), so the agent's readers (:mod:`agent.readers`,
:mod:`agent.gpm`) hold no unit of their own. A divisor rather than a factor because
``mW / 1000`` is exact where ``mW * 0.001`` is not.

``largest`` is the largest value the metric takes on any GPU or node the agent supports, where
there is such a bound and the unit is not a share (a share's is its full scale): 4 kW for watts,
4,096 cores for a node's CPU. It is None where nothing bounds the value (counters, bytes/s,
requests/s, seconds). With the resolution it tells the store whether a 32-bit float keeps every
value (:func:`collector.store.schema.metric_column`).

``rollup`` is how the store folds a bucket of samples into one rollup value: ``avg`` for a
gauge, ``max`` for a counter (it only grows, so the largest is the latest) and for the
last-XID gauge (the worst code), ``bit_or`` for a bitmask (every reason seen). ``keep_max``
marks an averaged gauge whose peak in a bucket is kept too (``<col>_max``). The store's
schema (:mod:`collector.store.schema`) and its generated SQL are built from these fields.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Final, Literal

from telemetry import keys as k

MetricKind = Literal["gauge", "counter"]
CostClass = Literal["fast", "slow", "gpm", "event", "host", "scrape"]
RollupFn = Literal["avg", "max", "bit_or"]


@dataclass(frozen=True, slots=True)
class Metric:
    """One row of the catalog."""

    key: str
    field_id: int
    unit: str
    kind: MetricKind
    help: str
    source: str
    cost: CostClass
    resolution: float = 0.0
    _: KW_ONLY
    nvml_divisor: float = 1.0
    rollup: RollupFn = "avg"
    keep_max: bool = False
    largest: float | None = None

    def __post_init__(self) -> None:
        if self.kind == "counter" and self.rollup != "max":
            raise ValueError(f"{self.key}: a counter rolls up by max (its latest value), not {self.rollup}")
        if self.keep_max and self.rollup != "avg":
            raise ValueError(f"{self.key}: keep_max is for averaged gauges; {self.rollup} already keeps it")

    @property
    def is_integer(self) -> bool:
        """Integers are exact on the wire; floats may be quantised to ``resolution``."""
        return self.resolution == 0.0

    @property
    def full_scale(self) -> float | None:
        """The value of "all of it" for a share (100 for a percent, 1 for a ratio); None otherwise.

        Lets code compare shares across units (a 15% move of GPU_UTIL and of SM_ACTIVE alike).
        """
        return _FULL_SCALE.get(self.unit)

    @property
    def ceiling(self) -> float | None:
        """The largest value the metric takes: ``largest``, or a share's full scale; None: unbounded."""
        return self.largest if self.largest is not None else self.full_scale

    @property
    def is_profiling(self) -> bool:
        """DCGM_FI_PROF_* metrics exist only where GPM does (Hopper and newer)."""
        return self.key.startswith("DCGM_FI_PROF_")


RATIO = 1e-4
_FULL_SCALE: Final[dict[str, float]] = {"%": 100.0, "ratio": 1.0}
_MILLI: Final = 1000.0  # mW -> W
_PERCENT: Final = 100.0  # percent -> ratio
_BYTES_PER_MIB: Final = float(1 << 20)  # bytes -> MiB
_MIB_PER_BYTE: Final = 1.0 / (1 << 20)  # MiB/s -> B/s (exact: a power of two)
_CORES: Final = 0.001  # host CPU in cores: a thousandth of a core
_MOST_WATTS: Final = 4000.0  # no GPU board draws or is limited to 4 kW (B300: 1.4 kW)
_MOST_CORES: Final = 4096.0  # no node has 4,096 CPUs (two 192-core sockets with SMT: 768)
_G: MetricKind = "gauge"
_C: MetricKind = "counter"

CATALOG: tuple[Metric, ...] = (
    Metric(k.GPU_UTIL, 203, "%", _G, "GPU utilization (in %).", "utilization", "fast"),
    Metric(k.MEM_COPY_UTIL, 204, "%", _G, "Memory utilization (in %).", "utilization", "fast"),
    Metric(k.ENC_UTIL, 206, "%", _G, "Encoder utilization (in %).", "encoder", "fast"),
    Metric(k.DEC_UTIL, 207, "%", _G, "Decoder utilization (in %).", "decoder", "fast"),
    Metric(
        k.FB_FREE, 251, "MiB", _G, "Framebuffer memory free (in MiB).", "memory", "fast",
        nvml_divisor=_BYTES_PER_MIB,
    ),
    Metric(
        k.FB_USED, 252, "MiB", _G, "Framebuffer memory used (in MiB).", "memory", "fast",
        nvml_divisor=_BYTES_PER_MIB, keep_max=True,
    ),
    Metric(
        k.FB_RESERVED, 253, "MiB", _G, "Framebuffer memory reserved (in MiB).", "memory", "fast",
        nvml_divisor=_BYTES_PER_MIB,
    ),
    Metric(
        k.POWER_USAGE, 155, "W", _G, "Power draw (in W).", "power", "fast", 0.001,
        nvml_divisor=_MILLI, keep_max=True, largest=_MOST_WATTS,
    ),
    Metric(
        k.TOTAL_ENERGY_CONSUMPTION, 156, "mJ", _C,
        "Total energy consumption since boot (in mJ).", "energy", "slow", rollup="max",
    ),
    Metric(k.GPU_TEMP, 150, "C", _G, "GPU temperature (in C).", "temperature", "fast", keep_max=True),
    Metric(
        k.MEMORY_TEMP, 140, "C", _G, "Memory temperature (in C).", "memory_temperature", "fast", keep_max=True,
    ),
    Metric(k.SM_CLOCK, 100, "MHz", _G, "SM clock frequency (in MHz).", "sm_clock", "fast"),
    Metric(k.MEM_CLOCK, 101, "MHz", _G, "Memory clock frequency (in MHz).", "mem_clock", "fast"),
    Metric(
        k.CLOCKS_EVENT_REASONS, 112, "bitmask", _G,
        "Current clock event (throttle) reasons as a bitmask.", "clocks_event_reasons", "fast", rollup="bit_or",
    ),
    Metric(
        k.PCIE_REPLAY_COUNTER, 202, "count", _C,
        "Total number of PCIe retries.", "pcie_replay", "fast", rollup="max",
    ),
    Metric(
        k.XID_ERRORS, 230, "xid", _G, "Value of the last XID error encountered.", "xid", "event", rollup="max",
    ),
    Metric(
        k.ECC_SBE_VOL_TOTAL, 310, "count", _C,
        "Total number of single-bit volatile ECC errors.", "ecc_sbe", "fast", rollup="max",
    ),
    Metric(
        k.ECC_DBE_VOL_TOTAL, 311, "count", _C,
        "Total number of double-bit volatile ECC errors.", "ecc_dbe", "fast", rollup="max",
    ),
    Metric(k.PSTATE, 190, "pstate", _G, "Performance state (P-state) 0-15.", "pstate", "fast"),
    Metric(
        k.POWER_MGMT_LIMIT, 160, "W", _G,
        "Current power limit for the device (in W).", "power_limit", "fast", 0.001, nvml_divisor=_MILLI,
        largest=_MOST_WATTS,
    ),
    Metric(
        k.GR_ENGINE_ACTIVE, 1001, "ratio", _G,
        "Ratio of time the graphics engine is active.", "gpm", "gpm", RATIO, nvml_divisor=_PERCENT,
    ),
    Metric(
        k.SM_ACTIVE, 1002, "ratio", _G,
        "The ratio of cycles an SM has at least 1 warp assigned.", "gpm", "gpm", RATIO, nvml_divisor=_PERCENT,
    ),
    Metric(
        k.SM_OCCUPANCY, 1003, "ratio", _G,
        "The ratio of number of warps resident on an SM.", "gpm", "gpm", RATIO, nvml_divisor=_PERCENT,
    ),
    Metric(
        k.PIPE_TENSOR_ACTIVE, 1004, "ratio", _G,
        "Ratio of cycles the tensor (HMMA) pipe is active.", "gpm", "gpm", RATIO, nvml_divisor=_PERCENT,
    ),
    Metric(
        k.DRAM_ACTIVE, 1005, "ratio", _G,
        "Ratio of cycles the device memory interface is active sending or receiving data.", "gpm", "gpm", RATIO,
        nvml_divisor=_PERCENT,
    ),
    Metric(
        k.PIPE_FP64_ACTIVE, 1006, "ratio", _G,
        "Ratio of cycles the fp64 pipes are active.", "gpm", "gpm", RATIO, nvml_divisor=_PERCENT,
    ),
    Metric(
        k.PIPE_FP32_ACTIVE, 1007, "ratio", _G,
        "Ratio of cycles the fp32 pipes are active.", "gpm", "gpm", RATIO, nvml_divisor=_PERCENT,
    ),
    Metric(
        k.PIPE_FP16_ACTIVE, 1008, "ratio", _G,
        "Ratio of cycles the fp16 pipes are active.", "gpm", "gpm", RATIO, nvml_divisor=_PERCENT,
    ),
    Metric(
        k.PCIE_TX_BYTES, 1009, "B/s", _G,
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads"
        " - in bytes per second.", "gpm", "gpm", 1.0, nvml_divisor=_MIB_PER_BYTE,
    ),
    Metric(
        k.PCIE_RX_BYTES, 1010, "B/s", _G,
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads"
        " - in bytes per second.", "gpm", "gpm", 1.0, nvml_divisor=_MIB_PER_BYTE,
    ),
    Metric(
        k.NVLINK_TX_BYTES, 1011, "B/s", _G,
        "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second.",
        "gpm", "gpm", 1.0, nvml_divisor=_MIB_PER_BYTE,
    ),
    Metric(
        k.NVLINK_RX_BYTES, 1012, "B/s", _G,
        "The rate of data received over NVLink, not including protocol headers, in bytes per second.",
        "gpm", "gpm", 1.0, nvml_divisor=_MIB_PER_BYTE,
    ),
    # ---- host evidence (issue 14): rates over the interval since the GPU's previous sample ----
    Metric(
        k.PROCESS_CPU_CORES, 60001, "cores", _G,
        "CPU time (user+system, all threads) of the GPU's processes per second of wall time (in cores).",
        "proc", "host", _CORES, largest=_MOST_CORES,
    ),
    Metric(
        k.PROCESS_BUSIEST_THREAD_RATIO, 60002, "ratio", _G,
        "CPU time per second of the busiest single thread of the GPU's processes (0-1 of one core); near 1: one "
        "thread (a Python loop, the GIL) feeds the GPU.", "proc", "host", RATIO, keep_max=True,
    ),
    Metric(
        k.PROCESS_RUNQUEUE_WAIT_CORES, 60003, "cores", _G,
        "Time the threads of the GPU's processes were runnable but waited for a CPU, per second (in cores; "
        "schedstat); CPU starvation.", "proc", "host", _CORES, largest=_MOST_CORES,
    ),
    Metric(
        k.PROCESS_BLOCKED_THREADS, 60004, "threads", _G,
        "Threads of the GPU's processes in uninterruptible sleep (state D, usually I/O) at the sample.",
        "proc", "host",
    ),
    Metric(
        k.PROCESS_SLEEPING_RATIO, 60005, "ratio", _G,
        "Share of time the busiest thread of the GPU's processes neither ran nor waited for a CPU: "
        "1 - (its CPU time + runqueue wait) per second, 0-1; near 1: it waits on input.", "proc", "host", RATIO,
    ),
    Metric(
        k.CONTAINER_CPU_USAGE_CORES, 60006, "cores", _G,
        "CPU used by the containers (cgroups) of the GPU's processes per second (in cores).", "cgroup", "host", _CORES,
        largest=_MOST_CORES,
    ),
    Metric(
        k.CONTAINER_CPU_LIMIT_CORES, 60007, "cores", _G,
        "CPU limit of the containers of the GPU's processes: CFS quota / period (in cores); absent when unlimited.",
        "cgroup", "host", _CORES, largest=_MOST_CORES,
    ),
    Metric(
        k.CONTAINER_CPU_THROTTLED_RATIO, 60008, "ratio", _G,
        "Share of the containers' CFS periods that were throttled over the interval (cpu.stat nr_throttled / "
        "nr_periods); absent without periods (no limit).", "cgroup", "host", RATIO, keep_max=True,
    ),
    Metric(
        k.NODE_CPU_BUSY_RATIO, 60009, "ratio", _G,
        "Node CPU utilisation over the interval: 1 - (idle + iowait) / total of /proc/stat.", "node", "host", RATIO,
    ),
    Metric(
        k.NODE_PRESSURE_CPU_WAITING_RATIO, 60010, "ratio", _G,
        "Share of wall time some task waited for a CPU (PSI /proc/pressure/cpu some).", "psi", "host", RATIO,
        keep_max=True,
    ),
    Metric(
        k.NODE_PRESSURE_MEMORY_WAITING_RATIO, 60011, "ratio", _G,
        "Share of wall time some task waited for memory (PSI /proc/pressure/memory some).", "psi", "host", RATIO,
    ),
    Metric(
        k.NODE_PRESSURE_IO_WAITING_RATIO, 60012, "ratio", _G,
        "Share of wall time some task waited for I/O (PSI /proc/pressure/io some).", "psi", "host", RATIO,
    ),
    # Inference-server signals (issue 14): the figures of the pod that holds the GPU, from its own
    # Prometheus endpoint (annotation gpuwatch.io/scrape-port), repeated on each GPU of a multi-GPU
    # pod; rates and means over the interval between the agent's last two scrapes; absent for a
    # pod that does not ask, before its second scrape, and while its endpoint does not answer.
    Metric(
        k.INFERENCE_REQUESTS_PER_SECOND, 60101, "req/s", _G,
        "Requests the pod's inference server completed per second (Triton nv_inference_request_success,"
        " vLLM vllm:request_success_total).", "scrape", "scrape", 0.001,
    ),
    Metric(
        k.INFERENCE_QUEUE_SECONDS, 60102, "s", _G,
        "Mean time a request waited in the inference server's queue (Triton nv_inference_queue_duration_us,"
        " vLLM vllm:request_queue_time_seconds).", "scrape", "scrape", 0.001, keep_max=True,
    ),
    Metric(
        k.INFERENCE_COMPUTE_SECONDS, 60103, "s", _G,
        "Mean time a request spent computing (Triton nv_inference_compute_infer_duration_us,"
        " vLLM vllm:request_inference_time_seconds).", "scrape", "scrape", 0.001,
    ),
    Metric(
        k.INFERENCE_PENDING_REQUESTS, 60104, "requests", _G,
        "Requests waiting in the inference server, summed over its models (Triton"
        " nv_inference_pending_request_count, vLLM vllm:num_requests_waiting).", "scrape", "scrape", 0.001,
        keep_max=True,
    ),
    Metric(
        k.INFERENCE_RUNNING_REQUESTS, 60105, "requests", _G,
        "Requests the inference server is running (vLLM vllm:num_requests_running).", "scrape", "scrape", 0.001,
    ),
    Metric(
        k.INFERENCE_TTFT_SECONDS, 60106, "s", _G,
        "Mean time to first token (vLLM vllm:time_to_first_token_seconds).", "scrape", "scrape", 0.001,
    ),
    Metric(
        k.INFERENCE_KV_CACHE_RATIO, 60107, "ratio", _G,
        "Share of the KV cache in use, 0..1 (vLLM vllm:kv_cache_usage_perc, v0 vllm:gpu_cache_usage_perc).",
        "scrape", "scrape", RATIO,
    ),
)

BY_KEY: dict[str, Metric] = {m.key: m for m in CATALOG}
BY_FIELD_ID: dict[int, Metric] = {m.field_id: m for m in CATALOG}
KEYS: tuple[str, ...] = tuple(m.key for m in CATALOG)
SOURCES: frozenset[str] = frozenset(m.source for m in CATALOG)
#: the host evidence's keys (read by :mod:`agent.host`, not by a driver call)
HOST_KEYS: tuple[str, ...] = tuple(m.key for m in CATALOG if m.cost == "host")


def table_id() -> int:
    """A stable id of the catalog's (field id, key, resolution) rows, carried in frame headers.

    A decoder that sees another table id still decodes (it skips ids it does not know);
    the id tells an operator which catalog an agent was built with.
    """
    import zlib

    text = ";".join(f"{m.field_id}:{m.key}:{m.resolution!r}" for m in CATALOG)
    return zlib.crc32(text.encode())


def metrics_markdown() -> str:
    """The catalog as the Markdown table in docs/metrics.md (generated, checked by a test)."""
    lines = [
        "# Metric catalog",
        "",
        "Generated from `telemetry/catalog.py` by `gpuwatch catalog --markdown`; a test keeps them equal.",
        "",
        "Adding a metric is one row in `telemetry/catalog.py` (its key also in `telemetry/keys.py` when code"
        " names it) and one reader (`agent/readers.py` for a driver call, or an entry in `agent/gpm.py`);"
        " then `gpuwatch catalog --markdown > docs/metrics.md` and `gpuwatch catalog --sql`, which regenerates"
        " the migrations' metric columns and names any row that still needs a migration"
        " (listed in `collector.store.sqlgen.GENERATED`, `add_metrics_sql` writes it for both profiles).",
        "",
        "Rows of cost `host` are not DCGM fields: the agent reads them from `/proc`, the cgroup tree (v1 or v2)"
        " and PSI for the GPU's processes (those NVML lists on it) and their containers, once per sampling tick,"
        " as rates over the interval since the GPU's previous sample; a value the host cannot give (no PSI, no"
        " limit, a first reading) is absent, never 0. `GPUWATCH_HOST_EVIDENCE=false` turns them off"
        " (see the README's agent settings).",
        "",
        "Rows of cost `scrape` are the figures of the pod that holds the GPU, from its inference server's own"
        " Prometheus endpoint (Triton or vLLM; the pod asks with the annotation `gpuwatch.io/scrape-port`),"
        " repeated on each GPU of a multi-GPU pod; rates and means over the interval between the agent's last two"
        " scrapes, absent for a pod that does not ask, before its second scrape and while its endpoint fails.",
        "",
        "| key | field id | unit | type | source | cost | wire resolution | rollup | help |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in CATALOG:
        res = "exact integer" if m.is_integer else repr(m.resolution)
        rollup = f"{m.rollup} (and max)" if m.keep_max else m.rollup
        lines.append(
            f"| `{m.key}` | {m.field_id} | {m.unit} | {m.kind} | `{m.source}` | {m.cost} | {res} | {rollup}"
            f" | {m.help} |"
        )
    return "\n".join(lines) + "\n"
