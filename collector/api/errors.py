"""JSON error answers: every 4xx/5xx of the API says what went wrong and, where a request
field caused it, which one.

Why: clients (the web page, ``gpuwatch top``, scripts) show the message as is, and the
OpenAPI document declares this one body for every error, so Schemathesis can check it.
One status per kind of error: every bad request (a malformed or out-of-range parameter,
an unknown query parameter, a body that does not validate) is 400 with ``field`` naming
the culprit; 401 unauthenticated, 403 not allowed, 404 not found or not visible, 503
database unavailable. FastAPI's own 422 for validation errors is turned into that 400.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from collector.store import errors as db_errors


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
    body = ErrorBody(error="bad_request", message=message, field=field)
    return JSONResponse(body.model_dump(exclude_none=True), status_code=400)


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    codes = {404: "not_found", 405: "method_not_allowed"}
    body = ErrorBody(error=codes.get(exc.status_code, "http_error"), message=str(exc.detail))
    return JSONResponse(body.model_dump(exclude_none=True), status_code=exc.status_code, headers=exc.headers)


def _query_names(dependant: Any) -> Iterator[str]:
    for param in dependant.query_params:
        yield str(param.alias)
    for sub in dependant.dependencies:
        yield from _query_names(sub)


_DECLARED: dict[int, frozenset[str]] = {}


def _declared_query(route: Any) -> frozenset[str]:
    """The query parameters ``route`` declares (its own and its dependencies'), cached per route."""
    names = _DECLARED.get(id(route))
    if names is None:
        names = _DECLARED[id(route)] = frozenset(_query_names(route.dependant))
    return names


async def check_request(request: Request) -> None:
    """Refuse query parameters the route does not declare (a typo like ``?strat=`` would
    otherwise be ignored silently) and NUL characters in query and path values
    (PostgreSQL text cannot hold them)."""
    route = request.scope.get("route")
    if route is not None:
        declared = _declared_query(route)
        unknown = sorted(k for k in request.query_params if k not in declared)
        if unknown:
            allowed = ", ".join(sorted(declared)) or "none"
            raise bad_request(unknown[0], f"unknown query parameter (this endpoint takes: {allowed})")
    for name, value in (*request.query_params.multi_items(), *request.path_params.items()):
        if "\x00" in str(value):
            raise bad_request(name, "must not contain NUL characters")


async def _data_error(_request: Request, exc: Exception) -> JSONResponse:
    # A value PostgreSQL refused (e.g. a NUL inside a JSON body): the client's fault.
    body = ErrorBody(error="bad_request", message=f"a value was refused by the database: {type(exc).__name__}")
    return JSONResponse(body.model_dump(exclude_none=True), status_code=400)


async def _internal(_request: Request, exc: Exception) -> JSONResponse:
    # A bug: the client gets JSON without internals; the server log gets the traceback
    # (Starlette re-raises after this answer, and uvicorn logs it).
    body = ErrorBody(error="internal", message=f"internal error ({type(exc).__name__}); it is logged on the server")
    return JSONResponse(body.model_dump(exclude_none=True), status_code=500)


async def _db_unavailable(_request: Request, exc: Exception) -> JSONResponse:
    body = ErrorBody(error="unavailable", message=f"the database is unavailable ({type(exc).__name__})")
    return JSONResponse(body.model_dump(exclude_none=True), status_code=503, headers={"Retry-After": "5"})


def install(app: FastAPI) -> None:
    app.add_exception_handler(db_errors.DataError, _data_error)
    for exc in db_errors.UNREACHABLE:
        app.add_exception_handler(exc, _db_unavailable)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal)
