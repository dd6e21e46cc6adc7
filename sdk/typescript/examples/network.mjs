// A sandbox's network: rules at create, changed while it runs, and the
// audit of what the guest tried. No traffic leaves this machine: the rules
// name test hosts, and the guest's attempts are refused and recorded.
//
//   node network.mjs

import { Sandbox } from "airlock-sdk";

const sandbox = await Sandbox.create({
  timeoutMs: 300_000,
  allowNet: ["packages.example.test:443"],
  // The guest sees a placeholder in $API_TOKEN; the host puts the value into
  // requests to api.example.test only.
  secrets: { API_TOKEN: { value: "sk-example-never-in-the-guest", hosts: ["api.example.test"] } },
});
try {
  console.log("rules:", await sandbox.network.rules());
  console.log("after allow:", await sandbox.network.allow("*.docs.example.test"));
  console.log("after deny:", await sandbox.network.deny("packages.example.test:443"));
  const policy = await sandbox.network.policy();
  console.log("secrets (names and hosts only):", JSON.stringify(policy.secrets));
  console.log("the guest's $API_TOKEN:", (await sandbox.commands.run("echo $API_TOKEN")).stdout.trim());

  // The guest's connect may succeed locally before the host refuses it: a
  // refusal is then an end, a reset, or the host's own answer.
  await sandbox.runCode(
    [
      "import socket",
      "for target in [('192.0.2.1', 80), ('refused.example.test', 443)]:",
      "    try:",
      "        s = socket.create_connection(target, timeout=5)",
      "        s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')",
      "        data = s.recv(200)",
      "        print(target, 'the host answered:', data.split(b'\\r\\n')[0] if data else 'nothing (closed)')",
      "    except OSError as e:",
      "        print(target, 'refused:', e)",
    ].join("\n"),
    { onStdout: (out) => process.stdout.write(`  guest: ${out.line}`) },
  );
  for (const record of await sandbox.network.audit()) {
    console.log(`  audit #${record.seq} ${record.protocol} ${record.name || record.addr}:${record.port} ${record.verdict}`);
  }
} finally {
  await sandbox.kill();
}
