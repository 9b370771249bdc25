"""Sandbox lifecycle: create, list, get, catalog, stop, start, terminate."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fakes.rest_skeleton import Context, endpoint

from .service import tags
from .settings import (
    PLANS,
    ROUTE_CATALOG,
    ROUTE_CREATE,
    ROUTE_DELETE,
    ROUTE_GET,
    ROUTE_LIST,
    ROUTE_START,
    ROUTE_STOP,
)


@endpoint(ROUTE_CREATE)
async def create_sandbox(request: Request, ctx: Context) -> Response:
    box = await run_in_threadpool(ctx.svc.create, ctx.account, await ctx.svc.json_body(request))
    return JSONResponse({"sandbox_id": box.id, "tags": tags(box)})


@endpoint(ROUTE_LIST)
async def list_sandboxes(request: Request, ctx: Context) -> Response:
    # Every sandbox of the key, no pagination; the SDK filters tags client-side.
    return JSONResponse([ctx.svc.info(b) for b in ctx.svc.visible(ctx.account)])


@endpoint(ROUTE_CATALOG)
async def catalog(request: Request, ctx: Context) -> Response:
    return JSONResponse([dict(plan) for plan in PLANS])


@endpoint(ROUTE_GET)
async def get_sandbox(request: Request, ctx: Context) -> Response:
    return JSONResponse(ctx.svc.info(ctx.box()))


@endpoint(ROUTE_STOP)
async def stop_sandbox(request: Request, ctx: Context) -> Response:
    await run_in_threadpool(ctx.svc.stop, ctx.box())
    return JSONResponse({})


@endpoint(ROUTE_START)
async def start_sandbox(request: Request, ctx: Context) -> Response:
    await run_in_threadpool(ctx.svc.start, ctx.box())
    return JSONResponse({})


@endpoint(ROUTE_DELETE)
async def terminate_sandbox(request: Request, ctx: Context) -> Response:
    await run_in_threadpool(ctx.svc.terminate, ctx.box())
    return JSONResponse({})


ROUTES = [
    Route("/v1/sandboxes", create_sandbox, methods=["POST"]),
    Route("/v1/sandboxes", list_sandboxes, methods=["GET"]),
    Route("/v1/sandboxes/catalog", catalog, methods=["GET"]),  # before /{id}: "catalog" is no id
    Route("/v1/sandboxes/{id}", get_sandbox, methods=["GET"]),
    Route("/v1/sandboxes/{id}", terminate_sandbox, methods=["DELETE"]),
    Route("/v1/sandboxes/{id}/stop", stop_sandbox, methods=["POST"]),
    Route("/v1/sandboxes/{id}/start", start_sandbox, methods=["POST"]),
]
