//! The ingress's bounds, documented in docs/network.md ("Ingress").

use std::time::Duration;

/// Connections to one sandbox's ports open at once (requests in flight and
/// WebSocket tunnels); one more is answered 503.
pub const MAX_CONNECTIONS_PER_SANDBOX: usize = 256;
/// The most bytes of a request's head (request line and headers); a
/// larger head is answered 431.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// How long a client has to send a request's head, and how long a kept
/// alive connection may sit idle between requests.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a tunnel (an upgraded connection: WebSocket) may move no byte
/// either way before it is closed.
pub const TUNNEL_IDLE: Duration = Duration::from_secs(600);
/// Refusals (404 and 401) an address gets before its requests are answered
/// 429 for a while (doubling with each refusal past these; one forgiven
/// every two minutes): probing for ids and tokens is slow.
pub const FREE_REFUSALS: u32 = 20;
