//! The Airlock server: the `airlock` library behind the public API
//! `airlock.api.v1` (crate `airlock-api`), for the `airlock` CLI, the SDKs
//! and the MCP server alike.
//!
//! A call flows like this:
//!
//! ```text
//! client ─ gRPC (or gRPC-Web) ─> listener (Unix socket: the owner; TCP: TLS + an API key)
//!   ─> interceptor puts the Principal on the request (`auth`, `throttle`)
//!   ─> service (`service::*`): makes its `Call` (principal, admission), parses
//!      the request (`validate`, `service::create`), finds the caller's sandbox
//!      (`state`, `registry`), calls the library, maps the answer (`convert`)
//!      or the error (`status`)
//!   ─> airlock::Sandbox ─> the guest agent
//! ```
//!
//! Modules:
//! - `serve`: [`serve`] and [`Listeners`]: start, recover, serve, stop.
//! - `config`: [`ServerConfig`] (limits, the data directory and the image
//!   and template stores, the builder factory, the pool, template builds'
//!   bounds, [`OnExit`]).
//! - `listen`: [`UnixSocket`] and [`TcpEndpoint`].
//! - `auth`, `throttle`, `principal`: who calls, and refusing strangers.
//! - `e2b`: the E2B-compatible front ([`E2bListener`]): E2B's SDKs,
//!   unmodified, translated into the same services.
//! - `ingress`: the HTTP ingress into servers in sandboxes
//!   ([`IngressListener`]): routes, traffic tokens, the proxy.
//! - `keys`: [`KeyStore`], API keys as hashes.
//! - `metrics`: Prometheus metrics, counted as calls go, and their
//!   listener ([`MetricsEndpoint`]).
//! - `registry`, `record`: the server's sandboxes with owners and labels,
//!   tenancy and quotas, and their records on disk.
//! - `state`: what calls share (the manager, calls in flight per key), and
//!   what it holds: `machine` (the guest a create asks for, which the pool
//!   compares), `trackers` (change trackers), `relays` (programs' exits for
//!   `Wait`).
//! - `workspaces`: the keys' named workspaces, their quota, claims and
//!   removal.
//! - `snapshots`: the keys' named snapshots over the library's
//!   content-addressed store, their quota and removal.
//! - `templates`: the named templates, the server's own and each key's
//!   (a store per key), resolved, listed, counted and deleted per
//!   principal, and the builds in progress; `templates_context`: a
//!   build's context as a client sends it, bounded and unpacked safely.
//! - `events`: lifecycle events (created, paused, ..., ended): the bus in
//!   `State::events`, their log on disk, and the watcher that notices
//!   what the library did by itself.
//! - `webhooks`: the events posted to registered URLs, signed, retried,
//!   kept in an outbox on disk until delivered.
//! - `usage`: the usage ledger (SQLite in the data directory), accrued
//!   from the library's meters every 5 s, for `Usage.Query`.
//! - `service`: one module per service of the API.
//! - `trace`: a span per call (gRPC, and HTTP on the E2B front and the
//!   ingress) for the binary's subscriber: its JSON log, its OTLP traces.
//! - `validate`, `convert`, `status`: requests checked, answers and errors
//!   mapped, each in one place.
//! - `error`: [`ServerError`].
//!
//! The server's tests run on the library's process backend (the agent as a
//! host process), without VMs: see `tests/`.

#![forbid(unsafe_code)]

mod auth;
mod config;
mod convert;
pub mod e2b;
mod error;
mod events;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod ingress;
pub mod keys;
mod listen;
mod machine;
pub mod metrics;
mod principal;
mod record;
mod registry;
mod relays;
mod serve;
mod service;
mod snapshots;
mod state;
mod status;
mod templates;
mod templates_context;
mod trace;
mod trackers;
mod usage;
mod validate;
mod webhooks;
mod workspaces;

pub use config::{default_data_dir, BuilderFactory, OnExit, ServerConfig, DATA_DIR_ENV};
pub use e2b::E2bListener;
pub use error::ServerError;
pub use ingress::{IngressListener, DEFAULT_DOMAIN as DEFAULT_INGRESS_DOMAIN};
pub use keys::KeyStore;
pub use listen::{TcpEndpoint, TlsFiles, UnixSocket};
pub use metrics::MetricsEndpoint;
pub use principal::Principal;
pub use serve::{serve, Listeners};
