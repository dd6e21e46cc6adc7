//! Templates built through the API, on real VMs: `airlock serve` with TLS
//! and a key, and `airlock template build` from "another machine"
//! (`AIRLOCK_HOST`, `AIRLOCK_API_KEY`, `AIRLOCK_CA_CERT`) sending a
//! context directory. The template the server builds for the key has the
//! steps a local build of the same file has, and a sandbox started from it
//! serves what a sandbox of the local one serves (the COPY'd file, the
//! RUN's output, through the START program); a second build comes from the
//! cache, every step; the key lists it as its own; a sandbox started from
//! it runs on after the template is deleted.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use airlock_tests::{DaemonHome, TlsServer};

/// A build may boot several VMs under TCG on a loaded host.
const BUILD_LIMIT: Duration = Duration::from_secs(1200);
const LIMIT: Duration = Duration::from_secs(300);

const FILE: &str = "FROM default\n\
                    COPY hello.txt /srv/\n\
                    RUN echo built by RUN > /srv/built.txt\n\
                    WORKDIR /srv\n\
                    START python3 -m http.server 8000\n\
                    READY --timeout=60s port 8000\n";

/// Fetches a file from the guest's START server, inside the guest.
const GET: &str = "import sys, urllib.request as r; \
    sys.stdout.write(r.urlopen('http://127.0.0.1:8000/' + sys.argv[1], timeout=5).read().decode())";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `airlock ARGS` as a remote client with `key`; requires success.
fn remote(
    home: &DaemonHome,
    server: &TlsServer,
    key: &str,
    limit: Duration,
    args: &[&str],
) -> String {
    let mut client = home.client(args).limit(limit).env("AIRLOCK_API_KEY", key);
    for (name, value) in server.env() {
        client = client.env(&name, &value);
    }
    let out = client.output();
    assert!(
        out.status.success(),
        "airlock {args:?}: {}\n{}\nserver log:\n{}",
        text(&out.stdout),
        text(&out.stderr),
        home.daemon_log()
    );
    text(&out.stdout)
}

/// `airlock ARGS` on this machine with its named templates in `templates`.
fn local(templates: &Path, args: &[&str]) -> Output {
    let state = tempfile::tempdir().unwrap();
    Command::new(airlock_tests::airlock_bin())
        .args(args)
        .env(airlock::template::named::NAMED_DIR_ENV, templates)
        .env(airlock::state_dir::STATE_DIR_ENV, state.path())
        .env_remove("AIRLOCK_HOST")
        .output()
        .expect("airlock runs")
}

/// A build's step lines, without the line numbers only a local build
/// knows: `[1/3] COPY hello.txt /srv/`, with ` [cached]` when it was.
fn steps(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|line| line.starts_with('['))
        .map(|line| {
            let (line, cached) = match line.strip_suffix(" [cached]") {
                Some(line) => (line, " [cached]"),
                None => (line, ""),
            };
            let line = match line.rfind(" (line ") {
                Some(at) if line.ends_with(')') => &line[..at],
                _ => line,
            };
            format!("{line}{cached}")
        })
        .collect()
}

#[test]
fn a_template_built_through_the_api_matches_a_local_build_and_rebuilds_from_the_cache() {
    let home = DaemonHome::new();
    let server = TlsServer::start(&home, &[]);
    let made = home.airlock(&["key", "create", "alice"]);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let key = text(&made.stdout).lines().last().unwrap().trim().to_owned();

    let context = tempfile::tempdir().unwrap();
    std::fs::write(context.path().join("hello.txt"), "hello from the context\n").unwrap();
    let file = context.path().join("Dockerfile");
    std::fs::write(&file, FILE).unwrap();
    let (file, dir) = (file.to_str().unwrap(), context.path().to_str().unwrap());
    // A name no template of the server's own has.
    let name = format!("api-web-{}", std::process::id());
    let build = ["template", "build", "-f", file, "--name", &name, dir];

    let remote_built = remote(&home, &server, &key, BUILD_LIMIT, &build);
    assert!(
        remote_built.contains(&format!("built template {name} on https://")),
        "{remote_built}"
    );
    let templates = tempfile::tempdir().unwrap();
    let local_built = local(templates.path(), &build);
    assert!(
        local_built.status.success(),
        "{}",
        text(&local_built.stderr)
    );
    let local_steps = steps(&text(&local_built.stdout));
    assert_eq!(steps(&remote_built), local_steps, "{remote_built}");
    assert_eq!(
        local_steps,
        [
            "[1/3] COPY hello.txt /srv/",
            "[2/3] RUN echo built by RUN > /srv/built.txt",
            "[3/3] WORKDIR /srv",
        ]
    );

    // The key's own template, listed as its own.
    let listed = remote(&home, &server, &key, LIMIT, &["template", "ls"]);
    let row = listed
        .lines()
        .find(|l| l.starts_with(&name))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(row.contains(" alice "), "{row}");

    // Its sandbox serves what a sandbox of the local one serves.
    let id = remote(
        &home,
        &server,
        &key,
        LIMIT,
        &["sandbox", "create", "--template", &name],
    );
    let id = id.trim();
    let mut served = Vec::new();
    for path in ["hello.txt", "built.txt"] {
        let got = remote(
            &home,
            &server,
            &key,
            LIMIT,
            &["sandbox", "exec", id, "--", "python3", "-c", GET, path],
        );
        let here = local(
            templates.path(),
            &["run", "--template", &name, "--", "python3", "-c", GET, path],
        );
        assert!(here.status.success(), "{}", text(&here.stderr));
        assert_eq!(got, text(&here.stdout), "{path}");
        served.push(got);
    }
    assert_eq!(served, ["hello from the context\n", "built by RUN\n"]);

    // A second build runs no step again.
    let rebuilt = remote(&home, &server, &key, BUILD_LIMIT, &build);
    let rebuilt_steps = steps(&rebuilt);
    assert_eq!(rebuilt_steps.len(), 3, "{rebuilt}");
    assert!(
        rebuilt_steps.iter().all(|s| s.ends_with(" [cached]")),
        "{rebuilt}"
    );

    // Deleted, the template is gone for new sandboxes; the running one
    // goes on.
    remote(&home, &server, &key, LIMIT, &["template", "rm", &name]);
    let listed = remote(&home, &server, &key, LIMIT, &["template", "ls"]);
    assert!(!listed.contains(&name), "{listed}");
    let still = remote(
        &home,
        &server,
        &key,
        LIMIT,
        &[
            "sandbox",
            "exec",
            id,
            "--",
            "python3",
            "-c",
            GET,
            "hello.txt",
        ],
    );
    assert_eq!(still, "hello from the context\n");
    remote(&home, &server, &key, LIMIT, &["sandbox", "kill", id]);
}
