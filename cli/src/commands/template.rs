//! `airlock template build`, `ls` and `rm`: named templates built from a
//! template file (`template_build`), and the per-configuration snapshots
//! that `run`, `shell` and `sandbox create` clone (see `airlock::template`);
//! or, with `--host` or `AIRLOCK_HOST`, a server's templates and the
//! caller's own there (`template_remote`).

use airlock::template::{NamedError, NamedStore, TemplateEntry, TemplateStore};

use super::stdout;
use super::template_build::{self, BuildArgs, TemplateServer};
use super::template_remote;
use super::EXIT_AIRLOCK_ERROR;

/// `airlock template` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TemplateCommand {
    /// Build a named template from a template file (a Dockerfile subset
    /// with START and READY; see docs/templates.md).
    Build(BuildArgs),
    /// List the named templates (name, size, steps, build time, START) and
    /// the configuration snapshots (key, state, size, memory, image); on a
    /// server, its templates and yours (name, size, owner, base).
    Ls {
        #[command(flatten)]
        server: TemplateServer,
    },
    /// Remove named templates by name, or snapshots by key (running
    /// sandboxes are not affected).
    Rm {
        /// Template names or snapshot keys, as `ls` prints them.
        #[arg(required_unless_present = "all", value_name = "NAME|KEY")]
        keys: Vec<String>,
        /// Remove every template and snapshot (on this machine only).
        #[arg(long, conflicts_with = "keys")]
        all: bool,
        #[command(flatten)]
        server: TemplateServer,
    },
}

/// Runs a template command and returns the exit code.
pub async fn run(command: TemplateCommand) -> u8 {
    let store = TemplateStore::new(airlock::template::default_dir());
    let result = match command {
        TemplateCommand::Build(args) => match args.server.remote() {
            Some(server) => template_remote::build(&server, &args).await.map(|()| 0),
            None => return template_build::run(args).await,
        },
        TemplateCommand::Ls { server } => match server.remote() {
            Some(server) => template_remote::list(&server).await.map(|(at, templates)| {
                stdout::print(&remote_table(&at, &templates));
                0
            }),
            None => list_named().and_then(|named| {
                let snapshots = list(&store)?;
                stdout::print(&(named + &snapshots));
                Ok(0)
            }),
        },
        TemplateCommand::Rm { keys, all, server } => match server.remote() {
            Some(_) if all => Err("--all removes this machine's templates; on a server, name \
                                   them (`airlock template ls` lists them)"
                .to_owned()),
            Some(server) => template_remote::remove(&server, &keys)
                .await
                .map(|all_removed| if all_removed { 0 } else { EXIT_AIRLOCK_ERROR }),
            None => remove(&store, keys, all),
        },
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("airlock: {message}");
            EXIT_AIRLOCK_ERROR
        }
    }
}

/// A server's templates as `ls` prints them.
fn remote_table(at: &str, templates: &[airlock_client::api::TemplateInfo]) -> String {
    if templates.is_empty() {
        return format!("no named templates on {at}\n");
    }
    let mut text = format!(
        "{:<24}  {:>9}  {:>7}  {:>5}  {:<19}  {:<12}  FROM\n",
        "NAME", "ON DISK", "MEMORY", "VCPUS", "BUILT (UTC)", "OWNER"
    );
    for template in templates {
        let owner = match template.owner.as_str() {
            "" => "server",
            key => key,
        };
        text.push_str(&format!(
            "{:<24}  {:>8}M  {:>6}M  {:>5}  {:<19}  {:<12}  {}\n",
            template.name,
            template.size_bytes >> 20,
            template.memory_mib,
            template.vcpus,
            utc(template.created_at_ms / 1000),
            owner,
            template.image
        ));
    }
    text
}

/// The named templates' table.
fn list_named() -> Result<String, String> {
    let store = NamedStore::open_default();
    let templates = store.list().map_err(|e| airlock::error_chain(&e))?;
    let mut text = String::new();
    if templates.is_empty() {
        text.push_str(&format!(
            "no named templates in {}\n",
            store.dir().display()
        ));
    } else {
        text.push_str(&format!(
            "{:<24}  {:>9}  {:>5}  {:<19}  {:>7}  START\n",
            "NAME", "ON DISK", "STEPS", "BUILT (UTC)", "TOOK"
        ));
    }
    for template in templates {
        match template {
            Ok(template) => {
                let meta = template.meta();
                text.push_str(&format!(
                    "{:<24}  {:>8}M  {:>5}  {:<19}  {:>6.1}s  {}\n",
                    meta.name,
                    template.disk_bytes() >> 20,
                    meta.steps.len(),
                    utc(meta.built_unix_secs),
                    meta.build_secs,
                    if meta.start.is_empty() {
                        "-"
                    } else {
                        &meta.start
                    }
                ));
            }
            Err(error) => text.push_str(&format!("{}\n", airlock::error_chain(&error))),
        }
    }
    text.push('\n');
    Ok(text)
}

/// `YYYY-MM-DD HH:MM:SS` of a Unix time, in UTC.
pub(super) fn utc(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The configuration snapshots' table.
fn list(store: &TemplateStore) -> Result<String, String> {
    let entries = store.list().map_err(|e| airlock::error_chain(&e))?;
    if entries.is_empty() {
        return Ok(format!(
            "no configuration snapshots in {}\n",
            store.dir().display()
        ));
    }
    let mut text =
        String::from("configuration snapshots (made by the first start of each configuration):\n");
    text.push_str(&format!(
        "{:<32}  {:<7}  {:>9}  {:>7}  {:>5}  IMAGE\n",
        "KEY", "STATE", "ON DISK", "MEMORY", "VCPUS"
    ));
    for entry in &entries {
        text.push_str(&line(entry));
        text.push('\n');
    }
    Ok(text)
}

fn line(entry: &TemplateEntry) -> String {
    let state = match (&entry.meta, entry.current) {
        (None, _) => "corrupt",
        (Some(_), true) => "current",
        (Some(_), false) => "stale",
    };
    let (memory, vcpus, image) = match &entry.meta {
        Some(meta) => (
            format!("{}M", meta.inputs.memory_mib),
            meta.inputs.vcpus.to_string(),
            meta.inputs
                .image
                .as_ref()
                .map_or_else(|| "-".to_owned(), |image| image.path.display().to_string()),
        ),
        None => ("-".into(), "-".into(), "-".into()),
    };
    format!(
        "{:<32}  {state:<7}  {:>8}M  {memory:>7}  {vcpus:>5}  {image}",
        entry.key,
        entry.disk_bytes >> 20
    )
}

fn remove(store: &TemplateStore, keys: Vec<String>, all: bool) -> Result<u8, String> {
    let named = NamedStore::open_default();
    let mut code = 0;
    let keys = if all {
        for template in named
            .list()
            .map_err(|e| airlock::error_chain(&e))?
            .into_iter()
            .flatten()
        {
            let name = template.meta().name.clone();
            match named.remove(&name) {
                Ok(()) => println!("removed template {name}"),
                Err(error) => {
                    eprintln!("airlock: {}", airlock::error_chain(&error));
                    code = EXIT_AIRLOCK_ERROR;
                }
            }
        }
        store
            .list()
            .map_err(|e| airlock::error_chain(&e))?
            .into_iter()
            .map(|entry| entry.key)
            .collect()
    } else {
        keys
    };
    for key in keys {
        match named.remove(&key) {
            Ok(()) => {
                println!("removed template {key} (`airlock gc` frees its unused steps)");
                continue;
            }
            Err(NamedError::NotFound(_) | NamedError::BadName(_)) => {}
            Err(error) => {
                eprintln!("airlock: {}", airlock::error_chain(&error));
                code = EXIT_AIRLOCK_ERROR;
                continue;
            }
        }
        match store.remove(&key) {
            Ok(true) => println!("removed {key}"),
            Ok(false) => {
                eprintln!("airlock: no template {key}");
                code = EXIT_AIRLOCK_ERROR;
            }
            Err(error) => {
                eprintln!("airlock: {}", airlock::error_chain(&error));
                code = EXIT_AIRLOCK_ERROR;
            }
        }
    }
    Ok(code)
}
