/**
 * Everything the SDK exports, whichever entry point loaded it (`index`:
 * Node's gRPC over HTTP/2; `browser`: gRPC-Web over fetch).
 *
 * Modules: `sandbox` (the Sandbox class) drives `commands`, `pty` (both on
 * `handle`: a program's event stream), `files`, `code`, `network`,
 * `ingress` and `snapshots`, each a thin layer over one service of
 * `airlock.api.v1` (the generated code in `gen/`), reached through
 * `connection` (clients on a transport the platform made: `node/` or
 * `web/`). `template` is E2B's `Template`, and `usage` the server's usage
 * ledger (`Usage.query`), which each entry point makes on its platform. Every failure becomes one of `errors`.
 */

export { Sandbox, SandboxPaginator } from "./sandbox.js";
export { ConnectionConfig } from "./connection.js";
export type { SandboxOpts, SandboxListOpts, SandboxNetworkOpts, SecretSpec, IdleSpec } from "./sandbox.js";
export type { SandboxInfo, SandboxMetrics, SandboxState, SandboxUsage } from "./info.js";
export type { ConnectionOpts, RequestOpts } from "./connection.js";
export { Commands, DEFAULT_COMMAND_TIMEOUT_MS } from "./commands.js";
export type { CommandStartOpts, CommandConnectOpts, ProcessInfo } from "./commands.js";
export { CommandHandle } from "./handle.js";
export type { CommandExit, OutputHandlers } from "./handle.js";
export { Pty } from "./pty.js";
export type { PtySize, PtyCreateOpts } from "./pty.js";
export { Filesystem, FileType, FilesystemEventType, WEB_PIECE_BYTES } from "./files.js";
export type {
  EntryInfo,
  WriteInfo,
  WriteEntry,
  WriteOpts,
  ReadOpts,
  FilesystemEvent,
  WatchOpts,
  WatchHandle,
} from "./files.js";
export { Execution, Result } from "./code.js";
export type { Context, ExecutionError, OutputMessage, RunCodeOpts, CreateCodeContextOpts } from "./code.js";
export { Network, ALL_TRAFFIC } from "./network.js";
export type { AuditProtocol, AuditRecord, BoundSecret, NetworkPolicyInfo } from "./network.js";
export type { ExposedPort } from "./ingress.js";
export { SnapshotPaginator } from "./snapshots.js";
export type { SnapshotInfo, CreateSnapshotOpts, SnapshotListOpts } from "./snapshots.js";
export {
  LogEntry,
  LogEntryStart,
  LogEntryEnd,
  ReadyCmd,
  TemplateBuilder,
  waitForPort,
  waitForURL,
  waitForProcess,
  waitForFile,
  waitForTimeout,
} from "./template.js";
export type {
  BuildOptions,
  LogEntryDetails,
  LogEntryKind,
  LogEntryLevel,
  TemplateFactory,
  TemplateInfo,
  TemplateOptions,
  TemplateStatics,
} from "./template.js";
export type { UsageBy, UsageQueryOpts, UsageRow, UsageStatics } from "./usage.js";
export type { DataSource } from "./bytes.js";
export {
  SandboxError,
  NotFoundError,
  SandboxNotFoundError,
  FileNotFoundError,
  AuthenticationError,
  TimeoutError,
  RateLimitError,
  InvalidArgumentError,
  AlreadyExistsError,
  BuildError,
  CommandExitError,
} from "./errors.js";
export type { CommandResult, SandboxErrorDetails } from "./errors.js";
