// The Worker's front door: auth, /health and extension negotiation, routes, methods, bodies.

import assert from "node:assert/strict";
import { test } from "node:test";

import type { Offer } from "../src/protocol.js";
import { type Env, offerFrom, route, type WorkspaceNamespace } from "../src/router.js";
import { WorkspaceService } from "../src/service.js";
import { FakeContainer, MemoryStorage, rid, settings } from "./fakes.js";

const TOKEN = "t".repeat(48);

class Namespace implements WorkspaceNamespace {
  readonly allocated: string[] = [];
  readonly forwarded: Request[] = [];
  readonly services = new Map<string, WorkspaceService>();

  constructor(private readonly offer: Offer) {}

  idFromName(name: string): unknown {
    return name;
  }

  get(id: unknown) {
    const name = String(id);
    this.allocated.push(name);
    let service = this.services.get(name);
    if (!service) {
      service = new WorkspaceService(new MemoryStorage(), new FakeContainer(), settings({ offer: this.offer }));
      this.services.set(name, service);
    }
    const chosen = service;
    return {
      fetch: async (request: Request) => {
        // Keep a copy to inspect; a tee'd clone left unread would hold the original's cancel open.
        const body = request.method === "GET" ? null : new Uint8Array(await request.arrayBuffer());
        const copy = () => new Request(request.url, { method: request.method, headers: request.headers, body });
        this.forwarded.push(copy());
        return chosen.handle(copy(), new URL(request.url).pathname.slice(1));
      },
    };
  }
}

function env(overrides: Partial<Env> = {}): Env & { WORKSPACE: Namespace } {
  const e = { SANDBOX_API_TOKEN: TOKEN, ...overrides } as Env & { WORKSPACE: Namespace };
  e.WORKSPACE = new Namespace(offerFrom(e));
  return e;
}

function call(e: Env, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const init: RequestInit = { method, headers: { authorization: `Bearer ${TOKEN}`, ...headers } };
  if (body !== undefined) {
    init.body = typeof body === "string" ? body : JSON.stringify(body);
    (init.headers as Record<string, string>)["content-type"] ??= "application/json";
  }
  return route(new Request(`https://bridge.example${path}`, init), e);
}

async function code(response: Response): Promise<[number, string]> {
  assert.equal(response.headers.get("cache-control"), "no-store");
  const body = (await response.json()) as { error: { code: string } };
  return [response.status, body.error.code];
}

test("auth fails closed without a usable secret, before any Durable Object", async () => {
  for (const secret of [undefined, "short", `${"x".repeat(40)} y`]) {
    const e = env({ SANDBOX_API_TOKEN: secret });
    assert.deepEqual(await code(await call(e, "GET", "/health")), [503, "not_configured"]);
    assert.deepEqual(e.WORKSPACE.allocated, []);
  }
});

test("a wrong or oversized token is unauthorized and allocates nothing", async () => {
  const e = env();
  for (const header of ["Bearer nope", `Bearer ${TOKEN}x`, `Bearer ${"k".repeat(5000)}`, ""]) {
    const response = await route(new Request("https://bridge.example/v1/sandboxes/abc", {
      method: "POST", headers: { authorization: header, "content-type": "application/json" }, body: "{}",
    }), e);
    assert.deepEqual(await code(response), [401, "unauthorized"]);
  }
  assert.deepEqual(e.WORKSPACE.allocated, []);
});

test("health offers the extensions, or is plain v1, without starting compute", async () => {
  const offered = env();
  assert.deepEqual(await (await call(offered, "GET", "/health")).json(), {
    ok: true, protocol: 1, extensions: ["concurrent-exec", "large-output"],
    limits: { concurrent_execs: 16, max_output: 2 ** 30 },
  });
  const plain = env({ EXTENSIONS: "none" });
  assert.deepEqual(await (await call(plain, "GET", "/health")).json(), { ok: true, protocol: 1 });
  const one = env({ EXTENSIONS: "concurrent-exec", MAX_CONCURRENT_EXECS: "4" });
  assert.deepEqual(await (await call(one, "GET", "/health")).json(), {
    ok: true, protocol: 1, extensions: ["concurrent-exec"], limits: { concurrent_execs: 4 },
  });
  assert.deepEqual(offered.WORKSPACE.allocated, []);
});

test("routes, identifiers, query strings and methods", async () => {
  const e = env();
  const cases: [string, string, number, string][] = [
    ["GET", "/nowhere", 404, "not_found"],
    ["GET", "/v1/sandboxes/Bad_Id", 404, "not_found"],
    ["GET", `/v1/sandboxes/${"a".repeat(64)}`, 404, "not_found"],
    ["GET", "/v1/sandboxes/abc?x=1", 404, "not_found"],
    ["POST", "/v1/sandboxes/abc/read", 404, "not_found"], // /read is not part of this Worker
    ["POST", "/v1/sandboxes/abc/cancel/xyz", 404, "not_found"],
    ["GET", "/v1/sandboxes/abc/exec", 405, "method_not_allowed"],
    ["PUT", "/v1/sandboxes/abc", 405, "method_not_allowed"],
    ["POST", "/health", 404, "not_found"],
  ];
  for (const [method, path, status, expected] of cases) {
    assert.deepEqual(await code(await call(e, method, path, method === "GET" ? undefined : {})), [status, expected],
      `${method} ${path}`);
  }
});

test("the Durable Object gets the body and content headers, never the Authorization header", async () => {
  const e = env();
  const response = await call(e, "POST", "/v1/sandboxes/abc", { persistent: true });
  assert.equal(response.status, 200);
  const forwarded = e.WORKSPACE.forwarded[0]!;
  assert.equal(forwarded.headers.get("authorization"), null);
  assert.equal(forwarded.headers.get("content-type"), "application/json");
  assert.deepEqual(await forwarded.json(), { persistent: true });
});

test("JSON bodies: content type, size (declared and actual), syntax and shape", async () => {
  const e = env();
  assert.deepEqual(await code(await call(e, "POST", "/v1/sandboxes/abc", "{}", { "content-type": "text/plain" })),
    [415, "content_type"]);
  assert.deepEqual(await code(await call(e, "POST", "/v1/sandboxes/abc", "{}", { "content-length": "2000000" })),
    [413, "payload_too_large"]);
  const big = JSON.stringify({ persistent: true, cwd: "/" + "a".repeat(1_100_000) });
  assert.deepEqual(await code(await call(e, "POST", "/v1/sandboxes/abc", big)), [413, "payload_too_large"]);
  for (const bad of ["[1]", "3", "{", "null"]) {
    assert.deepEqual(await code(await call(e, "POST", "/v1/sandboxes/abc", bad)), [400, "invalid_json"], bad);
  }
  const exec = await call(e, "POST", "/v1/sandboxes/abc/exec", { request_id: rid(), command: "x", extra: 1 });
  assert.deepEqual(await code(exec), [400, "unknown_field"]);
});

test("a plain v1 Worker refuses the extension fields", async () => {
  const e = env({ EXTENSIONS: "none" });
  await call(e, "POST", "/v1/sandboxes/abc", { persistent: false });
  for (const extra of [{ concurrent: true }, { max_output: 10 }]) {
    const response = await call(e, "POST", "/v1/sandboxes/abc/exec", { request_id: rid(), command: "echo x", ...extra });
    assert.deepEqual(await code(response), [400, "unknown_field"]);
  }
});
