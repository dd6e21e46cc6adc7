// Runs the browser example in headless Chromium (Debian's `chromium`, or
// CHROMIUM) and prints what the page reported: the page is served by
// serve.mjs on http://localhost:PORT (default 8080), creates a sandbox on
// the server, streams a command's output, writes and reads a file, and
// kills the sandbox. The server must allow the origin:
// `airlock serve ... --cors-origin http://localhost:PORT`.
//
//   AIRLOCK_HOST=https://localhost:7443 AIRLOCK_API_KEY=ak_... \
//   [AIRLOCK_CA_CERT=ca.pem] node headless.mjs [PORT]
//
// With AIRLOCK_CA_CERT (a private CA), Chromium is told to accept the
// server's certificate by its public key (--ignore-certificate-errors-spki-list),
// after this script has verified it against that CA.

import { spawn } from "node:child_process";
import { X509Certificate, createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "node:tls";
import { fileURLToPath } from "node:url";

import { serve } from "./serve.mjs";

/** The base64 SHA-256 of the server's public key, its certificate checked against `ca`. */
function serverSpki(host, ca) {
  const url = new URL(host);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: url.hostname, port: Number(url.port || 443), servername: url.hostname, ca }, () => {
      const cert = new X509Certificate(socket.getPeerCertificate().raw);
      socket.end();
      resolve(createHash("sha256").update(cert.publicKey.export({ type: "spki", format: "der" })).digest("base64"));
    });
    socket.once("error", reject);
  });
}

/** Serves the page, runs it in headless Chromium, and answers what it reported. */
export async function runHeadless({
  host,
  apiKey,
  port = 8080,
  ca,
  chromium = process.env.CHROMIUM ?? "/usr/bin/chromium",
  timeoutMs = 180_000,
}) {
  let report;
  const reported = new Promise((resolve) => {
    report = resolve;
  });
  const server = await serve({ port, onResult: report });
  const profile = mkdtempSync(join(tmpdir(), "airlock-chromium-"));
  const args = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    `--user-data-dir=${profile}`,
  ];
  if (ca !== undefined && host.startsWith("https:")) {
    args.push(`--ignore-certificate-errors-spki-list=${await serverSpki(host, ca)}`);
  }
  const query = new URLSearchParams({ host, key: apiKey, run: "1", report: "1" });
  args.push(`http://localhost:${port}/?${query}`);
  // A process group of its own: Chromium's helpers (renderer, utility,
  // crash handler) end with it, not after the profile is removed.
  const browser = spawn(chromium, args, { stdio: ["ignore", "ignore", "pipe"], detached: true });
  let stderr = "";
  browser.stderr.on("data", (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise((resolve) => browser.once("exit", resolve));
  let timer;
  try {
    return await Promise.race([
      reported,
      exited.then((code) => {
        throw new Error(`chromium exited (${code}) before the page reported:\n${stderr.slice(-4000)}`);
      }),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the page reported nothing in ${timeoutMs} ms:\n${stderr.slice(-4000)}`)), timeoutMs);
      }),
    ]);
  } finally {
    clearTimeout(timer);
    try {
      process.kill(-browser.pid, "SIGKILL");
    } catch {
      // The group has ended already.
    }
    await exited;
    server.close();
    // A helper outside the group may still be writing its last file.
    rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const host = process.env.AIRLOCK_HOST;
  const apiKey = process.env.AIRLOCK_API_KEY;
  if (!host || !apiKey) {
    console.error("set AIRLOCK_HOST (https://HOST:PORT) and AIRLOCK_API_KEY");
    process.exit(2);
  }
  const ca = process.env.AIRLOCK_CA_CERT ? readFileSync(process.env.AIRLOCK_CA_CERT, "utf8") : undefined;
  const outcome = await runHeadless({ host, apiKey, ca, port: Number(process.argv[2] ?? 8080) });
  console.log(JSON.stringify(outcome, null, 2));
  process.exit(outcome.ok ? 0 : 1);
}
