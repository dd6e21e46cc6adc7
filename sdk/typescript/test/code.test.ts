// Code cells and the network through the SDK, in one sandbox of the
// default image (Python) with a network: one allow rule and a secret
// bound to a host (no traffic leaves the machine: the checks only read the
// policy and make connections the policy refuses). In order: values and
// state across cells; rich results (HTML, Markdown, PNG, JSON) with their
// callbacks; an exception; stdout arriving while a cell runs; timeoutMs;
// contexts made, listed, interrupted, restarted and removed; bash; the
// network's rules, allow, deny, setRules, the bound secret (a placeholder
// in the guest) and the audit of refused connections.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type * as airlock from "airlock-sdk";

import { LIMIT_MS, RUN, entry, eventually, opts, sdk, signal } from "./helpers.js";

const { Sandbox, Execution, Result, TimeoutError, SandboxError } = sdk;

const SECRET = "sk-test-value-never-in-the-guest";

/** A 1x1 PNG, built in Python with zlib: a representation that is binary. */
const RICH = `
import json, struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)) \\
    + chunk(b"IDAT", zlib.compress(b"\\x00\\xff\\x00\\x00")) + chunk(b"IEND", b"")
class Rich:
    def _repr_html_(self): return "<b>bold</b>"
    def _repr_markdown_(self): return "**bold**"
    def _repr_png_(self): return png
    def _repr_json_(self): return {"answer": 42}
    def __repr__(self): return "Rich()"
display(Rich())
{"value": [1, 2, 3]}
`;

describe(`code and network (${entry})`, { timeout: LIMIT_MS }, () => {
  let sandbox: airlock.Sandbox;

  before(async () => {
    sandbox = await Sandbox.create(
      opts({
        timeoutMs: 1_800_000,
        metadata: { run: RUN },
        allowNet: ["allowed.test:443"],
        secrets: { API_TOKEN: { value: SECRET, hosts: ["api.test"] } },
      }),
    );
  });

  after(async () => {
    await sandbox?.kill().catch(() => undefined);
  });

  test("a cell's value, and state kept across cells", async () => {
    const execution = await sandbox.runCode("1 + 1");
    assert.ok(execution instanceof Execution);
    assert.equal(execution.text, "2");
    assert.equal(execution.error, undefined);
    assert.ok((execution.executionCount ?? 0) >= 1);
    await sandbox.runCode("x = 41");
    assert.equal((await sandbox.runCode("x + 1")).text, "42");
  });

  test("rich results: HTML, Markdown, PNG as base64, JSON; callbacks for each", async () => {
    const results: airlock.Result[] = [];
    const out: airlock.OutputMessage[] = [];
    const execution = await sandbox.runCode(`print("printed"); ${RICH}`, {
      onResult: (r) => void results.push(r),
      onStdout: (m) => void out.push(m),
    });
    assert.equal(execution.results.length, 2);
    const [shown, value] = execution.results;
    assert.ok(shown instanceof Result);
    assert.equal(shown.isMainResult, false);
    assert.equal(shown.html, "<b>bold</b>");
    assert.equal(shown.markdown, "**bold**");
    assert.deepEqual(shown.json, { answer: 42 });
    assert.equal(shown.text, "Rich()");
    assert.ok(shown.png?.startsWith("iVBORw0KGgo"), shown.png);
    const png = shown.bytes("image/png");
    assert.ok(png, "the PNG's bytes");
    assert.deepEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
    assert.deepEqual(shown.formats().sort(), ["html", "json", "markdown", "png"]);
    assert.equal(value.isMainResult, true);
    // A plain dict is text, as IPython gives it (no JSON without _repr_json_).
    assert.equal(value.json, undefined);
    assert.equal(value.text, "{'value': [1, 2, 3]}");
    assert.deepEqual(results, execution.results);
    assert.deepEqual(execution.logs.stdout, ["printed\n"]);
    assert.equal(out[0].line, "printed\n");
    assert.equal(out[0].error, false);
  });

  test("an exception: its name, value and traceback, and onError", async () => {
    const errors: airlock.ExecutionError[] = [];
    const execution = await sandbox.runCode("def f():\n    return 1 / 0\nf()", { onError: (e) => void errors.push(e) });
    assert.ok(execution.error, "the cell's error");
    assert.equal(execution.error.name, "ZeroDivisionError");
    assert.equal(execution.error.value, "division by zero");
    assert.match(execution.error.traceback, /line 2/);
    assert.deepEqual(errors, [execution.error]);
  });

  test("output arrives while a cell runs", async () => {
    const execution = await sandbox.runCode(
      [
        "import os, sys, time",
        "print('first', flush=True)",
        "while not os.path.exists('/tmp/go-cell'): time.sleep(0.05)",
        "print('second')",
      ].join("\n"),
      {
        timeoutMs: 120_000,
        onStdout: async (m) => {
          if (m.line.includes("first")) {
            await sandbox.files.write("/tmp/go-cell", "");
          }
        },
      },
    );
    assert.equal(execution.logs.stdout.join(""), "first\nsecond\n");
  });

  test("a cell past timeoutMs is a TimeoutError and its context stays", async () => {
    await assert.rejects(sandbox.runCode("while True: pass", { timeoutMs: 2_000 }), (e) => e instanceof TimeoutError);
    assert.equal((await sandbox.runCode("x")).text, "41");
  });

  test("contexts: made, used, interrupted, restarted, removed; bash", async () => {
    const context = await sandbox.createCodeContext({ language: "python", cwd: "/tmp", envs: { CTX: "yes" } });
    assert.ok(context.id);
    assert.equal(context.language, "python");
    assert.match(context.languageVersion, /^3\./);
    const here = await sandbox.runCode("import os; (os.getcwd(), os.environ['CTX'])", { context });
    assert.equal(here.results[0].text, "('/tmp', 'yes')");
    const apart = await sandbox.runCode("x", { context: context.id });
    assert.equal(apart.error?.name, "NameError");
    assert.ok((await sandbox.listCodeContexts()).some((c) => c.id === context.id));

    const started = signal();
    const busy = sandbox.runCode("import time\nprint('busy', flush=True)\ntime.sleep(60)", {
      context,
      onStdout: () => started.resolve(),
    });
    await started.promise;
    await sandbox.interruptCodeContext(context);
    assert.equal((await busy).error?.name, "KeyboardInterrupt");

    await sandbox.runCode("y = 1", { context });
    await sandbox.restartCodeContext(context);
    assert.equal((await sandbox.runCode("y", { context })).error?.name, "NameError");
    await sandbox.removeCodeContext(context.id);
    assert.ok(!(await sandbox.listCodeContexts()).some((c) => c.id === context.id));

    const bash = await sandbox.runCode("cd /tmp; echo $PWD", { language: "bash" });
    assert.equal(bash.logs.stdout.join(""), "/tmp\n");
    assert.equal((await sandbox.runCode("pwd", { language: "bash" })).logs.stdout.join(""), "/tmp\n");
  });

  test("the network's rules: read, allowed, denied, replaced", async () => {
    assert.deepEqual(await sandbox.network.rules(), ["allowed.test:443"]);
    assert.deepEqual(await sandbox.network.allow("more.test"), ["allowed.test:443", "more.test"]);
    assert.deepEqual(await sandbox.network.deny(["allowed.test:443"]), ["more.test"]);
    await assert.rejects(sandbox.network.deny("never.test"), (e) => e instanceof SandboxError);
    assert.deepEqual(await sandbox.network.setRules(["allowed.test:443"]), ["allowed.test:443"]);
    const policy = await sandbox.network.policy();
    assert.deepEqual(policy.secrets, [{ name: "API_TOKEN", hosts: ["api.test"] }]);
    assert.ok(!JSON.stringify(policy).includes(SECRET));
  });

  test("a bound secret is a placeholder in the guest; refused connections are audited", async () => {
    const env = (await sandbox.commands.run("echo $API_TOKEN")).stdout.trim();
    assert.ok(env.length > 0);
    assert.notEqual(env, SECRET);
    // The guest's attempt ends one way or another (a reset, an end, or the
    // host's own refusal page): what counts is that the host refused it.
    await sandbox.runCode(
      [
        "import socket",
        "try:",
        "    s = socket.create_connection(('192.0.2.9', 80), timeout=5)",
        "    s.sendall(b'GET / HTTP/1.0\\r\\nHost: 192.0.2.9\\r\\n\\r\\n')",
        "    s.recv(100)",
        "except OSError:",
        "    pass",
      ].join("\n"),
    );
    assert.ok(
      await eventually(async () =>
        (await sandbox.network.audit()).some((r) => r.addr === "192.0.2.9" && r.port === 80 && !r.allowed),
      ),
    );
    const records = await sandbox.network.audit();
    const record = records.find((r) => r.addr === "192.0.2.9");
    assert.ok(record, "the refused connection's record");
    assert.match(record.verdict, /^refused/);
    assert.ok(record.at instanceof Date);
    const later = await sandbox.network.audit({ afterSeq: record.seq });
    assert.ok(later.every((r) => r.seq > record.seq));
  });
});
