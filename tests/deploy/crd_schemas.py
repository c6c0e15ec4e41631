"""Small JSON schemas of the custom resources the chart renders, which kubernetes-validate lacks.

``kubernetes-validate`` bundles only the built-in API's schemas. The chart also renders
``ServiceMonitor`` and ``PrometheusRule`` (prometheus-operator, ``monitoring.coreos.com/v1``)
and ``ScaledObject`` / ``TriggerAuthentication`` (KEDA, ``keda.sh/v1alpha1``). These schemas
are written here from those projects' published CRD field lists, for the fields the chart
uses, with ``additionalProperties: false`` so that a misspelt field fails as it would be
pruned (silently ignored) by the API server. They are strict subsets: a field outside them
is a test failure to look at, not necessarily a wrong manifest.
"""

from __future__ import annotations

from typing import Any

_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                                          r"(([0-9]+)s)?(([0-9]+)ms)?)$"}
_STRMAP = {"type": "object", "additionalProperties": {"type": "string"}}
_META = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
    "namespace": {"type": "string"}, "labels": _STRMAP, "annotations": _STRMAP}, "additionalProperties": False}
_SECRET_KEY = {"type": "object", "required": ["name", "key"], "additionalProperties": False, "properties": {
    "name": {"type": "string", "minLength": 1}, "key": {"type": "string", "minLength": 1},
    "optional": {"type": "boolean"}}}
_RELABEL = {"type": "object", "additionalProperties": False, "properties": {
    "sourceLabels": {"type": "array", "items": {"type": "string"}}, "separator": {"type": "string"},
    "targetLabel": {"type": "string"}, "regex": {"type": "string"}, "modulus": {"type": "integer"},
    "replacement": {"type": "string"},
    "action": {"enum": ["replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod", "labelmap",
                        "LabelMap", "labeldrop", "LabelDrop", "labelkeep", "LabelKeep", "lowercase", "Lowercase",
                        "uppercase", "Uppercase", "keepequal", "KeepEqual", "dropequal", "DropEqual"]}}}
_LABEL_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": _STRMAP, "matchExpressions": {"type": "array"}}}

_ENDPOINT = {"type": "object", "additionalProperties": False, "properties": {
    "port": {"type": "string"}, "targetPort": {"type": ["string", "integer"]}, "path": {"type": "string"},
    "scheme": {"enum": ["http", "https"]}, "interval": _DURATION, "scrapeTimeout": _DURATION,
    "honorLabels": {"type": "boolean"}, "honorTimestamps": {"type": "boolean"},
    "tlsConfig": {"type": "object", "additionalProperties": False, "properties": {
        "insecureSkipVerify": {"type": "boolean"}, "serverName": {"type": "string"},
        "ca": {"type": "object"}, "cert": {"type": "object"}, "keySecret": _SECRET_KEY}},
    "authorization": {"type": "object", "additionalProperties": False, "required": ["credentials"],
                      "properties": {"type": {"type": "string"}, "credentials": _SECRET_KEY}},
    "relabelings": {"type": "array", "items": _RELABEL},
    "metricRelabelings": {"type": "array", "items": _RELABEL}}}

SERVICE_MONITOR: dict[str, Any] = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
        "metadata": _META,
        "spec": {"type": "object", "required": ["selector", "endpoints"], "additionalProperties": False,
                 "properties": {
                     "selector": _LABEL_SELECTOR, "jobLabel": {"type": "string"},
                     "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                         "any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}},
                     "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT}}}}}

_RULE = {"type": "object", "required": ["expr"], "additionalProperties": False, "properties": {
    "alert": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}, "record": {"type": "string"},
    "expr": {"type": "string", "minLength": 1}, "for": _DURATION, "keep_firing_for": _DURATION,
    "labels": _STRMAP, "annotations": _STRMAP}}

PROMETHEUS_RULE: dict[str, Any] = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PrometheusRule"},
        "metadata": _META,
        "spec": {"type": "object", "additionalProperties": False, "properties": {
            "groups": {"type": "array", "items": {
                "type": "object", "required": ["name", "rules"], "additionalProperties": False, "properties": {
                    "name": {"type": "string", "minLength": 1}, "interval": _DURATION,
                    "rules": {"type": "array", "items": _RULE}}}}}}}}

_TARGET_REF = {"type": "object", "required": ["name"], "additionalProperties": False, "properties": {
    "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "name": {"type": "string"},
    "envSourceContainerName": {"type": "string"}}}

SCALED_OBJECT: dict[str, Any] = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"}, "kind": {"const": "ScaledObject"}, "metadata": _META,
        "spec": {"type": "object", "required": ["scaleTargetRef", "triggers"], "additionalProperties": False,
                 "properties": {
                     "scaleTargetRef": _TARGET_REF,
                     "pollingInterval": {"type": "integer", "minimum": 1},
                     "cooldownPeriod": {"type": "integer", "minimum": 0},
                     "minReplicaCount": {"type": "integer", "minimum": 0},
                     "maxReplicaCount": {"type": "integer", "minimum": 1},
                     "triggers": {"type": "array", "minItems": 1, "items": {
                         "type": "object", "required": ["type", "metadata"], "additionalProperties": False,
                         "properties": {
                             "type": {"type": "string"},
                             # KEDA reads every metadata value as a string
                             "metadata": _STRMAP,
                             "authenticationRef": {"type": "object", "required": ["name"],
                                                   "additionalProperties": False,
                                                   "properties": {"name": {"type": "string"},
                                                                  "kind": {"type": "string"}}}}}}}}}}

TRIGGER_AUTHENTICATION: dict[str, Any] = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"}, "kind": {"const": "TriggerAuthentication"}, "metadata": _META,
        "spec": {"type": "object", "additionalProperties": False, "properties": {
            "secretTargetRef": {"type": "array", "items": {
                "type": "object", "required": ["parameter", "name", "key"], "additionalProperties": False,
                "properties": {"parameter": {"type": "string"}, "name": {"type": "string"},
                               "key": {"type": "string"}}}},
            "env": {"type": "array", "items": {
                "type": "object", "required": ["parameter", "name"], "additionalProperties": False,
                "properties": {"parameter": {"type": "string"}, "name": {"type": "string"},
                               "containerName": {"type": "string"}}}}}}}}

BY_KIND: dict[str, dict[str, Any]] = {
    "ServiceMonitor": SERVICE_MONITOR,
    "PrometheusRule": PROMETHEUS_RULE,
    "ScaledObject": SCALED_OBJECT,
    "TriggerAuthentication": TRIGGER_AUTHENTICATION,
}
