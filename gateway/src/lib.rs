//! Airlock's network gateway: network for sandboxed code, enforced on the
//! host. The security boundary between a guest and the world, and the main
//! surface the fuzz targets in `fuzz/` drive.
//!
//! The guest has no NIC. Its agent carries every TCP connection and DNS
//! query to the host over the agent channel; everything here decides what
//! becomes of them:
//! - [`policy`]: the allow rules (domains, CIDRs, ports) and the addresses
//!   a name may never resolve to without a CIDR rule;
//! - [`host`]: the host's own addresses (loopback, link-local, its
//!   interfaces'), which no rule reaches unless the sandbox's
//!   [`HostAccess`] allows it;
//! - [`audit`]: a bounded record of every allowed and refused connection;
//! - `fake_ip` and `dns`: the guest's resolver, answered on the host
//!   with addresses that stand for names, never with real ones;
//! - [`resolver`]: how the host itself resolves an allowed name;
//! - `sniff`: the first bytes of a connection (a TLS ClientHello's
//!   server name, an HTTP request's Host);
//! - [`splice`]: bytes both ways with an idle timeout; `prefixed`: a
//!   stream that first replays the bytes already read from it;
//! - [`secrets`]: credentials bound to hosts, the per-sandbox CA, and the
//!   HTTP proxy that puts a secret into requests on the way out;
//! - `gateway`: one sandbox's decisions, from a connection's original
//!   destination to its verdict and upstream, using all of the above, with
//!   its options in `options` ([`NetworkOptions`]) and the HTTP proxy's
//!   requests read by `proxy`;
//! - `told`: what a refused program and the guest's refusal log are told,
//!   in one wording (an HTTP answer where the protocol has one, a reset
//!   otherwise);
//! - `carry` and `carried`: the `Network.Carry` calls kept open toward the
//!   agent, and one carried connection as a byte stream;
//! - [`meter`]: [`ByteMeter`], the bytes a sandbox's connections carried
//!   each way (the gateway's for egress, the library's for ingress);
//! - `guest_port`: the other way, ingress: [`GuestPort`], one connection
//!   from the host to a program listening in the guest (`Network.Dial`,
//!   opened by `Sandbox::connect_port`).
//!
//! The library (`airlock`, host-bridge/) makes one [`Gateway`] per sandbox
//! from the embedder's [`NetworkOptions`], keeps a [`CarrierPool`] open on
//! the agent's channel for it, opens a [`GuestPort`] for each ingress
//! connection, and reads the [`audit`] log back; docs/architecture.md ("The
//! gateway crate") lists everything it uses. The `fuzzing` feature exposes
//! the parsers underneath to the fuzz targets and nothing else.
//!
//! The guest's side is the agent's `services::network`; the whole design is
//! in `docs/network.md`.

#![forbid(unsafe_code)]

pub mod audit;
mod carried;
mod carry;
mod dns;
mod fake_ip;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod gateway;
mod guest_port;
pub mod host;
pub mod meter;
mod options;
pub mod policy;
mod prefixed;
mod proxy;
pub mod resolver;
pub mod secrets;
mod sniff;
pub mod splice;
mod told;

use carried::Carried;
pub use carry::CarrierPool;
pub use fake_ip::GATEWAY_ADDR;
pub use gateway::{Gateway, GatewayError};
pub use guest_port::GuestPort;
pub use host::HostAccess;
pub use meter::{ByteCounts, ByteMeter};
pub use options::NetworkOptions;
