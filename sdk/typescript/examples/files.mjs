// Files both ways: text, a local file streamed up, a directory listing, a
// watch, and a file streamed down into a local file with its SHA-256
// checked.
//
//   node files.mjs

import { createHash } from "node:crypto";
import { createReadStream, createWriteStream, readFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { fileURLToPath } from "node:url";

import { Sandbox } from "airlock-sdk";

const sandbox = await Sandbox.create({ noImage: true, timeoutMs: 300_000 });
try {
  await sandbox.files.write("/tmp/notes/hello.txt", "hello, file\n");
  console.log("read back:", JSON.stringify(await sandbox.files.read("/tmp/notes/hello.txt")));

  // A watch sees what happens below a directory from now on.
  const watch = await sandbox.files.watchDir("/tmp/notes", (event) => console.log(`  watch: ${event.type} ${event.name}`), {
    recursive: true,
  });

  // A local file goes up as a stream (any size; chunks of 1 MiB).
  const me = fileURLToPath(import.meta.url);
  const up = await sandbox.files.write("/tmp/notes/copy-of-this-script.mjs", createReadStream(me));
  console.log(`uploaded ${up.size} bytes to ${up.path} (${up.permissions})`);
  await sandbox.files.makeDir("/tmp/notes/sub");
  await sandbox.files.rename("/tmp/notes/hello.txt", "/tmp/notes/sub/hello.txt");

  for (const entry of await sandbox.files.list("/tmp/notes", { depth: 2 })) {
    console.log(`  ${entry.permissions} ${String(entry.size).padStart(6)} ${entry.path}`);
  }

  // And comes down as a stream, into a local file.
  const local = join(tmpdir(), `airlock-example-${process.pid}.mjs`);
  const stream = await sandbox.files.read("/tmp/notes/copy-of-this-script.mjs", { format: "stream" });
  await pipeline(Readable.fromWeb(stream), createWriteStream(local));
  const digest = (path) => createHash("sha256").update(readFileSync(path)).digest("hex");
  console.log(`downloaded ${statSync(local).size} bytes; same SHA-256: ${digest(local) === digest(me)}`);

  await sandbox.files.remove("/tmp/notes/sub");
  console.log("exists after remove:", await sandbox.files.exists("/tmp/notes/sub/hello.txt"));
  await watch.stop();
} finally {
  await sandbox.kill();
}
