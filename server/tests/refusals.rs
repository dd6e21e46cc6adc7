//! Data a hostile tenant sends on the streams (issue #51, items 4 and 5):
//! refused inputs on a `Processes.Start` stream, oversized write and tar
//! chunks, a cut write, a cut tar, and the uid the kernel reads as
//! "unchanged" each answer INVALID_ARGUMENT (naming the field where the
//! server can), a cut tar leaves nothing in the target, and another key's
//! calls are served after each. On a real server (process backend, no VMs).

#![allow(clippy::unwrap_used)]

use airlock_client::{api, Client};
use airlock_testkit::{create, create_sandbox, run, Options, TestServer};
use tonic::Code;

/// Two MiB: past the 1 MiB a data message may carry, within the 4 MiB a
/// gRPC message may be.
const TWO_MIB: usize = 2 << 20;

/// Asserts INVALID_ARGUMENT naming `field`.
fn assert_invalid(status: &tonic::Status, field: &str) {
    assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
    assert_eq!(
        airlock_client::reason::field_of(status),
        Some(field),
        "{status:?}"
    );
    assert!(status.message().starts_with(field), "{status:?}");
}

/// Another key's sandbox answers a program meanwhile.
async fn other_tenant_served(client: &Client, id: &str) {
    let (out, _, exit) = run(client, id, &["echo", "served"]).await;
    assert_eq!((out.as_slice(), exit.exit_code), (&b"served\n"[..], 0));
}

/// The status a Start stream ends with when `input` follows its start (a
/// `cat` reading stdin), after its `started` event.
async fn start_then(client: &Client, id: &str, input: api::process_input::Input) -> tonic::Status {
    use api::process_input::Input;
    let start = api::StartProcess {
        sandbox_id: id.to_owned(),
        argv: vec!["cat".to_owned()],
        stdin: true,
        kill_on_disconnect: true,
        ..api::StartProcess::default()
    };
    let (inputs, pending) = tokio::sync::mpsc::channel(4);
    for message in [Input::Start(start), input] {
        inputs
            .send(api::ProcessInput {
                input: Some(message),
            })
            .await
            .unwrap();
    }
    let mut events = client
        .processes()
        .start(tokio_stream::wrappers::ReceiverStream::new(pending))
        .await
        .unwrap()
        .into_inner();
    // The client keeps its side open: the refusal, not an ended input,
    // ends the stream.
    loop {
        match events.message().await {
            Ok(Some(api::ProcessEvent {
                event: Some(api::process_event::Event::Exited(exit)),
            })) => panic!("the program exited ({exit:?}) and the input was not refused"),
            Ok(Some(_)) => {}
            Ok(None) => panic!("the stream ended without a status"),
            Err(status) => {
                drop(inputs);
                return status;
            }
        }
    }
}

#[tokio::test]
async fn refused_inputs_on_a_start_stream_end_it_naming_the_field() {
    use api::process_input::Input;
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let other = server
        .remote(Some(&server.key("other", api::KeyQuota::default()).await))
        .await;
    let others = create_sandbox(&other, create()).await;

    let cases = [
        (
            Input::Stdin(vec![b'x'; airlock_client::limits::MAX_CHUNK_BYTES + 1].into()),
            "stdin",
        ),
        (Input::Signal(99), "signal"),
        (Input::Signal(0), "signal"),
        (
            Input::Resize(api::TerminalSize { rows: 0, cols: 80 }),
            "resize.rows",
        ),
        (Input::Start(api::StartProcess::default()), "start"),
    ];
    for (input, field) in cases {
        let status = start_then(&owner, &id, input).await;
        assert_invalid(&status, field);
        other_tenant_served(&other, &others).await;
    }
    // The refused streams asked to be killed on disconnect: no `cat` is
    // left waiting for input.
    // (The kill follows the stream's end: look until it has landed.)
    let mut running = Vec::new();
    for _ in 0..100 {
        running = owner
            .processes()
            .list(api::ListProcessesRequest {
                sandbox_id: id.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .processes
            .into_iter()
            .filter(|p| p.running)
            .collect();
        if running.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(running.is_empty(), "{running:?}");
    server.stop().await;
}

/// The messages of a write: its header, then `parts`.
fn write(
    id: &str,
    path: &str,
    require_end: bool,
    parts: Vec<api::write_file_request::Part>,
) -> Vec<api::WriteFileRequest> {
    let header = api::WriteHeader {
        sandbox_id: id.to_owned(),
        path: path.to_owned(),
        require_end,
        ..Default::default()
    };
    std::iter::once(api::write_file_request::Part::Header(header))
        .chain(parts)
        .map(|part| api::WriteFileRequest { part: Some(part) })
        .collect()
}

/// The messages of a tar upload into `path`: its header, then `data` in
/// 64 KiB chunks, or as one chunk with `whole`.
fn upload(id: &str, path: &str, data: &[u8], whole: bool) -> Vec<api::UploadTarRequest> {
    let header = api::UploadTarHeader {
        sandbox_id: id.to_owned(),
        path: path.to_owned(),
    };
    let size = if whole { data.len().max(1) } else { 64 << 10 };
    std::iter::once(api::upload_tar_request::Part::Header(header))
        .chain(
            data.chunks(size)
                .map(|c| api::upload_tar_request::Part::Data(c.to_vec().into())),
        )
        .map(|part| api::UploadTarRequest { part: Some(part) })
        .collect()
}

/// A tar of `sub/small` and a 256 KiB `sub/big`.
fn tar() -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data) in [
        ("sub/small", vec![1u8; 10]),
        ("sub/big", vec![7u8; 256 << 10]),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_path(name).unwrap();
        header.set_cksum();
        builder.append(&header, &data[..]).unwrap();
    }
    builder.into_inner().unwrap()
}

fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn bad_file_streams_answer_what_is_wrong_and_keep_nothing() {
    use api::write_file_request::Part;
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let other = server
        .remote(Some(&server.key("other", api::KeyQuota::default()).await))
        .await;
    let others = create_sandbox(&other, create()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file").to_string_lossy().into_owned();
    let mut files = owner.files();

    // A 2 MiB write chunk.
    let messages = write(&id, &file, true, vec![Part::Data(vec![0; TWO_MIB].into())]);
    let status = files
        .write(futures::stream::iter(messages))
        .await
        .unwrap_err();
    assert_invalid(&status, "data");
    other_tenant_served(&other, &others).await;

    // A write that asked for its end and was cut before it.
    let messages = write(&id, &file, true, vec![Part::Data(b"cut".to_vec().into())]);
    let status = files
        .write(futures::stream::iter(messages))
        .await
        .unwrap_err();
    assert_invalid(&status, "end");
    assert!(status.message().contains("without `end`"), "{status:?}");
    other_tenant_served(&other, &others).await;

    // A user the kernel would read as "unchanged".
    let mut messages = write(&id, &file, false, vec![Part::Data(b"x".to_vec().into())]);
    if let Some(api::WriteFileRequest {
        part: Some(Part::Header(header)),
    }) = messages.first_mut()
    {
        header.user = "4294967295".to_owned();
    }
    let status = files
        .write(futures::stream::iter(messages))
        .await
        .unwrap_err();
    assert_invalid(&status, "header.user");
    assert_eq!(names_in(dir.path()), Vec::<String>::new());
    other_tenant_served(&other, &others).await;

    // A 2 MiB tar chunk.
    let target = dir.path().join("tree");
    let guest_target = target.to_string_lossy().into_owned();
    let mut big = tar();
    big.resize(TWO_MIB, 0);
    let status = files
        .upload_tar(futures::stream::iter(upload(
            &id,
            &guest_target,
            &big,
            true,
        )))
        .await
        .unwrap_err();
    assert_invalid(&status, "data");
    assert!(!target.exists(), "{:?}", names_in(dir.path()));
    other_tenant_served(&other, &others).await;

    // A tar cut in its last entry, and one cut between entries (before its
    // end-of-archive blocks): refused, and nothing is left, not even the
    // target the upload made.
    let whole = tar();
    for cut in [whole.len() - 4096, 1024] {
        let status = files
            .upload_tar(futures::stream::iter(upload(
                &id,
                &guest_target,
                &whole[..cut],
                false,
            )))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{cut}: {status:?}");
        assert!(status.message().contains("invalid tar"), "{status:?}");
        assert!(!target.exists(), "{cut}: {:?}", names_in(dir.path()));
        other_tenant_served(&other, &others).await;
    }
    // Whole, the same archive lands.
    files
        .upload_tar(futures::stream::iter(upload(
            &id,
            &guest_target,
            &whole,
            false,
        )))
        .await
        .unwrap();
    assert_eq!(names_in(&target.join("sub")), ["big", "small"]);

    // Into a directory that has files: a cut tar leaves them alone and
    // adds nothing.
    let kept = dir.path().join("kept");
    std::fs::create_dir(&kept).unwrap();
    std::fs::write(kept.join("mine"), "mine").unwrap();
    let status = files
        .upload_tar(futures::stream::iter(upload(
            &id,
            &kept.to_string_lossy(),
            &whole[..whole.len() - 4096],
            false,
        )))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(names_in(&kept), ["mine"]);
    other_tenant_served(&other, &others).await;
    server.stop().await;
}

#[tokio::test]
async fn the_unchanged_uid_is_refused_naming_start_user() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let other = server
        .remote(Some(&server.key("other", api::KeyQuota::default()).await))
        .await;
    let others = create_sandbox(&other, create()).await;
    for user in ["4294967295", "0:4294967295"] {
        let error = owner
            .start(api::StartProcess {
                sandbox_id: id.clone(),
                argv: vec!["true".to_owned()],
                user: user.to_owned(),
                ..api::StartProcess::default()
            })
            .await
            .err()
            .unwrap();
        let status = error.status().unwrap();
        assert_invalid(status, "start.user");
        other_tenant_served(&other, &others).await;
    }
    server.stop().await;
}

/// A codec that sends its bytes as they are (a message that may not
/// decode) and takes the answer's bytes.
#[derive(Debug, Default, Clone, Copy)]
struct Raw;

impl tonic::codec::Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl tonic::codec::Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

#[tokio::test]
async fn a_message_that_does_not_decode_is_invalid_argument() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("prober", api::KeyQuota::default()).await;
    let other = server
        .remote(Some(&server.key("other", api::KeyQuota::default()).await))
        .await;
    let others = create_sandbox(&other, create()).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.tcp))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    // Field 2 (`path`) as a string longer than the message; then a
    // field with wire type 7, which no message has.
    for garbage in [vec![0x12, 0x7f, b'/'], vec![0x0f, 0x01]] {
        grpc.ready().await.unwrap();
        let mut request = tonic::Request::new(garbage);
        request.metadata_mut().insert(
            airlock_api::auth::HEADER,
            format!("{}{key}", airlock_api::auth::SCHEME)
                .parse()
                .unwrap(),
        );
        let status = grpc
            .unary(
                request,
                http::uri::PathAndQuery::from_static("/airlock.api.v1.Files/Stat"),
                Raw,
            )
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("does not decode"), "{status:?}");
        other_tenant_served(&other, &others).await;
    }
    server.stop().await;
}

// The CLI runs as a child process while this runtime serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_symlink_downloads_with_its_targets_mode() {
    use std::os::unix::fs::PermissionsExt;
    let server = TestServer::start(Options::default()).await;
    let key = server.key("alice", api::KeyQuota::default()).await;
    let alice = server.remote(Some(&key)).await;
    let id = create_sandbox(&alice, create()).await;
    let other = server
        .remote(Some(&server.key("other", api::KeyQuota::default()).await))
        .await;
    let others = create_sandbox(&other, create()).await;
    // The process backend's guest is this host: its files are these.
    let guest = tempfile::tempdir().unwrap();
    std::fs::write(guest.path().join("secret"), "only mine").unwrap();
    std::fs::set_permissions(
        guest.path().join("secret"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::os::unix::fs::symlink("secret", guest.path().join("link")).unwrap();
    std::os::unix::fs::symlink(guest.path().join("link"), guest.path().join("chain")).unwrap();
    let host = tempfile::tempdir().unwrap();
    let cli = airlock_testkit::airlock_bin();
    for name in ["link", "chain"] {
        let dest = host.path().join(name);
        let mut command = std::process::Command::new(&cli);
        command
            .args(["sandbox", "cp"])
            .arg(format!("{id}:{}", guest.path().join(name).display()))
            .arg(&dest)
            .env(airlock_client::HOST_ENV, format!("http://{}", server.tcp))
            .env(airlock_client::API_KEY_ENV, &key);
        // Off the test's runtime: the server answers on it meanwhile.
        let out = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
            .unwrap();
        assert!(out.status.success(), "{name}: {out:?}");
        let meta = std::fs::symlink_metadata(&dest).unwrap();
        assert!(meta.is_file(), "{name}");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600, "{name}");
        assert_eq!(std::fs::read(&dest).unwrap(), b"only mine");
        other_tenant_served(&other, &others).await;
    }
    server.stop().await;
}
