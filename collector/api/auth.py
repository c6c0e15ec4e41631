"""Who is calling: the bearer token's role and namespace scope, and the checks on them.

Why a dependency: every route declares the least role it needs (``viewer``,
``operator``, ``admin``) and gets a :class:`Principal`; queries take the principal's
``namespaces`` and filter by it in SQL. Checked tokens are cached for a few seconds
(``token_cache_seconds``), keyed by their hash, so a busy client costs one lookup per
period; revocation therefore takes effect within that period.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from collector.api import tokens
from collector.api.context import ApiContext, get_context
from collector.api.errors import ApiError
from collector.api.principal import Principal, TokenCache

_bearer = HTTPBearer(auto_error=False, description="a token made by `gpuwatch token create`")


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": 'Bearer realm="gpuwatch"'})


async def authenticate(
    ctx: Annotated[ApiContext, Depends(get_context)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise _unauthorized("this API needs an 'Authorization: Bearer <token>' header")
    secret = credentials.credentials
    if not secret.startswith(tokens.PREFIX):
        raise _unauthorized("the bearer token is not a gpuwatch token (they start with 'gw_')")
    key = tokens.digest(secret)
    cache: TokenCache = ctx.token_cache
    principal = cache.get(key)
    if principal is None:
        info = await tokens.lookup(ctx.pool, secret)
        if info is None:
            raise _unauthorized("unknown or revoked token")
        principal = Principal(info.id, info.name, info.role, info.namespaces)
        cache.put(key, principal)
    return principal


async def from_request(ctx: ApiContext, request: Request) -> Principal:
    """The caller of a route outside ``/api/v1`` (``/metrics``), checked as :func:`authenticate` does."""
    return await authenticate(ctx, await _bearer(request))


def require(role: tokens.Role) -> Callable[..., Awaitable[Principal]]:
    """A dependency that admits tokens of ``role`` or a higher one."""

    async def check(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
        if tokens.RANK[principal.role] < tokens.RANK[role]:
            raise ApiError(403, "forbidden", f"this needs the {role} role; the token has the {principal.role} role")
        return principal

    return check


Viewer = Annotated[Principal, Depends(require("viewer"))]
Operator = Annotated[Principal, Depends(require("operator"))]
Admin = Annotated[Principal, Depends(require("admin"))]
Ctx = Annotated[ApiContext, Depends(get_context)]
