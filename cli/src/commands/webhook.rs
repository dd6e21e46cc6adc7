//! `airlock webhook add|ls|rm`: the URLs the server posts your sandboxes'
//! lifecycle events to (the owner's: every sandbox's), signed with a
//! secret shown once by `add`. Through the API like `airlock sandbox ...`.
//! Server-wide webhooks are `airlock serve --webhook URL`.

use airlock_client::{api, Client};
use clap::Subcommand;

use super::remote::{message, ServerOptions};
use super::session::fail;

/// `airlock webhook` and its options.
#[derive(Debug, clap::Args)]
pub struct WebhookArgs {
    #[command(flatten)]
    pub server: ServerOptions,

    #[command(subcommand)]
    pub command: WebhookCommand,
}

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Register URL (https://, or http:// to a loopback address for the
    /// owner); prints its id, and its signing secret once on the last line
    /// of stdout. For a URL you registered before, changes its kinds (the
    /// secret stays).
    Add {
        url: String,
        /// Only these kinds (comma-separated: created, resumed, paused,
        /// snapshotted, forked, timed_out, killed, lost, ended; default
        /// all).
        #[arg(long, value_name = "KINDS", value_delimiter = ',')]
        kinds: Vec<String>,
    },
    /// List the webhooks: id, URL, deliveries waiting and dropped, the
    /// last error.
    Ls,
    /// Remove webhooks and the deliveries waiting for them.
    Rm {
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
    },
}

fn kind(name: &str) -> Result<api::EventKind, String> {
    Ok(match name.trim() {
        "created" => api::EventKind::Created,
        "resumed" => api::EventKind::Resumed,
        "paused" => api::EventKind::Paused,
        "snapshotted" => api::EventKind::Snapshotted,
        "forked" => api::EventKind::Forked,
        "timed_out" => api::EventKind::TimedOut,
        "killed" => api::EventKind::Killed,
        "lost" => api::EventKind::Lost,
        "ended" => api::EventKind::Ended,
        other => return Err(format!("{other:?} is not an event kind")),
    })
}

/// Runs a `webhook` subcommand; returns the exit code.
pub async fn run(args: WebhookArgs) -> u8 {
    let client = match args.server.connect().await {
        Ok(client) => client,
        Err(message) => return fail(&message),
    };
    match call(&client, args.command).await {
        Ok(()) => 0,
        Err(message) => fail(&message),
    }
}

fn table(hooks: &[api::WebhookInfo]) -> String {
    let mut text = format!(
        "{:<20}  {:>7}  {:>7}  {:<8}  {}\n",
        "ID", "PENDING", "DROPPED", "OWNER", "URL"
    );
    for hook in hooks {
        let owner = match (hook.server_wide, hook.owner.as_str()) {
            (true, _) => "(server)",
            (false, "") => "(owner)",
            (false, key) => key,
        };
        text.push_str(&format!(
            "{:<20}  {:>7}  {:>7}  {:<8}  {}\n",
            hook.id, hook.pending, hook.dropped, owner, hook.url
        ));
        if !hook.last_error.is_empty() {
            text.push_str(&format!("{:<20}  last error: {}\n", "", hook.last_error));
        }
    }
    text
}

async fn call(client: &Client, command: WebhookCommand) -> Result<(), String> {
    let mut events = client.events();
    match command {
        WebhookCommand::Add { url, kinds } => {
            let kinds = kinds
                .iter()
                .map(|name| kind(name).map(|k| k as i32))
                .collect::<Result<_, _>>()?;
            let answer = events
                .set_webhook(api::SetWebhookRequest { url, kinds })
                .await
                .map_err(|status| message(status.into()))?
                .into_inner();
            let id = answer.webhook.map(|hook| hook.id).unwrap_or_default();
            if answer.secret.is_empty() {
                eprintln!("airlock: webhook {id} changed; its secret stays");
            } else {
                eprintln!(
                    "airlock: webhook {id} registered; its signing secret (shown once) follows"
                );
                super::stdout::print(&format!("{}\n", answer.secret));
            }
            Ok(())
        }
        WebhookCommand::Ls => {
            let hooks = events
                .list_webhooks(api::ListWebhooksRequest {})
                .await
                .map_err(|status| message(status.into()))?
                .into_inner()
                .webhooks;
            super::stdout::print(&table(&hooks));
            Ok(())
        }
        WebhookCommand::Rm { ids } => {
            for id in ids {
                events
                    .remove_webhook(api::RemoveWebhookRequest { id: id.clone() })
                    .await
                    .map_err(|status| message(status.into()))?;
                eprintln!("airlock: webhook {id} removed");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_as_the_events_prints_them() {
        assert_eq!(kind("timed_out"), Ok(api::EventKind::TimedOut));
        assert!(kind("exploded").is_err());
    }

    #[test]
    fn the_table_names_whose_webhook_and_its_last_error() {
        let hooks = [api::WebhookInfo {
            id: "wh_0123456789abcdef".into(),
            url: "https://hooks.example/in".into(),
            owner: "alice".into(),
            pending: 3,
            last_error: "answered 500".into(),
            ..api::WebhookInfo::default()
        }];
        let text = table(&hooks);
        assert!(
            text.contains(
                "wh_0123456789abcdef         3        0  alice     https://hooks.example/in"
            ),
            "{text}"
        );
        assert!(text.contains("last error: answered 500"), "{text}");
    }
}
