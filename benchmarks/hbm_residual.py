"""How far HBM temperature strays from the HBM detector's fit on real GPUs, and how soon it finds
the generated fleets' HBM faults.

Why: the HBM detector (collector/detect/hbm.py) reports HBM running ``HOT_C`` over what the
GPU's die temperature and DRAM activity put it at. That bound must sit above what a healthy GPU
does: every real trace recorded here (benchmarks/data, H100 and H200, every phase and incident
we could cause) is replayed through the fit, and the worst one-minute mean residual once it
trusts itself is printed per trace. None of those traces has an HBM fault, so any finding on
them is a false one. The traces are 3-9 minutes long, so the fit is trusted here after
``--warm`` samples (12: two minutes) rather than the product's ``hbm.WARM`` (15 minutes): a
shorter warm-up makes the fit worse, not better, so the figure is an upper bound.

    python benchmarks/hbm_residual.py                 # the real traces
    python benchmarks/hbm_residual.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collector.detect import hbm  # noqa: E402
from collector.detect.replay import read_trace  # noqa: E402
from collector.detect.state import GpuState  # noqa: E402
from telemetry.keys import DRAM_ACTIVE, GPU_TEMP, MEMORY_TEMP  # noqa: E402
from telemetry.records import GpuRecord  # noqa: E402


def worst(path: Path) -> dict[str, object]:
    """Replay one trace through a fresh fit per GPU: the worst one-minute mean residual once armed,
    the samples judged, and the findings (every one of them false on these traces)."""
    states: dict[str, GpuState] = {}
    out = {"trace": path.name, "judged": 0, "worst_c": None, "findings": 0}
    top = float("-inf")
    for rec in read_trace(path):
        if not isinstance(rec, GpuRecord):
            continue
        st = states.get(rec.gpu)
        if st is None:
            st = states[rec.gpu] = GpuState(rec.node, rec.gpu)
        st.temp, st.dram = rec.metrics.get(GPU_TEMP), rec.metrics.get(DRAM_ACTIVE)
        fit = st.hbm
        before = fit.last_ts
        found = hbm.observe(st, rec.ts, rec.metrics.get(MEMORY_TEMP))
        if fit.last_ts != before and fit.armed and fit.residuals:
            out["judged"] = int(out["judged"]) + 1  # type: ignore[call-overload]
            mean = sum(r for _, r in fit.residuals) / len(fit.residuals)
            top = max(top, mean)
            if found is not None and fit.hot_since == rec.ts:  # (a finding begins)
                out["findings"] = int(out["findings"]) + 1  # type: ignore[call-overload]
    out["worst_c"] = None if top == float("-inf") else round(top, 2)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT / "benchmarks" / "data"))
    p.add_argument("--json", help="write the rows here too")
    p.add_argument("--warm", type=int, default=12, help="samples before the fit is trusted (product: hbm.WARM)")
    args = p.parse_args()
    hbm.WARM = args.warm  # type: ignore[misc]  # (module constant, read at each call)
    rows = [worst(f) for f in sorted(Path(args.data).glob("*.jsonl"))]
    for r in rows:
        print(f"{r['trace']:28s} judged {r['judged']:4d}  worst 1-min mean residual {r['worst_c']} °C  "
              f"findings {r['findings']}")
    tops = [float(r["worst_c"]) for r in rows if r["worst_c"] is not None]  # type: ignore[arg-type]
    print(f"{len(rows)} traces; worst of all {max(tops):.2f} °C against HOT_C {hbm.HOT_C} °C; "
          f"findings {sum(int(r['findings']) for r in rows)}")  # type: ignore[call-overload]
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
