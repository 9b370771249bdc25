// One workspace: what its Durable Object keeps (config, booted flag, snapshot record, recent and
// cancelled request ids, last activity) and does (init, status, exec stream, cancel, checkpoint,
// release, reset, the idle alarm).  The container is reached only through ContainerPort.
//
// Concurrency: v1 runs one foreground operation at a time (409 workspace_busy otherwise).  With
// the concurrent-exec extension an exec that sends "concurrent": true shares the workspace with
// other such execs, up to maxConcurrentExecs; every other operation (a v1 exec, init, release,
// checkpoint, reset, the idle alarm) still needs the workspace to itself.

import type { ContainerPort, ContainerProcess } from "./container.js";
import { line, OutputFramer } from "./framing.js";
import {
  ApiError, errorResponse, execRequest, json, LIMITS, readJson, requireConfirm, sameConfig, workspaceConfig,
  type ExecRequest, type Offer, type Policy, type WorkspaceConfig,
} from "./protocol.js";

export interface Storage {
  get<T>(key: string): Promise<T | undefined>;
  put(key: string, value: unknown): Promise<void>;
  delete(key: string): Promise<boolean>;
  deleteAll(): Promise<void>;
  setAlarm(scheduledTime: number): Promise<void>;
  deleteAlarm(): Promise<void>;
}

export interface ServiceSettings extends Policy {
  offer: Offer;
  enableInternet: boolean;
  idleMs: number; // IDLE_SECONDS: idle workspaces are snapshotted and stopped
  alarmRetryMs: number;
  heartbeatMs: number;
  hardDeadlineGraceMs: number; // hard_timeout this long after the command's timeout
  startupTimeoutMs: number;
  probeIntervalMs: number;
  killBoundMs: number; // each step of stopping a failed command
  exitBackstopMs: number; // stop reading a finished command whose stdout never closes
  now: () => number;
}

export const DEFAULTS: Omit<ServiceSettings, "offer" | "defaultInstance" | "allowedInstances"> = {
  enableInternet: true,
  idleMs: 600_000,
  alarmRetryMs: 60_000,
  heartbeatMs: 10_000,
  hardDeadlineGraceMs: 15_000,
  startupTimeoutMs: 60_000,
  probeIntervalMs: 100,
  killBoundMs: 5_000,
  exitBackstopMs: 7_000,
  now: () => Date.now(),
};

const SUPERVISOR = "/usr/local/bin/hermes-exec";
const SIGTERM = 15;
const NDJSON_HEADERS = {
  "content-type": "application/x-ndjson",
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
};

interface Snapshot {
  handle: unknown;
  savedAt: number;
}

/** One exec holding (a share of) the workspace. */
class Slot {
  cancelled = false;
  proc: ContainerProcess | null = null;
  constructor(readonly id: string, readonly shared: boolean) {}

  signal(): void {
    this.cancelled = true;
    this.proc?.kill(SIGTERM); // the supervisor forwards it to the command's process group
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function within<T>(promise: Promise<T>, ms: number): Promise<T | "timeout"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"timeout">((resolve) => { timer = setTimeout(() => resolve("timeout"), ms); });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

export class WorkspaceService {
  private exclusive: Slot | null = null;
  private readonly shared = new Map<string, Slot>();
  private lifecycle = false;
  private starting: Promise<void> | null = null;
  private recent: string[] | null = null;
  private cancelled: string[] = [];

  constructor(private readonly storage: Storage, private readonly container: ContainerPort,
              private readonly settings: ServiceSettings) {}

  get busy(): boolean {
    return this.exclusive !== null || this.lifecycle || this.shared.size > 0;
  }

  async handle(request: Request, action: string): Promise<Response> {
    try {
      if (action === "status") return json(await this.status());
      const body = await readJson(request);
      if (action === "init") return json(await this.exclusively(() => this.init(body)));
      if (action === "exec") return await this.exec(body);
      if (action.startsWith("cancel/")) return json(await this.cancel(action.slice("cancel/".length)));
      if (action === "release") return json(await this.exclusively(() => this.release()));
      if (action === "checkpoint") return json(await this.exclusively(() => this.checkpoint()));
      if (action === "reset") {
        requireConfirm(body);
        return json(await this.exclusively(() => this.reset()));
      }
      throw new ApiError(404, "not_found", "Not found");
    } catch (error) {
      return errorResponse(error);
    }
  }

  // -- lifecycle ------------------------------------------------------------------------
  private async exclusively<T>(fn: () => Promise<T>): Promise<T> {
    if (this.busy) throw new ApiError(409, "workspace_busy", "Workspace is busy");
    this.lifecycle = true;
    try {
      return await fn();
    } finally {
      this.lifecycle = false;
    }
  }

  private async config(): Promise<WorkspaceConfig> {
    const config = await this.storage.get<WorkspaceConfig>("config");
    if (!config) throw new ApiError(404, "workspace_missing", "Initialize the workspace first");
    return config;
  }

  private async touch(): Promise<void> {
    const now = this.settings.now();
    await this.storage.put("lastActivity", now);
    await this.storage.setAlarm(now + this.settings.idleMs);
  }

  private async init(body: Record<string, unknown>): Promise<Record<string, unknown>> {
    const config = workspaceConfig(body, this.settings);
    if (!this.container.hasImage(config.image)) throw new ApiError(400, "image_not_found", "Named image was not deployed");
    const stored = await this.storage.get<WorkspaceConfig>("config");
    if (stored && !sameConfig(stored, config)) {
      throw new ApiError(409, "config_conflict", "Existing workspace has different settings; use a new identity");
    }
    if (!stored) await this.storage.put("config", config);
    await this.touch();
    return { ok: true, running: this.container.running };
  }

  private async status(): Promise<Record<string, unknown>> {
    const config = await this.config();
    const snapshot = await this.storage.get<Snapshot>("snapshot");
    return { config, running: this.container.running, busy: this.busy, snapshot_saved_at: snapshot?.savedAt ?? null };
  }

  private async save(): Promise<void> {
    if (!this.container.running) {
      const snapshot = await this.storage.get<Snapshot>("snapshot");
      if (!snapshot && (await this.storage.get<boolean>("booted"))) {
        throw new ApiError(409, "workspace_lost", "Container stopped without a checkpoint");
      }
      return;
    }
    let handle: unknown;
    try {
      handle = await this.container.snapshot();
    } catch {
      throw new ApiError(503, "snapshot_failed", "Snapshot failed");
    }
    // The record is stored before anything is stopped: a failed put keeps the live files.
    await this.storage.put("snapshot", { handle, savedAt: this.settings.now() } satisfies Snapshot);
  }

  private async release(): Promise<Record<string, unknown>> {
    const config = await this.storage.get<WorkspaceConfig>("config");
    if (!config) return { ok: true };
    try {
      if (config.persistent) {
        await this.save();
        if (this.container.running) await this.container.destroy();
        await this.storage.deleteAlarm();
      } else {
        await this.forget();
      }
    } catch (error) {
      if (this.container.running) await this.storage.setAlarm(this.settings.now() + this.settings.alarmRetryMs);
      else await this.storage.deleteAlarm(); // nothing left to save: retrying would never end
      throw error;
    }
    return { ok: true };
  }

  private async checkpoint(): Promise<Record<string, unknown>> {
    const config = await this.config();
    if (!config.persistent) throw new ApiError(409, "not_persistent", "Workspace is ephemeral");
    await this.save();
    await this.touch();
    return { ok: true };
  }

  private async reset(): Promise<Record<string, unknown>> {
    await this.forget();
    return { ok: true };
  }

  private async forget(): Promise<void> {
    if (this.container.running) await this.container.destroy();
    await this.storage.deleteAlarm();
    await this.storage.deleteAll();
    this.recent = [];
    this.cancelled = [];
  }

  async alarm(): Promise<void> {
    if (this.busy) {
      await this.storage.setAlarm(this.settings.now() + this.settings.alarmRetryMs);
      return;
    }
    if (!(await this.storage.get<WorkspaceConfig>("config"))) return;
    const last = (await this.storage.get<number>("lastActivity")) ?? 0;
    const due = last + this.settings.idleMs;
    if (this.settings.now() < due) {
      await this.storage.setAlarm(due);
      return;
    }
    try {
      await this.exclusively(() => this.release());
    } catch {
      // release re-armed the alarm when a retry can help
    }
  }

  // -- request ids ------------------------------------------------------------------------
  private async ids(): Promise<string[]> {
    if (this.recent === null) {
      this.recent = (await this.storage.get<string[]>("recent")) ?? [];
      this.cancelled = (await this.storage.get<string[]>("cancelled")) ?? [];
    }
    return this.recent;
  }

  private async cancel(requestId: string): Promise<Record<string, unknown>> {
    await this.ids();
    if (!this.cancelled.includes(requestId)) {
      this.cancelled = [...this.cancelled, requestId].slice(-LIMITS.replay);
      await this.storage.put("cancelled", this.cancelled);
    }
    const slot = this.exclusive?.id === requestId ? this.exclusive : this.shared.get(requestId);
    slot?.signal();
    return { ok: true };
  }

  // -- exec ------------------------------------------------------------------------------
  private reserve(request: ExecRequest): Slot {
    const slot = new Slot(request.requestId, request.concurrent);
    if (request.concurrent) {
      if (this.exclusive || this.lifecycle || this.shared.size >= this.settings.offer.maxConcurrentExecs) {
        throw new ApiError(409, "workspace_busy", "Workspace is busy");
      }
      if (this.shared.has(slot.id)) throw new ApiError(409, "duplicate_request", "Do not replay an exec request");
      this.shared.set(slot.id, slot);
    } else {
      if (this.busy) throw new ApiError(409, "workspace_busy", "Workspace is busy");
      this.exclusive = slot;
    }
    return slot;
  }

  private finish(slot: Slot): void {
    if (this.exclusive === slot) this.exclusive = null;
    if (this.shared.get(slot.id) === slot) this.shared.delete(slot.id);
    void this.touch().catch(() => undefined);
  }

  private async exec(body: Record<string, unknown>): Promise<Response> {
    const request = execRequest(body, this.settings.offer);
    const slot = this.reserve(request); // before any await: the busy check and the claim are one step
    let config: WorkspaceConfig;
    try {
      config = await this.config();
      const recent = await this.ids();
      if (recent.includes(request.requestId)) throw new ApiError(409, "duplicate_request", "Do not replay an exec request");
      if (this.cancelled.includes(request.requestId)) {
        throw new ApiError(409, "command_cancelled", "Command was cancelled before execution");
      }
      this.recent = [...recent, request.requestId].slice(-LIMITS.replay);
      await this.storage.put("recent", this.recent);
      await this.touch();
    } catch (error) {
      this.finish(slot);
      throw error;
    }
    const pipe = new TransformStream<Uint8Array, Uint8Array>();
    void this.stream(slot, request, config, pipe.writable.getWriter());
    return new Response(pipe.readable, { status: 200, headers: NDJSON_HEADERS });
  }

  private async stream(slot: Slot, request: ExecRequest, config: WorkspaceConfig,
                       writer: WritableStreamDefaultWriter<Uint8Array>): Promise<void> {
    let gone = false;
    writer.closed.catch(() => {
      gone = true; // the client went away: cancel the command, as an explicit cancel would
      slot.signal();
    });
    const send = async (event: Record<string, unknown>): Promise<void> => {
      if (gone) return;
      try {
        await writer.ready; // backpressure: a slow reader slows the command down
        await writer.write(line(event));
      } catch {
        gone = true;
        slot.signal();
      }
    };
    const beat = setInterval(() => void send({ type: "heartbeat" }), this.settings.heartbeatMs);
    let terminal: Record<string, unknown>;
    try {
      terminal = { type: "exit", exit_code: await this.run(slot, request, config, send) };
    } catch (error) {
      terminal = { type: "error", code: error instanceof ApiError ? error.code : "exec_failed" };
    } finally {
      clearInterval(beat);
      this.finish(slot); // free before the terminal event: a client that saw it may go on at once
    }
    await send(terminal);
    if (!gone) await writer.close().catch(() => undefined);
  }

  private async run(slot: Slot, request: ExecRequest, config: WorkspaceConfig,
                    send: (event: Record<string, unknown>) => Promise<void>): Promise<number> {
    await this.ensureRunning(config);
    if (slot.cancelled) throw new ApiError(409, "command_cancelled", "Command cancelled");
    const argv = [SUPERVISOR, "--id", request.requestId, String(request.timeout), request.login ? "-lc" : "-c",
      request.command];
    const proc = await this.container.exec(argv, { cwd: config.cwd, stdin: request.stdin !== null });
    slot.proc = proc;
    if (slot.cancelled) proc.kill(SIGTERM);
    await send({ type: "started", request_id: request.requestId });
    if (request.stdin !== null && proc.stdin) void this.feed(proc.stdin, request.stdin);

    let fail: (error: ApiError) => void = () => undefined;
    const failed = new Promise<never>((_, reject) => { fail = reject; });
    failed.catch(() => undefined);
    const hard = setTimeout(() => fail(new ApiError(504, "hard_timeout", "Command stopped at hard deadline")),
      request.timeout * 1000 + this.settings.hardDeadlineGraceMs);
    void this.container.stopped().then(() => fail(new ApiError(409, "workspace_lost", "Container stopped")));
    const reader = proc.stdout.getReader();
    let backstop: ReturnType<typeof setTimeout> | undefined;
    void proc.exitCode.then(() => {
      backstop = setTimeout(() => void reader.cancel().catch(() => undefined), this.settings.exitBackstopMs);
    }, () => undefined);
    try {
      const framer = new OutputFramer(request.maxOutput);
      for (;;) {
        const { done, value } = await Promise.race([reader.read(), failed]);
        if (done) break;
        for (const data of framer.push(value)) await send({ type: "output", data });
      }
      for (const data of framer.end()) await send({ type: "output", data });
      const code = await Promise.race([proc.exitCode, failed]);
      // A dying container ends its processes too: their status is not the command's.
      if (!this.container.running) throw new ApiError(409, "workspace_lost", "Container stopped during the command");
      return code;
    } catch (error) {
      await this.stopAfterFailure(proc, request.requestId, error);
      throw error;
    } finally {
      clearTimeout(hard);
      clearTimeout(backstop);
      reader.releaseLock();
    }
  }

  private async feed(stdin: WritableStream<Uint8Array>, text: string): Promise<void> {
    const writer = stdin.getWriter();
    try {
      await writer.write(new TextEncoder().encode(text)); // written once, then closed: the command sees EOF
      await writer.close();
    } catch {
      // the command closed stdin early; its exit status decides
    }
  }

  /** SIGTERM, then the supervisor's kill by request id, then the container itself. */
  private async stopAfterFailure(proc: ContainerProcess, requestId: string, error: unknown): Promise<void> {
    if (error instanceof ApiError && error.code === "workspace_lost") return;
    proc.kill(SIGTERM);
    if ((await within(proc.exitCode.catch(() => 1), this.settings.killBoundMs)) !== "timeout") return;
    try {
      const killer = await within(this.container.exec([SUPERVISOR, "--kill", requestId], { stdin: false }),
        this.settings.killBoundMs);
      if (killer !== "timeout" && (await within(killer.exitCode, this.settings.killBoundMs)) === 0) return;
    } catch {
      // fall through: only destroying the container is left
    }
    await this.container.destroy();
  }

  // -- the container -------------------------------------------------------------------------
  private ensureRunning(config: WorkspaceConfig): Promise<void> {
    if (this.container.running && this.starting === null) return Promise.resolve();
    // Concurrent execs on a stopped workspace share one start.
    this.starting ??= this.start(config).finally(() => { this.starting = null; });
    return this.starting;
  }

  private async start(config: WorkspaceConfig): Promise<void> {
    const snapshot = await this.storage.get<Snapshot>("snapshot");
    if (!snapshot) {
      if (await this.storage.get<boolean>("booted")) {
        // Never replace a lost filesystem with an empty one.
        throw new ApiError(409, "workspace_lost", "No checkpoint exists for the stopped workspace; use a new identity");
      }
      if (!this.container.hasImage(config.image)) throw new ApiError(400, "image_not_found", "Named image is unavailable");
    }
    await this.container.start({
      image: snapshot ? null : config.image, snapshot: snapshot?.handle ?? null,
      instance: config.instance, enableInternet: this.settings.enableInternet,
    });
    await this.storage.put("booted", true);
    const deadline = this.settings.now() + this.settings.startupTimeoutMs;
    for (;;) {
      try {
        const probe = await this.container.exec(["/bin/true"], { stdin: false });
        if ((await probe.exitCode) === 0) break;
      } catch {
        // not ready yet
      }
      if (this.settings.now() >= deadline) throw new ApiError(503, "startup_timeout", "Container did not become ready");
      await sleep(this.settings.probeIntervalMs);
    }
    const mkdir = await this.container.exec(["/bin/mkdir", "-p", "--", config.cwd], { stdin: false });
    if ((await mkdir.exitCode) !== 0) throw new ApiError(400, "invalid_cwd", "Working directory is not writable");
  }
}
