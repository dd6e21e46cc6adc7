// A background server in a sandbox, as E2B's docs start one: a page
// written, `python3 -m http.server` in the background, the sandbox's host
// for the port (a string, used in a URL), the page fetched from inside the
// sandbox (by localhost, which the default image's /etc/hosts names), the
// server killed, and a second kill answering false. Written against `e2b`;
// the suite runs it with the import changed only (and fetches the server
// from outside through the ingress the documented way, `expose(port)`).

import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";

import { Sandbox } from "e2b";

const sandbox = await Sandbox.create();
try {
  await sandbox.files.write("site/index.html", "<h1>hello from the sandbox</h1>");
  const server = await sandbox.commands.run("cd ~/site && python3 -m http.server 8000", { background: true });
  const url = `https://${sandbox.getHost(8000)}`;
  assert.match(url, /^https:\/\/8000-/);
  const fetchInside = `python3 -c "import urllib.request; print(urllib.request.urlopen('http://localhost:8000/').read().decode())"`;
  let page;
  for (let i = 0; i < 100 && page === undefined; i++) {
    page = await sandbox.commands.run(fetchInside).catch(() => undefined);
    if (page === undefined) {
      await sleep(200);
    }
  }
  assert.equal(page?.stdout, "<h1>hello from the sandbox</h1>\n");
  assert.ok((await sandbox.commands.list()).some((p) => p.pid === server.pid));
  assert.equal(await server.kill(), true);
  await server.wait().catch(() => undefined);
  assert.equal(await server.kill(), false);
  console.log(`served at ${url}`);
} finally {
  await sandbox.kill();
}
console.log("ok");
