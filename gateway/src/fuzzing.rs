//! Seams for the fuzz targets in `fuzz/` (the `fuzzing` feature): the
//! crate-private parsers the gateway runs on what a guest hands it,
//! exposed unchanged so that the fuzz crate drives the real code rather
//! than a copy. Not an API: only the fuzz crate turns the feature on, and
//! nothing here is covered by semver.

use http::request::Parts;

pub use crate::dns::{answer, DnsError, MAX_QUERY_BYTES};
pub use crate::fake_ip::{FakeIps, FAKE_RANGE};
pub use crate::secrets::http::{serve_http, HttpGate};
pub use crate::secrets::request::HttpRefusal;
pub use crate::secrets::upstream::Upstream;
use crate::secrets::Secrets;
pub use crate::sniff::{classify, read_head, Head, SniffError, MAX_HEAD_BYTES};

/// `secrets::request::prepare`: the HTTP gate's check and rewrite of one
/// request head bound for `expected_host` (normalized).
pub fn prepare_request(
    parts: &mut Parts,
    expected_host: &str,
    secrets: &Secrets,
) -> Result<(), HttpRefusal> {
    crate::secrets::prepare_request(parts, expected_host, secrets)
}
