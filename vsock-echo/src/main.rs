//! `airlock-vsock-echo PORT` or `airlock-vsock-echo serial:NAME`: echoes
//! every byte received on guest vsock `PORT` (one task per connection), or
//! on the virtio-serial port named `NAME`. The benchmarks upload it into a
//! guest (built static for musl) to measure the raw channel's round trip
//! and throughput, the floor and ceiling any agent protocol is measured
//! against. It lives here, not in the agent.

#![forbid(unsafe_code)]

use std::io::{ErrorKind, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tokio_vsock::{VsockAddr, VsockListener, VMADDR_CID_ANY};

fn main() -> ExitCode {
    let usage = || {
        eprintln!("usage: airlock-vsock-echo PORT | serial:NAME");
        ExitCode::from(2)
    };
    let Some(arg) = std::env::args().nth(1) else {
        return usage();
    };
    if let Some(name) = arg.strip_prefix("serial:") {
        return serial_echo(name);
    }
    match arg.parse::<u32>() {
        Ok(port) => vsock_echo(port),
        Err(_) => usage(),
    }
}

/// The device of the virtio-serial port named `name`.
fn serial_device(name: &str) -> Option<PathBuf> {
    std::fs::read_dir("/sys/class/virtio-ports")
        .ok()?
        .flatten()
        .find(|entry| {
            std::fs::read_to_string(entry.path().join("name")).is_ok_and(|n| n.trim() == name)
        })
        .map(|entry| PathBuf::from("/dev").join(entry.file_name()))
}

/// Echoes on a serial port, with blocking reads: a read of 0 bytes means
/// no host is connected yet (or any more), so wait and read again.
fn serial_echo(name: &str) -> ExitCode {
    let Some(device) = serial_device(name) else {
        eprintln!("airlock-vsock-echo: no virtio-serial port named {name}");
        return ExitCode::FAILURE;
    };
    let mut port = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&device)
    {
        Ok(port) => port,
        Err(error) => {
            eprintln!("airlock-vsock-echo: {}: {error}", device.display());
            return ExitCode::FAILURE;
        }
    };
    println!("echoing on {}", device.display());
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match port.read(&mut buf) {
            Ok(0) => std::thread::sleep(Duration::from_millis(5)),
            Ok(n) => {
                if let Err(error) = port.write_all(&buf[..n]) {
                    eprintln!("airlock-vsock-echo: write: {error}");
                }
            }
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => {
                eprintln!("airlock-vsock-echo: read: {error}");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

fn vsock_echo(port: u32) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("airlock-vsock-echo: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let listener = match VsockListener::bind(VsockAddr::new(VMADDR_CID_ANY, port)) {
            Ok(listener) => listener,
            Err(error) => {
                eprintln!("airlock-vsock-echo: cannot listen on vsock port {port}: {error}");
                return ExitCode::FAILURE;
            }
        };
        println!("listening on vsock port {port}");
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(async move {
                        let (mut reader, mut writer) = tokio::io::split(stream);
                        let _ = tokio::io::copy(&mut reader, &mut writer).await;
                    });
                }
                Err(error) => eprintln!("airlock-vsock-echo: accept: {error}"),
            }
        }
    })
}
