// Node only: with no AIRLOCK_HOST the SDK reaches the local server on its
// Unix socket (calls are the machine owner's, who sees every key's
// sandboxes); with nobody on the socket it starts `airlock serve` itself
// (with `--ingress local`), found through AIRLOCK_BIN, and says what to do
// when it cannot; the CommonJS build works from `require`.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";

import type * as airlock from "airlock-sdk";

import { LIMIT_MS, RUN, listAll, need, opts, sdk, smallSandbox, eventually } from "./helpers.js";

const { Sandbox, SandboxError } = sdk;

/** The pids of processes whose command line mentions `text`. */
function processesMentioning(text: string): number[] {
  try {
    return execFileSync("pgrep", ["-f", text], { encoding: "utf8" }).split("\n").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

describe("the local server (node)", { timeout: LIMIT_MS }, () => {
  const dirs: string[] = [];

  after(() => {
    for (const dir of dirs) {
      for (const pid of processesMentioning(dir)) {
        try {
          process.kill(pid, "SIGTERM");
        } catch {
          // gone already
        }
      }
    }
  });

  test("with no host, calls go to the Unix socket as the owner", async () => {
    const keyed = await smallSandbox();
    try {
      const socket = join(need("AIRLOCK_TEST_STATE"), "daemon.sock");
      const owner = await listAll(Sandbox.list({ socket, metadata: { run: RUN } }));
      const mine = owner.find((s) => s.sandboxId === keyed.sandboxId);
      assert.ok(mine, "the owner sees the key's sandbox");
      assert.equal(mine.owner, "sdk-test");
      const same = await Sandbox.connect(keyed.sandboxId, { socket });
      assert.equal((await same.commands.run("hostname")).stdout, `${keyed.sandboxId}\n`);
    } finally {
      await keyed.kill();
    }
  });

  test("with nobody on the socket, the SDK starts the local server", async () => {
    const dir = mkdtempSync(join(tmpdir(), "airlock-sdk-local-"));
    dirs.push(dir);
    const names = ["AIRLOCK_HOST", "AIRLOCK_STATE_DIR", "AIRLOCK_SERVER_DIR", "AIRLOCK_SAVED_DIR", "AIRLOCK_BIN"];
    const saved = Object.fromEntries(names.map((name) => [name, process.env[name]]));
    try {
      delete process.env.AIRLOCK_HOST;
      process.env.AIRLOCK_STATE_DIR = dir;
      process.env.AIRLOCK_SERVER_DIR = join(dir, "server");
      process.env.AIRLOCK_SAVED_DIR = join(dir, "saved");
      process.env.AIRLOCK_BIN = need("AIRLOCK_TEST_BIN");
      assert.deepEqual(await listAll(Sandbox.list()), []);
      assert.ok(processesMentioning(join(dir, "daemon.sock")).length > 0, "a server runs on the new socket");
      const log = readFileSync(join(dir, "daemon.log"), "utf8");
      assert.match(log, /serving on the Unix socket/);
      // As the CLI starts it: with HTTP ingress on a loopback port of its own.
      assert.match(log, /^airlock: ingress on 127\.0\.0\.1:\d+$/m);

      process.env.AIRLOCK_STATE_DIR = join(dir, "other");
      process.env.AIRLOCK_BIN = join(dir, "no-such-airlock");
      // A paginator is a thenable; Promise.resolve awaits it as assert.rejects would.
      await assert.rejects(Sandbox.list().nextItems(), (e) => {
        assert.ok(e instanceof SandboxError);
        assert.match(e.message, /cannot start the local server with .*no-such-airlock/);
        assert.match(e.message, /AIRLOCK_BIN/);
        return true;
      });
    } finally {
      for (const [name, value] of Object.entries(saved)) {
        if (value === undefined) {
          delete process.env[name];
        } else {
          process.env[name] = value;
        }
      }
    }
    for (const pid of processesMentioning(join(dir, "daemon.sock"))) {
      process.kill(pid, "SIGTERM");
    }
    assert.ok(await eventually(() => processesMentioning(join(dir, "daemon.sock")).length === 0, 20_000));
    rmSync(dir, { recursive: true, force: true });
  });

  test("the CommonJS build answers require()", async () => {
    const require = createRequire(import.meta.url);
    const cjs = require("airlock-sdk") as typeof airlock;
    assert.equal(typeof cjs.Sandbox.create, "function");
    assert.notEqual(cjs.Sandbox, Sandbox, "a module of its own");
    assert.equal(cjs.Sandbox.platform.name, "node");
    assert.equal(cjs.default, cjs.Sandbox);
    const listed = await listAll(cjs.Sandbox.list(opts({ metadata: { run: `${RUN}-none` } })));
    assert.deepEqual(listed, []);
    const error: unknown = await cjs.Sandbox.connect("sandbox-nobody").catch((e: unknown) => e);
    assert.ok(error instanceof cjs.NotFoundError);
  });
});
