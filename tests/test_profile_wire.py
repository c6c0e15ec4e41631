"""The profile request and answer on the wire: round trips, strict decoding that names the field,
the control listener's dispatch, and the flame-graph data frame built from folded stacks."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.control import ControlListener
from agent.kafka_settings import KafkaSettings
from collector.api.flamegraph import ROOT, build, data_frame
from telemetry.control import ControlError, KeyframeRequest, ProfileRequest, decode_control
from telemetry.profile import NO_PYTHON_FRAMES, STATUSES, ProcessProfile, ProfileResult, parse_folded

text = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), min_size=1, max_size=20)
frame = st.text(st.characters(blacklist_characters=";\n\0 ", blacklist_categories=("Cs",)), min_size=1, max_size=8)
stack = st.lists(frame, min_size=1, max_size=6).map(";".join)
stacks = st.lists(st.tuples(stack, st.integers(1, 10_000)), max_size=30)
requests = st.builds(ProfileRequest, text, text, st.integers(1, 2**63 - 1),
                     st.floats(allow_nan=False, allow_infinity=False), st.none() | text)
processes = st.builds(ProcessProfile, st.integers(1, 2**31 - 1), st.sampled_from(STATUSES), text, text,
                      stacks.map(tuple))
results = st.builds(ProfileResult, text, text, st.integers(1, 2**63 - 1),
                    st.floats(allow_nan=False, allow_infinity=False), st.lists(processes, max_size=4).map(tuple),
                    st.sampled_from(STATUSES), text)


@settings(max_examples=80, deadline=None)
@given(requests)
def test_a_profile_request_round_trips(request: ProfileRequest) -> None:
    assert ProfileRequest.decode(request.encode()) == request
    assert decode_control(request.encode()) == request


@settings(max_examples=80, deadline=None)
@given(results)
def test_a_profile_answer_round_trips(result: ProfileResult) -> None:
    assert ProfileResult.decode(result.encode()) == result


@settings(max_examples=120, deadline=None)
@given(st.one_of(st.binary(max_size=200),
                 st.dictionaries(st.sampled_from(["type", "node", "gpu", "anomaly", "ts", "instance", "reason"]),
                                 st.one_of(st.none(), st.text(max_size=5), st.floats(), st.integers(), st.booleans()))
                 .map(lambda d: json.dumps({"type": "profile_request", **d}).encode())))
def test_any_control_message_decodes_or_raises_one_named_error(raw: bytes) -> None:
    try:
        decoded = decode_control(raw)
    except ControlError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("control message")
    else:
        assert isinstance(decoded, KeyframeRequest | ProfileRequest)


@settings(max_examples=120, deadline=None)
@given(st.one_of(st.binary(max_size=300), results.map(lambda r: json.loads(r.encode())).flatmap(
    lambda body: st.sampled_from(sorted(body)).flatmap(
        lambda key: st.one_of(st.none(), st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=2))
        .map(lambda bad: json.dumps({**body, key: bad}).encode())))))
def test_any_profile_answer_decodes_or_raises_a_value_error_naming_the_field(raw: bytes) -> None:
    try:
        ProfileResult.decode(raw)
    except ValueError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("profile message")


@pytest.mark.parametrize(("change", "field"), [
    ({"anomaly": 0}, "'anomaly'"), ({"anomaly": True}, "'anomaly'"), ({"gpu": ""}, "'gpu'"), ({"ts": "x"}, "'ts'"),
    ({"node": None}, "'node'"), ({"instance": 5}, "'instance'"), ({"type": "nope"}, "type 'nope'"),
])
def test_a_bad_request_field_is_named(change: dict[str, object], field: str) -> None:
    body = {**json.loads(ProfileRequest("n", "GPU-1", 3, 1.0).encode()), **change}
    with pytest.raises(ControlError, match=field):
        decode_control(json.dumps(body).encode())


def test_a_bad_answer_field_is_named() -> None:
    good = json.loads(ProfileResult("n", "GPU-1", 3, 1.0, (ProcessProfile(5, "captured", stacks=(("a;b", 2),)),))
                      .encode())
    for path, bad, named in ((("processes", 0, "stacks", 0), ["a;b", 0], "processes[0].stacks[0]"),
                             (("processes", 0, "status"), "sleepy", "processes[0].status"),
                             (("processes", 0, "pid"), -1, "processes[0].pid"),
                             (("reason",), "a\0b", "'reason'")):
        body = json.loads(json.dumps(good))
        target = body
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = bad
        with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
            ProfileResult.decode(json.dumps(body).encode())
    with pytest.raises(ValueError, match="line 2"):
        parse_folded("a;b 3\nno count here\n")
    assert parse_folded("a;b 3\n\na;b 2\nc (x.py:1) 1\n") == [("a;b", 5), ("c (x.py:1)", 1)]


def test_the_control_listener_hands_profile_requests_to_the_profiler() -> None:
    got: list[str | None] = []
    profiles: list[ProfileRequest] = []
    listener = ControlListener(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "node-a", "abcd", got.append,
                               on_profile=profiles.append)
    for request in (ProfileRequest("node-a", "GPU-1", 7, 1.0), ProfileRequest("node-b", "GPU-1", 8, 1.0),
                    ProfileRequest("node-a", "GPU-2", 9, 1.0, instance="0000"),
                    KeyframeRequest("node-a", "GPU-1", "base lost", 1.0)):
        listener.handle(request.encode(), "test")
    listener.handle(b'{"type": "profile_request", "node": "node-a"}', "test")
    assert [p.anomaly for p in profiles] == [7] and got == ["GPU-1"]
    assert listener.stats().malformed_total == 1


def _check_nested_set(level: list[int], value: list[int], self_value: list[int]) -> None:
    """Grafana's reading of the arrays: depth first from one root, each node's children after it."""
    assert level[0] == 0 and level.count(0) == 1
    children: dict[int, list[int]] = {i: [] for i in range(len(level))}
    path: list[int] = []
    for i, lv in enumerate(level):
        assert lv <= len(path), "a level may only go one deeper than its parent's"
        del path[lv:]
        if path:
            children[path[-1]].append(i)
        path.append(i)
    for i, kids in children.items():
        assert sum(value[k] for k in kids) <= value[i]
        assert self_value[i] == value[i] - sum(value[k] for k in kids) >= 0


@settings(max_examples=80, deadline=None)
@given(stacks)
def test_the_flame_graph_is_a_nested_set_whose_values_add_up(folded: list[tuple[str, int]]) -> None:
    graph = build(folded)
    _check_nested_set(graph.level, graph.value, graph.self_value)
    assert graph.label[0] == ROOT and graph.value[0] == sum(n for _, n in folded)
    leaves = {}  # every stack's samples are the self of the node its path ends at
    for s, n in folded:
        leaves[s] = leaves.get(s, 0) + n
    assert sum(graph.self_value) == sum(leaves.values())
    frame = data_frame(graph, {"anomaly_id": "an_x"})
    assert [(f["name"], f["type"]) for f in frame["fields"]] == [
        ("level", "number"), ("value", "number"), ("self", "number"), ("label", "string")]
    assert len({len(f["values"]) for f in frame["fields"]}) == 1


def test_a_small_flame_graph_exactly() -> None:
    graph = build([("main;load;read", 3), ("main;step", 5), ("main", 1), ("idle", 2)])
    assert list(zip(graph.level, graph.label, graph.value, graph.self_value, strict=True)) == [
        (0, "total", 11, 0), (1, "idle", 2, 2), (1, "main", 9, 1), (2, "load", 3, 0), (3, "read", 3, 3),
        (2, "step", 5, 5)]


def test_samples_of_a_thread_without_python_frames_count_under_their_own_name() -> None:
    """py-spy on the real H200 (a PyTorch job, ``--idle``) wrote `` 498``: a count and no frames,
    the samples of a native worker thread. They are kept, not a failed capture."""
    assert parse_folded("a;b 3\n 498\n") == [("a;b", 3), (NO_PYTHON_FRAMES, 498)]
    with pytest.raises(ValueError, match="line 2"):
        parse_folded(" \t\n x\n")  # no frames and no count
