"""Issue 11's proof: while ``gpuwatch up --simulate`` serves a busy REST API, every GPU keeps its
interval and no ``gpu_lost`` is raised.

Before, the agent checked its 1%-of-a-core budget against the whole process, which in ``up``
also runs the collector and the API: ten seconds of API calls stretched every interval a
hundredfold, and the gaps raised false ``gpu_lost`` anomalies. The ceiling is set to 2 s
(``GPUWATCH_INTERVAL_CEILING``) so a short run shows it: every GPU must have a stored sample at
least every ceiling (with slack for a loaded CI machine), while the API keeps the process busy.
The run itself is :func:`tests.agent_faults.busy_api_in_up` (the benchmark runs it too).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.agent_faults import busy_api_in_up


def test_a_busy_api_in_up_does_not_thin_sampling(pg_db: str, tmp_path: Path) -> None:
    result = busy_api_in_up(pg_db, tmp_path, gpus=4, load_s=12.0, ceiling_s=2.0)
    print(result)
    assert not result["api_errors"], result
    assert result["api_calls"] > 50 and result["up_cpu_pct"] > 5, result  # 5x and more the agent's budget
    assert result["max_gap_s"] <= 3 * result["ceiling_s"], result  # before: no sample for the rest of the run
    assert result["stretch"] == 1.0 and result["gpu_lost_anomalies"] == 0, result
