"""GPU facts and the wire contract are written once, in telemetry/, and every user agrees with them.

The XID table follows its own rule (NVIDIA's immediate action decides the severity); every
XID that code or the incident generator uses is in it; the clock-event reason users
(agent transitions, detectors, the API, the alert rules and dashboards) agree with the
flag type; and a lint over agent/, collector/ and gpuwatch/ fails on a clock-reason bit
spelled as a number, a reason-name table, or a header string spelled by hand.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.transitions import GpuTransitions
from collector.detect import throttle
from telemetry.clocks import POWER, THERMAL, THROTTLES, ClockEventReason, members, names
from telemetry.keys import CLOCKS_EVENT_REASONS as REASONS_KEY
from telemetry.records import EventRecord
from telemetry.wire import Message, MessageType, decode_event, encode_event, stream_headers
from telemetry.xid import GPU_LOST, OUT_OF_SERVICE, XIDS, describe

ROOT = Path(__file__).resolve().parents[1]
SIDES = ("agent", "collector", "gpuwatch")


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for side in SIDES for p in sorted((ROOT / side).rglob("*.py"))
            if "_pb2" not in p.name]


# ---- XIDs ----

def test_xid_severity_follows_nvidias_immediate_action() -> None:
    for x in XIDS.values():
        assert x.mnemonic and x.meaning and x.action and x.nvidia_action, x
        if x.nvidia_action in OUT_OF_SERVICE:
            assert x.severity == "critical", x
        else:
            assert x.severity != "critical", x
    # the four codes the two old tables disagreed on
    assert [XIDS[c].severity for c in (63, 92, 94, 140)] == ["warning", "warning", "warning", "critical"]
    assert GPU_LOST.code == 79 and GPU_LOST.kind == "gpu_lost" and describe(48).kind == "ecc_dbe"
    unknown = describe(100_000)
    assert unknown.severity == "warning" and unknown.code == 100_000


def test_every_xid_used_anywhere_is_in_the_table() -> None:
    from tests.support.incidents.generate import XID_CODES

    used = set(XID_CODES) | {48, 79}  # the generator's ecc_dbe and gpu_lost incidents
    for path in (ROOT / "tests/support/incidents/generate.py", ROOT / "benchmarks/incidents/heldout.py"):
        used |= {int(c) for c in re.findall(r"\bxid\s*=\s*(\d+)", path.read_text())}
    assert used - {0} <= set(XIDS), sorted(used - {0} - set(XIDS))
    # agent/ and collector/ name XIDs only through the table: no `xid == 79`, no `describe(79)`
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name | ast.Attribute) and \
                    any(isinstance(c, ast.Constant) and isinstance(c.value, int) and c.value > 0
                        for c in node.comparators):
                name = node.left.id if isinstance(node.left, ast.Name) else node.left.attr
                assert name.lower() != "xid", f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}"
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("describe") and node.args \
                    and isinstance(node.args[0], ast.Constant):
                raise AssertionError(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")


# ---- clock-event reasons ----

def test_flag_type_is_nvmls_bits() -> None:
    assert [(r.name, int(r)) for r in ClockEventReason] == [
        ("GPU_IDLE", 0x1), ("APPLICATIONS_CLOCKS_SETTING", 0x2), ("SW_POWER_CAP", 0x4), ("HW_SLOWDOWN", 0x8),
        ("SYNC_BOOST", 0x10), ("SW_THERMAL", 0x20), ("HW_THERMAL", 0x40), ("HW_POWER_BRAKE", 0x80),
        ("DISPLAY_CLOCK_SETTING", 0x100)]
    assert all(r.meaning for r in ClockEventReason)
    assert [r.name for r in ClockEventReason if r.throttles] == [r.name for r in members(THROTTLES)]
    assert not ClockEventReason.GPU_IDLE.throttles and ClockEventReason.SYNC_BOOST.throttles
    assert names(THERMAL) == "SW_THERMAL|HW_THERMAL" and names(0) == "none" and names(0x200) == "none"
    assert THERMAL | POWER | ClockEventReason.HW_POWER_BRAKE | ClockEventReason.SYNC_BOOST == THROTTLES


def test_agent_emits_throttle_events_for_exactly_the_throttling_bits() -> None:
    started: dict[int, str] = {}
    for reason in ClockEventReason:
        tr = GpuTransitions("n", "G", hold=0.0)
        for ts in (0.0, 1.0):
            for e in tr.update(ts, {REASONS_KEY: int(reason)}):
                assert e.kind == "throttle_start" and e.code == int(reason)
                started[int(reason)] = e.detail
    assert set(started) == {int(r) for r in members(THROTTLES)}
    assert all(detail == f"clock event reason {ClockEventReason(bit).name} began" for bit, detail in started.items())


def test_detectors_read_the_flag_types_groups() -> None:
    assert (throttle.THERMAL, throttle.POWER) == (THERMAL, POWER)
    assert {throttle._HW_THERMAL, throttle._HW_SLOWDOWN, throttle.BRAKE} == {
        ClockEventReason.HW_THERMAL, ClockEventReason.HW_SLOWDOWN, ClockEventReason.HW_POWER_BRAKE}


def _promql_bits(expr: str) -> set[int]:
    """The reason bits a `floor(X / a) % b` expression (or a sum / or of them) tests."""
    bits: set[int] = set()
    for a, b in re.findall(r"floor\(DCGM_FI_DEV_CLOCKS_EVENT_REASONS[^/]*/ (\d+)\) % (\d+)", expr):
        low = int(a).bit_length() - 1
        bits |= {1 << (low + i) for i in range(int(b).bit_length() - 1)}
    return bits


def test_alert_rules_and_dashboards_test_the_flag_types_bits() -> None:
    rules = (ROOT / "deploy/helm/gpuwatch/templates/prometheusrule.yaml").read_text()
    thermal = re.search(r"expr: (.*/ 32.*)", rules)
    power = re.search(r"expr: (.*/ 128.*)", rules)
    assert thermal and power
    assert _promql_bits(thermal.group(1)) == {int(r) for r in members(THERMAL)}
    assert _promql_bits(power.group(1)) == {int(r) for r in members(POWER & ~ClockEventReason.SW_POWER_CAP
                                                                     | ClockEventReason.HW_POWER_BRAKE)}
    generated = (ROOT / "dashboards/generate.py").read_text()
    throttling = re.search(r'f"count\(max by \(UUID\) \((floor\(DCGM_FI_DEV_CLOCKS_EVENT_REASONS.*?% \d+)\)', generated)
    assert throttling and _promql_bits(throttling.group(1).replace("{{{f}}}", "")) == {
        int(r) for r in members(THROTTLES)}


def test_the_api_serves_the_telemetry_tables() -> None:
    from collector.api.routes_facts import _FACTS

    assert [(x.code, x.severity, x.action) for x in _FACTS.xids] == [
        (x.code, x.severity, x.action) for x in XIDS.values()]
    assert [(r.bit, r.name, r.throttles) for r in _FACTS.clock_event_reasons] == [
        (int(r), r.name, r.throttles) for r in ClockEventReason]
    page = (ROOT / "collector/api/static/app.js").read_text()
    assert "/gpu-facts" in page
    assert not re.search(r"SW_POWER_CAP|HW_SLOWDOWN|fallen off the bus", page), "a copy of the tables in app.js"


# ---- lint: no second copy outside telemetry/ ----

_REASON_NAMES = {r.name for r in ClockEventReason}
_TYPE_VALUES = {t.value for t in MessageType}


def test_no_module_outside_telemetry_spells_reason_bits_or_wire_strings() -> None:
    problems: list[str] = []
    for path, tree in _modules():
        where = path.relative_to(ROOT)
        for node in ast.walk(tree):
            # a mask tested against a number: `reasons & 0x40`
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd | ast.BitOr):
                sides = (node.left, node.right)
                if any(isinstance(s, ast.Constant) and isinstance(s.value, int) for s in sides) and \
                        any("reason" in ast.unparse(s).lower() for s in sides):
                    problems.append(f"{where}:{node.lineno}: clock-reason bit as a number: {ast.unparse(node)}")
            # a table of reason names
            if isinstance(node, ast.Constant) and node.value in _REASON_NAMES:
                problems.append(f"{where}:{node.lineno}: clock-reason name {node.value!r} spelled by hand")
            # a header spelled by hand: ("type", b"frame"), header("type"), b"event"
            if isinstance(node, ast.Constant) and isinstance(node.value, bytes) and \
                    node.value.decode(errors="replace") in _TYPE_VALUES:
                problems.append(f"{where}:{node.lineno}: message type {node.value!r} spelled by hand")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args and \
                    node.func.attr in ("header", "header_text") and isinstance(node.args[0], ast.Constant):
                problems.append(f"{where}:{node.lineno}: header name spelled by hand: {ast.unparse(node)}")
            if isinstance(node, ast.Tuple) and len(node.elts) == 2 and isinstance(node.elts[0], ast.Constant) and \
                    node.elts[0].value in ("type", "node", "instance") and not isinstance(node.elts[1], ast.Constant):
                problems.append(f"{where}:{node.lineno}: a Kafka header built by hand: {ast.unparse(node)}")
            if isinstance(node, ast.Constant) and node.value == "gpu.telemetry":
                problems.append(f"{where}:{node.lineno}: topic name spelled by hand (telemetry.control.DEFAULT_TOPIC)")
    assert not problems, "\n".join(problems)


# ---- wire ----

def test_message_types_and_headers() -> None:
    headers = stream_headers(MessageType.EVENT, "node-a", "0123456789abcdef")
    assert dict(headers) == {"type": b"event", "node": b"node-a", "instance": b"0123456789abcdef"}
    assert MessageType.of(b"frame") is MessageType.FRAME and MessageType.of(None) is MessageType.FRAME
    assert MessageType.of(b"keyframe_request") is MessageType.KEYFRAME_REQUEST and MessageType.of(b"frames") is None
    assert Message(b"k", b"vv", headers).size == 3 + sum(len(n) + len(v) for n, v in headers)


_text = st.text(min_size=1, max_size=20)


@given(st.builds(EventRecord, st.floats(allow_nan=False, allow_infinity=False), _text, _text, _text,
                 st.none() | st.integers(-(2**31), 2**31 - 1), st.text(max_size=40)))
def test_event_encoding_round_trips(event: EventRecord) -> None:
    assert decode_event(encode_event(event)) == event


@pytest.mark.parametrize(("value", "reason"), [
    (b"{not json", "not JSON"), (b"[1]", "not a JSON object"), (b'{"ts": 1, "node": "n", "gpu": "g"}', "'kind'"),
    (b'{"ts": true, "node": "n", "gpu": "g", "kind": "xid"}', "'ts'"),
    (b'{"ts": 1, "node": "n", "gpu": "g", "kind": "xid", "code": "79"}', "'code'"),
    (b'{"ts": 1, "node": "n", "gpu": "g", "kind": "xid", "detail": 5}', "'detail'"),
])
def test_a_bad_event_is_rejected_with_the_field(value: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        decode_event(value)
