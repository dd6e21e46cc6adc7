/**
 * Node's {@link Platform}: gRPC over HTTP/2 (`node:http2`, through
 * connect-node), to a remote server over TLS (or plain HTTP/2 to a
 * loopback address), or to the local server on its Unix socket, started on
 * demand. Options not given come from the environment, as the CLI reads
 * it: `AIRLOCK_HOST`, `AIRLOCK_API_KEY`, `AIRLOCK_CA_CERT`, `AIRLOCK_BIN`
 * (and `AIRLOCK_IMAGE`, the image of a create that names none). A
 * template build reads the host's files through it (`files`: `tar.ts`
 * packs the context).
 */

import { readFileSync, statSync } from "node:fs";
import { connect as netConnect } from "node:net";
import { resolve as resolvePath } from "node:path";

import { createGrpcTransport } from "@connectrpc/connect-node";

import { headersInterceptor, type ConnectionOpts, type OpenedTransport, type Platform } from "../connection.js";
import { InvalidArgumentError } from "../errors.js";
import { serverUrl } from "../host.js";
import { defaultSocket, ensureLocalServer } from "./local.js";
import { tarDirectory } from "./tar.js";

/** HTTP/2 pings that find a dead connection (unref'd: they keep no process alive). */
const PING_INTERVAL_MS = 20_000;

function env(name: string): string | undefined {
  const value = process.env[name];
  return value === undefined || value.trim() === "" ? undefined : value;
}

/** The options with the environment's values where the caller gave none. */
function resolve(opts: ConnectionOpts): ConnectionOpts {
  // A socket the caller names beats AIRLOCK_HOST.
  const host = opts.host ?? (opts.socket === undefined ? env("AIRLOCK_HOST") : undefined);
  if (host === undefined) {
    return {
      ...opts,
      socket: opts.socket ?? defaultSocket(),
      airlockBin: opts.airlockBin ?? env("AIRLOCK_BIN") ?? "airlock",
    };
  }
  return {
    ...opts,
    host,
    apiKey: opts.apiKey ?? env("AIRLOCK_API_KEY"),
    caCert: opts.caCert ?? env("AIRLOCK_CA_CERT"),
  };
}

/** PEM text as given, or read from the file the option names. */
function caPem(caCert: string): string {
  if (caCert.includes("-----BEGIN")) {
    return caCert;
  }
  try {
    return readFileSync(caCert, "utf8");
  } catch (error) {
    throw new InvalidArgumentError(`cannot read the CA certificate ${caCert} (AIRLOCK_CA_CERT): ${String(error)}`, {
      field: "caCert",
      cause: error,
    });
  }
}

export const nodePlatform: Platform = {
  name: "node",

  files: {
    cwd: () => process.cwd(),
    resolve: (base, path) => resolvePath(base, path),
    readText(path: string): string | undefined {
      try {
        return statSync(path).isFile() ? readFileSync(path, "utf8") : undefined;
      } catch {
        return undefined;
      }
    },
    tar: tarDirectory,
  },

  defaultImage(): string | undefined {
    return env("AIRLOCK_IMAGE")?.trim();
  },

  key(opts: ConnectionOpts): string {
    const r = resolve(opts);
    return JSON.stringify(["node", r.host, r.apiKey, r.caCert, r.socket, r.headers, r.requestTimeoutMs]);
  },

  async open(opts: ConnectionOpts): Promise<OpenedTransport> {
    const resolved = resolve(opts);
    const interceptors = [headersInterceptor(resolved.apiKey, resolved.headers)];
    if (resolved.host !== undefined) {
      const baseUrl = serverUrl(resolved.host);
      const ca = resolved.caCert === undefined ? undefined : caPem(resolved.caCert);
      const transport = createGrpcTransport({
        baseUrl,
        nodeOptions: ca === undefined ? {} : { ca },
        pingIntervalMs: PING_INTERVAL_MS,
        interceptors,
      });
      return { transport, target: baseUrl, resolved, streamsRequests: true };
    }
    const socket = resolved.socket ?? defaultSocket();
    const transport = createGrpcTransport({
      baseUrl: "http://localhost",
      nodeOptions: { createConnection: () => netConnect(socket) },
      pingIntervalMs: PING_INTERVAL_MS,
      interceptors,
    });
    await ensureLocalServer(socket, resolved.airlockBin ?? "airlock", transport);
    return { transport, target: socket, resolved, streamsRequests: true };
  },
};
