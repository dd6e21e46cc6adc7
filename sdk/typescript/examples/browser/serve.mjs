// Serves the browser example on http://localhost:PORT (default 8080): the
// page, its script, and the SDK's browser build from the installed
// airlock-sdk package. Start the Airlock server with
// `--cors-origin http://localhost:PORT` so the page may call it.
//
//   node serve.mjs [PORT]
//
// Imported, `serve({ port, onResult })` starts the same server and calls
// onResult with what a page run with ?report=1 posts to /result.

import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const files = {
  "/": [join(here, "index.html"), "text/html; charset=utf-8"],
  "/app.js": [join(here, "app.js"), "text/javascript"],
  "/airlock.browser.js": [createRequire(import.meta.url).resolve("airlock-sdk/browser.js"), "text/javascript"],
};

export function serve({ port = 8080, onResult = () => undefined } = {}) {
  const server = createServer((request, response) => {
    const path = new URL(request.url, "http://localhost").pathname;
    if (request.method === "POST" && path === "/result") {
      let body = "";
      request.on("data", (chunk) => {
        body += chunk;
      });
      request.on("end", () => {
        response.end("ok");
        onResult(JSON.parse(body));
      });
      return;
    }
    const file = files[path];
    if (file === undefined) {
      response.writeHead(404).end("not found");
      return;
    }
    response.writeHead(200, { "content-type": file[1] }).end(readFileSync(file[0]));
  });
  return new Promise((resolve) => server.listen(port, "127.0.0.1", () => resolve(server)));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const port = Number(process.argv[2] ?? 8080);
  await serve({ port });
  console.log(`open http://localhost:${port}/ (the server needs --cors-origin http://localhost:${port})`);
}
