// What the test files share: the SDK as the pass loads it (Node's entry,
// gRPC over HTTP/2, reading AIRLOCK_HOST/AIRLOCK_API_KEY/AIRLOCK_CA_CERT;
// or the web entry, gRPC-Web over fetch, given the server in its options),
// the options a sandbox needs, and small tools. test/run.mjs starts the
// server and sets the environment these read; it compiles these files
// (test/tsconfig.json) first, which type-checks them against the SDK's
// declarations.

import { createHash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import type * as airlock from "airlock-sdk";

/** "node" or "web". */
export const entry: string = process.env.AIRLOCK_SDK_ENTRY ?? "node";

/** The SDK as this pass loads it; both entries export the same API. */
export const sdk: typeof airlock = entry === "web" ? await import("airlock-sdk/web") : await import("airlock-sdk");

/** Whatever a call's options may hold (a sandbox's, a listing's, the connection's). */
type Options = airlock.SandboxOpts & airlock.SandboxListOpts & airlock.SnapshotListOpts;

/** The server and key, given explicitly on the web pass (it reads no environment). */
export function opts<T extends Options>(extra: T = {} as T): T & airlock.ConnectionOpts {
  if (entry === "web") {
    return { host: need("AIRLOCK_TEST_HOST"), apiKey: need("AIRLOCK_TEST_KEY"), ...extra };
  }
  return { ...extra };
}

export function need(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === "") {
    throw new Error(`${name} is not set: run the suite with test/run.mjs (npm test)`);
  }
  return value;
}

/** Labels that mark this run's sandboxes. */
export const RUN = `${entry}-${process.pid}`;

/** How long a test may take before it fails instead of hanging (boots under TCG are slow). */
export const LIMIT_MS = 600_000;

/** A busybox sandbox (no image) for the tests that need no Debian. */
export async function smallSandbox(extra: airlock.SandboxOpts = {}): Promise<airlock.Sandbox> {
  return await sdk.Sandbox.create(opts({ noImage: true, timeoutMs: 1_800_000, metadata: { run: RUN }, ...extra }));
}

export function sha256(bytes: Uint8Array | string): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Waits until `check()` is true, polling, for `ms` at most; whether it became true. */
export async function eventually(check: () => boolean | Promise<boolean>, ms = 30_000): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    if (await check()) {
      return true;
    }
    if (Date.now() > end) {
      return false;
    }
    await sleep(100);
  }
}

/** A promise and the function that settles it. */
export function signal(): { promise: Promise<void>; resolve: () => void } {
  let resolve: () => void = () => undefined;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** The `name` of what a call threw (an `AbortError`, ...), if it has one. */
export function nameOf(error: unknown): unknown {
  return typeof error === "object" && error !== null ? (error as { name?: unknown }).name : undefined;
}

/** Every sandbox of a listing, page by page (E2B's paginator is not a promise). */
export async function listAll(pages: airlock.SandboxPaginator): Promise<airlock.SandboxInfo[]> {
  const out: airlock.SandboxInfo[] = [];
  for await (const info of pages) {
    out.push(info);
  }
  return out;
}
