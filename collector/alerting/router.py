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

Alerts are values, like anomalies: each state change is a new :class:`Alert`
(``dataclasses.replace``) put in its group's place. An alert follows its anomaly by the
anomaly's ``key`` (fingerprint and start), never by object identity, so the anomaly the
engine reports on an update or a close (a new object) finds its alerts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, TypeAlias

from collector.alerting.rules import Rule, RuleSet
from collector.alerting.silences import Silence, silenced
from collector.detect.anomaly import Anomaly, AnomalyKey, Severity
from collector.detect.engine import Change

AlertStatus = Literal["pending", "firing", "resolved"]
AlertKey: TypeAlias = tuple[str, str, float]
"""One alert: its rule, its fingerprint and its anomaly's start (the alerts table's unique key)."""


def alert_fingerprint(rule: str, anomaly_fingerprint: str) -> str:
    return hashlib.sha1(f"{rule}\x00{anomaly_fingerprint}".encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Alert:
    """One rule's alert for one anomaly, as it stands (``labels`` is never changed in place)."""

    rule: str
    fingerprint: str
    anomaly: Anomaly
    labels: dict[str, str]
    status: AlertStatus = "pending"
    fired_at: float | None = None
    ends_at: float | None = None
    silenced_by: int | None = None

    @property
    def severity(self) -> Severity:
        return self.anomaly.severity

    @property
    def starts_at(self) -> float:
        return self.anomaly.start

    @property
    def key(self) -> AlertKey:
        return (self.rule, self.fingerprint, self.anomaly.start)


@dataclass(frozen=True, slots=True)
class AlertView:
    """An alert as one notification saw it (immutable: the outbox stores what was sent)."""

    fingerprint: str
    status: Literal["firing", "resolved"]
    severity: Severity
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
        """One notification, the same when a batch is routed again: its group's sequence number and
        its time. (The number alone starts over when a group is formed again, after its alerts all
        resolved or after a restart, and its second first notification was taken for the first.)"""
        return f"{self.channel}:{self.group_key}:{self.seq}@{self.ts:.3f}"


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
        self.by_anomaly: dict[AnomalyKey, list[tuple[str, str]]] = {}  # anomaly -> (group key, alert fingerprint)
        self.changed: dict[AlertKey, Alert] = {}  # alerts changed since the last tick, as they are now

    def _put(self, group: _Group, alert: Alert) -> None:
        """``alert`` replaces its earlier state in its group (and among the changed, if there)."""
        group.alerts[alert.fingerprint] = alert
        if alert.key in self.changed:
            self.changed[alert.key] = alert

    def _alerts_of(self, anomaly: Anomaly, places: list[tuple[str, str]]) -> list[tuple[_Group, Alert]]:
        out = []
        for key, fp in places:
            group = self.groups.get(key)
            alert = group.alerts.get(fp) if group is not None else None
            if group is not None and alert is not None and alert.anomaly.key == anomaly.key:
                out.append((group, alert))
        return out

    def _open(self, anomaly: Anomaly, now: float, notified: frozenset[AlertKey] = frozenset()) -> None:
        """Alerts for ``anomaly`` in their groups: pending, or firing and notified where ``notified``
        names them (an anomaly taken over from a replica or a process that notified it)."""
        labels = anomaly.labels()
        places = []
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
            if alert.key in notified:
                alert = replace(alert, status="firing", fired_at=now)
                group.sent_view = group.sent_view | {(alert.fingerprint, "firing")}
                if group.last_sent is None:
                    group.last_sent = now  # its repeat counts from the takeover
            group.alerts[alert.fingerprint] = alert
            places.append((key, alert.fingerprint))
        if places:
            self.by_anomaly[anomaly.key] = places

    def adopt(self, anomalies: Sequence[Anomaly], notified: frozenset[AlertKey], now: float) -> None:
        """Take over open anomalies another process judged (a restart, a partition moved here):
        an alert that fired there (``notified``: its key) fires here without a new notification,
        and its resolution is sent once; one that had not fired is pending again from its start."""
        for anomaly in anomalies:
            if anomaly.key not in self.by_anomaly:
                self._open(anomaly, now, notified)

    def forget(self, anomalies: Sequence[Anomaly]) -> None:
        """Drop the alerts of anomalies another replica now judges, without a word: that one sends
        what follows (their resolution, their repeats)."""
        for anomaly in anomalies:
            for group, alert in self._alerts_of(anomaly, self.by_anomaly.pop(anomaly.key, [])):
                del group.alerts[alert.fingerprint]
                group.sent_view = frozenset(x for x in group.sent_view if x[0] != alert.fingerprint)
                self.changed.pop(alert.key, None)
                if not group.alerts:
                    del self.groups[group.key]

    def on_change(self, change: Change, now: float) -> None:
        anomaly = change.anomaly
        if change.action == "open":
            self._open(anomaly, now)
        elif change.action == "close":
            for group, alert in self._alerts_of(anomaly, self.by_anomaly.pop(anomaly.key, [])):
                if alert.status == "firing":
                    alert = replace(alert, anomaly=anomaly, status="resolved", ends_at=anomaly.end)
                    self._put(group, alert)
                    self.changed[alert.key] = alert
                else:  # never fired: dropped without a word
                    self._put(group, replace(alert, anomaly=anomaly, status="resolved", ends_at=None))
        elif change.action == "update":
            for group, alert in self._alerts_of(anomaly, self.by_anomaly.get(anomaly.key, [])):
                alert = replace(alert, anomaly=anomaly, labels={**alert.labels, "severity": anomaly.severity})
                self._put(group, alert)
                if alert.status == "firing":
                    self.changed[alert.key] = alert

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
            for alert in list(group.alerts.values()):
                if alert.status == "pending" and now - alert.starts_at >= rule.for_s:
                    alert = replace(alert, status="firing", fired_at=now)
                    self._put(group, alert)
                    self.changed[alert.key] = alert
                s = silenced(silences, alert.labels, at) if silences else None
                silenced_by = s.id if s is not None else None
                if silenced_by != alert.silenced_by:
                    alert = replace(alert, silenced_by=silenced_by)
                    self._put(group, alert)
                    if alert.status == "firing":
                        self.changed[alert.key] = alert
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
        changed, self.changed = self.changed, {}
        return list(changed.values()), notes

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
