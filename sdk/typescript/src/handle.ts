/**
 * {@link CommandHandle}: a program running in a sandbox, as its events
 * arrive over a `Processes.Start` or `Processes.Connect` stream.
 *
 * The handle pumps its stream from the moment it exists: output goes to
 * the callbacks as it arrives (decoded as UTF-8 across chunk boundaries,
 * or as bytes for a terminal) and is kept for `stdout`/`stderr`; the exit
 * settles `wait()`. The stream only carries events: stdin, signals and
 * terminal sizes go by their own calls, so the same code runs over gRPC
 * and over gRPC-Web (which cannot stream a request). When the server says
 * the stream was interrupted (the sandbox was saved to disk or forked
 * while it was open), the handle attaches again from the output offset it
 * had reached, so no byte is lost or repeated.
 */

import type { ProcessEvent, ProcessExit } from "./gen/airlock/api/v1/processes_pb.js";
import type { Connection, RequestOpts } from "./connection.js";
import { CHUNK_BYTES, chunks, TextStream, type DataSource } from "./bytes.js";
import { CommandExitError, NotFoundError, SandboxError, TimeoutError, type CommandResult } from "./errors.js";

/** SIGKILL. */
const KILL = 9;
/** Attachments in a row after interruptions, with no event between, before the handle gives up. */
const MAX_REATTACH = 5;

/** Callbacks for a program's output. */
export interface OutputHandlers {
  /** Each piece of stdout as it arrives. */
  onStdout?: (data: string) => void | Promise<void>;
  /** Each piece of stderr as it arrives. */
  onStderr?: (data: string) => void | Promise<void>;
  /** A terminal's output, as bytes (programs started on a pty). */
  onPty?: (data: Uint8Array) => void | Promise<void>;
}

/** How a program ended, as the API said it. */
export interface CommandExit {
  exitCode: number;
  /** The signal that ended it (0: none). */
  signal: number;
  timedOut: boolean;
  oomKilled: boolean;
  durationMs: number;
}

/** The text `CommandResult.error` carries for an exit, if it failed. */
function failure(exit: CommandExit): string | undefined {
  if (exit.timedOut) {
    return "timed out";
  }
  if (exit.oomKilled) {
    return "killed: out of memory";
  }
  if (exit.signal !== 0) {
    return `killed by signal ${exit.signal}`;
  }
  return exit.exitCode === 0 ? undefined : `exit status ${exit.exitCode}`;
}

function fromApi(exit: ProcessExit): CommandExit {
  return {
    exitCode: exit.exitCode,
    signal: exit.signal,
    timedOut: exit.timedOut,
    oomKilled: exit.oomKilled,
    durationMs: Number(exit.durationMs),
  };
}

/** Opens a stream of the program's events from an output offset (0: all the guest holds). */
export type Attach = (offset: bigint, signal: AbortSignal) => AsyncIterable<ProcessEvent>;

/** A program in a sandbox: its pid, its output so far, its exit. */
export class CommandHandle {
  /** The program's pid in the guest. */
  readonly pid: number;
  /** The tag it was started with ("" for none). */
  readonly tag: string;

  private readonly stdoutText = new TextStream();
  private readonly stderrText = new TextStream();
  private exit?: CommandExit;
  private readonly ended: Promise<CommandExit | undefined>;
  private detached = false;

  /**
   * @internal Made by `commands` and `pty` once the program started:
   * pumps `events` (opened with `controller`'s signal, which the caller's
   * `signal` aborts) from now on.
   */
  constructor(
    private readonly connection: Connection,
    private readonly sandboxId: string,
    started: { pid: number; tag: string },
    events: AsyncIterator<ProcessEvent>,
    private readonly attach: Attach,
    private readonly handlers: OutputHandlers,
    private readonly timeoutMs: number | undefined,
    private readonly controller: AbortController,
    private readonly signal: AbortSignal | undefined,
    unlink: () => void,
  ) {
    this.pid = started.pid;
    this.tag = started.tag;
    this.ended = this.pump(events).finally(unlink);
    // Failures are the caller's through wait(); none goes unhandled.
    this.ended.catch(() => undefined);
  }

  /** Everything the program wrote to stdout so far (a terminal's output too). */
  get stdout(): string {
    return this.stdoutText.value;
  }

  /** Everything the program wrote to stderr so far. */
  get stderr(): string {
    return this.stderrText.value;
  }

  /** Its exit code, once it has ended. */
  get exitCode(): number | undefined {
    return this.exit?.exitCode;
  }

  /** Why it failed, once it has ended with a failure. */
  get error(): string | undefined {
    return this.exit === undefined ? undefined : failure(this.exit);
  }

  /** How it ended, in full, once it has. */
  get exitInfo(): CommandExit | undefined {
    return this.exit;
  }

  private async deliver(event: ProcessEvent): Promise<bigint | undefined> {
    switch (event.event.case) {
      case "stdout": {
        const data = event.event.value.data;
        const text = this.stdoutText.push(data);
        if (this.handlers.onPty !== undefined) {
          await this.handlers.onPty(data);
        } else if (text !== "") {
          await this.handlers.onStdout?.(text);
        }
        return event.event.value.offset + BigInt(data.byteLength);
      }
      case "stderr": {
        const data = event.event.value.data;
        const text = this.stderrText.push(data);
        if (text !== "") {
          await this.handlers.onStderr?.(text);
        }
        return event.event.value.offset + BigInt(data.byteLength);
      }
      case "exited":
        this.exit = fromApi(event.event.value);
        return undefined;
      default:
        return undefined;
    }
  }

  /**
   * Reads events until the exit, attaching again after an interruption
   * (at most a few times in a row without an event between).
   */
  private async pump(first: AsyncIterator<ProcessEvent>): Promise<CommandExit | undefined> {
    let events = first;
    let offset = 0n;
    let interruptions = 0;
    while (this.exit === undefined) {
      let next: IteratorResult<ProcessEvent>;
      try {
        next = await events.next();
      } catch (error) {
        if (this.detached) {
          return undefined;
        }
        const mapped = this.connection.error(error, this.signal);
        const again = mapped instanceof SandboxError && mapped.reason === "INTERRUPTED";
        if (again && interruptions < MAX_REATTACH && !this.controller.signal.aborted) {
          interruptions += 1;
          events = this.attach(offset, this.controller.signal)[Symbol.asyncIterator]();
          continue;
        }
        throw mapped;
      }
      if (next.done === true) {
        if (this.detached) {
          return undefined;
        }
        throw new SandboxError(`the stream of process ${this.pid} ended before its exit; attach again with commands.connect(pid)`);
      }
      interruptions = 0;
      try {
        const reached = await this.deliver(next.value);
        if (reached !== undefined) {
          offset = reached;
        }
      } catch (error) {
        // A callback failed: stop listening; the caller hears why.
        this.controller.abort(error);
        throw error;
      }
    }
    await this.finishText();
    return this.exit;
  }

  /** Delivers what the decoders held back (an incomplete character at the end). */
  private async finishText(): Promise<void> {
    const out = this.stdoutText.end();
    const err = this.stderrText.end();
    if (out !== "" && this.handlers.onPty === undefined) {
      await this.handlers.onStdout?.(out);
    }
    if (err !== "") {
      await this.handlers.onStderr?.(err);
    }
  }

  /**
   * Waits for the program's end. Resolves with its output when it exited
   * 0; rejects with `CommandExitError` (carrying the output) for another
   * exit, `TimeoutError` when its `timeoutMs` ran out. After
   * `disconnect()`, asks the server for the exit instead (output is then
   * what arrived before).
   */
  async wait(opts?: RequestOpts): Promise<CommandResult> {
    let exit = await this.ended;
    if (exit === undefined) {
      const answer = await this.connection.call(opts, (o) =>
        this.connection.processes.wait({ sandboxId: this.sandboxId, process: byPid(this.pid) }, o),
      );
      exit = fromApi(answer);
      this.exit = exit;
    }
    const result: CommandResult = {
      exitCode: exit.exitCode,
      error: failure(exit),
      stdout: this.stdout,
      stderr: this.stderr,
    };
    if (exit.timedOut) {
      const after = this.timeoutMs === undefined ? "" : ` after ${this.timeoutMs} ms`;
      throw new TimeoutError(
        `command ${this.pid} timed out${after} and was killed; pass a larger timeoutMs (0: no limit)`,
        { reason: "TIMEOUT" },
      );
    }
    if (exit.exitCode !== 0 || exit.signal !== 0) {
      throw new CommandExitError(result);
    }
    return result;
  }

  /** Kills the program's whole process tree (SIGKILL). False when it had ended already. */
  async kill(opts?: RequestOpts): Promise<boolean> {
    return await killProcess(this.connection, this.sandboxId, this.pid, opts);
  }

  /** Sends data to the program's stdin (it must have been started with stdin open). */
  async sendStdin(data: DataSource, opts?: RequestOpts): Promise<void> {
    await sendStdin(this.connection, this.sandboxId, this.pid, data, false, opts);
  }

  /** Closes the program's stdin: it reads end of file. */
  async closeStdin(opts?: RequestOpts): Promise<void> {
    await sendStdin(this.connection, this.sandboxId, this.pid, new Uint8Array(), true, opts);
  }

  /**
   * Stops receiving the program's events; the program runs on (attach
   * again with `commands.connect(pid)`).
   */
  async disconnect(): Promise<void> {
    this.detached = true;
    this.controller.abort(new DOMException("disconnected", "AbortError"));
    await this.ended.catch(() => undefined);
  }
}

/**
 * Makes `signal` abort `controller` (with its reason); returns what undoes
 * the link.
 */
export function linkSignal(signal: AbortSignal | undefined, controller: AbortController): () => void {
  if (signal === undefined) {
    return () => undefined;
  }
  if (signal.aborted) {
    controller.abort(signal.reason);
    return () => undefined;
  }
  const abort = (): void => controller.abort(signal.reason);
  signal.addEventListener("abort", abort, { once: true });
  return () => signal.removeEventListener("abort", abort);
}

/** The selector of a pid. */
export function byPid(pid: number): { selector: { case: "pid"; value: number } } {
  return { selector: { case: "pid", value: pid } };
}

/** SIGKILL to a program's tree; false when there was no such program. */
export async function killProcess(connection: Connection, sandboxId: string, pid: number, opts?: RequestOpts): Promise<boolean> {
  try {
    await connection.call(opts, (o) => connection.processes.sendSignal({ sandboxId, process: byPid(pid), signal: KILL }, o));
    return true;
  } catch (error) {
    // No such process (the sandbox itself missing is still an error), or
    // one that has exited, which the guest refuses to signal: E2B answers
    // false for both.
    if (error instanceof NotFoundError && error.reason !== "SANDBOX_NOT_FOUND") {
      return false;
    }
    if (error instanceof SandboxError && error.reason === "GUEST_REFUSED" && error.message.includes("exited")) {
      return false;
    }
    throw error;
  }
}

/** Data for a program's stdin, in chunks of at most 1 MiB, then its end if `close`. */
export async function sendStdin(
  connection: Connection,
  sandboxId: string,
  pid: number,
  data: DataSource,
  close: boolean,
  opts?: RequestOpts,
): Promise<void> {
  for await (const chunk of chunks(data, CHUNK_BYTES)) {
    await connection.call(opts, (o) =>
      connection.processes.sendStdin({ sandboxId, process: byPid(pid), data: chunk, close: false }, o),
    );
  }
  if (close) {
    await connection.call(opts, (o) =>
      connection.processes.sendStdin({ sandboxId, process: byPid(pid), data: new Uint8Array(), close: true }, o),
    );
  }
}
