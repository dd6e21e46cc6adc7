// The browser example: a sandbox made from a page, a command streamed into
// it, a file written from a Blob and read back, an error with the server's
// reason, then the sandbox killed.
// The server and key come from the form, or from the page's query
// (?host=...&key=...&run=1 runs at once; &report=1 also posts the outcome
// to /result, which serve.mjs's headless run waits for).

import { Sandbox } from "airlock-sdk";

const log = document.getElementById("log");
const show = (text) => {
  log.textContent += text;
};

async function demo(host, apiKey) {
  show(`creating a sandbox on ${host}\n`);
  const sandbox = await Sandbox.create({ host, apiKey, noImage: true, timeoutMs: 300_000 });
  try {
    show(`sandbox ${sandbox.sandboxId}\n`);
    const chunks = [];
    const result = await sandbox.commands.run("echo hello from $(hostname); sleep 1; echo the kernel is $(uname -r)", {
      onStdout: (data) => {
        chunks.push(data);
        show(data);
      },
    });
    await sandbox.files.write("/tmp/from-the-page.txt", new Blob(["written by ", navigator.userAgent.split(" ")[0]]));
    const back = await sandbox.files.read("/tmp/from-the-page.txt");
    show(`the file says: ${back}\n`);
    // Errors carry the server's reason (a response header the server lets
    // the page read).
    const missing = await Sandbox.connect("sandbox-nobody", { host, apiKey }).catch((error) => error);
    show(`connecting to a sandbox that does not exist: ${missing.name} (${missing.reason})\n`);
    return {
      sandboxId: sandbox.sandboxId,
      stdout: result.stdout,
      chunks: chunks.length,
      file: back,
      missing: `${missing.name} ${missing.reason}`,
    };
  } finally {
    await sandbox.kill();
    show("killed\n");
  }
}

async function go(host, apiKey, report) {
  let outcome;
  try {
    outcome = { ok: true, ...(await demo(host, apiKey)) };
  } catch (error) {
    outcome = { ok: false, error: `${error.name}: ${error.message}`, reason: error.reason };
    show(`failed: ${outcome.error}\n`);
  }
  if (report) {
    await fetch("/result", { method: "POST", body: JSON.stringify(outcome) });
  }
}

const params = new URLSearchParams(location.search);
document.getElementById("host").value = params.get("host") ?? "";
document.getElementById("key").value = params.get("key") ?? "";
document.getElementById("form").addEventListener("submit", (event) => {
  event.preventDefault();
  void go(document.getElementById("host").value, document.getElementById("key").value, false);
});
if (params.get("run") === "1") {
  void go(params.get("host"), params.get("key"), params.get("report") === "1");
}
