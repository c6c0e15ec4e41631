"""Record the labelled real-GPU trace: the workload, ``gpuwatch export`` beside it, then the score.

Run on the GPU machine from the repository root (the package installed from the working
tree, PyTorch present), in one command::

    OUT=/tmp/out python3 benchmarks/gpu/record_labelled.py
    OUT=/tmp/out GPUWATCH_WORKLOAD_VARIANT=b python3 benchmarks/gpu/record_labelled.py   # held out

It starts ``gpuwatch export`` (the agent, sampling every GPU at its adaptive intervals) and
waits for its first records, runs benchmarks/gpu/workload_labelled.py (about 8 minutes),
stops the export, and replays the trace through the detectors against the labels. Writes
``$OUT/h200-labelled.jsonl`` (the trace), ``$OUT/h200-labelled.labels.json`` (the labels),
``$OUT/h200-labelled-score.json``, and the workload's and the agent's logs. The export runs
at a higher priority where the user may set one (root), so the CPU-contention phase slows
the workload, not the sampling.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.incidents.labelled import evaluate  # noqa: E402


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return ""


def _ticks(stat: str) -> tuple[str, int]:
    """(state, utime + stime) from a /proc/<pid>/stat line; the comm may hold spaces."""
    rest = stat.rsplit(")", 1)[-1].split()
    return (rest[0], int(rest[11]) + int(rest[12])) if len(rest) > 12 else ("?", 0)


def host_sidecar(path: Path, stop: threading.Event) -> None:
    """Once a second, the host's side of the run as the kernel tells it (ground truth for the
    host-evidence work: node PSI, node CPU, and the workload's processes and threads).

    Raw counters, not rates, so any later reader can difference them its own way.
    """
    with open(path, "w", encoding="utf-8") as out:
        while not stop.wait(1.0):
            row: dict[str, Any] = {"t": time.time(), "stat_cpu": _read("/proc/stat").split("\n", 1)[0],
                                   "cgroup_cpu_stat": _read("/sys/fs/cgroup/cpu.stat")}
            for what in ("cpu", "memory", "io"):
                row[f"psi_{what}"] = _read(f"/proc/pressure/{what}")
            procs = []
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or "--job" not in _read(f"/proc/{pid}/cmdline").replace("\0", " "):
                    continue
                state, ticks = _ticks(_read(f"/proc/{pid}/stat"))
                threads = []
                for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else ():
                    threads.append((int(tid), *_ticks(_read(f"/proc/{pid}/task/{tid}/stat"))))
                procs.append({"pid": int(pid), "state": state, "ticks": ticks, "threads": threads})
            row["procs"] = procs
            out.write(json.dumps(row) + "\n")
            out.flush()


def pyspy_once(marks: Path, phase: str, out: Path, stop: threading.Event) -> None:
    """Once ``phase`` has run 20 s, capture the job's stacks with the agent's own py-spy runner
    (agent/pyspy.py) and write what it gave: whether py-spy can attach on this machine."""
    from agent.pyspy import PySpyRunner, find_py_spy

    while not stop.wait(1.0):
        rows = [json.loads(line) for line in _read(str(marks)).splitlines() if line.strip()]
        if not rows or rows[-1]["phase"] != phase or time.time() - rows[-1]["start"] < 20:
            continue
        binary = find_py_spy()
        capture = PySpyRunner(binary)(rows[-1]["pid"], 5.0, 100, 30.0)
        stacks = sorted(capture.stacks, key=lambda s: -s[1])[:10]
        out.write_text(json.dumps({"phase": phase, "binary": binary, "status": capture.status,
                                   "reason": capture.reason, "cpu_seconds": capture.cpu_seconds,
                                   "stacks": len(capture.stacks),
                                   "top": [{"count": n, "frames": stack.split(";")[-6:]} for stack, n in stacks]},
                                  indent=1) + "\n", encoding="utf-8")
        return


def main() -> int:
    out = Path(os.environ.get("OUT", "/tmp/gpuwatch-labelled"))
    out.mkdir(parents=True, exist_ok=True)
    variant = os.environ.get("GPUWATCH_WORKLOAD_VARIANT", "a")
    name = "h200-labelled" if variant == "a" else f"h200-labelled-{variant}"
    trace, labels = out / f"{name}.jsonl", out / f"{name}.labels.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}", "PYTHONUNBUFFERED": "1"}
    nice = ["nice", "-n", "-10"] if os.geteuid() == 0 else []
    with open(out / "export.log", "w") as elog, open(out / "workload.log", "w") as wlog:
        export = subprocess.Popen([*nice, sys.executable, "-m", "gpuwatch", "export", "--node-name", "h200-node",
                                   "-o", str(trace)], env=env, stderr=elog, cwd=ROOT)
        deadline = time.time() + 60
        while (not trace.exists() or trace.stat().st_size == 0) and time.time() < deadline:
            if export.poll() is not None:
                print(f"gpuwatch export exited with {export.returncode}; see {out / 'export.log'}")
                return 1
            time.sleep(0.2)
        stop = threading.Event()
        sidecar = threading.Thread(target=host_sidecar, args=(out / f"{name}.host.jsonl", stop), daemon=True)
        sidecar.start()
        if os.environ.get("GPUWATCH_RECORD_PYSPY"):  # the phase to capture, e.g. onethread
            threading.Thread(target=pyspy_once, args=(labels.with_suffix(".marks"), os.environ["GPUWATCH_RECORD_PYSPY"],
                                                      out / f"{name}.pyspy.json", stop), daemon=True).start()
        began = time.time()
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks/gpu/workload_labelled.py"), str(labels)],
                              env=env, stdout=wlog, stderr=subprocess.STDOUT, cwd=ROOT, check=False)
        time.sleep(3)
        stop.set()
        export.send_signal(signal.SIGTERM)
        export.wait(timeout=30)
    print(f"workload exited with {done.returncode} after {time.time() - began:.0f} s; see {out / 'workload.log'}")
    if done.returncode != 0 or not labels.exists():
        return 1
    result = evaluate(trace, labels)
    (out / f"{name}-score.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"{result['records']} records; {result['found']} of {len(result['incidents'])} incidents found; "
          f"{len(result['false'])} anomalies on normal phases")
    for i in result["incidents"]:
        print(f"  {i['phase']:11} {i['expect']:16} {i['latency_s'] if i['found'] else 'MISSED'}")
    for f in result["false"]:
        print(f"  FALSE {f['kind']} in {f['phase']} at +{f['at_s']} s: {f['summary']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
