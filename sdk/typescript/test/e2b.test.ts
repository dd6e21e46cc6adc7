// Issue #52's items on a real Debian sandbox, as E2B's JS SDK has them (or
// refused with what to do): getHost a string; Sandbox.list a paginator;
// commands under `bash -l`, starting in home where relative paths are;
// kill of an exited command false; a watched write's name; relative paths
// from home; a plain value as text, Result's toJSON, tracebacks joined once
// with tracebackRaw, output timestamps in nanoseconds; IPython's shell
// lines and `%pip` installing system-wide; E2B's user and home working on
// the default image and refused with what to do where an image lacks them;
// FileNotFoundError and SandboxNotFoundError (a NotFoundError, also once
// the sandbox ended); betaPause and the instance connect; templateId; the
// 300 s lifetime; metrics' cpuCount and cpuUsedPct; allowInternetAccess and
// network refused; a listing without ended sandboxes.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type * as airlock from "airlock-sdk";

import { LIMIT_MS, RUN, entry, eventually, listAll, opts, sdk, smallSandbox } from "./helpers.js";

const {
  Sandbox,
  SandboxPaginator,
  ConnectionConfig,
  FileNotFoundError,
  SandboxNotFoundError,
  NotFoundError,
  InvalidArgumentError,
  ALL_TRAFFIC,
} = sdk;

/** Where PIP_WHEEL writes a pure-Python wheel of `magic_pkg` (VALUE = 42). */
const WHEEL_PATH = "/tmp/magic_pkg-1.0-py3-none-any.whl";
const PIP_WHEEL = `
import zipfile
dist = "magic_pkg-1.0.dist-info"
files = {
    "magic_pkg/__init__.py": "VALUE = 42\\n",
    dist + "/METADATA": "Metadata-Version: 2.1\\nName: magic-pkg\\nVersion: 1.0\\n",
    dist + "/WHEEL": "Wheel-Version: 1.0\\nGenerator: hand\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
}
files[dist + "/RECORD"] = "".join(name + ",,\\n" for name in files) + dist + "/RECORD,,\\n"
with zipfile.ZipFile("${WHEEL_PATH}", "w") as archive:
    for name, text in files.items():
        archive.writestr(name, text)
`;

const BASH_ONLY = '[[ "$0" == bash ]] && echo "bash $(shopt -q login_shell && echo login)"';

describe(`E2B's shapes (${entry})`, { timeout: LIMIT_MS }, () => {
  let sbx: airlock.Sandbox;
  const labels = { run: RUN, suite: "e2b" };

  before(async () => {
    sbx = await Sandbox.create(opts({ metadata: labels }));
  });

  after(async () => {
    await sbx?.kill().catch(() => undefined);
  });

  test("a sandbox lives 300 s unless told, names its template, and its metrics have E2B's CPU figures", async () => {
    const info = await sbx.getInfo();
    assert.equal(info.templateId, "default");
    assert.ok(info.endAt instanceof Date);
    const lifetime = info.endAt.getTime() - info.startedAt.getTime();
    assert.ok(lifetime > 240_000 && lifetime <= 301_000, `${lifetime} ms`);
    // The writable root starts empty: 2 MiB written into it show.
    await sbx.commands.run("head -c 2097152 /dev/urandom > /root/metrics.fill");
    const [metrics] = await sbx.getMetrics();
    assert.equal(metrics.cpuCount, 1);
    assert.ok(metrics.cpuUsedPct >= 0 && metrics.cpuUsedPct <= 100, `${metrics.cpuUsedPct}`);
    assert.ok(metrics.diskTotal !== undefined && metrics.diskUsed !== undefined, "disk figures");
    assert.ok(metrics.diskUsed >= 2 ** 21 && metrics.diskUsed <= metrics.diskTotal, `${metrics.diskUsed}`);
  });

  test("ConnectionConfig.setIntegration names the wrapping library on every call", async () => {
    ConnectionConfig.setIntegration("my-agent/1.0");
    try {
      assert.equal(ConnectionConfig.integration, "my-agent/1.0");
      assert.equal((await sbx.getInfo()).sandboxId, sbx.sandboxId);
    } finally {
      ConnectionConfig.setIntegration(undefined);
    }
    assert.equal(ConnectionConfig.integration, undefined);
  });

  test("getHost answers a string at once; Sandbox.list a paginator, awaited or not", async () => {
    const host = sbx.getHost(3000);
    assert.equal(typeof host, "string");
    assert.match(`http://${host}/`, new RegExp(`^http://3000-${sbx.sandboxId}\\.airlock\\.localhost:\\d+/$`));
    const pages = await Sandbox.list(opts({ metadata: labels }));
    assert.ok(pages instanceof SandboxPaginator);
    const page = await pages.nextItems();
    assert.deepEqual(
      page.map((s) => s.sandboxId),
      [sbx.sandboxId],
    );
  });

  test("commands run under bash -l; kill of an ended command is false", async () => {
    assert.equal((await sbx.commands.run(BASH_ONLY)).stdout, "bash login\n");
    const done = await sbx.commands.run("exit 0", { background: true });
    await done.wait();
    assert.equal(await done.kill(), false);
    assert.equal(await sbx.commands.kill(done.pid), false);
    const listed = (await sbx.commands.list()).find((p) => p.pid === done.pid);
    assert.deepEqual([listed?.cmd, listed?.args], ["/bin/bash", ["-l", "-c", "exit 0"]]);
  });

  test("commands start in home, where relative paths are", async () => {
    // E2B code writes a file by a relative path, then runs it by one.
    await sbx.files.write("script.py", "print('ran from home')");
    assert.equal((await sbx.commands.run("python3 script.py")).stdout, "ran from home\n");
    assert.equal((await sbx.commands.run("pwd")).stdout, "/root\n");
    assert.equal(await sbx.files.read("/root/script.py"), "print('ran from home')");
  });

  test("E2B's user and home work on the default image", async () => {
    assert.equal((await sbx.commands.run("whoami", { user: "user" })).stdout, "user\n");
    assert.equal((await sbx.commands.run("pwd", { cwd: "/home/user" })).stdout, "/home/user\n");
    // As E2B's: a command as the user starts in the user's home.
    assert.equal((await sbx.commands.run("whoami; pwd", { user: "user" })).stdout, "user\n/home/user\n");
  });

  test("a watched write names the file written; relative paths are from home", async () => {
    const events: airlock.FilesystemEvent[] = [];
    const watch = await sbx.files.watchDir("/root", (event) => void events.push(event));
    await sbx.files.write("notes.txt", "relative");
    assert.equal(await sbx.files.read("/root/notes.txt"), "relative");
    assert.ok(await eventually(() => events.length >= 2), JSON.stringify(events));
    await watch.stop();
    assert.deepEqual(
      events.map((e) => [e.name, e.type]),
      [
        ["notes.txt", "create"],
        ["notes.txt", "write"],
      ],
    );
  });

  test("results as E2B's: a plain value's text, toJSON, tracebacks, nanosecond timestamps, shell lines", async () => {
    const stamps: number[] = [];
    const value = await sbx.runCode("print('hi')\n6 * 7", { onStdout: (m) => void stamps.push(m.timestamp) });
    assert.equal(value.text, "42");
    assert.equal(value.results[0].json, undefined);
    assert.deepEqual(JSON.parse(JSON.stringify(value)), {
      results: [{ text: "42" }],
      logs: { stdout: ["hi\n"], stderr: [] },
    });
    assert.ok(stamps.length === 1 && Math.abs(stamps[0] / 1e6 - Date.now()) < 60_000, `${stamps[0]}`);

    const failed = await sbx.runCode("1/0");
    assert.ok(failed.error);
    assert.ok(!failed.error.traceback.includes("\n\n"), failed.error.traceback);
    assert.match(failed.error.traceback, /ZeroDivisionError: division by zero$/);
    assert.equal(failed.error.tracebackRaw.join("\n"), failed.error.traceback);

    const shell = await sbx.runCode("!echo from the shell && echo twice\n'done'");
    assert.deepEqual([shell.logs.stdout.join(""), shell.text], ["from the shell\ntwice\n", "'done'"]);
  });

  test("%pip magics run pip, which installs system-wide", async () => {
    const version = await sbx.runCode("%pip --version");
    assert.equal(version.error, undefined);
    assert.match(version.logs.stdout.join(""), /^pip \d+/);
    // A wheel built in the sandbox (it has no network), installed as agents do.
    const built = await sbx.runCode(PIP_WHEEL);
    assert.equal(built.error, undefined, built.error?.traceback);
    const installed = await sbx.runCode(`%pip install --no-index ${WHEEL_PATH}`);
    assert.equal(installed.error, undefined);
    assert.match(installed.logs.stdout.join(""), /Successfully installed magic[-_]pkg-1\.0/);
    assert.equal((await sbx.commands.run("python3 -c 'import magic_pkg; print(magic_pkg.VALUE)'")).stdout, "42\n");
  });

  test("E2B's user, home and tools an image lacks are refused saying what to do; E2B's error names", async () => {
    await assert.rejects(sbx.files.read("/no/such/file"), (e) => e instanceof FileNotFoundError && e instanceof NotFoundError);
    // The busybox environment never has E2B's account or tools, whatever the Debian images get.
    const small = await smallSandbox({ timeoutMs: 120_000 });
    try {
      assert.equal((await small.commands.run('echo "$0"')).stdout, "/bin/sh\n");
      await assert.rejects(small.commands.run("id", { user: "user" }), (e) => {
        assert.ok(e instanceof FileNotFoundError);
        assert.match(e.message, /leave user out/);
        return true;
      });
      await assert.rejects(small.commands.run("pwd", { cwd: "/home/user" }), /home \/root/);
      for (const tool of ["pip", "curl"]) {
        await assert.rejects(small.commands.run(`${tool} --version`), new RegExp(`image has no ${tool}`));
      }
    } finally {
      await small.kill();
    }
  });

  test("allowInternetAccess and network's denials are refused before any call", async () => {
    await assert.rejects(Sandbox.create(opts({ allowInternetAccess: true })), (e) => {
      assert.ok(e instanceof InvalidArgumentError);
      assert.match(e.message, /allowNet/);
      return true;
    });
    await assert.rejects(Sandbox.create(opts({ network: { denyOut: ["10.0.0.0/8"] } })), /allowOut/);
    await assert.rejects(Sandbox.create(opts({ network: { allowOut: [ALL_TRAFFIC] } })), /rule by rule/);
  });

  test("betaPause and the instance connect; an ended sandbox is SandboxNotFoundError and not listed", async () => {
    assert.equal(await sbx.betaPause(), true);
    assert.equal((await sbx.getInfo()).state, "paused");
    assert.equal(await sbx.connect(), sbx);
    assert.equal((await sbx.getInfo()).state, "running");
    await sbx.kill();
    await assert.rejects(sbx.files.read("/root/notes.txt"), (e) => e instanceof SandboxNotFoundError);
    assert.deepEqual(await listAll(Sandbox.list(opts({ metadata: labels }))), []);
  });
});
