"""Box lifecycle and labels: create, get (id or name), list, delete, pause, resume, status."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fakes.rest_skeleton import endpoint
from fakes.world import CREATING, ERROR, PAUSED

from .service import ApiError, BoxContext


@endpoint("POST /v2/box")
async def create_box(request: Request, ctx: BoxContext) -> Response:
    box = ctx.svc.create(ctx.account, await ctx.svc.json_body(request))
    return JSONResponse(ctx.svc.box_data(box))


@endpoint("GET /v2/box")
async def list_boxes(request: Request, ctx: BoxContext) -> Response:
    boxes = ctx.svc.world.boxes(
        owner=ctx.account.digest,
        label=request.query_params.get("label") or None,
        include_deleted=ctx.svc.settings.deleted_visible,
    )
    return JSONResponse([ctx.svc.box_data(b) for b in sorted(boxes, key=lambda b: b.created_at)])


@endpoint("DELETE /v2/box")
async def delete_boxes(request: Request, ctx: BoxContext) -> Response:
    body = await ctx.svc.json_body(request)
    ids = body.get("ids") if isinstance(body, dict) else None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i.strip() for i in ids):
        raise ApiError(400, "ids must be a non-empty list of box ids")
    deleted, missing = [], []
    for key in ids:
        box = ctx.svc.find(ctx.account, key)
        if box is None:
            missing.append(key)
            continue
        ctx.svc.seen(box, ctx.account)
        await run_in_threadpool(ctx.svc.world.delete, box)
        deleted.append(box.id)
    return JSONResponse({"message": "Boxes deleted", "deleted": deleted, "not_found": missing})


@endpoint("GET /v2/box/{id}")
async def get_box(request: Request, ctx: BoxContext) -> Response:
    return JSONResponse(ctx.svc.box_data(ctx.box()))


@endpoint("DELETE /v2/box/{id}")
async def delete_box(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    await run_in_threadpool(ctx.svc.world.delete, box)
    return JSONResponse({"message": "Box deleted", "id": box.id})


@endpoint("POST /v2/box/{id}/pause")
async def pause_box(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    if box.meta.get("keep_alive"):
        raise ApiError(409, "Keep-alive boxes cannot be paused")
    state = ctx.svc.state(box)
    if state in (CREATING, ERROR):
        raise ApiError(
            409,
            f"box {box.id} is {'still being created' if state == CREATING else 'in the error state'}; "
            "it cannot be paused",
        )
    if state not in (PAUSED, "pausing"):
        ctx.svc.world.pause(box)
    return JSONResponse({"message": "Box paused", "status": ctx.svc.state(box)})


@endpoint("POST /v2/box/{id}/resume")
async def resume_box(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    state = ctx.svc.state(box)
    if state in (CREATING, ERROR):
        raise ApiError(
            409,
            f"box {box.id} is {'still being created' if state == CREATING else 'in the error state'}; "
            "it cannot be resumed",
        )
    if state in (PAUSED, "pausing"):
        ctx.svc.world.resume(box)
    return JSONResponse({"message": "Box resumed", "status": ctx.svc.state(box)})


@endpoint("GET /v2/box/{id}/status")
async def box_status(request: Request, ctx: BoxContext) -> Response:
    return JSONResponse({"status": ctx.svc.state(ctx.box())})


@endpoint("POST /v2/box/{id}/config/labels")
async def add_label(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    body = await ctx.svc.json_body(request)
    labels = ctx.svc.add_label(box, body.get("label") if isinstance(body, dict) else None)
    return JSONResponse({"message": "Label added", "labels": labels})


@endpoint("DELETE /v2/box/{id}/config/labels/{label}")
async def remove_label(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    labels = ctx.svc.remove_label(box, request.path_params["label"])
    return JSONResponse({"message": "Label removed", "labels": labels})


ROUTES = [
    Route("/v2/box", create_box, methods=["POST"]),
    Route("/v2/box", list_boxes, methods=["GET"]),
    Route("/v2/box", delete_boxes, methods=["DELETE"]),
    Route("/v2/box/{id}", get_box, methods=["GET"]),
    Route("/v2/box/{id}", delete_box, methods=["DELETE"]),
    Route("/v2/box/{id}/pause", pause_box, methods=["POST"]),
    Route("/v2/box/{id}/resume", resume_box, methods=["POST"]),
    Route("/v2/box/{id}/status", box_status, methods=["GET"]),
    Route("/v2/box/{id}/config/labels", add_label, methods=["POST"]),
    Route("/v2/box/{id}/config/labels/{label:path}", remove_label, methods=["DELETE"]),
]
