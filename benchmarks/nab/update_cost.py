"""The univariate detector's cost per update (µs), against a baseline version in the same run.

Why: the engine calls :class:`~collector.detect.univariate.UnivariateDetector` once a
minute per GPU and metric, and NAB's 365,558 rows go through it in every benchmark run; a
better score must not come at a cost that matters there. The series are NAB's own files
(their values, in order), each fed to a fresh detector; this tree's detector and the
baseline's (a copy of ``univariate.py`` from another commit, e.g.
``git show c3a8447:collector/detect/univariate.py > /tmp/univariate_base.py``) alternate,
best of ``--repeat``. Run::

    .venv/bin/python benchmarks/nab/update_cost.py --baseline /tmp/univariate_base.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from benchmarks.nab.run import load
from benchmarks.nab.scoring import probation_rows
from collector.detect.univariate import UnivariateDetector


def per_update_us(make: Any, series: list[list[float]]) -> float:
    rows = 0
    began = time.perf_counter()
    for values in series:
        det = make(min(values), max(values), probation_rows(len(values)))
        for v in values:
            det.update(v)
        rows += len(values)
    return 1e6 * (time.perf_counter() - began) / rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--nab", type=Path, default=Path("/work/shared/datasets/nab"))
    p.add_argument("--baseline", type=Path, help="a univariate.py of another commit to time alongside")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    names = sorted(json.loads((args.nab / "labels" / "combined_windows.json").read_text()))
    series = [load(args.nab / "data" / name)[1] for name in names]
    makers: dict[str, Any] = {"this tree": UnivariateDetector}
    if args.baseline is not None:
        spec = importlib.util.spec_from_file_location("univariate_baseline", args.baseline)
        if spec is None or spec.loader is None:
            p.error(f"--baseline {args.baseline}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        makers["baseline"] = module.UnivariateDetector
    best = {name: float("inf") for name in makers}
    for _ in range(args.repeat):  # alternate, so that both see the machine in the same mood
        for name, make in makers.items():
            best[name] = min(best[name], per_update_us(make, series))
    for name, us in best.items():
        print(f"{name}: {us:.2f} µs per update ({sum(map(len, series))} updates, best of {args.repeat})")
    if "baseline" in best:
        print(f"ratio this tree / baseline: {best['this tree'] / best['baseline']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
