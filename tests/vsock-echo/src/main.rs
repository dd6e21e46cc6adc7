//! `airlock-vsock-echo PORT`: echoes every byte received on guest vsock
//! `PORT`, one task per connection. The benchmarks upload it into a guest
//! (built static for musl) to measure the raw vsock round trip and
//! throughput, the floor and ceiling any agent protocol is measured against.
//! It lives here, not in the agent.

#![forbid(unsafe_code)]

use tokio_vsock::{VsockAddr, VsockListener, VMADDR_CID_ANY};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let port = match std::env::args().nth(1).map(|p| p.parse::<u32>()) {
        Some(Ok(port)) => port,
        _ => {
            eprintln!("usage: airlock-vsock-echo PORT");
            return std::process::ExitCode::from(2);
        }
    };
    let listener = match VsockListener::bind(VsockAddr::new(VMADDR_CID_ANY, port)) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("airlock-vsock-echo: cannot listen on vsock port {port}: {error}");
            return std::process::ExitCode::FAILURE;
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
}
