//! The binary's command line, outside PID 1.

#![allow(clippy::unwrap_used)]

use std::process::Command;

fn agent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_airlock-agent"))
}

#[test]
fn help_names_the_listen_flag() {
    let out = agent().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("--listen"), "{help}");
    assert!(help.contains("vsock:PORT"), "{help}");
    assert!(help.contains("serial:NAME"), "{help}");
}

#[test]
fn bad_listen_address_fails_with_a_hint() {
    let out = agent().args(["--listen", "tcp:80"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("use serial:NAME, vsock:PORT or unix:PATH"),
        "{err}"
    );
}

#[test]
fn unusable_socket_path_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing-dir/agent.sock");
    let out = agent()
        .arg("--listen")
        .arg(format!("unix:{}", path.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("cannot listen on unix socket"), "{err}");
}

#[test]
fn a_serial_port_that_never_appears_fails_naming_it() {
    let out = agent()
        .args(["--listen", "serial:airlock.no-such-port"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("no virtio-serial port named \"airlock.no-such-port\""),
        "{err}"
    );
}
