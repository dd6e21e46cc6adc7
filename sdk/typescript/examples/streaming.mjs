// Output as it happens, and a background program fed on stdin.
//
//   node streaming.mjs
//
// 1. A command's stdout and stderr reach the callbacks while it runs.
// 2. A background program (a line counter reading stdin) gets lines with
//    sendStdin; this client lets go of it, attaches again with
//    commands.connect (the guest replays what it printed meanwhile), and
//    ends it by closing its stdin.

import { Sandbox } from "airlock-sdk";

const sandbox = await Sandbox.create({ noImage: true, timeoutMs: 300_000 });
try {
  const began = Date.now();
  const stamp = () => `${String(Date.now() - began).padStart(5)} ms`;
  await sandbox.commands.run("for i in 1 2 3; do echo tick $i; sleep 0.5; done; echo done >&2", {
    onStdout: (data) => process.stdout.write(`${stamp()} stdout: ${data}`),
    onStderr: (data) => process.stdout.write(`${stamp()} stderr: ${data}`),
  });

  const counter = await sandbox.commands.run('n=0; while read line; do n=$((n+1)); echo "$n: $line"; done; echo "$n lines"', {
    background: true,
    timeoutMs: 0,
  });
  console.log(`background program, pid ${counter.pid}`);
  await counter.sendStdin("first line\n");
  await counter.disconnect();
  await sandbox.commands.sendStdin(counter.pid, "sent while nobody listened\n");

  const again = await sandbox.commands.connect(counter.pid, {
    onStdout: (data) => process.stdout.write(`replayed or live: ${data}`),
  });
  await again.sendStdin("after attaching again\n");
  await again.closeStdin();
  const result = await again.wait();
  console.log(`exit ${result.exitCode}; all it printed:\n${result.stdout}`);
} finally {
  await sandbox.kill();
}
