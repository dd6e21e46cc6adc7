//! The `Files` service over the real binary on a Unix socket: atomic and
//! cut writes, reads with ranges, tree operations, tar transfer with
//! escaping entries refused, watch, and the error codes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use airlock_proto::v1::{
    upload_tar_request, write_file_request, ChmodRequest, CopyRequest, FileType, ListDirRequest,
    MakeDirRequest, PathRequest, ReadFileRequest, RemoveRequest, RenameRequest, SymlinkRequest,
    UploadTarHeader, UploadTarRequest, WatchEventKind, WatchRequest, WriteFileEnd, WriteFileHeader,
    WriteFileRequest,
};
use bytes::Bytes;
use common::Agent;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

fn header(path: &str, append: bool) -> WriteFileRequest {
    WriteFileRequest {
        kind: Some(write_file_request::Kind::Header(WriteFileHeader {
            path: path.to_owned(),
            mode: 0o640,
            create_parents: true,
            append,
            ..Default::default()
        })),
    }
}

fn data(bytes: &[u8]) -> WriteFileRequest {
    WriteFileRequest {
        kind: Some(write_file_request::Kind::Data(Bytes::copy_from_slice(
            bytes,
        ))),
    }
}

async fn write(
    agent: &Agent,
    path: &str,
    content: &[u8],
    append: bool,
) -> Result<u64, tonic::Status> {
    let end = WriteFileRequest {
        kind: Some(write_file_request::Kind::End(WriteFileEnd {})),
    };
    let messages = vec![header(path, append), data(content), end];
    agent
        .files()
        .write_file(futures::stream::iter(messages))
        .await
        .map(|r| r.into_inner().bytes_written)
}

async fn read(
    agent: &Agent,
    path: &str,
    offset: u64,
    length: u64,
) -> Result<Vec<u8>, tonic::Status> {
    let mut stream = agent
        .files()
        .read_file(ReadFileRequest {
            path: path.to_owned(),
            offset,
            length,
        })
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk?.data);
    }
    Ok(out)
}

#[tokio::test]
async fn write_read_append_and_ranges() {
    let agent = Agent::start().await;
    let path = agent.dir().join("new/dir/file.txt");
    let path = path.to_str().unwrap();
    assert_eq!(
        write(&agent, path, b"hello world", false).await.unwrap(),
        11
    );
    assert_eq!(read(&agent, path, 0, 0).await.unwrap(), b"hello world");
    assert_eq!(read(&agent, path, 6, 3).await.unwrap(), b"wor");
    write(&agent, path, b"!", true).await.unwrap();
    assert_eq!(read(&agent, path, 0, 0).await.unwrap(), b"hello world!");
    let info = agent
        .files()
        .stat(PathRequest {
            path: path.to_owned(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.r#type(), FileType::File);
    assert_eq!((info.size, info.mode), (12, 0o640));
    // Nothing but the file is left in its directory: no temporaries.
    assert_eq!(
        std::fs::read_dir(agent.dir().join("new/dir"))
            .unwrap()
            .count(),
        1
    );
}

#[tokio::test]
async fn a_cut_upload_leaves_nothing_and_keeps_the_old_file() {
    let agent = Agent::start().await;
    let dir = agent.dir().join("cut");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("file");
    std::fs::write(&path, b"old").unwrap();

    let (tx, rx) = mpsc::channel(4);
    tx.send(header(path.to_str().unwrap(), false))
        .await
        .unwrap();
    tx.send(data(&[7u8; 300_000])).await.unwrap();
    let mut client = agent.files();
    let call = tokio::spawn(async move { client.write_file(ReceiverStream::new(rx)).await });
    // Let the agent take the data, then close the stream without `end`.
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(tx);
    let err = call.await.unwrap().unwrap_err();
    assert_eq!(err.code(), Code::Aborted, "{}", err.message());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        if names.len() == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left behind: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(std::fs::read(&path).unwrap(), b"old");
}

#[tokio::test]
async fn errors_map_to_codes_and_name_the_path() {
    let agent = Agent::start().await;
    let dir = agent.dir().to_str().unwrap().to_owned();
    let missing = format!("{dir}/missing");
    let err = read(&agent, &missing, 0, 0).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains(&missing), "{}", err.message());

    let err = read(&agent, &dir, 0, 0).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());

    let err = read(&agent, "relative/path", 0, 0).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    let sub = format!("{dir}/sub");
    let mkdir = |path: &str, parents| MakeDirRequest {
        path: path.to_owned(),
        parents,
        ..Default::default()
    };
    agent.files().make_dir(mkdir(&sub, false)).await.unwrap();
    let err = agent
        .files()
        .make_dir(mkdir(&sub, false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    write(&agent, &format!("{sub}/f"), b"x", false)
        .await
        .unwrap();
    let err = agent
        .files()
        .remove(RemoveRequest {
            path: sub.clone(),
            recursive: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    let err = agent
        .files()
        .list_dir(ListDirRequest {
            path: format!("{sub}/f"),
            depth: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let err = write(&agent, &format!("{sub}/f/g"), b"x", false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    agent
        .files()
        .remove(RemoveRequest {
            path: sub.clone(),
            recursive: true,
        })
        .await
        .unwrap();
    let err = agent
        .files()
        .stat(PathRequest { path: sub })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

#[tokio::test]
async fn tree_operations() {
    let agent = Agent::start().await;
    let dir = agent.dir().to_str().unwrap().to_owned();
    write(&agent, &format!("{dir}/t/a/one"), b"1", false)
        .await
        .unwrap();
    agent
        .files()
        .symlink(SymlinkRequest {
            target: "a/one".into(),
            link: format!("{dir}/t/link"),
        })
        .await
        .unwrap();
    agent
        .files()
        .chmod(ChmodRequest {
            path: format!("{dir}/t/a/one"),
            mode: 0o700,
        })
        .await
        .unwrap();
    agent
        .files()
        .copy(CopyRequest {
            from: format!("{dir}/t"),
            to: format!("{dir}/u"),
        })
        .await
        .unwrap();
    agent
        .files()
        .rename(RenameRequest {
            from: format!("{dir}/u/a/one"),
            to: format!("{dir}/u/a/two"),
        })
        .await
        .unwrap();
    let mut stream = agent
        .files()
        .list_dir(ListDirRequest {
            path: format!("{dir}/u"),
            depth: 2,
        })
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    while let Some(info) = stream.next().await {
        let info = info.unwrap();
        seen.push((
            info.path.trim_start_matches(&dir).to_owned(),
            info.r#type(),
            info.mode,
            info.symlink_target,
        ));
    }
    assert_eq!(
        seen,
        [
            ("/u/a".to_owned(), FileType::Directory, 0o755, String::new()),
            ("/u/a/two".to_owned(), FileType::File, 0o700, String::new()),
            (
                "/u/link".to_owned(),
                FileType::Symlink,
                0o777,
                "a/one".to_owned()
            ),
        ]
    );
}

#[tokio::test]
async fn tar_upload_refuses_escaping_entries_and_download_round_trips() {
    let agent = Agent::start().await;
    let dir = agent.dir().to_str().unwrap().to_owned();
    // An archive whose second entry climbs out.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(2);
    h.set_mode(0o600);
    h.set_path("fine").unwrap();
    h.set_cksum();
    b.append(&h, &b"ok"[..]).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(2);
    h.set_mode(0o600);
    let name = b"../escaped";
    h.as_old_mut().name[..name.len()].copy_from_slice(name);
    h.set_cksum();
    b.append(&h, &b"no"[..]).unwrap();
    let bytes = b.into_inner().unwrap();
    let upload = |target: String, bytes: Vec<u8>| {
        futures::stream::iter(vec![
            UploadTarRequest {
                kind: Some(upload_tar_request::Kind::Header(UploadTarHeader {
                    path: target,
                    user: String::new(),
                })),
            },
            UploadTarRequest {
                kind: Some(upload_tar_request::Kind::Data(Bytes::from(bytes))),
            },
        ])
    };
    let err = agent
        .files()
        .upload_tar(upload(format!("{dir}/x/target"), bytes))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("../escaped"), "{}", err.message());
    assert!(!agent.dir().join("x/escaped").exists());

    // Download a tree and upload it elsewhere.
    let src = agent.dir().join("src");
    std::fs::create_dir_all(src.join("bin")).unwrap();
    std::fs::write(src.join("bin/tool"), b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(src.join("bin/tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("bin/tool", src.join("tool")).unwrap();
    let mut stream = agent
        .files()
        .download_tar(PathRequest {
            path: src.to_str().unwrap().to_owned(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut archive = Vec::new();
    while let Some(chunk) = stream.next().await {
        archive.extend_from_slice(&chunk.unwrap().data);
    }
    let entries = agent
        .files()
        .upload_tar(upload(format!("{dir}/copy"), archive))
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert!(entries >= 3, "{entries}");
    let copy = agent.dir().join("copy");
    assert_eq!(
        std::fs::read(copy.join("bin/tool")).unwrap(),
        b"#!/bin/sh\n"
    );
    let mode = std::fs::metadata(copy.join("bin/tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(
        std::fs::read_link(copy.join("tool")).unwrap(),
        std::path::Path::new("bin/tool")
    );
}

#[tokio::test]
async fn watch_reports_creation_by_a_program() {
    let agent = Agent::start().await;
    let dir = agent.dir().join("watched");
    std::fs::create_dir_all(dir.join("deep")).unwrap();
    let mut events = agent
        .files()
        .watch(WatchRequest {
            path: dir.to_str().unwrap().to_owned(),
            recursive: true,
        })
        .await
        .unwrap()
        .into_inner();
    let target = dir.join("deep/made-by-sh");
    agent
        .run_argv(&["/bin/sh", "-c", &format!("echo hi > {}", target.display())])
        .await
        .unwrap();
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            let event = event.unwrap();
            if event.kind() == WatchEventKind::Create && event.path == target.to_str().unwrap() {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true));
}
