// The workspace service against fake container storage: init, the exec stream, limits,
// cancellation, replay, persistence, loss, the idle alarm and the hard deadline.

import assert from "node:assert/strict";
import { test } from "node:test";

import { type ServiceSettings, WorkspaceService } from "../src/service.js";
import { events, FakeContainer, FakeProcess, MemoryStorage, output, post, rid, settings } from "./fakes.js";

interface World {
  service: WorkspaceService;
  storage: MemoryStorage;
  container: FakeContainer;
  clock: { now: number };
}

function world(overrides: Partial<ServiceSettings> = {}): World {
  const storage = new MemoryStorage();
  const container = new FakeContainer();
  const clock = { now: 1_000_000 };
  const service = new WorkspaceService(storage, container, settings({ now: () => clock.now, ...overrides }));
  return { service, storage, container, clock };
}

async function init(w: World, persistent = true, extra: Record<string, unknown> = {}): Promise<Response> {
  return w.service.handle(post({ persistent, ...extra }), "init");
}

async function exec(w: World, command: string, extra: Record<string, unknown> = {}): Promise<Response> {
  return w.service.handle(post({ request_id: rid(), command, ...extra }), "exec");
}

async function code(response: Response): Promise<[number, string]> {
  const body = (await response.json()) as { error: { code: string } };
  return [response.status, body.error.code];
}

const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms));

test("init stores the config once, boots nothing, and refuses a different one", async () => {
  const w = world();
  assert.deepEqual(await (await init(w)).json(), { ok: true, running: false });
  assert.equal((await init(w)).status, 200);
  assert.deepEqual(w.container.starts, []);
  assert.deepEqual(await code(await init(w, false)), [409, "config_conflict"]);
  assert.deepEqual(await code(await init(world(), true, { image: "other" })), [400, "image_not_found"]);
  assert.deepEqual(await code(await init(world(), true, { instance: "standard-4" })), [400, "instance_not_allowed"]);
  assert.deepEqual(await code(await exec(world(), "echo x")), [404, "workspace_missing"]);
});

test("the exec stream: started, output, exit; the cold start uses the named image", async () => {
  const w = world();
  await init(w);
  const response = await exec(w, "echo hello");
  assert.equal(response.headers.get("content-type"), "application/x-ndjson");
  const list = (await events(response)).filter((e) => e.type !== "heartbeat");
  assert.deepEqual(list.map((e) => e.type), ["started", "output", "exit"]);
  assert.equal(output(list), "hello\n");
  assert.equal(list.at(-1)!.exit_code, 0);
  assert.deepEqual(w.container.starts.map((s) => s.image), ["hermes"]);
  const argv = w.container.execs()[0]!.argv;
  assert.deepEqual(argv.slice(0, 5), ["/usr/local/bin/hermes-exec", "--id", argv[2], "120", "-c"]);
  assert.equal((await events(await exec(w, "exit 7"))).at(-1)!.exit_code, 7);
});

test("stdin is written once, then closed", async () => {
  const w = world();
  await init(w);
  const list = await events(await exec(w, "cat", { stdin: "a 'b' $HOME\r\n🚀" }));
  assert.equal(output(list), "a 'b' $HOME\r\n🚀");
  assert.equal(w.container.execs()[0]!.stdinClosed, true);
});

test("UTF-8 survives chunk boundaries and frames never split a surrogate pair", async () => {
  const w = world();
  await init(w);
  const text = "é🚀".repeat(3000) + "x".repeat(5000);
  const bytes = new TextEncoder().encode(text);
  w.container.scripts.set("split", async (p) => {
    for (let i = 0; i < bytes.length; i += 7) p.write(bytes.slice(i, i + 7));
    p.write(new Uint8Array([0xff]));
    p.exit(0);
  });
  const list = await events(await exec(w, "split"));
  const frames = list.filter((e) => e.type === "output").map((e) => e.data!);
  assert.ok(frames.join("") === text + "\ufffd", "the output differs from what the command wrote");
  for (const frame of frames) {
    assert.ok(frame.length <= 4096);
    assert.ok(!/[\ud800-\udbff]$/.test(frame), "a frame ends inside a surrogate pair");
  }
});

test("output over the limit is an error, never a truncation; large-output raises the limit", async () => {
  const w = world();
  await init(w);
  w.container.scripts.set("flood", async (p) => {
    for (let i = 0; i < 25; i++) p.write("x".repeat(100_000));
    p.exit(0);
  });
  const over = await events(await exec(w, "flood"));
  assert.equal(over.at(-1)!.code, "output_limit");
  assert.ok(output(over).length <= 2_000_000);
  assert.equal(w.container.execs()[0]!.signals[0], 15, "the command was not stopped");
  const raised = await events(await exec(w, "flood", { max_output: 3_000_000 }));
  assert.equal(raised.at(-1)!.exit_code, 0);
  assert.equal(output(raised).length, 2_500_000);
  assert.equal((await events(await exec(w, "flood", { max_output: 10 }))).at(-1)!.code, "output_limit");
  assert.deepEqual(await code(await exec(w, "flood", { max_output: 5_000_001 })), [400, "invalid_field"]);
});

test("a request id runs once; a cancel may come first and then refuses it", async () => {
  const w = world();
  await init(w);
  const id = rid();
  assert.equal((await events(await w.service.handle(post({ request_id: id, command: "echo 1" }), "exec"))).at(-1)!.exit_code, 0);
  assert.deepEqual(await code(await w.service.handle(post({ request_id: id, command: "echo 1" }), "exec")),
    [409, "duplicate_request"]);
  const early = rid();
  assert.deepEqual(await (await w.service.handle(post({}), `cancel/${early}`)).json(), { ok: true });
  assert.deepEqual(await code(await w.service.handle(post({ request_id: early, command: "echo 2" }), "exec")),
    [409, "command_cancelled"]);
  assert.equal(w.container.execs().length, 1);
});

test("cancel signals only the matching command, which exits 143", async () => {
  const w = world();
  await init(w);
  w.container.scripts.set("wait", () => undefined); // runs until signalled
  const id = rid();
  const pending = w.service.handle(post({ request_id: id, command: "wait" }), "exec");
  const response = await pending;
  await tick(5);
  await w.service.handle(post({}), `cancel/${rid()}`);
  assert.deepEqual(w.container.execs()[0]!.signals, []);
  await w.service.handle(post({}), `cancel/${id}`);
  assert.equal((await events(response)).at(-1)!.exit_code, 143);
});

test("a client that goes away cancels its command", async () => {
  const w = world();
  await init(w);
  w.container.scripts.set("wait", (p) => { p.write("x\n"); });
  const response = await exec(w, "wait");
  const reader = response.body!.getReader();
  await reader.read();
  await reader.cancel();
  await tick(10);
  assert.deepEqual(w.container.execs()[0]!.signals, [15]);
});

test("persistent release snapshots before destroying; the next command restores without the image", async () => {
  const w = world();
  await init(w);
  await events(await exec(w, "write f kept"));
  assert.deepEqual(await (await w.service.handle(post({}), "release")).json(), { ok: true });
  assert.equal(w.container.running, false);
  const status = (await (await w.service.handle(new Request("https://workspace/status"), "status")).json()) as
    Record<string, unknown>;
  assert.equal(status.running, false);
  assert.equal(typeof status.snapshot_saved_at, "number");
  assert.equal(output(await events(await exec(w, "read f"))), "kept");
  assert.equal(w.container.starts.at(-1)!.image, null);
  assert.ok(w.container.starts.at(-1)!.snapshot);
});

test("a failed snapshot keeps the container and retries later", async () => {
  const w = world();
  await init(w);
  await events(await exec(w, "write f v"));
  w.container.failSnapshot = true;
  assert.deepEqual(await code(await w.service.handle(post({}), "release")), [503, "snapshot_failed"]);
  assert.equal(w.container.running, true);
  assert.equal(w.storage.alarm, w.clock.now + 60_000);
});

test("ephemeral release destroys and forgets everything", async () => {
  const w = world();
  await init(w, false);
  await events(await exec(w, "echo x"));
  await w.service.handle(post({}), "release");
  assert.equal(w.container.running, false);
  assert.equal(w.storage.data.size, 0);
  assert.deepEqual(await code(await exec(w, "echo y")), [404, "workspace_missing"]);
});

test("a lost filesystem fails closed, never as an empty workspace", async () => {
  const w = world();
  await init(w);
  await events(await exec(w, "echo boot"));
  await w.container.destroy(); // the container is gone and no snapshot was ever taken
  assert.equal((await events(await exec(w, "echo again"))).at(-1)!.code, "workspace_lost");
  assert.equal(w.container.starts.length, 1);
  assert.deepEqual(await code(await w.service.handle(post({}), "checkpoint")), [409, "workspace_lost"]);
});

test("a container that dies mid-command ends the stream with workspace_lost", async () => {
  const w = world();
  await init(w);
  w.container.scripts.set("wait", () => undefined);
  const response = await exec(w, "wait");
  await tick(5);
  await w.container.destroy();
  assert.equal((await events(response)).at(-1)!.code, "workspace_lost");
});

test("the idle alarm snapshots and stops; activity and busy workspaces postpone it", async () => {
  const w = world({ idleMs: 60_000 });
  await init(w);
  await events(await exec(w, "write f idle"));
  await tick(5);
  assert.equal(w.storage.alarm, w.clock.now + 60_000);
  await w.service.alarm(); // too early: re-armed for the due time
  assert.equal(w.container.running, true);
  w.container.scripts.set("wait", () => undefined);
  const response = await exec(w, "wait");
  w.clock.now += 120_000;
  await w.service.alarm();
  assert.equal(w.container.running, true, "a busy workspace was stopped");
  await w.service.handle(post({}), `cancel/${w.container.execs().at(-1)!.argv[2]}`);
  await events(response);
  w.clock.now += 120_000;
  await w.service.alarm();
  assert.equal(w.container.running, false);
  assert.equal(output(await events(await exec(w, "read f"))), "idle");
});

test("the hard deadline kills the command group by id and keeps the workspace", async () => {
  const w = world();
  await init(w);
  w.container.scripts.set("stuck", (p) => { p.ignoreSignals = true; });
  const list = await events(await exec(w, "stuck", { timeout: 0.1 }));
  assert.equal(list.at(-1)!.code, "hard_timeout");
  assert.ok(w.container.processes.some((p) => p.argv[1] === "--kill"));
  assert.equal(w.container.running, true);
  w.container.killerWorks = false;
  const again = await events(await exec(w, "stuck", { timeout: 0.1 }));
  assert.equal(again.at(-1)!.code, "hard_timeout");
  assert.equal(w.container.running, false, "a kill that failed must destroy the container");
});

test("a finished command whose stdout never closes still reports its exit", async () => {
  const w = world();
  await init(w);
  w.container.scripts.set("leaky", (p: FakeProcess) => {
    p.write("done\n");
    (p as unknown as { settle: (c: number) => void }).settle(3); // exits; a background child keeps stdout
  });
  const list = await events(await exec(w, "leaky"));
  assert.equal(list.at(-1)!.exit_code, 3);
});

test("delete needs confirmation", async () => {
  const w = world();
  await init(w);
  assert.deepEqual(await code(await w.service.handle(post({}), "reset")), [400, "confirmation_required"]);
  assert.deepEqual(await (await w.service.handle(post({ confirm: true }), "reset")).json(), { ok: true });
  assert.equal(w.storage.data.size, 0);
});
