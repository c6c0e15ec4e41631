"""The detectors on traces the agent recorded on a real NVIDIA H200 (benchmarks/gpu/).

* ``h200-phases.jsonl``: idle, bf16 training, inference, idle, training, idle: job starts,
  stops and phase changes, no incident. The detectors must stay quiet.
* ``h200-incidents.jsonl``: training, then the same process input-bound (bursts at about a
  quarter duty cycle, ``stall``), then training that keeps 1 GiB more every 2 s
  (``leak``). The phase start times are in ``h200-incidents.phases.txt``.
* ``h200-labelled.jsonl`` with ``h200-labelled.labels.json`` (benchmarks/gpu/record_labelled.py):
  every normal phase and incident of benchmarks/gpu/workload_labelled.py (variant a), and the
  variants b to u (``h200-labelled-<v>.jsonl``) and v to ab (``h100-labelled-<v>.jsonl``: an
  H100; the agent sampling every 2 s for v and ab, 5 s for w and y) recorded as held-out traces, each
  scored once at its recording (docs/gpu-validation.md says which were then looked at). Every one
  is also scored re-sampled at 2 and 5 s (``test_the_real_traces_hold_when_the_agent_samples_every_2_or_5_seconds``).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from collector.detect.replay import read_trace, replay
from telemetry.keys import GPU_UTIL, SM_ACTIVE
from telemetry.records import GpuRecord
from tests.support.incidents.labelled import evaluate, score

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def _scored(variant: str, missed: list[str], false: tuple[tuple[str, str], ...] = (), gpu: str = "h200",
            late: dict[str, float] | None = None) -> Path:
    """A labelled trace replayed against its labels: no bad line, no anomaly of a kind its phase
    does not expect but the (phase, kind) pairs ``false``, the incidents ``missed`` and no other,
    every drop found within 90 s of its phase's start but those ``late`` names (phase: latency in
    seconds, at most). Returns the trace's path."""
    trace = DATA / f"{gpu}-labelled-{variant}.jsonl"
    result = evaluate(trace, trace.with_suffix(".labels.json"))
    assert result["bad_lines"] == 0 and [(f["phase"], f["kind"]) for f in result["false"]] == list(false)
    assert [i["phase"] for i in result["incidents"] if not i["found"]] == missed
    assert all(i["latency_s"] <= (late or {}).get(i["phase"], 90) for i in result["incidents"]
               if i["expect"] == "throughput_drop" and i["found"])
    return trace


def _phases(name: str) -> dict[str, float]:
    lines = (DATA / name).read_text().split("\n")
    return {phase: float(t) for phase, t in (line.split() for line in lines if line.strip())}


def test_phase_changes_on_a_real_h200_raise_nothing() -> None:
    result = replay(read_trace(DATA / "h200-phases.jsonl"))
    assert result.records == 417 and not result.bad_lines
    assert result.anomalies == []


def test_real_h200_stall_and_leak_are_found_and_explained() -> None:
    result = replay(read_trace(DATA / "h200-incidents.jsonl"))
    phases = _phases("h200-incidents.phases.txt")
    by_kind = {a.kind: a for a in result.anomalies}
    assert set(by_kind) == {"throughput_drop", "memory_leak"}
    drop, leak = by_kind["throughput_drop"], by_kind["memory_leak"]
    # fired during its phase, within the 90 s issue 17 asks of a steady job's fall
    assert phases["stall"] < drop.start <= phases["stall"] + 90
    assert "same process" in drop.summary and drop.causes
    assert phases["leak"] < leak.start <= phases["leak"] + 75
    assert "out of memory" in leak.summary


def test_the_committed_incident_trace_scored_against_its_phases() -> None:
    lines = [line.split() for line in (DATA / "h200-incidents.phases.txt").read_text().split("\n") if line.strip()]
    expect = {"stall": "throughput_drop", "leak": "memory_leak"}
    phases = [{"phase": name, "start": float(t), "end": float(nxt), "expect": expect.get(name, "normal")}
              for (name, t), (_, nxt) in itertools.pairwise(lines)]
    result = score(replay(read_trace(DATA / "h200-incidents.jsonl")).anomalies, phases)
    assert result["found"] == 2 and result["false"] == []
    assert [i["latency_s"] <= 90 for i in result["incidents"]] == [True, True]


LABELLED = DATA / "h200-labelled.jsonl"


def test_the_labelled_h200_trace_every_incident_found_nothing_on_normal_phases() -> None:
    """Variant a: scored once (2 of 4), then tuned on (docs/gpu-validation.md)."""
    trace = LABELLED
    result = evaluate(trace, trace.with_suffix(".labels.json"))
    labels = json.loads(trace.with_suffix(".labels.json").read_text())
    assert result["bad_lines"] == 0
    assert len(result["incidents"]) == sum(1 for p in labels["phases"] if p["expect"] != "normal") >= 4
    assert [i["phase"] for i in result["incidents"] if not i["found"]] == []
    assert result["false"] == []
    assert all(i["latency_s"] <= 90 for i in result["incidents"] if i["expect"] == "throughput_drop")


def test_the_trace_b_drops_found_nothing_on_its_normal_phases() -> None:
    """Variant b, scored held out at 0 of 4; then looked at. Its two drops (55 s each) are found
    since a fall in bursts needs its slow mean back to end and a known dip no longer excuses it
    burst by burst (docs/gpu-validation.md); its leak (41 s, 1 GiB every 3 s: out of memory in
    minutes) is found since an urgent leak is judged on 30 s of growth (after trace g); its
    launch-bound phase (70 s) was shorter than that detector's 90-s wait, and is found since it
    waits a minute (session 5). Its normal phases, a batch-size change and a checkpoint among
    them, stay quiet."""
    trace = DATA / "h200-labelled-b.jsonl"
    result = evaluate(trace, trace.with_suffix(".labels.json"))
    assert result["bad_lines"] == 0 and result["normal_phases"] == 16
    assert result["false"] == []
    found = {i["phase"] for i in result["incidents"] if i["found"]}
    assert found == {"contention", "stall", "leak", "launch"}


def test_the_trace_c_every_incident_found_nothing_on_normal_phases() -> None:
    """Variant c, scored held out at 1 of 3; then looked at. Its stall, a smooth 66% fall for
    90 s, is found once a smooth fall of a steady job has lasted 90 s (issue 17)."""
    trace = DATA / "h200-labelled-c.jsonl"
    result = evaluate(trace, trace.with_suffix(".labels.json"))
    assert result["bad_lines"] == 0 and result["false"] == []
    assert [i["phase"] for i in result["incidents"] if not i["found"]] == []


def test_the_trace_d_stall_drift_and_leak_found_nothing_on_normal_phases() -> None:
    """Variant d, scored held out at 1 of 4 (the leak); then looked at. Its lone job's blocks
    wander by 6% with calm samples (5%): a steady job, not one of unknown kind; and its level
    counts once it has worked at it for 30 s, so the second job's drift (after 35 s of
    training) is judged. The contention (61 s, a fall to 0.06, 12 s after the stall recovered)
    was missed: the stall's anomaly, still open, took it in. Since session 5 an anomaly belongs
    to one fall (a fall that recovered closes it), and a fall is timed from when it left the
    plateau: found after 58 s."""
    trace = DATA / "h200-labelled-d.jsonl"
    result = evaluate(trace, trace.with_suffix(".labels.json"))
    assert result["bad_lines"] == 0 and result["normal_phases"] == 13
    assert result["false"] == []
    assert {i["phase"] for i in result["incidents"] if i["found"]} == {"stall", "drift", "contention", "leak"}


def test_the_held_out_trace_e_stall_found_nothing_on_normal_phases() -> None:
    """Variant e, recorded at the start of a session and scored only after its detector
    changes: 0 of 5 held out (and 0 of 5 under the detectors of that session's start). Now 1
    of 5: its stall is found after 47 s, and the anomaly stays open through the bursty
    loader stall and the contention that follow it (12 s of training between them is shorter
    than a recovery), so neither opens an anomaly of its own; its launch-bound phase (80 s) was
    shorter than that detector's 90-s wait and is found since it waits a minute (session 5); its
    fast leak (41 s) is found since an urgent leak is judged on 30 s of growth (after trace g).
    Since round 26 the stall's recovery is timed from when its samples came back (a sample below
    after a block back is no longer the stall going on), so the bursty loader stall ("hiccup") is
    judged on its own and found after 62 s. Its normal phases stay quiet."""
    trace = DATA / "h200-labelled-e.jsonl"
    result = evaluate(trace, trace.with_suffix(".labels.json"))
    assert result["bad_lines"] == 0 and result["false"] == []
    assert {i["phase"] for i in result["incidents"] if i["found"]} == {"stall", "hiccup", "launch", "leak"}


def test_the_held_out_trace_f_stall_launch_and_leak_found_nothing_on_normal_phases() -> None:
    """Variant f, recorded with the detectors of its session final and scored at once: 2 of 4
    (launch-bound after 100 s, the leak after 42 s). Then looked at: the job's first minutes
    were no plateau (a slower phase after its evaluation), so it was judged as a job of
    unknown kind, where only a step counts, and the step's anchor held the checkpoint's idle
    blocks: the stall 25 s later was no step from there. Blocks of an idle GPU are no level
    it works at (level.py ``_window``): the stall is found after 92 s. The contention (a fall
    to 0.08, 25 s after the stall) was missed: its step anchor was the stall's level, and 0.08
    read as a drained replica. Since session 5 a reported fall's blocks are no anchor (the work
    before it stands in), and only an idle GPU reads as drained when it has no peers to drain
    to: found after 61 s."""
    trace = DATA / "h200-labelled-f.jsonl"
    result = evaluate(trace, trace.with_suffix(".labels.json"))
    assert result["bad_lines"] == 0 and result["false"] == []
    assert [i["phase"] for i in result["incidents"] if not i["found"]] == []


def test_the_held_out_trace_g_four_of_five_found_nothing_on_normal_phases() -> None:
    """Variant g, recorded at the start of the fourth session and scored at once: 1 of 5 held
    out (its stall). Then looked at, and three flaws found that it shares with any job whose
    incidents come one after another: a fall's first blocks made the job's plateau hints
    ("calm") false two seconds into the fall that was then judged (level.py: a dip under way
    may confirm the hints, not undo them); a reported fall was learned as one of the job's
    recurring dips and excused the next one of its depth, 22 s later (level.py: a reported
    fall is the job's rhythm only when it recurs minutes after); a leak that runs the GPU out
    of memory in about 3 minutes waited for a minute of growth (memory.py: 30 s when it is
    that urgent). Its launch-bound phase lasted 90 s, exactly the detector's wait then; it is
    found since that wait is a minute (session 5)."""
    trace = DATA / "h200-labelled-g.jsonl"
    result = evaluate(trace, trace.with_suffix(".labels.json"))
    assert result["bad_lines"] == 0 and result["false"] == []
    assert [i["phase"] for i in result["incidents"] if not i["found"]] == []


def test_trace_g_host_side_names_each_cause() -> None:
    """Trace g's host side, rebuilt from the sidecar's raw kernel counters
    (benchmarks/gpu/host_from_sidecar.py; its agent did not yet read the host): each of the
    three falls of the same depth names a different cause, from what changed beside it.
    (The single-thread rule was set after reading this sidecar: normal training's main thread
    already runs at 0.92 of a core, so "all CPU on one thread" is the sign, not a busier one.)"""
    import gzip

    from collector.detect import DetectionEngine
    from telemetry.records import GpuRecord
    from tests.support.sidecar import rows

    sidecar_path = DATA.parent.parent / "docs" / "gpu-runs" / "2026-12-01-labelled-g-host.jsonl.gz"
    with gzip.open(sidecar_path, "rt", encoding="utf-8") as fh:
        host = rows([json.loads(line) for line in fh if line.strip()])
    engine, opened, i = DetectionEngine(), [], 0
    for rec in read_trace(DATA / "h200-labelled-g.jsonl"):
        while i + 1 < len(host) and host[i + 1][0] <= rec.ts:
            i += 1
        if rec.processes and host[i][0] <= rec.ts <= host[i][0] + 3.0:
            rec = GpuRecord(rec.ts, rec.node, rec.gpu, {**rec.metrics, **host[i][1]}, rec.gpu_index, rec.model,
                            rec.processes)
        opened += [c.anomaly for c in engine.feed(rec) if c.action == "open" and c.anomaly.kind == "throughput_drop"]
    assert [a.causes[-1].rsplit(": ", 1)[-1] for a in opened] == [
        "waiting on input", "a single busy thread (a Python loop, the GIL) feeds the GPU", "host CPU contention"]


def test_trace_h_read_by_the_agent_with_host_evidence_every_fall_named() -> None:
    """Variant h (issue 14), recorded by the agent that reads the host, after the session's
    detector and diagnosis changes, and scored at once: 4 of 4, nothing on its normal phases,
    and the stall, the single-thread input and the contention each name their own cause from
    the agent's own host columns."""
    trace = DATA / "h200-labelled-h.jsonl"
    result = evaluate(trace, trace.with_suffix(".labels.json"))
    assert result["bad_lines"] == 0 and result["false"] == []
    assert [i["phase"] for i in result["incidents"] if not i["found"]] == []
    drops = [a for a in replay(read_trace(trace)).anomalies if a.kind == "throughput_drop"]
    assert [a.causes[-1].rsplit(": ", 1)[-1] for a in drops] == [
        "waiting on input", "a single busy thread (a Python loop, the GIL) feeds the GPU", "host CPU contention"]


def test_trace_i_a_stall_20_s_into_a_job_and_a_fall_after_a_reported_drift() -> None:
    """Variant i, recorded first in the fifth session and scored held out: 3 of 5 (the stall 20 s
    into the job, before its level had held 30 s, and the contention 20 s after a reported drift
    were missed). Now: the young level's deep fall is judged when the host names its cause, a
    reported fall's way down is unlearned, and a fall is timed from when it left the plateau."""
    trace = _scored("i", [])
    drops = [a for a in replay(read_trace(trace)).anomalies if a.kind == "throughput_drop"]
    assert drops[0].causes[-1].endswith("waiting on input") and drops[-1].causes[-1].endswith("host CPU contention")


def test_trace_j_recorded_with_the_fifth_sessions_detectors_four_of_five() -> None:
    """Variant j, written after the fifth session's changes and scored once, at its recording:
    4 of 5 and nothing on its normal phases (a checkpoint, an evaluation and a serving wave among
    them); the detectors of that session's start found 1 of 5 and raised one false drop. Its
    bursty loader (2 s of steps, 3 s waiting) came 20 s after a checkpoint, with the job's level
    not yet established, and the process slept 44% of the time on average (under the 60% that
    says "waiting on input"): missed at recording. Trace m (eleventh session) missed the same
    phase the same way; since then a young level's job that works in bursts at its level between
    idle waits is judged as waiting for work (level.py ``duty_cycled``), and one known to wait is
    back once it works without a wait (the single-thread fall came 20 s after): 5 of 5, tuned on."""
    _scored("j", [])


def test_trace_k_recorded_with_the_sixth_sessions_detectors_five_of_five() -> None:
    """Variant k, written after the sixth session's changes (pod rhythm, late partitions, pinned
    replicas: none of which a lone GPU exercises) and scored once, at its recording: 5 of 5 and
    nothing on its normal phases (a checkpoint, an evaluation, a serving wave), each drop within
    90 s. The session's starting detectors score it the same."""
    _scored("k", [])


def test_trace_l_recorded_again_four_of_five_its_launch_bound_minute_sampled_as_idle() -> None:
    """Variant l, recorded a second time at the tenth session's start (the first recording, 3 of 5
    with the ninth session's final detectors, was lost before it was committed) and scored once:
    4 of 5, nothing on its normal phases (an evaluation, a checkpoint, a serving wave), each drop
    within 90 s. Its launch-bound phase (600 tiny kernels per sync: 20% utilisation, SM activity
    0.0002) was read only 14 times in 66 s: the agent then took a GPU with kernels resident but
    its SMs idle for an idle one and sampled it every 10 s, too few samples to outlast the
    finding's minute. The agent now counts utilisation as work (tests/test_scheduler.py); this
    recording keeps its samples and its miss."""
    trace = _scored("l", ["launch"])
    launch = [r for r in read_trace(trace) if r.metrics.get(GPU_UTIL, 0.0) >= 15.0
              and r.metrics.get(SM_ACTIVE, 1.0) < 0.001]
    assert 10 <= len(launch) <= 16  # the sparse samples that explain the miss


def test_trace_m_the_agents_launch_bound_fix_on_the_gpu_and_a_young_jobs_input_bursts() -> None:
    """Variant m, recorded in the eleventh session with that session's starting detectors and
    scored once: 2 of 3, nothing on its normal phases (a checkpoint, a serving wave). Its
    launch-bound phase (400 tiny kernels per sync) was read 74 times in 70 s (trace l's: 14 in
    66 s), found in 61 s: the agent's fix, checked on the H200. Its bursty loader (2.5 s of steps,
    3.5 s waiting), 18 s after a checkpoint, was missed as trace j's was; found since
    (``duty_cycled``), tuned on: 3 of 3."""
    trace = _scored("m", [])
    launch = [r for r in read_trace(trace) if r.metrics.get(GPU_UTIL, 0.0) >= 15.0
              and r.metrics.get(SM_ACTIVE, 1.0) < 0.001]
    assert len(launch) >= 60  # sampled as a GPU at work


def test_trace_n_three_of_four_its_launch_bound_phase_a_second_short_of_the_findings_minute() -> None:
    """Variant n, recorded in the twelfth session after its detector change and scored once:
    3 of 4, nothing on its normal phases (an evaluation, the batch growing by half after a
    reported fall, a serving wave, a memory-bound pass). Its bursty loader at an established
    level (3 s of steps, 3 s waiting: half the level's work) found in 64 s. Its launch-bound
    phase lasted 60.9 s, and read launch-bound from its second sample to its last, 59.4 s: a
    second short of the finding's minute (``launch_hold_s``), so no finding, by the rule the issue
    asks for ("for minutes"); the hold is not shortened to fit this recording."""
    trace = _scored("n", ["launch"])
    launch = [r.ts for r in read_trace(trace) if r.metrics.get(GPU_UTIL, 0.0) >= 15.0
              and r.metrics.get(SM_ACTIVE, 1.0) < 0.001]
    assert 55.0 <= launch[-1] - launch[0] < 60.0


def test_trace_o_recorded_with_the_twelfth_sessions_detectors_four_of_four() -> None:
    """Variant o, written in the twelfth session before trace n was looked at and scored once at
    its recording: 4 of 4 (the input work on one thread 25 s after a checkpoint, a slow drift,
    a leak, launch-bound work with 2,000 tiny kernels per sync), nothing on its normal phases (a
    checkpoint, a slow serving wave, a host-to-device copy), each drop within 90 s."""
    _scored("o", [])


def test_trace_p_a_second_jobs_contention_then_its_single_thread_each_its_own_incident() -> None:
    """Variant p, written in the twelfth session before trace o was looked at and scored once at
    its recording: 3 of 4, nothing on its normal phases. The first job's mildest stall yet (1.2
    steps' wait) after an evaluation, and its leak, were found; in a second job, CPU contention
    25 s into it was found (the young level's deep fall, named by the host) and stayed open
    through the 20 s of work in bursts after it, so the input work on one thread that followed
    was inside that anomaly. Since, a reported fall whose host evidence names a new cause is a new
    incident (activity.py ``_new_cause``): 4 of 4, tuned on."""
    trace = _scored("p", [])
    drops = [a for a in replay(read_trace(trace)).anomalies if a.kind == "throughput_drop"]
    assert [d.causes[-1].rsplit(": ", 1)[-1] for d in drops] == [
        "waiting on input", "host CPU contention", "a single busy thread (a Python loop, the GIL) feeds the GPU"]


def test_trace_q_a_hang_is_a_throughput_drop_not_launch_bound_work() -> None:
    """Variant q, written in the thirteenth session before any detector saw it and scored once at its
    recording: 3 of 4 (a stall of 2.2 steps' wait, a leak of 0.4 GiB every 2 s, launch-bound work
    with 1,800 tiny kernels per sync), nothing on its normal phases (an evaluation, a checkpoint, a
    serving wave). Its new incident, a hang (the process alive, its GPU work one kernel spinning on a
    single thread block for 70 s: utilisation 100%, SM activity 0.0076, 1 of 132 SMs), was read as
    launch-bound work, whose finding left the fall unjudged and named many tiny kernels as the cause.
    Utilisation pinned at 100% has no launch gaps (collector/detect/launch.py ``PINNED``): now a
    throughput drop that names a kernel that does not end, and no launch-bound finding (tuned on q:
    4 of 4)."""
    trace = _scored("q", [])
    hang = next(p for p in json.loads(trace.with_suffix(".labels.json").read_text())["phases"] if p["phase"] == "hang")
    spinning = [r for r in read_trace(trace) if isinstance(r, GpuRecord) and hang["start"] + 2.0 <= r.ts < hang["end"]]
    assert len(spinning) >= 60
    assert all(r.metrics[GPU_UTIL] >= 99 and r.metrics[SM_ACTIVE] < 0.01 for r in spinning)
    during = [a for a in replay(read_trace(trace)).anomalies if hang["start"] <= a.start < hang["end"]]
    assert [a.kind for a in during] == ["throughput_drop"]
    assert "a kernel that does not end" in during[0].causes[1]
    assert not any("waits for work" in c or "single busy thread" in c for c in during[0].causes)


def test_trace_r_a_hang_on_six_streams_is_a_throughput_drop_and_the_copy_is_not_a_hang() -> None:
    """Variant r, written in the thirteenth session after the hang rule of 4b51ece, before any
    detector saw it, and scored once at its recording: 5 of 5 (3 burners per core, a hang of
    another shape, a stall of 1.9 steps' wait, a leak of 0.5 GiB every 2 s, launch-bound work with
    2,500 tiny kernels per sync), nothing on its normal phases: a checkpoint, an evaluation after
    the hang, a serving wave, and the hang rule's hard negatives, a memory-bound pass (utilisation
    99%, DRAM 0.88) and a host-to-device copy (utilisation 100% and SM activity 0, as in a hang,
    but PCIe 58 GiB/s). The hang: six kernels spinning at once, each on one thread block on its own
    stream, 70 s (utilisation 100%, SM activity 0.0453, 6 SMs of 132). It was found 58.5 s in,
    named as a kernel that does not end. PCIe receive read about 2.3 GiB/s in two stretches of the
    hang (21-42 s, 62 s to its end; 0.25 GiB/s otherwise, no copy issued), past the copy threshold
    (launch.py ``COPYING``), with DRAM activity 4e-6: bytes that land nowhere (doorbells, semaphore
    reads), where a copy's land in device memory (0.88 of them). When recorded, that traffic ended
    the hang rule and the anomaly closed 66.5 s in, inside the hang; now a copy must land
    (``copying``), and the anomaly lasts to the hang's end. No launch-bound anomaly opened during it."""
    trace = _scored("r", [])
    hang = next(p for p in json.loads(trace.with_suffix(".labels.json").read_text())["phases"] if p["phase"] == "hang")
    spinning = [r for r in read_trace(trace) if isinstance(r, GpuRecord) and hang["start"] + 2.0 <= r.ts < hang["end"]]
    assert len(spinning) >= 60
    assert all(r.metrics[GPU_UTIL] >= 99 and 0.04 < r.metrics[SM_ACTIVE] < 0.05 for r in spinning)
    during = [a for a in replay(read_trace(trace)).anomalies if hang["start"] <= a.start < hang["end"]]
    assert [a.kind for a in during] == ["throughput_drop"]
    assert "a kernel that does not end" in during[0].causes[1]
    assert during[0].end is not None and hang["end"] <= during[0].end < hang["end"] + 10.0


def test_trace_s_held_out_three_of_five_now_four_its_drift_missed() -> None:
    """Variant s, written in the fourteenth session before any detector saw it and scored once at
    its recording: 3 of 5 (contention 60 s, leak 23 s, launch-bound 62 s), nothing on its normal
    phases (a 25-s evaluation at a twentieth of the level, a serving wave). Missed: the drift (0.40
    to 0.14 over 50 s, then holding) was below 0.6 of the level for under a minute before the
    phase ended, and a drift is timed from when it crossed; the loader that fell behind (5 s of
    steps, 4 s of waits) came after it, when the young job's unreported drift had cost it its
    plateau hints (judged as a job of unknown kind, against an anchor the drift had pulled down).
    Since the fifteenth session a lone job's bursts between waits are judged as a job waiting for
    its input whatever its kind (``activity._duty_since``): the loader is found (docs/gpu-validation.md)."""
    _scored("s", ["drift"])


def test_trace_t_held_out_five_of_five() -> None:
    """Variant t, written in the fifteenth session before any detector saw it (d1bcabf) and scored
    once at its recording with the detectors of 813375b (one rule of which was then reverted: it
    scores the same without it): 5 of 5 (a loader with random waits 60 s,
    contention from 14 burners 58 s, a stall at a quarter duty cycle 59 s, leak 25 s, launch-bound
    63 s), nothing on its 15 normal phases (a 13-s checkpoint, a 25-s evaluation at 0.023, a
    serving wave, a host-to-device copy). docs/gpu-validation.md."""
    _scored("t", [])


def test_trace_u_held_out_three_of_four_its_pcie_fed_input_found_since() -> None:
    """Variant u, written in the fifteenth session before any detector saw it (c34527f) and scored
    once at its recording: 3 of 4 (stall 61 s, leak 30 s, launch-bound 62 s), nothing on its normal
    phases (a checkpoint, an evaluation, a serving wave, a 10-s copy). Missed: its new incident, each
    step's batch copied from pageable host memory (15 GiB/s host to device, SM activity 0.035 of
    0.43, utilisation 40%) 50 s into the job. It reads as a copy-bound phase, which the tuning
    generator's ETL jobs have as normal work (host-to-device copies for minutes at SM activity
    0.01); a rule that reported it added 13 false drops there, and was reverted
    (docs/gpu-validation.md). Found since 2026-12-05 (docs/benchmarks.md, round 18; u and x are
    tuned on): host-to-device copies for a minute are the job's input when its steps still run
    between them (SM activity at least 5% of its level: u's is at 8%, the ETL slots' at 2% or less)."""
    _scored("u", [])


def _at_interval(interval: float) -> tuple[int, int, list[tuple[str, str]], dict[str, int]]:
    """Every labelled real trace re-sampled at ``interval`` s (``resampled``): incidents found, of
    how many, the (trace, phase) of each anomaly on a normal phase, and found per incident phase."""
    found = total = 0
    false: list[tuple[str, str]] = []
    per: dict[str, int] = {}
    for trace in sorted(DATA.glob("h[12]00-labelled*.jsonl")):
        result = evaluate(trace, trace.with_suffix(".labels.json"), interval)
        assert result["bad_lines"] == 0
        found += result["found"]
        total += len(result["incidents"])
        false += [(trace.stem, f["phase"]) for f in result["false"]]
        for i in result["incidents"]:
            per[i["phase"]] = per.get(i["phase"], 0) + i["found"]
    return found, total, false, per


def test_the_real_traces_hold_when_the_agent_samples_every_2_or_5_seconds() -> None:
    """The agent stretches its interval under its CPU budget (to 10 s at most) and an operator may set
    a longer one: the detectors must not hold only at the 1 s the traces were recorded at. Re-sampled
    at 2 s the 22 traces a-v gave 69 of their 96 incidents before a level counted its plateau blocks'
    real length (``ActivityLevel.block_s``: six 6-s blocks are 36 s of work, not 30) and the leak
    detector asked for a point per quarter rather than six (at 2 s it keeps one every 6 s: five in
    30 s); 85 now, every leak among them. At 5 s: 71 and a throughput drop on a normal phase, now 75
    and none. What is still missed at 5 s is mostly short phases: a loader's 5-s bursts alias with
    the samples, and a 65-s launch-bound phase against its 60-s hold (docs/benchmarks.md, round 15).
    With the H100 traces w, x and y (13 incidents more) and a young level judged on half its work
    lost: 97 of 109 at 2 s, 85 of 109 at 5 s (docs/benchmarks.md, round 17). With ab (3 incidents,
    recorded at 2 s on an H100 in the twentieth session): 100 of 112 at 2 s, 90 of 112 at 5 s. With aa
    and z (6 incidents, recorded on an H100 in the twenty-first session): 106 of 118 at 2 s, 95 at 5 s.
    With ac (5 incidents, twenty-second session): 111 of 123 at 2 s, 99 at 5 s (ac's one-thread input
    is missed at 5 s). Round 21 (launch-bound from ten times SM activity, not four): 98 at 5 s. Trace
    b's 70-s launch phase, sampled every 10 s, was found only by a sample after it had ended (the slow
    means of the next phase's first sample still read 8.6 times). With ad (2 incidents, round 21):
    113 of 125 at 2 s, 100 at 5 s. With ae (4 incidents, twenty-ninth session; its launch phase
    missed as recorded): 116 of 129 at 2 s, 103 at 5 s. Round 26 (a smooth fall back for a block is
    over): 117 at 2 s (trace e's bursty stall is judged on its own, no longer inside the stall's
    anomaly before it), 102 at 5 s (trace b's 55-s stall, under the 60-s hold, had been found only as the
    continuation of its evaluation 15 s before, which now ends when its samples come back). With af (5
    incidents, thirty-first session): 122 of 134 at 2 s (af 5 of 5), 106 at 5 s (af 4: its bursty
    loader's 3-s runs and waits alias with the samples). With ag (4 incidents, thirty-second session):
    124 of 138 at 2 s, 108 at 5 s, the same two as recorded."""
    found, total, false, per = _at_interval(2.0)
    assert (found, total, false) == (124, 138, [])
    assert per["leak"] == 33
    found, total, false, _ = _at_interval(5.0)
    assert (found, total, false) == (108, 138, [])  # (85 of 109 before u's and x's pageable input, round 18)


def test_trace_v_held_out_on_an_h100_sampled_every_2_s_four_of_five() -> None:
    """Variant v, written in the sixteenth session before any detector saw it (56cefd6) and scored
    once at its recording: the first trace of an H100 (80 GB HBM3, the machine lent that day), the
    agent's busy interval 2 s (GPUWATCH_BUSY_INTERVAL=2; it sampled every 0.5-0.8 s while activity
    changed). 4 of 5 (stall 57 s, contention 61 s, leak 28 s, launch-bound 62 s), nothing on its 15
    normal phases (an evaluation, a checkpoint, a serving wave, a memory-bound pass). Missed then:
    the loader that falls behind in bursts (4 s of steps at the level, 3 s idle; 0.21 against the
    0.38 of the training around it). The job had lost its plateau hints in its contention, so the
    fall was judged as a step of a job of unknown kind, against an anchor (0.30) the contention had
    pulled down, and a step must fall 35% below it. Looked at afterwards (so v is now tuned on): a
    step being judged whose samples have since come as bursts at the level between idle waits is
    judged as a job waiting for its input (``activity.throughput``, as ``_duty_since`` judges a fall
    that begins so): found 36 s in, and no generated suite changes (docs/benchmarks.md, round 15).
    Missed again since the eighteenth session: that 36 s came from a minute of samples back, 20 s of
    them the training before the loader and the tail of the contention's reported fall. A fall is no
    longer timed from inside the last reported one (``ActivityLevel.duty_cycled``, the trace x), so
    the loader is timed from 284 s, and its 62-s phase ends 2 s before its 60-s hold would."""
    _scored("v", ["hiccup"], gpu="h100")


def test_trace_w_held_out_on_an_h100_sampled_every_5_s_three_of_four_now_four() -> None:
    """Variant w, written in the sixteenth session before any detector saw it (committed then) and
    scored once at its recording in the eighteenth (docs/gpu-validation.md): an H100, the agent's busy
    interval 5 s (GPUWATCH_BUSY_INTERVAL=5). 3 of 4 (stall 66 s, leak 24 s, launch-bound 66 s),
    nothing on its normal phases (an evaluation, a checkpoint, a serving wave). Missed then: the
    contention from 10 CPU burners 35 s into the job's work after its evaluation, a 58% fall that
    the host named for a minute; the job's level had not yet held long enough to count, and a young
    level was judged only for a 70% fall. Looked at afterwards (so w is now tuned on): a young level
    is judged for half its work lost when the host names the cause (``level.YOUNG_DEEP``); found."""
    _scored("w", [], gpu="h100")


def test_trace_x_held_out_on_an_h100_four_of_five_its_pageable_input_found_since() -> None:
    """Variant x, written in the seventeenth session before any detector saw it and scored once at
    its recording in the eighteenth: an H100 at the agent's own intervals. 4 of 5 (a loader in
    3-s bursts 31 s, contention from 12 burners 5 s, leak 33 s, launch-bound 63 s), nothing on its
    normal phases (a 20-s evaluation, a checkpoint, a serving wave, a memory-bound pass). Missed,
    as in u: each step's 2 GiB batch copied from pageable host memory; it reads as a copy-bound
    phase, which generated ETL jobs have as normal work (test_trace_u_...). The contention's 5 s
    was wrong: 5 s after the loader's anomaly closed, a minute of samples back (the loader's bursts
    among them) read as a job waiting for its input, and the contention's anomaly opened at once
    with a start inside the loader's. Since then it is found 56 s in, timed from its own start.
    The pageable input is found since round 18 (63 s in; its steps run at 16% of the level between
    the copies), as u's is (test_trace_u_...)."""
    _scored("x", [], gpu="h100")


def test_trace_y_held_out_on_an_h100_sampled_every_5_s_three_of_four_now_four() -> None:
    """Variant y, written in the seventeenth session before any detector saw it and scored once at
    its recording in the eighteenth: an H100, sampled every 5 s. 3 of 4 (stall 59 s, leak 22 s,
    launch-bound 64 s), nothing on its normal phases. Missed then, as in w: contention 15 s after
    the job came back from its stall, a 65% fall of a level too young to count, named by the host.
    Found since the young level's bar is half (so y is now tuned on). Its sibling z (a stall and a
    leak, 5-s samples) scored 2 of 2 at its recording; its trace was lost on the way back from the
    GPU machine (docs/gpu-validation.md)."""
    _scored("y", [], gpu="h100")


def test_trace_ab_held_out_on_an_h100_sampled_every_2_s_three_of_three() -> None:
    """Variant ab, written in the twentieth session before any detector saw it (d10c33a) and scored
    once at its recording the same day (docs/gpu-validation.md): an H100, the agent's busy interval
    2 s. 3 of 3, nothing on its 8 normal phases (a 12-s evaluation among them): a loader falling
    behind in bursts (4 s of steps, 4 s of waits) 61 s, a slow drift (each step waiting longer for
    40 s, then 2 steps' wait) 68 s, a leak of 0.3 GiB every 1.5 s 24 s. Not looked at since."""
    _scored("ab", [], gpu="h100")


def test_trace_aa_held_out_on_an_h100_at_the_agents_own_intervals_four_of_four() -> None:
    """Variant aa, written in the twentieth session before any detector saw it (d10c33a) and scored
    once at its recording in the twenty-first (docs/gpu-validation.md): an H100, the agent at its own
    intervals, thirteen normal phases (a 13-s checkpoint, an 18-s evaluation, 25 s of serving on a 12-s
    wave among them). 4 of 4, nothing on a normal phase: host contention from 14 CPU burners 61 s, an input stall
    of 2.2 steps' wait 58 s, a leak of 0.45 GiB every 2 s 23 s, a launch-bound phase of 1,800
    launches per sync 62 s. Not looked at since."""
    _scored("aa", [], gpu="h100")


def test_trace_z_held_out_on_an_h100_sampled_every_5_s_two_of_two() -> None:
    """Variant z, written in the seventeenth session (y's sibling): its first recording scored 2 of 2
    but its trace was lost on the way back from the GPU machine; recorded again in the twenty-first
    session on an H100, the agent's busy interval 5 s: 2 of 2 again (stall 61 s, leak 38 s), nothing
    on its normal phases."""
    _scored("z", [], gpu="h100")


def test_trace_ac_held_out_on_an_h100_at_the_agents_own_intervals_five_of_five() -> None:
    """Variant ac, written in the twenty-second session before any detector saw it (10f94d4), in a
    session that changed no detector, and scored once at its recording the same day
    (docs/gpu-validation.md): an H100, the agent at its own intervals, thirteen normal phases (a 14-s
    evaluation and an 8-s checkpoint among them). 5 of 5, nothing on a normal phase: a loader with
    random waits (mean 1.8 steps) 61 s, a hang of one spinning kernel 58 s, the input work on one
    thread 58 s, a leak of 0.4 GiB every 2 s 21 s, launch-bound work of 2,200 launches per sync 64 s."""
    _scored("ac", [], gpu="h100")


def test_trace_ad_a_jobs_first_steps_allocate_and_a_launch_loop_copies_its_input() -> None:
    """Variant ad, written in the twenty-fifth session for the hard negatives of an independently
    written fleet (docs/benchmarks.md, round 21) and recorded on an H100 after the detectors were
    changed for them (so it checks those changes on a real GPU; it is not held out from them). A
    process loads and compiles for 140 s, the GPU idle but for a burst every 10 s; its first steps
    then allocate 0.5 GiB a second for 28 s (12 GiB) as the work begins: normal. The detectors before
    round 21 reported that as a memory leak 21 s in, and missed the launch-bound loop that copies
    8 MiB of pageable input per 1,500 launches (1.1 GB/s over PCIe: taken for a copy-bound phase).
    Now 2 of 2 (a leak under running work 24 s, the loop 64 s), nothing on the normal phases."""
    _scored("ad", [], gpu="h100")


def test_trace_ae_held_out_on_an_h100_three_of_four_its_launch_phase_shorter_than_the_findings_minute() -> None:
    """Variant ae, written in the twenty-eighth session before any detector saw it (a2e7127) and
    recorded at the start of the twenty-ninth on an H100, the agent at its own intervals, with that
    session's starting detectors (ae529b9): 3 of 4, nothing on its eleven normal phases (a 14-s
    evaluation; a lone server whose demand steps up and down for 70 s among them). Its drift (SM
    activity 0.51 -> 0.16 over 100 s) found 99 s into the phase, later than the issue's 90 s: it fell
    below 60% of its level 26 s in, and a fall that came as a drift is timed from there, for the
    minute a steady job's fall must last and the 14 s of the evaluation dip it had recovered from.
    Host contention from 10 CPU burners found 61 s in, a leak 24 s. Its launch-bound phase read
    launch-bound from its first sample to its last, 58.7 s, short of the finding's minute
    (``launch_hold_s``) as trace n's was; the hold is not shortened to fit a recording (a 30-s
    hold cost 114 false findings on autoscaled replicas warming up, docs/benchmarks.md round 19)."""
    trace = _scored("ae", ["launch"], gpu="h100", late={"drift": 100.0})
    launch = [r.ts for r in read_trace(trace) if r.metrics.get(GPU_UTIL, 0.0) >= 15.0
              and r.metrics.get(SM_ACTIVE, 1.0) < 0.001]
    assert 55.0 <= launch[-1] - launch[0] < 60.0


def test_trace_af_held_out_on_an_h100_five_of_five() -> None:
    """Variant af, written in the thirtieth session before any detector saw it and recorded at the
    thirty-first on an H100, the agent at its own intervals, scored once at its recording with that
    session's detectors (docs/gpu-validation.md): 5 of 5, nothing on its seventeen normal phases (a
    14-s evaluation followed by a 2-s loader blip, a 9-s checkpoint, a second blip among them). A
    stall of 2.4 steps' wait (0.43 -> 0.06) 61 s, 12 CPU burners 57 s, a loader falling behind in
    bursts (3 s of steps, 3 s of waits) 62 s, a leak of 0.4 GiB every 2 s 24 s, launch-bound work of
    1,400 launches per sync 64 s. Round 26's detectors also find 5 of 5 on it."""
    _scored("af", [], gpu="h100")


def test_trace_ag_a_change_of_kernel_mix_at_the_power_cap_is_no_throttle() -> None:
    """Variant ag, written in the thirty-second session after that session's power-throttle change
    and scored once at its recording on an H200 (docs/gpu-validation.md). Its first process ran
    2048^2 bf16 matmuls flat out for 170 s (at the 700 W cap at 1,770 MHz, 690 W, 69 °C), then
    8192^2 ones for 50 s (the same cap at 1,455 MHz, 692 W, 68 °C): round 27's detectors reported
    that as a power throttle ("SM clock 1455 vs 1780 held at the cap"), a false one on a normal
    phase; a clock the mix explains (above 70% of the job's usual one at the cap, the die no hotter)
    is capped as designed now. 2 of 4 as recorded, and the two misses are the run's design:
    the flat-out phases set the job's working level at 0.96, so the stall's drop (found after 38 s)
    stayed open through the contention, which never brought the job back to 0.96; and its
    launch-bound phase lasted 61 s against the finding's 60-s hold (its utilisation 18-27%)."""
    _scored("ag", ["contention", "launch"])
