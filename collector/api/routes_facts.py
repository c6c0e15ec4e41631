"""``/gpu-facts``: the XID table and the clock-event reasons, as :mod:`telemetry` defines them.

Why an endpoint: the web page names XIDs and throttle reasons, and a third copy of the
tables in JavaScript would drift from the one the detectors use. The page (and any other
client) reads them here; they change only with a gpuwatch release, so the answer may be
cached.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from collector.api.auth import Viewer
from collector.api.errors import ERROR_RESPONSES, check_request
from collector.api.models import ClockReasonOut, GpuFactsOut, XidOut
from telemetry.clocks import ClockEventReason
from telemetry.xid import XIDS

router = APIRouter(responses=ERROR_RESPONSES, dependencies=[Depends(check_request)])

_FACTS = GpuFactsOut(
    xids=[XidOut(code=x.code, mnemonic=x.mnemonic, meaning=x.meaning, severity=x.severity, action=x.action,
                 nvidia_action=x.nvidia_action, kind=x.kind) for x in XIDS.values()],
    clock_event_reasons=[ClockReasonOut(bit=int(r), name=str(r.name), meaning=r.meaning, throttles=r.throttles)
                         for r in ClockEventReason],
)


@router.get("/gpu-facts", response_model=GpuFactsOut,
            summary="the XIDs gpuwatch knows (meaning, severity, action) and the clock-event reason bits")
async def gpu_facts(who: Viewer) -> GpuFactsOut:
    return _FACTS
