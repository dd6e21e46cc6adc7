// Commands and terminals through the SDK, in one busybox sandbox: run with
// output, environment, directory and user; a non-zero exit as
// CommandExitError; onStdout called while the command runs (it waits for a
// file the callback writes, so callbacks held to the end would deadlock
// it); timeoutMs as TimeoutError; a background command fed on stdin,
// listed, re-attached with replay, killed; AbortSignal cancelling a run
// (which kills the command) and any call; a pty's input, size and kill.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type * as airlock from "airlock-sdk";

import { LIMIT_MS, entry, eventually, nameOf, sdk, signal, smallSandbox } from "./helpers.js";

const { CommandExitError, CommandHandle, TimeoutError, NotFoundError } = sdk;

describe(`commands (${entry})`, { timeout: LIMIT_MS }, () => {
  let sandbox: airlock.Sandbox;

  before(async () => {
    sandbox = await smallSandbox();
  });

  after(async () => {
    await sandbox?.kill().catch(() => undefined);
  });

  test("run answers stdout, stderr and the exit code, with envs, cwd and user", async () => {
    const result = await sandbox.commands.run('echo "out $NAME"; echo err >&2; pwd; id -u', {
      envs: { NAME: "value" },
      cwd: "/tmp",
      user: "1000",
    });
    assert.deepEqual(result, { exitCode: 0, error: undefined, stdout: "out value\n/tmp\n1000\n", stderr: "err\n" });
  });

  test("a non-zero exit is a CommandExitError carrying the output", async () => {
    await assert.rejects(sandbox.commands.run("echo partial; echo why >&2; exit 3"), (e) => {
      assert.ok(e instanceof CommandExitError);
      assert.equal(e.exitCode, 3);
      assert.equal(e.error, "exit status 3");
      assert.equal(e.stdout, "partial\n");
      assert.equal(e.stderr, "why\n");
      assert.deepEqual(e.result, { exitCode: 3, error: "exit status 3", stdout: "partial\n", stderr: "why\n" });
      return true;
    });
    await assert.rejects(sandbox.commands.run("no-such-program"), (e) => e instanceof CommandExitError && e.exitCode === 127);
  });

  test("onStdout and onStderr are called as output arrives, not at the end", async () => {
    const seen: [string, string][] = [];
    const result = await sandbox.commands.run(
      "echo first; echo warn >&2; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo second",
      {
        timeoutMs: 120_000,
        onStdout: async (data) => {
          seen.push(["out", data]);
          if (data.includes("first")) {
            // The command waits for this file: only a callback made while it
            // runs lets it finish.
            await sandbox.files.write("/tmp/go", "");
          }
        },
        onStderr: (data) => {
          seen.push(["err", data]);
        },
      },
    );
    assert.equal(result.stdout, "first\nsecond\n");
    assert.deepEqual(
      seen.filter(([kind]) => kind === "out").map(([, d]) => d).join(""),
      "first\nsecond\n",
    );
    assert.deepEqual(seen.filter(([kind]) => kind === "err"), [["err", "warn\n"]]);
  });

  test("a command past its timeoutMs is killed and fails with TimeoutError", async () => {
    const started = Date.now();
    await assert.rejects(sandbox.commands.run("echo begun; sleep 30", { timeoutMs: 1_000 }), (e) => {
      assert.ok(e instanceof TimeoutError);
      assert.match(e.message, /timed out after 1000 ms/);
      return true;
    });
    assert.ok(Date.now() - started < 25_000);
  });

  test("a background command: stdin, list, re-attach with replay, kill", async () => {
    const handle = await sandbox.commands.run("echo ready; while read line; do echo \"got $line\"; done", {
      background: true,
      timeoutMs: 0,
    });
    assert.ok(handle instanceof CommandHandle);
    assert.ok(handle.pid > 0);
    await handle.sendStdin("one\n");
    await sandbox.commands.sendStdin(handle.pid, new TextEncoder().encode("two\n"));
    assert.ok(await eventually(() => handle.stdout === "ready\ngot one\ngot two\n"), handle.stdout);

    const listed = (await sandbox.commands.list()).find((p) => p.pid === handle.pid);
    assert.ok(listed, "the command is listed");
    assert.equal(listed.running, true);
    // As E2B reports a command (busybox has no bash: sh runs it).
    assert.equal(listed.cmd, "/bin/bash");
    assert.deepEqual(listed.args.slice(0, 2), ["-l", "-c"]);

    // Another client takes over and replays everything the guest holds.
    await handle.disconnect();
    const replayed: string[] = [];
    const again = await sandbox.commands.connect(handle.pid, {
      onStdout: (d) => {
        replayed.push(d);
      },
    });
    assert.equal(again.pid, handle.pid);
    assert.ok(await eventually(() => again.stdout === "ready\ngot one\ngot two\n"), again.stdout);
    await again.sendStdin("three\n");
    assert.ok(await eventually(() => again.stdout.endsWith("got three\n")), again.stdout);
    assert.equal(replayed.join(""), again.stdout);

    assert.equal(await sandbox.commands.kill(handle.pid), true);
    await assert.rejects(again.wait(), (e) => {
      assert.ok(e instanceof CommandExitError);
      assert.equal(e.error, "killed by signal 9");
      assert.equal(e.stdout, "ready\ngot one\ngot two\ngot three\n");
      return true;
    });
    // The first handle, disconnected, learns the end from the server.
    await assert.rejects(handle.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1);
    assert.equal(await sandbox.commands.kill(999_999), false);
  });

  test("closing stdin ends a command that reads to the end", async () => {
    const handle = await sandbox.commands.run("wc -c", { background: true });
    await handle.sendStdin("12345");
    await handle.closeStdin();
    const result = await handle.wait();
    assert.equal(result.stdout.trim(), "5");
  });

  test("an AbortSignal cancels a run, and the command is killed with it", async () => {
    const controller = new AbortController();
    const marker = `abort-${entry}-${Date.now()}`;
    const run = sandbox.commands.run(`echo started; sleep 60; echo ${marker}`, {
      signal: controller.signal,
      onStdout: (data) => {
        if (data.includes("started")) {
          controller.abort();
        }
      },
    });
    await assert.rejects(run, (e) => nameOf(e) === "AbortError");
    assert.ok(
      await eventually(async () => !(await sandbox.commands.list()).some((p) => p.running && p.args.join(" ").includes(marker))),
      "the cancelled command still runs",
    );
    await assert.rejects(sandbox.getInfo({ signal: AbortSignal.abort() }), (e) => nameOf(e) === "AbortError");
    const reason = new Error("my reason");
    const stopped = new AbortController();
    stopped.abort(reason);
    await assert.rejects(sandbox.files.read("/etc/passwd", { signal: stopped.signal }), (e) => e === reason);
  });

  test("a callback that throws ends the run with its own error", async () => {
    const mine = new Error("the callback's own failure");
    await assert.rejects(
      sandbox.commands.run("echo one; sleep 30", {
        onStdout: () => {
          throw mine;
        },
      }),
      (e) => e === mine,
    );
  });

  test("a pty: input, output as bytes, resize, kill", async () => {
    let text = "";
    const decoder = new TextDecoder();
    const shell = await sandbox.pty.create({
      cols: 80,
      rows: 24,
      onData: (data) => {
        assert.ok(data instanceof Uint8Array);
        text += decoder.decode(data, { stream: true });
      },
    });
    await sandbox.pty.sendInput(shell.pid, new TextEncoder().encode("echo $((6 * 7)); stty size\n"));
    assert.ok(await eventually(() => text.includes("42\r\n24 80\r\n")), text);
    await sandbox.pty.resize(shell.pid, { cols: 100, rows: 30 });
    await sandbox.pty.sendInput(shell.pid, "stty size\n");
    assert.ok(await eventually(() => text.includes("30 100\r\n")), text);
    assert.equal(await sandbox.pty.kill(shell.pid), true);
    await assert.rejects(shell.wait(), (e) => e instanceof CommandExitError && e.error === "killed by signal 9");
  });

  test("a background command outlives a broken client; a missing pid is NotFoundError", async () => {
    const gate = signal();
    const handle = await sandbox.commands.run("echo up; sleep 2; echo down", {
      background: true,
      onStdout: (d) => {
        if (d.includes("up")) {
          gate.resolve();
        }
      },
    });
    await gate.promise;
    await handle.disconnect();
    const result = await handle.wait();
    assert.equal(result.exitCode, 0);
    await assert.rejects(sandbox.commands.connect(999_999), (e) => e instanceof NotFoundError);
  });
});
