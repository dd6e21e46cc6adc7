/**
 * Named snapshots (`Sandboxes.Snapshot`, `ListSnapshots`, `GetSnapshot`,
 * `DeleteSnapshot`, and a create's `snapshot`), in E2B's shapes: a
 * {@link SnapshotInfo} whose `snapshotId` is the snapshot's name, E2B's
 * {@link SnapshotPaginator}, E2B's `mode` refused, and the rule that lets
 * `Sandbox.create(snapshotId)` (E2B's form) start from one: a create whose
 * `template` the server does not know is tried again as a snapshot of that
 * name.
 */

import type { MessageInitShape } from "@bufbuild/protobuf";

import { Connection, type ConnectionOpts, type Platform, type RequestOpts } from "./connection.js";
import { InvalidArgumentError, NotFoundError, SandboxError, SandboxNotFoundError } from "./errors.js";
import type {
  CreateSandboxRequestSchema,
  SandboxInfo as ApiSandboxInfo,
  SnapshotInfo as ApiSnapshotInfo,
} from "./gen/airlock/api/v1/sandboxes_pb.js";

/** A snapshot of yours: a sandbox's memory, programs and files saved under a name. */
export interface SnapshotInfo {
  /** Its name: what `Sandbox.create` (as its template, or `snapshot`), `getSnapshot` and `deleteSnapshot` take (E2B's id). */
  snapshotId: string;
  /** Its names (E2B's field): the name alone. */
  names: string[];
  /** What it holds, by content: the SHA-256 (hex) of the saved machine. Two names may share one. */
  contentId: string;
  /** The sandbox it was taken from (which may have ended since). */
  sourceSandboxId: string;
  /** That sandbox's root image ("" for none). */
  image: string;
  /** That sandbox's template ("" for none). */
  template: string;
  /** The snapshot that sandbox itself started from ("" for none). */
  parentSnapshot: string;
  memoryMB: number;
  cpuCount: number;
  createdAt: Date;
  /** How long the source sandbox was stopped while its memory was copied (0 when it was paused or on disk). */
  pausedMs: number;
  /** How long the snapshot took. */
  tookMs: number;
  /** Bytes it takes on the server's disk (counted in a key's storage quota). */
  sizeBytes: number;
  /** The key that owns it ("" for the server machine's owner). */
  owner: string;
  /** Live sandboxes started from it now. */
  sandboxes: number;
}

/** Options of `createSnapshot`. */
export interface CreateSnapshotOpts extends RequestOpts {
  /** Its name: [A-Za-z0-9._-], 1 to 128 bytes (default: `snapshot-` and 16 hex digits). */
  name?: string;
  /**
   * E2B's: what it keeps. "full" (the default) is Airlock's only one;
   * "filesystem" (files only, clones boot cold) is refused.
   */
  mode?: "full" | "filesystem";
}

/** Options of `Sandbox.listSnapshots`. */
export interface SnapshotListOpts extends ConnectionOpts, RequestOpts {
  /** Only snapshots taken of this sandbox. */
  sandboxId?: string;
  /** Only the snapshot of this name. */
  name?: string;
  /** Snapshots per page (default: all in one). */
  limit?: number;
  /** Start at this page (a previous page's `nextToken`). */
  nextToken?: string;
}

export function snapshotInfo(info: ApiSnapshotInfo): SnapshotInfo {
  return {
    snapshotId: info.name,
    names: [info.name],
    contentId: info.id,
    sourceSandboxId: info.sourceSandboxId,
    image: info.image,
    template: info.template,
    parentSnapshot: info.parentSnapshot,
    memoryMB: info.memoryMib,
    cpuCount: info.vcpus,
    createdAt: new Date(Number(info.createdAtMs)),
    pausedMs: Number(info.pausedMs),
    tookMs: Number(info.tookMs),
    sizeBytes: Number(info.sizeBytes),
    owner: info.owner,
    sandboxes: info.sandboxes,
  };
}

/** E2B's `mode`: "full" or none is what Airlock's snapshots are; anything else is refused. */
export function checkMode(mode: string | undefined): void {
  if (mode === undefined || mode === "full") {
    return;
  }
  if (mode === "filesystem") {
    throw new InvalidArgumentError(
      "mode: 'filesystem': an Airlock snapshot always keeps the sandbox's memory and running programs with its files, and its clones resume them (no cold boot); leave mode out (or pass 'full')",
      { field: "mode" },
    );
  }
  throw new InvalidArgumentError(`mode: ${JSON.stringify(mode)}: a snapshot's mode is "full" (Airlock's only one)`, {
    field: "mode",
  });
}

/** Takes a snapshot of a sandbox. */
export async function takeSnapshot(connection: Connection, sandboxId: string, opts: CreateSnapshotOpts = {}): Promise<SnapshotInfo> {
  checkMode(opts.mode);
  const answer = await connection.call(opts, (o) =>
    connection.sandboxes.snapshot({ sandboxId, name: opts.name ?? "" }, o),
  );
  return snapshotInfo(answer);
}

/** Whether the server found no image, template or snapshot by a name (not a missing sandbox). */
function missing(error: unknown): error is NotFoundError {
  return error instanceof NotFoundError && !(error instanceof SandboxNotFoundError) && error.reason === "NOT_FOUND";
}

/**
 * `Sandboxes.Create`; a `template` the server does not know is tried again
 * as a snapshot of yours of that name (E2B's `Sandbox.create(snapshotId)`).
 * A name that is neither says so.
 */
export async function createSandbox(
  connection: Connection,
  request: MessageInitShape<typeof CreateSandboxRequestSchema>,
  opts: RequestOpts,
): Promise<ApiSandboxInfo> {
  try {
    return await connection.call(opts, (o) => connection.sandboxes.create(request, o));
  } catch (error) {
    const name = request.template ?? "";
    if (name === "" || (request.snapshot ?? "") !== "" || !missing(error)) {
      throw error;
    }
    const retry = { ...request, template: "", image: "", snapshot: name };
    try {
      return await connection.call(opts, (o) => connection.sandboxes.create(retry, o));
    } catch (again) {
      if (!missing(again)) {
        throw again;
      }
      throw new NotFoundError(
        `${error.message}; nor is there a snapshot of yours named ${name} (Template.list() lists the templates, Sandbox.listSnapshots() your snapshots)`,
        { code: error.code, reason: error.reason, field: "template", cause: error },
      );
    }
  }
}

/**
 * Pages of `Sandbox.listSnapshots`, as E2B's paginator: `nextItems()` while
 * `hasNext`, or `for await` it for every snapshot. The server answers the
 * whole list at once, which the first page asks for; `limit` cuts it into
 * pages here, and `nextToken` says where the next one begins. It is not a
 * promise.
 */
export class SnapshotPaginator implements AsyncIterable<SnapshotInfo> {
  /** Whether another page may follow. */
  hasNext = true;
  /** The next page's token (undefined at the end). */
  nextToken?: string;

  private all?: SnapshotInfo[];
  private offset: number;

  /** @internal */
  constructor(
    private readonly source: Platform | Connection,
    private readonly opts: SnapshotListOpts,
  ) {
    if (opts.limit !== undefined && !(Number.isInteger(opts.limit) && opts.limit >= 1)) {
      throw new InvalidArgumentError(`limit: ${String(opts.limit)}: at least 1`, { field: "limit" });
    }
    this.offset = opts.nextToken === undefined ? 0 : Number(opts.nextToken);
    if (!Number.isInteger(this.offset) || this.offset < 0) {
      throw new InvalidArgumentError(`nextToken: ${JSON.stringify(opts.nextToken)} is not a token a listing of snapshots gave`, {
        field: "nextToken",
      });
    }
    this.nextToken = opts.nextToken;
  }

  /** The next page. */
  async nextItems(): Promise<SnapshotInfo[]> {
    if (!this.hasNext) {
      throw new SandboxError("no more snapshots to list: check hasNext before nextItems()");
    }
    if (this.all === undefined) {
      const opts = this.opts;
      const connection =
        this.source instanceof Connection ? this.source : await Connection.get(this.source, opts, opts.signal);
      const answer = await connection.call(opts, (o) =>
        connection.sandboxes.listSnapshots({ sandboxId: opts.sandboxId ?? "" }, o),
      );
      this.all = answer.snapshots.map(snapshotInfo).filter((s) => opts.name === undefined || s.snapshotId === opts.name);
    }
    const end = this.opts.limit === undefined ? this.all.length : this.offset + this.opts.limit;
    const page = this.all.slice(this.offset, end);
    this.offset = Math.min(end, this.all.length);
    this.hasNext = this.offset < this.all.length;
    this.nextToken = this.hasNext ? String(this.offset) : undefined;
    return page;
  }

  /** Every remaining snapshot, page by page. */
  async *[Symbol.asyncIterator](): AsyncIterator<SnapshotInfo> {
    while (this.hasNext) {
      yield* await this.nextItems();
    }
  }
}
