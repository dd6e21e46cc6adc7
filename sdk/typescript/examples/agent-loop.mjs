// An agent's loop: code a model wrote runs in a sandbox with a time limit,
// and every outcome (a value, an exception, a timeout, a shell failure)
// comes back as something the model can read next turn. The "model" here
// is a list of replies; put your model's call in nextReply().
//
//   node agent-loop.mjs

import { CommandExitError, Sandbox, TimeoutError } from "airlock-sdk";

const replies = [
  { kind: "python", code: "import platform\nplatform.python_version()" },
  { kind: "python", code: "sum(n * n for n in range(10))" },
  { kind: "python", code: "int('not a number')" },
  { kind: "python", code: "while True:\n    pass" },
  { kind: "shell", code: "ls /no/such/dir" },
  { kind: "shell", code: "echo done > /tmp/result.txt && cat /tmp/result.txt" },
];

function nextReply(turn) {
  return replies[turn];
}

/** Runs one reply; answers what the model will be told. */
async function act(sandbox, reply) {
  try {
    if (reply.kind === "shell") {
      const result = await sandbox.commands.run(reply.code, { timeoutMs: 10_000 });
      return `exit 0\n${result.stdout}`;
    }
    const execution = await sandbox.runCode(reply.code, { timeoutMs: 3_000 });
    if (execution.error) {
      return `${execution.error.name}: ${execution.error.value}`;
    }
    return `${execution.logs.stdout.join("")}${execution.text ?? ""}`;
  } catch (error) {
    if (error instanceof TimeoutError) {
      return "timed out: the code was stopped (its context is kept)";
    }
    if (error instanceof CommandExitError) {
      return `${error.error}\n${error.stderr}`;
    }
    throw error;
  }
}

const sandbox = await Sandbox.create({ timeoutMs: 600_000, metadata: { example: "agent-loop" } });
try {
  for (let turn = 0; turn < replies.length; turn++) {
    const reply = nextReply(turn);
    const observation = await act(sandbox, reply);
    console.log(`turn ${turn + 1} (${reply.kind}): ${reply.code.split("\n")[0]}\n  -> ${observation.trim()}`);
  }
} finally {
  await sandbox.kill();
}
