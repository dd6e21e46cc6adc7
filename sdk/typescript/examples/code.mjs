// Code in persistent contexts: a value, state between cells, output as it
// comes, an exception, a chart returned as a PNG (saved to chart.png here),
// a context of its own, and bash.
//
//   node code.mjs
//
// Runs on the default image (Debian with Python). The chart is drawn with
// Python's standard library alone (the image has no matplotlib; an image
// with it returns plt.show()'s figures the same way).

import { writeFileSync } from "node:fs";

import { Sandbox } from "airlock-sdk";

const CHART = `
import struct, zlib

class BarChart:
    """A bar chart that renders itself as a PNG, as Jupyter's display() asks."""
    def __init__(self, values, width=240, height=120):
        self.values, self.width, self.height = values, width, height
    def _repr_png_(self):
        w, h, top = self.width, self.height, max(self.values)
        bar = w // len(self.values)
        rows = []
        for y in range(h):
            row = bytearray(b"\\x00")
            for x in range(w):
                i = min(x // bar, len(self.values) - 1)
                filled = h - y <= self.values[i] * (h - 10) / top and x % bar > 3
                row += bytes((40, 110, 200) if filled else (250, 250, 250))
            rows.append(bytes(row))
        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        return (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))
    def __repr__(self):
        return f"BarChart({self.values})"

BarChart(squares)
`;

const sandbox = await Sandbox.create({ timeoutMs: 600_000 });
try {
  console.log("1 + 1 =", (await sandbox.runCode("1 + 1")).text);

  await sandbox.runCode("squares = [n * n for n in range(1, 7)]");
  const printed = await sandbox.runCode("import time\nfor n in squares:\n    print(n, flush=True); time.sleep(0.2)", {
    onStdout: (out) => process.stdout.write(`  as it runs: ${out.line}`),
  });
  console.log(`cell ${printed.executionCount} printed ${printed.logs.stdout.length} pieces`);

  const failed = await sandbox.runCode("squares[10]");
  console.log(`an exception: ${failed.error.name}: ${failed.error.value}`);

  const chart = await sandbox.runCode(CHART);
  const [result] = chart.results;
  console.log(`the chart's formats: ${result.formats().join(", ")}; text: ${result.text}`);
  writeFileSync("chart.png", Buffer.from(result.png, "base64"));
  console.log("saved chart.png");

  const context = await sandbox.createCodeContext({ cwd: "/tmp" });
  const where = await sandbox.runCode("import os; os.getcwd()", { context });
  console.log(`context ${context.id} (Python ${context.languageVersion}) works in ${where.text}`);
  const separate = await sandbox.runCode("squares", { context });
  console.log(`its variables are its own: ${separate.error?.name}`);

  const bash = await sandbox.runCode("cd /etc && ls | head -3", { language: "bash" });
  console.log(`bash: ${bash.logs.stdout.join("").trim().split("\n").join(", ")}`);
} finally {
  await sandbox.kill();
}
