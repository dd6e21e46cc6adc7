/**
 * airlock-sdk for Node (18+): gRPC over HTTP/2 to a remote server
 * (`AIRLOCK_HOST`, `AIRLOCK_API_KEY`, `AIRLOCK_CA_CERT`) or to the local
 * server on its Unix socket, started on demand. Browsers and edge runtimes
 * load `browser` instead (the package's conditions choose).
 */

import type { Platform } from "./connection.js";
import { Sandbox as SandboxBase } from "./sandbox.js";
import { templateFor, type TemplateFactory } from "./template.js";
import { usageFor, type UsageStatics } from "./usage.js";
import { nodePlatform } from "./node/platform.js";

export * from "./api.js";

/** A sandbox on an Airlock server (see {@link SandboxBase}), reached with this entry's transports. */
export class Sandbox extends SandboxBase {
  static override platform: Platform = nodePlatform;
}

/** E2B's `Template`: `Template()` makes a builder; `Template.build`, `list`, `exists`, `delete`. */
export const Template: TemplateFactory = templateFor(nodePlatform);

/** The server's usage ledger: `Usage.query({ by: "day", since })`. */
export const Usage: UsageStatics = usageFor(nodePlatform);

export default Sandbox;
