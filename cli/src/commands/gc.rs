//! `airlock gc`: ends the sandboxes whose owner process died (see
//! `airlock::gc`), under `$AIRLOCK_STATE_DIR` or the default state
//! directory base, except adoptable ones whose VM runs and whose lifetime
//! lasts, which it lists as waiting for adoption; then removes the
//! templates that nothing can use any more
//! (an input file changed or is gone, or the template is corrupt) and what
//! template builds that never finished left behind.

use std::time::Duration;

use airlock::gc::{GcOptions, GcReport};

use super::EXIT_AIRLOCK_ERROR;

/// `airlock gc` options.
#[derive(Debug, clap::Args)]
pub struct GcArgs {
    /// Only print what would be killed and removed.
    #[arg(long)]
    pub dry_run: bool,

    /// Collect state directories without an owner record once they are
    /// this many seconds old (younger ones may be sandboxes being created).
    #[arg(long, value_name = "SECS", default_value_t = airlock::gc::DEFAULT_GRACE.as_secs())]
    pub grace: u64,
}

/// Runs `airlock gc` and returns the exit code: 0 when every orphan went,
/// 125 when some could not be collected.
pub async fn run(args: GcArgs) -> u8 {
    let base = airlock::state_dir::default_base();
    let options = GcOptions::new()
        .dry_run(args.dry_run)
        .grace(Duration::from_secs(args.grace));
    let collect_base = base.clone();
    let result =
        tokio::task::spawn_blocking(move || airlock::gc::collect(&collect_base, &options)).await;
    let templates = collect_templates(args.dry_run);
    match result {
        Ok(Ok(report)) => {
            let text = describe(&report, args.dry_run);
            if text.is_empty() {
                println!("no sandboxes under {}", base.display());
            } else {
                super::stdout::print(&text);
            }
            if report.failed.is_empty() && templates {
                0
            } else {
                EXIT_AIRLOCK_ERROR
            }
        }
        Ok(Err(error)) => {
            eprintln!("airlock: {}", airlock::error_chain(&error));
            EXIT_AIRLOCK_ERROR
        }
        Err(error) => {
            eprintln!("airlock: gc in {} did not finish: {error}", base.display());
            EXIT_AIRLOCK_ERROR
        }
    }
}

/// Removes unusable templates and unfinished builds (with `dry_run`, only
/// names the unusable templates); prints what went. `false` on an error.
fn collect_templates(dry_run: bool) -> bool {
    let store = airlock::template::TemplateStore::new(airlock::template::default_dir());
    if dry_run {
        return match store.list() {
            Ok(entries) => {
                for entry in entries.iter().filter(|entry| !entry.current) {
                    println!("would remove template {}", entry.key);
                }
                true
            }
            Err(error) => {
                eprintln!("airlock: {}", airlock::error_chain(&error));
                false
            }
        };
    }
    match airlock::template::build::collect(&airlock::template::NamedStore::open_default()) {
        Ok(0) => {}
        Ok(freed) => println!(
            "removed template build caches no template uses ({} MiB)",
            freed >> 20
        ),
        Err(error) => {
            eprintln!("airlock: {}", airlock::error_chain(&error));
            return false;
        }
    }
    match store.collect() {
        Ok(gc) => {
            for key in &gc.templates {
                println!("removed template {key} (its inputs changed, or it was corrupt)");
            }
            for dir in &gc.leftovers {
                println!("removed {} (an unfinished template)", dir.display());
            }
            true
        }
        Err(error) => {
            eprintln!("airlock: {}", airlock::error_chain(&error));
            false
        }
    }
}

/// One line per sandbox directory: removed (or would be), kept, failed.
fn describe(report: &GcReport, dry_run: bool) -> String {
    let verb = if dry_run { "would remove" } else { "removed" };
    let mut text = String::new();
    for removed in &report.removed {
        let killed = if removed.killed.is_empty() {
            String::from("no VMM process left")
        } else {
            let pids: Vec<String> = removed.killed.iter().map(u32::to_string).collect();
            let kill_verb = if dry_run { "would kill" } else { "killed" };
            format!("{kill_verb} {}", pids.join(" "))
        };
        text.push_str(&format!(
            "{verb} {} ({}; {killed})\n",
            removed.dir.display(),
            removed.why
        ));
    }
    for kept in &report.kept {
        text.push_str(&format!("kept {}: {}\n", kept.dir.display(), kept.why));
    }
    for failed in &report.failed {
        text.push_str(&format!(
            "failed {}: {}\n",
            failed.dir.display(),
            airlock::error_chain(&failed.error)
        ));
    }
    text
}
