// The SDK's test suite against a real server and real VMs (`npm test`,
// and scripts/test's SDK step).
//
// The test files are TypeScript (test/*.ts): it first compiles them with
// test/tsconfig.json into dist-test/, which type-checks them against the
// SDK's declarations (a type error fails the suite before any server
// starts), and runs the compiled files.
//
// It makes a throwaway CA and a certificate for localhost (openssl), starts
// `airlock serve` from this checkout (target/debug/airlock, or AIRLOCK_BIN)
// with a private state, saved and data directory, its owner's Unix socket,
// a TLS listener on a loopback port that allows the browser example's
// origin and HTTP ingress on another loopback port, makes two keys on the
// socket (`sdk-test`, and `sdk-limited` with a 64 MiB memory quota), then
// runs the test files with Node's test runner in passes:
//   node     Node's entry (gRPC over HTTP/2 with TLS and the key, from
//            AIRLOCK_HOST/AIRLOCK_API_KEY/AIRLOCK_CA_CERT), every file,
//            local.test.ts (the Unix socket, a server started on demand,
//            require()) and ported.test.ts (E2B programs, test/ported/,
//            run with their import changed only);
//   web      the web entry (gRPC-Web over fetch, HTTP/1.1 with TLS; the CA
//            trusted through NODE_EXTRA_CA_CERTS, as a browser trusts its
//            store), the same files, and entries.test.ts (both entries in
//            one process);
//   browser  the browser example page in headless Chromium
//            (browser.test.ts), when CHROMIUM (default /usr/bin/chromium)
//            exists; scripts/test installs it.
// Each pass's time is printed. Arguments name passes to run (default all),
// each optionally with some of its files (`node:files.test.ts,...`); the
// server's log is kept in the work directory when a pass fails.

import { execFileSync, spawn } from "node:child_process";
import { X509Certificate, createHash } from "node:crypto";
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, "..", "..", "..");
const airlock = process.env.AIRLOCK_BIN ?? join(repo, "target", "debug", "airlock");
const chromium = process.env.CHROMIUM ?? "/usr/bin/chromium";
const compiled = join(here, "..", "dist-test");
const shared = [
  "sandbox.test.ts",
  "commands.test.ts",
  "files.test.ts",
  "code.test.ts",
  "ingress.test.ts",
  "e2b.test.ts",
  "snapshots.test.ts",
  "template.test.ts",
  "usage.test.ts",
];
const PASSES = {
  node: [...shared, "local.test.ts", "ported.test.ts"],
  web: [...shared, "entries.test.ts"],
  browser: ["browser.test.ts"],
};

function fail(message) {
  console.error(`test/run.mjs: ${message}`);
  process.exit(2);
}

if (!existsSync(airlock)) {
  fail(`${airlock} does not exist: run \`cargo build --workspace --bins\` at the repository's root (or set AIRLOCK_BIN)`);
}
if (!existsSync(join(here, "..", "dist", "esm", "index.js"))) {
  fail("the SDK is not built: run `npm run build` first");
}

const chosen = process.argv.slice(2).map((arg) => {
  const [name, files] = arg.split(":", 2);
  if (!(name in PASSES)) {
    fail(`no pass ${name}: choose from ${Object.keys(PASSES).join(", ")}`);
  }
  if (files !== undefined) {
    const unknown = files.split(",").filter((file) => !PASSES[name].includes(file));
    if (unknown.length > 0) {
      fail(`pass ${name} has no ${unknown.join(", ")}: choose from ${PASSES[name].join(", ")}`);
    }
    PASSES[name] = files.split(",");
  }
  return name;
});
const passes = chosen.length > 0 ? chosen : Object.keys(PASSES);
if (passes.includes("browser") && !existsSync(chromium)) {
  fail(`${chromium} does not exist: install Debian's chromium (scripts/test does), or set CHROMIUM`);
}

// The tests, type-checked and compiled (dist-test/NAME.js for test/NAME.ts).
rmSync(compiled, { recursive: true, force: true });
try {
  execFileSync(join(here, "..", "node_modules", ".bin", "tsc"), ["-p", join(here, "tsconfig.json")], { stdio: "inherit" });
} catch {
  fail("the tests do not type-check (tsc -p test/tsconfig.json): see above");
}

/** A loopback port nobody listens on now. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** A CA, and a certificate for localhost and 127.0.0.1 signed by it. */
function tlsFiles(dir) {
  const openssl = (...args) => execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  openssl("req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=airlock sdk test CA", "-days", "2");
  openssl("req", ...ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost");
  writeFileSync(
    join(dir, "server.ext"),
    "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
  );
  openssl(
    "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
    "-out", "server.pem", "-days", "2", "-extfile", "server.ext",
  );
  const cert = new X509Certificate(readFileSync(join(dir, "server.pem")));
  const spki = createHash("sha256").update(cert.publicKey.export({ type: "spki", format: "der" })).digest("base64");
  return { ca: join(dir, "ca.pem"), cert: join(dir, "server.pem"), key: join(dir, "server.key"), spki };
}

const work = mkdtempSync(join(tmpdir(), "airlock-sdk-test-"));
const state = join(work, "state");
const serverEnv = {
  ...process.env,
  AIRLOCK_STATE_DIR: state,
  AIRLOCK_SAVED_DIR: join(work, "saved"),
  AIRLOCK_SERVER_DIR: join(work, "server"),
};
const tls = tlsFiles(work);
const pagePort = await freePort();
const log = createWriteStream(join(state, "..", "daemon.log"), { flags: "a" });

mkdirSync(state, { recursive: true });
const server = spawn(
  airlock,
  [
    "--verbose", "serve", "--socket", join(state, "daemon.sock"),
    "--listen", "127.0.0.1:0", "--tls-cert", tls.cert, "--tls-key", tls.key,
    "--cors-origin", `http://localhost:${pagePort}`, "--max", "12",
    "--ingress", "127.0.0.1:0",
    // What a test leaves running ends with the server.
    "--on-exit", "kill",
  ],
  { env: serverEnv, stdio: ["ignore", "pipe", "pipe"] },
);
server.stdout.pipe(log);
// The API's port and the ingress's address, from the lines the server
// prints once each listener is bound.
const { port, ingress } = await new Promise((resolve) => {
  const lines = createInterface({ input: server.stderr });
  const found = {};
  let done = false;
  lines.on("line", (line) => {
    log.write(`${line}\n`);
    const listening = /^airlock: listening on .*:(\d+)$/.exec(line);
    const ingressOn = /^airlock: ingress on (\S+)$/.exec(line);
    found.port ??= listening ? Number(listening[1]) : undefined;
    found.ingress ??= ingressOn ? ingressOn[1] : undefined;
    if (!done && found.port !== undefined && found.ingress !== undefined) {
      done = true;
      resolve(found);
    }
  });
  server.once("exit", (code) => {
    if (!done) {
      fail(`airlock serve exited (${code}) before listening; its log: ${join(work, "daemon.log")}`);
    }
  });
});

function key(name, ...quota) {
  const out = execFileSync(airlock, ["key", "create", name, ...quota, "--socket", join(state, "daemon.sock")], {
    env: serverEnv,
    encoding: "utf8",
  });
  return out.trim().split("\n").at(-1).trim();
}
const testKey = key("sdk-test");
const limitedKey = key("sdk-limited", "--max-memory", "64");
const host = `https://localhost:${port}`;

const common = {
  ...process.env,
  AIRLOCK_TEST_HOST: host,
  AIRLOCK_TEST_INGRESS: ingress,
  AIRLOCK_TEST_KEY: testKey,
  AIRLOCK_TEST_LIMITED_KEY: limitedKey,
  AIRLOCK_TEST_CA: tls.ca,
  AIRLOCK_TEST_SPKI: tls.spki,
  AIRLOCK_TEST_STATE: state,
  AIRLOCK_TEST_BIN: airlock,
  AIRLOCK_TEST_PAGE_PORT: String(pagePort),
  CHROMIUM: chromium,
};
delete common.AIRLOCK_HOST;
delete common.AIRLOCK_API_KEY;
delete common.AIRLOCK_CA_CERT;
const envs = {
  node: { ...common, AIRLOCK_SDK_ENTRY: "node", AIRLOCK_HOST: host, AIRLOCK_API_KEY: testKey, AIRLOCK_CA_CERT: tls.ca },
  web: { ...common, AIRLOCK_SDK_ENTRY: "web", NODE_EXTRA_CA_CERTS: tls.ca },
  browser: { ...common, AIRLOCK_SDK_ENTRY: "web" },
};

/**
 * A pass: its files one after another, each in a test runner of its own
 * (Node 18's runner runs the files it is given at once, and has no
 * --test-concurrency); 0 when every file passed.
 */
async function runPass(name) {
  let failed = 0;
  for (const file of PASSES[name]) {
    const code = await new Promise((resolve) => {
      const js = join(compiled, file.replace(/\.ts$/, ".js"));
      const child = spawn(process.execPath, ["--test", js], { env: envs[name], stdio: "inherit" });
      child.once("exit", (code, signal) => resolve(code ?? (signal ? 1 : 0)));
    });
    failed ||= code;
  }
  return failed;
}

let failed = false;
const times = [];
try {
  for (const name of passes) {
    console.log(`\n== SDK tests, pass ${name}: ${PASSES[name].join(", ")}`);
    const began = Date.now();
    const code = await runPass(name);
    times.push(`${name} ${((Date.now() - began) / 1000).toFixed(1)} s${code === 0 ? "" : " (failed)"}`);
    failed ||= code !== 0;
  }
} finally {
  server.kill("SIGTERM");
  await new Promise((resolve) => {
    const timer = setTimeout(() => {
      server.kill("SIGKILL");
      resolve();
    }, 20_000);
    server.once("exit", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
console.log(`\nSDK test passes: ${times.join(", ")}`);
if (failed) {
  console.log(`the server's log: ${join(work, "daemon.log")}`);
  process.exit(1);
}
rmSync(work, { recursive: true, force: true });
