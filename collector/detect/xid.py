"""The XID codes an operator meets most, with what each means and how bad it is.

Why a table: an XID number alone tells an on-call engineer nothing; the anomaly's
summary must say "XID 79: GPU has fallen off the bus" and whether to drain the node.
Meanings follow NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors). A few
codes get their own anomaly kind because they are a different incident: 79 is a GPU
lost from the bus, 48 is an ECC double-bit error.
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.detect.anomaly import Severity


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    name: str
    severity: Severity
    action: str
    kind: str = "xid"


XIDS: dict[int, Xid] = {x.code: x for x in (
    Xid(13, "graphics engine exception (illegal memory access or assert in the application)", "warning",
        "usually an application bug; check the workload's logs"),
    Xid(31, "GPU memory page fault (MMU fault, often an application out-of-bounds access)", "warning",
        "usually an application bug; repeated on many jobs suggests hardware"),
    Xid(32, "invalid or corrupted push buffer stream (PCIe or driver problem)", "warning",
        "check the PCIe link and the driver"),
    Xid(43, "GPU stopped processing (a user application fault, e.g. a killed context)", "warning",
        "the application crashed; the GPU is usually fine"),
    Xid(45, "preemptive cleanup after an earlier error or a killed process", "info",
        "follows other XIDs; look at the one before it"),
    Xid(48, "double-bit ECC error (uncorrectable memory error)", "critical",
        "drain the GPU; the application's data may be corrupt; reset the GPU", kind="ecc_dbe"),
    Xid(61, "internal micro-controller breakpoint or warning", "warning", "report it to NVIDIA if it recurs"),
    Xid(62, "internal micro-controller halt", "critical", "reset the GPU"),
    Xid(63, "ECC page retirement or row remapping recorded", "warning",
        "the GPU retired a page or remapped a row; reset at the next opportunity"),
    Xid(64, "ECC page retirement or row remapping failed", "critical",
        "remapping resources exhausted or failed: replace the GPU"),
    Xid(74, "NVLink error", "critical", "check NVLink and the NVSwitch fabric"),
    Xid(79, "GPU has fallen off the bus", "critical",
        "the GPU is unreachable: drain the node, check power and PCIe, reboot", kind="gpu_lost"),
    Xid(92, "high single-bit ECC error rate", "warning", "watch for double-bit errors; plan a replacement"),
    Xid(94, "contained ECC error (the affected application was stopped)", "warning",
        "restart the affected application; the GPU keeps serving others"),
    Xid(95, "uncontained ECC error (all applications on the GPU affected)", "critical",
        "drain the GPU and reset it"),
    Xid(119, "GSP RPC timeout", "critical", "reset the GPU; update the driver if it recurs"),
    Xid(120, "GSP error", "critical", "reset the GPU"),
)}


def describe(code: int) -> Xid:
    """The table's entry, or a generic warning for codes it does not list."""
    return XIDS.get(code) or Xid(code, "unlisted XID (see NVIDIA's XID catalogue)", "warning", "look it up")
