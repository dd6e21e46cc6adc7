//! `airlock template ls` and `airlock template rm`: the templates that
//! `run`, `shell` and `sandbox create` clone (see `airlock::template`).

use airlock::template::{TemplateEntry, TemplateStore};

use super::EXIT_AIRLOCK_ERROR;

/// `airlock template` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TemplateCommand {
    /// List the templates: key, state, size on disk, memory, image.
    Ls,
    /// Remove templates by key (running clones are not affected).
    Rm {
        /// Template keys, as `ls` prints them.
        #[arg(required_unless_present = "all", value_name = "KEY")]
        keys: Vec<String>,
        /// Remove every template.
        #[arg(long, conflicts_with = "keys")]
        all: bool,
    },
}

/// Runs a template command and returns the exit code.
pub fn run(command: TemplateCommand) -> u8 {
    let store = TemplateStore::new(airlock::template::default_dir());
    let result = match command {
        TemplateCommand::Ls => list(&store),
        TemplateCommand::Rm { keys, all } => remove(&store, keys, all),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("airlock: {message}");
            EXIT_AIRLOCK_ERROR
        }
    }
}

fn list(store: &TemplateStore) -> Result<u8, String> {
    let entries = store.list().map_err(|e| airlock::error_chain(&e))?;
    if entries.is_empty() {
        println!("no templates in {}", store.dir().display());
        return Ok(0);
    }
    println!(
        "{:<32}  {:<7}  {:>9}  {:>7}  {:>5}  IMAGE",
        "KEY", "STATE", "ON DISK", "MEMORY", "VCPUS"
    );
    for entry in &entries {
        println!("{}", line(entry));
    }
    Ok(0)
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
    let keys = if all {
        store
            .list()
            .map_err(|e| airlock::error_chain(&e))?
            .into_iter()
            .map(|entry| entry.key)
            .collect()
    } else {
        keys
    };
    let mut code = 0;
    for key in keys {
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
