// Hello world: a sandbox, a command, its output, the end of the sandbox.
//
//   node hello.mjs
//
// With no AIRLOCK_HOST this talks to the local server (started on demand,
// `airlock` on PATH or AIRLOCK_BIN); with AIRLOCK_HOST, AIRLOCK_API_KEY
// (and AIRLOCK_CA_CERT for a private CA) to a remote one.

import { Sandbox } from "airlock-sdk";

// noImage: the busybox environment, the smallest and fastest sandbox.
const sandbox = await Sandbox.create({ noImage: true, timeoutMs: 300_000, metadata: { example: "hello" } });
try {
  const result = await sandbox.commands.run("echo hello from $(hostname); uname -sr");
  process.stdout.write(result.stdout);
  const info = await sandbox.getInfo();
  console.log(`sandbox ${info.sandboxId}: ${info.state}, ${info.memoryMB} MiB, started ${info.origin}`);
} finally {
  await sandbox.kill();
}
