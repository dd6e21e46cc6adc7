/**
 * `sandbox.network`: the rules that decide every connection and DNS query
 * of a sandbox created with `allowNet` or `secrets`, and the record of what
 * was allowed and refused, both ways: the guest's connections out, and
 * requests into it through the server's HTTP ingress. Rule changes apply
 * to new connections; open ones stay. A sandbox without a network answers
 * `NO_NETWORK`, except `audit`, which answers its ingress records alone.
 */

import type { Connection, RequestOpts } from "./connection.js";
import type { NetworkPolicy } from "./gen/airlock/api/v1/network_pb.js";

/**
 * E2B's name for every address (`network: { denyOut: [ALL_TRAFFIC] }`); an
 * Airlock sandbox denies it unless rules allow more.
 */
export const ALL_TRAFFIC = "0.0.0.0/0";

/** A secret bound to hosts: its name and hosts, never its value. */
export interface BoundSecret {
  name: string;
  hosts: string[];
}

/** The rules, and the secrets bound to hosts. */
export interface NetworkPolicyInfo {
  /** The allow rules, in order, as the server writes them. */
  rules: string[];
  secrets: BoundSecret[];
}

/**
 * What an audit record decided: the guest's DNS query, TCP connection, TLS
 * or HTTP request, or proxy use (egress); or, for "ingress", a connection
 * from outside to a guest port through the server's HTTP ingress. A newer
 * server may add others, which come as they are named.
 */
export type AuditProtocol = "dns" | "tcp" | "tls" | "http" | "proxy" | "ingress" | (string & {});

/** One decision of the sandbox's network. */
export interface AuditRecord {
  /** Its place in the log, from 1. */
  seq: number;
  at: Date;
  protocol: AuditProtocol;
  /**
   * The name the guest used (DNS query, TLS server name, HTTP Host), if
   * known; for "ingress", `from CLIENT_ADDRESS`.
   */
  name: string;
  /** The address dialed, or the one the guest asked for, if known ("" for "ingress"). */
  addr: string;
  /** The port dialed; for "ingress", the guest port the request was for. */
  port: number;
  allowed: boolean;
  /** "allowed", or "refused: " and why. */
  verdict: string;
}

function policyOf(policy: NetworkPolicy): NetworkPolicyInfo {
  return {
    rules: [...policy.rules],
    secrets: policy.secrets.map((s) => ({ name: s.name, hosts: [...s.hosts] })),
  };
}

function list(rules: string | string[]): string[] {
  return typeof rules === "string" ? [rules] : rules;
}

/** A sandbox's network policy and audit log. */
export class Network {
  /** @internal */
  constructor(
    private readonly connection: Connection,
    private readonly sandboxId: string,
  ) {}

  /** The allow rules, in order. */
  async rules(opts?: RequestOpts): Promise<string[]> {
    return (await this.policy(opts)).rules;
  }

  /** The rules and the bound secrets' names and hosts. */
  async policy(opts?: RequestOpts): Promise<NetworkPolicyInfo> {
    return policyOf(
      await this.connection.call(opts, (o) => this.connection.network.getPolicy({ sandboxId: this.sandboxId }, o)),
    );
  }

  /** Adds rules the policy lacks ("example.com", "*.example.com:443", "10.0.0.0/8:5432"); answers the rules. */
  async allow(rules: string | string[], opts?: RequestOpts): Promise<string[]> {
    return await this.change(list(rules), [], opts);
  }

  /** Removes rules (each must be one of the policy's); answers the rules. */
  async deny(rules: string | string[], opts?: RequestOpts): Promise<string[]> {
    return await this.change([], list(rules), opts);
  }

  /** Replaces every rule at once; answers the rules. */
  async setRules(rules: string[], opts?: RequestOpts): Promise<string[]> {
    const policy = await this.connection.call(opts, (o) =>
      this.connection.network.replacePolicy({ sandboxId: this.sandboxId, rules }, o),
    );
    return [...policy.rules];
  }

  private async change(allow: string[], deny: string[], opts?: RequestOpts): Promise<string[]> {
    const policy = await this.connection.call(opts, (o) =>
      this.connection.network.changePolicy({ sandboxId: this.sandboxId, allow, deny }, o),
    );
    return [...policy.rules];
  }

  /**
   * The decisions, oldest first (the newest 4096 are kept), after
   * `afterSeq`: egress and ingress together; a sandbox without a network
   * has its ingress records alone.
   */
  async audit(opts: RequestOpts & { afterSeq?: number } = {}): Promise<AuditRecord[]> {
    const answer = await this.connection.call(opts, (o) =>
      this.connection.network.audit({ sandboxId: this.sandboxId, afterSeq: BigInt(opts.afterSeq ?? 0) }, o),
    );
    return answer.records.map((r) => ({
      seq: Number(r.seq),
      at: new Date(Number(r.atMs)),
      protocol: r.protocol,
      name: r.name,
      addr: r.addr,
      port: r.port,
      allowed: r.allowed,
      verdict: r.verdict,
    }));
  }
}
