"""Run the general-purpose detector on all NAB files and score it with NAB's three profiles.

Run from the repository root::

    .venv/bin/python benchmarks/nab/run.py                       # data in /work/shared/datasets/nab
    .venv/bin/python benchmarks/nab/run.py --nab DIR --json out.json

The detector (collector/detect/univariate.py) sees each file's values one at a time, plus
what NAB gives every detector up front: the file's minimum and maximum and its
probationary length. One threshold per profile for the whole corpus is chosen by NAB's
sweep (benchmarks/nab/scoring.py); the scores are normalised between the null and the
perfect detector, so they sit on the same scale as NAB's published scoreboard.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from benchmarks.nab.scoring import PROFILES, Point, file_points, probation_rows, sweep
from collector.detect.univariate import UnivariateDetector

SCOREBOARD = {  # NAB v1.1 README: standard / reward low FP / reward low FN
    "Perfect": (100.0, 100.0, 100.0), "ARTime": (74.9, 65.1, 80.4), "Numenta HTM": (70.5, 62.6, 75.2),
    "CAD OSE": (69.9, 67.0, 73.2), "earthgecko Skyline": (58.2, 46.2, 63.9), "KNN CAD": (58.0, 43.4, 64.8),
    "Relative Entropy": (54.6, 47.6, 58.8), "Random Cut Forest": (51.7, 38.4, 59.7),
    "Twitter ADVec": (47.1, 33.6, 53.5), "Windowed Gaussian": (39.6, 20.9, 47.4), "Etsy Skyline": (35.7, 27.1, 44.5),
    "Bayesian Changepoint": (17.7, 3.2, 32.2), "EXPoSE": (16.4, 3.2, 26.9), "Random": (11.0, 1.2, 19.5),
    "Null": (0.0, 0.0, 0.0),
}


def load(path: Path) -> tuple[list[str], list[float]]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [r["timestamp"] for r in rows], [float(r["value"]) for r in rows]


def run(nab: Path, **params: Any) -> dict[str, Any]:
    windows_all = json.loads((nab / "labels" / "combined_windows.json").read_text())
    points: list[Point] = []
    windows = 0
    rows = 0
    began = time.perf_counter()
    for name in sorted(windows_all):
        stamps, values = load(nab / "data" / name)
        det = UnivariateDetector(min(values), max(values), probation_rows(len(values)), **params)
        scores = [det.update(v) for v in values]
        spans = [(a.split(".")[0], b.split(".")[0]) for a, b in windows_all[name]]
        pts, counted = file_points(stamps, scores, spans, windows)
        windows += len(spans)
        points += pts
        rows += len(values)
        del counted
    elapsed = time.perf_counter() - began
    results = {p.name: sweep(points, windows, p) for p in PROFILES}
    return {
        "files": len(windows_all), "rows": rows, "windows": windows, "detector_s": round(elapsed, 1),
        "params": params,
        "scores": {name: {"score": round(r.score, 1), "threshold": r.threshold, "tp": r.tp, "fp": r.fp, "fn": r.fn}
                   for name, r in results.items()},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--nab", type=Path, default=Path("/work/shared/datasets/nab"))
    p.add_argument("--json", help="write the result here")
    args = p.parse_args()
    out = run(args.nab)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    s = out["scores"]
    print(f"{out['files']} files, {out['rows']} rows, {out['windows']} windows, detector {out['detector_s']} s")
    print(f"{'detector':22} {'standard':>9} {'low FP':>7} {'low FN':>7}")
    ours = (s["standard"]["score"], s["reward_low_FP_rate"]["score"], s["reward_low_FN_rate"]["score"])
    rows = sorted([*SCOREBOARD.items(), ("gpuwatch (this run)", ours)], key=lambda kv: -kv[1][0])
    for name, (a, b, c) in rows:
        print(f"{name:22} {a:9.1f} {b:7.1f} {c:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
