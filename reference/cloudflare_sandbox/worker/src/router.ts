// The Worker's front door: bearer auth before anything else, /health (with the offered
// extensions), the route and method rules, then the request goes to the workspace's Durable
// Object with only its content headers (never the Authorization header).

import { ApiError, errorResponse, EXT_LARGE_OUTPUT, healthBody, json, KNOWN_EXTENSIONS, LIMITS, SANDBOX_ID,
  type Offer } from "./protocol.js";

export interface WorkspaceStub {
  fetch(request: Request): Promise<Response>;
}

export interface WorkspaceNamespace {
  idFromName(name: string): unknown;
  get(id: unknown): WorkspaceStub;
}

export interface Env {
  WORKSPACE: WorkspaceNamespace;
  SANDBOX_API_TOKEN?: string;
  EXTENSIONS?: string; // comma list; "none" for a plain v1 Worker (default: all known)
  MAX_CONCURRENT_EXECS?: string;
  MAX_OUTPUT?: string; // large-output ceiling in UTF-16 code units
  DEFAULT_INSTANCE_TYPE?: string;
  ALLOWED_INSTANCE_TYPES?: string;
  IDLE_SECONDS?: string;
  ENABLE_INTERNET?: string;
}

const PATH = /^\/v1\/sandboxes\/([^/]+)(?:\/(exec|release|checkpoint|cancel\/[a-f0-9]{32}))?$/;
const encoder = new TextEncoder();

function bounded(raw: string | undefined, fallback: number, low: number, high: number): number {
  const value = Number(raw);
  return raw !== undefined && Number.isInteger(value) && value >= low && value <= high ? value : fallback;
}

export function offerFrom(env: Env): Offer {
  const listed = (env.EXTENSIONS ?? KNOWN_EXTENSIONS.join(",")).split(",").map((e) => e.trim());
  const extensions = KNOWN_EXTENSIONS.filter((e) => listed.includes(e));
  return {
    extensions,
    maxConcurrentExecs: bounded(env.MAX_CONCURRENT_EXECS, 16, 1, 256),
    maxOutput: extensions.includes(EXT_LARGE_OUTPUT) ? bounded(env.MAX_OUTPUT, 2 ** 30, LIMITS.output, 2 ** 31)
      : LIMITS.output,
  };
}

async function digest(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

/** 503 not_configured without a usable secret; else SHA-256 digests compared in constant time. */
export async function authorize(header: string | null, secret: string | undefined): Promise<void> {
  if (!secret || secret.length < 32 || /\s/.test(secret)) {
    throw new ApiError(503, "not_configured", "Set the SANDBOX_API_TOKEN Worker secret");
  }
  const supplied = header ?? "";
  const [actual, expected] = await Promise.all([digest(supplied), digest(`Bearer ${secret}`)]);
  let difference = supplied.length > LIMITS.authHeader ? 1 : 0;
  for (let i = 0; i < expected.length; i++) difference |= actual[i]! ^ expected[i]!;
  if (difference !== 0) throw new ApiError(401, "unauthorized", "Unauthorized");
}

export async function route(request: Request, env: Env): Promise<Response> {
  try {
    await authorize(request.headers.get("authorization"), env.SANDBOX_API_TOKEN);
    const url = new URL(request.url);
    if (url.pathname === "/health" && request.method === "GET") return json(healthBody(offerFrom(env)));
    const match = PATH.exec(url.pathname);
    if (!match || !SANDBOX_ID.test(match[1]!) || url.search !== "") throw new ApiError(404, "not_found", "Not found");
    const action = match[2] ?? ({ GET: "status", DELETE: "reset" } as Record<string, string>)[request.method] ?? "init";
    const expected = ({ status: "GET", reset: "DELETE" } as Record<string, string>)[action] ?? "POST";
    if (request.method !== expected) throw new ApiError(405, "method_not_allowed", "Method not allowed");
    const headers = new Headers();
    for (const name of ["content-type", "content-length"]) {
      const value = request.headers.get(name);
      if (value !== null) headers.set(name, value);
    }
    const stub = env.WORKSPACE.get(env.WORKSPACE.idFromName(match[1]!));
    const init: RequestInit & { duplex?: string } = { method: request.method, headers };
    if (request.method !== "GET") {
      init.body = request.body;
      init.duplex = "half";
    }
    return await stub.fetch(new Request(`https://workspace/${action}`, init));
  } catch (error) {
    return errorResponse(error);
  }
}
