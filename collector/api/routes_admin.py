"""``/me`` for everyone; ``/tokens`` and ``/settings`` for admins.

A namespace-scoped admin manages only tokens inside its own scope: it may create tokens
of namespaces it has (never an unscoped one) and sees and revokes only those.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from collector.api import tokens
from collector.api.auth import Admin, Ctx, Viewer
from collector.api.errors import ERROR_RESPONSES, ApiError, bad_request, check_request, not_found
from collector.api.models import MeOut, SettingsOut, TokenCreated, TokenIn, TokenList, TokenOut
from collector.api.principal import Principal

router = APIRouter(responses=ERROR_RESPONSES, dependencies=[Depends(check_request)])


def _out(info: tokens.TokenInfo) -> TokenOut:
    return TokenOut(id=info.id, name=info.name, prefix=info.prefix, role=info.role,
                    namespaces=list(info.namespaces) if info.namespaces is not None else None,
                    created_at=info.created_at, last_used_at=info.last_used_at, revoked_at=info.revoked_at)


def _within(who: Principal, info: tokens.TokenInfo) -> bool:
    if who.namespaces is None:
        return True
    return info.namespaces is not None and set(info.namespaces) <= set(who.namespaces)


@router.get("/me", response_model=MeOut, summary="the calling token's role and namespaces")
async def me(who: Viewer) -> MeOut:
    return MeOut(token_id=who.token_id, name=who.name, role=who.role,
                 namespaces=list(who.namespaces) if who.namespaces is not None else None)


@router.get("/tokens", response_model=TokenList, summary="API tokens, without their secrets (admin)")
async def list_tokens(ctx: Ctx, who: Admin) -> TokenList:
    return TokenList(items=[_out(t) for t in await tokens.list_tokens(ctx.pool) if _within(who, t)])


@router.post("/tokens", response_model=TokenCreated, status_code=201, summary="create a token (admin)")
async def create_token(ctx: Ctx, who: Admin, body: TokenIn) -> TokenCreated:
    try:
        scope = tokens.check_namespaces(body.namespaces)
    except ValueError as exc:
        raise bad_request("namespaces", str(exc).removeprefix("namespaces: ")) from None
    if who.namespaces is not None and (scope is None or not set(scope) <= set(who.namespaces)):
        raise ApiError(403, "forbidden", "a namespace-scoped admin may only create tokens within its namespaces "
                       f"{list(who.namespaces)}", field="namespaces")
    secret, info = await tokens.create(ctx.pool, body.role, scope, body.name)
    return TokenCreated(**_out(info).model_dump(), token=secret)


@router.delete("/tokens/{token_id}", response_model=TokenOut, summary="revoke a token (admin)")
async def revoke_token(ctx: Ctx, who: Admin, token_id: Annotated[int, Path(ge=1, le=2**63 - 1)]) -> TokenOut:
    existing = {t.id: t for t in await tokens.list_tokens(ctx.pool)}
    if token_id not in existing or not _within(who, existing[token_id]):
        raise not_found(f"token {token_id}")
    info = await tokens.revoke(ctx.pool, token_id)
    if info is None:
        raise not_found(f"token {token_id}")
    ctx.token_cache.clear()
    return _out(info)


@router.get("/settings", response_model=SettingsOut, summary="the API's settings (admin)")
async def settings(ctx: Ctx, _who: Admin) -> SettingsOut:
    s = ctx.settings
    return SettingsOut(price_per_gpu_hour=s.price_per_gpu_hour, currency=s.currency, max_points=s.max_points,
                       token_cache_seconds=s.token_cache_seconds, cors_origins=s.cors_origins,
                       tls=s.tls_cert is not None, stale_after_seconds=s.stale_after_seconds,
                       metrics_auth=s.metrics_auth, metrics_per_service=s.metrics_per_service)
