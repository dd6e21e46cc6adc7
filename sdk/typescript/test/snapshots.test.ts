// Named snapshots through the SDK, on one sandbox of the default image the
// checks share (in order): a snapshot of it with a file and a Python
// variable, clones started from it by E2B's form (its id where a template
// goes) and by `snapshot`, both seeing the file and the variable; a taken
// name refused; the listing as E2B's paginator, whole and in pages;
// deletion; another key's snapshot not found; E2B's filesystem-only mode
// refused.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type * as airlock from "airlock-sdk";

import { LIMIT_MS, RUN, entry, need, opts, sdk } from "./helpers.js";

const { Sandbox, AlreadyExistsError, InvalidArgumentError, NotFoundError, SandboxNotFoundError } = sdk;

/** Every snapshot of a listing, page by page. */
async function all(pages: airlock.SnapshotPaginator): Promise<airlock.SnapshotInfo[]> {
  const out: airlock.SnapshotInfo[] = [];
  for await (const info of pages) {
    out.push(info);
  }
  return out;
}

describe(`snapshots (${entry})`, { timeout: LIMIT_MS }, () => {
  let source: airlock.Sandbox;
  const name = `${RUN}-snap`;
  let unnamed = "";

  before(async () => {
    source = await Sandbox.create(opts({ timeoutMs: 1_800_000, metadata: { run: RUN, role: "snapshot-source" } }));
  });

  after(async () => {
    await source.kill().catch(() => undefined);
    for (const snapshot of [name, unnamed]) {
      if (snapshot !== "") {
        await Sandbox.deleteSnapshot(snapshot, opts()).catch(() => undefined);
      }
    }
  });

  test("a snapshot keeps a file and a Python variable for its clones", async () => {
    await source.files.write("/root/snapped.txt", "saved in the snapshot");
    await source.runCode("kept = 6 * 7");
    const info = await source.createSnapshot({ name });
    assert.equal(info.snapshotId, name);
    assert.deepEqual(info.names, [name]);
    assert.equal(info.sourceSandboxId, source.sandboxId);
    assert.equal(info.contentId.length, 64);
    assert.ok(info.sizeBytes > 0 && info.createdAt instanceof Date);
    assert.equal(info.memoryMB, (await source.getInfo()).memoryMB);
    // E2B's form (the snapshot's id where a template goes), then Airlock's.
    for (const start of [() => Sandbox.create(info.snapshotId, opts()), () => Sandbox.create(opts({ snapshot: name }))]) {
      const clone = await start();
      try {
        assert.notEqual(clone.sandboxId, source.sandboxId);
        assert.equal(await clone.files.read("/root/snapped.txt"), "saved in the snapshot");
        assert.equal((await clone.runCode("kept")).text, "42");
        assert.equal((await Sandbox.getSnapshot(name, opts())).sandboxes, 1);
      } finally {
        await clone.kill();
      }
    }
    assert.equal((await source.runCode("kept")).text, "42"); // the source runs on
  });

  test("a taken name is refused, and E2B's filesystem-only mode", async () => {
    await assert.rejects(source.createSnapshot({ name }), (e) => {
      assert.ok(e instanceof AlreadyExistsError);
      assert.equal(e.reason, "ALREADY_EXISTS");
      return true;
    });
    await assert.rejects(
      Sandbox.createSnapshot(source.sandboxId, { ...opts(), mode: "filesystem" }),
      (e) => e instanceof InvalidArgumentError && e.field === "mode" && /memory/.test(e.message),
    );
  });

  test("snapshots are listed as E2B's paginator, whole and in pages", async () => {
    unnamed = (await Sandbox.createSnapshot(source.sandboxId, opts())).snapshotId;
    assert.match(unnamed, /^snapshot-[0-9a-f]{16}$/);
    const mine = (await all(source.listSnapshots())).map((s) => s.snapshotId).sort();
    assert.deepEqual(mine, [name, unnamed].sort());
    assert.deepEqual((await all(Sandbox.listSnapshots(opts({ sandboxId: source.sandboxId })))).map((s) => s.snapshotId).sort(), mine);
    assert.deepEqual((await all(Sandbox.listSnapshots(opts({ name })))).map((s) => s.snapshotId), [name]);
    const pages = Sandbox.listSnapshots(opts({ sandboxId: source.sandboxId, limit: 1 }));
    const first = await pages.nextItems();
    assert.equal(first.length, 1);
    assert.equal(pages.hasNext, true);
    assert.equal(pages.nextToken, "1");
    const second = await pages.nextItems();
    assert.equal(second.length, 1);
    assert.notEqual(first[0].snapshotId, second[0].snapshotId);
    assert.equal(pages.hasNext, false);
  });

  test("another key's snapshot does not exist for it", async () => {
    const host = entry === "web" ? need("AIRLOCK_TEST_HOST") : need("AIRLOCK_HOST");
    const theirs = { ...opts(), host, apiKey: need("AIRLOCK_TEST_LIMITED_KEY") };
    await assert.rejects(Sandbox.getSnapshot(name, theirs), (e) => e instanceof NotFoundError && e.reason === "NOT_FOUND");
    await assert.rejects(Sandbox.create({ ...theirs, snapshot: name }), (e) => e instanceof NotFoundError);
    assert.equal(await Sandbox.deleteSnapshot(name, theirs), false);
    assert.deepEqual(await all(Sandbox.listSnapshots(theirs)), []);
    await assert.rejects(Sandbox.createSnapshot(source.sandboxId, { ...theirs, name: "theirs" }), (e) => e instanceof SandboxNotFoundError);
  });

  test("deleting a snapshot frees its name; a create naming neither template nor snapshot says so", async () => {
    for (const snapshot of [name, unnamed]) {
      assert.equal(await Sandbox.deleteSnapshot(snapshot, opts()), true);
      assert.equal(await Sandbox.deleteSnapshot(snapshot, opts()), false);
    }
    assert.deepEqual(await all(source.listSnapshots()), []);
    await assert.rejects(Sandbox.getSnapshot(name, opts()), (e) => e instanceof NotFoundError && e.reason === "NOT_FOUND");
    await assert.rejects(Sandbox.create(name, opts()), (e) => e instanceof NotFoundError && /nor is there a snapshot/.test(e.message));
  });
});
