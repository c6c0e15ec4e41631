"""Alerting: rules (YAML), routing with grouping/dedup/silences, channels, and an outbox.

Why a package beside ``collector.detect``: detectors decide what is wrong; alerting
decides who hears about it, when and how often, and makes sure they hear exactly once.
:class:`~collector.alerting.service.DetectionService` ties both to the collector.
"""

from collector.alerting.router import Alert, Notification, Router
from collector.alerting.rules import Channel, Rule, RuleError, RuleSet, load_rules, parse_rules

__all__ = ["Alert", "Channel", "Notification", "Router", "Rule", "RuleError", "RuleSet", "load_rules", "parse_rules"]
