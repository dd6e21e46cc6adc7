/**
 * What the SDK answers about sandboxes, in JavaScript's shapes (`Date`s,
 * numbers, camelCase, E2B's names where E2B has one), made from the API's
 * messages.
 */

import {
  SandboxState as ApiState,
  type SandboxInfo as ApiSandboxInfo,
  type SandboxMetrics as ApiSandboxMetrics,
  type SandboxUsage as ApiSandboxUsage,
} from "./gen/airlock/api/v1/sandboxes_pb.js";

/** Where a sandbox is in its life. */
export type SandboxState = "running" | "paused" | "on-disk" | "ended";

/** What a sandbox used so far. */
export interface SandboxUsage {
  /** Since it started (until it ended). */
  wallMs: number;
  /** Wall time minus time paused. */
  runningMs: number;
  /** CPU time of its virtual CPUs. */
  guestCpuMs: number;
}

/** A sandbox, as `getInfo()` and `Sandbox.list()` answer it. */
export interface SandboxInfo {
  sandboxId: string;
  /** The template it started from, else its image (E2B always names one). */
  templateId: string;
  /** Its root image ("" for none: the busybox environment). */
  image: string;
  metadata: Record<string, string>;
  state: SandboxState;
  /** Why it ended, once it has. */
  endReason?: string;
  cpuCount: number;
  memoryMB: number;
  startedAt: Date;
  /** When it will be killed (undefined: never). */
  endAt?: Date;
  usage: SandboxUsage;
  /** Whether it has a network (allow rules or secrets). */
  network: boolean;
  /** How it started: "cold", "clone", "pool", "fork", "restored", "adopted". */
  origin: string;
  /** The key that owns it ("" for the machine's owner). */
  owner: string;
  /** The names of the environment variables it was created with. */
  envNames: string[];
  /** Guest ports the server's HTTP ingress serves without the traffic token (`publicPorts` at create). */
  publicPorts: number[];
}

/** One reading of a sandbox's figures. */
export interface SandboxMetrics {
  /** When the figures were read. */
  timestamp: Date;
  /** Its virtual CPUs. */
  cpuCount: number;
  /** Its guest CPU time over its running time since it started, per CPU, in percent. */
  cpuUsedPct: number;
  /** The guest's writable root in use, in bytes (undefined while paused, or where its agent does not measure it). */
  diskUsed?: number;
  /** The guest's writable root's size, in bytes (undefined as `diskUsed`). */
  diskTotal?: number;
  /** Guest memory in use (total minus available), in bytes. */
  memUsed: number;
  /** Guest memory, in bytes (0 while paused or on disk). */
  memTotal: number;
  /** Guest memory free for use, in bytes. */
  memAvailable: number;
  /** CPU time of every program started in it. */
  programsCpuMs: number;
  /** Memory of every program started in it, in bytes. */
  programsMemory: number;
  usage: SandboxUsage;
}

const STATES: Record<number, SandboxState> = {
  [ApiState.RUNNING]: "running",
  [ApiState.PAUSED]: "paused",
  [ApiState.ON_DISK]: "on-disk",
  [ApiState.ENDED]: "ended",
};

/** The API's state for a name. */
export function apiState(state: SandboxState): ApiState {
  switch (state) {
    case "running":
      return ApiState.RUNNING;
    case "paused":
      return ApiState.PAUSED;
    case "on-disk":
      return ApiState.ON_DISK;
    case "ended":
      return ApiState.ENDED;
  }
}

function usage(u: ApiSandboxUsage | undefined): SandboxUsage {
  return {
    wallMs: Number(u?.wallMs ?? 0n),
    runningMs: Number(u?.runningMs ?? 0n),
    guestCpuMs: Number(u?.guestCpuMs ?? 0n),
  };
}

export function sandboxInfo(info: ApiSandboxInfo): SandboxInfo {
  return {
    sandboxId: info.sandboxId,
    templateId: info.template === "" ? info.image : info.template,
    image: info.image,
    metadata: { ...info.metadata },
    state: STATES[info.state] ?? "ended",
    endReason: info.endReason === "" ? undefined : info.endReason,
    cpuCount: info.vcpus,
    memoryMB: info.memoryMib,
    startedAt: new Date(Number(info.createdAtMs)),
    endAt: info.endsAtMs === 0n ? undefined : new Date(Number(info.endsAtMs)),
    usage: usage(info.usage),
    network: info.network,
    origin: info.origin,
    owner: info.owner,
    envNames: [...info.envNames],
    publicPorts: [...info.publicPorts],
  };
}

export function sandboxMetrics(metrics: ApiSandboxMetrics, cpuCount: number): SandboxMetrics {
  const total = Number(metrics.memoryTotalBytes);
  const available = Number(metrics.memoryAvailableBytes);
  const used = usage(metrics.usage);
  const pct = (100 * used.guestCpuMs) / Math.max(used.runningMs, 1) / Math.max(cpuCount, 1);
  const diskTotal = Number(metrics.diskTotalBytes);
  return {
    ...(diskTotal > 0 ? { diskTotal, diskUsed: Number(metrics.diskUsedBytes) } : {}),
    timestamp: new Date(Number(metrics.atMs)),
    cpuCount,
    cpuUsedPct: Math.round(pct * 100) / 100,
    memUsed: Math.max(0, total - available),
    memTotal: total,
    memAvailable: available,
    programsCpuMs: Number(metrics.programsCpuMs),
    programsMemory: Number(metrics.programsMemoryBytes),
    usage: usage(metrics.usage),
  };
}
