/**
 * airlock-sdk for browsers and edge runtimes: gRPC-Web over `fetch` to the
 * server the options name (`{ host, apiKey }`; the server allows the page's
 * origin with `airlock serve --cors-origin ORIGIN`). Node may load it too
 * (`airlock-sdk/web`) to take the same path.
 */

import { setPlatform } from "./connection.js";
import { webPlatform } from "./web/platform.js";

setPlatform(webPlatform);

export * from "./api.js";
export { createWebTransport } from "./web/transport.js";
export { Sandbox as default } from "./sandbox.js";
