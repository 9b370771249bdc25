// The container as the workspace service uses it, and the adapter over the Durable Object
// Container API (ctx.container).  The service only talks to ContainerPort, so tests run it
// against fake container storage; the adapter is the one place that names the platform API.

export interface ContainerProcess {
  readonly stdout: ReadableStream<Uint8Array>; // stdout and stderr merged
  readonly stdin: WritableStream<Uint8Array> | null; // present when asked for
  readonly exitCode: Promise<number>;
  kill(signal: number): void;
}

export interface StartOptions {
  image: string | null; // a named image, or null when restoring a snapshot (which is tied to its image)
  snapshot: unknown;
  instance: string;
  enableInternet: boolean;
}

export interface ExecOptions {
  cwd?: string;
  stdin: boolean;
}

export interface ContainerPort {
  readonly running: boolean;
  start(options: StartOptions): Promise<void>;
  exec(argv: string[], options: ExecOptions): Promise<ContainerProcess>;
  snapshot(): Promise<unknown>;
  destroy(): Promise<void>;
  /** Settles when the running container stops (crash, eviction, destroy). */
  stopped(): Promise<void>;
  hasImage(name: string): boolean;
}

// The subset of ctx.container this Worker calls (public beta; see the Worker README).
interface PlatformProcess {
  stdout: ReadableStream<Uint8Array> | null;
  stdin: WritableStream<Uint8Array> | null;
  exitCode: Promise<number>;
  kill(signal?: number): void;
}

interface PlatformContainer {
  running: boolean;
  images?: Record<string, unknown>;
  start(options: Record<string, unknown>): void | Promise<void>;
  exec(argv: string[], options: Record<string, unknown>): Promise<PlatformProcess>;
  snapshotContainer(options: Record<string, unknown>): Promise<unknown>;
  destroy(reason?: string): Promise<void>;
  monitor(): Promise<void>;
}

export function platformContainer(raw: unknown): ContainerPort {
  if (!raw) throw new Error("this Durable Object has no container binding (see wrangler.jsonc)");
  const c = raw as PlatformContainer;
  return {
    get running() {
      return c.running;
    },
    hasImage: (name) => c.images === undefined || name in c.images,
    async start(options) {
      const start: Record<string, unknown> = { enableInternet: options.enableInternet, instanceType: options.instance };
      if (options.snapshot !== null && options.snapshot !== undefined) start.containerSnapshot = options.snapshot;
      else if (options.image !== null) start.image = c.images?.[options.image] ?? options.image;
      await c.start(start);
    },
    async exec(argv, options) {
      const proc = await c.exec(argv, {
        cwd: options.cwd,
        stdin: options.stdin ? "pipe" : undefined,
        stdout: "pipe",
        stderr: "combined",
      });
      return {
        stdout: proc.stdout ?? new ReadableStream({ start: (controller) => controller.close() }),
        stdin: proc.stdin,
        exitCode: proc.exitCode,
        kill: (signal) => proc.kill(signal),
      };
    },
    snapshot: () => c.snapshotContainer({}),
    destroy: () => c.destroy(),
    stopped: () => c.monitor().catch(() => undefined),
  };
}
