"""Render validate_h200.py's compare.json as the Markdown tables of docs/gpu-validation.md.

    python benchmarks/gpu/compare_table.py docs/gpu-runs/2026-11-30-compare.json
"""

from __future__ import annotations

import json
import sys
from typing import Any


def fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return "—" if v is None else str(v)


def main(path: str) -> None:
    with open(path) as fh:
        data = json.load(fh)
    comps = data["comparisons"]
    labels = [c["label"] for c in comps]
    print("| nvidia-smi field | DCGM key | " + " | ".join(labels) + " |")
    print("|---|---|" + "---|" * len(labels))
    for i, row in enumerate(comps[0]["rows"]):
        cells = [f"{fmt(c['rows'][i]['nvidia_smi'])} / {fmt(c['rows'][i]['gpuwatch'])}" for c in comps]
        print(f"| `{row['nvidia_smi_field']}` | `{row['dcgm_key']}` | " + " | ".join(cells) + " |")
    print()
    print("| phase | pid | nvidia-smi used MiB / gpuwatch | pmon SM % / gpuwatch sm_util |")
    print("|---|---|---|---|")
    for c in comps:
        for p in c["processes"]:
            print(f"| {c['label']} | {p['pid']} | {fmt(p['nvidia_smi_used_mib'])} / {fmt(p['gpuwatch_used_mib'])} |"
                  f" {fmt(p['pmon_sm_pct'])} / {fmt(p['gpuwatch_sm_util'])} |")
    print()
    keys = sorted({k for c in comps for k in c["gpm"]})
    print("| GPM-derived key | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for k in keys:
        print(f"| `{k}` | " + " | ".join(f"{c['gpm'].get(k, float('nan')):.4g}" for c in comps) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
