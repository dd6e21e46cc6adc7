// npm's `prepare`: the build, wherever npm asks for one. In this directory
// (`npm ci`, `npm install`) the devDependencies are there. When another
// project installs this directory (`npm install /path/to/sdk/typescript`),
// npm links it and runs this without installing them: they are installed
// here first (`npm ci`, as npm does for a package from git), so that a
// fresh clone installs as a tarball from `npm pack` does. The tarball
// ships this file but no sources: there it does nothing, should npm run it.

import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

if (!existsSync(join(root, "src"))) {
  process.exit(0);
}
if (!existsSync(join(root, "node_modules", ".bin", "tsc"))) {
  // The installing project's settings stay (registry, cache, CA), but not
  // where it installs nor what it leaves out: this install is of this
  // directory, with its devDependencies.
  const env = { ...process.env };
  for (const name of Object.keys(env)) {
    if (/^npm_config_(local_prefix|global|prefix|omit|include|production|only|dev|save.*)$/i.test(name)) {
      delete env[name];
    }
  }
  console.error("airlock-sdk: installing its build tools (npm ci) to build it");
  // --ignore-scripts: this script is not run again by it.
  execFileSync("npm", ["ci", "--ignore-scripts", "--no-audit", "--no-fund"], { cwd: root, env, stdio: "inherit" });
}
execFileSync(process.execPath, [join(root, "scripts", "build.mjs")], { cwd: root, stdio: "inherit" });
