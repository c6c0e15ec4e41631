"""The collector's REST API (``/api/v1``), its ``/metrics`` and the built-in web page.

Why a package of its own: the API is the one way people and programs read the store
(inventory, series, per-service history and cost, events, anomalies, alerts) and act on
it (silences, tokens). It is served in-process by the collector and by ``gpuwatch up``
(:mod:`collector.api.server`), built by :func:`create_app` over the store's pool.

Authorisation: every ``/api/v1`` call needs ``Authorization: Bearer gw_...``. Tokens are
stored as SHA-256 hashes (:mod:`collector.api.tokens`). Roles: ``viewer`` reads,
``operator`` also manages silences, ``admin`` also manages tokens and reads settings.

Namespace scopes: a token created with ``--namespaces a,b`` sees only those namespaces'
pods, services, history, anomalies, alerts and silences. GPU-level data (GPUs, nodes,
series, events) belongs to whoever held the GPU at the time, so a scoped token sees it
only for the times at which the GPU's own sample lists a process of a pod in its
namespaces: the newest sample for ``/gpus`` and ``/nodes``, each raw sample (or each
1-minute bucket when the series is read from the rollup) for ``/gpus/{uuid}/series``,
and the newest sample at most one minute before an event for ``/events``. Everything
else does not exist for that token: 404 for a GPU or node, absent from lists, and never
counted in any total (totals are computed from the rows the token may see). Anomaly,
alert and silence ids are opaque (:mod:`collector.api.ids`), so their numbering cannot
be used to count other namespaces' rows, and a silence's ``created_by`` is shown only
to its creator and to admins who may see that token.

Errors: every bad request is a 400 naming the field (unknown query parameters and
out-of-range times included); an unknown GPU, node or service is a 404. Health
(:mod:`collector.api.health`) is derived from open anomalies and the newest sample's age.
"""

from collector.api.app import create_app
from collector.api.settings import ApiSettings

__all__ = ["ApiSettings", "create_app"]
