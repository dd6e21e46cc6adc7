//! The Rust client of Airlock's public API, `airlock.api.v1` (crate
//! `airlock-api`): what the `airlock` CLI's `sandbox` and `key` commands
//! use, and what a Rust program uses to drive a server on this machine or
//! another.
//!
//! - `endpoint`: [`Endpoint`], where the server is: the local server's Unix
//!   socket, or `https://HOST:PORT` with an API key and, for a private CA,
//!   its certificate (from `AIRLOCK_HOST`, `AIRLOCK_API_KEY`,
//!   `AIRLOCK_CA_CERT`, or given).
//! - `client`: [`Client`], a connection (one HTTP/2 channel) with the
//!   generated service clients, each sending the key.
//! - `local`: starting the local server when nobody answers on its socket.
//! - `process`: [`ProcessStream`], a program's events and its inputs.
//! - `template`: a template build's requests ([`build_requests`]: header,
//!   context chunks, end) and [`Client::build_template`].
//! - `snapshots`: the caller's named snapshots (take, list, get, delete).
//! - `error`: [`ClientError`], with the server's reason and field.
//!
//! ```text
//! Client ─ Endpoint::connect ─ Unix socket | TCP + TLS (rustls, ALPN h2) ─ airlock serve
//! ```

#![forbid(unsafe_code)]

mod client;
mod endpoint;
mod error;
mod local;
mod process;
mod snapshots;
mod template;

pub use airlock_api::v1 as api;
pub use airlock_api::{limits, reason};
pub use client::{Authed, Bearer, Client};
pub use endpoint::{Endpoint, API_KEY_ENV, CA_CERT_ENV, HOST_ENV};
pub use error::ClientError;
pub use local::{LOG_NAME, SOCKET_NAME, START_TIMEOUT};
pub use process::{ProcessInputs, ProcessStream};
pub use template::build_requests;
