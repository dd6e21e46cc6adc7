/**
 * airlock-sdk for browsers and edge runtimes: gRPC-Web over `fetch` to the
 * server the options name (`{ host, apiKey }`; the server allows the page's
 * origin with `airlock serve --cors-origin ORIGIN`). Node may load it too
 * (`airlock-sdk/web`) to take the same path.
 */

import type { Platform } from "./connection.js";
import { Sandbox as SandboxBase } from "./sandbox.js";
import { templateFor, type TemplateFactory } from "./template.js";
import { usageFor, type UsageStatics } from "./usage.js";
import { webPlatform } from "./web/platform.js";

export * from "./api.js";
export { createWebTransport } from "./web/transport.js";

/** A sandbox on an Airlock server (see {@link SandboxBase}), reached with this entry's transports. */
export class Sandbox extends SandboxBase {
  static override platform: Platform = webPlatform;
}

/** E2B's `Template`: `Template()` makes a builder; `Template.build`, `list`, `exists`, `delete`. */
export const Template: TemplateFactory = templateFor(webPlatform);

/** The server's usage ledger: `Usage.query({ by: "day", since })`. */
export const Usage: UsageStatics = usageFor(webPlatform);

export default Sandbox;
