// The server's usage ledger through the SDK (`Usage.query`): a sandbox of
// this run's key that ran, paused and was killed has its row, with its
// running and paused time and the products that follow; the key's and the
// day's rows sum it; a period after it has nothing; another key's usage
// and an unknown grouping are refused.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import type * as airlock from "airlock-sdk";

import { LIMIT_MS, entry, opts, sdk, smallSandbox } from "./helpers.js";

const { Usage, SandboxError, InvalidArgumentError } = sdk;

describe(`usage (${entry})`, { timeout: LIMIT_MS }, () => {
  test("a killed sandbox's running and paused time are in the ledger, by sandbox, key and day", async () => {
    const sandbox = await smallSandbox();
    await sandbox.commands.run("sleep 1");
    assert.equal(await sandbox.betaPause(), true);
    await sleep(1000);
    await sandbox.connect();
    await sandbox.kill();
    const rows = await Usage.query(opts());
    const row = rows.find((r: airlock.UsageRow) => r.sandboxId === sandbox.sandboxId);
    assert.ok(row !== undefined, `no row of ${sandbox.sandboxId}`);
    assert.ok(row.runningMs >= 1000 && row.pausedMs >= 900 && row.onDiskMs === 0, JSON.stringify(row));
    assert.equal(row.vcpuMs, row.cpuCount * row.runningMs);
    assert.equal(row.vcpuSeconds, row.vcpuMs / 1000);
    assert.equal(row.memoryMibMs, row.memoryMB * (row.runningMs + row.pausedMs));
    assert.equal(row.memoryGiBSeconds, row.memoryMibMs / 1024 / 1000);
    assert.ok(row.createdAt instanceof Date && row.endedAt instanceof Date);
    const [mine] = await Usage.query({ ...opts(), by: "key" });
    assert.ok(mine !== undefined && mine.key === row.key && mine.runningMs >= row.runningMs, JSON.stringify(mine));
    const days = await Usage.query({ ...opts(), by: "day", since: new Date(Date.now() - 86_400_000) });
    assert.ok(days.some((day) => day.day === new Date().toISOString().slice(0, 10)), JSON.stringify(days));
    const later = await Usage.query({ ...opts(), since: new Date(Date.now() + 7_200_000) });
    assert.deepEqual(later, []);
  });

  test("another key's usage and an unknown grouping are refused", async () => {
    await assert.rejects(
      Usage.query({ ...opts(), key: "someone-else" }),
      (e) => e instanceof SandboxError && e.reason === "OWNER_ONLY" && e.code === "PERMISSION_DENIED",
    );
    await assert.rejects(
      Usage.query({ ...opts(), by: "week" } as unknown as airlock.UsageQueryOpts),
      (e) => e instanceof InvalidArgumentError && e.field === "by",
    );
  });
});
