/**
 * The SDK's errors: one hierarchy, mapped once (in {@link toSandboxError})
 * from the call's gRPC status and the server's `airlock-error` reason.
 *
 *     SandboxError
 *     ├── NotFoundError         no such image, template, process, context, tracker
 *     │   ├── SandboxNotFoundError  no such sandbox (or not yours), or it ended
 *     │   └── FileNotFoundError     no such guest file or directory (or program)
 *     ├── AuthenticationError   no key, or a key the server does not know
 *     ├── TimeoutError          a deadline passed (the call's, the command's, the guest's)
 *     ├── RateLimitError        too many calls, sandboxes or too much memory for the key or server
 *     ├── InvalidArgumentError  a field the server refused (`field` names it)
 *     ├── AlreadyExistsError    a name taken: a snapshot of yours, a code context
 *     ├── BuildError            a template build's step failed (or its START program)
 *     └── CommandExitError      a command ended with a non-zero exit code
 *
 * Other reasons (`NO_NETWORK`, `UNSUPPORTED`, for one a
 * server that serves no ingress, `PORT_CLOSED`, ...) are a `SandboxError`
 * whose `reason` names them and whose message is the server's, which says
 * what to do.
 *
 * A call cancelled with an `AbortSignal` rejects with the signal's reason
 * (an `AbortError` unless the caller gave another), as `fetch` does.
 */

import { Code, ConnectError } from "@connectrpc/connect";

/** The metadata entry with the server's reason (an `ErrorReason` name). */
export const REASON_KEY = "airlock-error";
/** The metadata entry naming the request field at fault. */
export const FIELD_KEY = "airlock-field";

/** What every error of the SDK carries besides its message. */
export interface SandboxErrorDetails {
  /** The gRPC status code's name ("NOT_FOUND"), when a status caused it. */
  code?: string;
  /**
   * The server's reason ("SANDBOX_NOT_FOUND", "QUOTA_EXCEEDED", ...; see
   * `ErrorReason` in proto/airlock/api/v1/errors.proto). Absent when the
   * failure did not come from the service (a broken connection).
   */
  reason?: string;
  /** For `InvalidArgumentError`: the request field at fault. */
  field?: string;
  /** The error this one wraps. */
  cause?: unknown;
}

/** The base of every error the SDK throws. */
export class SandboxError extends Error {
  override name = "SandboxError";
  /** The gRPC status code's name ("NOT_FOUND"), when a status caused it. */
  readonly code?: string;
  /** The server's reason, an `ErrorReason` name. */
  readonly reason?: string;
  /** The request field at fault (`InvalidArgumentError`). */
  readonly field?: string;

  constructor(message: string, details: SandboxErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.code = details.code;
    this.reason = details.reason;
    this.field = details.field;
  }
}

/** No such sandbox (or not yours), image, template, file, program or context. */
export class NotFoundError extends SandboxError {
  override name = "NotFoundError";
}

/** No such sandbox (or not yours), or it ended (E2B's name). */
export class SandboxNotFoundError extends NotFoundError {
  override name = "SandboxNotFoundError";
}

/** No such file or directory in the guest, or program (E2B's name). */
export class FileNotFoundError extends NotFoundError {
  override name = "FileNotFoundError";
}

/** No API key, or one the server does not know (never made, or removed). */
export class AuthenticationError extends SandboxError {
  override name = "AuthenticationError";
}

/** A deadline passed: the call's, the command's or cell's, or the guest's. */
export class TimeoutError extends SandboxError {
  override name = "TimeoutError";
}

/**
 * Too many calls in flight or failed authentications, or a limit on
 * sandboxes or memory (the key's quota, the server's `--max`): retry later
 * or end a sandbox.
 */
export class RateLimitError extends SandboxError {
  override name = "RateLimitError";
}

/** The server refused a field of the request; `field` names it. */
export class InvalidArgumentError extends SandboxError {
  override name = "InvalidArgumentError";
}

/** A name you have taken already: a snapshot of yours, a code context's id. */
export class AlreadyExistsError extends SandboxError {
  override name = "AlreadyExistsError";
}

/**
 * A template build failed: a step exited non-zero, or its START program did
 * not become ready (reason `GUEST_REFUSED`; the message names the step and
 * its exit status). E2B's name.
 */
export class BuildError extends SandboxError {
  override name = "BuildError";
}

/** What a finished command printed and how it ended. */
export interface CommandResult {
  /** Its exit code (-1 when a signal ended it). */
  exitCode: number;
  /** Why it failed, when it did ("exit status 3", "killed by signal 9", ...). */
  error?: string;
  stdout: string;
  stderr: string;
}

/** A command ended with a non-zero exit code; its output is here. */
export class CommandExitError extends SandboxError implements CommandResult {
  override name = "CommandExitError";
  readonly result: CommandResult;

  constructor(result: CommandResult) {
    super((result.error ?? `exit status ${result.exitCode}`) + missingToolHint(result.exitCode, result.stderr));
    this.result = result;
  }

  get exitCode(): number {
    return this.result.exitCode;
  }
  get error(): string | undefined {
    return this.result.error;
  }
  get stdout(): string {
    return this.result.stdout;
  }
  get stderr(): string {
    return this.result.stderr;
  }
}

/** Programs E2B's images have that an Airlock image may not. */
const E2B_TOOLS = ["pip", "pip3", "python", "curl", "sudo"];

/** What to do when a command failed for a program E2B's images have and this image does not, or for Debian's refusal of a system-wide `pip install`. */
export function missingToolHint(exitCode: number, stderr: string): string {
  if (stderr.includes("externally-managed-environment")) {
    return "; Debian's Python refuses pip installs into the system (PEP 668; E2B's image allows them): pip install --target DIR, a venv, or --break-system-packages";
  }
  if (exitCode !== 127) {
    return "";
  }
  const tool = E2B_TOOLS.find((t) => stderr.includes(`${t}: not found`) || stderr.includes(`${t}: command not found`));
  if (tool === undefined) {
    return "";
  }
  const python = tool === "python" ? "; `python3` is the default image's Python" : "";
  return `; this sandbox's image has no ${tool} (E2B's images do): create the sandbox from an image or template that has it (image, or AIRLOCK_IMAGE for code that names none)${python}`;
}

/** What to do when E2B's default user or home is missing from the image. */
export function guestHint(message: string): string {
  if (message.includes("user not found")) {
    return "; E2B's default user `user` is not in this image: leave user out (root, home /root) or create the sandbox from an image that has the account";
  }
  if (message.includes("not found: /home/user")) {
    return "; E2B's home /home/user is not in this image: Airlock's default user is root, home /root (relative paths resolve there)";
  }
  return "";
}

/** gRPC code names, as the server's docs write them. */
const CODE_NAMES: Record<number, string> = {
  [Code.Canceled]: "CANCELLED",
  [Code.Unknown]: "UNKNOWN",
  [Code.InvalidArgument]: "INVALID_ARGUMENT",
  [Code.DeadlineExceeded]: "DEADLINE_EXCEEDED",
  [Code.NotFound]: "NOT_FOUND",
  [Code.AlreadyExists]: "ALREADY_EXISTS",
  [Code.PermissionDenied]: "PERMISSION_DENIED",
  [Code.ResourceExhausted]: "RESOURCE_EXHAUSTED",
  [Code.FailedPrecondition]: "FAILED_PRECONDITION",
  [Code.Aborted]: "ABORTED",
  [Code.OutOfRange]: "OUT_OF_RANGE",
  [Code.Unimplemented]: "UNIMPLEMENTED",
  [Code.Internal]: "INTERNAL",
  [Code.Unavailable]: "UNAVAILABLE",
  [Code.DataLoss]: "DATA_LOSS",
  [Code.Unauthenticated]: "UNAUTHENTICATED",
};

type ErrorClass = new (message: string, details?: SandboxErrorDetails) => SandboxError;

/** The class for a reason the server gave. */
const BY_REASON: Record<string, ErrorClass> = {
  UNAUTHENTICATED: AuthenticationError,
  INVALID_ARGUMENT: InvalidArgumentError,
  SANDBOX_NOT_FOUND: SandboxNotFoundError,
  // An ended sandbox is gone for E2B's code, which catches NotFoundError.
  SANDBOX_ENDED: SandboxNotFoundError,
  NOT_FOUND: NotFoundError,
  GUEST_NOT_FOUND: FileNotFoundError,
  ALREADY_EXISTS: AlreadyExistsError,
  SANDBOX_LIMIT: RateLimitError,
  QUOTA_EXCEEDED: RateLimitError,
  RATE_LIMITED: RateLimitError,
  TIMEOUT: TimeoutError,
};

/** The class for a status without a reason (not from the service). */
const BY_CODE: Partial<Record<Code, ErrorClass>> = {
  [Code.Unauthenticated]: AuthenticationError,
  [Code.InvalidArgument]: InvalidArgumentError,
  [Code.NotFound]: NotFoundError,
  [Code.AlreadyExists]: AlreadyExistsError,
  [Code.ResourceExhausted]: RateLimitError,
  [Code.DeadlineExceeded]: TimeoutError,
};

/**
 * Any failure of a call as the SDK's error: the signal's reason when the
 * caller aborted, a `SandboxError` subclass from a status (by its reason,
 * else its code), the error itself when it is one of ours already.
 * `where` names the server for failures that never reached it.
 */
export function toSandboxError(error: unknown, signal: AbortSignal | undefined, where: string): unknown {
  if (signal?.aborted) {
    return signal.reason;
  }
  if (error instanceof SandboxError) {
    return error;
  }
  const connect = ConnectError.from(error);
  const reason = connect.metadata.get(REASON_KEY) ?? undefined;
  const field = connect.metadata.get(FIELD_KEY) ?? undefined;
  const code = CODE_NAMES[connect.code] ?? String(connect.code);
  const details: SandboxErrorDetails = { code, reason, field, cause: error };
  const kind = (reason !== undefined ? BY_REASON[reason] : undefined) ?? BY_CODE[connect.code] ?? SandboxError;
  let message = connect.rawMessage;
  if (reason === undefined && connect.code === Code.Unavailable) {
    message = `cannot reach the Airlock server at ${where}: ${message}`;
  } else if (reason === undefined && connect.code === Code.DeadlineExceeded) {
    message = `the call to ${where} took longer than its deadline (requestTimeoutMs): ${message}`;
  } else if (reason === "GUEST_NOT_FOUND") {
    message += guestHint(message);
  }
  return new kind(message, details);
}
