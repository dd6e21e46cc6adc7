/**
 * airlock-sdk for Node (18+): gRPC over HTTP/2 to a remote server
 * (`AIRLOCK_HOST`, `AIRLOCK_API_KEY`, `AIRLOCK_CA_CERT`) or to the local
 * server on its Unix socket, started on demand. Browsers and edge runtimes
 * load `browser` instead (the package's conditions choose).
 */

import { setPlatform } from "./connection.js";
import { nodePlatform } from "./node/platform.js";

setPlatform(nodePlatform);

export * from "./api.js";
export { Sandbox as default } from "./sandbox.js";
