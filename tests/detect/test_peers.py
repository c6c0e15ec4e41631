"""Peer groups: a large service or pod gives each member a fixed, bounded sample of its peers."""

from __future__ import annotations

import random

from collector.detect.peers import MAX_PEERS, Groups
from collector.detect.state import GpuState
from telemetry.records import GpuRecord
from tests.detect.helpers import kinds, record, run, trace


def _fleet(nodes: int, per_node: int) -> list[GpuState]:
    return [GpuState(f"n{n}", f"GPU-n{n}-{g}") for n in range(nodes) for g in range(per_node)]


def test_a_small_group_is_compared_whole() -> None:
    groups = Groups()
    members = _fleet(4, 8)[: MAX_PEERS + 1]
    for st in members:
        groups.add("ns/svc", st)
    assert set(p.gpu for p in groups.candidates("ns/svc", members[0])) == {st.gpu for st in members}
    assert list(groups.candidates("ns/other", members[0])) == []


def test_a_large_group_gives_a_bounded_sample_own_node_first_the_same_in_any_order() -> None:
    members = _fleet(50, 8)  # a service of 400 replicas
    one, other = Groups(), Groups()
    for st in members:
        one.add("ns/svc", st)
    shuffled = members[:]
    random.Random(3).shuffle(shuffled)
    for st in shuffled:
        other.add("ns/svc", st)
    me = members[123]
    sample = list(one.candidates("ns/svc", me))
    assert len(sample) == MAX_PEERS and me not in sample
    assert [p.node for p in sample[:7]] == [me.node] * 7  # its node's other 7 GPUs first
    assert len({p.node for p in sample[7:]}) >= 20  # the rest spread over the fleet
    assert [p.gpu for p in other.candidates("ns/svc", me)] == [p.gpu for p in sample]  # every replica agrees


def test_a_sample_follows_membership() -> None:
    groups = Groups()
    members = _fleet(10, 8)
    for st in members:
        groups.add("ns/svc", st)
    me = members[0]
    gone = next(iter(groups.candidates("ns/svc", me)))
    groups.remove("ns/svc", gone.gpu)
    assert gone not in list(groups.candidates("ns/svc", me))
    for st in members:
        groups.remove("ns/svc", st.gpu)
    assert list(groups.candidates("ns/svc", me)) == [] and "ns/svc" not in groups.members


def test_a_straggler_in_a_pod_of_64_gpus_is_found_from_its_sample() -> None:
    def make(t: float, g: int) -> GpuRecord:
        node, gpu = divmod(g, 8)
        sm = 0.5 if (g == 29 and t >= 120) else 0.9
        return record(t, gpu, sm=sm, node=f"n{node}", pod="big-job", pid=100 + g)

    found = kinds(run(trace(240, 64, make)))
    assert found == [("straggler", "GPU-n3-5")]


def test_every_sample_is_full_distinct_and_its_own_node_first() -> None:
    """Whatever the group's shape (a few large nodes, many small ones): a sample holds min(32, N - 1)
    distinct peers, never the GPU itself, its own node's first."""
    rng = random.Random(11)
    for _ in range(40):
        nodes, per_node = rng.randint(1, 60), rng.randint(1, 40)
        members = _fleet(nodes, per_node)
        if len(members) <= MAX_PEERS + 1:
            continue
        groups = Groups()
        for st in members:
            groups.add("ns/svc", st)
        for me in rng.sample(members, 5):
            sample = list(groups.candidates("ns/svc", me))
            assert len(sample) == min(MAX_PEERS, len(members) - 1)
            assert me not in sample and len({p.gpu for p in sample}) == len(sample)
            own = min(per_node - 1, MAX_PEERS)
            assert all(p.node == me.node for p in sample[:own])
            assert all(p.node != me.node for p in sample[own:])
