// The TypeScript SDK as a peer of the API benchmark (tests/benches/api.rs),
// which drives it so that the SDK's figures are taken in the same run, on
// the same server and pool, interleaved with the library's and the Rust
// client's. One request per stdin line, one JSON answer per stdout line:
//
//   create-echo CONN          Sandbox.create() (the default configuration:
//                             the server's pool) to the first stdout chunk
//                             of commands.run("echo ready"); answers
//                             {"ms": N, "origin": "pool"}, the sandbox killed
//   exec CONN SANDBOX_ID N    N sequential commands.run("true") (which is
//                             /bin/sh -c true) round trips, start to exit, on
//                             that sandbox; answers {"ms": [N values]}
//
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

async function exec(kind, sandboxId, n) {
  const [sdk, opts] = connection(kind);
  const sandbox = await sdk.Sandbox.connect(sandboxId, opts);
  const times = [];
  for (let i = 0; i < n; i++) {
    const began = performance.now();
    await sandbox.commands.run("true");
    times.push(performance.now() - began);
  }
  return { ms: times };
}

for await (const line of createInterface({ input: process.stdin })) {
  const [verb, ...args] = line.trim().split(/\s+/);
  let answer;
  try {
    if (verb === "create-echo") {
      answer = await createEcho(args[0]);
    } else if (verb === "exec") {
      answer = await exec(args[0], args[1], Number(args[2]));
    } else {
      answer = { error: `no request ${verb}` };
    }
  } catch (error) {
    answer = { error: `${error.name}: ${error.message}` };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
