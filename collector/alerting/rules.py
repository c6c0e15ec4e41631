"""Alert rules and channels from YAML, with errors that name the file and line.

Why hand-checked YAML and not a schema library: an operator who mistypes one rule must
get ``rules.yaml:14: rule 'gpu-hot': 'for' must be a duration like 30s or 5m`` and keep
every other rule working; one bad rule is counted and skipped, never fatal. A YAML syntax
error leaves no rules and says where the syntax broke.

Format (see collector/alerting/default_rules.yaml)::

    defaults: {group_by: [service, kind], group_wait: 0s, group_interval: 30s,
               repeat_interval: 4h, send_resolved: true}
    detectors:                                 # optional detector settings
      idle_after: 10m
      metrics:                                 # the general-purpose detector, per metric
        DCGM_FI_DEV_MEMORY_TEMP: {min_change: 5, threshold: 0.9}
        DCGM_FI_DEV_POWER_USAGE: off           # a default metric, not watched
        DCGM_FI_DEV_ENC_UTIL: {range: [0, 100], every: 1m, at_plateau: false, direction: both}
    channels:
      pager: {type: pagerduty, routing_key_env: GPUWATCH_PAGERDUTY_KEY}
      chat:  {type: slack, url_file: /run/secrets/slack-webhook}
      am:    {type: alertmanager, url: http://alertmanager:9093}
      hook:  {type: webhook, url_env: GPUWATCH_WEBHOOK_URL}
    rules:
      - name: gpu-hardware
        kinds: [xid, ecc_dbe, gpu_lost]        # optional; default every kind
        min_severity: warning                  # optional
        match: {namespace: research}           # optional exact label matches
        for: 0s
        channels: [am]                         # every alert of the rule
        severity_channels: {critical: [pager]} # severity routing: added for that severity
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from collector.alerting.secret import Secret, SecretError
from collector.detect.anomaly import SEVERITIES, Severity
from collector.detect.finding import DEFAULT_METRICS, MetricSpec
from telemetry.catalog import BY_KEY

ChannelType = Literal["slack", "pagerduty", "alertmanager", "webhook"]
CHANNEL_TYPES: tuple[ChannelType, ...] = ("slack", "pagerduty", "alertmanager", "webhook")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_LINE = "__line__"


class RuleError(ValueError):
    """One problem in a rules file; ``str()`` is ``file:line: message``."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = path, line, message


@dataclass(frozen=True, slots=True)
class Channel:
    name: str
    type: ChannelType
    url: Secret | None = None  # Slack / webhook URL, Alertmanager base URL
    routing_key: Secret | None = None  # PagerDuty
    timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    line: int
    kinds: frozenset[str] | None = None
    min_severity: Severity = "info"
    match: tuple[tuple[str, str], ...] = ()
    for_s: float = 0.0
    channels: tuple[str, ...] = ()
    severity_channels: tuple[tuple[Severity, tuple[str, ...]], ...] = ()
    group_by: tuple[str, ...] = ("service", "kind")
    group_wait_s: float = 0.0
    group_interval_s: float = 30.0
    repeat_interval_s: float = 4 * 3600.0
    send_resolved: bool = True

    def matches(self, labels: dict[str, str]) -> bool:
        if self.kinds is not None and labels.get("kind") not in self.kinds:
            return False
        sev = labels.get("severity", "info")
        if sev in SEVERITIES and SEVERITIES.index(sev) < SEVERITIES.index(self.min_severity):
            return False
        return all(labels.get(k) == v for k, v in self.match)

    def channels_for(self, severity: str) -> tuple[str, ...]:
        extra = next((chans for sev, chans in self.severity_channels if sev == severity), ())
        return tuple(dict.fromkeys(self.channels + extra))


@dataclass(slots=True)
class RuleSet:
    rules: list[Rule] = field(default_factory=list)
    channels: dict[str, Channel] = field(default_factory=dict)
    errors: list[RuleError] = field(default_factory=list)
    idle_after_s: float | None = None  # ``detectors.idle_after``: the idle allocated GPU detector's wait
    metrics: tuple[MetricSpec, ...] | None = None  # ``detectors.metrics``: the general-purpose detector's


class _LineLoader(yaml.SafeLoader):
    """Safe YAML whose mappings remember their line (as key ``__line__``)."""


def _mapping_with_line(loader: _LineLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping = loader.construct_mapping(node, deep=True)
    mapping[_LINE] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_with_line)


def parse_duration(value: Any) -> float:
    """``30s``, ``5m``, ``4h``, ``1d``, ``250ms`` or a plain number of seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration must be like 30s, 5m or 4h")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("a duration must not be negative")
        return float(value)
    match = _DURATION.match(str(value))
    if match is None:
        raise ValueError(f"{value!r} is not a duration like 30s, 5m or 4h")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _str_list(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{what} must be a list of names")
    return tuple(value)


def _secret(spec: dict[str, Any], key: str) -> Secret | None:
    env, path = spec.get(f"{key}_env"), spec.get(f"{key}_file")
    if env is not None and path is not None:
        raise ValueError(f"give {key}_env or {key}_file, not both")
    if env is not None:
        return Secret.from_env(str(env))
    if path is not None:
        return Secret.from_file(str(path))
    return None


def _channel(name: str, spec: Any) -> Channel:
    if not isinstance(spec, dict):
        raise ValueError("a channel must be a mapping with a 'type'")
    kind = spec.get("type")
    if kind not in CHANNEL_TYPES:
        raise ValueError(f"type must be one of {', '.join(CHANNEL_TYPES)}, got {kind!r}")
    unknown = set(spec) - {"type", "url", "url_env", "url_file", "routing_key_env", "routing_key_file",
                           "timeout", _LINE}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    if "routing_key" in spec or (kind in ("slack", "webhook") and "url" in spec):
        raise ValueError("secrets come from url_env/url_file or routing_key_env/routing_key_file, not inline")
    url = _secret(spec, "url")
    if url is None and isinstance(spec.get("url"), str):  # only the Alertmanager base URL may be inline
        url = Secret(spec["url"], "rules file")
    key = _secret(spec, "routing_key")
    if kind == "pagerduty" and key is None:
        raise ValueError("a pagerduty channel needs routing_key_env or routing_key_file")
    if kind != "pagerduty" and url is None:
        inline = ", or url" if kind == "alertmanager" else ""
        raise ValueError(f"a {kind} channel needs a url (url_env or url_file{inline})")
    timeout = parse_duration(spec.get("timeout", 10))
    return Channel(name, kind, url, key, timeout)


_RULE_KEYS = {"name", "kinds", "min_severity", "match", "for", "channels", "severity_channels", "group_by",
              "group_wait", "group_interval", "repeat_interval", "send_resolved", _LINE}


def _rule(spec: Any, defaults: dict[str, Any], channels: dict[str, Channel]) -> Rule:
    if not isinstance(spec, dict):
        raise ValueError("a rule must be a mapping")
    merged = {**defaults, **spec}
    unknown = set(spec) - _RULE_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("a rule needs a name")
    kinds = frozenset(_str_list(merged["kinds"], "kinds")) if merged.get("kinds") is not None else None
    min_sev = merged.get("min_severity", "info")
    if min_sev not in SEVERITIES:
        raise ValueError(f"min_severity must be one of {', '.join(SEVERITIES)}")
    match = merged.get("match") or {}
    if not isinstance(match, dict):
        raise ValueError("match must be a mapping of label: value")
    pairs = tuple(sorted((str(k), str(v)) for k, v in match.items() if k != _LINE))
    chans = _str_list(merged.get("channels", []), "channels")
    sev_chans: list[tuple[Severity, tuple[str, ...]]] = []
    raw = merged.get("severity_channels") or {}
    if not isinstance(raw, dict):
        raise ValueError("severity_channels must map a severity to channel names")
    for sev, names in raw.items():
        if sev == _LINE:
            continue
        if sev not in SEVERITIES:
            raise ValueError(f"severity_channels: unknown severity {sev!r}")
        sev_chans.append((sev, _str_list(names, f"severity_channels.{sev}")))
    for ch in chans + tuple(n for _, names in sev_chans for n in names):
        if ch not in channels:
            raise ValueError(f"unknown channel {ch!r}")
    if not chans and not sev_chans:
        raise ValueError("a rule needs channels or severity_channels")
    send_resolved = merged.get("send_resolved", True)
    if not isinstance(send_resolved, bool):
        raise ValueError("send_resolved must be true or false")
    return Rule(
        name=name, line=int(spec.get(_LINE, 0)), kinds=kinds, min_severity=min_sev, match=pairs,
        for_s=parse_duration(merged.get("for", 0)), channels=chans, severity_channels=tuple(sev_chans),
        group_by=_str_list(merged.get("group_by", ["service", "kind"]), "group_by"),
        group_wait_s=parse_duration(merged.get("group_wait", 0)),
        group_interval_s=parse_duration(merged.get("group_interval", 30)),
        repeat_interval_s=parse_duration(merged.get("repeat_interval", "4h")),
        send_resolved=send_resolved,
    )


def _detectors(spec: Any, out: RuleSet, path: str, line: int) -> None:
    if spec is None:
        return
    if not isinstance(spec, dict):
        out.errors.append(RuleError(path, line, "detectors must be a mapping"))
        return
    line = int(spec.get(_LINE, line))
    unknown = set(spec) - {"idle_after", "metrics", _LINE}
    if unknown:
        out.errors.append(RuleError(path, line, f"detectors: unknown keys {sorted(unknown)}"))
    if "metrics" in spec:
        out.metrics = _metrics(spec["metrics"], out, path, line)
    if "idle_after" in spec:
        try:
            value = parse_duration(spec["idle_after"])
            if value <= 0:
                raise ValueError("must be positive")
            out.idle_after_s = value
        except ValueError as exc:
            out.errors.append(RuleError(path, line, f"detectors.idle_after: {exc}"))


_METRIC_KEYS = {"range", "every", "threshold", "probation", "min_change", "at_plateau", "direction", _LINE}
_DIRECTIONS = ("up", "down", "both")


def _metrics(spec: Any, out: RuleSet, path: str, line: int) -> tuple[MetricSpec, ...]:
    """The defaults, changed, removed (``off``) or added to, metric by metric; a bad entry is
    an error with its line and leaves that metric as it was."""
    specs = {m.metric: m for m in DEFAULT_METRICS}
    if spec is None:
        return tuple(specs.values())
    if not isinstance(spec, dict):
        out.errors.append(RuleError(path, line, "detectors.metrics must map metric names to settings or off"))
        return tuple(specs.values())
    line = int(spec.get(_LINE, line))
    for name, value in spec.items():
        if name == _LINE:
            continue
        where = f"detectors.metrics.{name}"
        at = int(value.get(_LINE, line)) if isinstance(value, dict) else line
        try:
            if name not in BY_KEY:
                raise ValueError("unknown metric (not in the catalog: see gpuwatch catalog)")
            if value is False or value == "off":
                specs.pop(name, None)
                continue
            specs[name] = _metric(name, value, specs.get(name))
        except (ValueError, TypeError) as exc:
            out.errors.append(RuleError(path, at, f"{where}: {exc}"))
    return tuple(specs.values())


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number")
    return float(value)


def _metric(name: str, value: Any, base: MetricSpec | None) -> MetricSpec:
    if not isinstance(value, dict):
        raise ValueError("must be a mapping of settings, or off")
    unknown = set(value) - _METRIC_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    changes: dict[str, Any] = {}
    if "range" in value:
        rng = value["range"]
        if not isinstance(rng, list) or len(rng) != 2:
            raise ValueError("range must be [low, high]")
        lo, hi = _number(rng[0], "range"), _number(rng[1], "range")
        if not lo < hi:
            raise ValueError("range must be [low, high] with low < high")
        changes["lo"], changes["hi"] = lo, hi
    elif base is None:
        raise ValueError("a metric without a default needs range: [low, high]")
    if "every" in value:
        changes["every_s"] = parse_duration(value["every"])
        if changes["every_s"] <= 0:
            raise ValueError("every must be positive")
    if "threshold" in value:
        changes["threshold"] = _number(value["threshold"], "threshold")
        if not 0 < changes["threshold"] <= 1:
            raise ValueError("threshold must be in (0, 1]")
    if "probation" in value:
        changes["probation_s"] = parse_duration(value["probation"])
    if "min_change" in value:
        changes["min_change"] = _number(value["min_change"], "min_change")
        if changes["min_change"] < 0:
            raise ValueError("min_change must not be negative")
    if "at_plateau" in value:
        if not isinstance(value["at_plateau"], bool):
            raise ValueError("at_plateau must be true or false")
        changes["at_plateau"] = value["at_plateau"]
    if "direction" in value:
        if value["direction"] not in _DIRECTIONS:
            raise ValueError("direction must be up, down or both")
        changes["direction"] = value["direction"]
    if base is None:
        return MetricSpec(name, changes.pop("lo"), changes.pop("hi"), **changes)
    return replace(base, **changes)


def parse_rules(text: str, path: str = "<rules>") -> RuleSet:
    """Every good channel and rule; each bad one is an error naming ``path:line`` and is skipped."""
    out = RuleSet()
    try:
        doc = yaml.load(text, Loader=_LineLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        out.errors.append(RuleError(path, line, f"YAML syntax: {exc.problem or exc}"))
        return out
    except yaml.YAMLError as exc:
        out.errors.append(RuleError(path, 0, f"YAML: {exc}"))
        return out
    if doc is None:
        return out
    if not isinstance(doc, dict):
        out.errors.append(RuleError(path, 1, "the file must be a mapping with 'channels' and 'rules'"))
        return out
    unknown = set(doc) - {"defaults", "detectors", "channels", "rules", _LINE}
    if unknown:
        out.errors.append(RuleError(path, int(doc.get(_LINE, 1)), f"unknown top-level keys {sorted(unknown)}"))
    _detectors(doc.get("detectors"), out, path, int(doc.get(_LINE, 1)))
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        out.errors.append(RuleError(path, int(doc.get(_LINE, 1)), "defaults must be a mapping"))
        defaults = {}
    defaults = {k: v for k, v in defaults.items() if k != _LINE}
    channels = doc.get("channels") or {}
    if not isinstance(channels, dict):
        out.errors.append(RuleError(path, int(doc.get(_LINE, 1)), "channels must be a mapping of name: spec"))
        channels = {}
    for name, spec in channels.items():
        if name == _LINE:
            continue
        line = int(spec.get(_LINE, channels.get(_LINE, 0))) if isinstance(spec, dict) else int(channels[_LINE])
        try:
            out.channels[str(name)] = _channel(str(name), spec)
        except (ValueError, SecretError) as exc:
            out.errors.append(RuleError(path, line, f"channel {name!r}: {exc}"))
    rules = doc.get("rules") or []
    if not isinstance(rules, list):
        out.errors.append(RuleError(path, int(doc.get(_LINE, 1)), "rules must be a list"))
        rules = []
    seen: set[str] = set()
    for spec in rules:
        line = int(spec.get(_LINE, 0)) if isinstance(spec, dict) else int(doc.get(_LINE, 0))
        label = repr(spec.get("name")) if isinstance(spec, dict) else "?"
        try:
            rule = _rule(spec, defaults, out.channels)
            if rule.name in seen:
                raise ValueError("a rule of this name already exists")
        except ValueError as exc:
            out.errors.append(RuleError(path, line, f"rule {label}: {exc}"))
            continue
        seen.add(rule.name)
        out.rules.append(rule)
    return out


def load_rules(path: str | Path) -> RuleSet:
    """Rules from a file; an unreadable file is one error, not an exception."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        out = RuleSet()
        out.errors.append(RuleError(str(path), 0, f"cannot read: {exc}"))
        return out
    return parse_rules(text, str(path))
