"""Request bodies for each channel, built from a :class:`Notification` (pure functions).

Why separate from sending: each body must match a published schema exactly (Slack's
Block Kit, PagerDuty Events API v2, Alertmanager's API v2 ``postableAlerts``), and pure
builders can be checked against those schemas without a network. Secrets are not part
of what is built here: the PagerDuty routing key is added at send time, so the outbox
never stores it.

* Slack (incoming webhook): ``text`` (the notification fallback) and ``blocks``: a
  header, one section per alert (at most 20; a context block counts the rest), context.
* PagerDuty: one event per alert; ``dedup_key`` is the alert's fingerprint, so the
  trigger and its resolve name the same incident, and re-sending a trigger is harmless.
* Alertmanager: the alerts of the group; a firing alert's ``endsAt`` lies one repeat
  interval plus five minutes ahead, so Alertmanager keeps it active until our next
  repeat, and a resolved one carries its real end.
* Generic webhook: Alertmanager's webhook shape (version 4), which many receivers accept.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from collector.alerting.router import AlertView, Notification

_MAX_SLACK_ALERTS = 20
_SEVERITY_PD = {"critical": "critical", "warning": "warning", "info": "info"}
_EMOJI = {"critical": ":red_circle:", "warning": ":large_orange_circle:", "info": ":large_blue_circle:"}


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _title(n: Notification) -> str:
    firing = sum(1 for a in n.alerts if a.status == "firing")
    state = f"FIRING: {firing}" if firing else "RESOLVED"
    group = ", ".join(f"{k}={v}" for k, v in n.group_labels if v)
    return f"[{state}] {n.rule}" + (f" ({group})" if group else "")


def slack(n: Notification) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": _clip(_title(n), 150)}}]
    for a in n.alerts[:_MAX_SLACK_ALERTS]:
        mark = ":white_check_mark:" if a.status == "resolved" else _EMOJI.get(a.severity, "")
        lines = [f"{mark} *{a.severity.upper()}* {a.summary}"]
        lines += [f"• {c}" for c in a.causes[:6]]
        when = f"since {iso(a.starts_at)}" if a.status == "firing" else f"resolved {iso(a.ends_at or a.starts_at)}"
        lines.append(f"_{when}_")
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _clip("\n".join(lines), 3000)}})
    extra = len(n.alerts) - _MAX_SLACK_ALERTS
    context = f"gpuwatch · rule {n.rule}" + (f" · and {extra} more alerts" if extra > 0 else "")
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _clip(context, 3000)}]})
    return {"text": _clip(_title(n), 3000), "blocks": blocks}


def _labels(a: AlertView) -> dict[str, str]:
    return dict(a.labels)


def pagerduty(n: Notification) -> list[dict[str, Any]]:
    """Events without ``routing_key`` (added at send time), for the alerts that changed."""
    out: list[dict[str, Any]] = []
    for a in n.news():
        if a.status == "resolved":
            out.append({"event_action": "resolve", "dedup_key": a.fingerprint})
            continue
        labels = _labels(a)
        out.append({
            "event_action": "trigger",
            "dedup_key": a.fingerprint,
            "payload": {
                "summary": _clip(a.summary, 1024),
                "source": labels.get("node") or "gpuwatch",
                "severity": _SEVERITY_PD.get(a.severity, "warning"),
                "timestamp": iso(a.starts_at),
                "component": labels.get("gpu", ""),
                "group": labels.get("service") or labels.get("namespace") or "",
                "class": labels.get("kind", ""),
                "custom_details": {"causes": list(a.causes), "labels": labels, "rule": n.rule},
            },
            "client": "gpuwatch",
        })
    return out


def alertmanager(n: Notification) -> list[dict[str, Any]]:
    out = []
    for a in n.alerts:
        ends = a.ends_at if a.status == "resolved" and a.ends_at else n.ts + n.repeat_interval_s + 300.0
        out.append({
            "labels": {k: v for k, v in a.labels if v},
            "annotations": {"summary": a.summary, "causes": "; ".join(a.causes)},
            "startsAt": iso(a.starts_at),
            "endsAt": iso(ends),
        })
    return out


def webhook(n: Notification) -> dict[str, Any]:
    return {
        "version": "4",
        "receiver": n.channel,
        "status": n.status,
        "groupKey": n.group_key,
        "groupLabels": {k: v for k, v in n.group_labels},
        "commonLabels": {"alertname": n.rule},
        "alerts": [{
            "status": a.status, "labels": _labels(a),
            "annotations": {"summary": a.summary, "causes": "; ".join(a.causes)},
            "startsAt": iso(a.starts_at), "endsAt": iso(a.ends_at) if a.ends_at else "0001-01-01T00:00:00Z",
            "fingerprint": a.fingerprint,
        } for a in n.alerts],
    }


def bodies(channel_type: str, n: Notification) -> list[Any]:
    """The request bodies one notification becomes on a channel of this type, in send order."""
    if channel_type == "slack":
        return [slack(n)]
    if channel_type == "pagerduty":
        return list(pagerduty(n))
    if channel_type == "alertmanager":
        return [alertmanager(n)]
    if channel_type == "webhook":
        return [webhook(n)]
    raise ValueError(f"unknown channel type {channel_type!r}")
