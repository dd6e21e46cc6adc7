//! A sandbox's private state directory: sockets, console log, VMM logs.
//!
//! Created mode 0700 under `$AIRLOCK_STATE_DIR`, else `$XDG_RUNTIME_DIR/airlock`,
//! else `<tmp>/airlock`, and removed when the sandbox is dropped. It records the
//! owning process (`owner.pid`) so orphaned sandboxes can be found later.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::error::{Error, Result};

/// The environment variable that overrides the state directories' parent.
pub const STATE_DIR_ENV: &str = "AIRLOCK_STATE_DIR";

/// The parent of all sandboxes' state directories.
pub fn default_base() -> PathBuf {
    if let Some(dir) = std::env::var_os(STATE_DIR_ENV) {
        return PathBuf::from(dir);
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(run) => PathBuf::from(run).join("airlock"),
        None => std::env::temp_dir().join("airlock"),
    }
}

/// Creates a fresh private directory under `base`.
pub(crate) fn create(base: &Path) -> Result<TempDir> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let fail = |source| Error::StateDir {
        base: base.to_owned(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(base)
        .map_err(fail)?;
    let dir = tempfile::Builder::new()
        .prefix("sandbox-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(base)
        .map_err(fail)?;
    std::fs::write(
        dir.path().join("owner.pid"),
        format!("{}\n", std::process::id()),
    )
    .map_err(fail)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_and_removed_on_drop() {
        let base = tempfile::tempdir().unwrap();
        let dir = create(&base.path().join("nested")).unwrap();
        let path = dir.path().to_owned();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let owner = std::fs::read_to_string(path.join("owner.pid")).unwrap();
        assert_eq!(owner.trim(), std::process::id().to_string());
        drop(dir);
        assert!(!path.exists());
    }
}
