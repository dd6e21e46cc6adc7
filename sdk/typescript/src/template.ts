/**
 * Templates built through the API (`Templates.Build`, `DeleteTemplate`,
 * `Sandboxes.ListTemplates`) with E2B's `Template` vocabulary:
 * `Template()` makes a {@link TemplateBuilder} (`fromImage`,
 * `fromBaseImage`, `fromDockerfile`, `copy`, `runCmd`, `setEnvs`,
 * `setWorkdir`, `setUser`, `setStartCmd`, `setReadyCmd`) that writes
 * Airlock's template file (the Dockerfile subset of the repository's
 * docs/templates.md); `Template.build(template, name, { onBuildLogs })`
 * sends the file and, when it copies anything, its context directory as a
 * tar stream, hands each step, output line and phase to `onBuildLogs` as
 * {@link LogEntry} items, and answers the {@link TemplateInfo}.
 * `Template.list`, `exists` and `delete` are Airlock's.
 *
 * A build streams its context, so it needs Node (the host's files, gRPC
 * over HTTP/2); the web entry lists and deletes templates but refuses a
 * build, saying so.
 */

import type { MessageInitShape } from "@bufbuild/protobuf";

import { Connection, type ConnectionOpts, type Platform, type RequestOpts } from "./connection.js";
import { BuildError, InvalidArgumentError, NotFoundError, SandboxError } from "./errors.js";
import type { TemplateInfo as ApiTemplateInfo } from "./gen/airlock/api/v1/sandboxes_pb.js";
import type { BuildTemplateEvent, BuildTemplateRequestSchema } from "./gen/airlock/api/v1/templates_pb.js";

/** A chunk of the context the server takes. */
const CONTEXT_CHUNK_BYTES = 1024 * 1024;

/** The image `fromBaseImage` names: the server's default (E2B's is `e2bdev/base`). */
export const BASE_IMAGE = "default";

// -- log entries ---------------------------------------------------------------

/** E2B's log levels. */
export type LogEntryLevel = "debug" | "info" | "warn" | "error";

/** What a {@link LogEntry} reports: the build's start and end, a step beginning, a line it printed, a phase after the steps. */
export type LogEntryKind = "start" | "step" | "output" | "phase" | "end";

/** Airlock's details of a {@link LogEntry}. */
export interface LogEntryDetails {
  kind?: LogEntryKind;
  /** The step (1-based) it belongs to. */
  step?: number;
  /** For output: "stdout" or "stderr". */
  stream?: "stdout" | "stderr";
  /** For a step: its result came from the cache (it does not run). */
  cached?: boolean;
}

/** One thing a build reported, as E2B's `onBuildLogs` gets it; Airlock adds `kind`, `step`, `stream`, `cached`. */
export class LogEntry {
  readonly kind: LogEntryKind;
  readonly step?: number;
  readonly stream?: "stdout" | "stderr";
  readonly cached: boolean;

  constructor(
    readonly timestamp: Date,
    readonly level: LogEntryLevel,
    readonly message: string,
    details: LogEntryDetails = {},
  ) {
    this.kind = details.kind ?? "output";
    this.step = details.step;
    this.stream = details.stream;
    this.cached = details.cached === true;
  }

  /** E2B's line: `[TIMESTAMP] [LEVEL] MESSAGE`. */
  toString(): string {
    return `[${this.timestamp.toISOString()}] [${this.level}] ${this.message}`;
  }
}

/** The first entry of a build (E2B's). */
export class LogEntryStart extends LogEntry {
  constructor(timestamp: Date, message: string) {
    super(timestamp, "debug", message, { kind: "start" });
  }
}

/** The last entry of a build, whether it succeeded or not (E2B's). */
export class LogEntryEnd extends LogEntry {
  constructor(timestamp: Date, message: string) {
    super(timestamp, "debug", message, { kind: "end" });
  }
}

// -- readiness -----------------------------------------------------------------

/**
 * When a template's START program is ready, as the file's READY line says
 * it (`port 8000`, `file /tmp/ready`, `url http://...`, `cmd COMMAND`);
 * the `waitFor*` helpers make one.
 */
export class ReadyCmd {
  constructor(private readonly check: string) {}

  /** The READY line's check (E2B's method name). */
  getCmd(): string {
    return this.check;
  }
}

/** Ready once something listens on TCP `port` in the guest. */
export function waitForPort(port: number): ReadyCmd {
  return new ReadyCmd(`port ${port}`);
}

/** Ready once `url` (an http:// URL the guest serves) answers 2xx; another `statusCode` is checked with curl in the guest. */
export function waitForURL(url: string, statusCode = 200): ReadyCmd {
  if (statusCode >= 200 && statusCode < 300) {
    return new ReadyCmd(`url ${url}`);
  }
  return new ReadyCmd(`cmd [ "$(curl -s -o /dev/null -w %{http_code} ${url})" = "${statusCode}" ]`);
}

/** Ready once a process named `processName` runs (`pgrep`). */
export function waitForProcess(processName: string): ReadyCmd {
  return new ReadyCmd(`cmd pgrep ${processName} >/dev/null`);
}

/** Ready once `filename` exists in the guest. */
export function waitForFile(filename: string): ReadyCmd {
  return new ReadyCmd(`file ${filename}`);
}

/** Ready after `timeout` milliseconds (at least one second). */
export function waitForTimeout(timeout: number): ReadyCmd {
  return new ReadyCmd(`cmd sleep ${Math.max(1, Math.ceil(timeout / 1000))}`);
}

// -- templates as data ---------------------------------------------------------

/** A named template: built through the API, or the server's own. The first fields are E2B's `BuildInfo`'s. */
export interface TemplateInfo {
  /** Its name: what `Sandbox.create(template)` takes (E2B's id). */
  templateId: string;
  name: string;
  /** E2B's older name of `name`. */
  alias: string;
  /** Bytes it takes on the server's disk. */
  sizeBytes: number;
  createdAt: Date;
  /** The image it was built FROM. */
  image: string;
  /** The key that built it ("" for the server's own, which every key may start from, and for the machine's owner). */
  owner: string;
  /** Its sandboxes' size. */
  memoryMB: number;
  cpuCount: number;
}

export function templateInfo(info: ApiTemplateInfo): TemplateInfo {
  return {
    templateId: info.name,
    name: info.name,
    alias: info.name,
    sizeBytes: Number(info.sizeBytes),
    createdAt: new Date(Number(info.createdAtMs)),
    image: info.image,
    owner: info.owner,
    memoryMB: info.memoryMib,
    cpuCount: info.vcpus,
  };
}

// -- the context ---------------------------------------------------------------

/** A `.dockerignore` pattern as a regular expression over a path relative to the context. */
export function ignorePattern(text: string): RegExp {
  const pattern = text.trim().replace(/^\/+|\/+$/g, "");
  let out = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (pattern.startsWith("**", i)) {
      i += 1;
      if (pattern[i + 1] === "/") {
        i += 1;
        out += "(?:.*/)?";
      } else {
        out += ".*";
      }
    } else if (c === "*") {
      out += "[^/]*";
    } else if (c === "?") {
      out += "[^/]";
    } else if (c === "[") {
      const end = pattern.indexOf("]", i + 1);
      if (end < 0) {
        throw new InvalidArgumentError(`fileIgnorePatterns: ${JSON.stringify(text)} has an unterminated [`, {
          field: "fileIgnorePatterns",
        });
      }
      out += pattern.slice(i, end + 1);
      i = end;
    } else {
      out += c.replace(/[.+^${}()|\\]/g, "\\$&");
    }
  }
  return new RegExp(`^${out}$`);
}

/** Patterns (`[exception, pattern]`) from `.dockerignore`'s lines and then `extra`. */
export function ignorePatterns(lines: string[]): [boolean, RegExp][] {
  const patterns: [boolean, RegExp][] = [];
  for (const raw of lines) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) {
      continue;
    }
    const exception = line.startsWith("!");
    patterns.push([exception, ignorePattern(exception ? line.slice(1) : line)]);
  }
  return patterns;
}

/** Whether `path` is left out, as Docker decides: the last pattern matching it or a directory above it wins. */
export function ignored(path: string, patterns: [boolean, RegExp][]): boolean {
  const parts = path.split("/");
  const prefixes = parts.map((_, i) => parts.slice(0, i + 1).join("/"));
  let result = false;
  for (const [exception, pattern] of patterns) {
    if (prefixes.some((prefix) => pattern.test(prefix))) {
      result = !exception;
    }
  }
  return result;
}

// -- the builder ---------------------------------------------------------------

/** Options of `Template()`: where `copy` and the file's COPY read from. */
export interface TemplateOptions {
  /** The context directory (default: the current directory; E2B's: the calling file's). */
  fileContextPath?: string;
  /** Patterns in `.dockerignore`'s syntax (`*`, `?`, `**`, `!`) of files not sent; after the context's own `.dockerignore`. */
  fileIgnorePatterns?: string[];
}

/** One word of a template file line, quoted when it must be. */
function word(text: string): string {
  if (text !== "" && !/[\s"'\\$#]/.test(text)) {
    return text;
  }
  return `"${text.replace(/(["\\$])/g, "\\$1")}"`;
}

/** A RUN or START line: the shell form, or the exec form running `/bin/sh -c` for what the shell form cannot carry. */
function program(keyword: string, command: string): string {
  if (command.includes("\n") || /^\s*(\[|--)/.test(command)) {
    return `${keyword} [${["/bin/sh", "-c", command].map((arg) => JSON.stringify(arg)).join(", ")}]`;
  }
  return `${keyword} ${command}`;
}

function readyLine(ready: string | ReadyCmd): string {
  const check = ready instanceof ReadyCmd ? ready.getCmd() : `cmd ${ready}`;
  if (check.includes("\n")) {
    throw new InvalidArgumentError(
      "readyCommand: one line (a READY check is a single command); put a longer check in a script the template COPYs and name the script",
      { field: "readyCommand" },
    );
  }
  return `READY ${check}`;
}

const SKIP_CACHE =
  "skipCache: Airlock's build cache is keyed by each step's inputs (its instruction, the ENV, WORKDIR, USER and ARG values in force, the copied files' contents), so a step reruns when any of them changes; change the step to run it again";

/**
 * A template to build (E2B's builder, from `Template()`): each call adds to
 * Airlock's template file and answers the builder, so calls chain as E2B's
 * do; `toDockerfile()` shows the file. Pass it to `Template.build`.
 */
export class TemplateBuilder {
  private head?: string;
  private readonly lines: string[] = [];
  private user?: string;
  private start?: string;
  private ready?: string;
  /** The context directory ("" where the platform has no files). */
  readonly fileContextPath: string;
  private readonly ignore: string[];

  /** @internal Use `Template()`. */
  constructor(
    private readonly platform: Platform,
    options: TemplateOptions = {},
  ) {
    const files = platform.files;
    this.fileContextPath =
      files === undefined ? (options.fileContextPath ?? "") : files.resolve(files.cwd(), options.fileContextPath ?? ".");
    this.ignore = options.fileIgnorePatterns ?? [];
  }

  private base(line: string): this {
    if (this.head !== undefined) {
      throw new InvalidArgumentError("a template has one base: fromImage, fromBaseImage or fromDockerfile, once", {
        field: "file",
      });
    }
    this.head = line;
    return this;
  }

  /**
   * Starts from a root image of the server's store by name, `debian:bookworm`
   * (built on the server), or a file in the context (`./rootfs.tar`). Airlock
   * pulls from no registry: `credentials` are refused.
   */
  fromImage(baseImage: string, credentials?: { username: string; password: string }): this {
    if (credentials !== undefined) {
      throw new InvalidArgumentError(
        "fromImage(image, credentials): Airlock pulls from no registry; put the image on the server (airlock image import) or into the context and name it",
        { field: "file" },
      );
    }
    return this.base(`FROM ${word(baseImage)}`);
  }

  /** Starts from the server's `default` image (Debian with Python), as E2B's starts from its base image. */
  fromBaseImage(): this {
    return this.fromImage(BASE_IMAGE);
  }

  /**
   * Starts from a template file (Airlock's Dockerfile subset): its path (from
   * the current directory, else the context; Node only) or its text. Builder
   * calls after it add lines to it.
   */
  fromDockerfile(dockerfileContentOrPath: string): this {
    let text = dockerfileContentOrPath;
    const files = this.platform.files;
    if (files !== undefined && !text.includes("\n")) {
      const found =
        files.readText(files.resolve(files.cwd(), text)) ?? files.readText(files.resolve(this.fileContextPath, text));
      text = found ?? text;
    }
    return this.base(text.replace(/\n+$/, ""));
  }

  private add(line: string): this {
    this.lines.push(line);
    return this;
  }

  /**
   * Copies files or directories of the context (paths relative to it) to
   * `dest` in the image; `user` owns them, `mode` (`0o755`) their
   * permissions. `forceUpload` changes nothing: the context is sent whole
   * with every build and each step's cache key holds the files' contents.
   */
  copy(src: string | string[], dest: string, options: { forceUpload?: true; user?: string; mode?: number } = {}): this {
    const sources = Array.isArray(src) ? src : [src];
    const flags: string[] = [];
    if (options.user !== undefined && options.user !== "") {
      flags.push(`--chown=${word(options.user)}`);
    }
    if (options.mode !== undefined) {
      flags.push(`--chmod=${options.mode.toString(8).padStart(4, "0")}`);
    }
    return this.add(["COPY", ...flags, ...sources.map(word), word(dest)].join(" "));
  }

  /** Runs a shell command in a build VM (several joined with `&&`, as E2B's), as `user` if given. No network unless the build's `allowNet` allows it. */
  runCmd(commandOrCommands: string | string[], options: { user?: string } = {}): this {
    const line = Array.isArray(commandOrCommands) ? commandOrCommands.join(" && ") : commandOrCommands;
    if (options.user === undefined || options.user === "") {
      return this.add(program("RUN", line));
    }
    this.add(`USER ${word(options.user)}`);
    this.add(program("RUN", line));
    return this.add(`USER ${word(this.user ?? "root")}`);
  }

  /** The directory later steps, the START program and the template's sandboxes start in. */
  setWorkdir(workdir: string): this {
    return this.add(`WORKDIR ${word(workdir)}`);
  }

  /** The user of later steps, of START and of the template's sandboxes. */
  setUser(user: string): this {
    this.user = user;
    return this.add(`USER ${word(user)}`);
  }

  /** Environment variables of later steps, of START and of the template's sandboxes. */
  setEnvs(envs: Record<string, string>): this {
    const pairs = Object.entries(envs);
    if (pairs.length === 0) {
      return this;
    }
    return this.add(`ENV ${pairs.map(([key, value]) => `${key}=${word(value)}`).join(" ")}`);
  }

  /**
   * The program started when the template is built and left running in its
   * snapshot (every sandbox of it resumes it running), and when it is ready:
   * a {@link ReadyCmd} (`waitForPort(8000)`, `waitForFile`, `waitForURL`,
   * ...) or a command that exits 0 once it is.
   */
  setStartCmd(startCommand: string, readyCommand: string | ReadyCmd): this {
    this.start = program("START", startCommand);
    this.ready = readyLine(readyCommand);
    return this;
  }

  /** When the START program is ready (see `setStartCmd`). */
  setReadyCmd(readyCommand: string | ReadyCmd): this {
    this.ready = readyLine(readyCommand);
    return this;
  }

  /** Refused: an Airlock build reruns exactly the steps whose inputs changed. */
  skipCache(): this {
    throw new InvalidArgumentError(SKIP_CACHE, { field: "skipCache" });
  }

  /** The template file this template builds. */
  toDockerfile(): string {
    if (this.head === undefined) {
      throw new InvalidArgumentError(
        "the template has no base: start it with fromImage(NAME), fromBaseImage() or fromDockerfile(PATH_OR_TEXT)",
        { field: "file" },
      );
    }
    const lines = [this.head, ...this.lines];
    for (const line of [this.start, this.ready]) {
      if (line !== undefined) {
        lines.push(line);
      }
    }
    return `${lines.join("\n")}\n`;
  }

  /** @internal The context's tar stream when `file` copies from it (else undefined). */
  context(file: string): AsyncIterable<Uint8Array> | undefined {
    if (!/^\s*(COPY|ADD)\s/im.test(file)) {
      return undefined;
    }
    const files = this.platform.files;
    if (files === undefined) {
      throw unsupported();
    }
    const dockerignore = files.readText(files.resolve(this.fileContextPath, ".dockerignore")) ?? "";
    const patterns = ignorePatterns([...dockerignore.split("\n"), ...this.ignore]);
    const exceptions = patterns.some(([exception]) => exception);
    return files.tar(this.fileContextPath, (path) => ignored(path, patterns), exceptions);
  }
}

function unsupported(): SandboxError {
  return new SandboxError(
    "Template.build streams the template's context to the server, which gRPC-Web over fetch cannot do: build from Node (import from 'airlock-sdk'), or with the CLI (airlock template build --host ...)",
    { reason: "UNSUPPORTED" },
  );
}

// -- the build -----------------------------------------------------------------

/** Options of `Template.build`. */
export interface BuildOptions extends ConnectionOpts, RequestOpts {
  /** E2B's older way to name the template. */
  alias?: string;
  /** Refused: Airlock's templates have no tags. */
  tags?: string[];
  /** The build's VMs' and the template's sandboxes' vCPUs (default: the server's). */
  cpuCount?: number;
  /** Their memory in MiB (default: the server's). */
  memoryMB?: number;
  /** Refused: a template's sandboxes write into memory. */
  minFreeDiskMb?: number;
  /** Refused: only changed steps run again (see `skipCache`). */
  skipCache?: boolean;
  /** Called with each step as it begins, each line it prints, each phase after the steps. */
  onBuildLogs?: (logEntry: LogEntry) => void;
  /** Airlock: values of the file's ARGs. */
  buildArgs?: Record<string, string>;
  /** Airlock: hosts RUN steps may reach (none otherwise), as a sandbox's `allowNet`. */
  allowNet?: string[];
  /** Airlock: the most the build may take, in milliseconds (default: 30 minutes). */
  timeoutMs?: number;
}

function checkBuild(name: string | undefined, opts: BuildOptions): string {
  const chosen = name ?? opts.alias;
  if (chosen === undefined || chosen === "") {
    throw new InvalidArgumentError("Template.build: name the template", { field: "name" });
  }
  if (chosen.includes(":")) {
    throw new InvalidArgumentError(
      `name ${JSON.stringify(chosen)}: Airlock's templates have no tags; a build under a name replaces the template of that name once it succeeds`,
      { field: "name" },
    );
  }
  if ((opts.tags ?? []).length > 0) {
    throw new InvalidArgumentError("tags: Airlock's templates have no tags; build under another name instead", {
      field: "tags",
    });
  }
  if (opts.skipCache === true) {
    throw new InvalidArgumentError(SKIP_CACHE, { field: "skipCache" });
  }
  if ((opts.minFreeDiskMb ?? 0) > 0) {
    throw new InvalidArgumentError(
      "minFreeDiskMb: a template's sandboxes write into memory (their writable layer is a tmpfs sized by memoryMB); give memoryMB instead",
      { field: "minFreeDiskMb" },
    );
  }
  return chosen;
}

/** A line a step prints past this many bytes without a newline is passed on as it is. */
const LONGEST_LINE = 64 * 1024;

/**
 * A build's events as E2B's log entries: each step as it begins
 * (`[2/3] COPY app.py /srv/`, `cached` when it does not run), its output in
 * whole lines, the phases after the steps; the last event's template as
 * `done`.
 */
export class BuildLogs {
  done?: TemplateInfo;
  private readonly pending = new Map<string, { step: number; stderr: boolean; bytes: Uint8Array }>();
  private readonly decoder = new TextDecoder();

  take(event: BuildTemplateEvent): LogEntry[] {
    const e = event.event;
    if (e.case === "log") {
      return this.output(e.value.step, e.value.stderr, e.value.data);
    }
    const entries = this.flush();
    if (e.case === "step") {
      const { number, steps, instruction, cached } = e.value;
      entries.push(
        new LogEntry(new Date(), "info", `[${number}/${steps}] ${instruction}${cached ? " (cached)" : ""}`, {
          kind: "step",
          step: number,
          cached,
        }),
      );
    } else if (e.case === "phase") {
      entries.push(new LogEntry(new Date(), "info", e.value.phase, { kind: "phase" }));
    } else if (e.case === "done") {
      this.done = templateInfo(e.value);
    }
    return entries;
  }

  private output(step: number, stderr: boolean, data: Uint8Array): LogEntry[] {
    const key = `${step}:${stderr}`;
    const before = this.pending.get(key)?.bytes ?? new Uint8Array();
    this.pending.delete(key);
    const bytes = new Uint8Array(before.length + data.length);
    bytes.set(before);
    bytes.set(data, before.length);
    const entries: LogEntry[] = [];
    let start = 0;
    for (let i = 0; i < bytes.length; i++) {
      if (bytes[i] === 0x0a) {
        entries.push(this.line(step, stderr, bytes.subarray(start, i)));
        start = i + 1;
      }
    }
    const rest = bytes.subarray(start);
    if (rest.length > LONGEST_LINE) {
      entries.push(this.line(step, stderr, rest));
    } else if (rest.length > 0) {
      this.pending.set(key, { step, stderr, bytes: rest.slice() });
    }
    return entries;
  }

  private line(step: number, stderr: boolean, bytes: Uint8Array): LogEntry {
    const text = this.decoder.decode(bytes).replace(/\r$/, "");
    return new LogEntry(new Date(), "info", text, { kind: "output", step, stream: stderr ? "stderr" : "stdout" });
  }

  /** What is left of lines without their newline. */
  flush(): LogEntry[] {
    const entries = [...this.pending.values()].map((p) => this.line(p.step, p.stderr, p.bytes));
    this.pending.clear();
    return entries;
  }
}

/** A build's failure: a failed step (or START) is E2B's `BuildError`; the rest as mapped. */
function buildError(error: unknown): unknown {
  if (error instanceof SandboxError && error.reason === "GUEST_REFUSED" && !(error instanceof BuildError)) {
    return new BuildError(error.message, { code: error.code, reason: error.reason, field: error.field, cause: error });
  }
  return error;
}

/** The requests of a build: the header, the context in chunks the server takes, then `end`. */
async function* buildRequests(
  header: MessageInitShape<typeof BuildTemplateRequestSchema>,
  context: AsyncIterable<Uint8Array> | undefined,
  failed: { error?: unknown },
): AsyncGenerator<MessageInitShape<typeof BuildTemplateRequestSchema>> {
  yield header;
  if (context !== undefined) {
    try {
      for await (const chunk of context) {
        for (let at = 0; at < chunk.length; at += CONTEXT_CHUNK_BYTES) {
          yield { part: { case: "context", value: chunk.subarray(at, at + CONTEXT_CHUNK_BYTES) } };
        }
      }
    } catch (error) {
      // No `end`: the server refuses the build as cut short; the caller
      // throws this error.
      failed.error = error;
      return;
    }
  }
  yield { part: { case: "end", value: {} } };
}

/** `Template`'s calls that take no builder. */
export interface TemplateStatics {
  /**
   * Builds `template` on the server under `name` (a template of yours by
   * that name is replaced once the build succeeds) and answers it. Steps
   * whose inputs did not change since a build are not run again. A failed
   * step throws `BuildError`; a file the server cannot read,
   * `InvalidArgumentError` naming its line. Node only.
   */
  build(template: TemplateBuilder, name: string, options?: BuildOptions): Promise<TemplateInfo>;
  /** E2B's older form: the name as `alias`. */
  build(template: TemplateBuilder, options: BuildOptions & { alias: string }): Promise<TemplateInfo>;
  /** Airlock: the templates a create may name, the server's own and yours. */
  list(options?: ConnectionOpts & RequestOpts): Promise<TemplateInfo[]>;
  /** Whether a template of that name is yours or the server's. */
  exists(name: string, options?: ConnectionOpts & RequestOpts): Promise<boolean>;
  /** E2B's older name of `exists`. */
  aliasExists(alias: string, options?: ConnectionOpts & RequestOpts): Promise<boolean>;
  /** Airlock: deletes a template of yours (its sandboxes run on); false when you have none by that name. */
  delete(name: string, options?: ConnectionOpts & RequestOpts): Promise<boolean>;
  /** The template file a builder builds (E2B's static form of `toDockerfile()`). */
  toDockerfile(template: TemplateBuilder): string;
}

/** E2B's `Template`: call it (or `new` it) for a builder; its statics build, list and delete. */
export type TemplateFactory = TemplateStatics & {
  (options?: TemplateOptions): TemplateBuilder;
  new (options?: TemplateOptions): TemplateBuilder;
};

/** @internal The `Template` of an entry point, on its platform. */
export function templateFor(platform: Platform): TemplateFactory {
  const factory = function Template(options?: TemplateOptions): TemplateBuilder {
    return new TemplateBuilder(platform, options);
  };

  async function build(
    template: TemplateBuilder,
    nameOrOptions?: string | (BuildOptions & { alias: string }),
    maybeOptions?: BuildOptions,
  ): Promise<TemplateInfo> {
    const opts: BuildOptions = (typeof nameOrOptions === "string" ? maybeOptions : nameOrOptions) ?? {};
    const name = checkBuild(typeof nameOrOptions === "string" ? nameOrOptions : undefined, opts);
    const file = template.toDockerfile();
    const log = (entry: LogEntry): void => opts.onBuildLogs?.(entry);
    log(new LogEntryStart(new Date(), `Build of template ${name} started`));
    const logs = new BuildLogs();
    try {
      if (platform.files === undefined) {
        throw unsupported();
      }
      const context = template.context(file);
      const connection = await Connection.get(platform, opts, opts.signal);
      if (!connection.streamsRequests) {
        throw unsupported();
      }
      const header: MessageInitShape<typeof BuildTemplateRequestSchema> = {
        part: {
          case: "header",
          value: {
            name,
            file,
            buildArgs: opts.buildArgs ?? {},
            allowNet: opts.allowNet ?? [],
            memoryMib: opts.memoryMB ?? 0,
            vcpus: opts.cpuCount ?? 0,
            timeoutSecs: opts.timeoutMs === undefined ? 0 : Math.max(1, Math.ceil(opts.timeoutMs / 1000)),
          },
        },
      };
      const failed: { error?: unknown } = {};
      try {
        const events = connection.templates.build(buildRequests(header, context, failed), connection.callOptions(opts, true));
        for await (const event of events) {
          for (const entry of logs.take(event)) {
            log(entry);
          }
          if (logs.done !== undefined) {
            return logs.done;
          }
        }
      } catch (error) {
        throw failed.error ?? buildError(connection.error(error, opts.signal));
      }
      throw failed.error ?? new SandboxError(`the server ended the build of ${name} without its result`);
    } finally {
      for (const entry of logs.flush()) {
        log(entry);
      }
      log(new LogEntryEnd(new Date(), `Build of template ${name} finished`));
    }
  }

  async function list(options: ConnectionOpts & RequestOpts = {}): Promise<TemplateInfo[]> {
    const connection = await Connection.get(platform, options, options.signal);
    const answer = await connection.call(options, (o) => connection.sandboxes.listTemplates({}, o));
    return answer.templates.map(templateInfo);
  }

  async function exists(name: string, options: ConnectionOpts & RequestOpts = {}): Promise<boolean> {
    return (await list(options)).some((info) => info.name === name);
  }

  async function remove(name: string, options: ConnectionOpts & RequestOpts = {}): Promise<boolean> {
    const connection = await Connection.get(platform, options, options.signal);
    try {
      await connection.call(options, (o) => connection.templates.deleteTemplate({ name }, o));
      return true;
    } catch (error) {
      if (error instanceof NotFoundError) {
        return false;
      }
      throw error;
    }
  }

  const statics: TemplateStatics = {
    build: build as TemplateStatics["build"],
    list,
    exists,
    aliasExists: exists,
    delete: remove,
    toDockerfile: (template) => template.toDockerfile(),
  };
  return Object.assign(factory, statics) as unknown as TemplateFactory;
}
