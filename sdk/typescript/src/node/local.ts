/**
 * The local server on its Unix socket, as the CLI finds and starts it: the
 * socket is `daemon.sock` in the state base (`AIRLOCK_STATE_DIR`, else
 * `$XDG_RUNTIME_DIR/airlock`, else `airlock` in the temporary directory);
 * when nobody answers there, `airlock --verbose serve --socket SOCKET
 * --ingress local` runs in the background (its own process group, its
 * output appended to `daemon.log` beside the socket; HTTP ingress into
 * sandboxes on a loopback port of its own) and the client waits, 10 s at
 * most, for it to answer `Ping`.
 */

import { spawn } from "node:child_process";
import { mkdirSync, openSync, closeSync } from "node:fs";
import { connect as netConnect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

import { createClient, type Transport } from "@connectrpc/connect";

import { Sandboxes } from "../gen/airlock/api/v1/sandboxes_pb.js";
import { SandboxError } from "../errors.js";

/** The local server's socket, in the state base. */
export const SOCKET_NAME = "daemon.sock";
/** The log of a server started on demand, beside its socket. */
export const LOG_NAME = "daemon.log";
/** How long a client waits for a server it started. */
export const START_TIMEOUT_MS = 10_000;

/** The local server's socket when the options name none. */
export function defaultSocket(): string {
  const state = process.env.AIRLOCK_STATE_DIR;
  if (state !== undefined && state !== "") {
    return join(state, SOCKET_NAME);
  }
  const run = process.env.XDG_RUNTIME_DIR;
  const base = run !== undefined && run !== "" ? join(run, "airlock") : join(tmpdir(), "airlock");
  return join(base, SOCKET_NAME);
}

/** Whether a process listens on the socket (false when nothing is there or it refuses). */
function listening(socket: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const probe = netConnect(socket);
    probe.once("connect", () => {
      probe.destroy();
      resolve(true);
    });
    probe.once("error", (error: NodeJS.ErrnoException) => {
      probe.destroy();
      if (error.code === "ENOENT" || error.code === "ECONNREFUSED") {
        resolve(false);
      } else {
        reject(new SandboxError(`cannot open the local server's socket ${socket}: ${error.message}`, { cause: error }));
      }
    });
  });
}

/** Whether the server on the transport answers `Ping`. */
async function answers(transport: Transport): Promise<boolean> {
  try {
    await createClient(Sandboxes, transport).ping({}, { timeoutMs: 2_000 });
    return true;
  } catch {
    return false;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Starts `program --verbose serve --socket SOCKET --ingress local` in the background. */
function startServer(socket: string, program: string): Promise<{ exited: () => boolean }> {
  const log = join(dirname(socket), LOG_NAME);
  mkdirSync(dirname(socket), { recursive: true, mode: 0o700 });
  const fd = openSync(log, "a", 0o600);
  return new Promise((resolve, reject) => {
    let exited = false;
    const child = spawn(program, ["--verbose", "serve", "--socket", socket, "--ingress", "local"], {
      detached: true,
      stdio: ["ignore", fd, fd],
    });
    child.once("error", (error) => {
      closeSync(fd);
      reject(
        new SandboxError(
          `cannot start the local server with ${program}: ${error.message}; ` +
            "install airlock and put it on PATH, or set AIRLOCK_BIN (or AIRLOCK_HOST for a remote server)",
          { cause: error },
        ),
      );
    });
    child.once("spawn", () => {
      closeSync(fd);
      child.unref();
      resolve({ exited: () => exited });
    });
    child.once("exit", () => {
      exited = true;
    });
  });
}

/**
 * Makes sure a server answers on `socket`, starting one with `program`
 * when nobody listens there.
 */
export async function ensureLocalServer(socket: string, program: string, transport: Transport): Promise<void> {
  if (await listening(socket)) {
    return;
  }
  const child = await startServer(socket, program);
  const began = Date.now();
  let pause = 10;
  for (;;) {
    if ((await listening(socket)) && (await answers(transport))) {
      return;
    }
    // A server that exited at once (it lost a race with another) gets one
    // more look, then its log is the answer.
    if (child.exited() || Date.now() - began >= START_TIMEOUT_MS) {
      await sleep(pause);
      if ((await listening(socket)) && (await answers(transport))) {
        return;
      }
      throw new SandboxError(
        `the local server did not answer on ${socket} within ${Math.round((Date.now() - began) / 1000)} s; ` +
          `see its log, ${join(dirname(socket), LOG_NAME)}`,
      );
    }
    await sleep(pause);
    pause = Math.min(pause * 2, 200);
  }
}
