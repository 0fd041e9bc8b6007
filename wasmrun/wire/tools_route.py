"""`GET /tools?format=openai|anthropic|mcp|jsonschema[&strict=true][&with_create_skill=true]`:
the LLM tool definitions (wasmrun/tools.py) as one JSON array."""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from wasmrun.capabilities import ServerFacts
from wasmrun.tools import FORMATS, render_all

_TRUE = {"true": True, "1": True, "false": False, "0": False, "": False}


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in _TRUE:
        raise ValueError(f"{name} must be true or false, not {value[:40]!r}")
    return _TRUE[value]


async def tools(request: Request, facts: ServerFacts | None = None) -> Response:
    format = request.query_params.get("format", "jsonschema")
    if format not in FORMATS:
        return JSONResponse(
            {"error": f"unknown format {format[:40]!r}; one of: {', '.join(FORMATS)}"}, status_code=400
        )
    try:
        rendered = render_all(
            format, strict=_flag(request, "strict"), with_create_skill=_flag(request, "with_create_skill"),
            facts=facts,
        )
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    return JSONResponse(rendered)


def tools_route(facts: Callable[[], ServerFacts] | None = None) -> Route:
    """The route, its run tools stated for the server `facts()` describes at each request
    (the served image can change while the server runs: served.py)."""

    async def endpoint(request: Request) -> Response:
        return await tools(request, facts() if facts is not None else None)

    return Route("/tools", endpoint, methods=["GET"])
