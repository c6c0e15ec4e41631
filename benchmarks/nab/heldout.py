"""NAB scored honestly: parameters and threshold chosen on half the files, scored on the other.

Why: the all-files score (benchmarks/nab/run.py) picks the threshold, and the parameters
were picked, by looking at the very files it is scored on. Here, for each of ``--splits``
random halvings of the 58 files, the number of bins (from ``--bins``) and the threshold
are chosen by the sweep on one half, and the standard-profile score of the *other* half
at that choice is recorded; the report is the mean (and range) of those held-out scores,
next to the all-files score and the in-sample score of the chosen half. Run::

    .venv/bin/python benchmarks/nab/heldout.py --json docs/bench-runs/nab-heldout.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from benchmarks.nab.run import load
from benchmarks.nab.scoring import PROFILES, Point, file_points, probation_rows, score_at, sweep
from collector.detect.univariate import UnivariateDetector

STANDARD = PROFILES[0]


def file_scores(nab: Path, bins: int) -> dict[str, tuple[list[Point], int]]:
    """Each file's scorable points (window ids local to the file) and its window count."""
    windows_all = json.loads((nab / "labels" / "combined_windows.json").read_text())
    out = {}
    for name in sorted(windows_all):
        stamps, values = load(nab / "data" / name)
        det = UnivariateDetector(min(values), max(values), probation_rows(len(values)), bins=bins)
        scores = [det.update(v) for v in values]
        spans = [(a.split(".")[0], b.split(".")[0]) for a, b in windows_all[name]]
        pts, _ = file_points(stamps, scores, spans, 0)
        out[name] = (pts, len(spans))
    return out


def pooled(files: dict[str, tuple[list[Point], int]], names: list[str]) -> tuple[list[Point], int]:
    points: list[Point] = []
    windows = 0
    for name in names:
        pts, n = files[name]
        points += [Point(p.score, p.window + windows if p.window >= 0 else -1, p.weight) for p in pts]
        windows += n
    return points, windows


def run(nab: Path, bins: list[int], splits: int, seed: int) -> dict[str, Any]:
    per_bins = {b: file_scores(nab, b) for b in bins}
    names = sorted(next(iter(per_bins.values())))
    all_files = {b: sweep(*pooled(per_bins[b], names), STANDARD).score for b in bins}
    rng = random.Random(seed)
    rows = []
    for _ in range(splits):
        shuffled = names[:]
        rng.shuffle(shuffled)
        a, b = shuffled[: len(names) // 2], shuffled[len(names) // 2:]
        best = max(((sweep(*pooled(per_bins[k], a), STANDARD), k) for k in bins), key=lambda x: x[0].score)
        chosen, k = best
        held = score_at(*pooled(per_bins[k], b), STANDARD, chosen.threshold)
        rows.append({"bins": k, "threshold": chosen.threshold, "tuned_half": round(chosen.score, 1),
                     "held_out_half": round(held.score, 1)})
    held_scores = [r["held_out_half"] for r in rows]
    return {"files": len(names), "bins_grid": bins, "splits": splits, "seed": seed,
            "all_files_standard": {str(k): round(v, 1) for k, v in all_files.items()},
            "held_out_mean": round(statistics.mean(held_scores), 1), "held_out_min": min(held_scores),
            "held_out_max": max(held_scores),
            "tuned_half_mean": round(statistics.mean(r["tuned_half"] for r in rows), 1), "rows": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--nab", type=Path, default=Path("/work/shared/datasets/nab"))
    p.add_argument("--bins", default="20,24,28,32", help="the grid of bin counts chosen from on each half")
    p.add_argument("--splits", type=int, default=20)
    p.add_argument("--seed", type=int, default=17)
    p.add_argument("--json", help="write the result here")
    args = p.parse_args()
    out = run(args.nab, [int(b) for b in args.bins.split(",")], args.splits, args.seed)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"all files (threshold chosen on them): {out['all_files_standard']}")
    print(f"held out, {out['splits']} splits: mean {out['held_out_mean']} (range {out['held_out_min']}-"
          f"{out['held_out_max']}); the halves they were chosen on: {out['tuned_half_mean']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
