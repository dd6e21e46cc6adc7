// Templates through the SDK: on the node pass, a template built from a tiny
// context (a file read by path, FROM default, COPY of the directory less
// what the ignore patterns leave out, a START program whose READY check
// needs a copied file), its steps, output and phases handed to onBuildLogs,
// a sandbox started from it, the same template from E2B's builder built
// again with every step from the cache, listed and deleted; a file the
// server cannot read refused naming its line. On the web pass a build is
// refused (gRPC-Web cannot stream the context) while listing works.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";

import type * as airlock from "airlock-sdk";

import { LIMIT_MS, RUN, entry, opts, sdk } from "./helpers.js";

const { Sandbox, Template, InvalidArgumentError, LogEntryEnd, LogEntryStart, SandboxError, waitForFile, waitForPort, waitForTimeout } =
  sdk;

/** The template file: the context copied, and a START program whose READY check needs a file of it. */
const FILE =
  "FROM default\n" +
  "COPY . /srv/\n" +
  "START sh -c 'cp /srv/hello.txt /tmp/started; exec sleep infinity'\n" +
  "READY file /tmp/started\n";

describe(`templates (${entry})`, { timeout: LIMIT_MS }, () => {
  const context = mkdtempSync(join(tmpdir(), "airlock-template-"));
  const name = `${RUN}-template`;

  after(async () => {
    rmSync(context, { recursive: true, force: true });
    await Template.delete(name, opts()).catch(() => undefined);
  });

  test("the builder writes Airlock's template file and refuses what Airlock cannot build", () => {
    const built = Template()
      .fromBaseImage()
      .copy(["a b", "c"], "/srv/", { user: "user", mode: 0o755 })
      .runCmd(["echo 1", "echo 2"])
      .runCmd("whoami", { user: "user" })
      .setEnvs({ A: "x y", B: "$HOME" })
      .setUser("app")
      .runCmd("cat <<EOF\nhi\nEOF")
      .setStartCmd("python3 -m http.server 8000", waitForPort(8000));
    assert.equal(
      built.toDockerfile(),
      "FROM default\n" +
        'COPY --chown=user --chmod=0755 "a b" c /srv/\n' +
        "RUN echo 1 && echo 2\n" +
        "USER user\nRUN whoami\nUSER root\n" +
        'ENV A="x y" B="\\$HOME"\n' +
        "USER app\n" +
        'RUN ["/bin/sh", "-c", "cat <<EOF\\nhi\\nEOF"]\n' +
        "START python3 -m http.server 8000\n" +
        "READY port 8000\n",
    );
    assert.equal(Template().fromImage("x").setReadyCmd(waitForTimeout(1500)).toDockerfile(), "FROM x\nREADY cmd sleep 2\n");
    assert.throws(() => Template().toDockerfile(), /no base/);
    assert.throws(() => Template().fromBaseImage().fromImage("x"), /one base/);
    assert.throws(() => Template().fromImage("x", { username: "u", password: "p" }), /registry/);
    assert.throws(() => Template().fromBaseImage().skipCache(), (e) => e instanceof InvalidArgumentError && e.field === "skipCache");
  });

  if (entry === "web") {
    test("over gRPC-Web a build is refused saying why; templates are listed", async () => {
      await assert.rejects(
        Template.build(Template().fromBaseImage().runCmd("true"), `${RUN}-web`, opts()),
        (e) => e instanceof SandboxError && e.reason === "UNSUPPORTED" && /Node/.test(e.message),
      );
      assert.ok(Array.isArray(await Template.list(opts())));
      assert.equal(await Template.delete(`${RUN}-web`, opts()), false);
    });
    return;
  }

  test("a template built from a context starts sandboxes; built again, every step is cached", async () => {
    writeFileSync(join(context, "hello.txt"), `from the ${entry} pass's context ${process.pid}`);
    writeFileSync(join(context, "Dockerfile"), FILE);
    writeFileSync(join(context, "left-out.bin"), "not sent");
    const logs: airlock.LogEntry[] = [];
    const template = Template({ fileContextPath: context, fileIgnorePatterns: ["*.bin"] }).fromDockerfile("Dockerfile");
    assert.equal(template.toDockerfile(), FILE);
    const info = await Template.build(template, name, { onBuildLogs: (entry) => logs.push(entry) });
    assert.equal(info.name, name);
    assert.equal(info.templateId, name);
    assert.equal(info.image, "default");
    assert.ok(logs[0] instanceof LogEntryStart && logs.at(-1) instanceof LogEntryEnd);
    const steps = logs.filter((e) => e.kind === "step");
    assert.deepEqual(steps.map((e) => [e.message, e.cached]), [["[1/1] COPY . /srv/", false]]);
    assert.ok(logs.some((e) => e.kind === "phase"));
    assert.equal(await Template.exists(name, opts()), true);
    assert.ok((await Template.list(opts())).some((t) => t.name === name));

    const sandbox = await Sandbox.create(name, opts());
    try {
      assert.equal((await sandbox.getInfo()).templateId, name);
      assert.equal(await sandbox.files.read("/tmp/started"), `from the ${entry} pass's context ${process.pid}`);
      assert.equal(await sandbox.files.exists("/srv/Dockerfile"), true);
      assert.equal(await sandbox.files.exists("/srv/left-out.bin"), false);
    } finally {
      await sandbox.kill();
    }

    // The same file and context from E2B's builder: every step is cached.
    const built = Template({ fileContextPath: context, fileIgnorePatterns: ["*.bin"] })
      .fromBaseImage()
      .copy(".", "/srv/")
      .setStartCmd("sh -c 'cp /srv/hello.txt /tmp/started; exec sleep infinity'", waitForFile("/tmp/started"));
    assert.equal(Template.toDockerfile(built), FILE);
    const again: airlock.LogEntry[] = [];
    await Template.build(built, name, { onBuildLogs: (entry) => again.push(entry) });
    const cached = again.filter((e) => e.kind === "step");
    assert.ok(cached.length > 0 && cached.every((e) => e.cached), JSON.stringify(cached));
    assert.equal(await Template.delete(name, opts()), true);
    assert.equal(await Template.delete(name, opts()), false);
    assert.equal(await Template.exists(name, opts()), false);
  });

  test("the context goes as a tar stream: long names, links, less what is ignored", async () => {
    const dir = mkdtempSync(join(tmpdir(), "airlock-context-"));
    try {
      const long = `${"d".repeat(80)}/${"f".repeat(90)}.txt`;
      mkdirSync(join(dir, "d".repeat(80)));
      writeFileSync(join(dir, long), "deep");
      mkdirSync(join(dir, "node_modules", "x"), { recursive: true });
      writeFileSync(join(dir, "node_modules", "x", "y.js"), "left out");
      writeFileSync(join(dir, "node_modules", "x", "keep.js"), "brought back");
      mkdirSync(join(dir, "build"));
      writeFileSync(join(dir, "build", "out.o"), "left out, and its directory");
      writeFileSync(join(dir, "keep.log"), "kept");
      writeFileSync(join(dir, "drop.log"), "left out");
      writeFileSync(join(dir, ".dockerignore"), "node_modules\nbuild\n*.log\n!keep.log\n!node_modules/x/keep.js\n");
      symlinkSync("keep.log", join(dir, "link"));
      const template = Template({ fileContextPath: dir }).fromBaseImage().copy(".", "/srv/");
      const stream = template.context(template.toDockerfile());
      assert.ok(stream !== undefined);
      const chunks: Uint8Array[] = [];
      for await (const chunk of stream) {
        chunks.push(chunk);
      }
      const listed = execFileSync("tar", ["-tvf", "-"], { input: Buffer.concat(chunks), encoding: "utf8" });
      const names = listed.trim().split("\n").map((line) => line.split(/\s+/).slice(5).join(" ")).sort();
      assert.deepEqual(names, [
        ".dockerignore",
        `${"d".repeat(80)}/`,
        long,
        "keep.log",
        "link -> keep.log",
        "node_modules/",
        "node_modules/x/",
        "node_modules/x/keep.js",
      ]);
      assert.equal(Template().fromBaseImage().context("FROM default\nRUN true\n"), undefined); // nothing copied, nothing sent
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("a file the server cannot read is refused naming its line; tags are refused", async () => {
    await assert.rejects(
      Template.build(Template().fromDockerfile("FROM default\nCMD python3\n"), `${RUN}-bad`, opts()),
      (e) => e instanceof InvalidArgumentError && e.field === "header.file" && /line 2/.test(e.message),
    );
    await assert.rejects(
      Template.build(Template().fromBaseImage(), `${RUN}-bad`, { ...opts(), tags: ["v1"] }),
      (e) => e instanceof InvalidArgumentError && e.field === "tags",
    );
  });
});
