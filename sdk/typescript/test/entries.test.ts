// Both entry points in one process (the web pass, whose environment trusts
// the test CA for fetch): Node's Sandbox (gRPC over HTTP/2, given the CA)
// and the web's (gRPC-Web over fetch) each reach the server with their own
// transport, share one error hierarchy, and see the same sandbox.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import { LIMIT_MS, RUN, listAll, need } from "./helpers.js";

describe("both entry points in one process", { timeout: LIMIT_MS }, () => {
  test("Node's and the web's Sandbox each use their own transport", async () => {
    const node = await import("airlock-sdk");
    const web = await import("airlock-sdk/web");
    assert.notEqual(node.Sandbox, web.Sandbox);
    assert.equal(node.NotFoundError, web.NotFoundError, "one error hierarchy");
    const server = { host: need("AIRLOCK_TEST_HOST"), apiKey: need("AIRLOCK_TEST_KEY") };
    const made = await web.Sandbox.create({ ...server, noImage: true, timeoutMs: 600_000, metadata: { run: `${RUN}-both` } });
    try {
      const seen = await node.Sandbox.connect(made.sandboxId, { ...server, caCert: readFileSync(need("AIRLOCK_TEST_CA"), "utf8") });
      assert.equal((await seen.commands.run("hostname")).stdout, `${made.sandboxId}\n`);
      assert.equal(seen.connectionOpts.host, server.host);
      const listed = await listAll(web.Sandbox.list({ ...server, metadata: { run: `${RUN}-both` } }));
      assert.deepEqual(
        listed.map((s) => s.sandboxId),
        [made.sandboxId],
      );
    } finally {
      await made.kill();
    }
  });
});
