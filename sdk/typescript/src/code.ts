/**
 * Code cells in persistent interpreter contexts, as E2B's code interpreter
 * SDK (`@e2b/code-interpreter`) names them: `runCode` answers an
 * {@link Execution} (results, logs, error, execution count), each
 * {@link Result} with its representations (`text`, `html`, `markdown`,
 * `png`, `json`, ...); contexts are made, listed, restarted, interrupted
 * and removed by id.
 */

import type { Connection, RequestOpts } from "./connection.js";
import { SandboxError, TimeoutError } from "./errors.js";
import { type CodeContext, type CodeResult, type CodeEvent } from "./gen/airlock/api/v1/code_pb.js";
import { linkSignal } from "./handle.js";

/** A piece of a cell's output, as E2B's `OutputMessage`. */
export interface OutputMessage {
  /** The text (a piece as it arrived: one line or more, or part of one). */
  line: string;
  /** When it arrived, in nanoseconds since the Unix epoch (E2B's unit; a double, so to about a microsecond). */
  timestamp: number;
  /** Whether it came on stderr. */
  error: boolean;
}

/** An exception a cell raised. */
export interface ExecutionError {
  /** Its class ("ZeroDivisionError"). */
  name: string;
  /** Its message. */
  value: string;
  /** The traceback, lines joined with newlines. */
  traceback: string;
  /** The traceback's lines (E2B's older SDKs' `tracebackRaw`). */
  tracebackRaw: string[];
}

/** Now, in nanoseconds since the Unix epoch, as E2B's output messages carry it. */
function nowNs(): number {
  return Date.now() * 1e6;
}

/** A JSON value as Python's `repr` writes it (for {@link plainJson}). */
function pyRepr(value: unknown): string {
  if (value === null) {
    return "None";
  }
  if (value === true || value === false) {
    return value ? "True" : "False";
  }
  if (typeof value === "number") {
    return String(value);
  }
  if (typeof value === "string") {
    const quote = value.includes("'") && !value.includes('"') ? '"' : "'";
    const body = value
      .replace(/\\/g, "\\\\")
      .replace(/\n/g, "\\n")
      .replace(/\r/g, "\\r")
      .replace(/\t/g, "\\t")
      .split(quote)
      .join(`\\${quote}`);
    return `${quote}${body}${quote}`;
  }
  if (Array.isArray(value)) {
    return `[${value.map(pyRepr).join(", ")}]`;
  }
  if (typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>);
    return `{${entries.map(([k, v]) => `${pyRepr(k)}: ${pyRepr(v)}`).join(", ")}}`;
  }
  return String(value);
}

/**
 * Whether a result's JSON is only the value's own repr (42 and "42", a
 * dict and its repr): the interpreter adds JSON for a plain value, where
 * IPython (and so E2B) gives JSON only for a value with `_repr_json_`.
 */
export function plainJson(rawJson: string, value: unknown, text: string): boolean {
  if (Array.isArray(value) && text.startsWith("(")) {
    // JSON has no tuples: (1,) and (1, 2) are a list's repr in parentheses.
    const items = value.map(pyRepr);
    return text === (items.length === 1 ? `(${items[0]},)` : `(${items.join(", ")})`);
  }
  return rawJson.trim() === text || pyRepr(value) === text;
}

/** A line of IPython's shell escapes: `!cmd`, or `%pip`, `%conda`, `%sh`, `%system` ... */
const MAGIC = /^([ \t]*)(?:!|%(?=(?:pip|conda|sh|system)\b))(.*)$/;

/** A Python string literal of `text` (JSON's escapes are Python's too). */
function pyString(text: string): string {
  return JSON.stringify(text);
}

/**
 * A cell's IPython shell lines (`!pip install x`, `%pip install x`, which
 * agent frameworks send) as Python that runs them with the shell and prints
 * their output; IPython's other magics stay a SyntaxError. A line that
 * starts with `!` is never Python, so nothing else changes (but a `!` line
 * inside a triple-quoted string would).
 */
export function shellMagics(code: string): string {
  if (!code.includes("!") && !code.includes("%")) {
    return code;
  }
  return code
    .split("\n")
    .map((line) => {
      const match = MAGIC.exec(line);
      const trimmed = line.trimStart();
      if (match === null || trimmed.startsWith("!=")) {
        return line;
      }
      const indent = match[1] ?? "";
      let command = match[2] ?? "";
      if (trimmed.startsWith("%") && command.startsWith("system")) {
        command = command.slice("system".length);
      } else if (trimmed.startsWith("%") && command.startsWith("sh")) {
        command = command.slice("sh".length);
      }
      // -1 and -2 are subprocess.PIPE and STDOUT: the output, both streams
      // in order, printed as the cell's stdout.
      return `${indent}print(__import__('subprocess').run(${pyString(command.trim())}, shell=True, stdout=-1, stderr=-2, text=True).stdout, end='')`;
    })
    .join("\n");
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Base64 of bytes, in any runtime. */
function base64(bytes: Uint8Array): string {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** Whether a MIME type's data are bytes (carried as base64, as Jupyter does). */
function isBinary(mime: string): boolean {
  return (mime.startsWith("image/") && mime !== "image/svg+xml") || mime === "application/pdf";
}

function isJson(mime: string): boolean {
  return mime === "application/json" || mime.endsWith("+json");
}

/**
 * One rich output of a cell: the value of its last expression
 * (`isMainResult`), or something it displayed (`display()`, a plot). Binary
 * representations (PNG, JPEG, PDF) are base64 text, as in Jupyter and E2B.
 */
export class Result {
  readonly text?: string;
  readonly html?: string;
  readonly markdown?: string;
  readonly svg?: string;
  readonly png?: string;
  readonly jpeg?: string;
  readonly pdf?: string;
  readonly latex?: string;
  readonly json?: unknown;
  readonly javascript?: string;
  /** Representations of other MIME types, by type. */
  readonly extra: Record<string, string>;
  readonly isMainResult: boolean;
  /** Every representation by MIME type, as above (text, base64, or parsed JSON). */
  readonly raw: Record<string, unknown>;

  /** @internal */
  constructor(result: CodeResult) {
    const raw: Record<string, unknown> = {};
    const extra: Record<string, string> = {};
    let rawJson: string | undefined;
    for (const item of result.items) {
      let value: unknown;
      if (isBinary(item.mimeType)) {
        value = base64(item.data);
      } else if (isJson(item.mimeType)) {
        const text = decoder.decode(item.data);
        if (item.mimeType === "application/json") {
          rawJson = text;
        }
        try {
          value = JSON.parse(text);
        } catch {
          value = text;
        }
      } else {
        value = decoder.decode(item.data);
      }
      raw[item.mimeType] = value;
    }
    const plain = raw["text/plain"];
    if (rawJson !== undefined && typeof plain === "string" && plainJson(rawJson, raw["application/json"], plain)) {
      delete raw["application/json"];
    }
    const text = (mime: string): string | undefined => (typeof raw[mime] === "string" ? (raw[mime] as string) : undefined);
    this.text = text("text/plain");
    this.html = text("text/html");
    this.markdown = text("text/markdown");
    this.svg = text("image/svg+xml");
    this.png = text("image/png");
    this.jpeg = text("image/jpeg");
    this.pdf = text("application/pdf");
    this.latex = text("text/latex");
    this.json = raw["application/json"];
    this.javascript = text("application/javascript");
    const known = new Set([
      "text/plain",
      "text/html",
      "text/markdown",
      "image/svg+xml",
      "image/png",
      "image/jpeg",
      "application/pdf",
      "text/latex",
      "application/json",
      "application/javascript",
    ]);
    for (const [mime, value] of Object.entries(raw)) {
      if (!known.has(mime)) {
        extra[mime] = typeof value === "string" ? value : JSON.stringify(value);
      }
    }
    this.extra = extra;
    this.isMainResult = result.isMainResult;
    this.raw = raw;
  }

  /** The names of the representations it has besides text ("png", "html", ...). */
  formats(): string[] {
    const names: [keyof Result, string][] = [
      ["html", "html"],
      ["markdown", "markdown"],
      ["svg", "svg"],
      ["png", "png"],
      ["jpeg", "jpeg"],
      ["pdf", "pdf"],
      ["latex", "latex"],
      ["json", "json"],
      ["javascript", "javascript"],
    ];
    const out = names.filter(([key]) => this[key] !== undefined).map(([, name]) => name);
    return [...out, ...Object.keys(this.extra)];
  }

  /** The bytes of a binary representation (PNG, JPEG, PDF). */
  bytes(mime: "image/png" | "image/jpeg" | "application/pdf" | string): Uint8Array | undefined {
    const value = this.raw[mime];
    if (typeof value !== "string") {
      return undefined;
    }
    if (!isBinary(mime)) {
      return encoder.encode(value);
    }
    const binary = atob(value);
    const out = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) {
      out[i] = binary.charCodeAt(i);
    }
    return out;
  }

  /** E2B's serialisable shape: every representation by its field's name, `extra` when there are others. */
  toJSON(): Record<string, unknown> {
    return {
      text: this.text,
      html: this.html,
      markdown: this.markdown,
      svg: this.svg,
      png: this.png,
      jpeg: this.jpeg,
      pdf: this.pdf,
      latex: this.latex,
      json: this.json,
      javascript: this.javascript,
      ...(Object.keys(this.extra).length > 0 ? { extra: this.extra } : {}),
    };
  }
}

/** What a cell did: its results, its output, its error. */
export class Execution {
  readonly results: Result[] = [];
  readonly logs: { stdout: string[]; stderr: string[] } = { stdout: [], stderr: [] };
  error?: ExecutionError;
  /** The cell's number in its interpreter (1 after a start or restart). */
  executionCount?: number;
  /** The interpreter had died, or died during the cell: its state is gone. */
  contextRestarted = false;
  durationMs = 0;

  /** The main result's text (the value of the last expression), if any. */
  get text(): string | undefined {
    return this.results.find((r) => r.isMainResult)?.text;
  }

  /** E2B's serialisable shape: results, logs and error. */
  toJSON(): Record<string, unknown> {
    return {
      results: this.results.map((r) => r.toJSON()),
      logs: this.logs,
      error: this.error,
    };
  }
}

/** An interpreter context. */
export interface Context {
  /** Its id (pass it, or the context, as `runCode`'s `context`). */
  id: string;
  /** "python" or "bash". */
  language: string;
  /** The interpreter's version ("3.11.2"). */
  languageVersion: string;
  /** Its working directory, when it was made with one here. */
  cwd?: string;
  /** Whether a cell runs in it now. */
  busy: boolean;
  /** Cells run since its interpreter (re)started. */
  executionCount: number;
}

/** Options of `runCode`. */
export interface RunCodeOpts extends RequestOpts {
  /** "python" (default) or "bash"; ignored when `context` is given. */
  language?: string;
  /** The context to run in (default: the language's own). */
  context?: Context | string;
  onStdout?: (output: OutputMessage) => void | Promise<void>;
  onStderr?: (output: OutputMessage) => void | Promise<void>;
  onResult?: (result: Result) => void | Promise<void>;
  onError?: (error: ExecutionError) => void | Promise<void>;
  /**
   * Milliseconds until the cell is interrupted and `runCode` fails with
   * `TimeoutError` (the context and its variables stay). Default: none.
   */
  timeoutMs?: number;
}

/** Options of `createCodeContext`. */
export interface CreateCodeContextOpts extends RequestOpts {
  /** "python" (default) or "bash". */
  language?: string;
  /** Its id (default: the server picks one). */
  id?: string;
  /** The interpreter's working directory. */
  cwd?: string;
  envs?: Record<string, string>;
  /** The user it runs as (default root). */
  user?: string;
}

/** Whether a cell runs Python (the default language), where IPython's shell lines are translated. */
function isPython(opts: RunCodeOpts): boolean {
  const language = typeof opts.context === "object" ? opts.context.language : opts.context === undefined ? opts.language : "python";
  return language === undefined || language === "" || language === "python" || language === "python3";
}

function contextOf(context: CodeContext, cwd?: string): Context {
  return {
    id: context.contextId,
    language: context.language,
    languageVersion: context.languageVersion,
    cwd,
    busy: context.busy,
    executionCount: context.executionCount,
  };
}

function idOf(context: Context | string): string {
  return typeof context === "string" ? context : context.id;
}

/** Cells and contexts in one sandbox (the `Sandbox` methods call these). */
export class CodeInterpreter {
  /** @internal */
  constructor(
    private readonly connection: Connection,
    private readonly sandboxId: string,
  ) {}

  async runCode(code: string, opts: RunCodeOpts = {}): Promise<Execution> {
    const controller = new AbortController();
    const unlink = linkSignal(opts.signal, controller);
    const execution = new Execution();
    const stdout = new TextDecoder();
    const stderr = new TextDecoder();
    let timedOut = false;
    const handle = async (event: CodeEvent): Promise<void> => {
      switch (event.event.case) {
        case "stdout":
        case "stderr": {
          const isErr = event.event.case === "stderr";
          const line = (isErr ? stderr : stdout).decode(event.event.value, { stream: true });
          if (line === "") {
            return;
          }
          (isErr ? execution.logs.stderr : execution.logs.stdout).push(line);
          const message: OutputMessage = { line, timestamp: nowNs(), error: isErr };
          await (isErr ? opts.onStderr : opts.onStdout)?.(message);
          return;
        }
        case "result": {
          const result = new Result(event.event.value);
          execution.results.push(result);
          await opts.onResult?.(result);
          return;
        }
        case "error": {
          // The interpreter's lines end in newlines of their own; E2B's
          // traceback is the lines joined by one.
          const lines = event.event.value.traceback.map((line) => line.replace(/\n+$/, ""));
          const error: ExecutionError = {
            name: event.event.value.name,
            value: event.event.value.value,
            traceback: lines.join("\n"),
            tracebackRaw: lines,
          };
          execution.error = error;
          await opts.onError?.(error);
          return;
        }
        case "done": {
          const done = event.event.value;
          execution.executionCount = done.executionCount;
          execution.contextRestarted = done.contextRestarted;
          execution.durationMs = Number(done.durationMs);
          timedOut = done.timedOut;
          return;
        }
        default:
          return;
      }
    };
    let done = false;
    let failed: { error: unknown } | undefined;
    try {
      const events = this.connection.code.runCode(
        {
          sandboxId: this.sandboxId,
          code: isPython(opts) ? shellMagics(code) : code,
          language: opts.context === undefined ? (opts.language ?? "") : "",
          contextId: opts.context === undefined ? "" : idOf(opts.context),
          timeoutSecs: opts.timeoutMs === undefined || opts.timeoutMs <= 0 ? undefined : opts.timeoutMs / 1000,
        },
        { signal: controller.signal },
      );
      for await (const event of events) {
        try {
          await handle(event);
        } catch (error) {
          // A callback failed: the cell's call ends (which interrupts the
          // cell); the caller hears why.
          failed = { error };
          controller.abort(error);
          break;
        }
        if (event.event.case === "done") {
          done = true;
        }
      }
    } catch (error) {
      throw this.connection.error(error, opts.signal);
    } finally {
      unlink();
    }
    if (failed !== undefined) {
      throw failed.error;
    }
    for (const [decoder, isErr] of [
      [stdout, false],
      [stderr, true],
    ] as const) {
      const rest = decoder.decode();
      if (rest !== "") {
        (isErr ? execution.logs.stderr : execution.logs.stdout).push(rest);
        await (isErr ? opts.onStderr : opts.onStdout)?.({ line: rest, timestamp: nowNs(), error: isErr });
      }
    }
    if (!done) {
      throw new SandboxError("the cell's stream ended before the cell did");
    }
    if (timedOut) {
      throw new TimeoutError(
        `the cell ran past its ${opts.timeoutMs} ms and was interrupted (its context and variables stay); pass a larger timeoutMs`,
        { reason: "TIMEOUT" },
      );
    }
    return execution;
  }

  async createCodeContext(opts: CreateCodeContextOpts = {}): Promise<Context> {
    const context = await this.connection.call(opts, (o) =>
      this.connection.code.createContext(
        {
          sandboxId: this.sandboxId,
          language: opts.language ?? "",
          contextId: opts.id ?? "",
          cwd: opts.cwd ?? "",
          envs: opts.envs ?? {},
          user: opts.user ?? "",
        },
        o,
      ),
    );
    return contextOf(context, opts.cwd);
  }

  async listCodeContexts(opts?: RequestOpts): Promise<Context[]> {
    const answer = await this.connection.call(opts, (o) =>
      this.connection.code.listContexts({ sandboxId: this.sandboxId }, o),
    );
    return answer.contexts.map((c) => contextOf(c));
  }

  async restartCodeContext(context: Context | string, opts?: RequestOpts): Promise<Context> {
    return contextOf(
      await this.connection.call(opts, (o) =>
        this.connection.code.restartContext({ sandboxId: this.sandboxId, contextId: idOf(context) }, o),
      ),
    );
  }

  async interruptCodeContext(context: Context | string, opts?: RequestOpts): Promise<Context> {
    return contextOf(
      await this.connection.call(opts, (o) =>
        this.connection.code.interruptContext({ sandboxId: this.sandboxId, contextId: idOf(context) }, o),
      ),
    );
  }

  async removeCodeContext(context: Context | string, opts?: RequestOpts): Promise<void> {
    await this.connection.call(opts, (o) =>
      this.connection.code.removeContext({ sandboxId: this.sandboxId, contextId: idOf(context) }, o),
    );
  }
}
