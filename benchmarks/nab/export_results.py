"""Write the univariate detector's scores in NAB's results layout, for NAB's own scorer.

Why: ``benchmarks/nab/scoring.py`` is our reimplementation of NAB's rules; this lets
numenta/NAB's ``run.py --optimize --score --normalize`` score the very same detector
output, as a check that the two agree. It writes
``OUT/gpuwatch/<category>/gpuwatch_<file>.csv`` (``timestamp,value,anomaly_score,label``,
the label 1 inside a published window), which is what NAB's detect step would have left.
Run (``NAB`` a checkout of numenta/NAB with pandas and simplejson installed)::

    .venv/bin/python benchmarks/nab/export_results.py --out NAB/results
    cd NAB && python run.py -d gpuwatch --optimize --score --normalize --skipConfirmation
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from benchmarks.nab.run import load
from benchmarks.nab.scoring import probation_rows
from collector.detect.univariate import UnivariateDetector


def export(nab: Path, out: Path) -> int:
    """Write every file's scores under ``out/gpuwatch``; the number of files written."""
    windows_all = json.loads((nab / "labels" / "combined_windows.json").read_text())
    for name in sorted(windows_all):
        stamps, values = load(nab / "data" / name)
        det = UnivariateDetector(min(values), max(values), probation_rows(len(values)))
        spans = [(a.split(".")[0], b.split(".")[0]) for a, b in windows_all[name]]
        category, base = name.split("/")
        path = out / "gpuwatch" / category / f"gpuwatch_{base}"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["timestamp", "value", "anomaly_score", "label"])
            for stamp, value in zip(stamps, values, strict=True):
                inside = any(a <= stamp <= b for a, b in spans)
                w.writerow([stamp, value, det.update(value), int(inside)])
    return len(windows_all)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--nab", type=Path, default=Path("/work/shared/datasets/nab"))
    p.add_argument("--out", type=Path, required=True, help="NAB's results directory")
    args = p.parse_args()
    print(f"{export(args.nab, args.out)} files written under {args.out / 'gpuwatch'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
