// A web server started in a sandbox, opened from outside it through the
// server's HTTP ingress: the URL to open in a browser (with the sandbox's
// traffic token), a request from here by the path form (Node's resolver,
// glibc's, does not resolve *.localhost), a rotated token refusing the old
// one, and the ingress decisions in the sandbox's audit. The server must
// serve ingress: the local one started on demand does; a remote one needs
// `airlock serve --ingress HOST:PORT`.
//
//   node ingress.mjs

import { Sandbox } from "airlock-sdk";

const sandbox = await Sandbox.create({ timeoutMs: 300_000 });
try {
  await sandbox.files.write("/srv/app/index.html", `<h1>hello from ${sandbox.sandboxId}</h1>\n`);
  await sandbox.commands.run("python3 -m http.server 8000 --directory /srv/app", { background: true });

  const app = await sandbox.expose(8000);
  console.log("open in a browser:", app.url);
  console.log("or send Host:", app.host, "to", app.address, "with X-Airlock-Token:", app.token);

  // The ingress answers 502 until the guest's server listens.
  let answer;
  for (let tries = 0; tries < 100; tries++) {
    answer = await fetch(app.pathUrl, { headers: { "X-Airlock-Token": app.token } });
    if (answer.status !== 502) {
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  console.log(`GET ${app.pathUrl}:`, answer.status, (await answer.text()).trim());

  const token = await sandbox.rotateTrafficToken();
  const old = await fetch(app.pathUrl, { headers: { "X-Airlock-Token": app.token } });
  const renewed = await fetch(app.pathUrl, { headers: { "X-Airlock-Token": token } });
  console.log("after rotateTrafficToken: the old token", old.status, "the new one", renewed.status);

  for (const record of await sandbox.network.audit()) {
    console.log(`audit #${record.seq}: ${record.protocol} ${record.name} port ${record.port}: ${record.verdict}`);
  }
} finally {
  await sandbox.kill();
}
