// Bridge protocol v1 on the wire: limits, the error body, JSON bodies, request validation,
// and the two backward-compatible extensions negotiated through /health.

export const PROTOCOL = 1;
export const LIMITS = {
  body: 1_048_576,
  command: 65_536,
  stdin: 786_432,
  output: 2_000_000, // UTF-16 code units: what String.length counts
  frame: 4096,
  minTimeout: 0.1,
  maxTimeout: 900,
  defaultTimeout: 120,
  replay: 64,
  authHeader: 4096,
  path: 4096,
} as const;

export const EXT_CONCURRENT_EXEC = "concurrent-exec";
export const EXT_LARGE_OUTPUT = "large-output";
export const KNOWN_EXTENSIONS = [EXT_CONCURRENT_EXEC, EXT_LARGE_OUTPUT] as const;
export const INSTANCE_TYPES = ["lite", "standard-1", "standard-2", "standard-3", "standard-4"];
export const SANDBOX_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;
export const REQUEST_ID = /^[a-f0-9]{32}$/;
const IMAGE = /^[a-zA-Z0-9_-]{1,128}$/;
const NO_STORE = { "cache-control": "no-store" };

export class ApiError extends Error {
  constructor(readonly status: number, readonly code: string, message: string) {
    super(message);
  }
}

export function json(data: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(data), {
    status,
    headers: { "content-type": "application/json", ...NO_STORE, ...headers },
  });
}

export function errorResponse(error: unknown): Response {
  if (error instanceof ApiError) {
    return json({ error: { code: error.code, message: error.message } }, error.status);
  }
  // Never expose internals, request bodies or credentials.
  return json({ error: { code: "internal_error", message: "Sandbox operation failed" } }, 503);
}

/** What this Worker offers beyond v1; an empty list is a plain v1 Worker. */
export interface Offer {
  extensions: string[];
  maxConcurrentExecs: number;
  maxOutput: number;
}

export function healthBody(offer: Offer): Record<string, unknown> {
  const body: Record<string, unknown> = { ok: true, protocol: PROTOCOL };
  if (offer.extensions.length > 0) {
    const limits: Record<string, number> = {};
    if (offer.extensions.includes(EXT_CONCURRENT_EXEC)) limits.concurrent_execs = offer.maxConcurrentExecs;
    if (offer.extensions.includes(EXT_LARGE_OUTPUT)) limits.max_output = offer.maxOutput;
    body.extensions = [...offer.extensions];
    body.limits = limits;
  }
  return body;
}

/** A JSON object body: 415 unless application/json, 413 over 1 MiB declared or read. */
export async function readJson(request: Request): Promise<Record<string, unknown>> {
  const type = (request.headers.get("content-type") ?? "").split(";")[0]!.trim();
  if (type !== "application/json") throw new ApiError(415, "content_type", "Send application/json");
  if (Number(request.headers.get("content-length") ?? 0) > LIMITS.body) {
    throw new ApiError(413, "payload_too_large", "Request exceeds 1 MiB");
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (request.body) {
    const reader = request.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > LIMITS.body) {
        await reader.cancel();
        throw new ApiError(413, "payload_too_large", "Request exceeds 1 MiB");
      }
      chunks.push(value);
    }
  }
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes));
  } catch {
    throw new ApiError(400, "invalid_json", "Expected a JSON object");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ApiError(400, "invalid_json", "Expected a JSON object");
  }
  return value as Record<string, unknown>;
}

const encoder = new TextEncoder();

function text(value: unknown, name: string, maxBytes: number, allowEmpty = false): string {
  if (typeof value !== "string" || (!allowEmpty && value === "") || value.includes("\0")
      || encoder.encode(value).byteLength > maxBytes) {
    throw new ApiError(400, "invalid_field", `Invalid ${name}`);
  }
  return value;
}

function known(data: Record<string, unknown>, allowed: readonly string[]): void {
  if (Object.keys(data).some((key) => !allowed.includes(key))) {
    throw new ApiError(400, "unknown_field", "Request contains an unsupported field");
  }
}

const or = <T>(value: unknown, fallback: T): unknown => (value === null || value === undefined ? fallback : value);

export interface WorkspaceConfig {
  persistent: boolean;
  cwd: string;
  image: string;
  instance: string;
}

export interface Policy {
  defaultInstance: string;
  allowedInstances: string[];
}

export function workspaceConfig(data: Record<string, unknown>, policy: Policy): WorkspaceConfig {
  known(data, ["persistent", "cwd", "image", "instance"]);
  if (typeof data.persistent !== "boolean") throw new ApiError(400, "invalid_field", "persistent must be boolean");
  const cwd = text(or(data.cwd, "/workspace"), "cwd", LIMITS.path);
  if (!cwd.startsWith("/")) throw new ApiError(400, "invalid_field", "cwd must be absolute");
  const image = text(or(data.image, "hermes"), "image", 128);
  if (!IMAGE.test(image)) throw new ApiError(400, "invalid_field", "Invalid named image");
  const instance = text(or(data.instance, policy.defaultInstance), "instance", 32);
  if (!INSTANCE_TYPES.includes(instance) || !policy.allowedInstances.includes(instance)) {
    throw new ApiError(400, "instance_not_allowed", "Requested instance is not enabled by the operator");
  }
  return { persistent: data.persistent, cwd, image, instance };
}

export function sameConfig(a: WorkspaceConfig, b: WorkspaceConfig): boolean {
  return a.persistent === b.persistent && a.cwd === b.cwd && a.image === b.image && a.instance === b.instance;
}

export interface ExecRequest {
  requestId: string;
  command: string;
  timeout: number;
  login: boolean;
  stdin: string | null;
  concurrent: boolean; // concurrent-exec
  maxOutput: number; // large-output
}

export function execRequest(data: Record<string, unknown>, offer: Offer): ExecRequest {
  const extra = [
    ...(offer.extensions.includes(EXT_CONCURRENT_EXEC) ? ["concurrent"] : []),
    ...(offer.extensions.includes(EXT_LARGE_OUTPUT) ? ["max_output"] : []),
  ];
  known(data, ["request_id", "command", "timeout", "login", "stdin", ...extra]);
  const requestId = text(data.request_id, "request_id", 32);
  if (!REQUEST_ID.test(requestId)) throw new ApiError(400, "invalid_field", "Invalid request_id");
  const command = text(data.command, "command", LIMITS.command, true);
  const timeout = or(data.timeout, LIMITS.defaultTimeout);
  if (typeof timeout !== "number" || !Number.isFinite(timeout) || timeout < LIMITS.minTimeout
      || timeout > LIMITS.maxTimeout) {
    throw new ApiError(400, "invalid_timeout", "timeout must be between 0.1 and 900 seconds");
  }
  const login = or(data.login, false);
  if (typeof login !== "boolean") throw new ApiError(400, "invalid_field", "login must be boolean");
  const stdin = data.stdin === null || data.stdin === undefined ? null : text(data.stdin, "stdin", LIMITS.stdin, true);
  const concurrent = or(data.concurrent, false);
  if (typeof concurrent !== "boolean") throw new ApiError(400, "invalid_field", "concurrent must be boolean");
  const maxOutput = or(data.max_output, LIMITS.output);
  if (typeof maxOutput !== "number" || !Number.isInteger(maxOutput) || maxOutput < 1 || maxOutput > offer.maxOutput) {
    throw new ApiError(400, "invalid_field", `max_output must be an integer from 1 to ${offer.maxOutput}`);
  }
  return { requestId, command, timeout, login, stdin, concurrent, maxOutput };
}

export function requireConfirm(data: Record<string, unknown>): void {
  if (data.confirm !== true) {
    throw new ApiError(400, "confirmation_required", "Send confirm: true to discard the workspace");
  }
}
