//! `/execute`'s `env_vars`: environment variables for one Python cell.
//!
//! The Code service's cells have no environment of their own (a context's
//! is set when it starts), so the front runs a cell before the caller's
//! that sets them in the interpreter (`os.environ`, which programs the cell
//! starts inherit) and remembers what they were, and one after it that puts
//! them back, whether the caller's cell ended, failed or was interrupted.
//! Both are cells of the context: its execution count grows by 2 more than
//! E2B's (docs/e2b.md). Bash contexts refuse `env_vars` by name.

use std::collections::BTreeMap;

use futures::StreamExt;

use airlock_api::v1::{self as api, code_event::Event, code_server::Code};

use super::fail::from_status;
use crate::e2b::reply::Failure;
use crate::e2b::target::SandboxCall;

/// Where the set-up cell keeps the values it replaced.
const SAVED: &str = "__airlock_env_saved";

/// The cell that sets `envs`, keeping what they were.
pub fn set_code(envs: &BTreeMap<String, String>) -> String {
    // JSON objects of strings are Python dict literals.
    let values = serde_json::to_string(envs).unwrap_or_else(|_| "{}".to_owned());
    format!(
        "{SAVED} = {{__k: __import__('os').environ.get(__k) for __k in {values}}}\n\
         __import__('os').environ.update({values})\n"
    )
}

/// The cell that puts back what [`set_code`] replaced.
pub fn restore_code() -> String {
    format!(
        "for __k, __v in {SAVED}.items():\n    \
             if __v is None:\n        __import__('os').environ.pop(__k, None)\n    \
             else:\n        __import__('os').environ[__k] = __v\n\
         del {SAVED}, __k, __v\n"
    )
}

/// Runs `code` in the cell's context and waits for its end; `Err` if it
/// could not run or raised.
pub async fn run_quietly(
    call: &SandboxCall,
    context_id: &str,
    code: String,
) -> Result<(), Failure> {
    let message = api::RunCodeRequest {
        sandbox_id: call.id.clone(),
        code,
        language: "python".to_owned(),
        context_id: context_id.to_owned(),
        timeout_secs: Some(30.0),
    };
    let mut events = call
        .services()
        .run_code(call.request(message))
        .await
        .map_err(|status| from_status(&status))?
        .into_inner();
    while let Some(event) = events.next().await {
        match event.map_err(|status| from_status(&status))?.event {
            Some(Event::Error(error)) => {
                return Err(Failure::new(
                    http::StatusCode::INTERNAL_SERVER_ERROR,
                    format!(
                        "env_vars: setting them failed: {}: {}",
                        error.name, error.value
                    ),
                ));
            }
            Some(Event::Done(_)) => break,
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cells_are_python_that_sets_and_restores() {
        let envs = BTreeMap::from([("A".to_owned(), "it's \"x\"".to_owned())]);
        let set = set_code(&envs);
        assert!(set.contains(r#"{"A":"it's \"x\""}"#), "{set}");
        assert!(set.starts_with(SAVED));
        let restore = restore_code();
        assert!(restore.contains(&format!("{SAVED}.items()")));
        assert!(restore.ends_with(&format!("del {SAVED}, __k, __v\n")));
    }
}
