// The container's command supervisor (container/hermes-exec), run here with the local python3.

import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

const SUPERVISOR = fileURLToPath(new URL("../../container/hermes-exec", import.meta.url));
const id = () => randomUUID().replaceAll("-", "");

function run(args: string[], input?: string) {
  const started = Date.now();
  const result = spawnSync("python3", [SUPERVISOR, ...args], { input, encoding: "utf8", timeout: 20_000 });
  return { code: result.status, out: result.stdout, seconds: (Date.now() - started) / 1000 };
}

test("exit status, merged stderr and stdin pass through", () => {
  assert.deepEqual(run(["--id", id(), "5", "-c", "echo out; echo err >&2; exit 3"]).out, "out\nerr\n");
  assert.equal(run(["--id", id(), "5", "-c", "exit 3"]).code, 3);
  assert.equal(run(["--id", id(), "5", "-c", "cat"], "héllo\r\n").out, "héllo\r\n");
  assert.equal(run(["--id", id(), "5", "-c", "kill -TERM $$"]).code, 143);
});

test("a timeout stops the whole group with TERM, then KILL, and reports 124", () => {
  const result = run(["--id", id(), "0.3", "-c", "trap '' TERM; sh -c 'trap \"\" TERM; sleep 30' & sleep 30"]);
  assert.equal(result.code, 124);
  assert.ok(result.seconds < 5, `took ${result.seconds}s`);
});

test("invalid timeouts and usage are refused with 64", () => {
  for (const timeout of ["0", "901", "nan", "inf", "-1", "x"]) {
    assert.equal(run(["--id", id(), timeout, "-c", "true"]).code, 64, timeout);
  }
  assert.equal(run(["--id", id(), "5", "-x", "true"]).code, 64);
});

test("background jobs do not hold the command open", () => {
  const result = run(["--id", id(), "10", "-c", "(sleep 5; echo late) & echo fg"]);
  assert.equal(result.code, 0);
  assert.equal(result.out, "fg\n");
  assert.ok(result.seconds < 3, `took ${result.seconds}s`);
});

test("a forwarded SIGTERM ends the command with 143; --kill stops a recorded group", async () => {
  const rid = id();
  const child = spawn("python3", [SUPERVISOR, "--id", rid, "30", "-c", "sleep 30"]);
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  await new Promise((r) => setTimeout(r, 300));
  child.kill("SIGTERM");
  assert.equal(await exited, 143);
  const other = id();
  const stuck = spawn("python3", [SUPERVISOR, "--id", other, "30", "-c", "trap '' TERM; sleep 30"]);
  const gone = new Promise<string | null>((resolve) => stuck.on("exit", (_code, signal) => resolve(signal)));
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(run(["--kill", other]).code, 0);
  assert.equal(await gone, "SIGKILL");
  assert.equal(run(["--kill", id()]).code, 0, "an unknown id is not an error");
});
