"""Attribution for a simulated fleet: its processes carry made-up pods and services.

With ``--simulate`` there are no real processes to look up in /proc, but the rest of the
system (per-service history, the services API, idle-allocation detection) needs pods;
the fleet's workload profiles name them, and this adapter hands them out like the real
attributor does.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.driver.simulated import SimulatedFleet


@dataclass(frozen=True, slots=True)
class SimIdentity:
    pid: int | None
    name: str | None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    service: str | None = None


class SimulatedAttribution:
    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet

    def identify(self, pid: int) -> SimIdentity:
        p = self.fleet.identity(pid)
        if p is None:
            return SimIdentity(pid, None)
        return SimIdentity(pid, p.name, p.namespace, p.pod, p.container, p.service)

    def gpu_owners(self) -> dict[str, list[SimIdentity]]:
        return {}

    def start(self) -> None:
        return None

    def stop(self, timeout: float = 5.0) -> None:
        return None

    def sources(self) -> list[str]:
        return ["simulated"]
