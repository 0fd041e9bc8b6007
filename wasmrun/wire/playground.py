"""The playground page at `/`: static files shipped in the package (wasmrun/playground/),
no build step. The page speaks to `/rpc` like any client: the tenant key it is given
goes as a Bearer token, and its requests pass the same Host and Origin checks
(guard.py: a page may call the server that served it, never another one).

The files are read once, at start. Their headers forbid framing (clickjacking) and
any script, style or connection other than this server's own.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

FOLDER = Path(__file__).resolve().parent.parent / "playground"
FILES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
         "workbench.js": "text/javascript; charset=utf-8",
         "style.css": "text/css; charset=utf-8"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self';"
    " img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def playground_routes() -> list[Route]:
    """GET / and GET /playground/<file>; none when the files are missing."""
    if not all((FOLDER / name).is_file() for name in FILES):
        return []
    bodies = {name: (FOLDER / name).read_bytes() for name in FILES}

    def serve(name: str) -> Response:
        return Response(bodies[name], media_type=FILES[name], headers=HEADERS)

    async def page(request: Request) -> Response:
        return serve("index.html")

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in bodies:
            return Response("not found", status_code=404, media_type="text/plain")
        return serve(name)

    return [Route("/", page, methods=["GET"]), Route("/playground/{name}", asset, methods=["GET"])]
