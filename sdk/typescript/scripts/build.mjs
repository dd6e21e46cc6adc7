// The package's build: the protocol code generated from ../../proto by buf
// with protoc-gen-es (both from devDependencies: nothing is downloaded),
// then TypeScript to ESM with declarations (dist/esm), the same modules as
// CommonJS (dist/cjs, by esbuild, with the declarations beside them), and
// one self-contained ES module for pages without a bundler
// (dist/airlock.browser.js, the gRPC-Web entry with its dependencies).

import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

import * as esbuild from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const bin = join(root, "node_modules", ".bin");
const env = { ...process.env, PATH: `${bin}:${process.env.PATH ?? ""}` };

function run(program, args) {
  execFileSync(join(bin, program), args, { cwd: root, env, stdio: "inherit" });
}

function files(dir, suffix) {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith(suffix))
    .map((entry) => join(entry.parentPath ?? entry.path, entry.name));
}

rmSync(join(root, "dist"), { recursive: true, force: true });
run("buf", ["generate"]);
run("tsc", ["-p", "tsconfig.json"]);

const esm = join(root, "dist", "esm");
const cjs = join(root, "dist", "cjs");
await esbuild.build({
  entryPoints: files(esm, ".js"),
  outdir: cjs,
  outbase: esm,
  format: "cjs",
  platform: "node",
  target: "node18",
  logLevel: "warning",
});
for (const declaration of files(esm, ".d.ts")) {
  const target = join(cjs, relative(esm, declaration));
  mkdirSync(dirname(target), { recursive: true });
  cpSync(declaration, target);
}
writeFileSync(join(cjs, "package.json"), '{ "type": "commonjs" }\n');

await esbuild.build({
  entryPoints: [join(esm, "browser.js")],
  outfile: join(root, "dist", "airlock.browser.js"),
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2021",
  legalComments: "eof",
  logLevel: "warning",
});
console.log("built dist/esm, dist/cjs and dist/airlock.browser.js");
