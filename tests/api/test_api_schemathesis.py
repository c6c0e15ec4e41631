"""Schemathesis against the OpenAPI document, with a valid admin token.

Every operation gets generated requests (valid and invalid parameters); no answer may
be a 5xx, and every answer must match the document: its status is declared, its
content type and body match the declared schema. Token revocation is left out: a
generated id could revoke the very token the run uses (it is tested directly).
The operations are driven through Hypothesis directly (schemathesis' pytest plugin
cannot take a schema from a fixture with this pytest); one test covers all of them.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import LiveApi

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def test_api_conforms_to_its_document(live_api: LiveApi) -> None:
    schema = schemathesis.openapi.from_url(f"{live_api.url}/api/v1/openapi.json")
    schema = schema.exclude(method="DELETE", path_regex="/tokens/")
    headers = {"Authorization": f"Bearer {live_api.fleet.tokens['admin']}"}
    tested: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None,
                  derandomize=True)
        def check(case: Any) -> None:
            case.call_and_validate(base_url=live_api.url, headers=headers, checks=CHECKS)

        check()
        tested.append(f"{operation.method.upper()} {operation.path}")
    assert len(tested) >= 16, tested
