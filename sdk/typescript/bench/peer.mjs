// The TypeScript SDK as a peer of the API benchmark (tests/benches/api.rs),
// which drives it so that the SDK's figures are taken in the same run, on
// the same server and pool, interleaved with the library's and the Rust
// client's. One request per stdin line, one JSON answer per stdout line:
//
//   create-echo CONN      Sandbox.create() (the default configuration:
//                         the server's pool) to the first stdout chunk of
//                         commands.run("echo ready"); answers
//                         {"ms": N, "origin": "pool"}, the sandbox killed
//   exec CONN SANDBOX_ID  one commands.run("true") (which is /bin/sh -c
//                         true) on that sandbox, start to exit; {"ms": N}
//   get CONN SANDBOX_ID   one getInfo() of that sandbox (Sandboxes.Get,
//                         answered without the guest); {"ms": N}
//
// Each is timed here. The connection of each CONN, and a handle per
// sandbox, are kept across requests, as a program using the SDK keeps them.
// CONN is "unix" (Node's entry, gRPC over HTTP/2 on AIRLOCK_BENCH_SOCKET),
// "tls" (Node's entry, gRPC over HTTP/2 with TLS and a key:
// AIRLOCK_BENCH_HOST, AIRLOCK_BENCH_KEY, AIRLOCK_BENCH_CA) or "web" (the web
// entry, gRPC-Web over fetch with TLS: the CA comes from
// NODE_EXTRA_CA_CERTS, which the driver sets). A failure answers
// {"error": "..."}.

import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";

const node = await import("airlock-sdk");
const web = await import("airlock-sdk/web");

const env = (name) => {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set`);
  }
  return value;
};

/** The SDK and the options for a connection kind. */
function connection(kind) {
  switch (kind) {
    case "unix":
      return [node, { socket: env("AIRLOCK_BENCH_SOCKET") }];
    case "tls":
      return [
        node,
        { host: env("AIRLOCK_BENCH_HOST"), apiKey: env("AIRLOCK_BENCH_KEY"), caCert: readFileSync(env("AIRLOCK_BENCH_CA"), "utf8") },
      ];
    case "web":
      return [web, { host: env("AIRLOCK_BENCH_HOST"), apiKey: env("AIRLOCK_BENCH_KEY") }];
    default:
      throw new Error(`no connection kind ${kind}`);
  }
}

async function createEcho(kind) {
  const [sdk, opts] = connection(kind);
  const began = performance.now();
  const sandbox = await sdk.Sandbox.create(opts);
  let first;
  await sandbox.commands.run("echo ready", {
    onStdout: () => {
      first ??= performance.now();
    },
  });
  const ms = first - began;
  const { origin } = await sandbox.getInfo();
  await sandbox.kill();
  return { ms, origin };
}

/** Handles of sandboxes by connection kind and id, connected once. */
const handles = new Map();

async function handle(kind, sandboxId) {
  const key = `${kind} ${sandboxId}`;
  if (!handles.has(key)) {
    const [sdk, opts] = connection(kind);
    handles.set(key, await sdk.Sandbox.connect(sandboxId, opts));
  }
  return handles.get(key);
}

async function exec(kind, sandboxId) {
  const sandbox = await handle(kind, sandboxId);
  const began = performance.now();
  await sandbox.commands.run("true");
  return { ms: performance.now() - began };
}

async function get(kind, sandboxId) {
  const sandbox = await handle(kind, sandboxId);
  const began = performance.now();
  await sandbox.getInfo();
  return { ms: performance.now() - began };
}

for await (const line of createInterface({ input: process.stdin })) {
  const [verb, ...args] = line.trim().split(/\s+/);
  let answer;
  try {
    if (verb === "create-echo") {
      answer = await createEcho(args[0]);
    } else if (verb === "exec") {
      answer = await exec(args[0], args[1]);
    } else if (verb === "get") {
      answer = await get(args[0], args[1]);
    } else {
      answer = { error: `no request ${verb}` };
    }
  } catch (error) {
    answer = { error: `${error.name}: ${error.message}` };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
