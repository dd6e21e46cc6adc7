//! `airlock sandbox create|ls|exec|run-code|cp|net|expose|port-forward|pause|resume|fork|snapshot|kill`:
//! sandboxes that outlive one invocation, kept by a server: the local one
//! (`airlock serve` on a private Unix socket, started on demand; its log is
//! `daemon.log` beside the socket), or a remote one (`--host` or
//! `AIRLOCK_HOST`, with `AIRLOCK_API_KEY`). Every command is a client of the
//! server's public API (`airlock.api.v1`, through `airlock-client`); its
//! refusals print as the server worded them.
//!
//! `exec` behaves like `airlock run`: it takes the same program options
//! ([`ProgramOptions`]) and is driven by the same [`Session`]: output on
//! the matching host stream, piped stdin forwarded, the first Ctrl-C
//! forwarded as SIGINT (a second one, or SIGTERM, ends the client and with
//! it the program: its start asks for `kill_on_disconnect`), and the exit
//! code is the program's (128+N for signal N, 124 for `--timeout`, 125 when
//! Airlock failed).
//!
//! `snapshot` saves a sandbox under a name of yours that `create
//! --snapshot` starts clones from (`airlock snapshot ls|rm` keeps them).

use std::collections::HashMap;
use std::time::Duration;

use airlock::CaCert;
use airlock_client::api;
use airlock_client::Client;
use clap::{Subcommand, ValueEnum};
use serde::Serialize;

use super::remote::{message, ServerOptions};
use super::session::{fail, Ending, Program, Session};
use super::vm_options::{parse_ca_file, CaFile, VmOptions};
use super::ProgramOptions;

/// `airlock sandbox` and its options.
#[derive(Debug, clap::Args)]
pub struct SandboxArgs {
    #[command(flatten)]
    pub server: ServerOptions,

    #[command(subcommand)]
    pub command: SandboxCommand,
}

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Start a sandbox on the server and print its id.
    Create(CreateArgs),
    /// List your sandboxes: state, wall, running and guest CPU time,
    /// labels.
    Ls {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Only sandboxes with this label (KEY=VALUE). Repeatable.
        #[arg(long = "metadata", value_name = "KEY=VALUE", value_parser = parse_pair)]
        metadata: Vec<(String, String)>,
    },
    /// Run a command in a sandbox and exit with its exit code.
    Exec(ExecArgs),
    /// Run code in a persistent context (Python or bash): print its output,
    /// rich outputs (images saved to files) and value, or --json.
    RunCode(super::run_code::RunCodeArgs),
    /// Copy a file or directory between the host and a sandbox; exactly one
    /// side is ID:/guest/path (write ./a:b for a host path with a colon).
    Cp {
        #[arg(value_name = "SRC")]
        src: String,
        #[arg(value_name = "DST")]
        dst: String,
    },
    /// Print a sandbox's network rules and every connection and DNS query
    /// its guest made, allowed or refused (or --json); --allow and --deny
    /// change the rules.
    Net(super::net::NetArgs),
    /// Print the URL that opens a server listening on PORT in the sandbox
    /// (through the server's HTTP ingress, with the sandbox's traffic
    /// token unless the port is public).
    Expose(super::ports::ExposeArgs),
    /// Forward a local TCP port to a port in the sandbox until interrupted
    /// (a database, a debugger: anything, not only HTTP).
    PortForward(super::ports::PortForwardArgs),
    /// Stop a sandbox's CPUs; the next exec or cp resumes it.
    Pause {
        id: String,
        /// Save the whole sandbox (memory, programs, files) to disk and end
        /// its VM process, freeing its memory; resume, exec or cp restores
        /// it, also after the server or the host restarted.
        #[arg(long)]
        to_disk: bool,
    },
    /// Restart a paused sandbox's CPUs.
    Resume { id: String },
    /// Kill a sandbox and forget it (one saved to disk: remove its files).
    Kill { id: String },
    /// Make N new sandboxes with a running sandbox's memory, programs and
    /// files; each gets its own id, hostname and entropy. Prints their ids.
    Fork {
        id: String,
        /// How many.
        #[arg(short = 'n', long = "count", default_value_t = 1,
              value_parser = clap::value_parser!(u32).range(1..))]
        count: u32,
    },
    /// Save a sandbox's memory, programs and files as a snapshot of yours
    /// (`create --snapshot NAME` starts clones of it) and print its name.
    /// A running sandbox stops only while its memory is copied (the time
    /// is printed on stderr); a paused or saved one stays so.
    Snapshot {
        id: String,
        /// Its name ([A-Za-z0-9._-], up to 128; default: the server's,
        /// snapshot- and 16 hex digits).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
    },
}

/// `airlock sandbox create` options.
#[derive(Debug, clap::Args)]
// The shared `--no-image` and `--workspace`, their help worded for `sandbox create`.
#[command(
    mut_arg("no_image", |arg| arg.help(
        "No root image: the initramfs's busybox environment"
    )),
    mut_arg("workspace", |arg| arg.help(
        "Keep what the sandbox writes (outside /tmp) in this disk file; \
         created on first use. One sandbox at a time"
    )),
)]
pub struct CreateArgs {
    #[command(flatten)]
    pub vm: VmOptions,

    /// Kill the sandbox SECS seconds after it started, whatever it does
    /// (default one hour; 0 for no ceiling).
    #[arg(long, value_name = "SECS")]
    pub max_lifetime: Option<u64>,

    /// Pause or stop the sandbox (see --idle) after SECS seconds without
    /// a call.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout: Option<u64>,

    /// What --idle-timeout does.
    #[arg(long, value_enum, default_value_t = Idle::Pause, requires = "idle_timeout")]
    pub idle: Idle,

    /// A label (KEY=VALUE) to find the sandbox by (`ls --metadata`).
    /// Repeatable.
    #[arg(long = "metadata", value_name = "KEY=VALUE", value_parser = parse_pair)]
    pub metadata: Vec<(String, String)>,

    /// An environment variable every command in the sandbox gets
    /// (KEY=VALUE). Repeatable.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_pair)]
    pub env: Vec<(String, String)>,

    /// Make the guest trust the CA certificates in FILE (PEM, one or more)
    /// besides its own roots (OpenSSL's store, Python, pip, curl and the
    /// runtimes' variables). Read and checked here, sent to the server.
    /// Repeatable. Default: the server's (its AIRLOCK_CA_CERTS).
    #[arg(long = "ca-cert", value_name = "FILE", value_parser = parse_ca_file)]
    pub ca_certs: Vec<CaFile>,

    /// A guest port the server's HTTP ingress serves without the traffic
    /// token (anyone who can reach the ingress can open it). Repeatable.
    #[arg(long = "public-port", value_name = "PORT",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub public_ports: Vec<u16>,

    /// The size of a workspace this create makes, e.g. 512M, 4G (default
    /// 4G; sparse: the host's disk holds what the guest writes, up to
    /// this, and the key's quota counts the whole size).
    #[arg(long, value_name = "SIZE", requires = "workspace",
          value_parser = super::parse_size)]
    pub workspace_size: Option<u64>,

    /// Start from a snapshot of yours (`sandbox snapshot`, `airlock
    /// snapshot ls`): a clone with its memory, programs and files, on its
    /// image and at its size, with its own id, hostname and clock.
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with_all = ["image", "no_image", "workspace", "memory", "vcpus", "cold", "template"]
    )]
    pub snapshot: Option<String>,
}

/// `KEY=VALUE`.
fn parse_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// `--idle pause|pause-to-disk|stop`: the API's `IdlePolicy`, as clap
/// parses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Idle {
    Pause,
    PauseToDisk,
    Stop,
}

impl From<Idle> for api::IdlePolicy {
    fn from(idle: Idle) -> api::IdlePolicy {
        match idle {
            Idle::Pause => api::IdlePolicy::Pause,
            Idle::PauseToDisk => api::IdlePolicy::PauseToDisk,
            Idle::Stop => api::IdlePolicy::Stop,
        }
    }
}

/// `airlock sandbox exec` options.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// The sandbox, as `create` printed it.
    pub id: String,

    /// `run`'s, carried to the server.
    #[command(flatten)]
    pub program: ProgramOptions,

    /// The program and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Runs a `sandbox` subcommand and returns the exit code.
pub async fn run(args: SandboxArgs) -> u8 {
    let server = args.server;
    let outcome = match args.command {
        SandboxCommand::Exec(exec) => return exec_in(&server, exec).await,
        SandboxCommand::RunCode(args) => return super::run_code::run(&server, args).await,
        command => match server.connect().await {
            Ok(client) => call(&client, command).await,
            Err(message) => Err(message),
        },
    };
    match outcome {
        Ok(()) => 0,
        Err(message) => fail(&message),
    }
}

/// The commands that are one call (or a few) and print their answer.
async fn call(client: &Client, command: SandboxCommand) -> Result<(), String> {
    match command {
        SandboxCommand::Create(create) => create_sandbox(client, create).await,
        SandboxCommand::Ls { json, metadata } => list(client, json, metadata).await,
        SandboxCommand::Cp { src, dst } => super::copy::run(client, &src, &dst).await,
        SandboxCommand::Net(args) => super::net::run(client, args).await,
        SandboxCommand::Expose(args) => super::ports::expose(client, args).await,
        SandboxCommand::PortForward(args) => super::ports::port_forward(client, args).await,
        SandboxCommand::Pause { id, to_disk } => client
            .sandboxes()
            .pause(api::PauseSandboxRequest {
                sandbox_id: id,
                to_disk,
            })
            .await
            .map(drop)
            .map_err(|status| message(status.into())),
        SandboxCommand::Resume { id } => client
            .sandboxes()
            .resume(api::ResumeSandboxRequest { sandbox_id: id })
            .await
            .map(drop)
            .map_err(|status| message(status.into())),
        SandboxCommand::Kill { id } => client
            .sandboxes()
            .kill(api::KillSandboxRequest { sandbox_id: id })
            .await
            .map(drop)
            .map_err(|status| message(status.into())),
        SandboxCommand::Fork { id, count } => {
            let children = client
                .sandboxes()
                .fork(api::ForkSandboxRequest {
                    sandbox_id: id,
                    count,
                })
                .await
                .map_err(|status| message(status.into()))?
                .into_inner();
            for child in children.sandboxes {
                println!("{}", child.sandbox_id);
            }
            Ok(())
        }
        SandboxCommand::Snapshot { id, name } => {
            let taken = client
                .snapshot(&id, name.as_deref())
                .await
                .map_err(message)?;
            println!("{}", taken.name);
            eprintln!("airlock: {}", super::snapshot::taken(&taken));
            Ok(())
        }
        SandboxCommand::Exec(_) | SandboxCommand::RunCode(_) => Ok(()),
    }
}

async fn create_sandbox(client: &Client, args: CreateArgs) -> Result<(), String> {
    let request = create_request(args)?;
    let info = client
        .sandboxes()
        .create(request)
        .await
        .map_err(|status| message(status.into()))?
        .into_inner();
    println!("{}", info.sandbox_id);
    Ok(())
}

/// The server's request for `args`. A secret's value travels in it; the
/// request's `Debug` does not show it.
fn create_request(args: CreateArgs) -> Result<api::CreateSandboxRequest, String> {
    // A mistake in a rule or a secret shows before a round trip.
    args.vm.net.network()?;
    if args.vm.image.contains('/') {
        return Err(format!(
            "--image {}: a server starts sandboxes from the images in its store; name one of \
             `airlock image ls` (build an image there with airlock-rootfs image build)",
            args.vm.image
        ));
    }
    let workspace = match &args.vm.workspace {
        None => String::new(),
        // A path is the local owner's; a bare name is kept by the server.
        Some(path) if path.components().count() > 1 || path.is_absolute() => {
            std::path::absolute(path)
                .map_err(|e| format!("cannot resolve {}: {e}", path.display()))?
                .to_string_lossy()
                .into_owned()
        }
        Some(name) => name.to_string_lossy().into_owned(),
    };
    let net = &args.vm.net;
    // A template or a snapshot brings its own image and size.
    let templated = args.vm.template.is_some() || args.snapshot.is_some();
    let template = args.vm.template.clone().unwrap_or_default();
    let request = api::CreateSandboxRequest {
        image: if args.vm.no_image || templated {
            String::new()
        } else {
            args.vm.image.clone()
        },
        no_image: args.vm.no_image,
        workspace,
        memory_mib: if templated { 0 } else { args.vm.memory },
        vcpus: if templated { 0 } else { args.vm.vcpus },
        snapshot: args.snapshot.clone().unwrap_or_default(),
        cold: args.vm.cold,
        timeout_secs: args.max_lifetime,
        idle: args.idle_timeout.map(|timeout_secs| api::Idle {
            timeout_secs,
            policy: api::IdlePolicy::from(args.idle).into(),
        }),
        allow_net: net.allow_net.iter().map(ToString::to_string).collect(),
        secrets: net
            .secrets
            .iter()
            .map(|secret| api::Secret {
                name: secret.name.clone(),
                value: secret.value.expose().to_owned(),
                hosts: secret.hosts.clone(),
            })
            .collect(),
        metadata: args.metadata.into_iter().collect::<HashMap<_, _>>(),
        envs: args.env.into_iter().collect::<HashMap<_, _>>(),
        // One entry per file.
        ca_certs: args
            .ca_certs
            .iter()
            .map(|file| file.certs.iter().map(CaCert::to_pem).collect())
            .collect(),
        public_ports: args.public_ports.iter().map(|&p| u32::from(p)).collect(),
        workspace_size_mib: match args.workspace_size {
            None => 0,
            Some(bytes) => super::workspace::whole_mib(bytes)?,
        },
        ..api::CreateSandboxRequest::default()
    };
    Ok(api::CreateSandboxRequest {
        template,
        ..request
    })
}

/// One line of `airlock sandbox ls` (and one object of `--json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
struct SandboxEntry {
    id: String,
    /// `running`, `paused`, `on-disk` or `ended`.
    state: &'static str,
    /// Why it ended, once it has.
    ended: Option<String>,
    wall_ms: u64,
    running_ms: u64,
    guest_cpu_ms: u64,
    metadata: std::collections::BTreeMap<String, String>,
}

/// `running`, `paused`, `on-disk` or `ended`, as `ls` prints a state.
fn state_name(state: api::SandboxState) -> &'static str {
    match state {
        api::SandboxState::Running => "running",
        api::SandboxState::Paused => "paused",
        api::SandboxState::OnDisk => "on-disk",
        api::SandboxState::Ended => "ended",
        api::SandboxState::Unspecified => "unknown",
    }
}

impl From<api::SandboxInfo> for SandboxEntry {
    fn from(info: api::SandboxInfo) -> SandboxEntry {
        let usage = info.usage.unwrap_or_default();
        SandboxEntry {
            state: state_name(info.state()),
            id: info.sandbox_id,
            ended: (!info.end_reason.is_empty()).then_some(info.end_reason),
            wall_ms: usage.wall_ms,
            running_ms: usage.running_ms,
            guest_cpu_ms: usage.guest_cpu_ms,
            metadata: info.metadata.into_iter().collect(),
        }
    }
}

async fn list(client: &Client, json: bool, metadata: Vec<(String, String)>) -> Result<(), String> {
    let mut sandboxes = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .sandboxes()
            .list(api::ListSandboxesRequest {
                metadata: metadata.iter().cloned().collect(),
                page_token,
                ..api::ListSandboxesRequest::default()
            })
            .await
            .map_err(|status| message(status.into()))?
            .into_inner();
        sandboxes.extend(page.sandboxes.into_iter().map(SandboxEntry::from));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    if json {
        let text = serde_json::to_string_pretty(&sandboxes).map_err(|e| e.to_string())?;
        super::stdout::print(&format!("{text}\n"));
    } else {
        super::stdout::print(&table(&sandboxes));
    }
    Ok(())
}

/// The `ls` table.
fn table(sandboxes: &[SandboxEntry]) -> String {
    let secs = |ms: u64| format!("{:.1}s", Duration::from_millis(ms).as_secs_f64());
    let width = sandboxes
        .iter()
        .map(|s| s.id.len())
        .max()
        .unwrap_or(0)
        .max(2);
    let mut out = format!(
        "{:<width$}  {:<8}  {:>9}  {:>9}  {:>9}  LABELS\n",
        "ID", "STATE", "WALL", "RUNNING", "GUEST CPU"
    );
    for s in sandboxes {
        let labels: Vec<String> = s.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let line = format!(
            "{:<width$}  {:<8}  {:>9}  {:>9}  {:>9}  {}",
            s.id,
            s.state,
            secs(s.wall_ms),
            secs(s.running_ms),
            secs(s.guest_cpu_ms),
            labels.join(",")
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Runs a program in a sandbox; returns airlock's exit code.
async fn exec_in(server: &ServerOptions, args: ExecArgs) -> u8 {
    let mut session = match Session::new() {
        Ok(session) => session,
        Err(message) => return fail(&message),
    };
    let timeout = match args.program.timeout() {
        Ok(timeout) => timeout,
        Err(error) => return fail(&error.to_string()),
    };
    let start = start_request(args, session.stdin_piped());
    let started = async {
        let client = server.connect().await?;
        client.start(start).await.map_err(message)
    };
    let stream = tokio::select! {
        started = started => match started {
            Ok(stream) => stream,
            Err(message) => return fail(&message),
        },
        signal = session.signalled() => return Ending::Signalled(signal).report(None),
    };
    let ran = session
        .drive(Program::Remote(Box::new(stream)), timeout)
        .await;
    ran.ending.report(timeout)
}

/// The start of `exec`'s program: its options as `run` takes them, its
/// stdin piped when the host's is, and killed if this client goes away.
fn start_request(args: ExecArgs, stdin: bool) -> api::StartProcess {
    let options = args.program;
    let limits = (options.limit_memory.is_some()
        || options.limit_pids.is_some()
        || options.limit_cpus.is_some())
    .then_some(api::Limits {
        memory_bytes: options.limit_memory,
        pids: options.limit_pids,
        cpu_millis: options.limit_cpus,
    });
    api::StartProcess {
        sandbox_id: args.id,
        argv: args.command,
        envs: options.env.into_iter().collect(),
        cwd: options.cwd.unwrap_or_default(),
        user: options.user.unwrap_or_default(),
        timeout_secs: options.timeout,
        limits,
        privileged: options.privileged,
        stdin,
        kill_on_disconnect: true,
        ..api::StartProcess::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    use crate::commands::{Args, Commands};

    fn create_args(args: &[&str]) -> Result<CreateArgs, clap::Error> {
        let argv = [&["airlock", "sandbox", "create"], args].concat();
        Args::try_parse_from(argv).map(|args| match args.command {
            Commands::Sandbox(SandboxArgs {
                command: SandboxCommand::Create(create),
                ..
            }) => create,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn a_create_from_a_snapshot_leaves_the_image_and_size_to_it() {
        let request = create_request(create_args(&["--snapshot", "web"]).unwrap()).unwrap();
        assert_eq!(request.snapshot, "web");
        assert_eq!(request.image, "");
        assert_eq!((request.memory_mib, request.vcpus), (0, 0));
        for other in [
            &["--image", "python"][..],
            &["--memory", "1024"],
            &["--no-image"],
            &["--template", "t"],
            &["--workspace", "w"],
        ] {
            let argv = [&["--snapshot", "web"][..], other].concat();
            assert!(create_args(&argv).is_err(), "{argv:?} was taken");
        }
        let plain = create_request(create_args(&[]).unwrap()).unwrap();
        assert_eq!(
            (plain.snapshot.as_str(), plain.image.as_str()),
            ("", "default")
        );
    }

    #[test]
    fn the_table_has_a_line_per_sandbox() {
        let entry = SandboxEntry {
            id: "sandbox-abc".into(),
            state: "paused",
            ended: None,
            wall_ms: 12_340,
            running_ms: 10_000,
            guest_cpu_ms: 1_500,
            metadata: [("team".to_owned(), "a".to_owned())].into(),
        };
        let table = table(&[entry]);
        let lines: Vec<_> = table.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("ID"), "{table}");
        assert!(lines[1].starts_with("sandbox-abc  paused"), "{table}");
        assert!(
            lines[1].contains("12.3s") && lines[1].ends_with("1.5s  team=a"),
            "{table}"
        );
    }
}
