//! Named templates built from a template file (`airlock template build`):
//! a package from a local .deb, a project copied in and a Python HTTP
//! server started and ready in the snapshot, so every sandbox answers at
//! once with the template's own server process; a rebuild reruns only the
//! changed step; a failing step or START names itself and leaves nothing
//! behind; a file the subset does not cover is refused with its line.
//!
//! Each test keeps its named templates and state directories in
//! directories of its own.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use airlock::template::{
    BuildError, BuildEvent, BuildOptions, NamedStore, NamedTemplate, TemplateSpec,
};
use airlock::Sandbox;
use airlock_tests::{stdout_of, DaemonHome};

/// A template file: the package, the project, and the server.
fn template_file(version: &str) -> String {
    format!(
        "# a web project\n\
         FROM default\n\
         COPY hello.deb /tmp/\n\
         RUN dpkg -i /tmp/hello.deb && rm /tmp/hello.deb && airlock-hello\n\
         WORKDIR /srv/app\n\
         COPY project/ .\n\
         ENV GREETING=hi\n\
         RUN airlock-hello > built.txt && echo {version} > version.txt && echo wrote {version}\n\
         START python3 -m http.server 8000\n\
         READY --timeout=60s port 8000\n"
    )
}

/// Where a test keeps its templates and its sandboxes' state.
struct Home {
    _dir: tempfile::TempDir,
    templates: PathBuf,
    state: PathBuf,
    context: PathBuf,
}

impl Home {
    fn new() -> Self {
        airlock_tests::log_if_asked();
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            templates: dir.path().join("templates"),
            state: dir.path().join("state"),
            context: dir.path().join("context"),
            _dir: dir,
        };
        std::fs::create_dir_all(home.context.join("project")).unwrap();
        std::fs::create_dir_all(&home.state).unwrap();
        std::fs::write(
            home.context.join("project/index.html"),
            "<h1>the project</h1>\n",
        )
        .unwrap();
        make_deb(&home.context.join("hello.deb"));
        home
    }

    /// `airlock ARGS` with this home's directories.
    fn airlock(&self, args: &[&str]) -> Output {
        Command::new(airlock_tests::airlock_bin())
            .args(args)
            .env(airlock::template::named::NAMED_DIR_ENV, &self.templates)
            .env(airlock::state_dir::STATE_DIR_ENV, &self.state)
            .output()
            .expect("airlock runs")
    }

    fn build(&self, file: &str) -> Output {
        let path = self.context.join("Dockerfile");
        std::fs::write(&path, file).unwrap();
        let context = self.context.to_string_lossy().into_owned();
        self.airlock(&["template", "build", "--name", "web", &context])
    }

    fn template(&self) -> NamedTemplate {
        NamedStore::new(&self.templates)
            .get("web")
            .expect("template web")
    }

    /// What a failed build must not leave: a template, a build directory,
    /// a step's working disk, a packing directory, a state directory or a
    /// VMM process.
    fn assert_nothing_left(&self) {
        let entries = |dir: &Path| -> Vec<String> {
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        };
        let mut left = Vec::new();
        // The caches may stay (complete steps and roots); nothing else.
        left.extend(
            entries(&self.templates)
                .into_iter()
                .filter(|name| name != ".steps" && name != ".roots"),
        );
        left.extend(
            entries(&self.templates.join(".steps"))
                .into_iter()
                .filter(|name| name.starts_with('.')),
        );
        left.extend(
            entries(&self.templates.join(".roots"))
                .into_iter()
                .filter(|name| name.starts_with('.')),
        );
        left.extend(entries(&self.state));
        assert!(left.is_empty(), "left behind: {left:?}");
        for dir in [&self.templates, &self.state] {
            let processes = airlock_tests::processes_mentioning(dir);
            assert!(processes.is_empty(), "processes left: {processes:?}");
        }
    }
}

/// A package whose program prints a line, built with dpkg-deb.
fn make_deb(out: &Path) {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("DEBIAN")).unwrap();
    std::fs::create_dir_all(root.path().join("usr/bin")).unwrap();
    std::fs::write(
        root.path().join("DEBIAN/control"),
        "Package: airlock-hello\nVersion: 1.0\nArchitecture: all\n\
         Maintainer: Airlock tests <tests@invalid>\nDescription: prints a line\n",
    )
    .unwrap();
    let program = root.path().join("usr/bin/airlock-hello");
    std::fs::write(&program, "#!/bin/sh\necho hello from the package\n").unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let status = Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group"])
        .arg(root.path())
        .arg(out)
        .output()
        .expect("dpkg-deb runs (install Debian's dpkg)");
    assert!(status.status.success(), "{status:?}");
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The step lines of a build's output that say `[cached]`, by number.
fn cached_steps(stdout: &str) -> Vec<usize> {
    stdout
        .lines()
        .filter(|line| line.starts_with('[') && line.ends_with("[cached]"))
        .filter_map(|line| line[1..].split('/').next()?.parse().ok())
        .collect()
}

/// An HTTP GET of the guest's server, from inside the guest.
const GET: &str = "python3 -c 'import sys, urllib.request as r; \
    sys.stdout.write(r.urlopen(\"http://127.0.0.1:8000/\" + sys.argv[1], timeout=5).read().decode())'";

async fn get(sandbox: &Sandbox, path: &str) -> String {
    stdout_of(sandbox, &format!("{GET} {path}")).await
}

async fn from_template(template: &NamedTemplate, state: &Path) -> Sandbox {
    airlock_tests::builder()
        .state_dir_base(state)
        .template(template)
        .start()
        .await
        .expect("a sandbox starts from the template")
}

#[tokio::test]
async fn a_template_starts_with_its_server_running_and_a_rebuild_reruns_only_the_changed_step() {
    let home = Home::new();
    let built = home.build(&template_file("v1"));
    let (stdout, stderr) = text(&built);
    assert!(built.status.success(), "{stdout}\n{stderr}");
    assert!(cached_steps(&stdout).is_empty(), "{stdout}");
    // Each step's output comes with its number.
    assert!(stdout.contains("  2 | hello from the package"), "{stdout}");
    assert!(stdout.contains("  6 | wrote v1"), "{stdout}");

    let template = home.template();
    let meta = template.meta().clone();
    assert_eq!(meta.steps.len(), 6);
    let pid = meta.start_pid.expect("START's pid is recorded");
    let ticks = meta.start_ticks.expect("START's start time is recorded");

    let first = from_template(&template, &home.state).await;
    let second = from_template(&template, &home.state).await;
    for sandbox in [&first, &second] {
        // The first thing a sandbox does is ask its server: it answers.
        assert_eq!(get(sandbox, "index.html").await, "<h1>the project</h1>\n");
        assert_eq!(get(sandbox, "built.txt").await, "hello from the package\n");
        assert_eq!(get(sandbox, "version.txt").await, "v1\n");
        // The server is the template's process: same pid, same start time.
        let stat = stdout_of(sandbox, &format!("cat /proc/{pid}/stat")).await;
        assert_eq!(
            airlock::template::build::parse_start_ticks(&stat),
            Some(ticks),
            "{stat}"
        );
        let cmdline = stdout_of(sandbox, &format!("tr '\\0' ' ' </proc/{pid}/cmdline")).await;
        assert!(cmdline.contains("http.server 8000"), "{cmdline}");
        let listed = sandbox.list().await.unwrap();
        assert!(
            listed
                .iter()
                .any(|p| p.pid == pid && p.tag.as_deref() == Some("start")),
            "{listed:?}"
        );
        // ENV reaches the sandbox's programs, and they start in WORKDIR.
        assert_eq!(stdout_of(sandbox, "echo $GREETING").await, "hi\n");
        assert_eq!(stdout_of(sandbox, "pwd").await, "/srv/app\n");
        assert_eq!(stdout_of(sandbox, "cat version.txt").await, "v1\n");
    }
    // So do its code contexts: the default one and one made by name.
    let cell = first
        .run_code(airlock::Cell::new("import os\nos.getcwd()"))
        .await
        .unwrap()
        .output()
        .await
        .unwrap();
    assert_eq!(cell.text(), Some("'/srv/app'"), "{cell:?}");
    let bash = airlock::ContextOptions::new(airlock::Language::Bash).id("sh");
    first.contexts().create(&bash).await.unwrap();
    let cell = first
        .run_code(airlock::Cell::new("cat version.txt").context("sh"))
        .await
        .unwrap()
        .output()
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&cell.stdout), "v1\n", "{cell:?}");
    // Each is its own machine.
    assert_ne!(
        stdout_of(&first, "hostname").await,
        stdout_of(&second, "hostname").await
    );
    assert_ne!(
        stdout_of(&first, "cat /proc/sys/kernel/random/uuid").await,
        stdout_of(&second, "cat /proc/sys/kernel/random/uuid").await
    );
    let guest_now: u64 = stdout_of(&first, "date +%s").await.trim().parse().unwrap();
    let host_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        guest_now.abs_diff(host_now) <= 5,
        "guest {guest_now}, host {host_now}"
    );
    first.kill();
    second.kill();

    // The CLI's run starts from it too.
    let ran = home.airlock(&[
        "run",
        "--template",
        "web",
        "--",
        "sh",
        "-c",
        &format!("{GET} version.txt"),
    ]);
    let (stdout, stderr) = text(&ran);
    assert!(ran.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "v1\n");

    // So does the API's create, through the daemon.
    let daemon = DaemonHome::new();
    let templates = home.templates.to_string_lossy().into_owned();
    let client = |args: &[&str]| {
        daemon
            .client(args)
            .env(airlock::template::named::NAMED_DIR_ENV, &templates)
            .output()
    };
    let created = client(&["sandbox", "create", "--template", "web"]);
    let (stdout, stderr) = text(&created);
    assert!(created.status.success(), "{stdout}\n{stderr}");
    let id = stdout.trim().to_owned();
    let script = format!("{GET} version.txt");
    let answered = client(&["sandbox", "exec", &id, "--", "sh", "-c", &script]);
    let (stdout, stderr) = text(&answered);
    assert!(answered.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "v1\n");
    let missing = client(&["sandbox", "create", "--template", "nothing-here"]);
    let (_, stderr) = text(&missing);
    assert!(!missing.status.success());
    assert!(
        stderr.contains("no template named nothing-here"),
        "{stderr}"
    );
    drop(daemon);

    // A change to the last step: only it runs again.
    let rebuilt = home.build(&template_file("v2"));
    let (stdout, stderr) = text(&rebuilt);
    assert!(rebuilt.status.success(), "{stdout}\n{stderr}");
    assert_eq!(cached_steps(&stdout), vec![1, 2, 3, 4, 5], "{stdout}");
    assert!(!stdout.contains("  2 | hello from the package"), "{stdout}");
    assert!(stdout.contains("  6 | wrote v2"), "{stdout}");
    let template = home.template();
    let sandbox = from_template(&template, &home.state).await;
    assert_eq!(get(&sandbox, "version.txt").await, "v2\n");
    sandbox.kill();

    let listed = home.airlock(&["template", "ls"]);
    let (stdout, _) = text(&listed);
    let row = stdout
        .lines()
        .find(|line| line.starts_with("web "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(columns[2], "6", "{row}");

    // rm removes it; gc then frees the steps nothing uses.
    let removed = home.airlock(&["template", "rm", "web"]);
    assert!(removed.status.success(), "{:?}", text(&removed));
    assert!(NamedStore::new(&home.templates).get("web").is_err());
    let collected = home.airlock(&["gc"]);
    assert!(collected.status.success(), "{:?}", text(&collected));
    let steps: Vec<_> = std::fs::read_dir(home.templates.join(".steps"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(steps.is_empty(), "{steps:?}");
    let roots: Vec<_> = std::fs::read_dir(home.templates.join(".roots"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(roots.is_empty(), "{roots:?}");
}

#[tokio::test]
async fn a_failing_step_names_itself_and_its_exit_code_and_leaves_nothing() {
    let home = Home::new();
    let built = home.build(
        "FROM default\n\
         RUN echo first step\n\
         RUN echo on its way; echo it broke >&2; exit 7\n\
         RUN echo never\n",
    );
    let (stdout, stderr) = text(&built);
    assert_eq!(built.status.code(), Some(125), "{stdout}\n{stderr}");
    assert!(stderr.contains("step 2 at line 3"), "{stderr}");
    assert!(stderr.contains("exit code 7"), "{stderr}");
    assert!(stderr.contains("it broke"), "{stderr}");
    assert!(stdout.contains("  2 ! it broke"), "{stdout}");
    assert!(!stdout.contains("[3/3]"), "{stdout}");
    assert!(NamedStore::new(&home.templates).get("web").is_err());
    home.assert_nothing_left();

    // A START that exits before READY passes: no template either.
    let built = home.build(
        "FROM default\n\
         RUN echo ok\n\
         START sh -c 'echo giving up; exit 3'\n\
         READY --timeout=30s port 8000\n",
    );
    let (stdout, stderr) = text(&built);
    assert_eq!(built.status.code(), Some(125), "{stdout}\n{stderr}");
    assert!(stderr.contains("START exited (exit code 3)"), "{stderr}");
    assert!(NamedStore::new(&home.templates).get("web").is_err());
    home.assert_nothing_left();
}

#[tokio::test]
async fn a_file_outside_the_subset_is_refused_with_its_line() {
    let home = Home::new();
    let built = home.build("FROM default\nRUN true\nFROBNICATE all the things\n");
    let (stdout, stderr) = text(&built);
    assert_eq!(built.status.code(), Some(125), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("line 3: FROBNICATE is not supported"),
        "{stderr}"
    );
    let built = home.build("FROM python:3.12-slim\n");
    let (_, stderr) = text(&built);
    assert!(
        stderr.contains("line 1: FROM python:3.12-slim: Airlock pulls from no registry"),
        "{stderr}"
    );
    // Nothing booted.
    assert_eq!(std::fs::read_dir(&home.state).unwrap().count(), 0);
    assert!(!home.templates.exists());
}

#[tokio::test]
async fn run_steps_reach_only_what_the_build_allows() {
    let home = Home::new();
    // The package, served on the host's loopback as `pkgs.test`.
    let deb = std::fs::read(home.context.join("hello.deb")).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let served = std::sync::Arc::clone(&requests);
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut stream, _)) = listener.accept().await {
            served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut head = [0u8; 1024];
            let _ = stream.read(&mut head).await;
            let reply = format!("HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n", deb.len());
            let _ = stream.write_all(reply.as_bytes()).await;
            let _ = stream.write_all(&deb).await;
        }
    });
    let spec = TemplateSpec::from_image(airlock::images::DEFAULT_IMAGE)
        .run(format!(
            "python3 -c \"import urllib.request as r; \
             r.urlretrieve('http://pkgs.test:{port}/hello.deb', '/tmp/hello.deb')\" \
             && dpkg -i /tmp/hello.deb && airlock-hello"
        ))
        .start("sleep infinity");
    let options = |rules: &[&str]| {
        let mut options = BuildOptions::new("fetched", &home.context);
        options.store = NamedStore::new(&home.templates);
        options.sandbox = airlock_tests::builder().state_dir_base(&home.state);
        options.allow_net = rules.iter().map(|r| r.parse().unwrap()).collect();
        // The package server is on the host's loopback.
        options.host_access = airlock::HostAccess::Allowed;
        options.resolver = Some(std::sync::Arc::new(
            airlock::StaticResolver::new().with("pkgs.test", std::net::Ipv4Addr::LOCALHOST.into()),
        ));
        options
    };

    // Without a rule the step has no network: it fails, and nothing reached the server.
    let error = airlock::template::build(&spec, &options(&[]), |_| {})
        .await
        .expect_err("no network without a rule");
    assert!(
        matches!(error, BuildError::StepFailed { number: 1, .. }),
        "{}",
        airlock::error_chain(&error)
    );
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 0);
    home.assert_nothing_left();

    // With the name and the loopback range allowed, it fetches and installs.
    let mut output = String::new();
    let template =
        airlock::template::build(&spec, &options(&["pkgs.test", "127.0.0.1/32"]), |event| {
            if let BuildEvent::Output { data, .. } = event {
                output.push_str(&String::from_utf8_lossy(&data));
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{}", airlock::error_chain(&e)));
    assert!(output.contains("hello from the package"), "{output}");
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The template's sandboxes have the package.
    let sandbox = from_template(&template, &home.state).await;
    assert_eq!(
        stdout_of(&sandbox, "airlock-hello").await,
        "hello from the package\n"
    );
    sandbox.kill();
}

/// A root tarball in the context directory: busybox as `/bin/sh` and a few
/// applets, nothing else.
fn busybox_tarball(out: &Path) {
    let busybox = Path::new(airlock_rootfs::busybox::DEFAULT_PATH);
    assert!(
        busybox.is_file(),
        "{} is missing: run scripts/setup (it installs busybox-static)",
        busybox.display()
    );
    let mut archive = tar::Builder::new(std::fs::File::create(out).unwrap());
    archive
        .append_path_with_name(busybox, "bin/busybox")
        .unwrap();
    for applet in ["sh", "cat", "echo", "pwd"] {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header.set_mode(0o777);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        archive
            .append_link(&mut header, format!("bin/{applet}"), "busybox")
            .unwrap();
    }
    let passwd = b"root:x:0:0:root:/root:/bin/sh\n";
    let mut header = tar::Header::new_gnu();
    header.set_size(passwd.len() as u64);
    header.set_mode(0o644);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    archive
        .append_data(&mut header, "etc/passwd", &passwd[..])
        .unwrap();
    archive.finish().unwrap();
}

/// The default image's root as a tarball at `out` (as `docker export`
/// gives one): its files read out of the ext4 image with debugfs, packed
/// with fixed times and sorted names, so the same image gives the same
/// bytes (and the image store's cache holds one import).
fn default_root_tarball(scratch: &Path, out: &Path) {
    let tree = scratch.join("root");
    std::fs::create_dir_all(&tree).unwrap();
    let dumped = Command::new("debugfs")
        .arg("-R")
        .arg(format!("rdump / {}", tree.display()))
        .arg(airlock_tests::default_image())
        .output()
        .expect("debugfs runs (e2fsprogs; scripts/setup installs it)");
    assert!(dumped.status.success(), "{dumped:?}");
    let packed = Command::new("tar")
        .args(["--sort=name", "--mtime=@0", "--numeric-owner", "-cf"])
        .arg(out)
        .arg("-C")
        .arg(&tree)
        .arg(".")
        .output()
        .expect("tar runs");
    assert!(packed.status.success(), "{packed:?}");
    std::fs::remove_dir_all(&tree).unwrap();
}

#[tokio::test]
async fn a_template_builds_from_a_root_tarball_in_the_context() {
    let home = Home::new();
    // A root the build cannot work in (no umount, no GNU tar) is refused
    // saying what it lacks, and leaves nothing behind.
    busybox_tarball(&home.context.join("busybox.tar"));
    let built = home.build("FROM ./busybox.tar\nRUN echo never\n");
    let (stdout, stderr) = text(&built);
    assert_eq!(built.status.code(), Some(125), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("the base image has no umount"),
        "{stdout}\n{stderr}"
    );
    home.assert_nothing_left();

    // A whole root (the default image's files, exported) builds, and its
    // sandboxes run on it.
    default_root_tarball(home._dir.path(), &home.context.join("rootfs.tar"));
    let built = home.build(
        "FROM ./rootfs.tar\n\
         RUN echo built on a tarball > /etc/built\n\
         WORKDIR /etc\n",
    );
    let (stdout, stderr) = text(&built);
    assert!(built.status.success(), "{stdout}\n{stderr}");
    let template = home.template();
    let sandbox = from_template(&template, &home.state).await;
    assert_eq!(
        stdout_of(&sandbox, "cat built").await,
        "built on a tarball\n"
    );
    assert_eq!(
        stdout_of(&sandbox, "python3 -c 'print(6 * 7)'").await,
        "42\n"
    );
    sandbox.kill();
}
