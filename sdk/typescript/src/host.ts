/**
 * A server's address as users write it: `https://HOST:PORT`, `HOST:PORT`
 * (https), or `http://` to a loopback address only, as the CLI reads
 * `AIRLOCK_HOST`.
 */

import { InvalidArgumentError } from "./errors.js";

function isLoopback(hostname: string): boolean {
  const bare = hostname.replace(/^\[/, "").replace(/\]$/, "");
  return bare === "localhost" || bare.endsWith(".localhost") || /^127\.\d+\.\d+\.\d+$/.test(bare) || bare === "::1";
}

/** The server's base URL (no trailing slash). */
export function serverUrl(host: string): string {
  const text = host.trim();
  const withScheme = text.includes("://") ? text : `https://${text}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw new InvalidArgumentError(`AIRLOCK_HOST ${JSON.stringify(host)} is not https://HOST:PORT`, { field: "host" });
  }
  if (url.protocol === "http:" && !isLoopback(url.hostname)) {
    throw new InvalidArgumentError(`${host}: plain http only to a loopback address; use https://`, { field: "host" });
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new InvalidArgumentError(`${host}: the scheme is https:// (or http:// to a loopback address)`, { field: "host" });
  }
  return `${url.protocol}//${url.host}`;
}
