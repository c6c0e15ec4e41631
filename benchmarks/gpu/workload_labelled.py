"""A labelled real-GPU workload: normal phases and every incident we can cause safely.

Why: the detectors must be judged on a real GPU's readings with the truth known, not only
on generated traces. This script runs, one after the other, the jobs a node meets and
writes a labels file: each phase with its start, its end and the anomaly it should cause
(``expect``), or ``normal``. Nothing changes the GPU's settings (no clocks, no power
limit, no ECC, no reset); every incident is caused by what the workload does:

* **train** (a new process; each step prepares its batch on the CPU with all cores, copies
  it in and runs bf16 matmuls and a backward pass, calibrated so the GPU is busy about
  half of the step): training with an evaluation dip (forward only, small batch) and,
  later, a checkpoint (weights copied to host memory); then, in the same process:
  ``stall`` (input-bound: each step waits three steps' time for its batch) ->
  ``throughput_drop``; ``contention``
  (``4 x cores`` CPU-burning processes next to it: the CPU half of each step slows) ->
  ``throughput_drop``; ``leak`` (1 GiB more kept every 2 s) -> ``memory_leak``; ``hang`` (the
  process alive, its GPU work one kernel spinning on a single thread block, ``torch.cuda._sleep``:
  a collective waiting for a dead peer; ``hang_streams`` > 1: that many at once, each on its own
  stream) -> ``throughput_drop``; ``capsmall`` and ``capbig`` (small, then large bf16 matmuls flat
  out, no host half: the same power cap held at two clocks, a change of kernel mix, normal; in
  the tools process too); ``jitter`` (each step waits a random, exponentially distributed
  time for its batch) -> ``throughput_drop``; ``h2d`` (each step first copies its batch from
  pageable host memory) -> ``throughput_drop``; then the process exits (a job stop);
* **tools** (another new process): ``serve`` (requests at a varying rate with a burst: a
  demand-driven phase), ``copy`` (host-to-device copies: copy-bound), ``membound``
  (elementwise passes over 16 GiB: memory-bound), ``launch`` (a loop of tiny kernels, about
  100,000 a second) -> ``launch_bound``; then it exits;
* ``idle`` between and around them (no process on the GPU).

Total about 8 minutes. The label times are wall-clock epoch seconds, the clock of the
agent's samples. A process's first seconds (CUDA start-up, calibration) are labelled
``startup`` (normal).

    python benchmarks/gpu/workload_labelled.py LABELS.json          # the whole run
    GPUWATCH_WORKLOAD_VARIANT=b python benchmarks/gpu/workload_labelled.py L.json   # the held-out run
    python benchmarks/gpu/workload_labelled.py --job train MARKS     # one job (used by the run)
    GPUWATCH_WORKLOAD_SCALE=0.05 python benchmarks/gpu/workload_labelled.py L.json   # a 30 s dry run
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SCALE = float(os.environ.get("GPUWATCH_WORKLOAD_SCALE", "1"))  # < 1: a quick dry run of the same sequence
EXPECT = {"stall": "throughput_drop", "contention": "throughput_drop", "leak": "memory_leak",
          "launch": "launch_bound", "drift": "throughput_drop", "hiccup": "throughput_drop",
          "onethread": "throughput_drop", "hang": "throughput_drop", "jitter": "throughput_drop",
          "h2d": "throughput_drop", "launchcopy": "launch_bound"}
# Variant "a" is the first recording (the detectors were then tuned on it). Variant "b" is the
# held-out one, written before any detector saw it: other lengths and order, a GPU-heavier
# step, a milder stall (two steps' wait, not three), fewer CPU burners, a slower leak, a
# slower serving wave, launch-bound with more kernels between syncs, and a normal phase the
# first run lacked (the batch grows by half: more work per step, a level change, no fault).
VARIANTS: dict[str, dict[str, Any]] = {
    "a": {"train": (("train", 60.0), ("eval", 6.0), ("train", 12.0), ("stall", 70.0), ("train", 5.0),
                    ("checkpoint", 6.0), ("train", 9.0), ("contention", 70.0), ("train", 10.0), ("leak", 50.0)),
          "tools": (("serve", 30.0), ("copy", 8.0), ("membound", 8.0), ("launch", 110.0)),
          "gpu_s": 0.08, "cpu_s": 0.08, "stall_steps": 3.0, "burners_per_core": 4, "leak_every_s": 2.0,
          "leak_gib": 1, "serve_period_s": 12.0, "launch_batch": 1000},
    "b": {"train": (("train", 60.0), ("checkpoint", 8.0), ("train", 20.0), ("contention", 55.0), ("train", 20.0),
                    ("bigbatch", 40.0), ("eval", 10.0), ("train", 15.0), ("stall", 55.0), ("train", 20.0),
                    ("leak", 40.0)),
          "tools": (("launch", 70.0), ("membound", 10.0), ("serve", 40.0), ("copy", 10.0)),
          "gpu_s": 0.12, "cpu_s": 0.05, "stall_steps": 2.0, "burners_per_core": 3, "leak_every_s": 3.0,
          "leak_gib": 1, "serve_period_s": 20.0, "launch_batch": 4000},
    # "c": the second held-out run, written after b had been looked at, every incident at least as
    # long as the detectors' stated waits: a normal change to a smaller step (work per step x0.6)
    # before a milder stall (1.5 steps' wait), a slower leak, and launch-bound in the training
    # process itself after the leak; one process, no serving
    "c": {"train": (("train", 45.0), ("smallstep", 35.0), ("train", 15.0), ("stall", 90.0), ("train", 15.0),
                    ("leak", 75.0), ("launch", 105.0)),
          "tools": (),
          "gpu_s": 0.10, "cpu_s": 0.10, "stall_steps": 1.5, "burners_per_core": 3, "leak_every_s": 2.0,
          "leak_gib": 0.5, "serve_period_s": 20.0, "launch_batch": 2000},
    # "d": the third held-out run, written before this session's detector changes: two training
    # jobs (a job stop and a new job start in between), a deep-ish evaluation pass, a mild stall
    # (one step's wait: half the work), fewer CPU burners (2 per core), and in the second job a
    # slow drift (each step waits a little longer for 70 s, then holds at 1.5 steps' wait) and a
    # small leak; no serving
    "d": {"train": (("train", 40.0), ("eval", 20.0), ("train", 15.0), ("checkpoint", 8.0), ("train", 12.0),
                    ("stall", 80.0), ("train", 12.0), ("contention", 60.0)),
          "train2": (("train", 35.0), ("drift", 120.0), ("train", 12.0), ("leak", 60.0)),
          "tools": (),
          "gpu_s": 0.07, "cpu_s": 0.05, "stall_steps": 1.0, "burners_per_core": 2, "leak_every_s": 2.0,
          "leak_gib": 0.5, "serve_period_s": 20.0, "launch_batch": 2000, "drift_steps": 1.5, "drift_ramp_s": 70.0},
    # "e": the fourth held-out run, written before the detector changes of the session that
    # recorded it: a deeper stall (2.5 steps' wait), an input pipeline that stalls in bursts
    # ("hiccup": 3 s of steps, then 4 s waiting for the loader's workers), contention from 3
    # burners per core, launch-bound inside the training job, then a faster leak; one job, no
    # serving, another step shape (more GPU than CPU per step)
    "e": {"train": (("train", 45.0), ("eval", 8.0), ("train", 15.0), ("checkpoint", 6.0), ("train", 12.0),
                    ("stall", 60.0), ("train", 12.0), ("hiccup", 70.0), ("train", 12.0), ("contention", 65.0),
                    ("train", 10.0), ("launch", 80.0), ("train", 8.0), ("leak", 40.0)),
          "tools": (),
          "gpu_s": 0.09, "cpu_s": 0.06, "stall_steps": 2.5, "burners_per_core": 3, "leak_every_s": 2.5,
          "leak_gib": 1, "serve_period_s": 15.0, "launch_batch": 500, "hiccup_run_s": 3.0, "hiccup_wait_s": 4.0},
    # "f": the fifth held-out run, written after e had been scored and looked at, and recorded once
    # the detectors of that session were final: every incident longer than the detectors' stated
    # waits, with 25 s of training between incidents (so each can recover): a smooth stall (1.3
    # steps' wait) for 95 s, 2 burners per core for 75 s, launch-bound in the job for 105 s
    # (3,000 tiny kernels per sync), a leak of 0.75 GiB every 2 s for 55 s; a GPU-heavier step
    "f": {"train": (("train", 35.0), ("eval", 10.0), ("train", 20.0), ("checkpoint", 8.0), ("train", 25.0),
                    ("stall", 95.0), ("train", 25.0), ("contention", 75.0), ("train", 25.0), ("launch", 105.0),
                    ("train", 25.0), ("leak", 55.0)),
          "tools": (),
          "gpu_s": 0.11, "cpu_s": 0.04, "stall_steps": 1.3, "burners_per_core": 2, "leak_every_s": 2.0,
          "leak_gib": 0.75, "serve_period_s": 15.0, "launch_batch": 3000},
    # "g": the sixth held-out run, written before the detector changes of the session that
    # recorded it (2026-12-01, fourth session): every incident longer than the stated waits with
    # 22 s of training between them; a stall of 1.8 steps' wait, a single-thread-bound input
    # pipeline ("onethread": the CPU half of each step on one thread instead of all cores, as a
    # Python loop under the GIL would be), 3 burners per core, launch-bound in the job (1,500
    # tiny kernels per sync), a leak of 0.75 GiB every 1.5 s
    "g": {"train": (("train", 30.0), ("eval", 10.0), ("train", 22.0), ("stall", 70.0), ("train", 22.0),
                    ("onethread", 70.0), ("train", 22.0), ("contention", 70.0), ("train", 22.0), ("launch", 90.0),
                    ("train", 20.0), ("leak", 40.0)),
          "tools": (),
          "gpu_s": 0.10, "cpu_s": 0.05, "stall_steps": 1.8, "burners_per_core": 3, "leak_every_s": 1.5,
          "leak_gib": 0.75, "serve_period_s": 15.0, "launch_batch": 1500},
    # "h": the seventh run, for issue 14 (recorded by the agent that reads the host): the three
    # falls the host tells apart (a stall, a single-thread input pipeline, CPU contention), each 75 s
    # with 25 s of training between, after an evaluation and a checkpoint; then a leak
    "h": {"train": (("train", 30.0), ("eval", 10.0), ("train", 25.0), ("checkpoint", 6.0), ("train", 25.0),
                    ("stall", 75.0), ("train", 25.0), ("onethread", 75.0), ("train", 25.0), ("contention", 75.0),
                    ("train", 25.0), ("leak", 40.0)),
          "tools": (),
          "gpu_s": 0.09, "cpu_s": 0.06, "stall_steps": 2.0, "burners_per_core": 2, "leak_every_s": 2.0,
          "leak_gib": 0.75, "serve_period_s": 15.0, "launch_batch": 1500},
    # "i": the eighth run, written and recorded first in the fifth session (2026-12-02), before
    # any change of that session, to be scored held out: the weak spots named at the end of the
    # fourth: a stall 20 s into the job (before its plateau has held), a slow drift (each step
    # waits longer for 60 s, then holds at 1.6 steps' wait), contention from 2 burners per core
    # after an evaluation, launch-bound for 100 s (800 tiny kernels per sync), a slow leak
    "i": {"train": (("train", 20.0), ("stall", 70.0), ("train", 22.0), ("eval", 8.0), ("train", 22.0),
                    ("drift", 100.0), ("train", 20.0), ("contention", 65.0), ("train", 20.0), ("launch", 100.0),
                    ("train", 12.0), ("leak", 40.0)),
          "tools": (),
          "gpu_s": 0.08, "cpu_s": 0.07, "stall_steps": 1.6, "burners_per_core": 2, "leak_every_s": 2.0,
          "leak_gib": 0.6, "serve_period_s": 15.0, "launch_batch": 800, "drift_steps": 1.6, "drift_ramp_s": 60.0},
    # "j": the ninth run, written after the fifth session's detector changes and recorded with them,
    # scored at once: a checkpoint early, a bursty loader ("hiccup": 2 s of steps, 3 s waiting), the
    # input work on one thread, an evaluation, then 3 burners per core and a leak; then a new process
    # serving a demand wave (normal) and launch-bound for 75 s (2,500 tiny kernels per sync)
    "j": {"train": (("train", 20.0), ("checkpoint", 8.0), ("train", 20.0), ("hiccup", 65.0), ("train", 20.0),
                    ("onethread", 65.0), ("train", 20.0), ("eval", 10.0), ("train", 20.0), ("contention", 65.0),
                    ("train", 20.0), ("leak", 40.0)),
          "tools": (("serve", 35.0), ("launch", 75.0)),
          "gpu_s": 0.07, "cpu_s": 0.06, "stall_steps": 1.5, "burners_per_core": 3, "leak_every_s": 2.0,
          "leak_gib": 0.8, "serve_period_s": 12.0, "launch_batch": 2500, "hiccup_run_s": 2.0, "hiccup_wait_s": 3.0},
    # "k": the tenth run, written in the sixth session (2026-12-02) after its detector changes and
    # scored once when recorded: a checkpoint early, a stall of 1.7 steps' wait 22 s after it, an
    # evaluation, the input work on one thread, a slow drift (each step waits longer for 50 s, then
    # holds at 1.8 steps' wait), a leak of 0.7 GiB every 2 s; then a new process serving a demand
    # wave of 14 s (normal) and launch-bound for 65 s (1,200 tiny kernels per sync); a GPU-heavier step
    "k": {"train": (("train", 25.0), ("checkpoint", 6.0), ("train", 22.0), ("stall", 75.0), ("train", 22.0),
                    ("eval", 8.0), ("train", 22.0), ("onethread", 70.0), ("train", 22.0), ("drift", 90.0),
                    ("train", 15.0), ("leak", 35.0)),
          "tools": (("serve", 30.0), ("launch", 65.0)),
          "gpu_s": 0.10, "cpu_s": 0.05, "stall_steps": 1.7, "burners_per_core": 2, "leak_every_s": 2.0,
          "leak_gib": 0.7, "serve_period_s": 14.0, "launch_batch": 1200, "drift_steps": 1.8, "drift_ramp_s": 50.0},
    # "l": the eleventh run, written in the ninth session (2026-12-02) after its detector changes and
    # scored once when recorded: a longer evaluation (12 s) early, a milder stall (1.4 steps' wait),
    # a checkpoint, a bursty loader 22 s after it (3 s of steps, 4 s waiting: trace e's, which was
    # missed when 12 s of training separated it from a stall), 2 burners per core, a slow leak (0.6 GiB
    # every 2 s); then a new process serving a slower demand wave (18 s) and launch-bound work (600
    # tiny kernels per sync); a CPU-heavier step than k's
    "l": {"train": (("train", 25.0), ("eval", 12.0), ("train", 22.0), ("stall", 70.0), ("train", 22.0),
                    ("checkpoint", 6.0), ("train", 22.0), ("hiccup", 70.0), ("train", 22.0), ("contention", 65.0),
                    ("train", 22.0), ("leak", 40.0)),
          "tools": (("serve", 30.0), ("launch", 65.0)),
          "gpu_s": 0.08, "cpu_s": 0.07, "stall_steps": 1.4, "burners_per_core": 2, "leak_every_s": 2.0,
          "leak_gib": 0.6, "serve_period_s": 18.0, "launch_batch": 600, "hiccup_run_s": 3.0, "hiccup_wait_s": 4.0},
    # "m": the twelfth run, written in the tenth session (2026-12-03) after its changes (work after
    # a fall's recovery is learned; a GPU with kernels resident is sampled as busy) and scored once
    # when recorded; cut in the eleventh to what the session's last device minutes could hold (about
    # 4.5 minutes): a checkpoint early, a bursty loader 18 s after it (2.5 s of steps, 3.5 s
    # waiting), a leak of 0.8 GiB every 3 s; then a new process serving a fast demand wave (10 s)
    # and launch-bound work with the fewest kernels per sync yet (400)
    "m": {"train": (("train", 20.0), ("checkpoint", 8.0), ("train", 18.0), ("hiccup", 70.0), ("train", 22.0),
                    ("leak", 36.0)),
          "tools": (("serve", 25.0), ("launch", 70.0)),
          "gpu_s": 0.09, "cpu_s": 0.06, "stall_steps": 1.5, "burners_per_core": 2, "leak_every_s": 3.0,
          "leak_gib": 0.8, "serve_period_s": 10.0, "launch_batch": 400, "hiccup_run_s": 2.5, "hiccup_wait_s": 3.5},
    # "n": the thirteenth run, written in the twelfth session (2026-12-03) after its changes (a young
    # job that works in bursts between waits is judged as waiting for work) and scored once when
    # recorded: a longer first training (35 s) and an evaluation, a bursty loader at an established
    # level (3 s of steps, 3 s waiting: half the level's work, the mildest yet), the batch growing
    # by half after it (normal: a level rise after a reported fall), 3 burners per core, a slow
    # leak (0.5 GiB every 2 s); then a new process serving a 16-s demand wave, a memory-bound pass
    # (normal) and launch-bound work (800 tiny kernels per sync); a GPU-heavier step
    "n": {"train": (("train", 35.0), ("eval", 8.0), ("train", 22.0), ("hiccup", 60.0), ("train", 22.0),
                    ("bigbatch", 25.0), ("train", 20.0), ("contention", 60.0), ("train", 22.0), ("leak", 36.0)),
          "tools": (("serve", 25.0), ("membound", 8.0), ("launch", 60.0)),
          "gpu_s": 0.11, "cpu_s": 0.05, "stall_steps": 1.5, "burners_per_core": 3, "leak_every_s": 2.0,
          "leak_gib": 0.5, "serve_period_s": 16.0, "launch_batch": 800, "hiccup_run_s": 3.0, "hiccup_wait_s": 3.0},
    # "o": the fourteenth run, written in the twelfth session (2026-12-03) before n was looked at and
    # scored once when recorded: a checkpoint early, the input work on one thread 25 s after it, a
    # slow drift (each step waits longer for 45 s, then holds at 1.6 steps' wait), a leak of 0.6 GiB
    # every 2 s; then a new process serving a slow demand wave (20 s), a host-to-device copy (normal)
    # and launch-bound work for 75 s with the most kernels per sync yet (2,000); a CPU-heavier step
    "o": {"train": (("train", 30.0), ("checkpoint", 8.0), ("train", 25.0), ("onethread", 65.0), ("train", 22.0),
                    ("drift", 90.0), ("train", 20.0), ("leak", 36.0)),
          "tools": (("serve", 30.0), ("copy", 8.0), ("launch", 75.0)),
          "gpu_s": 0.07, "cpu_s": 0.07, "stall_steps": 1.5, "burners_per_core": 2, "leak_every_s": 2.0,
          "leak_gib": 0.6, "serve_period_s": 20.0, "launch_batch": 2000, "drift_steps": 1.6, "drift_ramp_s": 45.0},
    # "p": the fifteenth run, written in the twelfth session after o was recorded, before it was looked
    # at, and scored once when recorded: the mildest stall yet (1.2 steps' wait) after an evaluation,
    # a leak of 0.5 GiB every 2 s; the job stops, and a second job starts: CPU contention 25 s into it
    # (before its level has held long), then the input work on one thread; a GPU-heavier step
    "p": {"train": (("train", 30.0), ("eval", 8.0), ("train", 22.0), ("stall", 65.0), ("train", 20.0),
                    ("leak", 30.0)),
          "train2": (("train", 25.0), ("contention", 65.0), ("train", 20.0), ("onethread", 60.0)),
          "tools": (),
          "gpu_s": 0.10, "cpu_s": 0.06, "stall_steps": 1.2, "burners_per_core": 2, "leak_every_s": 2.0,
          "leak_gib": 0.5},
    # "q": the sixteenth run, written in the thirteenth session (2026-12-03) before any detector saw
    # it, and scored once when recorded: a new kind of incident, a hang ("hang": the process stays
    # alive, its GPU work one kernel that spins on a single thread block, as a NCCL collective
    # waiting for a dead peer or a deadlock does: utilisation near 100%, SM activity near 0) for
    # 70 s after an evaluation, then training again; a checkpoint, a stall of 2.2 steps' wait, a
    # slow leak (0.4 GiB every 2 s); then a new process serving a 13-s demand wave and
    # launch-bound work (1,800 tiny kernels per sync)
    "q": {"train": (("train", 35.0), ("eval", 10.0), ("train", 22.0), ("hang", 70.0), ("train", 25.0),
                    ("checkpoint", 7.0), ("train", 22.0), ("stall", 65.0), ("train", 22.0), ("leak", 40.0)),
          "tools": (("serve", 30.0), ("launch", 65.0)),
          "gpu_s": 0.09, "cpu_s": 0.05, "stall_steps": 2.2, "burners_per_core": 2, "leak_every_s": 2.0,
          "leak_gib": 0.4, "serve_period_s": 13.0, "launch_batch": 1800, "hang_kernel_s": 0.04},
    # "r": the seventeenth run, written in the thirteenth session (2026-12-03) after the hang rule of
    # 4b51ece (utilisation pinned at 100% with the SMs barely working, DRAM and PCIe quiet: a stuck
    # kernel, not launch-bound work), before any detector saw it, and scored once when recorded: a
    # hang of another shape ("hang" with hang_streams 6: six kernels spinning at once, each on one
    # thread block on its own CUDA stream, as six ranks' collectives waiting for a dead peer would:
    # about 6 SMs of 132 busy) for 70 s after 3 burners per core; a checkpoint early, an evaluation
    # after the hang, a stall of 1.9 steps' wait, a leak of 0.5 GiB every 2 s; then a new process
    # serving an 11-s demand wave, the hang rule's hard negatives (a memory-bound pass: DRAM busy; a
    # host-to-device copy: PCIe busy; both normal) and launch-bound work (2,500 tiny kernels per sync)
    "r": {"train": (("train", 20.0), ("checkpoint", 6.0), ("train", 20.0), ("contention", 62.0), ("train", 22.0),
                    ("hang", 70.0), ("train", 20.0), ("eval", 8.0), ("train", 20.0), ("stall", 62.0),
                    ("train", 20.0), ("leak", 36.0)),
          "tools": (("serve", 22.0), ("membound", 8.0), ("copy", 8.0), ("launch", 65.0)),
          "gpu_s": 0.08, "cpu_s": 0.06, "stall_steps": 1.9, "burners_per_core": 3, "leak_every_s": 2.0,
          "leak_gib": 0.5, "serve_period_s": 11.0, "launch_batch": 2500, "hang_kernel_s": 0.04, "hang_streams": 6},
    # "s": the eighteenth run, written in the fourteenth session (2026-12-04) before any detector saw it
    # and scored once when recorded: an evaluation as long as 25 s (a hard negative: twice the longest
    # before), a slow drift (each step waits longer for 50 s, then holds at 1.4 steps' wait), the mildest
    # contention yet (1 burner per core), a loader that falls behind in longer bursts (5 s of steps, 4 s
    # waiting), a leak of 0.4 GiB every 2 s; then a new process serving a 9-s demand wave and launch-bound
    # work for 68 s with 1,200 tiny kernels per sync; a step with more CPU than GPU
    "s": {"train": (("train", 30.0), ("eval", 25.0), ("train", 22.0), ("drift", 80.0), ("train", 20.0),
                    ("contention", 62.0), ("train", 20.0), ("hiccup", 62.0), ("train", 20.0), ("leak", 32.0)),
          "tools": (("serve", 20.0), ("launch", 68.0)),
          "gpu_s": 0.06, "cpu_s": 0.08, "stall_steps": 1.5, "burners_per_core": 1, "leak_every_s": 2.0,
          "leak_gib": 0.4, "serve_period_s": 9.0, "launch_batch": 1200, "drift_steps": 1.4, "drift_ramp_s": 50.0,
          "hiccup_run_s": 5.0, "hiccup_wait_s": 4.0},
    # "t": the nineteenth run, written in the fifteenth session (2026-12-04) before any detector saw it
    # and scored once when recorded, the issue's incidents at its own figures: a loader whose waits are
    # random ("jitter": each step waits an exponential time of mean 1.5 steps, as a loader contending
    # for a shared filesystem does) after a longer checkpoint (10 s); an evaluation of 25 s; contention
    # from 14 CPU burners (the issue's count, not per core); an input stall at a quarter duty cycle (3
    # steps' wait); a leak of 0.5 GiB every 2 s; then a new process serving a 15-s demand wave, a copy
    # and launch-bound work with 3,000 tiny kernels per sync; a GPU-heavier step
    "t": {"train": (("train", 30.0), ("checkpoint", 10.0), ("train", 20.0), ("jitter", 65.0), ("train", 22.0),
                    ("eval", 25.0), ("train", 20.0), ("contention", 62.0), ("train", 20.0), ("stall", 62.0),
                    ("train", 20.0), ("leak", 32.0)),
          "tools": (("serve", 24.0), ("copy", 6.0), ("launch", 66.0)),
          "gpu_s": 0.10, "cpu_s": 0.05, "stall_steps": 3.0, "burners": 14, "leak_every_s": 2.0,
          "leak_gib": 0.5, "serve_period_s": 15.0, "launch_batch": 3000, "jitter_steps": 1.5},
    # "u": the twentieth run, written in the fifteenth session (2026-12-04) before any detector saw it
    # and scored once when recorded: a new kind of input bottleneck, "h2d" (each step first copies its
    # 3 GiB batch from pageable host memory: a loader that hands over unpinned tensors, so the copy
    # runs at pageable speed and the GPU waits on PCIe), then an evaluation, a stall of 2.5 steps'
    # wait, a leak of 0.6 GiB every 2 s; then a new process serving a 12-s demand wave, a
    # host-to-device copy (normal, 10 s) and launch-bound work (800 tiny kernels per sync)
    "u": {"train": (("train", 30.0), ("checkpoint", 8.0), ("train", 20.0), ("h2d", 65.0), ("train", 22.0),
                    ("eval", 12.0), ("train", 20.0), ("stall", 62.0), ("train", 20.0), ("leak", 32.0)),
          "tools": (("serve", 24.0), ("copy", 10.0), ("launch", 66.0)),
          "gpu_s": 0.08, "cpu_s": 0.05, "stall_steps": 2.5, "burners_per_core": 2, "leak_every_s": 2.0,
          "leak_gib": 0.6, "serve_period_s": 12.0, "launch_batch": 800, "h2d_gib": 3},
    # "v": the twenty-first run, written in the sixteenth session (2026-12-05) before any detector saw it
    # and to be scored once when recorded, with the agent sampling every 2 s (GPUWATCH_BUSY_INTERVAL=2,
    # as its CPU budget may stretch it: each reading a mean over 2 s, not a 1-s reading kept one in two):
    # an evaluation of 15 s, a stall of 2.8 steps' wait, a 9-s checkpoint, contention from 2 burners per
    # core, a loader falling behind in bursts (4 s of steps, 3 s of waits), a slower leak (0.3 GiB every
    # 2 s, for 70 s: out of memory in about 10 minutes, so judged on a minute of growth, not 30 s);
    # then a new process serving a 14-s demand wave, a memory-bound pass and launch-bound work with
    # 1,500 tiny kernels per sync
    "v": {"train": (("train", 30.0), ("eval", 15.0), ("train", 20.0), ("stall", 62.0), ("train", 22.0),
                    ("checkpoint", 9.0), ("train", 20.0), ("contention", 62.0), ("train", 20.0), ("hiccup", 62.0),
                    ("train", 20.0), ("leak", 70.0)),
          "tools": (("serve", 20.0), ("membound", 8.0), ("launch", 66.0)),
          "gpu_s": 0.07, "cpu_s": 0.06, "stall_steps": 2.8, "burners_per_core": 2, "leak_every_s": 2.0,
          "leak_gib": 0.3, "serve_period_s": 14.0, "launch_batch": 1500, "hiccup_run_s": 4.0, "hiccup_wait_s": 3.0},
    # "w": the twenty-second run, written in the sixteenth session (2026-12-05) before any detector saw it
    # and to be scored once when recorded, with the agent sampling every 5 s (GPUWATCH_BUSY_INTERVAL=5:
    # each reading a mean over 5 s, as an operator who sets a longer interval gets): the incidents last
    # 70-75 s, as a 60-s hold needs with 5-s samples: an evaluation of 15 s, contention from 10 CPU
    # burners, a 10-s checkpoint, a stall of 3 steps' wait, a leak of 0.25 GiB every 2 s for 70 s;
    # then a new process serving a 15-s demand wave and launch-bound work for 75 s with 2,000 tiny
    # kernels per sync (about 465 s in all, to fit what was left of the session's device time)
    "w": {"train": (("train", 25.0), ("eval", 15.0), ("train", 20.0), ("contention", 75.0), ("train", 20.0),
                    ("checkpoint", 10.0), ("train", 20.0), ("stall", 75.0), ("train", 20.0), ("leak", 70.0)),
          "tools": (("serve", 15.0), ("launch", 75.0)),
          "gpu_s": 0.09, "cpu_s": 0.05, "stall_steps": 3.0, "burners": 10, "leak_every_s": 2.0,
          "leak_gib": 0.25, "serve_period_s": 15.0, "launch_batch": 2000},
    # "x": the twenty-third run, written in the seventeenth session (2026-12-05) before any detector saw it
    # and to be scored once when recorded, at the agent's own intervals: an evaluation of 20 s, a pageable
    # input copy of 2 GiB a step (the h2d that u's detectors missed, smaller), a 8-s checkpoint, a loader
    # falling behind in short bursts (3 s of steps, 3 s of waits), contention from 12 CPU burners, a leak
    # of 0.4 GiB every 2 s for 40 s; then a new process serving a 10-s demand wave, a memory-bound pass
    # and launch-bound work with 1,000 tiny kernels per sync
    "x": {"train": (("train", 25.0), ("eval", 20.0), ("train", 20.0), ("h2d", 65.0), ("train", 20.0),
                    ("checkpoint", 8.0), ("train", 20.0), ("hiccup", 62.0), ("train", 20.0), ("contention", 62.0),
                    ("train", 20.0), ("leak", 40.0)),
          "tools": (("serve", 20.0), ("membound", 8.0), ("launch", 66.0)),
          "gpu_s": 0.08, "cpu_s": 0.05, "stall_steps": 2.0, "burners": 12, "leak_every_s": 2.0,
          "leak_gib": 0.4, "serve_period_s": 10.0, "launch_batch": 1000, "h2d_gib": 2,
          "hiccup_run_s": 3.0, "hiccup_wait_s": 3.0},
    # "y": the twenty-fourth run, written in the seventeenth session (2026-12-05) before any detector saw it
    # and to be scored once when recorded, with the agent sampling every 5 s (GPUWATCH_BUSY_INTERVAL=5), in
    # the about 8 minutes of device time this session had (w and x need more): a stall of 2.5 steps' wait,
    # contention from 12 CPU burners, a leak of 0.5 GiB every 2 s for 50 s, each lasting what a 60-s hold
    # needs with 5-s samples; then a new process with launch-bound work (1,500 tiny kernels per sync)
    "y": {"train": (("train", 20.0), ("stall", 72.0), ("train", 20.0), ("contention", 72.0), ("train", 20.0),
                    ("leak", 50.0)),
          "tools": (("launch", 72.0),),
          "gpu_s": 0.08, "cpu_s": 0.05, "stall_steps": 2.5, "burners": 12, "leak_every_s": 2.0,
          "leak_gib": 0.5, "launch_batch": 1500},
    # "z": the twenty-fifth run, written in the seventeenth session (2026-12-05) before any detector saw it
    # and to be scored once when recorded, with the agent sampling every 5 s (GPUWATCH_BUSY_INTERVAL=5), in
    # the about 5 minutes of device time left (y needs more): a stall of 2.5 steps' wait and a leak of
    # 0.5 GiB every 2 s, one training process, no other
    "z": {"train": (("train", 25.0), ("stall", 72.0), ("train", 15.0), ("leak", 45.0)),
          "tools": (),
          "gpu_s": 0.08, "cpu_s": 0.05, "stall_steps": 2.5, "burners": 0, "leak_every_s": 2.0, "leak_gib": 0.5},
    # "aa": the twenty-sixth run, written in the twentieth session (2026-12-06) before any detector saw it
    # and to be scored once when recorded, at the agent's own intervals: a 10-s checkpoint, contention from
    # 14 CPU burners straight after the job's level has held 22 s, an 18-s evaluation, a stall of 2.2
    # steps' wait, a leak of 0.45 GiB every 2 s for 40 s; then a new process serving a 12-s demand wave
    # (25 s) and launch-bound work with 1,800 tiny kernels per sync
    "aa": {"train": (("train", 30.0), ("checkpoint", 10.0), ("train", 22.0), ("contention", 65.0), ("train", 20.0),
                     ("eval", 18.0), ("train", 20.0), ("stall", 65.0), ("train", 22.0), ("leak", 40.0)),
           "tools": (("serve", 25.0), ("launch", 65.0)),
           "gpu_s": 0.075, "cpu_s": 0.055, "stall_steps": 2.2, "burners": 14, "leak_every_s": 2.0,
           "leak_gib": 0.45, "serve_period_s": 12.0, "launch_batch": 1800},
    # "ab": the twenty-seventh run, written in the twentieth session (2026-12-06) before any detector saw
    # it and to be scored once when recorded, with the agent sampling every 2 s (GPUWATCH_BUSY_INTERVAL=2):
    # a 12-s evaluation, a loader falling behind in bursts (4 s of steps, 4 s of waits), a slow drift
    # (each step waits longer for 40 s, then holds at 2 steps' wait), a leak of 0.3 GiB every 1.5 s for
    # 40 s; one training process, no other
    "ab": {"train": (("train", 25.0), ("eval", 12.0), ("train", 20.0), ("hiccup", 65.0), ("train", 20.0),
                     ("drift", 75.0), ("train", 20.0), ("leak", 40.0)),
           "tools": (),
           "gpu_s": 0.07, "cpu_s": 0.06, "stall_steps": 2.0, "burners": 0, "leak_every_s": 1.5,
           "leak_gib": 0.3, "drift_steps": 2.0, "drift_ramp_s": 40.0, "hiccup_run_s": 4.0, "hiccup_wait_s": 4.0},
    # "ac": the twenty-eighth run, written in the twenty-second session (2026-12-06) before any detector
    # saw it, with no detector change in that session, and to be scored once when recorded at the
    # agent's own intervals: a 14-s evaluation, a loader with random waits (exponential, mean 1.8
    # steps) for 65 s, an 8-s checkpoint, a hang of one spinning kernel for 65 s, the input work on one
    # thread for 65 s, a leak of 0.4 GiB every 2 s for 36 s; then a new process doing launch-bound work
    # for 72 s with 2,200 tiny kernels per sync
    "ac": {"train": (("train", 25.0), ("eval", 14.0), ("train", 22.0), ("jitter", 65.0), ("train", 20.0),
                     ("checkpoint", 8.0), ("train", 20.0), ("hang", 65.0), ("train", 22.0), ("onethread", 65.0),
                     ("train", 20.0), ("leak", 36.0)),
           "tools": (("launch", 72.0),),
           "gpu_s": 0.085, "cpu_s": 0.055, "stall_steps": 2.0, "burners": 0, "leak_every_s": 2.0,
           "leak_gib": 0.4, "launch_batch": 2200, "jitter_steps": 1.8, "hang_kernel_s": 0.04},
    # "ad": the twenty-ninth run, written in the twenty-fifth session (2026-12-06) for the hard negatives an
    # independently written fleet showed (docs/benchmarks.md, round 21), recorded after the detectors were
    # changed for them: a process that loads and compiles for 140 s (the GPU idle between short bursts)
    # and whose first steps then allocate 0.5 GiB a second for 28 s as the work begins (normal, no leak),
    # an evaluation, and a leak of 0.4 GiB every 2 s under running work; then a new process doing
    # launch-bound work that copies 8 MiB of pageable input per 1,500 tiny kernels (a few hundred MB/s
    # over PCIe: still launch-bound, not copy-bound)
    "ad": {"train": (("loading", 140.0), ("firststeps", 28.0), ("train", 40.0), ("eval", 15.0), ("train", 22.0),
                     ("leak", 40.0)),
           "tools": (("launchcopy", 72.0),),
           "gpu_s": 0.08, "cpu_s": 0.05, "stall_steps": 2.0, "burners": 0, "leak_every_s": 2.0,
           "leak_gib": 0.4, "first_every_s": 1.0, "first_gib": 0.5, "launch_batch": 1500, "launch_copy_mib": 8},
    # "ae": the thirtieth run, written in the twenty-eighth session (2026-12-07) before any detector saw
    # it and scored once when recorded, at the agent's own intervals, with that session's detectors as it
    # began: a job whose steps vary in work (each step's GPU work drawn between 0.6 and 1.4 of its mean:
    # sequences of varying length), a 14-s evaluation, a slow drift on that noisy job (each step waits
    # longer for 80 s, then holds at 1.6 steps' wait), 10 CPU burners, a leak of 0.35 GiB every 2 s; then
    # a new process serving at a demand that steps down and stays down (80% busy for 25 s, then 30% for
    # 45 s: a demand change, normal for a lone server) and launch-bound work with 1,000 tiny kernels per sync
    "ae": {"train": (("train", 30.0), ("eval", 14.0), ("train", 25.0), ("drift", 100.0), ("train", 25.0),
                     ("contention", 60.0), ("train", 20.0), ("leak", 40.0)),
           "tools": (("servestep", 70.0), ("launch", 60.0)),
           "gpu_s": 0.08, "cpu_s": 0.05, "stall_steps": 2.0, "burners": 10, "leak_every_s": 2.0,
           "leak_gib": 0.35, "drift_steps": 1.6, "drift_ramp_s": 80.0, "step_noise": 0.4,
           "serve_high": 0.8, "serve_low": 0.3, "serve_step_s": 25.0, "launch_batch": 1000},
    # "af": the thirty-first run, written in the thirtieth session (2026-12-07) after that session's
    # detector changes and scored once when recorded, at the agent's own intervals: the pattern an
    # independently written fleet's fine-tunes showed, an evaluation and then, seconds after the job came
    # back, a 2-s blip of its loader (normal; "blip": no GPU work for 2 s), a checkpoint, a stall of 2.4
    # steps' wait for 66 s followed by another blip, 12 CPU burners, a loader falling behind in bursts
    # (3 s of steps, 3 s of waits), a leak of 0.4 GiB every 2 s; then a new process doing launch-bound
    # work with 1,400 tiny kernels per sync
    "af": {"train": (("train", 30.0), ("eval", 14.0), ("train", 6.0), ("blip", 2.0), ("train", 20.0),
                     ("checkpoint", 9.0), ("train", 20.0), ("stall", 66.0), ("train", 6.0), ("blip", 2.0),
                     ("train", 22.0), ("contention", 62.0), ("train", 20.0), ("hiccup", 62.0), ("train", 20.0),
                     ("leak", 36.0)),
           "tools": (("launch", 68.0),),
           "gpu_s": 0.08, "cpu_s": 0.05, "stall_steps": 2.4, "burners": 12, "leak_every_s": 2.0,
           "leak_gib": 0.4, "hiccup_run_s": 3.0, "hiccup_wait_s": 3.0, "launch_batch": 1400},
    # "ag": the thirty-second run, written in the thirty-second session (2026-12-07) after that session's
    # power-throttle change and scored once when recorded, at the agent's own intervals: a job that first
    # runs small bf16 matmuls flat out (2048^2: at the power cap at about 1,815 MHz on an H200, long enough
    # for the clock held there to be learned) and then large ones (8192^2: the same cap at about 1,455 MHz,
    # benchmarks/gpu/power_mix.py) -- a change of kernel mix at the cap, normal -- then training with a
    # stall of 2.2 steps' wait, 12 CPU burners, a leak of 0.4 GiB every 2 s; then a new process doing
    # launch-bound work with 1,600 tiny kernels per sync
    "ag": {"train": (("capsmall", 170.0), ("capbig", 50.0), ("train", 22.0), ("stall", 60.0), ("train", 20.0),
                     ("contention", 55.0), ("train", 20.0), ("leak", 36.0)),
           "tools": (("launch", 60.0),),
           "gpu_s": 0.08, "cpu_s": 0.05, "stall_steps": 2.2, "burners": 12, "leak_every_s": 2.0,
           "leak_gib": 0.4, "launch_batch": 1600},
    # "ah": the thirty-third run, written in the same session straight after "ag" was scored, for the two
    # flaws of that run's design (not of a detector): "ag" put the flat-out phases in the training process,
    # so its working level was the 0.96 of a bf16 loop with no host half, and the drop its stall opened
    # stayed open through the contention (the job never came back to 0.96); and its launch-bound phase
    # lasted 61 s against the finding's 60-s hold. Here the flat-out phases run in their own process after
    # the launch-bound work (78 s), and the training job has an evaluation, 12 CPU burners, a stall of 2.2
    # steps' wait and a leak of 0.4 GiB every 2 s
    "ah": {"train": (("train", 28.0), ("eval", 12.0), ("train", 20.0), ("contention", 58.0), ("train", 18.0),
                     ("stall", 58.0), ("train", 18.0), ("leak", 32.0)),
           "tools": (("launch", 78.0), ("capsmall", 158.0), ("capbig", 35.0)),
           "gpu_s": 0.08, "cpu_s": 0.05, "stall_steps": 2.2, "burners": 12, "leak_every_s": 2.0,
           "leak_gib": 0.4, "launch_batch": 1600},
}
V = VARIANTS[os.environ.get("GPUWATCH_WORKLOAD_VARIANT", "a")]
TRAIN: tuple[tuple[str, float], ...] = V["train"]  # (phase, seconds) per job, in order
TRAIN2: tuple[tuple[str, float], ...] = V.get("train2", ())  # a second training job, if any
TOOLS: tuple[tuple[str, float], ...] = V["tools"]
GIB = 1024**3


def mark(marks: Path, phase: str) -> None:
    with open(marks, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"phase": phase, "start": time.time(), "pid": os.getpid()}) + "\n")


# ---- the jobs (each runs in its own process) ----
def _train(marks: Path, phases: tuple[tuple[str, float], ...] = TRAIN) -> None:
    import torch

    dev = torch.device("cuda")
    torch.set_num_threads(os.cpu_count() or 1)
    torch.ones(1, device=dev).sum().item()
    w = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, requires_grad=True)
    ballast = torch.empty(40 * GIB, dtype=torch.uint8, device=dev)  # activations, optimizer state
    host = torch.randn(1024, 1024)

    def prepare() -> torch.Tensor:  # the input pipeline: decode and augment on the CPU
        x = host
        for _ in range(prep_rounds):
            x = torch.tanh(x @ host)
        return x[:64].to(dev, dtype=torch.bfloat16)

    def gpu_work(batch: torch.Tensor, matmuls: int, grad: bool = True) -> None:
        x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16) + batch.mean()
        for _ in range(matmuls):
            y = x @ w
            if grad:
                y.float().square().mean().backward()
        torch.cuda.synchronize()

    # calibration (part of start-up): the CPU half and the GPU half of a step about equal
    prep_rounds = 1
    t0 = time.perf_counter()
    for _ in range(5):
        prepare()
    cpu_s = (time.perf_counter() - t0) / 5
    t0 = time.perf_counter()
    for _ in range(3):
        gpu_work(torch.zeros(1, device=dev), 4)
    gpu_s = (time.perf_counter() - t0) / 3 / 4
    matmuls = max(1, round(V["gpu_s"] / gpu_s))  # seconds of GPU work per step
    prep_rounds = max(1, round(V["cpu_s"] / max(cpu_s, 1e-4)))  # and of CPU work
    t0 = time.perf_counter()
    gpu_work(prepare(), matmuls)
    step_s = time.perf_counter() - t0
    kept: list[torch.Tensor] = []
    rng = random.Random(7)
    staged = torch.empty(int(V.get("h2d_gib", 0) * GIB), dtype=torch.uint8)  # pageable (not pinned)
    tiny = torch.zeros(1, device=dev)
    small = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
    burners: list[subprocess.Popen[bytes]] = []
    # a hang of several kernels at once (variant r): one stream each; none made for one (q's path)
    streams = [torch.cuda.Stream() for _ in range(V.get("hang_streams", 1))] if V.get("hang_streams", 1) > 1 else []
    def noisy(m: int) -> int:  # a step's work varies (variant ae: sequences of varying length)
        spread = V.get("step_noise", 0.0)
        return max(1, round(m * rng.uniform(1 - spread, 1 + spread))) if spread else m

    for phase, seconds in phases:
        mark(marks, phase)
        began = time.time()
        end = began + seconds * SCALE
        if phase == "contention":
            spin = f"import time\nend = {end}\nwhile time.time() < end:\n    pass\n"
            count = V.get("burners") or V["burners_per_core"] * (os.cpu_count() or 1)
            burners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]
        torch.set_num_threads(1 if phase == "onethread" else os.cpu_count() or 1)
        grow_at = time.time()
        while time.time() < end:
            if phase == "eval":
                gpu_work(prepare()[:8], max(1, matmuls // 4), grad=False)
                time.sleep(0.05)
            elif phase == "checkpoint":  # weights and state to host memory
                w.detach().cpu()
                ballast[: 4 * GIB].cpu()
            elif phase == "stall":  # waiting on input: one step, then some steps' time for the next batch
                gpu_work(prepare(), matmuls)
                time.sleep(V["stall_steps"] * step_s)
            elif phase == "drift":  # each step waits a little longer (a growing input backlog), then holds
                gpu_work(prepare(), noisy(matmuls))
                grown = min(1.0, (time.time() - began) / (V["drift_ramp_s"] * SCALE))
                time.sleep(V["drift_steps"] * grown * step_s)
            elif phase == "h2d":  # the batch arrives as an unpinned host tensor: a pageable copy per step
                staged.to(dev)
                gpu_work(prepare(), matmuls)
            elif phase == "jitter":  # each step waits a random time for its batch (mean jitter_steps steps)
                gpu_work(prepare(), matmuls)
                time.sleep(rng.expovariate(1.0 / (V["jitter_steps"] * step_s)))
            elif phase == "hiccup":  # the loader's workers fall behind: bursts of steps, then a wait
                if (time.time() - began) % (V["hiccup_run_s"] + V["hiccup_wait_s"]) < V["hiccup_run_s"]:
                    gpu_work(prepare(), matmuls)
                else:
                    time.sleep(0.05)
            elif phase == "blip":  # the loader's brief wait: no step for a moment (normal)
                time.sleep(0.05)
            elif phase in ("capsmall", "capbig"):  # flat out, no host half: at the power cap
                m = small if phase == "capsmall" else w.detach()
                for _ in range(16):
                    m @ m
                torch.cuda.synchronize()
            elif phase == "bigbatch":  # the batch grows by half: more work per step (normal)
                gpu_work(prepare(), matmuls + max(1, matmuls // 2))
            elif phase == "smallstep":  # less work per step (shorter sequences): a lower level (normal)
                gpu_work(prepare(), max(1, round(0.6 * matmuls)))
            elif phase == "hang" and streams:  # several kernels spinning at once, each on one thread block
                # on its own stream (several ranks' collectives waiting for a dead peer): five back to back each
                for stream in streams:
                    with torch.cuda.stream(stream):
                        for _ in range(5):
                            torch.cuda._sleep(int(V["hang_kernel_s"] * 1.98e9))
                torch.cuda.synchronize()
            elif phase == "hang":  # one kernel spinning on a single thread block (a collective waiting for
                # a dead peer): a few back to back, each hang_kernel_s at the H200's ~1.98 GHz SM clock
                for _ in range(5):
                    torch.cuda._sleep(int(V["hang_kernel_s"] * 1.98e9))
                torch.cuda.synchronize()
            elif phase == "loading":  # loading and compiling: CPU work, the GPU idle but for a short burst
                # every 10 s (autotuning a kernel)
                if int(time.time() - began) % 10 == 0:
                    gpu_work(prepare(), matmuls)
                else:
                    prepare()
                    time.sleep(0.1)
            elif phase == "firststeps":  # the work begins, and its first steps allocate as they go
                if time.time() >= grow_at:
                    kept.append(torch.ones(int(V["first_gib"] * GIB), dtype=torch.uint8, device=dev))
                    grow_at += V["first_every_s"]
                gpu_work(prepare(), matmuls)
            elif phase == "launch":  # launch-bound in the training process: one tiny kernel after another
                for _ in range(V["launch_batch"]):
                    tiny.add_(1.0)
                torch.cuda.synchronize()
            else:
                if phase == "leak" and time.time() >= grow_at:
                    kept.append(torch.ones(int(V["leak_gib"] * GIB), dtype=torch.uint8, device=dev))
                    grow_at += V["leak_every_s"]
                gpu_work(prepare(), noisy(matmuls))
        for b in burners:
            b.wait()
        burners = []
    del kept, ballast


def _tools(marks: Path) -> None:
    import torch

    dev = torch.device("cuda")
    torch.ones(1, device=dev).sum().item()
    w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    q = torch.randn(2048, 4096, device=dev, dtype=torch.bfloat16)
    pinned = torch.empty(2 * GIB, dtype=torch.uint8).pin_memory()
    landing = torch.empty(2 * GIB, dtype=torch.uint8, device=dev)
    staged = torch.empty(int(V.get("launch_copy_mib", 0)) * 2**20, dtype=torch.uint8)  # pageable (not pinned)
    small = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
    large = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for phase, seconds in TOOLS:
        mark(marks, phase)
        begin = time.time()
        end = begin + seconds * SCALE
        if phase == "membound":
            big = torch.ones(8 * GIB, dtype=torch.bfloat16, device=dev)
        tiny = torch.zeros(1, device=dev)
        while time.time() < end:
            if phase in ("serve", "servestep"):  # requests at a rate: busy for rate x 90 ms of every 100 ms
                t = time.time() - begin
                if phase == "serve":  # a wave with a burst
                    wave = math.sin(2 * math.pi * t / V["serve_period_s"])
                    rate = 0.45 + 0.35 * wave + (0.3 if 18 <= t < 22 else 0.0)
                else:  # demand steps down and stays down
                    rate = V["serve_high"] if t < V["serve_step_s"] else V["serve_low"]
                busy = time.time() + 0.09 * max(0.05, min(1.0, rate))
                while time.time() < busy:
                    torch.tanh(q @ w)
                    torch.cuda.synchronize()
                time.sleep(max(0.0, 0.1 - 0.09 * rate))
            elif phase == "copy":
                landing.copy_(pinned, non_blocking=True)
                torch.cuda.synchronize()
            elif phase == "membound":
                big.mul_(1.0001)
                torch.cuda.synchronize()
            elif phase in ("capsmall", "capbig"):  # flat out at the power cap, two kernel mixes
                m = small if phase == "capsmall" else large
                for _ in range(16):
                    m @ m
                torch.cuda.synchronize()
            else:  # launch-bound: one tiny kernel after another (launchcopy: and a pageable copy of its input)
                if phase == "launchcopy":
                    staged.to(dev)
                for _ in range(V["launch_batch"]):
                    tiny.add_(1.0)
                torch.cuda.synchronize()
        if phase == "membound":
            del big
            torch.cuda.empty_cache()


def _train2(marks: Path) -> None:
    _train(marks, TRAIN2)


JOBS = {"train": _train, "tools": _tools, "train2": _train2}


# ---- the run ----
def run(labels_path: Path) -> dict[str, Any]:
    marks = labels_path.with_suffix(".marks")
    marks.unlink(missing_ok=True)
    plan: list[tuple[str, float]] = [("idle", 5.0), ("train", 0.0), ("idle", 3.0), ("tools", 0.0), ("idle", 5.0)]
    if not TOOLS:
        plan = [("idle", 5.0), ("train", 0.0), ("idle", 5.0)]
    if TRAIN2:  # a job stops, the GPU idles, a new job starts
        plan = [("idle", 5.0), ("train", 0.0), ("idle", 4.0), ("train2", 0.0), ("idle", 5.0)]
    for what, seconds in plan:
        if what == "idle":
            mark(marks, "idle")
            time.sleep(seconds * SCALE)
            continue
        mark(marks, "startup")
        subprocess.run([sys.executable, __file__, "--job", what, str(marks)], check=True)
    mark(marks, "done")
    rows = [json.loads(line) for line in marks.read_text(encoding="utf-8").splitlines() if line.strip()]
    phases = []
    for row, nxt in itertools.pairwise(rows):
        phases.append({"phase": row["phase"], "start": row["start"], "end": nxt["start"],
                       "expect": EXPECT.get(row["phase"], "normal"),
                       "process": row["phase"] not in ("idle", "startup")})
    labels = {"node": os.environ.get("NODE_NAME", "h200-node"), "gpu_index": 0, "phases": phases,
              "note": "start/end are epoch seconds; expect is the anomaly kind the phase should cause"}
    labels_path.write_text(json.dumps(labels, indent=1) + "\n", encoding="utf-8")
    marks.unlink(missing_ok=True)
    return labels


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--job":
        JOBS[sys.argv[2]](Path(sys.argv[3]))
        return
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    labels = run(Path(sys.argv[1]))
    total = labels["phases"][-1]["end"] - labels["phases"][0]["start"]
    for p in labels["phases"]:
        print(f"{p['phase']:11} {p['end'] - p['start']:6.1f} s  expect {p['expect']}")
    print(f"total {total:.0f} s")


if __name__ == "__main__":
    main()
