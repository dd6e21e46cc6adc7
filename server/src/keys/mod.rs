//! API keys: made and removed by the machine's owner, checked on every TCP
//! call.
//!
//! A key is 256 bits from the kernel's random source, shown once when made
//! (`ak_` and 43 base64url characters, see [`airlock_api::auth`]). The
//! server keeps only its SHA-256 (`keys.json` in the server's data
//! directory, mode 0600, written atomically) and compares a presented key's
//! hash with every stored one in constant time. A key's name and quota are
//! kept beside its hash.
//!
//! - `store`: [`KeyStore`], the file and the operations on it.

mod store;

pub use store::{is_valid_name, KeyError, KeyInfo, KeyStore, Quota, OWNER_NAME};
