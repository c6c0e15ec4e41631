"""The built-in web page: our own HTML/JS/CSS, and the charting library from its package.

Why served from the installed ``plotly`` wheel: the page needs a maintained charting
library, and neither a copy in this repository nor a CDN at run time is acceptable; the
``plotly`` PyPI package ships ``plotly.min.js`` (``package_data``), installed with the
collector extra, so the file comes from the registry at install time and is served
from the package directory. The page reads only the public API, with the token the
user pastes in (kept in the browser's sessionStorage).
"""

from __future__ import annotations

import importlib.util
from importlib import resources
from pathlib import Path
from typing import Final

from fastapi import APIRouter
from fastapi.responses import FileResponse, PlainTextResponse, Response

router = APIRouter(include_in_schema=False)

_STATIC: Final = resources.files("collector.api").joinpath("static")
_FILES: Final = {"app.js": "text/javascript", "style.css": "text/css"}


def _plotly_js() -> Path | None:
    spec = importlib.util.find_spec("plotly")  # located, not imported: the page needs only its file
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    return path if path.is_file() else None


@router.get("/")
async def index() -> Response:
    return Response(_STATIC.joinpath("index.html").read_bytes(), media_type="text/html; charset=utf-8")


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in _FILES:
        return PlainTextResponse("not found", status_code=404)
    return Response(_STATIC.joinpath(name).read_bytes(), media_type=_FILES[name],
                    headers={"Cache-Control": "no-cache"})


@router.get("/vendor/plotly.min.js")
async def plotly_js() -> Response:
    path = _plotly_js()
    if path is None:
        return PlainTextResponse("the plotly package is not installed (pip install 'gpuwatch[collector]')",
                                 status_code=404)
    return FileResponse(path, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})
