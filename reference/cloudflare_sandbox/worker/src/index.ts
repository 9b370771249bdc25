// Worker entry: the router, and the Durable Object class that owns one workspace and its container.

import { DurableObject } from "cloudflare:workers";

import { platformContainer } from "./container.js";
import { type Env, offerFrom, route } from "./router.js";
import { DEFAULTS, WorkspaceService } from "./service.js";

function settingsFrom(env: Env) {
  const idle = Number(env.IDLE_SECONDS ?? 600);
  const allowed = (env.ALLOWED_INSTANCE_TYPES ?? "lite,standard-1").split(",").map((s) => s.trim()).filter(Boolean);
  return {
    ...DEFAULTS,
    offer: offerFrom(env),
    enableInternet: env.ENABLE_INTERNET !== "false",
    idleMs: (Number.isInteger(idle) && idle >= 60 && idle <= 18_000 ? idle : 600) * 1000,
    defaultInstance: env.DEFAULT_INSTANCE_TYPE ?? "standard-1",
    allowedInstances: allowed,
  };
}

export class Workspace extends DurableObject<Env> {
  private readonly service: WorkspaceService;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.service = new WorkspaceService(ctx.storage, platformContainer(ctx.container), settingsFrom(env));
  }

  override fetch(request: Request): Promise<Response> {
    return this.service.handle(request, new URL(request.url).pathname.slice(1));
  }

  override alarm(): Promise<void> {
    return this.service.alarm();
  }
}

export default {
  fetch: (request: Request, env: Env): Promise<Response> => route(request, env),
};
