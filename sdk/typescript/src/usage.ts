/**
 * The server's usage ledger (`Usage.Query`, API revision 7; Airlock's, E2B
 * has none): what sandboxes used, by sandbox, key, or key and UTC day.
 * `usageFor` makes the `Usage` each entry point exports, on its platform.
 */

import { Connection, type ConnectionOpts, type Platform, type RequestOpts } from "./connection.js";
import { InvalidArgumentError } from "./errors.js";
import { UsageGrouping, type UsageRow as ApiUsageRow } from "./gen/airlock/api/v1/usage_pb.js";

/** How `Usage.query` groups its rows. */
export type UsageBy = "sandbox" | "key" | "day";

/** Options of `Usage.query`. */
export interface UsageQueryOpts extends ConnectionOpts, RequestOpts {
  /**
   * Whose usage: a key sees its own; the owner (on the Unix socket) every
   * key's, or this key's (`"_owner"`: the owner's own sandboxes).
   */
  key?: string;
  /** The hours starting from this (taken back to the start of its hour); default: from the first. */
  since?: Date;
  /** The hours starting before this; default: up to now. */
  until?: Date;
  /** One row per sandbox (the default), per key, or per key and UTC day. */
  by?: UsageBy;
}

/**
 * What a sandbox, a key or a key's UTC day used in the period. Times are
 * milliseconds; the products (`vcpuMs`, `memoryMibMs`, `diskMibMs`) are of
 * vCPUs or MiB and milliseconds, exact; the `...Seconds` fields give the
 * billing units.
 */
export interface UsageRow {
  /** By sandbox: the sandbox ("" otherwise). */
  sandboxId: string;
  /** The key ("" for the server machine's owner). */
  key: string;
  /** By day: the UTC day, `YYYY-MM-DD` ("" otherwise). */
  day: string;
  /** How many sandboxes the row sums. */
  sandboxes: number;
  /** The start of the row's first hour and the end of its last. */
  periodStart: Date;
  periodEnd: Date;
  /** Running (not paused). */
  runningMs: number;
  /** Paused with its memory held. */
  pausedMs: number;
  /** Saved to disk. */
  onDiskMs: number;
  /** CPU time its virtual CPUs used. */
  guestCpuMs: number;
  /** vCPUs times running time. */
  vcpuMs: number;
  /** Guest memory (MiB) times the time it was held (running and paused in memory). */
  memoryMibMs: number;
  /** Disk held (MiB) times the time: the named workspace's size while it lives, its saved files while on disk. */
  diskMibMs: number;
  vcpuSeconds: number;
  memoryGiBSeconds: number;
  diskGiBSeconds: number;
  /** Bytes on connections the guest opened: sent, and received. */
  egressSentBytes: number;
  egressReceivedBytes: number;
  /** Bytes on connections into its ports (the ingress): received from clients, and sent back. */
  ingressReceivedBytes: number;
  ingressSentBytes: number;
  /** By sandbox: its size and life (`endedAt` undefined while it lives, lies on disk, or was left for the next server). */
  memoryMB: number;
  cpuCount: number;
  createdAt?: Date;
  endedAt?: Date;
}

const GROUPINGS: Record<UsageBy, UsageGrouping> = {
  sandbox: UsageGrouping.SANDBOX,
  key: UsageGrouping.KEY,
  day: UsageGrouping.DAY,
};

function ms(field: string, when: Date | undefined): bigint {
  if (when === undefined) {
    return 0n;
  }
  if (!(when instanceof Date) || Number.isNaN(when.getTime())) {
    throw new InvalidArgumentError(`${field}: ${String(when)} is not a Date`, { field });
  }
  return BigInt(Math.max(0, Math.floor(when.getTime())));
}

export function usageRow(row: ApiUsageRow): UsageRow {
  const date = (value: bigint): Date | undefined => (value === 0n ? undefined : new Date(Number(value)));
  const memoryMibMs = Number(row.memoryMibMs);
  const diskMibMs = Number(row.diskMibMs);
  return {
    sandboxId: row.sandboxId,
    key: row.key,
    day: row.day,
    sandboxes: row.sandboxes,
    periodStart: new Date(Number(row.fromMs)),
    periodEnd: new Date(Number(row.toMs)),
    runningMs: Number(row.runningMs),
    pausedMs: Number(row.pausedMs),
    onDiskMs: Number(row.onDiskMs),
    guestCpuMs: Number(row.guestCpuMs),
    vcpuMs: Number(row.vcpuMs),
    memoryMibMs,
    diskMibMs,
    vcpuSeconds: Number(row.vcpuMs) / 1000,
    memoryGiBSeconds: memoryMibMs / 1024 / 1000,
    diskGiBSeconds: diskMibMs / 1024 / 1000,
    egressSentBytes: Number(row.egressSentBytes),
    egressReceivedBytes: Number(row.egressReceivedBytes),
    ingressReceivedBytes: Number(row.ingressReceivedBytes),
    ingressSentBytes: Number(row.ingressSentBytes),
    memoryMB: row.memoryMib,
    cpuCount: row.vcpus,
    createdAt: date(row.createdAtMs),
    endedAt: date(row.endedAtMs),
  };
}

/** `Usage`: the server's usage ledger. */
export interface UsageStatics {
  /** The ledger's rows for the period, one per sandbox, key, or key and UTC day. */
  query(options?: UsageQueryOpts): Promise<UsageRow[]>;
}

/** The `Usage` of an entry point, on its platform. */
export function usageFor(platform: Platform): UsageStatics {
  return {
    async query(options: UsageQueryOpts = {}): Promise<UsageRow[]> {
      const by = GROUPINGS[options.by ?? "sandbox"];
      if (by === undefined) {
        throw new InvalidArgumentError(`by: ${JSON.stringify(options.by)}: one of "sandbox", "key", "day"`, {
          field: "by",
        });
      }
      const request = {
        key: options.key ?? "",
        sinceMs: ms("since", options.since),
        untilMs: ms("until", options.until),
        by,
      };
      const connection = await Connection.get(platform, options, options.signal);
      const answer = await connection.call(options, (o) => connection.usage.query(request, o));
      return answer.rows.map(usageRow);
    },
  };
}
