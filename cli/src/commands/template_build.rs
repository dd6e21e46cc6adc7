//! `airlock template build`: a template file (the Dockerfile subset, see
//! docs/templates.md) built into a named template, its progress printed
//! step by step with each step's output prefixed by its number. Here, or
//! on a server when one is named (`template_remote`), printed alike.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use airlock::template::build::{BaseResolver, OutputStream};
use airlock::template::{Base, BuildEvent, BuildOptions, TemplateSpec};
use airlock::NetRule;

use super::remote::ServerOptions;
use super::EXIT_AIRLOCK_ERROR;

/// `airlock template build` arguments.
#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// The template file (default: CONTEXT_DIR/Dockerfile).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The template's name (default: the context directory's name).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// A value for an ARG of the file. Repeatable.
    #[arg(long = "build-arg", value_name = "KEY=VALUE", value_parser = parse_build_arg)]
    pub build_args: Vec<(String, String)>,
    /// Let RUN steps reach what RULE allows (as `airlock run --allow-net`;
    /// without a rule, RUN steps have no network). Repeatable.
    #[arg(long = "allow-net", value_name = "RULE", value_parser = parse_rule)]
    pub allow_net: Vec<NetRule>,
    /// Guest memory in MiB of the build VMs and the template.
    #[arg(long, default_value_t = 512, value_name = "MIB")]
    pub memory: u32,
    /// Virtual CPUs of the build VMs and the template.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub vcpus: u32,
    /// Stop the build after SECS seconds (on a server: default 1800, at
    /// most 7200).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u32>,
    /// Where COPY and ADD read from (on a server: sent to it as a tar
    /// stream).
    #[arg(value_name = "CONTEXT_DIR", default_value = ".")]
    pub context: PathBuf,
    #[command(flatten)]
    pub server: TemplateServer,
}

/// What a build reads on this machine: the context directory, the
/// template file's text and the template's name.
#[derive(Debug)]
pub struct Source {
    pub context: PathBuf,
    pub file: PathBuf,
    pub text: String,
    pub name: String,
}

impl Source {
    pub fn read(args: &BuildArgs) -> Result<Source, String> {
        let context = std::fs::canonicalize(&args.context)
            .map_err(|e| format!("context directory {}: {e}", args.context.display()))?;
        let file = args
            .file
            .clone()
            .unwrap_or_else(|| context.join("Dockerfile"));
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let name = match &args.name {
            Some(name) => name.clone(),
            None => context
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or("name the template with --name")?,
        };
        Ok(Source {
            context,
            file,
            text,
            name,
        })
    }
}

/// Where templates are built and kept (flattened into `template`'s
/// subcommands).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TemplateServer {
    /// Build, list or remove templates on a server, https://HOST:PORT
    /// (default: AIRLOCK_HOST; unset: this machine's templates, built
    /// here). Its key comes from AIRLOCK_API_KEY, a private CA's
    /// certificate from AIRLOCK_CA_CERT.
    #[arg(long, value_name = "URL")]
    pub host: Option<String>,
}

impl TemplateServer {
    /// The server the options or the environment name, if any.
    pub fn remote(&self) -> Option<ServerOptions> {
        let host = self.host.clone().or_else(|| {
            std::env::var(airlock_client::HOST_ENV)
                .ok()
                .filter(|host| !host.is_empty())
        })?;
        Some(ServerOptions {
            socket: None,
            host: Some(host),
        })
    }
}

fn parse_build_arg(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?}: write KEY=VALUE")),
    }
}

fn parse_rule(text: &str) -> Result<NetRule, String> {
    text.parse::<NetRule>().map_err(|e| e.to_string())
}

/// Runs the build here; the exit code.
pub async fn run(args: BuildArgs) -> u8 {
    match build(args).await {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("airlock: {message}");
            EXIT_AIRLOCK_ERROR
        }
    }
}

async fn build(args: BuildArgs) -> Result<(), String> {
    let Source {
        context,
        file,
        text,
        name,
    } = Source::read(&args)?;
    let build_args: BTreeMap<String, String> = args.build_args.iter().cloned().collect();
    let spec =
        TemplateSpec::parse(&text, &build_args).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut options = BuildOptions::new(&name, &context);
    options.allow_net = args.allow_net.clone();
    // Built here by the machine's owner, as `airlock run` runs.
    options.host_access = airlock::HostAccess::Allowed;
    options.memory_mib = args.memory;
    options.vcpus = args.vcpus;
    options.resolve_base = Some(rootfs_resolver());
    let building = airlock::template::build(&spec, &options, print_event);
    let built = match args.timeout {
        Some(secs) => tokio::time::timeout(Duration::from_secs(u64::from(secs)), building)
            .await
            .map_err(|_| format!("the build took longer than --timeout {secs}"))?,
        None => building.await,
    };
    let template = built.map_err(|e| airlock::error_chain(&e))?;
    let meta = template.meta();
    println!(
        "built template {} in {:.1}s ({} steps, {} MiB on disk){}",
        meta.name,
        meta.build_secs,
        meta.steps.len(),
        template.disk_bytes() >> 20,
        meta.start_pid
            .map(|pid| format!("; START runs as pid {pid}"))
            .unwrap_or_default()
    );
    println!("start it: airlock sandbox create --template {name}   or   airlock run --template {name} -- CMD");
    Ok(())
}

/// Prints one progress event.
pub fn print_event(event: BuildEvent) {
    let mut out = std::io::stdout().lock();
    let _ = match event {
        BuildEvent::Step {
            number,
            total,
            line,
            instruction,
            cached,
        } => {
            let line = line.map(|l| format!(" (line {l})")).unwrap_or_default();
            let cached = if cached { " [cached]" } else { "" };
            writeln!(out, "[{number}/{total}] {instruction}{line}{cached}")
        }
        BuildEvent::Output {
            number,
            stream,
            data,
        } => {
            let text = String::from_utf8_lossy(&data);
            let mark = match stream {
                OutputStream::Stdout => "|",
                OutputStream::Stderr => "!",
            };
            let mut result = Ok(());
            for line in text.lines() {
                result = result.and(writeln!(out, "  {number} {mark} {line}"));
            }
            result
        }
        BuildEvent::Phase(what) => writeln!(out, "==> {what}"),
    };
    let _ = out.flush();
}

/// Builds what the library cannot (`debian:SUITE`, an OCI layout, a
/// `docker save` archive, a root tarball) with airlock-rootfs's image
/// builder, into the image store.
fn rootfs_resolver() -> BaseResolver {
    Arc::new(|base: &Base, context: &Path| {
        use airlock_rootfs::image::{self, BuildOptions, DebianSpec, Source};
        let source = match base {
            Base::Debian(suite) => Source::Debian(DebianSpec {
                suite: suite.clone(),
                ..DebianSpec::default()
            }),
            Base::Path(path) => {
                let path = context.join(path);
                if path.is_dir() || is_container_archive(&path) {
                    Source::Container {
                        path,
                        reference: None,
                    }
                } else {
                    Source::Tar(path)
                }
            }
            Base::Image(name) => return Err(format!("no image {name}").into()),
        };
        let built = image::build(&BuildOptions::new(source))?;
        Ok(built.info.path)
    })
}

/// Whether a tar file is a `docker save` or OCI archive (it holds a
/// `manifest.json` or an `oci-layout` at its top).
fn is_container_archive(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut archive = tar::Archive::new(file);
    let Ok(entries) = archive.entries() else {
        return false;
    };
    entries.flatten().any(|entry| {
        entry.path().is_ok_and(|p| {
            let p = p.to_string_lossy();
            let p = p.trim_start_matches("./");
            p == "manifest.json" || p == "oci-layout"
        })
    })
}
