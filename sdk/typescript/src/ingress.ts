/**
 * Ingress: reaching a server a program started in a sandbox (a dev server,
 * a notebook, an API under test) from outside it, through the server's
 * HTTP ingress (`airlock serve --ingress HOST:PORT`; the local server
 * started on demand serves one on a loopback port of its own).
 *
 * E2B computes `getHost(port)` locally from the sandbox's id and its
 * domain; here the server answers it (`Ingress.GetHost`), since only the
 * server knows where its ingress listens, and with it the sandbox's traffic
 * token, without which a request to a port not made public at create
 * (`publicPorts`) is refused 401. {@link ExposedPort} is the whole answer;
 * `getHost` is its `host`.
 */

import type { Connection, RequestOpts } from "./connection.js";
import { InvalidArgumentError } from "./errors.js";
import type { GetHostResponse } from "./gen/airlock/api/v1/ingress_pb.js";

/** Where a guest port is reached through the server's HTTP ingress. */
export interface ExposedPort {
  /** The guest port. */
  port: number;
  /**
   * The Host a request names: `8000-ID.airlock.localhost:7480` (the port
   * left out when it is the scheme's). Browsers and curl resolve
   * `*.localhost` to loopback; glibc (so Python and Node's `dns.lookup`) does
   * not: connect to `address` with this Host header, or use `pathUrl`.
   */
  host: string;
  /**
   * A URL to open in a browser, with `?airlock_token=TOKEN` unless the port
   * is public: the ingress answers it with a cookie for that host and a
   * redirect to the same URL without the token.
   */
  url: string;
  /** The sandbox's traffic token, for the `X-Airlock-Token` header ("" when the port is public). */
  token: string;
  /** Whether the port was made public at create (`publicPorts`): no token needed. */
  public: boolean;
  /**
   * The same port by path: `http://ADDRESS/_sandbox/ID/8000/` (the prefix is
   * taken off before the request reaches the guest), for clients that
   * cannot resolve `host`. A private port still needs the token.
   */
  pathUrl: string;
  /** The ingress's own address (`127.0.0.1:7480`), to connect to with the Host header set to `host`. */
  address: string;
}

/** The SDK's error for a guest port outside 1 to 65535. */
export function checkPort(call: string, port: number): number {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new InvalidArgumentError(`${call}: port ${String(port)} is not a guest port; give 1 to 65535`, {
      field: "port",
    });
  }
  return port;
}

function exposedPort(port: number, answer: GetHostResponse): ExposedPort {
  return {
    port,
    host: answer.host,
    url: answer.url,
    token: answer.token,
    public: answer.public,
    pathUrl: answer.pathUrl,
    address: answer.address,
  };
}

/** A sandbox's ingress calls (the `Sandbox` class exposes them). */
export class SandboxIngress {
  /** @internal */
  constructor(
    private readonly connection: Connection,
    private readonly sandboxId: string,
  ) {}

  /**
   * Where `port` is reached. A server without ingress rejects with
   * `SandboxError` (reason `UNSUPPORTED`) whose message says how to serve it.
   */
  async expose(call: string, port: number, opts?: RequestOpts): Promise<ExposedPort> {
    checkPort(call, port);
    const answer = await this.connection.call(opts, (o) =>
      this.connection.ingress.getHost({ sandboxId: this.sandboxId, port }, o),
    );
    return exposedPort(port, answer);
  }

  /** A new traffic token; the old one is refused from the next request on. */
  async rotateToken(opts?: RequestOpts): Promise<string> {
    const answer = await this.connection.call(opts, (o) =>
      this.connection.ingress.rotateToken({ sandboxId: this.sandboxId }, o),
    );
    return answer.token;
  }
}
