//! What the server refuses and what it does: bad input of every kind is
//! INVALID_ARGUMENT naming the field, and the server answers the next call;
//! the library's errors reach clients with their kind; programs, files
//! (and a write cut before its `end`) and code through the API. On a real
//! server (process backend, no VMs).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airlock_client::{api, Client};
use airlock_testkit::{create, create_sandbox, refusal, run, Options, TestServer};
use futures::StreamExt;
use tonic::Code;

fn field(status: &tonic::Status) -> Option<&str> {
    airlock_client::reason::field_of(status)
}

/// Asserts INVALID_ARGUMENT for `expected_field`.
fn assert_invalid(status: tonic::Status, expected_field: &str) {
    assert_eq!(
        status.code(),
        Code::InvalidArgument,
        "{expected_field}: {status:?}"
    );
    assert_eq!(field(&status), Some(expected_field), "{status:?}");
    assert!(status.message().starts_with(expected_field), "{status:?}");
}

#[tokio::test]
async fn every_bad_create_names_its_field_and_the_server_goes_on() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let mut sandboxes = owner.sandboxes();
    let cases: Vec<(api::CreateSandboxRequest, &str)> = vec![
        (
            api::CreateSandboxRequest {
                memory_mib: 10,
                ..create()
            },
            "memory_mib",
        ),
        (
            api::CreateSandboxRequest {
                vcpus: 1000,
                ..create()
            },
            "vcpus",
        ),
        (
            api::CreateSandboxRequest {
                metadata: (0..65).map(|i| (format!("k{i}"), String::new())).collect(),
                ..create()
            },
            "metadata",
        ),
        (
            api::CreateSandboxRequest {
                metadata: [("bad key".into(), "v".into())].into(),
                ..create()
            },
            "metadata",
        ),
        (
            api::CreateSandboxRequest {
                envs: [("1X".into(), "v".into())].into(),
                ..create()
            },
            "envs",
        ),
        (
            api::CreateSandboxRequest {
                allow_net: vec!["*.*.bad".into()],
                ..create()
            },
            "allow_net",
        ),
        (
            api::CreateSandboxRequest {
                public_ports: vec![0],
                ..create()
            },
            "public_ports",
        ),
        (
            api::CreateSandboxRequest {
                public_ports: vec![70_000],
                ..create()
            },
            "public_ports",
        ),
        (
            api::CreateSandboxRequest {
                public_ports: (1..=17).collect(),
                ..create()
            },
            "public_ports",
        ),
        (
            api::CreateSandboxRequest {
                secrets: vec![api::Secret {
                    name: "TOKEN".into(),
                    value: "line\nbreak".into(),
                    hosts: vec!["api.example".into()],
                }],
                ..create()
            },
            "secrets",
        ),
        (
            api::CreateSandboxRequest {
                secrets: vec![api::Secret {
                    name: "TOKEN".into(),
                    value: "x".into(),
                    hosts: vec![],
                }],
                ..create()
            },
            "secrets",
        ),
        (
            api::CreateSandboxRequest {
                idle: Some(api::Idle {
                    timeout_secs: 5,
                    policy: 0,
                }),
                ..create()
            },
            "idle.policy",
        ),
        (
            api::CreateSandboxRequest {
                idle: Some(api::Idle {
                    timeout_secs: 0,
                    policy: api::IdlePolicy::Stop.into(),
                }),
                ..create()
            },
            "idle.timeout_secs",
        ),
        (
            api::CreateSandboxRequest {
                timeout_secs: Some(u64::MAX),
                ..create()
            },
            "timeout_secs",
        ),
        (
            api::CreateSandboxRequest {
                image: "a b".into(),
                ..api::CreateSandboxRequest::default()
            },
            "image",
        ),
        (
            api::CreateSandboxRequest {
                image: "default".into(),
                ..create()
            },
            "image",
        ),
        (
            api::CreateSandboxRequest {
                workspace: "../escape".into(),
                no_image: false,
                image: String::new(),
                ..api::CreateSandboxRequest::default()
            },
            "workspace",
        ),
        (
            api::CreateSandboxRequest {
                ca_certs: vec!["not a certificate".into()],
                ..create()
            },
            "ca_certs",
        ),
        (
            api::CreateSandboxRequest {
                ca_certs: vec![
                    "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".into(),
                ],
                ..create()
            },
            "ca_certs",
        ),
        (
            api::CreateSandboxRequest {
                ca_certs: vec![String::new(); 17],
                ..create()
            },
            "ca_certs",
        ),
    ];
    for (request, expected) in cases {
        assert_invalid(sandboxes.create(request).await.unwrap_err(), expected);
    }
    // Not a field's fault: an image nobody built, a template nobody made.
    let missing = sandboxes
        .create(api::CreateSandboxRequest {
            image: "no-such-image".into(),
            ..api::CreateSandboxRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&missing),
        (Code::NotFound, Some(api::ErrorReason::NotFound))
    );
    // A key may not make a sandbox that never ends.
    let key = server.key("ci", api::KeyQuota::default()).await;
    let forever = server
        .remote(Some(&key))
        .await
        .sandboxes()
        .create(api::CreateSandboxRequest {
            timeout_secs: Some(0),
            ..create()
        })
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&forever),
        (Code::PermissionDenied, Some(api::ErrorReason::OwnerOnly))
    );
    // Still serving.
    let id = create_sandbox(&owner, create()).await;
    assert_eq!(run(&owner, &id, &["true"]).await.2.exit_code, 0);
    server.stop().await;
}

#[tokio::test]
async fn bad_ids_pages_counts_and_process_requests_name_their_field() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let mut sandboxes = owner.sandboxes();
    for bad in ["", "../../etc", &"x".repeat(300)] {
        let status = sandboxes
            .get(api::GetSandboxRequest {
                sandbox_id: bad.to_owned(),
            })
            .await
            .unwrap_err();
        assert_invalid(status, "sandbox_id");
    }
    assert_invalid(
        sandboxes
            .list(api::ListSandboxesRequest {
                page_size: 5000,
                ..Default::default()
            })
            .await
            .unwrap_err(),
        "page_size",
    );
    assert_invalid(
        sandboxes
            .list(api::ListSandboxesRequest {
                states: vec![99],
                ..Default::default()
            })
            .await
            .unwrap_err(),
        "states",
    );
    for count in [0, 100] {
        assert_invalid(
            sandboxes
                .fork(api::ForkSandboxRequest {
                    sandbox_id: id.clone(),
                    count,
                })
                .await
                .unwrap_err(),
            "count",
        );
    }
    let start = |edit: fn(&mut api::StartProcess)| {
        let mut start = api::StartProcess {
            sandbox_id: id.clone(),
            argv: vec!["true".into()],
            ..api::StartProcess::default()
        };
        edit(&mut start);
        start
    };
    let cases: Vec<(api::StartProcess, &str)> = vec![
        (start(|s| s.argv.clear()), "start.argv"),
        (start(|s| s.cwd = "relative".into()), "start.cwd"),
        (start(|s| s.timeout_secs = Some(-1.0)), "start.timeout_secs"),
        (
            start(|s| s.timeout_secs = Some(f64::NAN)),
            "start.timeout_secs",
        ),
        (
            start(|s| {
                s.limits = Some(api::Limits {
                    pids: Some(0),
                    ..Default::default()
                })
            }),
            "start.limits.pids",
        ),
        (
            start(|s| s.pty = Some(api::TerminalSize { rows: 0, cols: 80 })),
            "start.pty.rows",
        ),
        (
            start(|s| s.envs = [("A=B".into(), "x".into())].into()),
            "start.envs",
        ),
    ];
    for (request, expected) in cases {
        let error = owner.start(request).await.unwrap_err();
        assert_invalid(error.status().unwrap().clone(), expected);
    }
    let mut processes = owner.processes();
    assert_invalid(
        processes
            .send_signal(api::SendSignalRequest {
                sandbox_id: id.clone(),
                process: None,
                signal: 9,
            })
            .await
            .unwrap_err(),
        "process",
    );
    assert_invalid(
        processes
            .send_signal(api::SendSignalRequest {
                sandbox_id: id.clone(),
                process: Some(api::ProcessSelector {
                    selector: Some(api::process_selector::Selector::Pid(1)),
                }),
                signal: 0,
            })
            .await
            .unwrap_err(),
        "signal",
    );
    // A stream that does not begin with its start.
    let inputs = futures::stream::iter([api::ProcessInput {
        input: Some(api::process_input::Input::Stdin("x".into())),
    }]);
    assert_invalid(processes.start(inputs).await.unwrap_err(), "start");
    let mut files = owner.files();
    assert_invalid(
        files
            .stat(api::StatRequest {
                sandbox_id: id.clone(),
                path: "relative".into(),
            })
            .await
            .unwrap_err(),
        "path",
    );
    assert_invalid(
        files
            .list(api::ListFilesRequest {
                sandbox_id: id.clone(),
                path: "/".into(),
                depth: 1000,
            })
            .await
            .unwrap_err(),
        "depth",
    );
    let headless = futures::stream::iter([api::WriteFileRequest {
        part: Some(api::write_file_request::Part::Data("x".into())),
    }]);
    assert_invalid(files.write(headless).await.unwrap_err(), "header");
    let mut code = owner.code();
    assert_invalid(
        code.run_code(api::RunCodeRequest {
            sandbox_id: id.clone(),
            code: "1".into(),
            language: "cobol".into(),
            ..Default::default()
        })
        .await
        .unwrap_err(),
        "language",
    );
    assert_invalid(
        code.run_code(api::RunCodeRequest {
            sandbox_id: id.clone(),
            code: "1".into(),
            context_id: "a b".into(),
            ..Default::default()
        })
        .await
        .unwrap_err(),
        "context_id",
    );
    let mut network = owner.network();
    assert_invalid(
        network
            .change_policy(api::ChangePolicyRequest {
                sandbox_id: id.clone(),
                allow: vec!["not a rule!".into()],
                deny: vec![],
            })
            .await
            .unwrap_err(),
        "allow",
    );
    // Still serving, the sandbox still answers.
    assert_eq!(run(&owner, &id, &["echo", "ok"]).await.0, b"ok\n");
    server.stop().await;
}

#[tokio::test]
async fn library_errors_reach_clients_with_their_kind() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let missing = owner
        .start(api::StartProcess {
            sandbox_id: id.clone(),
            argv: vec!["no-such-program-anywhere".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    let status = missing.status().unwrap();
    assert_eq!(
        refusal(status),
        (Code::NotFound, Some(api::ErrorReason::GuestNotFound))
    );
    assert!(
        status.message().contains("no-such-program-anywhere"),
        "{status:?}"
    );
    let absent = owner
        .files()
        .stat(api::StatRequest {
            sandbox_id: id.clone(),
            path: "/no/such/path/anywhere".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&absent),
        (Code::NotFound, Some(api::ErrorReason::GuestNotFound))
    );
    let network = owner
        .network()
        .get_policy(api::GetPolicyRequest {
            sandbox_id: id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&network),
        (Code::FailedPrecondition, Some(api::ErrorReason::NoNetwork))
    );
    let context = owner
        .code()
        .restart_context(api::ContextRequest {
            sandbox_id: id.clone(),
            context_id: "never-made".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(context.code(), Code::NotFound);
    owner
        .sandboxes()
        .kill(api::KillSandboxRequest {
            sandbox_id: id.clone(),
        })
        .await
        .unwrap();
    let gone = owner
        .sandboxes()
        .kill(api::KillSandboxRequest { sandbox_id: id })
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&gone),
        (Code::NotFound, Some(api::ErrorReason::SandboxNotFound))
    );
    server.stop().await;
}

/// The events of a program to its end: stdout, stderr, exit.
async fn drain(stream: &mut airlock_client::ProcessStream) -> (Vec<u8>, api::ProcessExit) {
    let mut out = Vec::new();
    loop {
        match stream.next_event().await.unwrap() {
            Some(api::process_event::Event::Stdout(o)) => out.extend_from_slice(&o.data),
            Some(api::process_event::Event::Exited(exit)) => return (out, exit),
            Some(_) => {}
            None => panic!("no exit"),
        }
    }
}

fn by_tag(tag: &str) -> Option<api::ProcessSelector> {
    Some(api::ProcessSelector {
        selector: Some(api::process_selector::Selector::Tag(tag.to_owned())),
    })
}

#[tokio::test]
async fn programs_take_stdin_run_on_detached_and_are_found_again() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    // stdin, streamed back.
    let mut cat = owner
        .start(api::StartProcess {
            sandbox_id: id.clone(),
            argv: vec!["cat".into()],
            stdin: true,
            ..Default::default()
        })
        .await
        .unwrap();
    cat.inputs().stdin("hello ".into()).await.unwrap();
    cat.inputs().stdin("world".into()).await.unwrap();
    cat.inputs().close_stdin().await.unwrap();
    let (out, exit) = drain(&mut cat).await;
    assert_eq!((out.as_slice(), exit.exit_code), (&b"hello world"[..], 0));
    // Exit codes and the sandbox's environment.
    let mut with_env = create();
    with_env.envs.insert("GREETING".into(), "hi".into());
    let env_id = create_sandbox(&owner, with_env).await;
    let (out, _, exit) = run(&owner, &env_id, &["sh", "-c", "echo $GREETING; exit 3"]).await;
    assert_eq!((out.as_slice(), exit.exit_code), (&b"hi\n"[..], 3));

    // A background program: the client goes, the program runs on.
    let started = owner
        .start(api::StartProcess {
            sandbox_id: id.clone(),
            argv: vec![
                "sh".into(),
                "-c".into(),
                "echo first; read line; echo got $line; exit 7".into(),
            ],
            stdin: true,
            tag: "bg".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let pid = started.pid();
    drop(started);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let listed = owner
        .processes()
        .list(api::ListProcessesRequest {
            sandbox_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let bg = listed.processes.iter().find(|p| p.pid == pid).unwrap();
    assert!(bg.running && bg.tag == "bg", "{bg:?}");
    // Re-attached with replay, fed, waited for from another call.
    let mut attached = owner
        .processes()
        .connect(api::ConnectProcessRequest {
            sandbox_id: id.clone(),
            process: by_tag("bg"),
            offset: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let waiter = {
        let owner: Client = owner.clone();
        let id = id.clone();
        tokio::spawn(async move {
            owner
                .processes()
                .wait(api::WaitRequest {
                    sandbox_id: id,
                    process: by_tag("bg"),
                })
                .await
                .map(tonic::Response::into_inner)
        })
    };
    owner
        .processes()
        .send_stdin(api::SendStdinRequest {
            sandbox_id: id.clone(),
            process: by_tag("bg"),
            data: "line\n".into(),
            close: true,
        })
        .await
        .unwrap();
    let mut replayed = Vec::new();
    let mut offsets = Vec::new();
    while let Some(event) = attached.next().await {
        match event.unwrap().event {
            Some(api::process_event::Event::Stdout(o)) => {
                offsets.push(o.offset);
                replayed.extend_from_slice(&o.data);
            }
            Some(api::process_event::Event::Exited(exit)) => {
                assert_eq!(exit.exit_code, 7);
                break;
            }
            _ => {}
        }
    }
    assert_eq!(replayed, b"first\ngot line\n");
    assert_eq!(offsets.first(), Some(&0));
    let waited = waiter.await.unwrap().unwrap();
    assert_eq!(waited.exit_code, 7);

    // A signal ends a program; kill_on_disconnect takes it down with the
    // client.
    let sleeper = owner
        .start(api::StartProcess {
            sandbox_id: id.clone(),
            argv: vec!["sleep".into(), "600".into()],
            kill_on_disconnect: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let sleeper_pid = sleeper.pid();
    drop(sleeper);
    let ended = owner
        .processes()
        .wait(api::WaitRequest {
            sandbox_id: id.clone(),
            process: Some(api::ProcessSelector {
                selector: Some(api::process_selector::Selector::Pid(sleeper_pid)),
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ended.signal, 9, "{ended:?}");
    server.stop().await;
}

#[tokio::test]
async fn files_stream_both_ways_and_trees_travel_as_tar() {
    use sha2::{Digest, Sha256};
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    // The process backend's "guest" is this host: work in a directory of
    // the test's own.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_string_lossy().into_owned();
    let path = format!("{root}/data.bin");
    let data: Vec<u8> = (0..8 * 1024 * 1024u32)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let chunks: Vec<api::WriteFileRequest> = std::iter::once(api::WriteFileRequest {
        part: Some(api::write_file_request::Part::Header(api::WriteHeader {
            sandbox_id: id.clone(),
            path: path.clone(),
            mode: 0o600,
            ..Default::default()
        })),
    })
    .chain(data.chunks(300_000).map(|c| api::WriteFileRequest {
        part: Some(api::write_file_request::Part::Data(c.to_vec().into())),
    }))
    .collect();
    let written = owner
        .files()
        .write(futures::stream::iter(chunks))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(written.bytes_written, data.len() as u64);
    assert_eq!(written.file.unwrap().mode, 0o600);
    let mut read = owner
        .files()
        .read(api::ReadFileRequest {
            sandbox_id: id.clone(),
            path: path.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut hash = Sha256::new();
    let mut total = 0;
    while let Some(chunk) = read.next().await {
        let chunk = chunk.unwrap().data;
        assert!(chunk.len() <= airlock_client::limits::MAX_CHUNK_BYTES);
        total += chunk.len();
        hash.update(&chunk);
    }
    assert_eq!(total, data.len());
    assert_eq!(hash.finalize().as_slice(), Sha256::digest(&data).as_slice());

    let mut files = owner.files();
    let exists = |path: String| {
        let mut files = owner.files();
        let id = id.clone();
        async move {
            files
                .exists(api::ExistsRequest {
                    sandbox_id: id,
                    path,
                })
                .await
                .unwrap()
                .into_inner()
                .exists
        }
    };
    assert!(exists(path.clone()).await);
    assert!(!exists(format!("{root}/nope")).await);
    let made = |path: String| {
        let mut files = owner.files();
        let id = id.clone();
        async move {
            files
                .make_dir(api::MakeDirRequest {
                    sandbox_id: id,
                    path,
                })
                .await
                .unwrap()
                .into_inner()
                .created
        }
    };
    assert!(made(format!("{root}/a/b")).await);
    assert!(!made(format!("{root}/a/b")).await);
    let renamed = files
        .rename(api::RenameRequest {
            sandbox_id: id.clone(),
            from: path.clone(),
            to: format!("{root}/a/b/moved.bin"),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(renamed.name, "moved.bin");
    let listed = files
        .list(api::ListFilesRequest {
            sandbox_id: id.clone(),
            path: root.clone(),
            depth: 3,
        })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = listed.entries.iter().map(|e| e.name.as_str()).collect();
    assert!(
        names.contains(&"moved.bin") && names.contains(&"b"),
        "{names:?}"
    );
    // A tree out as tar, and back in elsewhere.
    let tar: Vec<u8> = files
        .download_tar(api::DownloadTarRequest {
            sandbox_id: id.clone(),
            path: format!("{root}/a"),
        })
        .await
        .unwrap()
        .into_inner()
        .map(|c| c.unwrap().data)
        .collect::<Vec<_>>()
        .await
        .concat();
    let upload = std::iter::once(api::UploadTarRequest {
        part: Some(api::upload_tar_request::Part::Header(
            api::UploadTarHeader {
                sandbox_id: id.clone(),
                path: format!("{root}/copy"),
            },
        )),
    })
    .chain(
        tar.chunks(100_000)
            .map(|c| api::UploadTarRequest {
                part: Some(api::upload_tar_request::Part::Data(c.to_vec().into())),
            })
            .collect::<Vec<_>>(),
    );
    files
        .upload_tar(futures::stream::iter(upload))
        .await
        .unwrap();
    let copied = std::fs::read(dir.path().join("copy/b/moved.bin")).unwrap();
    assert_eq!(copied.len(), data.len());
    files
        .remove(api::RemoveRequest {
            sandbox_id: id.clone(),
            path: format!("{root}/copy"),
        })
        .await
        .unwrap();
    assert!(!exists(format!("{root}/copy")).await);
    server.stop().await;
}

/// A write's messages: the header (asking for `end` or not), `data` in two
/// chunks, and `end` when `end` says.
fn write_messages(
    id: &str,
    path: &str,
    data: &[u8],
    require_end: bool,
    end: bool,
) -> Vec<api::WriteFileRequest> {
    use api::write_file_request::Part;
    let header = api::WriteHeader {
        sandbox_id: id.to_owned(),
        path: path.to_owned(),
        require_end,
        ..Default::default()
    };
    let (first, second) = data.split_at(data.len() / 2);
    let mut messages = vec![
        Part::Header(header),
        Part::Data(first.to_vec().into()),
        Part::Data(second.to_vec().into()),
    ];
    if end {
        messages.push(Part::End(api::WriteEnd {}));
    }
    messages
        .into_iter()
        .map(|part| api::WriteFileRequest { part: Some(part) })
        .collect()
}

/// The names in a directory, sorted.
fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_write_that_asks_for_its_end_keeps_nothing_without_it() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("file.txt");
    let guest_path = path.to_string_lossy().into_owned();
    let write = |messages: Vec<api::WriteFileRequest>| {
        let mut files = owner.files();
        async move { files.write(futures::stream::iter(messages)).await }
    };

    // Cut (the stream ends after the data, without `end`): the call fails
    // and no file, not even a temporary, is left.
    let cut = write(write_messages(&id, &guest_path, b"cut short", true, false))
        .await
        .unwrap_err();
    assert!(cut.message().contains("without `end`"), "{cut:?}");
    assert_eq!(names_in(dir.path()), Vec::<String>::new());

    // Cut over a file that exists: the old contents stay, alone.
    std::fs::write(&path, "the old contents").unwrap();
    write(write_messages(&id, &guest_path, b"cut short", true, false))
        .await
        .unwrap_err();
    assert_eq!(std::fs::read(&path).unwrap(), b"the old contents");
    assert_eq!(names_in(dir.path()), ["file.txt"]);

    // With `end`: the file is the data; anything sent after `end` is not
    // read.
    let mut messages = write_messages(&id, &guest_path, b"the new contents", true, true);
    messages.push(api::WriteFileRequest {
        part: Some(api::write_file_request::Part::Data(
            b" and more".to_vec().into(),
        )),
    });
    let written = write(messages).await.unwrap().into_inner();
    assert_eq!(written.bytes_written, 16);
    assert_eq!(std::fs::read(&path).unwrap(), b"the new contents");

    // A client of revision 1 (no `require_end`, no `end`): the end of the
    // stream is the end of the file, as before.
    let written = write(write_messages(
        &id,
        &guest_path,
        b"an old client's",
        false,
        false,
    ))
    .await
    .unwrap()
    .into_inner();
    assert_eq!(written.bytes_written, 15);
    assert_eq!(std::fs::read(&path).unwrap(), b"an old client's");
    assert_eq!(names_in(dir.path()), ["file.txt"]);
    server.stop().await;
}

#[tokio::test]
async fn calls_in_flight_per_key_are_bounded() {
    let server = TestServer::start(Options {
        max_calls_per_key: Some(2),
        ..Options::default()
    })
    .await;
    let key = server.key("busy", api::KeyQuota::default()).await;
    let client = server.remote(Some(&key)).await;
    let id = create_sandbox(&client, create()).await;
    let sleep = |n: &str| api::StartProcess {
        sandbox_id: id.clone(),
        argv: vec!["sleep".into(), n.into()],
        ..Default::default()
    };
    let first = client.start(sleep("30")).await.unwrap();
    let second = client.start(sleep("30")).await.unwrap();
    let third = client.start(sleep("30")).await.unwrap_err();
    assert_eq!(
        refusal(third.status().unwrap()),
        (Code::ResourceExhausted, Some(api::ErrorReason::RateLimited))
    );
    drop((first, second));
    // The places come back when the streams end.
    let mut back = false;
    for _ in 0..50 {
        if client.ping().await.is_ok() && client.start(sleep("0")).await.is_ok() {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "the calls' places were not given back");
    server.stop().await;
}

#[tokio::test]
async fn code_runs_in_contexts_with_values() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let cell = |code: &str, context: &str| api::RunCodeRequest {
        sandbox_id: id.clone(),
        code: code.to_owned(),
        context_id: context.to_owned(),
        ..Default::default()
    };
    let collect = |request: api::RunCodeRequest| {
        let mut code = owner.code();
        async move {
            let mut events = code.run_code(request).await.unwrap().into_inner();
            let mut all = Vec::new();
            while let Some(event) = events.next().await {
                all.push(event.unwrap().event.unwrap());
            }
            all
        }
    };
    collect(cell("x = 41", "ctx")).await;
    let events = collect(cell("x + 1", "ctx")).await;
    let value = events.iter().find_map(|e| match e {
        api::code_event::Event::Result(r) if r.is_main_result => r
            .items
            .iter()
            .find(|i| i.mime_type == "text/plain")
            .map(|i| i.data.clone()),
        _ => None,
    });
    assert_eq!(value.as_deref(), Some(&b"42"[..]));
    let events = collect(cell("1 / 0", "ctx")).await;
    assert!(
        events.iter().any(
            |e| matches!(e, api::code_event::Event::Error(err) if err.name == "ZeroDivisionError")
        ),
        "{events:?}"
    );
    let contexts = owner
        .code()
        .list_contexts(api::ListContextsRequest {
            sandbox_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        contexts.contexts.iter().any(|c| c.context_id == "ctx"),
        "{contexts:?}"
    );
    server.stop().await;
}

/// The sandbox's end as `Get` answers it, in milliseconds from now.
async fn ends_in_ms(client: &Client, id: &str) -> i64 {
    let info = client
        .sandboxes()
        .get(api::GetSandboxRequest {
            sandbox_id: id.to_owned(),
        })
        .await
        .unwrap()
        .into_inner();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    info.ends_at_ms as i64 - now
}

/// Whether the sandbox has ended (its calls are refused, or `Get` says so).
async fn ended(client: &Client, id: &str) -> bool {
    match client
        .sandboxes()
        .get(api::GetSandboxRequest {
            sandbox_id: id.to_owned(),
        })
        .await
    {
        Ok(info) => info.into_inner().state == api::SandboxState::Ended as i32,
        Err(status) => status.code() == Code::NotFound,
    }
}

#[tokio::test]
async fn set_timeout_moves_a_sandboxs_end_either_way() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let key = server.key("timer", api::KeyQuota::default()).await;
    let remote = server.remote(Some(&key)).await;
    let set = |client: &Client, id: &str, secs: u64| {
        let mut sandboxes = client.sandboxes();
        let request = api::SetTimeoutRequest {
            sandbox_id: id.to_owned(),
            timeout_secs: secs,
        };
        async move { sandboxes.set_timeout(request).await }
    };

    // A later end: a sandbox made to end in 2 s still runs past that.
    let kept = create_sandbox(
        &remote,
        api::CreateSandboxRequest {
            timeout_secs: Some(2),
            ..create()
        },
    )
    .await;
    let info = set(&remote, &kept, 600).await.unwrap().into_inner();
    assert_eq!(info.sandbox_id, kept);
    let left = ends_in_ms(&remote, &kept).await;
    assert!((590_000..=600_000).contains(&left), "ends in {left} ms");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (out, _, exit) = run(&remote, &kept, &["echo", "still here"]).await;
    assert_eq!((out.as_slice(), exit.exit_code), (&b"still here\n"[..], 0));

    // An earlier end: it is killed then.
    set(&remote, &kept, 1).await.unwrap();
    let mut waited = Duration::ZERO;
    while !ended(&remote, &kept).await {
        assert!(
            waited < Duration::from_secs(30),
            "not killed at its new end"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }

    // Never: the owner's alone; bounds and ids are checked.
    let other = create_sandbox(&remote, create()).await;
    let status = set(&remote, &other, 0).await.unwrap_err();
    assert_eq!(
        refusal(&status),
        (Code::PermissionDenied, Some(api::ErrorReason::OwnerOnly))
    );
    let status = set(&remote, &other, 31 * 24 * 3600).await.unwrap_err();
    assert_invalid(status, "timeout_secs");
    let status = set(&remote, "sandbox-nobody", 60).await.unwrap_err();
    assert_eq!(
        refusal(&status),
        (Code::NotFound, Some(api::ErrorReason::SandboxNotFound))
    );
    let info = set(&owner, &other, 0).await.unwrap().into_inner();
    assert_eq!(info.ends_at_ms, 0);
    server.stop().await;
}

#[tokio::test]
async fn bad_ingress_requests_name_their_field() {
    use tokio_stream::wrappers::ReceiverStream;
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    for (port, field) in [(0, "port"), (65_536, "port")] {
        let status = owner
            .ingress()
            .get_host(api::GetHostRequest {
                sandbox_id: id.clone(),
                port,
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status}");
        assert_eq!(airlock_client::reason::field_of(&status), Some(field));
    }
    let status = owner
        .ingress()
        .get_host(api::GetHostRequest {
            sandbox_id: String::new(),
            port: 80,
        })
        .await
        .unwrap_err();
    assert_eq!(
        airlock_client::reason::field_of(&status),
        Some("sandbox_id")
    );
    let status = owner
        .ingress()
        .rotate_token(api::RotateTokenRequest {
            sandbox_id: "../x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        airlock_client::reason::field_of(&status),
        Some("sandbox_id")
    );
    let firsts = [
        (api::forward_request::Event::Eof(true), "open"),
        (
            api::forward_request::Event::Open(api::ForwardOpen {
                sandbox_id: id.clone(),
                port: 0,
            }),
            "open.port",
        ),
    ];
    for (first, field) in firsts {
        let (send, requests) = tokio::sync::mpsc::channel(1);
        send.send(api::ForwardRequest { event: Some(first) })
            .await
            .unwrap();
        let status = owner
            .ingress()
            .forward(ReceiverStream::new(requests))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status}");
        assert_eq!(airlock_client::reason::field_of(&status), Some(field));
    }
    // The server goes on.
    owner.ping().await.unwrap();
    server.stop().await;
}
