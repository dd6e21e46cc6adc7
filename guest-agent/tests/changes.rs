//! Change tracking without a VM: `SnapshotTree`, then a program changes a
//! directory, then `TreeChanges` lists exactly what it created, modified
//! and deleted (with sizes), and `DownloadPaths` brings the files back as
//! one tar stream; limits truncate instead of failing.

// A test panics with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use airlock_proto::v1::{
    ChangeKind, DownloadPathsRequest, FileChange, FileType, SnapshotTreeRequest, TreeChangesRequest,
};
use common::Agent;
use tonic::Code;

async fn snapshot(agent: &Agent, roots: &[&str], max_entries: u64) -> String {
    agent
        .files()
        .snapshot_tree(SnapshotTreeRequest {
            roots: roots.iter().map(|r| (*r).to_owned()).collect(),
            max_entries,
        })
        .await
        .unwrap()
        .into_inner()
        .id
}

async fn changes(agent: &Agent, id: &str, max_changes: u64) -> (Vec<FileChange>, bool) {
    let mut stream = agent
        .files()
        .tree_changes(TreeChangesRequest {
            snapshot_id: id.into(),
            max_changes,
            release: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut all = Vec::new();
    let mut truncated = None;
    while let Some(chunk) = stream.message().await.unwrap() {
        assert!(truncated.is_none(), "a chunk after the summary");
        all.extend(chunk.changes);
        truncated = chunk.summary.map(|s| {
            assert_eq!(s.reported as usize, all.len());
            s.truncated
        });
    }
    (all, truncated.expect("no summary"))
}

fn line(c: &FileChange) -> String {
    let kind = match c.kind() {
        ChangeKind::Created => "created",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
        ChangeKind::Unspecified => "?",
    };
    let ty = match c.r#type() {
        FileType::Directory => "dir",
        FileType::Symlink => "link",
        _ => "file",
    };
    format!(
        "{kind} {ty} {} {} (was {})",
        c.path, c.size, c.previous_size
    )
}

#[tokio::test]
async fn a_run_s_changes_are_listed_exactly_and_download_in_one_call() {
    let agent = Agent::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    std::fs::write(dir.path().join("edit.txt"), "old").unwrap();
    std::fs::write(dir.path().join("drop.txt"), "bye").unwrap();
    std::fs::write(dir.path().join("same.txt"), "same").unwrap();
    let id = snapshot(&agent, &[&d], 0).await;

    let script = format!(
        "cd {d} && printf 'new text' > edit.txt && rm drop.txt && mkdir out && \
         printf 'hello' > out/result.txt && ln -s out/result.txt link"
    );
    let run = agent.run_argv(&["sh", "-c", &script]).await.unwrap();
    assert_eq!(run.stderr_text(), "");

    let (list, truncated) = changes(&agent, &id, 0).await;
    assert!(!truncated);
    let lines: Vec<String> = list.iter().map(line).collect();
    assert_eq!(
        lines,
        [
            format!("modified file {d}/edit.txt 8 (was 3)"),
            format!("created link {d}/link 14 (was 0)"),
            format!("created dir {d}/out {} (was 0)", list[2].size),
            format!("created file {d}/out/result.txt 5 (was 0)"),
            format!("deleted file {d}/drop.txt 3 (was 3)"),
        ]
    );

    // One call downloads what was created or modified.
    let wanted: Vec<String> = list
        .iter()
        .filter(|c| c.kind() != ChangeKind::Deleted)
        .map(|c| c.path.clone())
        .collect();
    let mut stream = agent
        .files()
        .download_paths(DownloadPathsRequest { paths: wanted })
        .await
        .unwrap()
        .into_inner();
    let mut tar = Vec::new();
    while let Some(chunk) = stream.message().await.unwrap() {
        tar.extend_from_slice(&chunk.data);
    }
    let into = tempfile::tempdir().unwrap();
    tar::Archive::new(&tar[..]).unpack(into.path()).unwrap();
    let under = into.path().join(dir.path().strip_prefix("/").unwrap());
    assert_eq!(
        std::fs::read_to_string(under.join("edit.txt")).unwrap(),
        "new text"
    );
    assert_eq!(
        std::fs::read_to_string(under.join("out/result.txt")).unwrap(),
        "hello"
    );
    assert_eq!(
        std::fs::read_link(under.join("link")).unwrap(),
        std::path::Path::new("out/result.txt")
    );
    assert!(!under.join("same.txt").exists());
}

#[tokio::test]
async fn limits_truncate_and_bad_requests_are_refused() {
    let agent = Agent::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let id = snapshot(&agent, &[&d], 0).await;
    for i in 0..30 {
        std::fs::write(dir.path().join(format!("f{i:02}")), "x").unwrap();
    }
    let (list, truncated) = changes(&agent, &id, 10).await;
    assert_eq!(list.len(), 10);
    assert!(truncated);

    let status = agent
        .files()
        .snapshot_tree(SnapshotTreeRequest {
            roots: vec!["relative".into()],
            max_entries: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let status = agent
        .files()
        .snapshot_tree(SnapshotTreeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let status = agent
        .files()
        .tree_changes(TreeChangesRequest {
            snapshot_id: "snap-999".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    // Released: gone.
    let mut stream = agent
        .files()
        .tree_changes(TreeChangesRequest {
            snapshot_id: id.clone(),
            release: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    while stream.message().await.unwrap().is_some() {}
    let status = agent
        .files()
        .tree_changes(TreeChangesRequest {
            snapshot_id: id,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}
