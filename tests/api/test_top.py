"""``gpuwatch top``'s table at 80x24: one row per GPU, pods joined, nothing but the names cut."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from gpuwatch.cmd_top import fleet_table


def _gpu(i: int, health: str = "ok") -> dict[str, Any]:
    pods = [{"namespace": "inference", "pod": f"llm-serve-7d9f8b-{i:02d}", "service": "llm-serve", "processes": 2,
             "used_memory_mib": 70_000.0}] if i % 2 else []
    return {"node": f"gpu-node-with-a-long-name-{i // 8:02d}", "gpu_index": i % 8, "health": health,
            "sample_age_seconds": 3.0 + i, "stale": False, "open_anomalies": 1 if health != "ok" else 0,
            "metrics": {"DCGM_FI_PROF_SM_ACTIVE": 0.91, "DCGM_FI_DEV_FB_USED": 120_000.0,
                        "DCGM_FI_DEV_FB_FREE": 23_771.0, "DCGM_FI_DEV_POWER_USAGE": 692.0,
                        "DCGM_FI_DEV_GPU_TEMP": 71.0},
            "pods": pods}


def _render(gpus: list[dict[str, Any]], height: int | None) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=80, height=24, color_system=None).print(fleet_table(gpus, "gpuwatch test", height, 80))
    return out.getvalue().splitlines()


def test_one_row_per_gpu_within_80_columns() -> None:
    lines = _render([_gpu(0), _gpu(1), _gpu(2, "critical")], 24)
    assert max(len(line) for line in lines) <= 80
    rows = [line for line in lines if line.startswith("gpu-node")]
    assert len(rows) == 3
    assert "x2" in rows[1] and rows[1].count("llm-serve-7d9f8b") == 1  # a pod of two processes, once
    for row in rows:  # the figures and the health are whole; only names give way
        assert "91%" in row and "117/140" in row and " 692 " in row and " 71 " in row
    assert "critical" in rows[2] and rows[2].rstrip().endswith("1")


def test_rows_that_do_not_fit_are_counted() -> None:
    gpus = [_gpu(i, "degraded" if i == 30 else "ok") for i in range(32)]
    lines = _render(gpus, 24)
    assert len(lines) <= 24
    assert lines[-1].startswith("... ") and "more GPUs (1 degraded, " in lines[-1]
