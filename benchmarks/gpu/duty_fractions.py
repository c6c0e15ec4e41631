"""How each labelled phase of the real H200 traces reads, sample by sample, against its job's level.

Why: the rule that tells a job working in bursts between waits (collector/detect/level.py
``duty_cycled``) must hold on every phase of every real trace, not only on the ones it was made
for. For each phase after a training phase this prints, against the 90th percentile of that
training phase's SM activity (its level): the share of samples at 0.7 of the level or above, the
share idle (below 0.05), the share between, and how many bursts ended in a wait.

    python benchmarks/gpu/duty_fractions.py                # every committed labelled trace
    python benchmarks/gpu/duty_fractions.py -j -m           # some of them (the variant suffixes)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
SM = "DCGM_FI_PROF_SM_ACTIVE"


def fractions(trace: Path) -> list[str]:
    labels = json.loads(trace.with_suffix(".labels.json").read_text())["phases"]
    rows = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    out, level = [], 0.0
    for phase in labels:
        xs = [r["metrics"][SM] for r in rows if phase["start"] <= r["ts"] < phase["end"] and SM in r["metrics"]]
        if len(xs) < 5:
            continue
        if phase["phase"] == "train":
            level = sorted(xs)[int(0.9 * (len(xs) - 1))]
            continue
        if level <= 0:
            continue
        n = len(xs)
        hi = sum(x >= 0.7 * level for x in xs)
        lo = sum(x < 0.05 for x in xs)
        bursts, waited = 0, False
        for x in reversed(xs):
            if x >= 0.7 * level:
                bursts += waited
                waited = False
            elif x < 0.05:
                waited = True
        out.append(f"{trace.stem.removeprefix('h200-labelled') or 'a':3} {phase['phase']:11} {n:4} "
                   f"level {level:.2f}  mean/level {sum(xs) / n / level:.2f}  at level {hi / n:.2f}  "
                   f"idle {lo / n:.2f}  between {(n - hi - lo) / n:.2f}  bursts {bursts}")
    return out


def main() -> None:
    names = sys.argv[1:] or sorted(p.stem.removeprefix("h200-labelled") for p in DATA.glob("h200-labelled*.jsonl"))
    for v in names:
        for line in fractions(DATA / f"h200-labelled{v}.jsonl"):
            print(line)


if __name__ == "__main__":
    main()
