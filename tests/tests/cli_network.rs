//! The guest's network from the command line: `--allow-net` and `--secret`
//! on `airlock run` and `airlock sandbox create`, parsed before anything
//! boots; `airlock sandbox net` listing a running sandbox's rules and audit
//! and changing its rules; a secret's value never printed. The checks on a
//! sandbox share one, kept by a private daemon and created by the first of
//! them; they run in order (some change its rules). Two VMs in all: that
//! one and one `airlock run`.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{ExitCode, Output};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use airlock_proto::contract::paths::REFUSAL_LOG;
use airlock_tests::{processes_mentioning, DaemonHome};
use libtest_mimic::{Arguments, Failed, Trial};

/// The value of the secret taken from airlock's environment.
const ENV_SECRET: &str = "sk-from-env-0123456789-never-printed";
/// The value of the secret written on the command line.
const INLINE_SECRET: &str = "sk-inline-9876543210-never-printed";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The sandbox the checks share: its daemon's home, its id, and what its
/// `create` printed.
struct Shared {
    home: DaemonHome,
    id: String,
    created: Output,
}

/// The shared sandbox, created by the first check that needs it: the
/// default image, loopback allowed (so no real server is reachable), two
/// secrets (one from airlock's environment, one inline).
fn create_shared() -> Result<Shared, String> {
    let home = DaemonHome::new();
    let inline = format!("INLINE_TOKEN={INLINE_SECRET}@other.test");
    let created = home
        .client(&[
            "sandbox",
            "create",
            "--allow-net",
            "127.0.0.1/32",
            "--secret",
            "ENV_TOKEN@api.test,*.api.test",
            "--secret",
            &inline,
        ])
        .env("ENV_TOKEN", ENV_SECRET)
        .output();
    if !created.status.success() {
        return Err(format!(
            "sandbox create failed ({:?}): {}\ndaemon log:\n{}",
            created.status,
            text(&created.stderr),
            home.daemon_log()
        ));
    }
    let id = text(&created.stdout).trim().to_owned();
    Ok(Shared { home, id, created })
}

/// Python in the shared sandbox; its stdout.
fn python(shared: &Shared, code: &str) -> String {
    shared
        .home
        .ok(&["exec", &shared.id, "--", "python3", "-c", code])
}

/// `sandbox net ID ARGS`'s output.
fn net(shared: &Shared, args: &[&str]) -> String {
    shared.home.ok(&[&["net", &shared.id][..], args].concat())
}

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // The checks on the shared sandbox depend on their order.
    args.test_threads = Some(1);
    let sandbox: Arc<OnceLock<Result<Shared, String>>> = Arc::default();
    let on_shared = |name: &'static str, check: fn(&Shared)| {
        let sandbox = Arc::clone(&sandbox);
        Trial::test(name, move || {
            let shared = sandbox.get_or_init(create_shared);
            check(shared.as_ref().map_err(Failed::from)?);
            Ok(())
        })
    };
    let alone = |name: &'static str, test: fn()| {
        Trial::test(name, move || {
            test();
            Ok(())
        })
    };
    let trials = vec![
        alone(
            "a_bad_allow_net_rule_is_refused_before_anything_boots",
            a_bad_allow_net_rule_is_refused_before_anything_boots,
        ),
        alone(
            "a_bad_secret_is_refused_without_showing_its_value",
            a_bad_secret_is_refused_without_showing_its_value,
        ),
        alone(
            "run_with_allow_net_gives_a_network_that_refuses_other_names",
            run_with_allow_net_gives_a_network_that_refuses_other_names,
        ),
        on_shared(
            "a_connection_no_rule_allows_fails_and_is_listed_refused",
            a_connection_no_rule_allows_fails_and_is_listed_refused,
        ),
        on_shared(
            "a_refused_name_does_not_resolve_and_is_listed_refused",
            a_refused_name_does_not_resolve_and_is_listed_refused,
        ),
        on_shared(
            "net_allow_adds_a_rule_and_deny_removes_it",
            net_allow_adds_a_rule_and_deny_removes_it,
        ),
        on_shared(
            "net_json_has_the_rules_and_the_audit",
            net_json_has_the_rules_and_the_audit,
        ),
        on_shared(
            "secrets_are_placeholders_in_the_guest_and_never_printed",
            secrets_are_placeholders_in_the_guest_and_never_printed,
        ),
    ];
    let conclusion = libtest_mimic::run(&args, trials);
    // The trials are gone: this drops the shared sandbox's home, which
    // ends its daemon and VM.
    drop(sandbox);
    conclusion.exit_code()
}

fn a_bad_allow_net_rule_is_refused_before_anything_boots() {
    let home = DaemonHome::new();
    for argv in [
        &["run", "--allow-net", "10.0.0.1/8", "--", "true"][..],
        &["sandbox", "create", "--allow-net", "index.example:https"],
    ] {
        let began = Instant::now();
        let out = home.airlock(argv);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "a usage error: {stderr}");
        let rule = argv[argv.iter().position(|a| *a == "--allow-net").unwrap() + 1];
        assert!(
            stderr.contains(&format!("network rule \"{rule}\"")),
            "the message quotes the rule: {stderr}"
        );
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "refused at once, not after a boot: {:?}",
            began.elapsed()
        );
    }
    assert!(
        processes_mentioning(home.path()).is_empty() && !home.socket().exists(),
        "no daemon was started"
    );
    let sandboxes = std::fs::read_dir(home.path())
        .unwrap()
        .filter(|entry| {
            let name = entry.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("sandbox-")
        })
        .count();
    assert_eq!(sandboxes, 0, "no sandbox state directory was made");
}

fn a_bad_secret_is_refused_without_showing_its_value() {
    let home = DaemonHome::new();
    let value = "sk-refused-0123456789";
    for secret in [
        format!("API_KEY={value}"),
        format!("API_KEY={value}@not a host"),
        format!("{value}@api.test"),
    ] {
        for argv in [
            &["run", "--secret", &secret, "--", "true"][..],
            &["sandbox", "create", "--secret", &secret],
        ] {
            let out = home.airlock(argv);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "a usage error: {stderr}");
            assert!(stderr.contains("--secret"), "{stderr}");
            assert!(!stderr.contains(value), "the value is printed: {stderr}");
            assert!(!text(&out.stdout).contains(value));
        }
    }
    let unset = home.airlock(&[
        "run",
        "--secret",
        "AIRLOCK_NO_SUCH_VAR@api.test",
        "--",
        "true",
    ]);
    let stderr = text(&unset.stderr);
    assert_eq!(unset.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("AIRLOCK_NO_SUCH_VAR is not set in airlock's environment"),
        "{stderr}"
    );
}

fn run_with_allow_net_gives_a_network_that_refuses_other_names() {
    let home = DaemonHome::new();
    let script = "import os, socket\n\
                  print(os.environ.get('HTTPS_PROXY'))\n\
                  try:\n    socket.gethostbyname('refused.test'); print('resolved')\n\
                  except socket.gaierror: print('not resolved')";
    let out = home.airlock(&[
        "--verbose",
        "run",
        "--allow-net",
        "127.0.0.1/32",
        "--",
        "python3",
        "-c",
        script,
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.len() == 2 && lines[0].ends_with(":3128") && lines[1] == "not resolved",
        "the proxy is set and the name refused: {stdout}"
    );
    // --verbose shows the host's refusal.
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("network: refused") && l.contains("refused.test:53")),
        "stderr: {stderr}"
    );
}

fn a_connection_no_rule_allows_fails_and_is_listed_refused(shared: &Shared) {
    let out = python(
        shared,
        "import socket\n\
         try:\n\
         \x20   s = socket.create_connection(('192.0.2.9', 80), timeout=10)\n\
         \x20   s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(100).split(b'\\r\\n')[0].decode())\n\
         except OSError: print('refused')",
    );
    assert_eq!(out, "HTTP/1.1 403 airlock: no rule allows 192.0.2.9:80\n");
    let log = shared
        .home
        .ok(&["exec", &shared.id, "--", "cat", REFUSAL_LOG]);
    assert!(
        log.lines()
            .any(|l| l.ends_with(" 192.0.2.9:80 answered HTTP 403: no rule allows 192.0.2.9:80")),
        "the guest's refusal log: {log}"
    );
    let listing = net(shared, &[]);
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with('#')
                && l.ends_with(" tcp 192.0.2.9:80 refused: no rule allows it")),
        "{listing}"
    );
}

fn a_refused_name_does_not_resolve_and_is_listed_refused(shared: &Shared) {
    let out = python(
        shared,
        "import socket\n\
         try:\n    socket.gethostbyname('refused.test'); print('resolved')\n\
         except socket.gaierror: print('not resolved')",
    );
    assert_eq!(out, "not resolved\n");
    let listing = net(shared, &[]);
    assert!(
        listing
            .lines()
            .any(|l| l.ends_with(" dns refused.test:53 refused: no rule allows it")),
        "{listing}"
    );
}

fn net_allow_adds_a_rule_and_deny_removes_it(shared: &Shared) {
    let rules = |listing: &str| -> Vec<String> {
        listing
            .lines()
            .filter_map(|l| l.strip_prefix("allow "))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(rules(&net(shared, &[])), ["127.0.0.1"]);
    let added = net(shared, &["--allow", "192.0.2.9/32:80"]);
    assert_eq!(rules(&added), ["127.0.0.1", "192.0.2.9:80"], "{added}");
    // Listed by the next invocation too, and adding it again changes nothing.
    assert_eq!(
        rules(&net(shared, &["--allow", "192.0.2.9:80"])),
        ["127.0.0.1", "192.0.2.9:80"]
    );

    // A rule the policy does not have is refused, and nothing changes.
    let argv = [
        "sandbox",
        "net",
        &shared.id,
        "--deny",
        "192.0.2.9",
        "--allow",
        "a.test",
    ];
    let out = shared.home.airlock(&argv);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("no rule 192.0.2.9 to remove") && stderr.contains("nothing changed"),
        "{stderr}"
    );
    assert_eq!(rules(&net(shared, &[])), ["127.0.0.1", "192.0.2.9:80"]);

    let removed = net(shared, &["--deny", "192.0.2.9/32:80"]);
    assert_eq!(rules(&removed), ["127.0.0.1"], "{removed}");
    let out = shared
        .home
        .airlock(&["sandbox", "net", &shared.id, "--allow", "10.0.0.1/8"]);
    assert_eq!(out.status.code(), Some(2), "a bad rule is a usage error");
    assert!(text(&out.stderr).contains("\"10.0.0.1/8\""));
}

fn net_json_has_the_rules_and_the_audit(shared: &Shared) {
    let json: serde_json::Value = serde_json::from_str(&net(shared, &["--json"])).expect("JSON");
    assert_eq!(json["rules"], serde_json::json!(["127.0.0.1"]), "{json}");
    let audit = json["audit"].as_array().expect("an audit array");
    let refused = audit
        .iter()
        .find(|r| r["addr"] == "192.0.2.9" && r["port"] == 80)
        .unwrap_or_else(|| panic!("192.0.2.9:80 not in {json}"));
    assert_eq!(refused["protocol"], "tcp");
    assert_eq!(refused["allowed"], false);
    assert_eq!(refused["verdict"], "refused: no rule allows it");
    let seqs: Vec<u64> = audit.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "oldest first: {seqs:?}"
    );
}

fn secrets_are_placeholders_in_the_guest_and_never_printed(shared: &Shared) {
    let out = python(
        shared,
        "import os\n\
         for name in ['ENV_TOKEN', 'INLINE_TOKEN']:\n\
         \x20   print(os.environ[name].startswith('airlock-placeholder-'))",
    );
    assert_eq!(out, "True\nTrue\n", "the guest has placeholders");
    let printed = [
        text(&shared.created.stdout),
        text(&shared.created.stderr),
        net(shared, &[]),
        net(shared, &["--json"]),
        shared.home.ok(&["ls"]),
        shared.home.ok(&["ls", "--json"]),
        shared.home.daemon_log(),
    ];
    for output in printed {
        for value in [ENV_SECRET, INLINE_SECRET] {
            assert!(
                !output.contains(value),
                "a secret's value shows in:\n{output}"
            );
        }
    }
}
