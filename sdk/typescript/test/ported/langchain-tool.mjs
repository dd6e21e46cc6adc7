// A LangChain.js-style tool over E2B's code interpreter: a name, a
// description, `_call(input)` answering the model with JSON text (stdout,
// stderr, results, or the error), and files uploaded for the model.
// Written against @e2b/code-interpreter; the suite runs it with the import
// changed only.

import assert from "node:assert/strict";

import { Sandbox } from "@e2b/code-interpreter";

class E2BCodeTool {
  name = "e2b_code_interpreter";
  description = "Runs Python in a sandbox; uploaded files are in its home directory.";

  static async create() {
    const tool = new E2BCodeTool();
    tool.sandbox = await Sandbox.create();
    return tool;
  }

  async upload(name, content) {
    const info = await this.sandbox.files.write(name, content);
    return `uploaded ${name} to ${info.path}`;
  }

  async _call(code) {
    const execution = await this.sandbox.runCode(code);
    if (execution.error) {
      return JSON.stringify({ error: `${execution.error.name}: ${execution.error.value}`, traceback: execution.error.traceback });
    }
    return JSON.stringify({
      stdout: execution.logs.stdout.join(""),
      stderr: execution.logs.stderr.join(""),
      results: execution.results.map((r) => r.toJSON()),
    });
  }

  async close() {
    await this.sandbox.kill();
  }
}

const tool = await E2BCodeTool.create();
try {
  assert.match(await tool.upload("sales.csv", "region,amount\nnorth,10\nsouth,32\n"), /^uploaded sales\.csv to \//);
  const answer = JSON.parse(
    await tool._call(
      "import csv, os, sys\n" +
        "rows = list(csv.DictReader(open(os.path.expanduser('~/sales.csv'))))\n" +
        "print(len(rows), 'rows')\n" +
        "print('warn', file=sys.stderr)\n" +
        "sum(int(r['amount']) for r in rows)",
    ),
  );
  assert.deepEqual(answer, { stdout: "2 rows\n", stderr: "warn\n", results: [{ text: "42" }] });
  const failed = JSON.parse(await tool._call("open('missing.csv')"));
  assert.match(failed.error, /^FileNotFoundError: /);
  assert.ok(failed.traceback.includes("Traceback") && !failed.traceback.includes("\n\n"), failed.traceback);
} finally {
  await tool.close();
}
console.log("ok");
