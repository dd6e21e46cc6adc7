// Ingress through the SDK, on the suite's server (run.mjs serves it with
// `--ingress 127.0.0.1:0`): `python3 -m http.server` in a sandbox of the
// default image, reached with Node's http module at the ingress's address
// with the Host header and the token, and by the path form, each answering
// the exact bytes of a file written in the sandbox; 401 without the token;
// a rotated token refusing the old one; a busybox sandbox created with
// `publicPorts` answering without a token and listing the port; the
// ingress decisions in the audit of a sandbox without network; ports
// refused before any call; and a server without ingress, whose refusal
// says how to serve it.

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { type IncomingHttpHeaders, type OutgoingHttpHeaders, request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";

import type * as airlock from "airlock-sdk";

import { LIMIT_MS, RUN, entry, eventually, need, opts, sdk, smallSandbox } from "./helpers.js";

const { Sandbox, SandboxError, InvalidArgumentError } = sdk;

/** The file the guest's server serves: binary, so that any change to a byte shows. */
const BLOB = randomBytes(1 << 20);
const PUBLIC_PAGE = `a public page of ${RUN}\n`;

/** What `get` answers. */
interface Answer {
  status: number | undefined;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/**
 * A GET with Node's http module, on a connection of its own (no keep-alive:
 * a rotated token is refused from the next connection on): its status,
 * headers and body.
 */
function get(url: string, { host, token }: { host?: string; token?: string } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: OutgoingHttpHeaders = {};
    if (host !== undefined) {
      headers.host = host;
    }
    if (token !== undefined) {
      headers["x-airlock-token"] = token;
    }
    const req = request(url, { headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk) => chunks.push(chunk));
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

/**
 * `airlock serve` without ingress, on a private state and a plain loopback
 * listener (both entries may speak to it: plain http to loopback is
 * allowed), with a key of its own; `stop()` ends it and removes its files.
 */
async function serverWithoutIngress(): Promise<{ opts: airlock.ConnectionOpts; stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), "airlock-sdk-no-ingress-"));
  const socket = join(dir, "daemon.sock");
  const env = {
    ...process.env,
    AIRLOCK_STATE_DIR: dir,
    AIRLOCK_SAVED_DIR: join(dir, "saved"),
    AIRLOCK_SERVER_DIR: join(dir, "server"),
  };
  const bin = need("AIRLOCK_TEST_BIN");
  const child = spawn(
    bin,
    ["--verbose", "serve", "--socket", socket, "--listen", "127.0.0.1:0", "--insecure", "--on-exit", "kill"],
    { env, stdio: ["ignore", "ignore", "pipe"] },
  );
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  const lines: string[] = [];
  const port = await new Promise<number>((resolve, reject) => {
    createInterface({ input: child.stderr }).on("line", (line) => {
      lines.push(line);
      const match = /^airlock: listening on .*:(\d+)$/.exec(line);
      if (match) {
        resolve(Number(match[1]));
      }
    });
    exited.then((code) => reject(new Error(`airlock serve exited (${code}) before listening:\n${lines.join("\n")}`)));
  });
  const out = execFileSync(bin, ["key", "create", "sdk-no-ingress", "--socket", socket], {
    env,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
  const apiKey = (out.trim().split("\n").at(-1) ?? "").trim();
  return {
    opts: { host: `http://127.0.0.1:${port}`, apiKey },
    async stop() {
      child.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

describe(`ingress (${entry})`, { timeout: LIMIT_MS }, () => {
  const address = need("AIRLOCK_TEST_INGRESS");
  let site: airlock.Sandbox;
  let open: airlock.Sandbox;
  let exposed: airlock.ExposedPort;

  before(async () => {
    [site, open] = await Promise.all([
      Sandbox.create(opts({ timeoutMs: 1_800_000, metadata: { run: RUN, role: "site" } })),
      smallSandbox({ publicPorts: [8000], metadata: { run: RUN, role: "public" } }),
    ]);
    await site.files.write("/srv/site/blob.bin", BLOB);
    await site.commands.run("python3 -m http.server 8000 --directory /srv/site", { background: true });
    exposed = await site.expose(8000);
    // The server is up once the ingress stops answering 502 (nothing listens).
    const listening = async () => (await get(`${exposed.pathUrl}blob.bin`, { token: exposed.token })).status !== 502;
    const up = await eventually(listening, 120_000);
    assert.ok(up, "python3 -m http.server listened on guest port 8000 within 120 s");
  });

  after(async () => {
    await Promise.all([site?.kill().catch(() => undefined), open?.kill().catch(() => undefined)]);
  });

  test("getHost answers at once (a string, as E2B's); expose answers the host, token, URLs and the ingress's address", async () => {
    const id = site.sandboxId;
    const host = `8000-${id.toLowerCase()}.airlock.localhost:${address.split(":").at(-1)}`;
    assert.equal(site.getHost(8000), host);
    assert.equal(`http://${site.getHost(3000)}/`, `http://${host.replace(/^8000-/, "3000-")}/`);
    assert.equal(exposed.port, 8000);
    assert.equal(exposed.host, host);
    assert.equal(exposed.address, address);
    assert.equal(exposed.public, false);
    assert.match(exposed.token, /^at_[A-Za-z0-9_-]{20,}$/);
    assert.equal(exposed.url, `http://${host}/?airlock_token=${exposed.token}`);
    assert.equal(exposed.pathUrl, `http://${address}/_sandbox/${id}/8000/`);
    // Another port of the same sandbox: its own host, the same token.
    const other = await site.expose(3000);
    assert.equal(other.host, `3000-${id.toLowerCase()}.airlock.localhost:${address.split(":").at(-1)}`);
    assert.equal(other.token, exposed.token);
  });

  test("at the ingress's address with Host and X-Airlock-Token, and by the path form: the file's exact bytes", async () => {
    const byHost = await get(`http://${exposed.address}/blob.bin`, { host: exposed.host, token: exposed.token });
    assert.equal(byHost.status, 200);
    assert.equal(byHost.body.length, BLOB.length);
    assert.ok(byHost.body.equals(BLOB), "the body is the file's bytes");
    const byPath = await get(`${exposed.pathUrl}blob.bin`, { token: exposed.token });
    assert.equal(byPath.status, 200);
    assert.ok(byPath.body.equals(BLOB), "the body is the file's bytes");
  });

  test("without the token: 401 naming the sandbox and port", async () => {
    for (const answer of [
      await get(`http://${exposed.address}/blob.bin`, { host: exposed.host }),
      await get(`${exposed.pathUrl}blob.bin`),
    ]) {
      assert.equal(answer.status, 401);
      const text = answer.body.toString("utf8");
      assert.match(text, new RegExp(`sandbox ${site.sandboxId} port 8000`));
      assert.match(text, /X-Airlock-Token/);
    }
  });

  test("rotateTrafficToken: the old token is refused, the new one answers, expose gives the new", async () => {
    const old = exposed.token;
    const token = await site.rotateTrafficToken();
    assert.match(token, /^at_/);
    assert.notEqual(token, old);
    assert.equal((await get(`${exposed.pathUrl}blob.bin`, { token: old })).status, 401);
    const answer = await get(`http://${exposed.address}/blob.bin`, { host: exposed.host, token });
    assert.equal(answer.status, 200);
    assert.ok(answer.body.equals(BLOB));
    exposed = await site.expose(8000);
    assert.equal(exposed.token, token);
    assert.equal(exposed.url, `http://${exposed.host}/?airlock_token=${token}`);
  });

  test("a port made public at create answers without a token, and the sandbox's info lists it", async () => {
    await open.files.write("/srv/public/index.html", PUBLIC_PAGE);
    // busybox httpd puts itself in the background.
    await open.commands.run("httpd -p 8000 -h /srv/public");
    const port = await open.expose(8000);
    assert.equal(port.public, true);
    assert.equal(port.token, "");
    assert.equal(port.url, `http://${port.host}/`);
    assert.ok(await eventually(async () => (await get(port.pathUrl)).status !== 502, 60_000), "httpd listens");
    const answer = await get(`${port.pathUrl}index.html`);
    assert.equal(answer.status, 200);
    assert.equal(answer.body.toString("utf8"), PUBLIC_PAGE);
    const byHost = await get(`http://${port.address}/index.html`, { host: port.host });
    assert.equal(byHost.status, 200);
    assert.equal(byHost.body.toString("utf8"), PUBLIC_PAGE);
    assert.deepEqual((await open.getInfo()).publicPorts, [8000]);
    assert.deepEqual((await site.getInfo()).publicPorts, []);
    // Another port of the public sandbox still needs its token.
    const privatePort = await open.expose(8001);
    assert.equal(privatePort.public, false);
    assert.match(privatePort.token, /^at_/);
    assert.equal((await get(`${privatePort.pathUrl}`)).status, 401);
  });

  test("the audit of a sandbox without network holds its ingress decisions", async () => {
    assert.equal((await site.getInfo()).network, false);
    const records = await site.network.audit();
    assert.ok(records.length > 0);
    for (const record of records) {
      assert.equal(record.protocol, "ingress");
      assert.match(record.name, /^from 127\.0\.0\.1/);
      assert.equal(record.port, 8000);
    }
    assert.ok(records.some((r) => r.allowed && r.verdict === "allowed"), "an accepted request");
    assert.ok(records.some((r) => !r.allowed && /token/.test(r.verdict)), "a refusal for the token");
    const last = records.at(-1)?.seq;
    assert.deepEqual(await site.network.audit({ afterSeq: last }), []);
  });

  test("a port outside 1 to 65535 is refused before any call", async () => {
    const calls: [() => Promise<unknown>, number][] = [
      [async () => site.getHost(0), 0],
      [() => site.expose(65536), 65536],
      [async () => site.getHost(80.5), 80.5],
    ];
    for (const [call, port] of calls) {
      await assert.rejects(call(), (e) => {
        assert.ok(e instanceof InvalidArgumentError);
        assert.equal(e.field, "port");
        assert.match(e.message, new RegExp(`port ${port} is not a guest port; give 1 to 65535`));
        return true;
      });
    }
  });

  test("a server without ingress refuses getHost, saying how to serve it", async () => {
    const server = await serverWithoutIngress();
    try {
      const sandbox = await Sandbox.create({ ...server.opts, noImage: true, timeoutMs: 600_000 });
      try {
        for (const call of [async () => sandbox.getHost(8000), () => sandbox.expose(8000)]) {
          await assert.rejects(call(), (e) => {
            assert.ok(e instanceof SandboxError);
            assert.equal(e.code, "FAILED_PRECONDITION");
            assert.equal(e.reason, "UNSUPPORTED");
            assert.match(e.message, /airlock serve --ingress HOST:PORT/);
            return true;
          });
        }
      } finally {
        await sandbox.kill();
      }
    } finally {
      await server.stop();
    }
  });
});
