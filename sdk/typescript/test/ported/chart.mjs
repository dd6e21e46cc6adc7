// A chart from E2B's code interpreter, as E2B's cookbook draws one:
// matplotlib in the sandbox, `plt.show()`, the result's PNG decoded and
// saved here. Written against @e2b/code-interpreter; the suite runs it with
// the import changed only.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";

import { Sandbox } from "@e2b/code-interpreter";

const sandbox = await Sandbox.create();
try {
  const execution = await sandbox.runCode(`
import matplotlib.pyplot as plt
import numpy as np
x = np.linspace(0, 2 * np.pi, 50)
plt.plot(x, np.sin(x))
plt.title("sine")
plt.show()
`);
  assert.equal(execution.error, undefined);
  const charts = execution.results.filter((r) => r.png);
  assert.equal(charts.length, 1);
  const png = Buffer.from(charts[0].png, "base64");
  assert.deepEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
  assert.ok(charts[0].formats().includes("png"));
  writeFileSync(process.argv[2], png);
} finally {
  await sandbox.kill();
}
console.log("ok");
