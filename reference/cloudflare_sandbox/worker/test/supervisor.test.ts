// The container's command supervisor (container/hermes-exec), run here with the local python3.

import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";

const SUPERVISOR = fileURLToPath(new URL("../../container/hermes-exec", import.meta.url));
const id = () => randomUUID().replaceAll("-", "");
// The supervisor's request records go to a directory of this run's own, removed at the end.
const RECORDS = mkdtempSync(join(tmpdir(), "hermes-exec-test-"));
const ENV = { ...process.env, HERMES_EXEC_RECORDS: RECORDS };
after(() => rmSync(RECORDS, { recursive: true, force: true }));

function run(args: string[], input?: string) {
  const result = spawnSync("python3", [SUPERVISOR, ...args], { input, encoding: "utf8", timeout: 20_000, env: ENV });
  return { code: result.status, out: result.stdout };
}

test("exit status, merged stderr and stdin pass through", () => {
  assert.deepEqual(run(["--id", id(), "5", "-c", "echo out; echo err >&2; exit 3"]).out, "out\nerr\n");
  assert.equal(run(["--id", id(), "5", "-c", "exit 3"]).code, 3);
  assert.equal(run(["--id", id(), "5", "-c", "cat"], "héllo\r\n").out, "héllo\r\n");
  assert.equal(run(["--id", id(), "5", "-c", "kill -TERM $$"]).code, 143);
});

test("a timeout stops the whole group with TERM, then KILL, and reports 124", async () => {
  // Both shells ignore TERM; the inner one records its pid, which must be gone once 124 is reported
  // (a supervisor that waited for the sleeps instead would hit spawnSync's 20 s limit: status null).
  const pidFile = join(RECORDS, `inner-${id()}`);
  const result = run(["--id", id(), "0.3", "-c",
    `trap '' TERM; sh -c 'trap "" TERM; echo $$ > ${pidFile}; sleep 30' & sleep 30`]);
  assert.equal(result.code, 124);
  const inner = Number(readFileSync(pidFile, "utf8"));
  assert.ok(await ended(inner), `the group's inner shell ${inner} survived the timeout`);
});

/** Whether ``pid`` has exited (gone, or a zombie nobody reaped yet), waiting up to 10 s for its SIGKILL to land. */
async function ended(pid: number): Promise<boolean> {
  for (let i = 0; i < 100; i++) {
    let state: string;
    try {
      state = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ").pop()!.charAt(0);
    } catch {
      return true;
    }
    if (state === "Z" || state === "X") return true;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return false;
}

test("invalid timeouts and usage are refused with 64", () => {
  for (const timeout of ["0", "901", "nan", "inf", "-1", "x"]) {
    assert.equal(run(["--id", id(), timeout, "-c", "true"]).code, 64, timeout);
  }
  assert.equal(run(["--id", id(), "5", "-x", "true"]).code, 64);
});

test("background jobs do not hold the command open", () => {
  const result = run(["--id", id(), "10", "-c", "(sleep 5; echo late) & echo fg"]);
  assert.equal(result.code, 0);
  // Held open until the job ended, the output would also carry "late".
  assert.equal(result.out, "fg\n");
});

/** Settles when the supervised command prints its first line.  The supervisor installs its signal
 *  handlers before it starts bash, so from then on a signal sent to it is forwarded, not fatal; a
 *  fixed sleep instead races python3's start-up, which takes seconds on a loaded machine. */
function commandStarted(child: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    child.stdout!.once("data", () => resolve());
    child.once("exit", (code, signal) => reject(new Error(`the supervisor ended (${code ?? signal}) before its command started`)));
  });
}

test("a forwarded SIGTERM ends the command with 143; --kill stops a recorded group", async () => {
  const rid = id();
  const child = spawn("python3", [SUPERVISOR, "--id", rid, "30", "-c", "echo started; sleep 30"], { env: ENV });
  const exited = new Promise<[number | null, string | null]>((resolve) => child.on("exit", (code, signal) => resolve([code, signal])));
  await commandStarted(child);
  child.kill("SIGTERM");
  assert.deepEqual(await exited, [143, null]);
  const other = id();
  // The supervisor records its group after bash starts: the command waits for that record before it
  // says it started, so --kill below finds it.
  const stuck = spawn("python3", [SUPERVISOR, "--id", other, "30", "-c",
    `trap '' TERM; until [ -s '${join(RECORDS, other)}' ]; do sleep 0.05; done; echo started; sleep 30`], { env: ENV });
  const gone = new Promise<string | null>((resolve) => stuck.on("exit", (_code, signal) => resolve(signal)));
  await commandStarted(stuck);
  assert.equal(run(["--kill", other]).code, 0);
  assert.equal(await gone, "SIGKILL");
  assert.ok(!existsSync(join(RECORDS, other)), "--kill leaves the killed supervisor's record behind");
  assert.equal(run(["--kill", id()]).code, 0, "an unknown id is not an error");
});
