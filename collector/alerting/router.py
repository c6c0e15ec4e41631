"""From anomalies to notifications: for-duration, grouping, dedup, repeats, resolves, silences.

Why a pure state machine: what to send and when is the part of alerting that must be
right, and it is easiest to prove right with fake time. The router takes anomaly changes
and a clock reading (record time, like the detectors) and returns the alert state
changes to persist and the notifications to enqueue; I/O lives in the service.

Semantics, close to Alertmanager's so that operators find no surprises:

* an anomaly that matches a rule becomes a *pending* alert, and *firing* once it has been
  open for the rule's ``for``; one that closes while pending never notifies;
* alerts of a rule are grouped by the rule's ``group_by`` labels; a group notifies when
  its set of firing/resolved alerts changed (first after ``group_wait``, later no more
  often than ``group_interval``), and again every ``repeat_interval`` while any fires;
  an unchanged group never notifies twice (dedup);
* a resolved alert is notified once (if ``send_resolved``) and then forgotten;
* silenced alerts are left out of notifications; the alert row records that it was silenced.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from collector.alerting.rules import Rule, RuleSet
from collector.alerting.silences import Silence, silenced
from collector.detect.anomaly import Anomaly
from collector.detect.engine import Change

AlertStatus = Literal["pending", "firing", "resolved"]


def alert_fingerprint(rule: str, anomaly_fingerprint: str) -> str:
    return hashlib.sha1(f"{rule}\x00{anomaly_fingerprint}".encode()).hexdigest()[:16]


@dataclass(slots=True)
class Alert:
    rule: str
    fingerprint: str
    anomaly: Anomaly
    labels: dict[str, str]
    status: AlertStatus = "pending"
    fired_at: float | None = None
    ends_at: float | None = None
    silenced_by: int | None = None

    @property
    def severity(self) -> str:
        return self.anomaly.severity

    @property
    def starts_at(self) -> float:
        return self.anomaly.start


@dataclass(frozen=True, slots=True)
class AlertView:
    """An alert as one notification saw it (immutable: the outbox stores what was sent)."""

    fingerprint: str
    status: Literal["firing", "resolved"]
    severity: str
    labels: tuple[tuple[str, str], ...]
    summary: str
    causes: tuple[str, ...]
    starts_at: float
    ends_at: float | None


@dataclass(frozen=True, slots=True)
class Notification:
    rule: str
    channel: str
    group_key: str
    group_labels: tuple[tuple[str, str], ...]
    alerts: tuple[AlertView, ...]
    ts: float
    seq: int
    repeat_interval_s: float
    changed: frozenset[str] = frozenset()  # alerts new or changed since the group's last notification

    def news(self) -> tuple[AlertView, ...]:
        """The alerts this notification is about: the changed ones, or all of them on a repeat."""
        return tuple(a for a in self.alerts if a.fingerprint in self.changed) if self.changed else self.alerts

    @property
    def status(self) -> Literal["firing", "resolved"]:
        return "firing" if any(a.status == "firing" for a in self.alerts) else "resolved"

    @property
    def idem_key(self) -> str:
        return f"{self.channel}:{self.group_key}:{self.seq}"


@dataclass(slots=True)
class _Group:
    rule: Rule
    key: str
    labels: tuple[tuple[str, str], ...]
    alerts: dict[str, Alert] = field(default_factory=dict)
    created: float = 0.0
    last_sent: float | None = None
    sent_view: frozenset[tuple[str, str]] = frozenset()
    seq: int = 0


class Router:
    def __init__(self, rules: RuleSet) -> None:
        self.rules = rules
        self.groups: dict[str, _Group] = {}
        self.by_anomaly: dict[int, list[Alert]] = {}  # id(anomaly) -> its alerts
        self.changed: list[Alert] = []

    def on_change(self, change: Change, now: float) -> None:
        anomaly = change.anomaly
        if change.action == "open":
            labels = anomaly.labels()
            alerts = []
            for rule in self.rules.rules:
                if not rule.matches(labels):
                    continue
                group_labels = tuple((k, labels.get(k, "")) for k in rule.group_by)
                key = rule.name + "|" + "|".join(v for _, v in group_labels)
                group = self.groups.get(key)
                if group is None:
                    group = self.groups[key] = _Group(rule, key, group_labels, created=now)
                alert = Alert(rule.name, alert_fingerprint(rule.name, anomaly.fingerprint), anomaly,
                              {**labels, "alertname": rule.name})
                group.alerts[alert.fingerprint] = alert
                alerts.append(alert)
            if alerts:
                self.by_anomaly[id(anomaly)] = alerts
        elif change.action == "close":
            for alert in self.by_anomaly.pop(id(anomaly), []):
                if alert.status == "firing":
                    alert.status, alert.ends_at = "resolved", anomaly.end
                    self.changed.append(alert)
                else:
                    alert.status = "resolved"  # never fired: dropped without a word
                    alert.ends_at = None
        elif change.action == "update":
            for alert in self.by_anomaly.get(id(anomaly), []):
                alert.labels["severity"] = anomaly.severity
                if alert.status == "firing":
                    self.changed.append(alert)

    def tick(self, now: float, silences: Sequence[Silence] = (),
             wall: float | None = None) -> tuple[list[Alert], list[Notification]]:
        """Advance to ``now``: alerts whose state changed, and the notifications to send.

        Silences are an operator's wall-clock windows, so they are checked at ``wall``
        (the service passes the wall clock; tests and replays may leave it at ``now``).
        """
        at = now if wall is None else wall
        notes: list[Notification] = []
        for key, group in list(self.groups.items()):
            rule = group.rule
            for alert in group.alerts.values():
                if alert.status == "pending" and now - alert.starts_at >= rule.for_s:
                    alert.status, alert.fired_at = "firing", now
                    self.changed.append(alert)
                was = alert.silenced_by
                s = silenced(silences, alert.labels, at) if silences else None
                alert.silenced_by = s.id if s is not None else None
                if was != alert.silenced_by and alert.status == "firing":
                    self.changed.append(alert)
            for fp in [fp for fp, a in group.alerts.items() if a.status == "resolved" and a.ends_at is None]:
                del group.alerts[fp]  # closed while pending
            visible = [a for a in group.alerts.values() if a.status != "pending" and a.silenced_by is None
                       and (a.status == "firing" or rule.send_resolved)]
            view = frozenset((a.fingerprint, a.status) for a in visible)
            firing = any(a.status == "firing" for a in visible)
            due = False
            if view != group.sent_view and visible:
                if group.last_sent is None:
                    due = now - group.created >= rule.group_wait_s
                else:
                    due = now - group.last_sent >= rule.group_interval_s
                if not firing and group.sent_view and not any(s == "firing" for _, s in group.sent_view):
                    due = False  # only resolutions of alerts never notified as firing
            elif firing and group.last_sent is not None and now - group.last_sent >= rule.repeat_interval_s:
                due = True
            if due:
                notes.extend(self._notify(group, visible, now))
                group.last_sent, group.sent_view = now, frozenset((a.fingerprint, a.status) for a in visible
                                                                  if a.status == "firing")
                for fp in [a.fingerprint for a in visible if a.status == "resolved"]:
                    del group.alerts[fp]
            elif not rule.send_resolved:
                for fp in [fp for fp, a in group.alerts.items() if a.status == "resolved"]:
                    del group.alerts[fp]
                group.sent_view = frozenset(x for x in group.sent_view if x[0] in group.alerts)
            if not group.alerts:
                del self.groups[key]
        changed, self.changed = self.changed, []
        return list({id(a): a for a in changed}.values()), notes

    def _notify(self, group: _Group, visible: list[Alert], now: float) -> list[Notification]:
        group.seq += 1
        changed = frozenset(a.fingerprint for a in visible if (a.fingerprint, a.status) not in group.sent_view)
        out: list[Notification] = []
        by_channel: dict[str, list[AlertView]] = {}
        for a in sorted(visible, key=lambda x: (x.starts_at, x.fingerprint)):
            view = AlertView(a.fingerprint, "firing" if a.status == "firing" else "resolved", a.severity,
                             tuple(sorted(a.labels.items())), a.anomaly.summary, tuple(a.anomaly.causes),
                             a.starts_at, a.ends_at)
            for ch in group.rule.channels_for(a.severity):
                by_channel.setdefault(ch, []).append(view)
        for ch, views in by_channel.items():
            out.append(Notification(group.rule.name, ch, group.key, group.labels, tuple(views), now, group.seq,
                                    group.rule.repeat_interval_s, changed))
        return out
