// An agent's code executor as agent frameworks write one over E2B's code
// interpreter: packages installed with IPython's `!pip install`, then the
// model's code run step by step, each step's value (the first
// representation present, json before text as such executors order them)
// or its error fed back. Written against @e2b/code-interpreter; the suite
// runs it with the import changed only. The "model" is canned steps; the
// package is a wheel the first step builds in the sandbox (no network).

import assert from "node:assert/strict";

import { Sandbox } from "@e2b/code-interpreter";

const BUILD_WHEEL = `
import zipfile
dist = "agent_helpers-1.0.dist-info"
files = {
    "agent_helpers/__init__.py": "def double(x):\\n    return 2 * x\\n",
    dist + "/METADATA": "Metadata-Version: 2.1\\nName: agent_helpers\\nVersion: 1.0\\n",
    dist + "/WHEEL": "Wheel-Version: 1.0\\nGenerator: hand\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
}
files[dist + "/RECORD"] = "".join(name + ",,\\n" for name in files) + dist + "/RECORD,,\\n"
with zipfile.ZipFile("/tmp/agent_helpers-1.0-py3-none-any.whl", "w") as archive:
    for name, text in files.items():
        archive.writestr(name, text)
`;

const ORDER = ["jpeg", "png", "chart", "html", "javascript", "json", "latex", "markdown", "pdf", "svg", "text"];

class E2BExecutor {
  static async create() {
    const executor = new E2BExecutor();
    executor.sandbox = await Sandbox.create();
    await executor.sandbox.runCode(BUILD_WHEEL);
    const installed = await executor.sandbox.runCode(
      "!pip install --no-index --target /tmp/agent-site /tmp/agent_helpers-1.0-py3-none-any.whl",
    );
    if (installed.error) {
      throw new Error(`installing packages failed: ${installed.error.value}`);
    }
    executor.installLog = installed.logs.stdout.join("");
    await executor.sandbox.runCode("import sys\nsys.path.insert(0, '/tmp/agent-site')");
    return executor;
  }

  async run(code) {
    const execution = await this.sandbox.runCode(code);
    const logs = execution.logs.stdout.join("");
    if (execution.error) {
      throw new Error(`${execution.error.name}: ${execution.error.value}`);
    }
    const main = execution.results.find((r) => r.isMainResult);
    for (const name of ORDER) {
      if (main?.[name] !== undefined) {
        return { value: main[name], logs };
      }
    }
    return { value: undefined, logs };
  }
}

const executor = await E2BExecutor.create();
try {
  assert.match(executor.installLog, /Successfully installed/);
  const memory = [];
  for (const step of [
    "import agent_helpers\nprint('imported')\nagent_helpers.double(21)",
    "undefined_name + 1",
    "total = sum(range(10))\nprint(f'total is {total}')\ntotal",
  ]) {
    try {
      memory.push(["observation", await executor.run(step)]);
    } catch (error) {
      memory.push(["error", error.message]);
    }
  }
  assert.deepEqual(memory, [
    ["observation", { value: "42", logs: "imported\n" }],
    ["error", "NameError: name 'undefined_name' is not defined"],
    ["observation", { value: "45", logs: "total is 45\n" }],
  ]);
} finally {
  await executor.sandbox.kill();
}
console.log("ok");
