//! Webhooks: the lifecycle events posted to URLs, signed, retried, and
//! kept on disk until delivered (at least once).
//!
//! - `hooks`: [`Hooks`], the registered webhooks (a principal's own in
//!   `hooks.json`; the server-wide ones of `airlock serve --webhook`).
//! - `target`: a webhook's URL checked (`https://`, or `http://` to
//!   loopback for the owner; never the host itself for a key).
//! - `body`: a delivery's JSON (E2B's payload fields and Airlock's event).
//! - `sign`: secrets and the HMAC-SHA256 signature header.
//! - `outbox`: the deliveries waiting, one file each, bounded.
//! - `deliver`: one attempt, an HTTP/1.1 `POST`.
//! - `dispatch`: the tasks: one queues each event for the webhooks that
//!   want it (from the event log, after the last event it queued, so a
//!   restart skips none), one per webhook sends its outbox oldest first,
//!   retrying with backoff.
//!
//! Everything is under `<data dir>/webhooks/`.

mod body;
mod deliver;
mod dispatch;
pub mod error;
mod hooks;
mod outbox;
mod sign;
pub mod target;

pub use dispatch::Webhooks;
pub use hooks::{new_id, Hook, MAX_PER_PRINCIPAL};
pub use sign::new_secret;
pub use target::Target;
