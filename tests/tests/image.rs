//! Root filesystem images: the default Debian image runs Python, and images
//! built from a tarball and from an OCI layout (with a whiteout) boot and
//! run commands. Each image gets one VM.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command as HostCommand;

use airlock::images::ImageStore;
use airlock::{Command, ExitStatus, Sandbox};
use airlock_rootfs::image::{self, BuildOptions, Source};
use airlock_tests::{run, sh, sha256_hex};
use serde_json::json;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn boot_image(image: &Path) -> Sandbox {
    match airlock_tests::builder().image(image).start().await {
        Ok(sandbox) => sandbox,
        Err(error) => panic!("sandbox on {} did not start: {error}", image.display()),
    }
}

#[test]
fn airlock_run_prints_the_python_version_from_the_default_image() {
    airlock_tests::default_image();
    let out = HostCommand::new(airlock_tests::airlock_bin())
        .args(["run", "--memory", "256", "--", "python3", "-c"])
        .arg("import sys, json; print(json.dumps(sys.version_info[:2]))")
        .output()
        .expect("run airlock");
    assert_eq!(
        text(&out.stdout),
        "[3, 11]\n",
        "stderr: {}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
}

#[tokio::test]
async fn the_default_image_is_debian_with_its_own_users_and_a_fresh_overlay() {
    let image = airlock_tests::default_image();
    let sandbox = boot_image(&image).await;

    // The agent is still PID 1, now inside the image.
    let out = run(
        &sandbox,
        sh("cat /proc/1/comm; . /etc/os-release; echo $ID $VERSION_ID"),
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "init\ndebian 12\n",
        "{}",
        text(&out.stderr)
    );

    // The image's own accounts, PATH and tools.
    let out = run(
        &sandbox,
        sh("id -un; getent passwd nobody | cut -d: -f1,3; echo $PATH; \
         python3 -c 'import ssl, sqlite3; print(ssl.OPENSSL_VERSION.split()[0])'; \
         test -s /etc/ssl/certs/ca-certificates.crt && echo certs; \
         getent passwd user | cut -d: -f1,3,4,6,7; stat -c '%U %a' /home/user; \
         python --version; for t in pip curl bash; do command -v $t; done; \
         python3 -c 'import socket; print(socket.gethostbyname(\"localhost\"))'; \
         ls /usr/lib/python3*/EXTERNALLY-MANAGED 2>/dev/null | wc -l"),
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "root\nnobody:65534\n/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nOpenSSL\ncerts\n\
         user:1000:1000:/home/user:/bin/bash\nuser 755\nPython 3.11.2\n\
         /usr/bin/pip\n/usr/bin/curl\n/usr/bin/bash\n127.0.0.1\n0\n",
        "{}",
        text(&out.stderr)
    );

    // E2B's account: a program run as `user` without a directory starts
    // in its home, and may write there.
    let out = run(
        &sandbox,
        sh("pwd; id -un; touch ~/mine && stat -c %U ~/mine").user("user"),
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "/home/user\nuser\nuser\n",
        "{}",
        text(&out.stderr)
    );

    // / is an overlay on the read-only image; /tmp is a tmpfs; writes work.
    let out = run(
        &sandbox,
        sh("stat -f -c %T /tmp; grep -c ' / overlay ' /proc/mounts; \
         echo data > /root/written && cat /root/written; \
         free=$(df --output=avail / | tail -1); test \"$free\" -gt 0 && echo space"),
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "tmpfs\n1\ndata\nspace\n",
        "{}",
        text(&out.stderr)
    );
    sandbox
        .shutdown(std::time::Duration::from_secs(20))
        .await
        .expect("shutdown");

    // Without a workspace nothing of that run is left.
    let sandbox = boot_image(&image).await;
    let out = run(
        &sandbox,
        sh("test -e /root/written && echo survived || echo gone"),
    )
    .await;
    assert_eq!(text(&out.stdout), "gone\n");
}

/// A root tree with busybox as `/bin/busybox` and `/bin/sh`.
fn busybox_tree(root: &Path) {
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::create_dir_all(root.join("etc")).unwrap();
    let busybox = Path::new(airlock_rootfs::busybox::DEFAULT_PATH);
    assert!(
        busybox.is_file(),
        "{} is missing: run scripts/setup (it installs busybox-static)",
        busybox.display()
    );
    fs::copy(busybox, root.join("bin/busybox")).unwrap();
    for applet in ["sh", "cat", "ls", "echo"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
}

fn build(store: &Path, source: Source) -> PathBuf {
    let options = BuildOptions {
        store: ImageStore::at(store),
        ..BuildOptions::new(source)
    };
    image::build(&options).expect("image build").info.path
}

#[tokio::test]
async fn a_tarball_builds_into_an_image_that_runs_a_command() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    busybox_tree(&tree);
    fs::write(tree.join("etc/greeting"), "from a tarball\n").unwrap();
    let tarball = dir.path().join("rootfs.tar.gz");
    let gz = flate2::write::GzEncoder::new(
        fs::File::create(&tarball).unwrap(),
        flate2::Compression::fast(),
    );
    let mut builder = tar::Builder::new(gz);
    builder.follow_symlinks(false);
    builder.append_dir_all(".", &tree).unwrap();
    builder.into_inner().unwrap().finish().unwrap();

    let image = build(&dir.path().join("store"), Source::Tar(tarball));
    let sandbox = boot_image(&image).await;
    let out = run(&sandbox, sh("cat /etc/greeting; cat /proc/1/comm")).await;
    assert_eq!(out.status, ExitStatus::Code(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "from a tarball\ninit\n");
}

/// Stores a blob in an OCI layout and returns its descriptor.
fn blob(layout: &Path, media_type: &str, bytes: &[u8]) -> serde_json::Value {
    let hex = sha256_hex(bytes);
    let dir = layout.join("blobs/sha256");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(&hex), bytes).unwrap();
    json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": bytes.len()})
}

/// A gzip'd layer: the tree under `root`, plus empty whiteout files.
fn layer(root: Option<&Path>, whiteouts: &[&str]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut builder = tar::Builder::new(gz);
    builder.follow_symlinks(false);
    if let Some(root) = root {
        builder.append_dir_all(".", root).unwrap();
    }
    for path in whiteouts {
        let mut header = tar::Header::new_gnu();
        header.set_size(0);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(1_700_000_000);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, path, std::io::empty())
            .unwrap();
    }
    let mut gz = builder.into_inner().unwrap();
    gz.flush().unwrap();
    gz.finish().unwrap()
}

#[tokio::test]
async fn an_oci_layout_builds_with_whiteouts_and_its_env() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base");
    busybox_tree(&base);
    fs::write(base.join("etc/kept"), "kept\n").unwrap();
    fs::write(base.join("etc/secret"), "must be gone\n").unwrap();
    fs::create_dir_all(base.join("opt/tools")).unwrap();
    let hello = base.join("opt/tools/hello");
    fs::write(&hello, "#!/bin/sh\necho \"hello $1\"\n").unwrap();
    fs::set_permissions(&hello, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    fs::create_dir_all(base.join("cache")).unwrap();
    fs::write(base.join("cache/old"), "old\n").unwrap();
    let top = dir.path().join("top");
    fs::create_dir_all(top.join("cache")).unwrap();
    fs::write(top.join("cache/new"), "new\n").unwrap();

    let layout = dir.path().join("oci");
    let gzip = "application/vnd.oci.image.layer.v1.tar+gzip";
    let layers = vec![
        blob(&layout, gzip, &layer(Some(&base), &[])),
        blob(
            &layout,
            gzip,
            &layer(Some(&top), &["etc/.wh.secret", "cache/.wh..wh..opq"]),
        ),
    ];
    let config = json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/opt/tools:/bin", "GREETING=hi from oci"]},
        "rootfs": {"type": "layers", "diff_ids": []},
    });
    let config = blob(
        &layout,
        "application/vnd.oci.image.config.v1+json",
        config.to_string().as_bytes(),
    );
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config, "layers": layers,
    });
    let manifest = blob(
        &layout,
        "application/vnd.oci.image.manifest.v1+json",
        manifest.to_string().as_bytes(),
    );
    fs::write(
        layout.join("index.json"),
        json!({"schemaVersion": 2, "manifests": [manifest]}).to_string(),
    )
    .unwrap();
    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();

    let image = build(
        &dir.path().join("store"),
        Source::Container {
            path: layout,
            reference: None,
        },
    );
    let sandbox = boot_image(&image).await;
    let out = run(
        &sandbox,
        sh("cat /etc/kept; ls /etc; ls /cache; echo $PATH; echo $GREETING"),
    )
    .await;
    assert_eq!(out.status, ExitStatus::Code(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "kept\nairlock\nkept\npasswd\nnew\n/opt/tools:/bin\nhi from oci\n"
    );
    // A program found through the image's PATH.
    let out = sandbox
        .exec(&Command::new("hello").arg("via PATH"))
        .await
        .expect("start hello")
        .output()
        .await
        .expect("output");
    assert_eq!(text(&out.stdout), "hello via PATH\n");
}

#[tokio::test]
async fn an_image_that_is_not_ext4_stops_the_boot_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.ext4");
    fs::write(&junk, vec![0u8; 1 << 20]).unwrap();
    let error = airlock_tests::builder()
        .image(&junk)
        .start()
        .await
        .expect_err("boot must fail");
    assert!(matches!(error, airlock::Error::VmExited { .. }), "{error}");
    assert!(
        error.to_string().contains("cannot mount /dev/vda (ext4)"),
        "{error}"
    );
}
