//! The bounds of requests, as docs/api.md lists them. The server refuses a
//! request past one with `INVALID_ARGUMENT` naming the field; a client may
//! check first to fail without a round trip.

/// Bytes in a sandbox id.
pub const MAX_ID_BYTES: usize = 128;
/// Labels on a sandbox.
pub const MAX_LABELS: usize = 64;
/// Bytes in a label's key.
pub const MAX_LABEL_KEY_BYTES: usize = 128;
/// Bytes in a label's value.
pub const MAX_LABEL_VALUE_BYTES: usize = 1024;
/// Environment variables in a create or a start.
pub const MAX_ENVS: usize = 256;
/// Bytes in an environment variable's value.
pub const MAX_ENV_VALUE_BYTES: usize = 32 * 1024;
/// Network allow rules.
pub const MAX_RULES: usize = 256;
/// Bytes in one rule.
pub const MAX_RULE_BYTES: usize = 512;
/// Bound secrets.
pub const MAX_SECRETS: usize = 64;
/// Hosts one secret is bound to.
pub const MAX_SECRET_HOSTS: usize = 16;
/// Bytes in a secret's value.
pub const MAX_SECRET_VALUE_BYTES: usize = 4096;
/// Extra CA certificates, and bytes in each.
pub const MAX_CA_CERTS: usize = 16;
/// Public ports per sandbox (`CreateSandboxRequest.public_ports`).
pub const MAX_PUBLIC_PORTS: usize = 16;
pub const MAX_CA_CERT_BYTES: usize = 64 * 1024;
/// Guest memory, MiB.
pub const MIN_MEMORY_MIB: u32 = 64;
pub const MAX_MEMORY_MIB: u32 = 65536;
/// Virtual CPUs.
pub const MIN_VCPUS: u32 = 1;
pub const MAX_VCPUS: u32 = 64;
/// A named workspace's size, MiB (a create's `workspace_size_mib`), and the
/// size of one made without it (4 GiB; sparse, so it costs what is written).
pub const MIN_WORKSPACE_MIB: u64 = 16;
pub const MAX_WORKSPACE_MIB: u64 = 256 * 1024;
pub const DEFAULT_WORKSPACE_MIB: u64 = 4096;
/// A key's named workspaces, and the sum of their sizes in MiB, unless its
/// quota says: eight of the default size.
pub const DEFAULT_MAX_WORKSPACES: u32 = 8;
pub const DEFAULT_MAX_WORKSPACE_MIB: u64 = 32 * 1024;
/// A key's snapshots, and what its snapshots and the templates it built may
/// take on the server's disk in MiB, unless its quota says.
pub const DEFAULT_MAX_SNAPSHOTS: u32 = 16;
pub const DEFAULT_MAX_STORAGE_MIB: u64 = 32 * 1024;
/// A template build through the API (`Templates.Build`): the template
/// file's bytes, its build arguments, and how long it may take in seconds
/// (the default, and the most a header may ask).
pub const MAX_TEMPLATE_FILE_BYTES: usize = 1 << 20;
pub const MAX_BUILD_ARGS: usize = 64;
pub const DEFAULT_BUILD_TIMEOUT_SECS: u32 = 1800;
pub const MAX_BUILD_TIMEOUT_SECS: u32 = 7200;
/// A build's context (its tar stream), unless the server is configured
/// otherwise: 1 GiB.
pub const DEFAULT_MAX_CONTEXT_BYTES: u64 = 1 << 30;
/// A sandbox's timeout, and an idle timeout, in seconds (30 days, 7 days).
pub const MAX_TIMEOUT_SECS: u64 = 30 * 24 * 3600;
pub const MAX_IDLE_SECS: u64 = 7 * 24 * 3600;
/// Sandboxes one fork makes.
pub const MAX_FORK: u32 = 16;
/// A list page, and its default.
pub const MAX_PAGE_SIZE: u32 = 1000;
pub const DEFAULT_PAGE_SIZE: u32 = 100;
/// A program's arguments, and their bytes in all.
pub const MAX_ARGS: usize = 4096;
pub const MAX_ARGV_BYTES: usize = 1 << 20;
/// A program's own limits (`StartProcess.limits`, the cgroup of its
/// tree): memory in bytes (1 MiB to 1 PiB), processes (`pids.max`), and
/// CPU in thousandths of a CPU (`cpu.max`, up to 1024 CPUs).
pub const MIN_PROGRAM_MEMORY_BYTES: u64 = 1 << 20;
pub const MAX_PROGRAM_MEMORY_BYTES: u64 = 1 << 50;
pub const MIN_PROGRAM_PIDS: u32 = 1;
pub const MAX_PROGRAM_PIDS: u32 = 1 << 20;
pub const MIN_PROGRAM_CPU_MILLIS: u32 = 1;
pub const MAX_PROGRAM_CPU_MILLIS: u32 = 1_024_000;
/// A signal's number (to a program's tree).
pub const MIN_SIGNAL: i32 = 1;
pub const MAX_SIGNAL: i32 = 64;
/// A written file's mode bits (permissions, setuid, setgid, sticky).
pub const MAX_FILE_MODE: u32 = 0o7777;
/// Bytes in a guest path.
pub const MAX_PATH_BYTES: usize = 4096;
/// Bytes in a tag, a user name, a context id, a name.
pub const MAX_NAME_BYTES: usize = 128;
/// Bytes of data in one message (stdin, a file chunk, a tar chunk).
pub const MAX_CHUNK_BYTES: usize = 1 << 20;
/// The size the server sends file and tar chunks in.
pub const CHUNK_BYTES: usize = 256 * 1024;
/// Bytes of code in a cell.
pub const MAX_CODE_BYTES: usize = 4 << 20;
/// Levels of a directory listing.
pub const MAX_LIST_DEPTH: u32 = 64;
/// Roots of a change tracker.
pub const MAX_TRACK_ROOTS: usize = 16;
/// Change trackers one sandbox may have at once.
pub const MAX_TRACKERS: usize = 16;
/// A terminal's rows and columns.
pub const MAX_TERMINAL: u32 = 1000;
/// Calls in flight at once: the owner's (the Unix socket), and a key's
/// unless its quota or the server's configuration says.
pub const MAX_OWNER_CALLS: u32 = 4096;
pub const DEFAULT_MAX_CALLS_PER_KEY: u32 = 64;
/// Bytes in a key's name.
pub const MAX_KEY_NAME_BYTES: usize = 64;
/// Bytes of a whole message either way (a chunk plus its framing fits).
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;
