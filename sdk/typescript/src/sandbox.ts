/**
 * {@link Sandbox}: one sandbox on an Airlock server, with E2B's JS
 * vocabulary: `Sandbox.create/connect/list`, `kill`, `setTimeout`,
 * `getInfo`, `getMetrics`, `pause`, `resume`, `fork`, `getHost`, the
 * snapshots (`createSnapshot`, `listSnapshots`, `deleteSnapshot`); its
 * `commands`, `files`, `pty` and `network`; the code interpreter's
 * `runCode` and contexts; and Airlock's `expose` and `rotateTrafficToken`
 * for the server's HTTP ingress.
 */

import type { MessageInitShape } from "@bufbuild/protobuf";

import { CodeInterpreter, type Context, type CreateCodeContextOpts, type Execution, type RunCodeOpts } from "./code.js";
import { Commands } from "./commands.js";
import { Connection, type ConnectionOpts, type Platform, type RequestOpts } from "./connection.js";
import { InvalidArgumentError, NotFoundError, SandboxError } from "./errors.js";
import { Filesystem } from "./files.js";
import { SandboxIngress, checkPort, type ExposedPort } from "./ingress.js";
import { IdlePolicy, type CreateSandboxRequestSchema } from "./gen/airlock/api/v1/sandboxes_pb.js";
import { apiState, sandboxInfo, sandboxMetrics, type SandboxInfo, type SandboxMetrics, type SandboxState } from "./info.js";
import { ALL_TRAFFIC, Network } from "./network.js";
import { Pty } from "./pty.js";
import {
  SnapshotPaginator,
  createSandbox,
  snapshotInfo,
  takeSnapshot,
  type CreateSnapshotOpts,
  type SnapshotInfo,
  type SnapshotListOpts,
} from "./snapshots.js";

/** A credential the guest may use but never see, for `secrets`. */
export interface SecretSpec {
  /** The value the host puts into HTTP(S) requests to `hosts` (the guest holds a placeholder). */
  value: string;
  /** Host names, or `*.suffix` (1 to 16). */
  hosts: string[];
}

/** What an idle sandbox does. */
export interface IdleSpec {
  /** Milliseconds without a call (1 s to 7 days). */
  timeoutMs: number;
  /** "pause" (default): stop its CPUs; "pauseToDisk": save it and free its memory; "stop": kill it. */
  action?: "pause" | "pauseToDisk" | "stop";
}

/** Options of `Sandbox.create`: the sandbox, and where the server is. */
export interface SandboxOpts extends ConnectionOpts, RequestOpts {
  /**
   * A template by name; the sandbox starts from its snapshot (default: the
   * image's own). A name no template has is tried as a snapshot of yours
   * (E2B's `Sandbox.create(snapshotId)`).
   */
  template?: string;
  /**
   * A snapshot of yours by name: the sandbox starts as a clone of it, with
   * its memory, programs and files, at its size and on its image.
   */
  snapshot?: string;
  /** A root image by name from the server's store (default: "default", Debian with Python). */
  image?: string;
  /** No root image: the initramfs's busybox environment (fast, tiny). */
  noImage?: boolean;
  /** Kill it this long after it starts (default: 300 000, five minutes, as E2B's; 0: never, the owner only). */
  timeoutMs?: number;
  /** Labels (`Sandbox.list` filters on them). */
  metadata?: Record<string, string>;
  /** Environment variables every command and code context gets. */
  envs?: Record<string, string>;
  /** Guest memory in MiB (default: the server's, 512 for the default image). */
  memoryMb?: number;
  /** Virtual CPUs (default 1). */
  vcpus?: number;
  /**
   * Network allow rules ("example.com", "*.example.com:443",
   * "10.0.0.0/8:5432"). With no rule and no secret the sandbox has no
   * network at all.
   */
  allowNet?: string[];
  /**
   * E2B's spelling: `allowOut` rules become `allowNet`'s; `denyOut` may only
   * say `[ALL_TRAFFIC]` (an Airlock sandbox denies whatever is not allowed).
   */
  network?: SandboxNetworkOpts;
  /**
   * E2B's switch. `true` (E2B's default) is refused: an Airlock sandbox has
   * no network unless rules allow it (`allowNet`); `false` changes nothing.
   */
  allowInternetAccess?: boolean;
  /** Secrets by the name of the guest's variable that holds their placeholder. */
  secrets?: Record<string, SecretSpec>;
  /** What it does when idle (default: nothing). */
  idle?: IdleSpec;
  /** Boot from the kernel instead of a template's snapshot. */
  cold?: boolean;
  /** A workspace: a persistent disk by name, kept by the server per key. */
  workspace?: string;
  /** CA certificates (PEM) the guest trusts besides its image's roots. */
  caCerts?: string[];
  /**
   * Guest ports the server's HTTP ingress serves without the traffic token
   * (at most 16, each 1 to 65535); every other port needs it (see
   * `expose`).
   */
  publicPorts?: number[];
}

/** E2B's network options of `Sandbox.create`. */
export interface SandboxNetworkOpts {
  /** Hosts, `*.suffix` or CIDRs the sandbox may reach. */
  allowOut?: string[];
  /** Only `[ALL_TRAFFIC]`: what is not allowed is denied already. */
  denyOut?: string[];
}

/** Options of `Sandbox.list`. */
export interface SandboxListOpts extends ConnectionOpts, RequestOpts {
  /** Only sandboxes with every one of these labels. */
  metadata?: Record<string, string>;
  /** Only sandboxes in these states (default: running, paused and on disk, as E2B lists; "ended" for ended ones). */
  state?: SandboxState | SandboxState[];
  /** E2B's spelling of the filters. */
  query?: { metadata?: Record<string, string>; state?: SandboxState | SandboxState[] };
  /** Sandboxes per page (default 100, at most 1000). */
  limit?: number;
  /** Start at this page (a previous page's `nextToken`). */
  nextToken?: string;
}

function secondsOf(ms: number): bigint {
  return ms <= 0 ? 0n : BigInt(Math.max(1, Math.ceil(ms / 1000)));
}

const IDLE: Record<NonNullable<IdleSpec["action"]>, IdlePolicy> = {
  pause: IdlePolicy.PAUSE,
  pauseToDisk: IdlePolicy.PAUSE_TO_DISK,
  stop: IdlePolicy.STOP,
};

/** E2B's default lifetime of a sandbox (the server's own is an hour). */
export const DEFAULT_SANDBOX_TIMEOUT_MS = 300_000;

/** What `Sandbox.list` shows unless told: E2B never lists ended sandboxes. */
const LISTED_STATES: SandboxState[] = ["running", "paused", "on-disk"];

/** E2B's `network` option as allow rules, or the error that says what to write instead. */
function networkRules(network: SandboxNetworkOpts | undefined): string[] {
  if (network === undefined) {
    return [];
  }
  for (const key of Object.keys(network)) {
    if (key !== "allowOut" && key !== "denyOut") {
      throw new InvalidArgumentError(
        `network.${key} is not supported by Airlock: give network.allowOut (hosts, *.suffix or CIDRs), or allowNet`,
        { field: "network" },
      );
    }
  }
  if ((network.denyOut ?? []).some((rule) => rule !== ALL_TRAFFIC)) {
    throw new InvalidArgumentError(
      "network.denyOut: an Airlock sandbox denies everything its rules do not allow; list what it may reach in network.allowOut (or allowNet) instead of what it may not",
      { field: "network" },
    );
  }
  const allow = network.allowOut ?? [];
  if (allow.includes(ALL_TRAFFIC)) {
    throw new InvalidArgumentError(
      "network.allowOut ALL_TRAFFIC: Airlock allows egress rule by rule; list the hosts the sandbox may reach ('example.com', '*.example.org:443')",
      { field: "network" },
    );
  }
  return allow;
}

function createRequest(opts: SandboxOpts, platform: Platform): MessageInitShape<typeof CreateSandboxRequestSchema> {
  if (opts.allowInternetAccess === true) {
    throw new InvalidArgumentError(
      "allowInternetAccess: true: an Airlock sandbox has no network unless rules allow it; pass allowNet: ['example.com', '*.example.org:443', ...] instead",
      { field: "allowNet" },
    );
  }
  return {
    image:
      opts.image ??
      (opts.template === undefined && opts.snapshot === undefined && opts.noImage !== true
        ? (platform.defaultImage?.() ?? "")
        : ""),
    noImage: opts.noImage === true,
    template: opts.template ?? "",
    memoryMib: opts.memoryMb ?? 0,
    vcpus: opts.vcpus ?? 0,
    timeoutSecs: secondsOf(opts.timeoutMs ?? DEFAULT_SANDBOX_TIMEOUT_MS),
    idle:
      opts.idle === undefined
        ? undefined
        : { timeoutSecs: secondsOf(opts.idle.timeoutMs), policy: IDLE[opts.idle.action ?? "pause"] },
    cold: opts.cold === true,
    metadata: opts.metadata ?? {},
    envs: opts.envs ?? {},
    allowNet: [...(opts.allowNet ?? []), ...networkRules(opts.network)],
    secrets: Object.entries(opts.secrets ?? {}).map(([name, secret]) => ({
      name,
      value: secret.value,
      hosts: secret.hosts,
    })),
    workspace: opts.workspace ?? "",
    caCerts: opts.caCerts ?? [],
    publicPorts: opts.publicPorts ?? [],
    snapshot: opts.snapshot ?? "",
  };
}

/**
 * Pages of `Sandbox.list`, as E2B's v2 pages them: `nextItems()` gives one
 * page while `hasNext`; `for await (const info of Sandbox.list())` goes
 * through every page. It is not a promise (awaiting it gives the paginator
 * itself, as E2B's does).
 */
export class SandboxPaginator implements AsyncIterable<SandboxInfo> {
  /** Whether another page may follow. */
  hasNext = true;
  /** The next page's token ("" or undefined at the end). */
  nextToken?: string;

  /** @internal */
  constructor(
    private readonly platform: Platform,
    private readonly opts: SandboxListOpts,
  ) {
    this.nextToken = opts.nextToken;
  }

  /** The next page. */
  async nextItems(): Promise<SandboxInfo[]> {
    if (!this.hasNext) {
      throw new SandboxError("no more sandboxes to list: check hasNext before nextItems()");
    }
    const opts = this.opts;
    const connection = await Connection.get(this.platform, opts, opts.signal);
    const state = opts.query?.state ?? opts.state;
    const states = (state === undefined ? LISTED_STATES : Array.isArray(state) ? state : [state]).map(apiState);
    const answer = await connection.call(opts, (o) =>
      connection.sandboxes.list(
        {
          metadata: opts.query?.metadata ?? opts.metadata ?? {},
          states,
          pageSize: opts.limit ?? 0,
          pageToken: this.nextToken ?? "",
        },
        o,
      ),
    );
    this.nextToken = answer.nextPageToken === "" ? undefined : answer.nextPageToken;
    this.hasNext = this.nextToken !== undefined;
    return answer.sandboxes.map(sandboxInfo);
  }

  /** Every remaining sandbox, page by page. */
  async *[Symbol.asyncIterator](): AsyncIterator<SandboxInfo> {
    while (this.hasNext) {
      yield* await this.nextItems();
    }
  }
}

/** The platform of a `Sandbox` class: its entry point's. */
function platformOf(cls: { platform?: Platform }): Platform {
  if (cls.platform === undefined) {
    throw new SandboxError("this Sandbox has no transport: import Sandbox from 'airlock-sdk' (or 'airlock-sdk/web')");
  }
  return cls.platform;
}

/**
 * A sandbox: a microVM on an Airlock server. Each entry point exports a
 * subclass that knows its transports (Node's gRPC, or the web's gRPC-Web).
 */
export class Sandbox {
  /** @internal How this entry point reaches servers. */
  static platform?: Platform;

  /** Its id (also its hostname in the guest). */
  readonly sandboxId: string;
  /** Shell commands. */
  readonly commands: Commands;
  /** The guest's files. */
  readonly files: Filesystem;
  /** Interactive terminals. */
  readonly pty: Pty;
  /** Its network policy and audit log. */
  readonly network: Network;

  private readonly connection: Connection;
  private readonly interpreter: CodeInterpreter;
  private readonly ingress: SandboxIngress;
  /** Port 1's host on the server's ingress (or why there is none), which `getHost` rewrites for any port. */
  private ingressHost?: { host: string } | { error: unknown };

  /** @internal Use `Sandbox.create` or `Sandbox.connect`. */
  protected constructor(connection: Connection, sandboxId: string) {
    this.connection = connection;
    this.sandboxId = sandboxId;
    this.commands = new Commands(connection, sandboxId);
    this.files = new Filesystem(connection, sandboxId);
    this.pty = new Pty(connection, sandboxId);
    this.network = new Network(connection, sandboxId);
    this.interpreter = new CodeInterpreter(connection, sandboxId);
    this.ingress = new SandboxIngress(connection, sandboxId);
  }

  /** The server this sandbox lives on, with the options that reach it. */
  get connectionOpts(): ConnectionOpts {
    return this.connection.opts;
  }

  /** Starts a sandbox and returns once it runs. */
  static async create(opts?: SandboxOpts): Promise<Sandbox>;
  /** Starts a sandbox from a template (E2B's form) and returns once it runs. */
  static async create(template: string, opts?: SandboxOpts): Promise<Sandbox>;
  static async create(templateOrOpts?: string | SandboxOpts, maybeOpts?: SandboxOpts): Promise<Sandbox> {
    const opts =
      typeof templateOrOpts === "string" ? { ...maybeOpts, template: templateOrOpts } : (templateOrOpts ?? {});
    const request = createRequest(opts, platformOf(this));
    const connection = await Connection.get(platformOf(this), opts, opts.signal);
    const info = await createSandbox(connection, request, opts);
    return await new this(connection, info.sandboxId).prepared(opts);
  }

  /** Learns where the server's ingress serves this sandbox, so `getHost` can answer at once as E2B's does. */
  private async prepared(opts?: RequestOpts): Promise<this> {
    try {
      this.ingressHost = { host: (await this.ingress.expose("getHost(port)", 1, opts)).host };
    } catch (error) {
      this.ingressHost = { error };
    }
    return this;
  }

  /**
   * A sandbox that exists, by id; a paused one (or one saved to disk) is
   * resumed. `NotFoundError` when there is none (or it is not yours).
   */
  static async connect(sandboxId: string, opts: ConnectionOpts & RequestOpts = {}): Promise<Sandbox> {
    const connection = await Connection.get(platformOf(this), opts, opts.signal);
    const info = await connection.call(opts, (o) => connection.sandboxes.get({ sandboxId }, o));
    const sandbox = new this(connection, sandboxId);
    const state = sandboxInfo(info).state;
    if (state === "paused" || state === "on-disk") {
      await sandbox.resume(opts);
    }
    return await sandbox.prepared(opts);
  }

  /**
   * Reaches this sandbox again (E2B's instance `connect`): resumes it if it
   * was paused or saved to disk, and with `timeoutMs` sets its timeout from
   * now. `NotFoundError` when it has ended.
   */
  async connect(opts: RequestOpts & { timeoutMs?: number } = {}): Promise<this> {
    const state = (await this.getInfo(opts)).state;
    if (state === "paused" || state === "on-disk") {
      await this.resume(opts);
    }
    if (opts.timeoutMs !== undefined) {
      await this.setTimeout(opts.timeoutMs, opts);
    }
    return this.ingressHost === undefined ? await this.prepared(opts) : this;
  }

  /** Your sandboxes, filtered by labels and states: await it for all, or page with `nextItems()`. */
  static list(opts: SandboxListOpts = {}): SandboxPaginator {
    return new SandboxPaginator(platformOf(this), opts);
  }

  /** Kills a sandbox by id; false when there was none. */
  static async kill(sandboxId: string, opts: ConnectionOpts & RequestOpts = {}): Promise<boolean> {
    const connection = await Connection.get(platformOf(this), opts, opts.signal);
    try {
      await connection.call(opts, (o) => connection.sandboxes.kill({ sandboxId }, o));
      return true;
    } catch (error) {
      if (error instanceof NotFoundError) {
        return false;
      }
      throw error;
    }
  }

  /** A sandbox's information, by id. */
  static async getInfo(sandboxId: string, opts: ConnectionOpts & RequestOpts = {}): Promise<SandboxInfo> {
    const connection = await Connection.get(platformOf(this), opts, opts.signal);
    return sandboxInfo(await connection.call(opts, (o) => connection.sandboxes.get({ sandboxId }, o)));
  }

  /** Sets when a sandbox is killed: `timeoutMs` from now (0: never, the owner only). */
  static async setTimeout(sandboxId: string, timeoutMs: number, opts: ConnectionOpts & RequestOpts = {}): Promise<void> {
    const connection = await Connection.get(platformOf(this), opts, opts.signal);
    await connection.call(opts, (o) =>
      connection.sandboxes.setTimeout({ sandboxId, timeoutSecs: secondsOf(timeoutMs) }, o),
    );
  }

  /** Resumes a paused sandbox (or one saved to disk) by id. */
  static async resume(sandboxId: string, opts: ConnectionOpts & RequestOpts = {}): Promise<Sandbox> {
    const connection = await Connection.get(platformOf(this), opts, opts.signal);
    await connection.call(opts, (o) => connection.sandboxes.resume({ sandboxId }, o));
    return await new this(connection, sandboxId).prepared(opts);
  }

  /** Kills the sandbox (one saved to disk loses its files). */
  async kill(opts?: RequestOpts): Promise<void> {
    await this.connection.call(opts, (o) => this.connection.sandboxes.kill({ sandboxId: this.sandboxId }, o));
  }

  /** Kills the sandbox `timeoutMs` from now (0: never, the owner only). */
  async setTimeout(timeoutMs: number, opts?: RequestOpts): Promise<void> {
    await this.connection.call(opts, (o) =>
      this.connection.sandboxes.setTimeout({ sandboxId: this.sandboxId, timeoutSecs: secondsOf(timeoutMs) }, o),
    );
  }

  /** Its state, labels, image, size, times and usage. */
  async getInfo(opts?: RequestOpts): Promise<SandboxInfo> {
    return sandboxInfo(
      await this.connection.call(opts, (o) => this.connection.sandboxes.get({ sandboxId: this.sandboxId }, o)),
    );
  }

  /** Whether it runs (not paused, saved to disk or ended). */
  async isRunning(opts?: RequestOpts): Promise<boolean> {
    try {
      return (await this.getInfo(opts)).state === "running";
    } catch (error) {
      if (error instanceof NotFoundError) {
        return false;
      }
      throw error;
    }
  }

  /**
   * Its figures now: memory, its programs' CPU and memory, its usage. A
   * list of one reading (E2B answers a series).
   */
  async getMetrics(opts?: RequestOpts): Promise<SandboxMetrics[]> {
    const info = await this.getInfo(opts);
    const metrics = await this.connection.call(opts, (o) =>
      this.connection.sandboxes.getMetrics({ sandboxId: this.sandboxId }, o),
    );
    return [sandboxMetrics(metrics, info.cpuCount)];
  }

  /**
   * Pauses it: stops its CPUs, or with `toDisk` saves its memory, programs
   * and files and ends its VM process. The next call on it resumes it.
   */
  async pause(opts: RequestOpts & { toDisk?: boolean } = {}): Promise<SandboxInfo> {
    return sandboxInfo(
      await this.connection.call(opts, (o) =>
        this.connection.sandboxes.pause({ sandboxId: this.sandboxId, toDisk: opts.toDisk === true }, o),
      ),
    );
  }

  /**
   * E2B's older name of a pause: stops it (memory kept; `toDisk` saves it
   * to disk). False when it was paused already.
   */
  async betaPause(opts: RequestOpts & { toDisk?: boolean } = {}): Promise<boolean> {
    const state = (await this.getInfo(opts)).state;
    if (state === "on-disk" || (state === "paused" && opts.toDisk !== true)) {
      return false;
    }
    await this.pause(opts);
    return true;
  }

  /** Starts it again after `pause`. */
  async resume(opts?: RequestOpts): Promise<SandboxInfo> {
    return sandboxInfo(
      await this.connection.call(opts, (o) => this.connection.sandboxes.resume({ sandboxId: this.sandboxId }, o)),
    );
  }

  /**
   * `count` new sandboxes (1 to 16) with its memory, programs and files,
   * each with its own id, hostname and entropy.
   */
  async fork(count = 1, opts?: RequestOpts): Promise<Sandbox[]> {
    const answer = await this.connection.call(opts, (o) =>
      this.connection.sandboxes.fork({ sandboxId: this.sandboxId, count }, o),
    );
    const ctor = this.constructor as new (connection: Connection, sandboxId: string) => Sandbox;
    return await Promise.all(answer.sandboxes.map((info) => new ctor(this.connection, info.sandboxId).prepared(opts)));
  }

  /**
   * The host a request to guest `port` names on the server's HTTP ingress,
   * `8000-ID.airlock.localhost:7480`, at once as E2B's answers it (learnt
   * from the server when the sandbox was created or connected). It answers
   * plain HTTP, and a request to a port not made public at create
   * (`publicPorts`) also needs the sandbox's traffic token: Node's `fetch`
   * cannot resolve `*.localhost`, so from code use `expose(port)`'s
   * `pathUrl` with its token in the `X-Airlock-Token` header. The guest
   * need not listen yet. A server that serves no ingress throws
   * `SandboxError` (reason `UNSUPPORTED`) saying how to serve it
   * (`airlock serve --ingress HOST:PORT`).
   */
  getHost(port: number): string {
    checkPort("getHost(port)", port);
    const known = this.ingressHost;
    if (known === undefined) {
      throw new SandboxError("getHost: this sandbox's ingress is not known yet; use `await sandbox.expose(port)`");
    }
    if ("error" in known) {
      throw known.error;
    }
    return known.host.replace(/^1-/, `${port}-`);
  }

  /**
   * Where guest `port` is reached through the server's HTTP ingress, with
   * what a request needs: `host`, `url` (to open in a browser, with the
   * token), `token` (for `X-Airlock-Token`; "" for a public port),
   * `public`, `pathUrl` (the path form, for clients that cannot resolve
   * `host`) and `address` (the ingress's own, to connect to with the Host
   * header set to `host`). What `airlock sandbox expose ID PORT` prints: it
   * reads, and changes nothing on the server. Errors as `getHost`.
   */
  async expose(port: number, opts?: RequestOpts): Promise<ExposedPort> {
    return await this.ingress.expose("expose(port)", port, opts);
  }

  /**
   * Replaces the sandbox's traffic token and answers the new one: the old
   * one is refused from the next request on (connections already open stay
   * open). Public ports are not affected.
   */
  async rotateTrafficToken(opts?: RequestOpts): Promise<string> {
    return await this.ingress.rotateToken(opts);
  }

  /**
   * Saves the sandbox (running, paused or on disk) as a snapshot of yours
   * named `name` (default: `snapshot-` and 16 hex digits): its memory,
   * running programs and files. A running sandbox stops only while its
   * memory is copied (`pausedMs`), then runs on. `Sandbox.create(info.snapshotId)`
   * starts clones of it. A name you have taken throws `AlreadyExistsError`;
   * the key's quota, `RateLimitError`; `mode: "filesystem"` is refused
   * (Airlock's snapshots keep memory).
   */
  async createSnapshot(opts: CreateSnapshotOpts = {}): Promise<SnapshotInfo> {
    return await takeSnapshot(this.connection, this.sandboxId, opts);
  }

  /** A snapshot of a sandbox by id (see the instance's `createSnapshot`). */
  static async createSnapshot(sandboxId: string, opts: CreateSnapshotOpts & ConnectionOpts = {}): Promise<SnapshotInfo> {
    const connection = await Connection.get(platformOf(this), opts, opts.signal);
    return await takeSnapshot(connection, sandboxId, opts);
  }

  /** The snapshots of yours taken of this sandbox, as E2B's paginator. */
  listSnapshots(opts: Omit<SnapshotListOpts, "sandboxId" | keyof ConnectionOpts> = {}): SnapshotPaginator {
    return new SnapshotPaginator(this.connection, { ...opts, sandboxId: this.sandboxId });
  }

  /** Your snapshots (of `sandboxId` only, if given), as E2B's paginator: page with `nextItems()`, or `for await` it. */
  static listSnapshots(opts: SnapshotListOpts = {}): SnapshotPaginator {
    return new SnapshotPaginator(platformOf(this), opts);
  }

  /** Airlock: a snapshot of yours by name; `NotFoundError` when you have none by that name. */
  static async getSnapshot(snapshotId: string, opts: ConnectionOpts & RequestOpts = {}): Promise<SnapshotInfo> {
    const connection = await Connection.get(platformOf(this), opts, opts.signal);
    return snapshotInfo(await connection.call(opts, (o) => connection.sandboxes.getSnapshot({ name: snapshotId }, o)));
  }

  /**
   * Deletes a snapshot of yours: its name at once, its files once no
   * sandbox started from it needs them (they run on). False when you have
   * none by that name.
   */
  static async deleteSnapshot(snapshotId: string, opts: ConnectionOpts & RequestOpts = {}): Promise<boolean> {
    const connection = await Connection.get(platformOf(this), opts, opts.signal);
    try {
      await connection.call(opts, (o) => connection.sandboxes.deleteSnapshot({ name: snapshotId }, o));
      return true;
    } catch (error) {
      if (error instanceof NotFoundError) {
        return false;
      }
      throw error;
    }
  }

  /** Runs a cell of code (Python by default) in a persistent context. */
  async runCode(code: string, opts?: RunCodeOpts): Promise<Execution> {
    return await this.interpreter.runCode(code, opts);
  }

  /** Makes an interpreter context. */
  async createCodeContext(opts?: CreateCodeContextOpts): Promise<Context> {
    return await this.interpreter.createCodeContext(opts);
  }

  /** The interpreter contexts. */
  async listCodeContexts(opts?: RequestOpts): Promise<Context[]> {
    return await this.interpreter.listCodeContexts(opts);
  }

  /** A fresh interpreter for a context: its variables are gone. */
  async restartCodeContext(context: Context | string, opts?: RequestOpts): Promise<Context> {
    return await this.interpreter.restartCodeContext(context, opts);
  }

  /** Interrupts the cell running in a context (SIGINT to its interpreter). */
  async interruptCodeContext(context: Context | string, opts?: RequestOpts): Promise<Context> {
    return await this.interpreter.interruptCodeContext(context, opts);
  }

  /** Removes a context and ends its interpreter. */
  async removeCodeContext(context: Context | string, opts?: RequestOpts): Promise<void> {
    await this.interpreter.removeCodeContext(context, opts);
  }
}
