"""The XID codes an operator meets most: what each means, how bad it is, what to do.

Why a table, and why here: an XID number alone tells an on-call engineer nothing; the
anomaly's summary must say "XID 79: GPU has fallen off the bus" and whether to drain the
node, and the agent (which acts on a lost GPU), the detectors (severity and kind), the API
and the web page (meanings) must all say the same. There were two tables, and they
disagreed: the API's old health check called 63, 92, 94 and 140 critical, the detectors
rated 63, 92 and 94 warnings and did not list 140.

How they were settled: from NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors,
"Analyzing Xid Errors with the Xid Catalog", the Ampere-and-newer sheet), whose
*immediate action* ("resolution bucket") is given per row as ``nvidia_action``. The rule
is the catalog's: a code whose immediate action takes the GPU out of service (RESET_GPU,
RESTART_BM, or a workflow that drains it: 48's and NVLink's) is ``critical``; one whose
immediate action is RESTART_APP or IGNORE is a ``warning`` (or ``info`` for a follow-on
like 45), since the GPU keeps serving. So:

* 63 (memory remapping *event*: the row was remapped, IGNORE/IGNORE) is a warning;
* 92 (high single-bit ECC rate, IGNORE) is a warning;
* 94 (*contained* memory error: only the affected application stopped, RESTART_APP) is a
  warning;
* 140 (unrecovered ECC error, RESET_GPU) is critical, and is now listed.

A test checks every row against this rule. Codes not listed get :func:`describe`'s generic
warning, as before. ``kind`` names the anomaly an XID becomes: most are ``xid``; 79 is a
GPU lost from the bus and 48 an ECC double-bit error, each a different incident.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

#: How bad something is, for XIDs here and for every anomaly and alert built from them.
Severity = Literal["info", "warning", "critical"]
XidKind = Literal["xid", "ecc_dbe", "gpu_lost"]

#: NVIDIA's immediate actions that take the GPU out of service until someone acts.
OUT_OF_SERVICE: Final = frozenset({"RESET_GPU", "RESTART_BM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR"})


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    mnemonic: str  # NVIDIA's name for it
    meaning: str
    severity: Severity
    action: str  # what the operator should do, in words
    nvidia_action: str  # the catalog's immediate action (resolution bucket)
    kind: XidKind = "xid"


XIDS: Final[dict[int, Xid]] = {x.code: x for x in (
    Xid(13, "ROBUST_CHANNEL_GR_EXCEPTION",
        "graphics engine exception (illegal memory access or assert in the application)", "warning",
        "usually an application bug; check the workload's logs", "RESTART_APP"),
    Xid(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        "GPU memory page fault (MMU fault, often an application out-of-bounds access)", "warning",
        "usually an application bug; repeated on many jobs suggests hardware", "RESTART_APP"),
    Xid(32, "ROBUST_CHANNEL_PBDMA_ERROR", "invalid or corrupted push buffer stream (PCIe or driver problem)",
        "warning", "check the PCIe link and the driver", "RESTART_APP"),
    Xid(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        "GPU stopped processing (a user application fault, e.g. a killed context)", "warning",
        "the application crashed; the GPU is usually fine", "IGNORE"),
    Xid(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "preemptive cleanup after an earlier error or a killed process",
        "info", "follows other XIDs; look at the one before it", "WORKFLOW_XID_45"),
    Xid(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "double-bit ECC error (uncorrectable memory error)", "critical",
        "drain the GPU; the application's data may be corrupt; reset the GPU", "WORKFLOW_XID_48", kind="ecc_dbe"),
    Xid(61, "PMU_BREAKPOINT", "internal micro-controller breakpoint or warning", "warning",
        "report it to NVIDIA if it recurs", "CONTACT_SUPPORT"),
    Xid(62, "PMU_HALT_ERROR", "internal micro-controller halt", "critical", "reset the GPU", "RESET_GPU"),
    Xid(63, "INFOROM_DRAM_RETIREMENT_EVENT", "ECC page retirement or row remapping recorded", "warning",
        "the GPU retired a page or remapped a row; reset at the next opportunity", "IGNORE"),
    Xid(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "ECC page retirement or row remapping failed", "critical",
        "remapping resources exhausted or failed: replace the GPU", "RESET_GPU"),
    Xid(74, "NVLINK_ERROR", "NVLink error", "critical", "check NVLink and the NVSwitch fabric",
        "WORKFLOW_NVLINK_ERR"),
    Xid(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "critical",
        "the GPU is unreachable: drain the node, check power and PCIe, reboot", "RESTART_BM", kind="gpu_lost"),
    Xid(92, "EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", "warning",
        "watch for double-bit errors; plan a replacement", "IGNORE"),
    Xid(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "contained ECC error (the affected application was stopped)",
        "warning", "restart the affected application; the GPU keeps serving others", "RESTART_APP"),
    Xid(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "uncontained ECC error (all applications on the GPU affected)",
        "critical", "drain the GPU and reset it", "RESET_GPU"),
    Xid(119, "GSP_RPC_TIMEOUT", "GSP RPC timeout", "critical", "reset the GPU; update the driver if it recurs",
        "RESET_GPU"),
    Xid(120, "GSP_ERROR", "GSP error", "critical", "reset the GPU", "RESET_GPU"),
    Xid(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "unrecovered ECC error (an uncorrectable error escaped containment)",
        "critical", "drain the GPU and reset it; contact NVIDIA support if it recurs", "RESET_GPU"),
)}

#: The XID after which NVML no longer answers for the GPU: the agent marks it lost at once.
GPU_LOST: Final = XIDS[79]


def describe(code: int) -> Xid:
    """The table's entry, or a generic warning for codes it does not list."""
    return XIDS.get(code) or Xid(code, "", "unlisted XID (see NVIDIA's XID catalogue)", "warning", "look it up", "")
