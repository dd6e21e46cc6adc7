//! The workspace's binaries, found beside the running test: a test or a
//! benchmark executable is `target/<profile>/deps/<name>`, and cargo puts
//! the binaries of the same build in `target/<profile>`.

use std::path::{Path, PathBuf};

/// `target/<profile>/airlock-agent`, for the process backend.
pub fn agent_bin() -> PathBuf {
    built("airlock-agent")
}

/// `target/<profile>/airlock`, the command line tool.
pub fn airlock_bin() -> PathBuf {
    built("airlock")
}

/// The binary `name` of this build, failing with the command that builds it.
fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join(name))
        .unwrap_or_default();
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build --workspace --bins` first (scripts/test does)",
        bin.display()
    );
    bin
}
