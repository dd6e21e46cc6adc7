/**
 * `sandbox.commands`: shell commands in a sandbox, as E2B's JS SDK names
 * them: `run` (to its end, or in the background as a {@link CommandHandle}),
 * `list`, `connect` (attach again, replaying what the guest still holds of
 * its output), `kill`, `sendStdin`.
 *
 * A command line runs as `/bin/sh -c LINE`. A command runs until it exits or
 * is killed, whatever the client does: a background command outlives its
 * handle and can be attached again at any time while the guest keeps it
 * (E2B's detached commands cannot, E2B #1074).
 */

import type { MessageInitShape } from "@bufbuild/protobuf";

import type { Connection, RequestOpts } from "./connection.js";
import type { DataSource } from "./bytes.js";
import type { CommandResult } from "./errors.js";
import { SandboxError } from "./errors.js";
import type { StartProcessSchema, ProcessEvent } from "./gen/airlock/api/v1/processes_pb.js";
import {
  byPid,
  CommandHandle,
  killProcess,
  linkSignal,
  sendStdin,
  type OutputHandlers,
} from "./handle.js";

/** A command's default time limit, as E2B's (`timeoutMs: 0` for none). */
export const DEFAULT_COMMAND_TIMEOUT_MS = 60_000;

/** Options of `commands.run`. */
export interface CommandStartOpts extends RequestOpts {
  /** Return a handle once it started instead of waiting for its end. */
  background?: boolean;
  /** Environment variables, over the sandbox's own. */
  envs?: Record<string, string>;
  /** Its working directory (default the user's home, or /). */
  cwd?: string;
  /** The user it runs as, a name or uid (default root). */
  user?: string;
  /**
   * Milliseconds until the guest kills it (its whole process tree) and it
   * fails with `TimeoutError`. Default 60 000, as E2B's; 0: no limit.
   */
  timeoutMs?: number;
  /**
   * Keep its stdin open for `sendStdin` (default: for background commands;
   * a foreground command's stdin is empty unless this is true).
   */
  stdin?: boolean;
  /** A name to find it by later, unique among running programs. */
  tag?: string;
  /** Each piece of stdout as it arrives. */
  onStdout?: (data: string) => void | Promise<void>;
  /** Each piece of stderr as it arrives. */
  onStderr?: (data: string) => void | Promise<void>;
}

/** Options of `commands.connect`. */
export interface CommandConnectOpts extends RequestOpts {
  onStdout?: (data: string) => void | Promise<void>;
  onStderr?: (data: string) => void | Promise<void>;
  /** Replay from this output offset (default 0: all the guest still holds). */
  offset?: number;
}

/** A program the guest knows, running or recently ended. */
export interface ProcessInfo {
  pid: number;
  /** Its tag ("" for none). */
  tag: string;
  /** The program (`/bin/sh` for a command line). */
  cmd: string;
  /** Its arguments (`["-c", LINE]` for a command line). */
  args: string[];
  /** Environment variables given at its start are not kept by the guest: always {}. */
  envs: Record<string, string>;
  running: boolean;
  /** Its exit code, once it has ended. */
  exitCode?: number;
  /** Whether a client is attached to its output now. */
  attached: boolean;
  /** Output written so far, and the oldest offset the guest still holds. */
  outputBytes: number;
  heldFrom: number;
}

type StartInit = MessageInitShape<typeof StartProcessSchema>;

/**
 * Starts a program and returns its handle once the guest says it runs; a
 * program that cannot start fails here (`NotFoundError` for a missing one).
 */
export async function startProgram(
  connection: Connection,
  start: StartInit,
  handlers: OutputHandlers,
  timeoutMs: number | undefined,
  signal: AbortSignal | undefined,
): Promise<CommandHandle> {
  const sandboxId = start.sandboxId ?? "";
  const controller = new AbortController();
  const unlink = linkSignal(signal, controller);
  // The stream's request is the start alone: stdin, signals and sizes go
  // by their own calls (gRPC-Web cannot stream a request).
  async function* input(): AsyncGenerator<{ input: { case: "start"; value: StartInit } }> {
    yield { input: { case: "start", value: start } };
  }
  const events = connection.processes.start(input(), { signal: controller.signal })[Symbol.asyncIterator]();
  let first: IteratorResult<ProcessEvent>;
  try {
    first = await events.next();
  } catch (error) {
    unlink();
    throw connection.error(error, signal);
  }
  if (first.done === true || first.value.event.case !== "started") {
    unlink();
    controller.abort();
    throw new SandboxError(`the server answered the start of ${JSON.stringify(start.argv)} without its pid`);
  }
  const started = first.value.event.value;
  const attach = (offset: bigint, attachSignal: AbortSignal): AsyncIterable<ProcessEvent> =>
    connection.processes.connect({ sandboxId, process: byPid(started.pid), offset }, { signal: attachSignal });
  return new CommandHandle(connection, sandboxId, started, events, attach, handlers, timeoutMs, controller, signal, unlink);
}

/** Seconds for the API from milliseconds (undefined: none). */
export function seconds(ms: number | undefined): number | undefined {
  return ms === undefined || ms <= 0 ? undefined : ms / 1000;
}

/**
 * Runs `$1` as E2B does, with `bash -l -c` (bash's `[[ ]]`, a login
 * shell's PATH), or with `/bin/sh -c` in an image without bash (busybox).
 */
export const BASH_OR_SH = 'command -v bash >/dev/null 2>&1 && exec bash -l -c "$1"; exec /bin/sh -c "$1"';

/** A command line as the API runs one: E2B's `bash -l -c`, through a `/bin/sh` that falls back to itself. */
export function shell(cmd: string): string[] {
  return ["/bin/sh", "-c", BASH_OR_SH, "sh", cmd];
}

/** A program's argv as E2B reports a command's (`/bin/bash -l -c CMD`), the wrapper of {@link shell} left out. */
export function shownArgv(argv: string[]): string[] {
  if (argv.length === 5 && argv[0] === "/bin/sh" && argv[1] === "-c" && argv[2] === BASH_OR_SH && argv[3] === "sh") {
    return ["/bin/bash", "-l", "-c", argv[4] ?? ""];
  }
  return argv;
}

/** Shell commands in one sandbox. */
export class Commands {
  /** @internal */
  constructor(
    private readonly connection: Connection,
    private readonly sandboxId: string,
  ) {}

  /** Runs a command line to its end: its output, or `CommandExitError` for a non-zero exit. */
  run(cmd: string, opts?: CommandStartOpts & { background?: false }): Promise<CommandResult>;
  /** Starts a command line in the background: its handle, once it runs. */
  run(cmd: string, opts: CommandStartOpts & { background: true }): Promise<CommandHandle>;
  run(cmd: string, opts?: CommandStartOpts): Promise<CommandResult | CommandHandle>;
  async run(cmd: string, opts: CommandStartOpts = {}): Promise<CommandResult | CommandHandle> {
    const background = opts.background === true;
    const timeoutMs = opts.timeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
    const handle = await startProgram(
      this.connection,
      {
        sandboxId: this.sandboxId,
        argv: shell(cmd),
        envs: opts.envs ?? {},
        cwd: opts.cwd ?? "",
        user: opts.user ?? "",
        timeoutSecs: seconds(timeoutMs),
        stdin: opts.stdin ?? background,
        tag: opts.tag ?? "",
        // A foreground command ends with its caller: an aborted call (or a
        // client that went away) kills it.
        killOnDisconnect: !background,
      },
      { onStdout: opts.onStdout, onStderr: opts.onStderr },
      timeoutMs > 0 ? timeoutMs : undefined,
      opts.signal,
    );
    return background ? handle : await handle.wait();
  }

  /** Programs the guest knows: running, and recently ended. */
  async list(opts?: RequestOpts): Promise<ProcessInfo[]> {
    const answer = await this.connection.call(opts, (o) =>
      this.connection.processes.list({ sandboxId: this.sandboxId }, o),
    );
    return answer.processes.map((p) => ({
      pid: p.pid,
      tag: p.tag,
      cmd: shownArgv(p.argv)[0] ?? "",
      args: shownArgv(p.argv).slice(1),
      envs: {},
      running: p.running,
      exitCode: p.exit === undefined ? undefined : p.exit.exitCode,
      attached: p.attached,
      outputBytes: Number(p.outputBytes),
      heldFrom: Number(p.heldFrom),
    }));
  }

  /**
   * Attaches to a running (or recently ended) program: replays the output
   * the guest still holds (its newest 1 MiB) from `offset`, then streams it
   * live. The guest attaches one client at a time: this takes over from
   * any other.
   */
  async connect(pid: number, opts: CommandConnectOpts = {}): Promise<CommandHandle> {
    const controller = new AbortController();
    const unlink = linkSignal(opts.signal, controller);
    const sandboxId = this.sandboxId;
    const attach = (offset: bigint, signal: AbortSignal): AsyncIterable<ProcessEvent> =>
      this.connection.processes.connect({ sandboxId, process: byPid(pid), offset }, { signal });
    const events = attach(BigInt(opts.offset ?? 0), controller.signal)[Symbol.asyncIterator]();
    let first: IteratorResult<ProcessEvent>;
    try {
      first = await events.next();
    } catch (error) {
      unlink();
      throw this.connection.error(error, opts.signal);
    }
    if (first.done === true || first.value.event.case !== "started") {
      unlink();
      controller.abort();
      throw new SandboxError(`the server attached to process ${pid} without saying so`);
    }
    const started = first.value.event.value;
    return new CommandHandle(
      this.connection,
      sandboxId,
      { pid: started.pid === 0 ? pid : started.pid, tag: started.tag },
      events,
      attach,
      { onStdout: opts.onStdout, onStderr: opts.onStderr },
      undefined,
      controller,
      opts.signal,
      unlink,
    );
  }

  /** Kills a program's whole process tree (SIGKILL). False when there is no such program. */
  async kill(pid: number, opts?: RequestOpts): Promise<boolean> {
    return await killProcess(this.connection, this.sandboxId, pid, opts);
  }

  /** Sends data to a program's stdin (started with stdin open). */
  async sendStdin(pid: number, data: DataSource, opts?: RequestOpts): Promise<void> {
    await sendStdin(this.connection, this.sandboxId, pid, data, false, opts);
  }

  /** Closes a program's stdin: it reads end of file. */
  async closeStdin(pid: number, opts?: RequestOpts): Promise<void> {
    await sendStdin(this.connection, this.sandboxId, pid, new Uint8Array(), true, opts);
  }
}
