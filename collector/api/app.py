"""The FastAPI application: ``/api/v1`` routes, ``/metrics``, the web page, the probes.

Why a factory: the collector, ``gpuwatch up``, tests and benchmarks each build one app
over their own pool and settings; nothing is global. CORS stays off unless origins are
configured. The OpenAPI document declares the JSON error body for every error status;
FastAPI's automatic 422 answers are removed from it (validation errors are 400s here,
see :mod:`collector.api.errors`), so clients and Schemathesis can rely on one shape.

``/healthz`` (200 while the process serves) and ``/readyz`` (200 once the store is open and
ingest can take data: the consumer joined its group, or ingest runs in process) need no
token and touch no database, so Kubernetes' probes and the image's HEALTHCHECK cost nothing
and a database outage does not take the API out of its Service.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

from collector.api import (
    errors,
    metrics,
    routes_admin,
    routes_facts,
    routes_fleet,
    routes_kernels,
    routes_records,
    web,
)
from collector.api.context import ApiContext, IngestStats
from collector.api.principal import TokenCache
from collector.api.settings import ApiSettings

API_PREFIX = "/api/v1"


def create_app(pool: Any, settings: ApiSettings | None = None, stats: IngestStats | None = None) -> FastAPI:
    cfg = settings or ApiSettings.model_validate({})
    app = FastAPI(
        title="gpuwatch",
        version="1",
        description=(__import__("collector.api", fromlist=["__doc__"]).__doc__ or ""),
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
    )
    app.state.ctx = ApiContext(pool=pool, settings=cfg, stats=stats or IngestStats(),
                               token_cache=TokenCache(cfg.token_cache_seconds))
    errors.install(app)
    for module in (routes_fleet, routes_kernels, routes_records, routes_admin, routes_facts):
        app.include_router(module.router, prefix=API_PREFIX)
    app.include_router(web.router)
    rate = metrics.RateWindow()

    @app.get("/metrics", include_in_schema=False)
    async def collector_metrics(request: Request) -> Response:
        ctx: ApiContext = app.state.ctx
        who = await metrics.caller(ctx, request)
        return Response(await metrics.render(ctx, rate, who), media_type="text/plain; version=0.0.4")

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        ctx: ApiContext = app.state.ctx
        closing = getattr(ctx.pool, "is_closing", None)
        reason = "the store is closed" if closing is not None and closing() else ctx.stats.not_ready()
        if reason is None:
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)

    if cfg.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=cfg.cors_origins, allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"])
    _no_422_in_document(app)
    return app


def _no_422_in_document(app: FastAPI) -> None:
    """Drop FastAPI's automatic 422 answers from the document: validation errors are 400s
    with :class:`errors.ErrorBody`, which every route already declares."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = build()
        for path in doc.get("paths", {}).values():
            for op in path.values():
                op.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            doc.get("components", {}).get("schemas", {}).pop(name, None)
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
