"""Hardware error detectors: XIDs, ECC double-bit errors, rising single-bit errors, PCIe replays.

Why counters are read as differences: DCGM's ECC and replay fields are totals since boot
(or since the driver loaded), so the absolute value says nothing; a jump in a double-bit
total, a single-bit rate that is growing, and a replay rate far above zero do.
``DCGM_FI_DEV_XID_ERRORS`` holds the last XID seen, so a change to a non-zero value is a
new XID; the collector's event stream (:class:`~telemetry.records.EventRecord`) gives
the same XIDs in live operation and goes through :func:`xid_finding` too.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from operator import itemgetter

from collector.detect.finding import DetectorConfig, Finding
from collector.detect.state import GpuState
from telemetry.keys import ECC_DBE_VOL_TOTAL, ECC_SBE_VOL_TOTAL, PCIE_REPLAY_COUNTER, XID_ERRORS
from telemetry.limits import MAX_PCIE_REPLAYS_PER_MIN
from telemetry.xid import describe

SBE_EVERY = 5.0  # seconds between kept single-bit totals
REPLAY_EVERY = 1.0  # ... and PCIe replay counts
REPLAY_WINDOW_S = 60.0  # replays counted against NVIDIA's per-minute limit over this window ...
REPLAY_RISES = 3  # ... which they must reach in this many separate rises of the counter
BURST_SPANS = (30.0, 60.0, 120.0, 300.0)  # the windows a burst of single-bit errors is counted in
_TS = itemgetter(0)


def xid_finding(st: GpuState, code: int, cfg: DetectorConfig) -> Finding:
    info = describe(code)
    summary = f"{st.where()} reported XID {code}: {info.meaning}"
    causes = [f"XID {code}: {info.meaning}", f"suggested action: {info.action}"]
    if info.kind == "ecc_dbe" and st.dbe is not None:
        causes.append(f"ECC double-bit total {st.dbe:.0f}")
    return Finding(info.kind, info.severity, XID_ERRORS, summary, causes, 0.0)


def xid(st: GpuState, value: float | None, ts: float, cfg: DetectorConfig) -> Finding | None:
    if value is None:
        return None
    code = int(value)
    if code != st.xid:
        st.xid = code
        if code:
            st.xid_ts = ts
            return xid_finding(st, code, cfg)
    return None


def ecc_dbe(st: GpuState, value: float | None, ts: float, cfg: DetectorConfig) -> Finding | None:
    if value is None:
        return None
    prev, st.dbe = st.dbe, value
    if prev is not None and value > prev:
        st.dbe_jump_ts, st.dbe_jump = ts, value - prev
    if ts - st.dbe_jump_ts > 0.0:
        return None
    causes = [f"ECC double-bit errors +{st.dbe_jump:.0f} (total {value:.0f})"]
    if ts - st.xid_ts < 60 and st.xid:
        causes.append(f"XID {st.xid} at the same time")
    return Finding("ecc_dbe", "critical", ECC_DBE_VOL_TOTAL,
                   f"{st.where()} had an uncorrectable (double-bit) ECC error", causes, 0.0)


def _value_at(hist: deque[tuple[float, float]], ts: float) -> tuple[float, float] | None:
    """The newest (ts, value) at or before ``ts``: found by bisection, the history being kept in
    time order (a window's start is minutes back, a scan from the newest end read most of it)."""
    i = bisect.bisect_right(hist, ts, key=_TS)
    return hist[i - 1] if i else None


def _tail_log(n: float, mu: float) -> float:
    """log P(N >= n) for a Poisson count N of mean ``mu`` < ``n``: its first term, and the rest
    bounded by a geometric series (exact enough at the tails this is asked about)."""
    k = math.floor(n)
    return -mu + k * math.log(mu) - math.lgamma(k + 1) - math.log1p(-mu / (k + 1))


def _burst(st: GpuState, hist: deque[tuple[float, float]], ts: float, value: float,
           cfg: DetectorConfig) -> tuple[float, float, float] | None:
    """(seconds, errors, errors expected) of the shortest recent window whose corrected errors a
    healthy GPU would almost never show, or None.

    Why a count against a background and not only a rising rate: a healthy GPU corrects the odd
    error (a particle strike, about one a day or less), while a weakening cell or row corrects
    them again and again within seconds; three in a minute from a GPU that corrects at most one
    an hour has odds of about one in 1.3 million, so waiting for ten in five minutes (the rising
    test) cost a minute and more (the generated suites' median was 69-86 s). The background is the
    GPU's own rate where an hour or more of history says it is higher than the configured one, so
    a GPU that has always corrected many is not reported for it forever: once is enough. Two
    separate rises are asked for, since one report may carry several errors of one event."""
    first_ts, first_val = st.sbe_first or hist[0]
    floor = cfg.sbe_background_per_h / 3600.0
    for span in BURST_SPANS:
        old = _value_at(hist, ts - span) or hist[0]  # (or as far back as it is known)
        n = value - old[1]
        if n < cfg.sbe_burst_min:
            if old is hist[0]:
                return None  # (longer windows reach no further back)
            continue
        i = bisect.bisect_right(hist, old[0], key=_TS)
        rises = sum(1 for (_, a), (_, b) in itertools.pairwise(itertools.islice(hist, i - 1, None)) if b > a)
        if rises < 2:
            continue
        known = old[0] - first_ts
        rate = max(floor, (old[1] - first_val) / known) if known >= 3600.0 else floor
        mu = rate * (ts - old[0])
        if mu < n and _tail_log(n, mu) < math.log(cfg.sbe_surprise):
            return ts - old[0], n, mu
        if old is hist[0]:
            return None
    return None


def ecc_sbe(st: GpuState, value: float | None, ts: float, cfg: DetectorConfig) -> Finding | None:
    if value is None:
        return None
    hist = st.sbe_hist
    if hist and ts - hist[-1][0] < SBE_EVERY:
        return st.sbe_finding  # judged again only when a new sample is kept
    if hist and value < hist[-1][1]:
        hist.clear()  # the volatile total was reset (a driver reload): its history says nothing now
    if not hist:
        st.sbe_first = (ts, value)
    elif st.sbe_finding is None and value == hist[0][1] and value == hist[-1][1]:
        # no new errors ever: the newest sample stands for all of them (sbe_first keeps when they
        # began), so that a burst's first errors are counted from seconds before them, not from hours
        hist[-1] = (ts, value)
        return None
    hist.append((ts, value))
    st.sbe_finding = None
    if value == hist[0][1]:
        return None  # no new errors in the whole history: the common case, and cheap
    burst = _burst(st, hist, ts, value, cfg)
    if burst is not None:
        span, n, mu = burst
        causes = [f"single-bit ECC errors +{n:.0f} in the last {span:.0f} s, where about {mu:.2g} are usual",
                  f"total {value:.0f}", "a cell or row that keeps failing: watch for row remapping and XID 63/64"]
        st.sbe_finding = Finding("ecc_sbe_rising", "warning", ECC_SBE_VOL_TOTAL,
                                 f"{st.where()} corrects single-bit ECC errors in a burst", causes, 0.0)
        return st.sbe_finding
    w = cfg.sbe_window_s
    old = _value_at(hist, ts - w)
    mid = _value_at(hist, ts - w / 2)
    if old is None or mid is None:
        return None
    first, second = mid[1] - old[1], value - mid[1]
    if first + second < cfg.sbe_min or second <= first * 1.5:
        return None
    causes = [f"single-bit ECC errors +{second:.0f} in the last {w / 120:.1f} min vs +{first:.0f} before",
              f"total {value:.0f}"]
    st.sbe_finding = Finding("ecc_sbe_rising", "warning", ECC_SBE_VOL_TOTAL,
                             f"{st.where()} corrects more and more single-bit ECC errors", causes, 0.0)
    return st.sbe_finding


def _replays_per_minute(st: GpuState, value: float, ts: float) -> Finding | None:
    """A storm slower than ``replay_rate``: more replays in the last minute than NVIDIA's health limit
    (``MAX_PCIE_REPLAYS_PER_MIN``), in at least ``REPLAY_RISES`` separate rises, so one burst of a few
    (a single link retraining) is not a storm and a marginal link's replay every few minutes is not
    either. Found on an independently written fleet: storms of 77-393 replays a minute, under the
    5-a-second rate, were missed (6 of 11)."""
    hist = st.replay_hist
    i = bisect.bisect_left(hist, ts - REPLAY_WINDOW_S, key=_TS)
    if i == 0 and ts - hist[0][0] < 0.8 * REPLAY_WINDOW_S:
        return None  # not a minute of history yet
    start = hist[i - 1] if i else hist[0]
    n = value - start[1]
    if n <= MAX_PCIE_REPLAYS_PER_MIN:
        return None
    rises = sum(1 for a, b in itertools.pairwise(itertools.islice(hist, max(i - 1, 0), None)) if b[1] > a[1])
    if rises < REPLAY_RISES:
        return None
    span = ts - start[0]
    causes = [f"{n:.0f} PCIe replays in the last {span:.0f} s, in {rises} separate rises (counter {value:.0f}): "
              f"NVIDIA's health limit is {MAX_PCIE_REPLAYS_PER_MIN} a minute",
              "link errors: check the riser, the slot and the link width/speed"]
    return Finding("pcie_replay_storm", "warning", PCIE_REPLAY_COUNTER,
                   f"{st.where()} is in a PCIe replay storm ({n:.0f} replays a minute)", causes, 0.0)


def pcie_replay(st: GpuState, value: float | None, ts: float, cfg: DetectorConfig) -> Finding | None:
    if value is None:
        return None
    hist = st.replay_hist
    if not hist or ts - hist[-1][0] >= REPLAY_EVERY:
        hist.append((ts, value))
    if value == hist[0][1]:
        return None  # no replays in the whole history: the common case, and cheap
    old = _value_at(hist, ts - 10.0)
    if old is None or ts - old[0] < 5.0:
        return None
    rate = (value - old[1]) / (ts - old[0])
    if rate < cfg.replay_rate:
        return _replays_per_minute(st, value, ts)
    causes = [f"PCIe replays {rate:.0f}/s over {ts - old[0]:.0f} s (counter {value:.0f})",
              "link errors: check the riser, the slot and the link width/speed"]
    return Finding("pcie_replay_storm", "warning", PCIE_REPLAY_COUNTER, f"{st.where()} is in a PCIe replay storm",
                   causes, 0.0)
