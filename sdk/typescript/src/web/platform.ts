/**
 * The web's {@link Platform}: gRPC-Web over `fetch` to the server the
 * options name. Browsers and edge runtimes have no environment to read and
 * no local server to start, so `host` is required; certificates are the
 * runtime's to trust.
 */

import { headersInterceptor, type ConnectionOpts, type OpenedTransport, type Platform } from "../connection.js";
import { InvalidArgumentError } from "../errors.js";
import { serverUrl } from "../host.js";
import { createWebTransport } from "./transport.js";

/** A number per `fetch` function callers passed, so each gets its own connection. */
const fetchIds = new WeakMap<object, number>();
let nextFetchId = 1;

function fetchId(fetchFn: typeof globalThis.fetch | undefined): number {
  if (fetchFn === undefined) {
    return 0;
  }
  let id = fetchIds.get(fetchFn);
  if (id === undefined) {
    id = nextFetchId++;
    fetchIds.set(fetchFn, id);
  }
  return id;
}

export const webPlatform: Platform = {
  name: "web",

  key(opts: ConnectionOpts): string {
    return JSON.stringify(["web", opts.host, opts.apiKey, opts.headers, opts.requestTimeoutMs, fetchId(opts.fetch)]);
  },

  async open(opts: ConnectionOpts): Promise<OpenedTransport> {
    if (opts.host === undefined || opts.host === "") {
      throw new InvalidArgumentError(
        "no server: pass { host: 'https://HOST:PORT', apiKey } (browsers and edge runtimes have no local server)",
        { field: "host" },
      );
    }
    const baseUrl = serverUrl(opts.host);
    const transport = createWebTransport({
      baseUrl,
      fetch: opts.fetch,
      interceptors: [headersInterceptor(opts.apiKey, opts.headers)],
    });
    return { transport, target: baseUrl, resolved: { ...opts }, streamsRequests: false };
  },
};
