//! Sandboxes on the library's process backend: the agent binary as a host
//! process, no VM, for tests of the lifecycle and of the server.

use std::time::Duration;

use airlock::{Sandbox, SandboxBuilder};

use crate::bins::agent_bin;

/// How long an agent started as a host process may take to answer.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(20);

/// A builder for a sandbox on the process backend.
pub fn process_builder() -> SandboxBuilder {
    Sandbox::builder()
        .process_backend(agent_bin())
        .boot_timeout(BOOT_TIMEOUT)
}
