"""The API's interactive documentation at /docs: Swagger UI from the fastapi-offline wheel (no CDN, so it works
offline), started by a script of our own so that the page runs under the service's CSP (`script-src 'self'`,
nothing inline). FastAPI's own /docs page loads Swagger UI from a CDN with an inline script: it is turned off."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).resolve().parent.parent / "static"
# swagger-ui-bundle.js and swagger-ui.css, as the wheel ships them (Apache-2.0, Swagger UI's own licence).
SWAGGER_UI = Path(str(files("fastapi_offline") / "static"))
ASSETS_URL = "/docs-assets"
router = APIRouter(include_in_schema=False)


@router.get("/docs")
def docs() -> FileResponse:
    return FileResponse(STATIC / "docs.html", media_type="text/html")


def assets() -> StaticFiles:
    """Mounted at ASSETS_URL by the application."""
    return StaticFiles(directory=SWAGGER_UI)
