"""A GPU's health: the one definition that ``/gpus``, ``/nodes``, the web page and
``gpuwatch top`` show.

Why one function over two facts: health used to be judged from the newest sample's own
readings while the detectors judged the same GPU from its history, so a GPU with an
open critical anomaly could read ``ok``. The detectors are where readings become
verdicts (XIDs, ECC, throttling, lost GPUs...), so health is derived from what they
left open, plus the one thing only the reader can know, how old the newest sample is:

* ``critical``: an open anomaly of severity ``critical`` (whatever the sample age);
* ``no_data``: no sample stored at all; ``stale``: the newest sample is older than
  ``stale_after`` (the GPU, its agent or the pipeline is not reporting);
* ``degraded``: an open anomaly of severity ``warning``;
* ``ok``: otherwise (open ``info`` anomalies are listed among the reasons only).

Only anomalies the caller may see count (a namespace-scoped token's), so health never
reveals another namespace's anomaly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Literal

Health = Literal["ok", "degraded", "critical", "stale", "no_data"]
HEALTHS: Final[tuple[Health, ...]] = ("ok", "degraded", "critical", "stale", "no_data")
#: Order in which the page and ``top`` list states (worst first).
WORST_FIRST: Final[tuple[Health, ...]] = ("critical", "no_data", "stale", "degraded", "ok")


@dataclass(frozen=True, slots=True)
class OpenAnomaly:
    """What health needs of one open anomaly."""

    severity: str
    kind: str
    summary: str


@dataclass(frozen=True, slots=True)
class Verdict:
    health: Health
    reasons: list[str]
    sample_age_seconds: float | None


def judge(sample_ts: datetime | None, anomalies: Sequence[OpenAnomaly], now: datetime,
          stale_after: timedelta) -> Verdict:
    """Health from the newest sample's time and the open anomalies (worst first in ``reasons``)."""
    age = None if sample_ts is None else max(0.0, (now - sample_ts).total_seconds())
    order = {"critical": 0, "warning": 1}
    ranked = sorted(anomalies, key=lambda a: (order.get(a.severity, 2), a.kind))
    reasons = [f"{a.severity} {a.kind}: {a.summary}" for a in ranked]
    severities = {a.severity for a in anomalies}
    status: Health
    if "critical" in severities:
        status = "critical"
    elif age is None:
        status = "no_data"
    elif age > stale_after.total_seconds():
        status = "stale"
    elif "warning" in severities:
        status = "degraded"
    else:
        status = "ok"
    if age is None:
        reasons.append("no sample stored")
    elif age > stale_after.total_seconds():
        reasons.append(f"newest sample is {age_text(age)} old")
    return Verdict(status, reasons, age)


def age_text(seconds: float | None, *, compact: bool = False) -> str:
    """A sample age for people: ``42 s``, ``5 min``, ``3 h``, ``2 days`` (compact: ``42s``, ``5m``...)."""
    if seconds is None:
        return "never"
    for limit, width, unit, short in ((120, 1, "s", "s"), (7200, 60, "min", "m"), (172_800, 3600, "h", "h"),
                                      (float("inf"), 86400, "days", "d")):
        if seconds < limit:
            return f"{seconds / width:.0f}{short}" if compact else f"{seconds / width:.0f} {unit}"
    raise AssertionError("unreachable: the last limit is infinite")
