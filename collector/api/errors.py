"""JSON error answers: every 4xx/5xx of the API says what went wrong and, where a request
field caused it, which one.

Why: clients (the web page, ``gpuwatch top``, scripts) show the message as is, and the
OpenAPI document declares this one body for every error, so Schemathesis can check it.
"""

from __future__ import annotations

from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException


class ErrorBody(BaseModel):
    """The body of every error answer."""

    error: str
    message: str
    field: str | None = None
    limit: int | None = None


class ApiError(Exception):
    """Raised by handlers and dependencies; becomes an :class:`ErrorBody` answer."""

    def __init__(
        self, status: int, error: str, message: str, *, field: str | None = None, limit: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = ErrorBody(error=error, message=message, field=field, limit=limit)
        self.headers = headers


def bad_request(field: str, message: str) -> ApiError:
    return ApiError(400, "bad_request", f"{field}: {message}", field=field)


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} not found")


#: What each status means, for the OpenAPI document of every route.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "bad request (the field is named)"),
        (401, "missing, unknown or revoked token"),
        (403, "the token's role or namespaces do not allow this"),
        (404, "not found (or not visible to this token)"),
        (422, "malformed parameter (the field is named)"),
        (503, "the database is unavailable"),
    )
}


def _field_of(loc: tuple[Any, ...] | list[Any]) -> str | None:
    parts = [str(p) for p in loc if p not in ("query", "path", "body", "header")]
    return ".".join(parts) if parts else None


async def _api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.body.model_dump(exclude_none=True), status_code=exc.status, headers=exc.headers)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {}
    field = _field_of(first.get("loc", ()))
    message = f"{field}: {first.get('msg', 'invalid')}" if field else str(first.get("msg", "invalid request"))
    body = ErrorBody(error="invalid_request", message=message, field=field)
    return JSONResponse(body.model_dump(exclude_none=True), status_code=422)


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    codes = {404: "not_found", 405: "method_not_allowed"}
    body = ErrorBody(error=codes.get(exc.status_code, "http_error"), message=str(exc.detail))
    return JSONResponse(body.model_dump(exclude_none=True), status_code=exc.status_code, headers=exc.headers)


async def reject_nul(request: Request) -> None:
    """Refuse NUL characters in query and path values (PostgreSQL text cannot hold them)."""
    for name, value in (*request.query_params.multi_items(), *request.path_params.items()):
        if "\x00" in str(value):
            raise bad_request(name, "must not contain NUL characters")


async def _data_error(_request: Request, exc: Exception) -> JSONResponse:
    # A value PostgreSQL refused (e.g. a NUL inside a JSON body): the client's fault.
    body = ErrorBody(error="bad_request", message=f"a value was refused by the database: {type(exc).__name__}")
    return JSONResponse(body.model_dump(exclude_none=True), status_code=400)


async def _db_unavailable(_request: Request, exc: Exception) -> JSONResponse:
    body = ErrorBody(error="unavailable", message=f"the database is unavailable ({type(exc).__name__})")
    return JSONResponse(body.model_dump(exclude_none=True), status_code=503, headers={"Retry-After": "5"})


def install(app: FastAPI) -> None:
    app.add_exception_handler(asyncpg.DataError, _data_error)
    for exc in (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
                asyncpg.exceptions.OperatorInterventionError):
        app.add_exception_handler(exc, _db_unavailable)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
