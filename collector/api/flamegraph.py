"""Folded stacks to the data frame of Grafana's flame graph panel (the nested-set form).

Why this shape: Grafana's flame graph panel (and ``@grafana/flamegraph``) reads a data
frame with the fields ``level`` (number: depth, 0 for the root), ``value`` (number: samples
in the node and below), ``self`` (number: samples in the node itself) and ``label`` (string:
the frame), one row per node, in depth-first order (a node, then its subtrees), with a
single root (``packages/grafana-flamegraph/src/FlameGraph/dataTransform.ts``: ``checkFields``
names exactly those fields and types, and ``nestedSetToLevels`` rebuilds the tree from the
order and the levels alone, assuming one root). The web page draws the same arrays.

Children are ordered by label, as flamegraph.pl does, so the same stacks give the same frame.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

ROOT = "total"


@dataclass(slots=True)
class _Node:
    value: int = 0
    self_value: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FlameGraph:
    """Parallel arrays, one entry per node, depth first."""

    level: list[int]
    value: list[int]
    self_value: list[int]
    label: list[str]


def build(stacks: Iterable[tuple[str, int]]) -> FlameGraph:
    """The nested set of folded ``stacks`` (``root;...;leaf``, samples) under one ``total`` root."""
    root = _Node()
    for stack, count in stacks:
        if count <= 0:
            continue
        root.value += count
        node = root
        for frame in stack.split(";"):
            node = node.children.setdefault(frame, _Node())
            node.value += count
        node.self_value += count
    root.self_value = root.value - sum(c.value for c in root.children.values())
    out = FlameGraph([], [], [], [])
    todo: list[tuple[int, str, _Node]] = [(0, ROOT, root)]
    while todo:
        level, label, node = todo.pop()
        out.level.append(level)
        out.value.append(node.value)
        out.self_value.append(node.self_value)
        out.label.append(label)
        todo.extend((level + 1, name, child) for name, child in sorted(node.children.items(), reverse=True))
    return out


def data_frame(graph: FlameGraph, meta: dict[str, Any]) -> dict[str, Any]:
    """The data frame (Grafana's ``DataFrameDTO``: name, meta, fields of name/type/values)."""
    samples = {"unit": "short"}
    return {
        "name": "profile",
        "meta": {"preferredVisualisationType": "flamegraph", "custom": meta},
        "fields": [
            {"name": "level", "type": "number", "config": {}, "values": graph.level},
            {"name": "value", "type": "number", "config": samples, "values": graph.value},
            {"name": "self", "type": "number", "config": samples, "values": graph.self_value},
            {"name": "label", "type": "string", "config": {}, "values": graph.label},
        ],
    }
