// The browser example (examples/browser) in headless Chromium against the
// test server's TLS listener: the page, served on the origin the server
// allows (--cors-origin), creates a sandbox with gRPC-Web from the SDK's
// browser build, streams a command's output in more than one piece, writes
// a file from a Blob and reads it back, reads an error's reason from the
// server's headers (CORS exposes them), and kills the sandbox.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import { runHeadless } from "../examples/browser/headless.mjs";
import { LIMIT_MS, need } from "./helpers.js";

describe("the browser example (headless Chromium)", { timeout: LIMIT_MS }, () => {
  test("a page creates a sandbox, streams a command, writes and reads a file, kills it", async () => {
    const outcome = await runHeadless({
      host: need("AIRLOCK_TEST_HOST"),
      apiKey: need("AIRLOCK_TEST_KEY"),
      ca: readFileSync(need("AIRLOCK_TEST_CA"), "utf8"),
      port: Number(need("AIRLOCK_TEST_PAGE_PORT")),
      chromium: need("CHROMIUM"),
    });
    assert.equal(outcome.ok, true, JSON.stringify(outcome));
    assert.match(outcome.stdout, new RegExp(`^hello from ${outcome.sandboxId}\\nthe kernel is \\S+\\n$`));
    assert.ok(outcome.chunks >= 2, `output in ${outcome.chunks} piece(s)`);
    assert.match(outcome.file, /^written by Mozilla\/5\.0$/);
    assert.equal(outcome.missing, "SandboxNotFoundError SANDBOX_NOT_FOUND"); // a NotFoundError, by E2B's name
  });
});
