/**
 * `sandbox.files`: the guest's filesystem, as E2B's JS SDK names it:
 * `read`, `write`, `list`, `exists`, `getInfo`, `makeDir`, `rename`,
 * `remove`, `watchDir`.
 *
 * Files stream both ways in chunks of at most 1 MiB, with no limit on their
 * size. A write is atomic: the file appears whole or not at all. Over
 * gRPC (Node) a write is one streamed call. Over gRPC-Web, which sends each
 * request whole, a file of more than one piece (8 MiB) is written as pieces
 * appended to a hidden file beside it, which is then renamed into place, so
 * memory stays bounded and the file still appears whole.
 */

import type { MessageInitShape } from "@bufbuild/protobuf";

import type { Connection, RequestOpts } from "./connection.js";
import { chunks, concat, CHUNK_BYTES, type DataSource } from "./bytes.js";
import { InvalidArgumentError, SandboxError } from "./errors.js";
import {
  FileType as ApiFileType,
  WatchEventType,
  type FileInfo,
  type FileChunk,
  type WatchEvent,
  type WriteFileRequestSchema,
} from "./gen/airlock/api/v1/files_pb.js";
import { linkSignal } from "./handle.js";

/** How much a gRPC-Web write sends in one request. */
export const WEB_PIECE_BYTES = 8 * 1024 * 1024;

/** What an entry is (E2B's `FileType`, with Airlock's symlink and other). */
export const FileType = {
  FILE: "file",
  DIR: "dir",
  SYMLINK: "symlink",
  OTHER: "other",
} as const;
export type FileType = (typeof FileType)[keyof typeof FileType];

/** A file, directory or other entry in the guest. */
export interface EntryInfo {
  /** The last path component. */
  name: string;
  type: FileType;
  /** Its absolute path. */
  path: string;
  size: number;
  /** Permission bits (0o7777). */
  mode: number;
  /** As `ls -l` writes them ("-rw-r--r--"). */
  permissions: string;
  /** The owner's and group's ids, as text (the guest answers numbers). */
  owner: string;
  group: string;
  modifiedTime: Date;
  /** Where a symlink points. */
  symlinkTarget?: string;
}

/** What `write` answers: the written file's entry (E2B's `WriteInfo` and more). */
export type WriteInfo = EntryInfo;

/** One file for `write([...])`. */
export interface WriteEntry {
  path: string;
  data: DataSource;
}

/** Options of `write`. */
export interface WriteOpts extends RequestOpts {
  /** Permission bits for a new file (default 0o644). */
  mode?: number;
  /** The owner of a new file, a user name or uid (default root). */
  user?: string;
  /** Add to the file's end instead of replacing it. */
  append?: boolean;
}

/** Options of `read`. */
export interface ReadOpts extends RequestOpts {
  /** "text" (default), "bytes" (Uint8Array), "blob" or "stream" (ReadableStream<Uint8Array>). */
  format?: "text" | "bytes" | "blob" | "stream";
  /** Where to start, in bytes. */
  offset?: number;
  /** How many bytes (default: to the end). */
  length?: number;
}

/** What happened to an entry below a watched directory. */
export const FilesystemEventType = {
  CREATE: "create",
  WRITE: "write",
  REMOVE: "remove",
  RENAME: "rename",
  CHMOD: "chmod",
} as const;
export type FilesystemEventType = (typeof FilesystemEventType)[keyof typeof FilesystemEventType];

/** A change below a watched directory. */
export interface FilesystemEvent {
  /** Its path relative to the watched directory. */
  name: string;
  type: FilesystemEventType;
  /** Its absolute path. */
  path: string;
  isDir: boolean;
  /** For a rename: which half this is, and the cookie that pairs the halves. */
  rename?: "from" | "to";
  cookie?: number;
}

/** Options of `watchDir`. */
export interface WatchOpts extends RequestOpts {
  /** Changes in subdirectories too. */
  recursive?: boolean;
  /** Called when the watch ends: without an error after `stop()`, with one otherwise. */
  onExit?: (error?: unknown) => void | Promise<void>;
  /** Stop watching after this many milliseconds (default: never). */
  timeoutMs?: number;
}

/** A running watch. */
export interface WatchHandle {
  /** Stops watching. */
  stop(): Promise<void>;
}

const TYPES: Record<number, FileType> = {
  [ApiFileType.FILE]: "file",
  [ApiFileType.DIRECTORY]: "dir",
  [ApiFileType.SYMLINK]: "symlink",
  [ApiFileType.OTHER]: "other",
};

function permissions(type: FileType, mode: number): string {
  const kind = type === "dir" ? "d" : type === "symlink" ? "l" : "-";
  const bits = "rwxrwxrwx";
  let out = kind;
  for (let i = 0; i < 9; i++) {
    out += (mode >> (8 - i)) & 1 ? bits[i] : "-";
  }
  return out;
}

export function entryInfo(info: FileInfo): EntryInfo {
  const type = TYPES[info.type] ?? "other";
  return {
    name: info.name,
    type,
    path: info.path,
    size: Number(info.size),
    mode: info.mode,
    permissions: permissions(type, info.mode),
    owner: String(info.uid),
    group: String(info.gid),
    modifiedTime: new Date(Number(info.modifiedAtMs)),
    symlinkTarget: info.symlinkTarget === "" ? undefined : info.symlinkTarget,
  };
}

function eventOf(watched: string, event: WatchEvent): FilesystemEvent {
  const prefix = watched.endsWith("/") ? watched : `${watched}/`;
  const name = event.path.startsWith(prefix) ? event.path.slice(prefix.length) : event.path;
  const base = { name, path: event.path, isDir: event.isDir };
  switch (event.type) {
    case WatchEventType.CREATE:
      return { ...base, type: "create" };
    case WatchEventType.WRITE:
      return { ...base, type: "write" };
    case WatchEventType.REMOVE:
      return { ...base, type: "remove" };
    case WatchEventType.RENAME_FROM:
      return { ...base, type: "rename", rename: "from", cookie: event.cookie };
    case WatchEventType.RENAME_TO:
      return { ...base, type: "rename", rename: "to", cookie: event.cookie };
    default:
      return { ...base, type: "chmod" };
  }
}

/**
 * The guest's temporary file of an atomic write (`.NAME.airlock-N-M.tmp`)
 * or this SDK's piecewise one (`.NAME.airlock-part-R`), renamed over NAME.
 */
const TEMPORARY = /^\.(.+)\.airlock-(?:\d+-\d+\.tmp|part-[0-9a-z]+)$/;

/**
 * A watch's events as E2B reports a write: each file is written to a
 * temporary beside it that is renamed over it, so the temporary's events
 * are dropped and its rename onto the file becomes a "create" and a
 * "write" of the file written (the name a program waits for).
 */
export class WatchNames {
  private cookies: number[] = [];

  constructor(private readonly watched: string) {}

  events(raw: WatchEvent): FilesystemEvent[] {
    const event = eventOf(this.watched, raw);
    if (TEMPORARY.test(split(event.path)[1])) {
      if (raw.type === WatchEventType.RENAME_FROM && raw.cookie !== 0) {
        this.cookies = [...this.cookies, raw.cookie].slice(-64);
      }
      return [];
    }
    const at = raw.type === WatchEventType.RENAME_TO ? this.cookies.indexOf(raw.cookie) : -1;
    if (at >= 0) {
      this.cookies.splice(at, 1);
      const base = { name: event.name, path: event.path, isDir: event.isDir };
      return [
        { ...base, type: "create" },
        { ...base, type: "write" },
      ];
    }
    return [event];
  }
}

/**
 * A guest path as E2B resolves one: a relative path is taken from the
 * user's home (`/root` for root, the default user; `/home/USER` for another).
 */
export function guestPath(path: string, user?: string): string {
  if (path === "" || path.startsWith("/")) {
    return path;
  }
  const home = user === undefined || user === "" || user === "root" || user === "0" ? "/root" : `/home/${user}`;
  const parts: string[] = [];
  for (const part of `${home}/${path}`.split("/")) {
    if (part === "" || part === ".") {
      continue;
    }
    if (part === "..") {
      parts.pop();
    } else {
      parts.push(part);
    }
  }
  return `/${parts.join("/")}`;
}

/** The directory part of an absolute path, and its last component. */
function split(path: string): [string, string] {
  const at = path.lastIndexOf("/");
  return [at <= 0 ? "/" : path.slice(0, at), path.slice(at + 1)];
}

/** A name for the hidden file a piecewise write fills. */
function partPath(path: string): string {
  const [dir, name] = split(path);
  const random = Math.floor(Math.random() * 2 ** 48).toString(36);
  return `${dir === "/" ? "" : dir}/.${name}.airlock-part-${random}`;
}

/** The guest's filesystem in one sandbox. */
export class Filesystem {
  /** @internal */
  constructor(
    private readonly connection: Connection,
    private readonly sandboxId: string,
  ) {}

  /** A file's chunks, from the server, as they arrive. */
  private chunks(path: string, opts: ReadOpts, signal: AbortSignal): AsyncIterator<FileChunk> {
    return this.connection.files
      .read(
        {
          sandboxId: this.sandboxId,
          path,
          offset: BigInt(opts.offset ?? 0),
          length: BigInt(opts.length ?? 0),
        },
        { signal },
      )
      [Symbol.asyncIterator]();
  }

  /** Reads a file as text (default), bytes, a Blob or a stream. */
  read(path: string, opts?: ReadOpts & { format?: "text" }): Promise<string>;
  read(path: string, opts: ReadOpts & { format: "bytes" }): Promise<Uint8Array>;
  read(path: string, opts: ReadOpts & { format: "blob" }): Promise<Blob>;
  read(path: string, opts: ReadOpts & { format: "stream" }): Promise<ReadableStream<Uint8Array>>;
  read(path: string, opts?: ReadOpts): Promise<string | Uint8Array | Blob | ReadableStream<Uint8Array>>;
  async read(path: string, opts: ReadOpts = {}): Promise<string | Uint8Array | Blob | ReadableStream<Uint8Array>> {
    path = guestPath(path);
    const format = opts.format ?? "text";
    const controller = new AbortController();
    const unlink = linkSignal(opts.signal, controller);
    const it = this.chunks(path, opts, controller.signal);
    const next = async (): Promise<IteratorResult<FileChunk>> => {
      try {
        return await it.next();
      } catch (error) {
        unlink();
        throw this.connection.error(error, opts.signal);
      }
    };
    // The first chunk (or the end) before answering: a missing file fails
    // the call itself, whatever the format.
    const first = await next();
    if (format === "stream") {
      let pending: IteratorResult<FileChunk> | undefined = first;
      return new ReadableStream<Uint8Array>({
        async pull(stream) {
          const read = pending ?? (await next());
          pending = undefined;
          if (read.done === true) {
            unlink();
            stream.close();
          } else {
            stream.enqueue(read.value.data);
          }
        },
        cancel(reason) {
          unlink();
          controller.abort(reason);
        },
      });
    }
    const parts: Uint8Array[] = [];
    for (let read = first; read.done !== true; read = await next()) {
      parts.push(read.value.data);
    }
    unlink();
    if (format === "blob") {
      return new Blob(parts as BlobPart[]);
    }
    const bytes = concat(parts);
    return format === "bytes" ? bytes : new TextDecoder().decode(bytes);
  }

  /**
   * Writes a file (string, bytes, Blob, ReadableStream or async iterable),
   * streamed; missing parent directories are made. Or, given a list, each
   * file in turn.
   */
  write(path: string, data: DataSource, opts?: WriteOpts): Promise<WriteInfo>;
  write(files: WriteEntry[], opts?: WriteOpts): Promise<WriteInfo[]>;
  async write(
    pathOrFiles: string | WriteEntry[],
    dataOrOpts?: DataSource | WriteOpts,
    maybeOpts?: WriteOpts,
  ): Promise<WriteInfo | WriteInfo[]> {
    if (Array.isArray(pathOrFiles)) {
      const opts = (dataOrOpts as WriteOpts | undefined) ?? {};
      const written: WriteInfo[] = [];
      for (const file of pathOrFiles) {
        written.push(await this.writeOne(file.path, file.data, opts));
      }
      return written;
    }
    if (dataOrOpts === undefined) {
      throw new InvalidArgumentError("write(path, data): no data", { field: "data" });
    }
    return await this.writeOne(pathOrFiles, dataOrOpts as DataSource, maybeOpts ?? {});
  }

  private async writeOne(path: string, data: DataSource, opts: WriteOpts): Promise<WriteInfo> {
    path = guestPath(path, opts.user);
    if (this.connection.streamsRequests) {
      return await this.writeCall(path, chunks(data, CHUNK_BYTES), opts, opts.append === true);
    }
    return await this.writePieces(path, data, opts);
  }

  /**
   * One `Files.Write` call: the header, the chunks, then `end`. The header
   * asks the server to keep nothing unless `end` arrives: Node's HTTP/2
   * half-closes a cancelled stream before resetting it, which without
   * `end` reads as a whole file. A cancelled call, or a source that fails,
   * never sends `end`.
   */
  private async writeCall(
    path: string,
    data: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
    opts: WriteOpts,
    append: boolean,
  ): Promise<WriteInfo> {
    const sandboxId = this.sandboxId;
    async function* messages(): AsyncGenerator<MessageInitShape<typeof WriteFileRequestSchema>> {
      yield {
        part: {
          case: "header",
          value: { sandboxId, path, mode: opts.mode ?? 0, user: opts.user ?? "", append, requireEnd: true },
        },
      };
      for await (const chunk of data) {
        // A source that never ends is not read on after the caller gave up.
        opts.signal?.throwIfAborted();
        yield { part: { case: "data", value: chunk } };
      }
      opts.signal?.throwIfAborted();
      yield { part: { case: "end", value: {} } };
    }
    const answer = await this.connection.call(opts, (o) => this.connection.files.write(messages(), o));
    if (answer.file === undefined) {
      throw new SandboxError(`the server wrote ${path} without saying what it wrote`);
    }
    return entryInfo(answer.file);
  }

  /**
   * A write in requests of at most {@link WEB_PIECE_BYTES}: one when the
   * data fits, else pieces appended to a hidden file beside the target,
   * renamed into place at the end (removed if a piece fails).
   */
  private async writePieces(path: string, data: DataSource, opts: WriteOpts): Promise<WriteInfo> {
    const source = chunks(data, CHUNK_BYTES)[Symbol.asyncIterator]();
    let carried: Uint8Array | undefined;
    /** The next piece, and whether more data follows it. */
    const piece = async (): Promise<[Uint8Array[], boolean]> => {
      const taken: Uint8Array[] = [];
      let bytes = 0;
      if (carried !== undefined) {
        taken.push(carried);
        bytes += carried.byteLength;
        carried = undefined;
      }
      for (;;) {
        opts.signal?.throwIfAborted();
        const next = await source.next();
        if (next.done === true) {
          return [taken, false];
        }
        if (bytes + next.value.byteLength > WEB_PIECE_BYTES && taken.length > 0) {
          carried = next.value;
          return [taken, true];
        }
        taken.push(next.value);
        bytes += next.value.byteLength;
      }
    };
    let [taken, more] = await piece().catch((error: unknown) => {
      throw this.connection.error(error, opts.signal);
    });
    if (!more) {
      return await this.writeCall(path, taken, opts, opts.append === true);
    }
    // Appending keeps the target as it is until the end: fill a copy.
    const part = partPath(path);
    try {
      if (opts.append === true) {
        await this.copyInto(path, part, opts);
      }
      await this.writeCall(part, taken, opts, opts.append === true);
      while (more) {
        [taken, more] = await piece();
        await this.writeCall(part, taken, opts, true);
      }
      return await this.rename(part, path, opts);
    } catch (error) {
      await this.remove(part).catch(() => undefined);
      throw error;
    }
  }

  /** Copies an existing file (if any) to `to`, for an append in pieces. */
  private async copyInto(from: string, to: string, opts: WriteOpts): Promise<void> {
    if (!(await this.exists(from, opts))) {
      return;
    }
    const stream = await this.read(from, { format: "stream", signal: opts.signal });
    await this.writePieces(to, stream, { ...opts, append: false });
  }

  /** The entries of a directory, `depth` levels down (default 1: its children). */
  async list(path: string, opts: RequestOpts & { depth?: number } = {}): Promise<EntryInfo[]> {
    path = guestPath(path);
    const answer = await this.connection.call(opts, (o) =>
      this.connection.files.list({ sandboxId: this.sandboxId, path, depth: opts.depth ?? 1 }, o),
    );
    return answer.entries.map(entryInfo);
  }

  /** Whether a path exists. */
  async exists(path: string, opts?: RequestOpts): Promise<boolean> {
    path = guestPath(path);
    const answer = await this.connection.call(opts, (o) =>
      this.connection.files.exists({ sandboxId: this.sandboxId, path }, o),
    );
    return answer.exists;
  }

  /** An entry's metadata (a symlink is not followed). */
  async getInfo(path: string, opts?: RequestOpts): Promise<EntryInfo> {
    path = guestPath(path);
    return entryInfo(
      await this.connection.call(opts, (o) => this.connection.files.stat({ sandboxId: this.sandboxId, path }, o)),
    );
  }

  /** Makes a directory and its parents; false when it existed. */
  async makeDir(path: string, opts?: RequestOpts): Promise<boolean> {
    path = guestPath(path);
    const answer = await this.connection.call(opts, (o) =>
      this.connection.files.makeDir({ sandboxId: this.sandboxId, path }, o),
    );
    return answer.created;
  }

  /** Moves an entry; answers its new metadata. */
  async rename(oldPath: string, newPath: string, opts?: RequestOpts): Promise<EntryInfo> {
    oldPath = guestPath(oldPath);
    newPath = guestPath(newPath);
    return entryInfo(
      await this.connection.call(opts, (o) =>
        this.connection.files.rename({ sandboxId: this.sandboxId, from: oldPath, to: newPath }, o),
      ),
    );
  }

  /** Removes a file, or a directory with everything in it. */
  async remove(path: string, opts?: RequestOpts): Promise<void> {
    path = guestPath(path);
    await this.connection.call(opts, (o) => this.connection.files.remove({ sandboxId: this.sandboxId, path }, o));
  }

  /**
   * Watches a directory: `onEvent` is called for each change below it,
   * from the moment this resolves until `stop()` (or `timeoutMs`, or the
   * caller's signal).
   */
  async watchDir(
    path: string,
    onEvent: (event: FilesystemEvent) => void | Promise<void>,
    opts: WatchOpts = {},
  ): Promise<WatchHandle> {
    path = guestPath(path);
    const controller = new AbortController();
    const unlink = linkSignal(opts.signal, controller);
    let stopped = false;
    let ready!: () => void;
    const watching = new Promise<void>((resolve) => {
      ready = resolve;
    });
    const events = this.connection.files
      .watch(
        { sandboxId: this.sandboxId, path, recursive: opts.recursive === true },
        { signal: controller.signal, onHeader: () => ready() },
      )
      [Symbol.asyncIterator]();
    const timer =
      opts.timeoutMs !== undefined && opts.timeoutMs > 0
        ? setTimeout(() => {
            stopped = true;
            controller.abort();
          }, opts.timeoutMs)
        : undefined;
    /** A failure of the caller's onEvent, which ends the watch. */
    let failed: { error: unknown } | undefined;
    const names = new WatchNames(path);
    const pump = (async (): Promise<void> => {
      for (;;) {
        const next = await events.next();
        if (next.done === true) {
          return;
        }
        try {
          for (const event of names.events(next.value)) {
            await onEvent(event);
          }
        } catch (error) {
          failed = { error };
          controller.abort(error);
          return;
        }
      }
    })();
    const ended = pump.then(
      async () => {
        await opts.onExit?.(failed?.error);
      },
      async (error: unknown) => {
        if (stopped) {
          await opts.onExit?.();
          return;
        }
        const mapped = this.connection.error(error, opts.signal);
        await opts.onExit?.(mapped);
        throw mapped;
      },
    );
    ended
      .catch(() => undefined)
      .finally(() => {
        unlink();
        if (timer !== undefined) {
          clearTimeout(timer);
        }
      });
    // Resolves once the server watches (its answer's headers), or fails
    // with the call.
    await Promise.race([watching, ended.then(() => undefined)]);
    return {
      async stop(): Promise<void> {
        stopped = true;
        controller.abort();
        await ended.catch(() => undefined);
      },
    };
  }
}
