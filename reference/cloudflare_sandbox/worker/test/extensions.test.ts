// The concurrent-exec extension: opted-in execs share the workspace; everything else stays
// exclusive, exactly as in v1.

import assert from "node:assert/strict";
import { test } from "node:test";

import { WorkspaceService } from "../src/service.js";
import { events, FakeContainer, MemoryStorage, output, post, rid, settings } from "./fakes.js";

function setup(maxConcurrentExecs = 3) {
  const container = new FakeContainer();
  const storage = new MemoryStorage();
  const clock = { now: 5_000_000 };
  const service = new WorkspaceService(storage, container, settings({
    now: () => clock.now,
    offer: { extensions: ["concurrent-exec", "large-output"], maxConcurrentExecs, maxOutput: 5_000_000 },
  }));
  // "wait F" ends once file F exists; "touch F" creates it.
  container.scripts.set("wait", () => undefined);
  return { container, storage, service, clock };
}

function waiter(container: FakeContainer, name: string): void {
  container.scripts.set(`wait ${name}`, async (p) => {
    while (!container.files.has(name)) await new Promise((r) => setTimeout(r, 2));
    p.write("got\n");
    p.exit(0);
  });
  container.scripts.set(`touch ${name}`, (p) => {
    container.files.set(name, "");
    p.exit(0);
  });
}

const exec = (s: WorkspaceService, command: string, extra: Record<string, unknown> = {}) =>
  s.handle(post({ request_id: rid(), command, concurrent: true, ...extra }), "exec");

async function code(response: Response): Promise<string> {
  return ((await response.json()) as { error: { code: string } }).error.code;
}

test("a command can wait for another one to act (execute_code's RPC pattern)", async () => {
  const { container, service } = setup();
  await service.handle(post({ persistent: false }), "init");
  waiter(container, "flag");
  const first = await exec(service, "wait flag");
  const second = await exec(service, "touch flag");
  assert.equal((await events(second)).at(-1)!.exit_code, 0);
  assert.equal(output(await events(first)), "got\n");
});

test("concurrent cold starts share one container start", async () => {
  const { container, service } = setup();
  await service.handle(post({ persistent: false }), "init");
  const all = await Promise.all([exec(service, "echo a"), exec(service, "echo b"), exec(service, "echo c")]);
  const outputs = await Promise.all(all.map(async (r) => output(await events(r))));
  assert.deepEqual(outputs.sort(), ["a\n", "b\n", "c\n"]);
  assert.equal(container.starts.length, 1);
});

test("the cap, v1 execs and lifecycle operations keep their exclusivity", async () => {
  const { container, service } = setup(2);
  await service.handle(post({ persistent: true }), "init");
  const held = [await exec(service, "wait"), await exec(service, "wait")];
  assert.equal(await code(await exec(service, "echo over")), "workspace_busy");
  assert.equal(await code(await service.handle(post({ request_id: rid(), command: "echo v1" }), "exec")),
    "workspace_busy");
  for (const action of ["release", "checkpoint", "init"]) {
    const body = action === "init" ? { persistent: true } : {};
    assert.equal(await code(await service.handle(post(body), action)), "workspace_busy", action);
  }
  const status = (await (await service.handle(new Request("https://workspace/status"), "status")).json()) as
    Record<string, unknown>;
  assert.equal(status.busy, true);
  for (const proc of container.execs()) proc.exit(0);
  await Promise.all(held.map((r) => events(r)));
  // A v1 exec holds the workspace alone: opted-in execs wait for it too.
  const v1 = await service.handle(post({ request_id: rid(), command: "wait" }), "exec");
  assert.equal(await code(await exec(service, "echo shared")), "workspace_busy");
  container.execs().at(-1)!.exit(0);
  await events(v1);
  assert.equal(output(await events(await exec(service, "echo free"))), "free\n");
});

test("cancel stops only its own concurrent exec; replays are refused", async () => {
  const { container, service } = setup();
  await service.handle(post({ persistent: false }), "init");
  const ids = [rid(), rid()];
  const doomed = await service.handle(post({ request_id: ids[0], command: "wait", concurrent: true }), "exec");
  const kept = await service.handle(post({ request_id: ids[1], command: "wait", concurrent: true }), "exec");
  await new Promise((r) => setTimeout(r, 5));
  await service.handle(post({}), `cancel/${ids[0]}`);
  assert.equal((await events(doomed)).at(-1)!.exit_code, 143);
  const other = container.execs().find((p) => p.argv[2] === ids[1])!;
  assert.deepEqual(other.signals, []);
  other.exit(0);
  assert.equal((await events(kept)).at(-1)!.exit_code, 0);
  const replay = await service.handle(post({ request_id: ids[1], command: "echo", concurrent: true }), "exec");
  assert.equal(await code(replay), "duplicate_request");
});

test("the idle alarm waits while concurrent execs run", async () => {
  const { container, service, clock } = setup();
  await service.handle(post({ persistent: true }), "init");
  const running = await exec(service, "wait");
  await new Promise((r) => setTimeout(r, 5));
  clock.now += 3_600_000;
  await service.alarm();
  assert.equal(container.running, true);
  container.execs()[0]!.exit(0);
  await events(running);
  clock.now += 3_600_000;
  await service.alarm();
  assert.equal(container.running, false);
});
