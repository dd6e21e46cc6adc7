//! An MCP (Model Context Protocol) server for Airlock, so any agent host
//! (desktop assistants, IDE agents, agent frameworks) can run code in
//! sandboxes. It is a client of the Airlock server's public API
//! (`airlock-client`), built on the official Rust MCP SDK (`rmcp`); the
//! `airlock mcp` command is its thin entry.
//!
//! - `stdio`: [`serve_stdio`], one session over stdin and stdout.
//! - `http`: [`HttpServer`], MCP's streamable HTTP transport with TLS, every
//!   request's API key checked by the server (`gate`) and forwarded with
//!   every call, per-address throttling of bad keys (`throttle`); `idle`
//!   ends a session that has had no call in flight for a while.
//! - `tools`: [`AirlockTools`], the handler of one session and its tools
//!   (lifecycle, commands, code, files, network log).
//! - `session`: a session's state: how it reaches the server (`access`),
//!   its own sandbox made on first need, its change trackers, its log
//!   files; `registry` kills what sessions created when they end.
//! - `capture`: output cut to a bound, the whole of it written to a log
//!   file in the sandbox; `text` tells text from binary and cuts on
//!   character boundaries; `render` writes records as lines.
//! - `outcome`: which failures are results (`isError`) and which are
//!   protocol errors.
//!
//! ```text
//! host ─ stdio | streamable HTTP ─ rmcp ─ AirlockTools ─ airlock-client ─ airlock serve ─ microVMs
//! ```

#![forbid(unsafe_code)]

mod access;
mod capture;
mod error;
mod http;
mod idle;
mod outcome;
mod registry;
mod render;
mod session;
mod stdio;
mod text;
mod tools;

pub use access::Connector;
pub use error::ServeError;
pub use http::{HttpOptions, HttpServer, TlsFiles, MCP_PATH};
pub use session::{SessionSandbox, LOG_DIR, SESSION_LABEL};
pub use stdio::serve_stdio;
pub use tools::{AirlockTools, Transport};
