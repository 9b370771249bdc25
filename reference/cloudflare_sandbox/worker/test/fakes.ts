// Fake container storage for the workspace service: Durable Object storage in a Map, and a
// container whose "files" survive only in snapshots and whose processes tests script.

import type { ContainerPort, ContainerProcess, ExecOptions, StartOptions } from "../src/container.js";
import { KNOWN_EXTENSIONS } from "../src/protocol.js";
import { DEFAULTS, type ServiceSettings, type Storage } from "../src/service.js";

export class MemoryStorage implements Storage {
  readonly data = new Map<string, unknown>();
  alarm: number | null = null;

  async get<T>(key: string): Promise<T | undefined> {
    return structuredClone(this.data.get(key)) as T | undefined;
  }

  async put(key: string, value: unknown): Promise<void> {
    this.data.set(key, structuredClone(value));
  }

  async delete(key: string): Promise<boolean> {
    return this.data.delete(key);
  }

  async deleteAll(): Promise<void> {
    this.data.clear();
  }

  async setAlarm(time: number): Promise<void> {
    this.alarm = time;
  }

  async deleteAlarm(): Promise<void> {
    this.alarm = null;
  }
}

/** A process the test drives: write output, end it, see signals and stdin. */
export class FakeProcess implements ContainerProcess {
  readonly stdout: ReadableStream<Uint8Array>;
  readonly stdin: WritableStream<Uint8Array> | null;
  readonly exitCode: Promise<number>;
  readonly signals: number[] = [];
  stdinText = "";
  stdinClosed = false;
  ignoreSignals = false;
  private out!: ReadableStreamDefaultController<Uint8Array>;
  private settle!: (code: number) => void;
  private ended = false;

  constructor(readonly argv: string[], withStdin: boolean) {
    this.stdout = new ReadableStream<Uint8Array>({ start: (c) => { this.out = c; } }, { highWaterMark: 0 });
    this.exitCode = new Promise<number>((resolve) => { this.settle = resolve; });
    const decoder = new TextDecoder();
    this.stdin = withStdin
      ? new WritableStream<Uint8Array>({
        write: (chunk) => { this.stdinText += decoder.decode(chunk, { stream: true }); },
        close: () => { this.stdinClosed = true; },
      })
      : null;
  }

  get command(): string {
    return this.argv[this.argv.length - 1] ?? "";
  }

  write(data: string | Uint8Array): void {
    if (!this.ended) this.out.enqueue(typeof data === "string" ? new TextEncoder().encode(data) : data);
  }

  exit(code: number): void {
    if (this.ended) return;
    this.ended = true;
    this.out.close();
    this.settle(code);
  }

  kill(signal: number): void {
    this.signals.push(signal);
    if (!this.ignoreSignals) this.exit(128 + signal);
  }
}

export type Script = (proc: FakeProcess) => void | Promise<void>;

export class FakeContainer implements ContainerPort {
  running = false;
  files = new Map<string, string>();
  readonly starts: StartOptions[] = [];
  readonly processes: FakeProcess[] = [];
  readonly images = new Set(["hermes"]);
  scripts = new Map<string, Script>(); // by command text (the last argv item)
  failSnapshot = false;
  killerWorks = true;
  private onStop: (() => void)[] = [];

  hasImage(name: string): boolean {
    return this.images.has(name);
  }

  async start(options: StartOptions): Promise<void> {
    this.starts.push(options);
    this.files = options.snapshot ? new Map((options.snapshot as { files: [string, string][] }).files) : new Map();
    this.running = true;
  }

  async exec(argv: string[], options: ExecOptions): Promise<FakeProcess> {
    if (!this.running) throw new Error("not running");
    const proc = new FakeProcess(argv, options.stdin);
    owners.set(proc, this);
    this.processes.push(proc);
    const command = proc.command;
    if (argv[0] === "/bin/true" || argv[0] === "/bin/mkdir") {
      proc.exit(0);
    } else if (argv[1] === "--kill") {
      if (this.killerWorks) for (const p of this.execs()) if (p.argv[2] === argv[2]) p.exit(137);
      proc.exit(this.killerWorks ? 0 : 1);
    } else {
      const script = this.scripts.get(command) ?? defaultScript;
      queueMicrotask(() => void script(proc));
    }
    return proc;
  }

  async snapshot(): Promise<unknown> {
    if (this.failSnapshot) throw new Error("snapshot failed");
    return { files: [...this.files] };
  }

  async destroy(): Promise<void> {
    this.running = false;
    this.files = new Map();
    for (const proc of this.processes) proc.exit(137);
    const waiting = this.onStop;
    this.onStop = [];
    for (const resolve of waiting) resolve();
  }

  stopped(): Promise<void> {
    return new Promise((resolve) => { this.onStop.push(resolve); });
  }

  execs(): FakeProcess[] {
    return this.processes.filter((p) => p.argv[0] === "/usr/local/bin/hermes-exec" && p.argv[1] === "--id");
  }
}

/** "echo X" prints X; "write K V" stores a file; "cat K" prints it; "exit N" exits N; "cat" echoes stdin. */
const defaultScript: Script = async (proc) => {
  const [verb, ...rest] = proc.command.split(" ");
  if (verb === "echo") proc.write(rest.join(" ") + "\n");
  if (verb === "write") container(proc).files.set(rest[0]!, rest.slice(1).join(" "));
  if (verb === "read") proc.write(container(proc).files.get(rest[0]!) ?? "missing");
  if (verb === "cat") {
    while (!proc.stdinClosed) await new Promise((r) => setTimeout(r, 1));
    proc.write(proc.stdinText);
  }
  proc.exit(verb === "exit" ? Number(rest[0]) : 0);
};

const owners = new WeakMap<FakeProcess, FakeContainer>();
function container(proc: FakeProcess): FakeContainer {
  return owners.get(proc)!;
}

export function settings(overrides: Partial<ServiceSettings> = {}): ServiceSettings {
  return {
    ...DEFAULTS,
    offer: { extensions: [...KNOWN_EXTENSIONS], maxConcurrentExecs: 4, maxOutput: 5_000_000 },
    defaultInstance: "standard-1",
    allowedInstances: ["lite", "standard-1"],
    heartbeatMs: 50,
    hardDeadlineGraceMs: 100,
    killBoundMs: 100,
    exitBackstopMs: 200,
    probeIntervalMs: 1,
    ...overrides,
  };
}

export interface Event {
  type: string;
  data?: string;
  exit_code?: number;
  code?: string;
  request_id?: string;
}

/** Read a whole NDJSON response into events. */
export async function events(response: Response): Promise<Event[]> {
  const text = await response.text();
  return text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as Event);
}

export function output(list: Event[]): string {
  return list.filter((e) => e.type === "output").map((e) => e.data).join("");
}

export function rid(): string {
  return crypto.randomUUID().replaceAll("-", "");
}

export function post(body: unknown, headers: Record<string, string> = {}): Request {
  return new Request("https://workspace/x", {
    method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body),
  });
}
