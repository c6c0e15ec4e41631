"""The wire contract between agent and collector: messages, their type header, the event encoding.

Why one module: the agent writes Kafka messages and the collector reads them, and until
now each side spelled the header names (``type``, ``node``, ``instance``), their values
(``frame``, ``event``) and the event record's JSON on its own; a typo on one side would
have been a dead letter on the other. Both sides (and ``gpuwatch up``'s in-process queue)
import these definitions instead. The topic names are :mod:`telemetry.control`'s
(``DEFAULT_TOPIC``, ``dlq_topic``, ``control_topic``).

A message is an opaque key (its agent's node: :func:`partition_key`), a value and headers.
The value of a ``frame`` is a :mod:`telemetry.codec` frame; that of an
``event`` is one JSON object, an :class:`~telemetry.records.EventRecord`
(:func:`encode_event`, :func:`decode_event`); that of a ``profile`` (a CPU profile the
agent took because an anomaly opened) is one JSON object too
(:class:`telemetry.profile.ProfileResult`); that of ``kernels`` (one window of a CUPTI probe's
kernel statistics, with the pod's identity) is one JSON object too
(:class:`telemetry.kernels.KernelWindow`). A ``keyframe_request`` and a
``profile_request`` travel the other way, on the control topic
(:class:`telemetry.control.KeyframeRequest`, :class:`telemetry.control.ProfileRequest`).
A message without a ``type`` header is read as a frame, as the first agents sent them.
"""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass
from typing import Final, TypeGuard

from telemetry.records import EventRecord

Headers = tuple[tuple[str, bytes], ...]

#: the header that names a message's type (:class:`MessageType`)
TYPE_HEADER: Final = "type"
#: the headers naming the stream: the agent's node and its process's random instance id (UTF-8)
NODE_HEADER: Final = "node"
INSTANCE_HEADER: Final = "instance"


class MessageType(enum.Enum):
    """The value of the ``type`` header."""

    FRAME = "frame"
    EVENT = "event"
    KEYFRAME_REQUEST = "keyframe_request"
    PROFILE_REQUEST = "profile_request"
    PROFILE = "profile"
    KERNELS = "kernels"

    @property
    def header(self) -> bytes:
        return self.value.encode()

    @classmethod
    def of(cls, raw: bytes | None) -> MessageType | None:
        """The type a header value names; a missing header is a frame; None for an unknown type."""
        if raw is None:
            return cls.FRAME
        return _BY_HEADER.get(raw)


_BY_HEADER: Final = {t.header: t for t in MessageType}


@dataclass(frozen=True, slots=True)
class Message:
    """One Kafka record as the agent sends it: opaque key (:func:`partition_key`), value and headers."""

    key: bytes
    value: bytes
    headers: Headers = ()

    @property
    def size(self) -> int:
        """Bytes of key, value and headers (what the memory bounds count)."""
        return len(self.key) + len(self.value) + sum(len(n) + len(v) for n, v in self.headers)


def partition_key(node: str) -> bytes:
    """The Kafka key of every message an agent sends: its node's name.

    Why the node, not the GPU: Kafka keeps one key's messages in order on one partition, and
    a collector replica reads whole partitions. Keyed by the node, a pod's GPUs (which share a
    node) and the node's events reach the same replica, so the detectors that compare a pod's
    GPUs (a straggler, a pod-wide fall) see all of them however many replicas share the topic;
    keyed by GPU, a pod's GPUs were spread over partitions, and so over replicas, and a
    replica could hold one GPU of a pod. Each GPU's frames stay in order (one node, one key).
    The cost: a node's GPUs weigh on one partition, so partitions balance by node (a fleet has
    hundreds to thousands), not by GPU. docs/architecture.md says what this leaves: peers that
    share a service across nodes.
    """
    return node.encode()


def stream_headers(kind: MessageType, node: str, instance: str) -> Headers:
    """The Kafka headers of an agent message: its type, and the stream's node and agent instance."""
    return ((TYPE_HEADER, kind.header), (NODE_HEADER, node.encode()), (INSTANCE_HEADER, instance.encode()))


def encode_event(event: EventRecord) -> bytes:
    """The value of an ``event`` message."""
    return json.dumps(event.to_dict()).encode()


def decode_event(value: bytes) -> EventRecord:
    """An ``event`` message's record; :class:`ValueError` names what was wrong."""
    try:
        obj = json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    except RecursionError:
        raise ValueError("not JSON this decoder takes: nested too deeply") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    for key, typ in (("ts", (int, float)), ("node", str), ("gpu", str), ("kind", str)):
        if not isinstance(obj.get(key), typ) or isinstance(obj.get(key), bool):
            raise ValueError(f"field {key!r} missing or of the wrong type")
    code = obj.get("code")
    if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
        raise ValueError("field 'code' must be an integer")
    detail = obj.get("detail", "")
    if not isinstance(detail, str):
        raise ValueError("field 'detail' must be a string")
    return EventRecord(float(obj["ts"]), obj["node"], obj["gpu"], obj["kind"], code, detail)


def finite_number(value: object) -> TypeGuard[int | float]:
    """Whether a decoded JSON value is a finite int or float (not a bool). JSON allows integers
    like 10**400, which ``math.isfinite`` refuses with OverflowError: such a value is no number
    a field takes, and saying so is the decoder's job, not an exception's."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def json_object(raw: bytes, what: str, error: type[ValueError] = ValueError) -> dict[str, object]:
    """``raw`` as one JSON object; ``error`` (``"<what> is not JSON: ..."``) when it is not."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{what} is not JSON: {exc}") from None
    except RecursionError:  # json's C scanner on a few thousand nested arrays: hostile input, not a bug
        raise error(f"{what} is not JSON this decoder takes: nested too deeply") from None
    if not isinstance(body, dict):
        raise error(f"{what} is not a JSON object")
    return body
