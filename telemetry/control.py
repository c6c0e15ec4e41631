"""The collector-to-agent control channel: topic names, the keyframe and the profile request.

Frames are deltas against the previous frame of the same stream, so a collector that lost
a stream's base (a broker that came back empty, a replayed old keyframe, a dead-lettered
frame) cannot decode anything until the next scheduled keyframe, which for an idle GPU is
minutes away. Instead it asks: it produces a :class:`KeyframeRequest` to the control topic
(``<telemetry topic>.control``), keyed by node; every agent reads that topic from its end,
keeps the requests for its own node (and instance, when given) and makes the named GPU's
next frame a keyframe. In ``gpuwatch up`` the same request is delivered in process.

The same channel carries a :class:`ProfileRequest`: a ``throughput_drop`` opened on a GPU,
so the collector asks that GPU's agent for a short CPU profile of the Python processes on
it (:mod:`agent.profiling`, opt-in); the answer comes back on the telemetry topic
(:class:`telemetry.profile.ProfileResult`). :func:`decode_control` reads either.

The wire form is one small JSON object, so a request is readable with any Kafka tool and
a malformed one is rejected with a message that names the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from telemetry.wire import TYPE_HEADER, Headers, MessageType, finite_number, json_object

#: The telemetry topic unless configured (agent and collector settings default to it).
DEFAULT_TOPIC = "gpu.telemetry"
CONTROL_HEADERS: Headers = ((TYPE_HEADER, MessageType.KEYFRAME_REQUEST.header),)
PROFILE_REQUEST_HEADERS: Headers = ((TYPE_HEADER, MessageType.PROFILE_REQUEST.header),)


def dlq_topic(topic: str) -> str:
    """The dead-letter topic of a telemetry topic."""
    return f"{topic}.dlq"


def control_topic(topic: str) -> str:
    """The control topic (collector to agents) of a telemetry topic."""
    return f"{topic}.control"


class ControlError(ValueError):
    """A control message that cannot be read; the text names what was wrong."""


class _ToAgent:
    """What a request to one agent has: the node (and instance, None: any agent there) it is for."""

    __slots__ = ()
    node: str
    instance: str | None

    def matches(self, node: str, instance: str | None) -> bool:
        """Whether an agent on ``node`` with ``instance`` should act on this request."""
        return self.node == node and (self.instance is None or self.instance == instance)

    def key(self) -> bytes:
        """Its Kafka key: the node, so one agent's requests stay in order."""
        return self.node.encode()


@dataclass(frozen=True, slots=True)
class KeyframeRequest(_ToAgent):
    """Ask the agent of ``node`` (and ``instance``, if set) for a keyframe of ``gpu``
    (of every GPU when ``gpu`` is None)."""

    node: str
    gpu: str | None
    reason: str
    ts: float
    instance: str | None = None

    def encode(self) -> bytes:
        return _encode(MessageType.KEYFRAME_REQUEST, self.instance, node=self.node, gpu=self.gpu, reason=self.reason,
                       ts=self.ts)

    @classmethod
    def decode(cls, raw: bytes) -> KeyframeRequest:
        return cls._from(_object(raw, MessageType.KEYFRAME_REQUEST))

    @classmethod
    def _from(cls, body: dict[str, object]) -> KeyframeRequest:
        node, gpu, reason, ts, instance = (body.get(k) for k in ("node", "gpu", "reason", "ts", "instance"))
        if not isinstance(node, str) or not node:
            raise ControlError("control message field 'node' must be a non-empty string")
        if gpu is not None and not isinstance(gpu, str):
            raise ControlError("control message field 'gpu' must be a string or null")
        if instance is not None and not isinstance(instance, str):
            raise ControlError("control message field 'instance' must be a string or absent")
        if not isinstance(reason, str):
            raise ControlError("control message field 'reason' must be a string")
        return cls(node, gpu, reason[:500], _ts(ts), instance)


@dataclass(frozen=True, slots=True)
class ProfileRequest(_ToAgent):
    """Ask the agent of ``node`` (and ``instance``, if set) for a CPU profile of the processes on
    ``gpu``, because anomaly ``anomaly`` (the collector's row id, echoed in the answer) opened."""

    node: str
    gpu: str
    anomaly: int
    ts: float
    instance: str | None = None

    def encode(self) -> bytes:
        return _encode(MessageType.PROFILE_REQUEST, self.instance, node=self.node, gpu=self.gpu, anomaly=self.anomaly,
                       ts=self.ts)

    @classmethod
    def decode(cls, raw: bytes) -> ProfileRequest:
        body = _object(raw, MessageType.PROFILE_REQUEST)
        return cls._from(body)

    @classmethod
    def _from(cls, body: dict[str, object]) -> ProfileRequest:
        node, gpu, anomaly, ts, instance = (body.get(k) for k in ("node", "gpu", "anomaly", "ts", "instance"))
        if not isinstance(node, str) or not node:
            raise ControlError("control message field 'node' must be a non-empty string")
        if not isinstance(gpu, str) or not gpu:
            raise ControlError("control message field 'gpu' must be a non-empty string")
        if isinstance(anomaly, bool) or not isinstance(anomaly, int) or not 0 < anomaly < 2**63:
            raise ControlError("control message field 'anomaly' must be a positive integer")
        if instance is not None and not isinstance(instance, str):
            raise ControlError("control message field 'instance' must be a string or absent")
        return cls(node, gpu, anomaly, _ts(ts), instance)


def _encode(kind: MessageType, instance: str | None, **fields: object) -> bytes:
    body: dict[str, object] = {"type": kind.value, **fields}
    if instance is not None:
        body["instance"] = instance
    return json.dumps(body, separators=(",", ":")).encode()


def decode_control(raw: bytes) -> KeyframeRequest | ProfileRequest:
    """Any control message, by its ``type`` field; :class:`ControlError` names what was wrong."""
    body = _object(raw, None)
    kind = body.get("type")
    if kind == MessageType.PROFILE_REQUEST.value:
        return ProfileRequest._from(body)
    if kind == MessageType.KEYFRAME_REQUEST.value:
        return KeyframeRequest._from(body)
    raise ControlError(f"control message type {kind!r} is not one of '{MessageType.KEYFRAME_REQUEST.value}', "
                       f"'{MessageType.PROFILE_REQUEST.value}'")


def _object(raw: bytes, expected: MessageType | None) -> dict[str, object]:
    body = json_object(raw, "control message", ControlError)
    if expected is not None and body.get("type") != expected.value:
        raise ControlError(f"control message type {body.get('type')!r} is not '{expected.value}'")
    return body


def _ts(ts: object) -> float:
    if not finite_number(ts):
        raise ControlError("control message field 'ts' must be a finite number")
    return float(ts)
