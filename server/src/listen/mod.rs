//! Where the server listens.
//!
//! - `unix`: [`UnixSocket`], the private, exclusively held socket of the
//!   machine's owner (mode 0600, a lock file beside it).
//! - `tcp`: [`TcpEndpoint`], TCP with TLS (rustls; ALPN `h2` and
//!   `http/1.1`, the latter for gRPC-Web), or plain TCP on a loopback
//!   address when asked for explicitly; each accepted connection carries
//!   its peer's address for the authentication throttle.
//! - `certificate`: the listener's certificate checked at start (a leaf,
//!   in date, with names).
//! - `handshake`: [`handshake::Handshakes`], the bounds on TLS handshakes
//!   in progress, shared by the API's listener and the ingress's.

mod certificate;
pub mod handshake;
mod tcp;
mod unix;

pub use tcp::{TcpEndpoint, TlsFiles};
pub use unix::UnixSocket;
