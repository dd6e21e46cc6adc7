//! Calls through the public API that tests make again and again: create a
//! sandbox, start a program, run one to its exit, read a refusal.

use airlock_client::{api, Client, ProcessStream};

/// A sandbox without an image (the process backend has none).
pub fn create() -> api::CreateSandboxRequest {
    api::CreateSandboxRequest {
        no_image: true,
        ..api::CreateSandboxRequest::default()
    }
}

/// Creates a sandbox; returns its id.
pub async fn create_sandbox(client: &Client, request: api::CreateSandboxRequest) -> String {
    client
        .sandboxes()
        .create(request)
        .await
        .expect("create a sandbox")
        .into_inner()
        .sandbox_id
}

/// Starts `argv` in sandbox `id`: its stream of events (dropping it leaves
/// the program running).
pub async fn start(client: &Client, id: &str, argv: &[&str]) -> ProcessStream {
    client
        .start(api::StartProcess {
            sandbox_id: id.to_owned(),
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            ..api::StartProcess::default()
        })
        .await
        .expect("start a program")
}

/// What `argv` printed and its exit, through a process stream.
pub async fn run(client: &Client, id: &str, argv: &[&str]) -> (Vec<u8>, Vec<u8>, api::ProcessExit) {
    let mut stream = start(client, id, argv).await;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    loop {
        match stream.next_event().await.expect("the program's events") {
            Some(api::process_event::Event::Stdout(o)) => out.extend_from_slice(&o.data),
            Some(api::process_event::Event::Stderr(o)) => err.extend_from_slice(&o.data),
            Some(api::process_event::Event::Exited(exit)) => return (out, err, exit),
            Some(_) => {}
            None => panic!("the stream ended without an exit"),
        }
    }
}

/// The gRPC code and the server's reason of a failed call.
pub fn refusal(status: &tonic::Status) -> (tonic::Code, Option<api::ErrorReason>) {
    (status.code(), airlock_client::reason::reason_of(status))
}
