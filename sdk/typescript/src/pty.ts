/**
 * `sandbox.pty`: interactive terminals, as E2B's JS SDK names them. A
 * terminal is a program (a login shell by default) on a pseudo-terminal of
 * the size asked; its output arrives as bytes in `onData`; keystrokes go
 * by `sendInput`, sizes by `resize`.
 */

import type { Connection, RequestOpts } from "./connection.js";
import type { DataSource } from "./bytes.js";
import { seconds, startProgram } from "./commands.js";
import { byPid, killProcess, sendStdin, type CommandHandle } from "./handle.js";

/** A terminal's size. */
export interface PtySize {
  cols: number;
  rows: number;
}

/** Options of `pty.create`. */
export interface PtyCreateOpts extends RequestOpts, PtySize {
  /** The terminal's output as it arrives. */
  onData: (data: Uint8Array) => void | Promise<void>;
  /** Environment variables over the sandbox's (TERM is xterm-256color unless set). */
  envs?: Record<string, string>;
  cwd?: string;
  user?: string;
  /** Milliseconds until the guest kills it (default and 0: no limit). */
  timeoutMs?: number;
  /** The program (default `["/bin/sh", "-l"]`). */
  cmd?: string[];
}

/** Terminals in one sandbox. */
export class Pty {
  /** @internal */
  constructor(
    private readonly connection: Connection,
    private readonly sandboxId: string,
  ) {}

  /** Starts a terminal; its handle's `pid` names it to the other calls. */
  async create(opts: PtyCreateOpts): Promise<CommandHandle> {
    return await startProgram(
      this.connection,
      {
        sandboxId: this.sandboxId,
        argv: opts.cmd ?? ["/bin/sh", "-l"],
        envs: { TERM: "xterm-256color", ...opts.envs },
        cwd: opts.cwd ?? "",
        user: opts.user ?? "",
        timeoutSecs: seconds(opts.timeoutMs),
        pty: { rows: opts.rows, cols: opts.cols },
      },
      { onPty: opts.onData },
      opts.timeoutMs,
      opts.signal,
    );
  }

  /** Sends keystrokes (bytes or text) to a terminal. */
  async sendInput(pid: number, data: DataSource, opts?: RequestOpts): Promise<void> {
    await sendStdin(this.connection, this.sandboxId, pid, data, false, opts);
  }

  /** Gives a terminal a new size. */
  async resize(pid: number, size: PtySize, opts?: RequestOpts): Promise<void> {
    await this.connection.call(opts, (o) =>
      this.connection.processes.resize(
        { sandboxId: this.sandboxId, process: byPid(pid), size: { rows: size.rows, cols: size.cols } },
        o,
      ),
    );
  }

  /** Kills a terminal's program and everything it started. False when it had ended. */
  async kill(pid: number, opts?: RequestOpts): Promise<boolean> {
    return await killProcess(this.connection, this.sandboxId, pid, opts);
  }
}
