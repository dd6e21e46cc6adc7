//! A listing whose reader has gone before it was written (`airlock
//! template ls | head -1`, `| true`): the command ends quietly with its
//! own exit code, no panic on stderr.

use std::process::{Command, Stdio};

#[test]
fn a_listing_to_a_closed_pipe_ends_quietly() -> Result<(), Box<dyn std::error::Error>> {
    let home = std::env::temp_dir().join(format!("airlock-closed-pipe-{}", std::process::id()));
    std::fs::create_dir_all(&home)?;
    for args in [&["template", "ls"][..], &["image", "ls"][..]] {
        let (reader, writer) = std::io::pipe()?;
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(args)
            .env("AIRLOCK_HOME", &home)
            .env("AIRLOCK_STATE_DIR", &home)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
    }
    std::fs::remove_dir_all(&home)?;
    Ok(())
}
