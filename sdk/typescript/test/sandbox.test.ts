// Sandboxes' lifecycle through the SDK, on two busybox sandboxes the checks
// share (in order): create with labels, envs, size and timeout; getInfo;
// list by labels and states, whole and in pages; setTimeout; getMetrics;
// pause and resume (and a command resuming it); connect by id (resuming a
// paused one); fork with the parent's files; kill; and the errors a user
// meets, each its own class with the server's reason.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type * as airlock from "airlock-sdk";

import { LIMIT_MS, RUN, entry, listAll, need, opts, sdk, smallSandbox } from "./helpers.js";

const { Sandbox, NotFoundError, InvalidArgumentError, AuthenticationError, RateLimitError, SandboxError } = sdk;

/** Milliseconds until the sandbox ends (it has an end). */
function endsIn(info: airlock.SandboxInfo): number {
  assert.ok(info.endAt instanceof Date, "the sandbox has an end");
  return info.endAt.getTime() - Date.now();
}

describe(`sandboxes (${entry})`, { timeout: LIMIT_MS }, () => {
  let main: airlock.Sandbox;
  let other: airlock.Sandbox;
  const created: airlock.Sandbox[] = [];

  before(async () => {
    main = await smallSandbox({
      memoryMb: 256,
      metadata: { run: RUN, role: "main" },
      envs: { GREETING: "hello from the sandbox's environment" },
      timeoutMs: 600_000,
    });
    other = await smallSandbox({ metadata: { run: RUN, role: "other" } });
    created.push(main, other);
  });

  after(async () => {
    for (const sandbox of created) {
      await sandbox.kill().catch(() => undefined);
    }
  });

  test("create answers a running sandbox with its labels, environment, size and end", async () => {
    const info = await main.getInfo();
    assert.equal(info.sandboxId, main.sandboxId);
    assert.equal(info.state, "running");
    assert.deepEqual(info.metadata, { run: RUN, role: "main" });
    assert.equal(info.memoryMB, 256);
    assert.equal(info.cpuCount, 1);
    assert.equal(info.image, "");
    assert.deepEqual(info.envNames, ["GREETING"]);
    assert.ok(info.startedAt instanceof Date && Date.now() - info.startedAt.getTime() < 600_000);
    assert.ok(info.endAt instanceof Date);
    const left = info.endAt.getTime() - Date.now();
    assert.ok(left > 400_000 && left <= 600_000, `ends in ${left} ms`);
    const { stdout } = await main.commands.run("echo $GREETING; hostname");
    assert.equal(stdout, `hello from the sandbox's environment\n${main.sandboxId}\n`);
  });

  test("list filters by labels and states; iterated it gives all, nextItems pages", async () => {
    const mine = await listAll(Sandbox.list(opts({ metadata: { run: RUN } })));
    assert.deepEqual(mine.map((s) => s.sandboxId).sort(), [main.sandboxId, other.sandboxId].sort());
    const one = await listAll(Sandbox.list(opts({ query: { metadata: { run: RUN, role: "main" } } })));
    assert.deepEqual(one.map((s) => s.sandboxId), [main.sandboxId]);
    assert.deepEqual(await listAll(Sandbox.list(opts({ metadata: { run: RUN }, state: "paused" }))), []);
    const running = await listAll(Sandbox.list(opts({ metadata: { run: RUN }, state: ["running", "paused"] })));
    assert.equal(running.length, 2);

    const pages = Sandbox.list(opts({ metadata: { run: RUN }, limit: 1 }));
    const first = await pages.nextItems();
    assert.equal(first.length, 1);
    assert.equal(pages.hasNext, true);
    const second = await pages.nextItems();
    assert.equal(second.length, 1);
    assert.notEqual(first[0].sandboxId, second[0].sandboxId);
    assert.equal(pages.hasNext, false);
  });

  test("setTimeout moves the sandbox's end", async () => {
    await main.setTimeout(120_000);
    const left = endsIn(await main.getInfo());
    assert.ok(left > 60_000 && left <= 121_000, `ends in ${left} ms`);
    await Sandbox.setTimeout(main.sandboxId, 900_000, opts());
    const later = endsIn(await Sandbox.getInfo(main.sandboxId, opts()));
    assert.ok(later > 800_000 && later <= 901_000, `ends in ${later} ms`);
  });

  test("getMetrics reads the guest's memory and the sandbox's usage", async () => {
    const [metrics] = await main.getMetrics();
    assert.ok(metrics.memTotal > 100 * 2 ** 20 && metrics.memTotal <= 256 * 2 ** 20, `${metrics.memTotal}`);
    assert.ok(metrics.memUsed > 0 && metrics.memUsed < metrics.memTotal);
    assert.ok(Math.abs(Date.now() - metrics.timestamp.getTime()) < 60_000);
    assert.ok(metrics.usage.wallMs > 0);
  });

  test("pause stops it, a command resumes it, and resume starts it", async () => {
    assert.equal((await main.pause()).state, "paused");
    assert.equal((await main.getInfo()).state, "paused");
    assert.equal(await main.isRunning(), false);
    const { stdout } = await main.commands.run("echo back");
    assert.equal(stdout, "back\n");
    assert.equal((await main.getInfo()).state, "running");
    await main.pause();
    assert.equal((await main.resume()).state, "running");
    assert.equal(await main.isRunning(), true);
  });

  test("connect finds a sandbox by id and resumes a paused one", async () => {
    await other.pause();
    const again = await Sandbox.connect(other.sandboxId, opts());
    assert.equal(again.sandboxId, other.sandboxId);
    assert.equal((await again.getInfo()).state, "running");
    assert.equal((await again.commands.run("hostname")).stdout, `${other.sandboxId}\n`);
  });

  test("fork gives new sandboxes with the parent's files and their own names", async () => {
    await main.files.write("/root/marker", "written before the fork");
    const [child] = await main.fork(1);
    created.push(child);
    assert.notEqual(child.sandboxId, main.sandboxId);
    assert.equal(await child.files.read("/root/marker"), "written before the fork");
    assert.equal((await child.commands.run("hostname")).stdout, `${child.sandboxId}\n`);
    assert.equal((await child.getInfo()).origin, "fork");
    assert.deepEqual((await child.getInfo()).metadata, { run: RUN, role: "main" });
    await child.kill();
    assert.equal(await Sandbox.kill(child.sandboxId, opts()), false);
  });

  test("kill ends a sandbox: it is gone for its key", async () => {
    assert.equal(await Sandbox.kill(other.sandboxId, opts()), true);
    await assert.rejects(other.commands.run("true"), (e) => e instanceof NotFoundError);
    assert.equal(await other.isRunning(), false);
    const mine = await listAll(Sandbox.list(opts({ metadata: { run: RUN }, state: "running" })));
    assert.deepEqual(mine.map((s) => s.sandboxId), [main.sandboxId]);
  });

  test("errors are one hierarchy, by the server's reason", async () => {
    await assert.rejects(Sandbox.connect("sandbox-nobody", opts()), (e) => {
      assert.ok(e instanceof NotFoundError && e instanceof SandboxError && e instanceof Error);
      assert.equal(e.reason, "SANDBOX_NOT_FOUND");
      assert.equal(e.code, "NOT_FOUND");
      assert.match(e.message, /sandbox-nobody/);
      return true;
    });
    await assert.rejects(Sandbox.create(opts({ noImage: true, memoryMb: 1 })), (e) => {
      assert.ok(e instanceof InvalidArgumentError);
      assert.equal(e.field, "memory_mib");
      assert.match(e.message, /64 to 65536/);
      return true;
    });
    await assert.rejects(main.files.read("/no/such/file"), (e) => e instanceof NotFoundError && e.reason === "GUEST_NOT_FOUND");
    await assert.rejects(
      main.network.rules(),
      (e) => e instanceof SandboxError && e.constructor === SandboxError && e.reason === "NO_NETWORK",
    );
  });

  test("a wrong key is an AuthenticationError; a key's quota a RateLimitError", async () => {
    const host = entry === "web" ? need("AIRLOCK_TEST_HOST") : need("AIRLOCK_HOST");
    // A paginator is a thenable; Promise.resolve awaits it as assert.rejects would.
    await assert.rejects(Sandbox.list({ ...opts(), host, apiKey: `ak_${"A".repeat(43)}` }).nextItems(), (e) => {
      assert.ok(e instanceof AuthenticationError);
      assert.equal(e.reason, "UNAUTHENTICATED");
      assert.match(e.message, /airlock key create/);
      return true;
    });
    // The limited key may hold 64 MiB of guest memory: no sandbox fits.
    const limited = { ...opts(), host, apiKey: need("AIRLOCK_TEST_LIMITED_KEY") };
    await assert.rejects(Sandbox.create({ ...limited, noImage: true, memoryMb: 256 }), (e) => {
      assert.ok(e instanceof RateLimitError);
      assert.equal(e.reason, "QUOTA_EXCEEDED");
      return true;
    });
  });
});
