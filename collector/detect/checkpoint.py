"""A node's detector state as bytes, and back: what lets baselines and open anomalies outlive a
collector process (a restart, a rolling upgrade, a partition moved to another replica).

Why pickle, and why restricted: the state is a few dozen small slotted objects per GPU
(levels, baselines, deques of recent samples, the general-purpose detector's context
tables), and pickle keeps their sharing and types without a hand-written schema for each.
Loading is restricted to the classes of ``collector.detect`` and ``collections.deque``
(:class:`_Loader`), so a row written by someone else cannot name any other callable.

Why a *shape*: a slotted dataclass pickles its fields by position, so a state saved by a
build whose classes had other fields would load into the wrong ones. Each blob is saved
with the shape of every class in it (its fields or slots, :func:`shape_of`); a blob whose
shape is not the running build's is refused (:class:`StateRefused`) and that node's
baselines start over, which is what a first start does too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import pickle
import zlib
from collections import deque
from typing import Any

from collector.detect.engine import NodeState

__all__ = ["StateRefused", "dump", "load", "shape_of"]

_PREFIX = "collector.detect."
_EXTRA: dict[tuple[str, str], type] = {("collections", "deque"): deque}
_SHAPES: dict[type, str] = {}


class StateRefused(ValueError):
    """A saved state this build cannot take: another shape, or not a state at all."""


def _fields(cls: type) -> tuple[str, ...]:
    if dataclasses.is_dataclass(cls):
        return tuple(f.name for f in dataclasses.fields(cls))
    slots: list[str] = []
    for klass in reversed(cls.__mro__):
        declared = klass.__dict__.get("__slots__", ())
        slots.extend((declared,) if isinstance(declared, str) else declared)
    if not slots:
        raise StateRefused(f"{cls.__qualname__} keeps its state in a __dict__: give it __slots__ to checkpoint it")
    return tuple(slots)


def shape_of(cls: type) -> str:
    """The class's name and its fields (or slots), as a short digest."""
    shape = _SHAPES.get(cls)
    if shape is None:
        text = f"{cls.__module__}.{cls.__qualname__}({','.join(_fields(cls))})"
        shape = _SHAPES[cls] = hashlib.sha1(text.encode()).hexdigest()[:12]
    return shape


class _Saver(pickle.Pickler):
    """Notes the class of every object it pickles (for the blob's shape), and refuses any class
    the loader would refuse."""

    def __init__(self, out: io.BytesIO) -> None:
        super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
        self.classes: set[type] = set()

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type):  # a class, named by the objects of it
            if not obj.__module__.startswith(_PREFIX) and (obj.__module__, obj.__qualname__) not in _EXTRA:
                raise StateRefused(f"{obj.__module__}.{obj.__qualname__} cannot be part of a detector state")
            return NotImplemented
        cls = type(obj)
        if cls.__module__.startswith(_PREFIX):
            self.classes.add(cls)
        elif cls.__module__ != "builtins" and (cls.__module__, cls.__qualname__) not in _EXTRA:
            raise StateRefused(f"{cls.__module__}.{cls.__qualname__} cannot be part of a detector state")
        return NotImplemented


class _Loader(pickle.Unpickler):
    """Loads detector classes and deques only, and notes the classes it loaded."""

    def __init__(self, data: io.BytesIO) -> None:
        super().__init__(data)
        self.classes: set[type] = set()

    def find_class(self, module: str, name: str) -> Any:
        extra = _EXTRA.get((module, name))
        if extra is not None:
            return extra
        if module.startswith(_PREFIX) and "." not in name:
            obj = super().find_class(module, name)
            if isinstance(obj, type):
                self.classes.add(obj)
                return obj
        raise StateRefused(f"a detector state may not name {module}.{name}")


def dump(state: NodeState) -> tuple[bytes, str]:
    """``state`` as compressed bytes, and the shape to save beside it."""
    out = io.BytesIO()
    saver = _Saver(out)
    saver.dump(state)
    return zlib.compress(out.getvalue(), 1), ",".join(sorted(shape_of(cls) for cls in saver.classes))


def load(blob: bytes, shape: str) -> NodeState:
    """The state ``dump`` made; :class:`StateRefused` when it is of another shape or not one."""
    try:
        data = zlib.decompress(blob)
    except zlib.error as exc:
        raise StateRefused(f"not a compressed detector state ({exc})") from None
    loader = _Loader(io.BytesIO(data))
    try:
        state = loader.load()
    except StateRefused:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a damaged blob raises, it is refused
        raise StateRefused(f"not a detector state ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, NodeState):
        raise StateRefused(f"not a detector state (a {type(state).__name__})")
    if {shape_of(cls) for cls in loader.classes} != set(shape.split(",")):
        raise StateRefused("saved by a build whose detector classes had other fields")
    return state
