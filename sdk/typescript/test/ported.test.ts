// Programs written against E2B's JS SDKs (test/ported/: an agent's code
// executor with package installs, a LangChain.js-style tool, a chart, a
// background server) run against Airlock with their import changed and
// nothing else, each in a Node process of its own with this pass's
// environment; then the background server fetched from here through the
// ingress, the way the README documents for code outside the sandbox.
//
// The executor and the chart need what E2B's code interpreter image has
// (pip, numpy, matplotlib): they run with AIRLOCK_IMAGE naming such an
// image (AIRLOCK_TEST_E2B_IMAGE, default test-matplotlib), as a user would
// set it; the others run on the server's default image.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { describe, test } from "node:test";

import { LIMIT_MS, entry, need, sdk } from "./helpers.js";

const { Sandbox } = sdk;

const compiled = dirname(fileURLToPath(import.meta.url));
const sources = join(compiled, "..", "test", "ported");
const E2B_IMAGE = process.env.AIRLOCK_TEST_E2B_IMAGE ?? "test-matplotlib";
const IMPORT = /^import \{([^}]*)\} from "(e2b|@e2b\/code-interpreter)";$/gm;

/** The program with its import changed, and only that, written where it resolves airlock-sdk. */
function ported(name: string): string {
  const source = readFileSync(join(sources, name), "utf8");
  const changed = source.replace(IMPORT, 'import {$1} from "airlock-sdk";');
  const before = source.split("\n");
  const after = changed.split("\n");
  const differing = after.filter((line, i) => line !== before[i]);
  assert.ok(differing.length > 0 && differing.every((line) => line.endsWith('from "airlock-sdk";')), differing.join("\n"));
  const dir = join(compiled, "ported");
  mkdirSync(dir, { recursive: true });
  const path = join(dir, name);
  writeFileSync(path, changed);
  return path;
}

async function run(name: string, image = "", ...args: string[]): Promise<string> {
  const env = { ...process.env };
  delete env.AIRLOCK_IMAGE;
  if (image !== "") {
    env.AIRLOCK_IMAGE = image;
  }
  return await new Promise((resolve, reject) => {
    execFile(process.execPath, [ported(name), ...args], { env, timeout: 240_000 }, (error, stdout, stderr) => {
      if (error !== null) {
        reject(new Error(`${name} failed: ${error.message}\n${stdout}\n${stderr}`));
      } else {
        resolve(stdout);
      }
    });
  });
}

/** The store's images, to fail with what to do when the E2B image is missing. */
async function needE2BImage(): Promise<void> {
  const listed = await new Promise<string>((resolve, reject) => {
    execFile(need("AIRLOCK_TEST_BIN"), ["image", "ls"], { env: { ...process.env, AIRLOCK_STATE_DIR: need("AIRLOCK_TEST_STATE") } }, (error, stdout) =>
      error === null ? resolve(stdout) : reject(error),
    );
  });
  assert.ok(
    listed.includes(E2B_IMAGE),
    `no image ${E2B_IMAGE} (pip, numpy, matplotlib: E2B's code interpreter image) in the store; the tests crate builds it on first use ('cargo test -p airlock-tests --test matplotlib', the default image's packages plus matplotlib), or name another with AIRLOCK_TEST_E2B_IMAGE:\n${listed}`,
  );
}

describe(`E2B programs, import changed only (${entry})`, { timeout: LIMIT_MS }, () => {
  test("an agent's code executor with package installs", async () => {
    await needE2BImage();
    assert.match(await run("agent-executor.mjs", E2B_IMAGE), /ok\n$/);
  });

  test("a LangChain.js-style tool", async () => {
    assert.match(await run("langchain-tool.mjs"), /ok\n$/);
  });

  test("a chart", async () => {
    await needE2BImage();
    const png = join(compiled, "ported", "chart.png");
    assert.match(await run("chart.mjs", E2B_IMAGE, png), /ok\n$/);
    assert.deepEqual([...readFileSync(png).subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
  });

  test("a background server", async () => {
    assert.match(await run("web-server.mjs"), /served at https:\/\/8000-sandbox-[0-9a-f]+\.airlock\.localhost/);
  });

  test("the background server fetched from here through the ingress, the documented way", async () => {
    const sbx = await Sandbox.create();
    try {
      await sbx.files.write("site/index.html", "<h1>through the ingress</h1>");
      await sbx.commands.run("cd ~/site && python3 -m http.server 8000", { background: true });
      const web = await sbx.expose(8000);
      assert.equal(web.host, sbx.getHost(8000));
      let answer: Response | undefined;
      for (let i = 0; i < 300; i++) {
        answer = await fetch(`${web.pathUrl}index.html`, { headers: { "X-Airlock-Token": web.token } });
        if (answer.status !== 502) {
          break;
        }
        await sleep(200);
      }
      assert.equal(answer?.status, 200);
      assert.equal(await answer?.text(), "<h1>through the ingress</h1>");
      assert.equal((await fetch(`${web.pathUrl}index.html`)).status, 401);
    } finally {
      await sbx.kill();
    }
  });
});
