// Files through the SDK, in one busybox sandbox (1 GiB, so /tmp holds the
// large file): write from a string, bytes, a Blob, a ReadableStream and an
// async iterable, read as text, bytes, a Blob and a stream; several files
// at once; list, exists, getInfo, makeDir, rename, remove; watchDir's
// events; 100 MiB both ways with the same SHA-256 here and in the guest;
// an AbortSignal cancelling a read midway and a write (which leaves no
// file behind, or an existing file as it was).

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";

import type * as airlock from "airlock-sdk";

import { LIMIT_MS, entry, eventually, nameOf, sdk, smallSandbox } from "./helpers.js";

const { FileType, NotFoundError } = sdk;

const MiB = 1024 * 1024;

/** A stream of `mib` MiB of random bytes, hashed as it is read. */
function randomStream(
  mib: number,
  onChunk: (made: number) => void = () => undefined,
): { stream: ReadableStream<Uint8Array>; digest: () => string } {
  const hash = createHash("sha256");
  let made = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (made === mib) {
        controller.close();
        return;
      }
      const chunk = randomBytes(MiB);
      hash.update(chunk);
      made += 1;
      onChunk(made);
      controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    },
  });
  return { stream, digest: () => hash.digest("hex") };
}

describe(`files (${entry})`, { timeout: LIMIT_MS }, () => {
  let sandbox: airlock.Sandbox;

  before(async () => {
    sandbox = await smallSandbox({ memoryMb: 1024 });
  });

  after(async () => {
    await sandbox?.kill().catch(() => undefined);
  });

  test("write takes strings, bytes, Blobs, streams and iterables; read gives each format", async () => {
    const info = await sandbox.files.write("/tmp/f/text.txt", "héllo\n");
    assert.equal(info.path, "/tmp/f/text.txt");
    assert.equal(info.name, "text.txt");
    assert.equal(info.type, FileType.FILE);
    assert.equal(info.size, 7);
    await sandbox.files.write("/tmp/f/bytes.bin", new Uint8Array([0, 1, 2, 255]));
    await sandbox.files.write("/tmp/f/blob.txt", new Blob(["from ", "a blob"]));
    await sandbox.files.write("/tmp/f/stream.txt", new Blob(["from a stream"]).stream());
    await sandbox.files.write(
      "/tmp/f/iterable.txt",
      (async function* () {
        yield "from ";
        yield new TextEncoder().encode("an iterable");
      })(),
    );
    await sandbox.files.write("/tmp/f/mode.sh", "#!/bin/sh\n", { mode: 0o755 });

    assert.equal(await sandbox.files.read("/tmp/f/text.txt"), "héllo\n");
    assert.deepEqual(await sandbox.files.read("/tmp/f/bytes.bin", { format: "bytes" }), new Uint8Array([0, 1, 2, 255]));
    const blob = await sandbox.files.read("/tmp/f/blob.txt", { format: "blob" });
    assert.ok(blob instanceof Blob);
    assert.equal(await blob.text(), "from a blob");
    const stream = await sandbox.files.read("/tmp/f/stream.txt", { format: "stream" });
    assert.equal(await new Response(stream).text(), "from a stream");
    assert.equal(await sandbox.files.read("/tmp/f/iterable.txt"), "from an iterable");
    assert.equal(await sandbox.files.read("/tmp/f/text.txt", { offset: 1, length: 2 }), "é");
    assert.equal((await sandbox.files.getInfo("/tmp/f/mode.sh")).permissions, "-rwxr-xr-x");
    assert.equal((await sandbox.commands.run("cat /tmp/f/bytes.bin | od -An -tu1")).stdout.trim(), "0   1   2 255");
  });

  test("write with a list writes each file; append adds to one", async () => {
    const written = await sandbox.files.write([
      { path: "/tmp/many/a.txt", data: "A" },
      { path: "/tmp/many/b.txt", data: "B" },
    ]);
    assert.deepEqual(written.map((w) => w.path), ["/tmp/many/a.txt", "/tmp/many/b.txt"]);
    await sandbox.files.write("/tmp/many/a.txt", "+more", { append: true });
    assert.equal(await sandbox.files.read("/tmp/many/a.txt"), "A+more");
  });

  test("list, exists, getInfo, makeDir, rename and remove", async () => {
    assert.equal(await sandbox.files.makeDir("/tmp/tree/sub"), true);
    assert.equal(await sandbox.files.makeDir("/tmp/tree/sub"), false);
    await sandbox.files.write("/tmp/tree/sub/leaf.txt", "leaf");
    await sandbox.files.write("/tmp/tree/top.txt", "top");
    const children = await sandbox.files.list("/tmp/tree");
    assert.deepEqual(children.map((e) => [e.name, e.type]).sort(), [["sub", "dir"], ["top.txt", "file"]]);
    const deep = await sandbox.files.list("/tmp/tree", { depth: 2 });
    assert.ok(deep.some((e) => e.path === "/tmp/tree/sub/leaf.txt" && e.size === 4));

    assert.equal(await sandbox.files.exists("/tmp/tree/top.txt"), true);
    assert.equal(await sandbox.files.exists("/tmp/tree/nothing"), false);
    const dir = await sandbox.files.getInfo("/tmp/tree/sub");
    assert.equal(dir.type, "dir");
    assert.ok(dir.permissions.startsWith("d"));
    assert.ok(dir.modifiedTime instanceof Date);

    const moved = await sandbox.files.rename("/tmp/tree/top.txt", "/tmp/tree/sub/moved.txt");
    assert.equal(moved.path, "/tmp/tree/sub/moved.txt");
    assert.equal(await sandbox.files.exists("/tmp/tree/top.txt"), false);
    await sandbox.files.remove("/tmp/tree");
    assert.equal(await sandbox.files.exists("/tmp/tree"), false);

    await assert.rejects(sandbox.files.getInfo("/tmp/tree"), (e) => e instanceof NotFoundError);
    // A relative path is taken from the home directory, as E2B's are.
    await assert.rejects(sandbox.files.read("relative/path"), (e) => e instanceof NotFoundError && /\/root\/relative\/path/.test(e.message));
  });

  test("watchDir reports changes below a directory until stopped", async () => {
    // The subdirectory exists before the watch starts, so the recursive
    // watch holds it from the start (one made later is watched once the
    // guest has seen it, which a rename right after could race).
    await sandbox.files.makeDir("/tmp/watched/dir");
    const events: airlock.FilesystemEvent[] = [];
    let exited: unknown = "not yet";
    const watch = await sandbox.files.watchDir("/tmp/watched", (event) => void events.push(event), {
      recursive: true,
      onExit: (error) => {
        exited = error;
      },
    });
    await sandbox.files.write("/tmp/watched/new.txt", "x");
    await sandbox.files.makeDir("/tmp/watched/made");
    await sandbox.files.rename("/tmp/watched/new.txt", "/tmp/watched/dir/renamed.txt");
    await sandbox.files.remove("/tmp/watched/dir/renamed.txt");
    const has = (type: string, name: string): boolean => events.some((e) => e.type === type && e.name === name);
    assert.ok(
      await eventually(() => has("remove", "dir/renamed.txt")),
      JSON.stringify(events),
    );
    assert.ok(events.some((e) => e.name === "made" && e.isDir && e.type === "create"), JSON.stringify(events));
    assert.ok(events.some((e) => e.type === "rename" && e.rename === "from" && e.name === "new.txt"), JSON.stringify(events));
    assert.ok(
      events.some((e) => e.type === "rename" && e.rename === "to" && e.path === "/tmp/watched/dir/renamed.txt"),
      JSON.stringify(events),
    );
    await watch.stop();
    assert.equal(exited, undefined);
    const seen = events.length;
    await sandbox.files.write("/tmp/watched/after.txt", "x");
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(events.length, seen, "no event after stop()");
  });

  test("100 MiB up from a stream and back down have the same SHA-256 here and in the guest", async () => {
    const source = randomStream(100);
    const info = await sandbox.files.write("/tmp/big.bin", source.stream);
    const sent = source.digest();
    assert.equal(info.size, 100 * MiB);
    const guest = (await sandbox.commands.run("sha256sum /tmp/big.bin", { timeoutMs: 300_000 })).stdout.split(" ")[0];
    assert.equal(guest, sent);
    const parts = (await sandbox.files.list("/tmp")).filter((e) => e.name.includes("airlock-part"));
    assert.deepEqual(parts, [], "no piece of the write is left beside it");

    const back = await sandbox.files.read("/tmp/big.bin", { format: "stream" });
    const hash = createHash("sha256");
    let bytes = 0;
    for await (const chunk of back) {
      hash.update(chunk);
      bytes += chunk.byteLength;
    }
    assert.equal(bytes, 100 * MiB);
    assert.equal(hash.digest("hex"), sent);
  });

  test("an AbortSignal cancels a read midway and a write, which leaves no file or the old one untouched", async () => {
    const reading = new AbortController();
    const stream = await sandbox.files.read("/tmp/big.bin", { format: "stream", signal: reading.signal });
    const reader = stream.getReader();
    const first = await reader.read();
    assert.ok(first.value !== undefined && first.value.byteLength > 0);
    reading.abort();
    await assert.rejects(
      (async () => {
        for (;;) {
          if ((await reader.read()).done) {
            return;
          }
        }
      })(),
      (e) => nameOf(e) === "AbortError",
    );

    /** A write of endless data, aborted after 20 MiB. */
    const abortedWrite = async (path: string): Promise<void> => {
      const writing = new AbortController();
      const endless = randomStream(Number.POSITIVE_INFINITY, (made) => {
        if (made === 20) {
          writing.abort();
        }
      });
      await assert.rejects(
        sandbox.files.write(path, endless.stream, { signal: writing.signal }),
        (e) => nameOf(e) === "AbortError",
      );
    };
    /** The names in /tmp that contain `name`. */
    const named = async (name: string): Promise<string[]> =>
      (await sandbox.files.list("/tmp")).filter((e) => e.name.includes(name)).map((e) => e.name);

    await abortedWrite("/tmp/aborted.bin");
    assert.ok(
      await eventually(async () => (await named("aborted.bin")).length === 0, 10_000),
      `the aborted write left a file: ${JSON.stringify(await named("aborted.bin"))}`,
    );

    // Over a file that exists, the old contents stay, and nothing beside it.
    await sandbox.files.write("/tmp/kept.txt", "the old contents");
    await abortedWrite("/tmp/kept.txt");
    assert.ok(
      await eventually(async () => JSON.stringify(await named("kept.txt")) === '["kept.txt"]', 10_000),
      `the aborted write left a file beside the old one: ${JSON.stringify(await named("kept.txt"))}`,
    );
    assert.equal(await sandbox.files.read("/tmp/kept.txt"), "the old contents");
    await sandbox.files.remove("/tmp/kept.txt");
    await sandbox.files.remove("/tmp/big.bin");
  });
});
