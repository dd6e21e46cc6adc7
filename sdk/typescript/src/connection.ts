/**
 * How the SDK reaches a server: {@link ConnectionOpts} (what the caller
 * says), a {@link Platform} (Node's transports or the web's, registered by
 * the package's entry point) that turns them into a connect `Transport`,
 * and {@link Connection}: one client per service of `airlock.api.v1` on
 * that transport, shared by every sandbox with the same options, and the
 * one place where calls get their options and their errors are mapped.
 */

import { createClient, type CallOptions, type Client, type Interceptor, type Transport } from "@connectrpc/connect";

import { Code } from "./gen/airlock/api/v1/code_pb.js";
import { Files } from "./gen/airlock/api/v1/files_pb.js";
import { Ingress } from "./gen/airlock/api/v1/ingress_pb.js";
import { Network } from "./gen/airlock/api/v1/network_pb.js";
import { Processes } from "./gen/airlock/api/v1/processes_pb.js";
import { Sandboxes } from "./gen/airlock/api/v1/sandboxes_pb.js";
import { Templates } from "./gen/airlock/api/v1/templates_pb.js";
import { Usage } from "./gen/airlock/api/v1/usage_pb.js";
import { SandboxError, toSandboxError } from "./errors.js";

/** Where the server is and who calls it. */
export interface ConnectionOpts {
  /**
   * The server, `https://HOST:PORT` (`HOST:PORT` means https; plain
   * `http://` only to a loopback address). Node: default `AIRLOCK_HOST`;
   * with neither, the local server on its Unix socket, started on demand.
   * Browsers and edge runtimes: required.
   */
  host?: string;
  /** The API key (`ak_...` from `airlock key create NAME`). Node: default `AIRLOCK_API_KEY`. */
  apiKey?: string;
  /**
   * Node: the CA certificate(s) that signed the server's certificate, as
   * PEM text or a file's path; default the file `AIRLOCK_CA_CERT` names,
   * else Node's own roots. Browsers use their own trust store.
   */
  caCert?: string;
  /** Node: the local server's Unix socket (default `daemon.sock` under `AIRLOCK_STATE_DIR`, else `$XDG_RUNTIME_DIR/airlock`, else `/tmp/airlock`). */
  socket?: string;
  /** Node: the `airlock` program that starts the local server (default `AIRLOCK_BIN`, else `airlock` on `PATH`). */
  airlockBin?: string;
  /** Browsers and edge runtimes: the `fetch` to call the server with (default `globalThis.fetch`). */
  fetch?: typeof globalThis.fetch;
  /** How long each call other than a stream may take, in milliseconds (default: no limit). */
  requestTimeoutMs?: number;
  /** Headers sent with every call. */
  headers?: Record<string, string>;
}

/** Options every call takes. */
export interface RequestOpts {
  /** Cancels the call: it rejects with the signal's reason. */
  signal?: AbortSignal;
  /** How long the call may take, in milliseconds (default: the connection's `requestTimeoutMs`). */
  requestTimeoutMs?: number;
}

/** A transport for the options, and the server's name for messages. */
export interface OpenedTransport {
  transport: Transport;
  /** The server, as messages name it (a URL or a socket path). */
  target: string;
  /** Options resolved from the environment, kept with the connection. */
  resolved: ConnectionOpts;
  /**
   * Whether the transport streams a request's messages as they come (gRPC
   * over HTTP/2); gRPC-Web sends each request whole.
   */
  streamsRequests: boolean;
}

/**
 * What an entry point provides: Node's transports, or the web's. Each
 * entry's `Sandbox` carries its own, so both entries may be loaded in one
 * process.
 */
export interface Platform {
  /** "node" or "web". */
  readonly name: string;
  /** A key that is the same for options that reach the same server as the same caller. */
  key(opts: ConnectionOpts): string;
  /**
   * A transport for the options (for the local server: once it answers),
   * whose calls carry the key ({@link headersInterceptor}).
   */
  open(opts: ConnectionOpts, signal?: AbortSignal): Promise<OpenedTransport>;
  /**
   * The image `Sandbox.create` uses when the code names none (Node:
   * `AIRLOCK_IMAGE`), so E2B code expecting E2B's tools runs unchanged on
   * an image that has them.
   */
  defaultImage?(): string | undefined;
  /**
   * Node: the host's files a template build reads (its file, its
   * `.dockerignore`, its context directory as a tar stream). Browsers and
   * edge runtimes have none, and gRPC-Web cannot stream a build's context.
   */
  readonly files?: HostFiles;
}

/** The host's files, as a template build reads them (Node). */
export interface HostFiles {
  /** The current directory. */
  cwd(): string;
  /** `path` made absolute from `base`. */
  resolve(base: string, path: string): string;
  /** A file's text; undefined when there is no such file. */
  readText(path: string): string | undefined;
  /**
   * A directory as a tar stream (paths relative to it, `/`-separated):
   * files, directories and symbolic links (other kinds are left out), less
   * what `ignored` names; with `descendIgnored`, an ignored directory is
   * walked and kept when something inside it is not ignored. Fails when
   * `dir` is not a directory.
   */
  tar(dir: string, ignored: (path: string) => boolean, descendIgnored: boolean): AsyncIterable<Uint8Array>;
}

/** What `ConnectionConfig.setIntegration` set. */
let integration: string | undefined;

/** E2B's `ConnectionConfig`, for its one static call that wrapping libraries make. */
export class ConnectionConfig {
  /**
   * Names a library wrapping the SDK ("my-agent/1.0"): every call from then
   * on carries it in the `x-airlock-integration` header. `undefined` clears it.
   */
  static setIntegration(name: string | undefined): void {
    integration = name === "" ? undefined : name;
  }

  /** What `setIntegration` set, if anything. */
  static get integration(): string | undefined {
    return integration;
  }
}

/**
 * An interceptor that adds the key, the integration's name and the
 * caller's headers to every call (platforms put it on the transports they
 * make).
 */
export function headersInterceptor(apiKey: string | undefined, headers: Record<string, string> | undefined): Interceptor {
  return (next) => async (req) => {
    if (apiKey !== undefined && apiKey !== "") {
      req.header.set("authorization", `Bearer ${apiKey}`);
    }
    if (integration !== undefined) {
      req.header.set("x-airlock-integration", integration);
    }
    for (const [name, value] of Object.entries(headers ?? {})) {
      req.header.set(name, value);
    }
    return await next(req);
  };
}

/** Clients of every service on one transport. */
export class Connection {
  readonly sandboxes: Client<typeof Sandboxes>;
  readonly processes: Client<typeof Processes>;
  readonly files: Client<typeof Files>;
  readonly code: Client<typeof Code>;
  readonly network: Client<typeof Network>;
  readonly ingress: Client<typeof Ingress>;
  readonly templates: Client<typeof Templates>;
  readonly usage: Client<typeof Usage>;
  /** The server, for messages. */
  readonly target: string;
  /** The options this connection was made with (the environment's filled in). */
  readonly opts: ConnectionOpts;
  /** Whether requests stream (gRPC) or go whole (gRPC-Web). */
  readonly streamsRequests: boolean;

  private constructor(opened: OpenedTransport) {
    const transport = opened.transport;
    this.sandboxes = createClient(Sandboxes, transport);
    this.processes = createClient(Processes, transport);
    this.files = createClient(Files, transport);
    this.code = createClient(Code, transport);
    this.network = createClient(Network, transport);
    this.ingress = createClient(Ingress, transport);
    this.templates = createClient(Templates, transport);
    this.usage = createClient(Usage, transport);
    this.target = opened.target;
    this.opts = opened.resolved;
    this.streamsRequests = opened.streamsRequests;
  }

  private static cache = new Map<string, Promise<Connection>>();

  /**
   * The connection for `opts`, shared by every caller with the same
   * options (one HTTP/2 connection in Node). A failed attempt is not kept.
   */
  static async get(chosen: Platform, opts: ConnectionOpts = {}, signal?: AbortSignal): Promise<Connection> {
    const key = chosen.key(opts);
    let pending = Connection.cache.get(key);
    if (pending === undefined) {
      pending = chosen.open(opts, signal).then((opened) => new Connection(opened));
      Connection.cache.set(key, pending);
      pending.catch(() => Connection.cache.delete(key));
    }
    try {
      return await pending;
    } catch (error) {
      throw toSandboxError(error, signal, opts.host ?? "the local server");
    }
  }

  /** Connect's options for one call: its signal and deadline. */
  callOptions(opts: RequestOpts = {}, stream = false): CallOptions {
    const timeoutMs = stream ? undefined : (opts.requestTimeoutMs ?? this.opts.requestTimeoutMs);
    return { signal: opts.signal, timeoutMs };
  }

  /** Runs a call with the options, mapping its failure to the SDK's errors. */
  async call<T>(opts: RequestOpts | undefined, run: (options: CallOptions) => Promise<T>): Promise<T> {
    try {
      return await run(this.callOptions(opts));
    } catch (error) {
      throw this.error(error, opts?.signal);
    }
  }

  /** A failure of a call on this connection as the SDK's error. */
  error(error: unknown, signal?: AbortSignal): unknown {
    return toSandboxError(error, signal, this.target);
  }
}
