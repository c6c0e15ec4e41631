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
        self._cache: dict[int, SimIdentity] = {}

    def identify(self, pid: int) -> SimIdentity:
        """Cached per pid, as the real attributor caches (the fleet's pids are never reused)."""
        found = self._cache.get(pid)
        if found is not None:
            return found
        p = self.fleet.identity(pid)
        if p is None:
            return SimIdentity(pid, None)
        if len(self._cache) > 4096:
            self._cache.clear()
        found = self._cache[pid] = SimIdentity(pid, p.name, p.namespace, p.pod, p.container, p.service)
        return found

    def gpu_owners(self) -> dict[str, list[SimIdentity]]:
        return {}

    def start(self) -> None:
        return None

    def stop(self, timeout: float = 5.0) -> None:
        return None

    def sources(self) -> list[str]:
        return ["simulated"]
