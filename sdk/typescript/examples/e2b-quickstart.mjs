// E2B's quick start, unchanged but for the import: a code interpreter
// sandbox (Airlock's default image, with Python), a variable kept between
// cells, a shell command.
//
//   node e2b-quickstart.mjs
//
// Written for E2B it began `import { Sandbox } from '@e2b/code-interpreter'`.

import { Sandbox } from "airlock-sdk";

const sbx = await Sandbox.create();
await sbx.runCode("x = 1");
const execution = await sbx.runCode("x+=1; x");
console.log(execution.text); // 2

const result = await sbx.commands.run("ls -l /");
console.log(result.stdout.split("\n").slice(0, 4).join("\n"));
await sbx.kill();
