//! What the fuzz targets in `fuzz/` drive of the E2B front: the
//! translation of a stranger's create body, and the Connect envelopes a
//! client stream arrives in. Behind the `fuzzing` feature; not a stable API.

pub use super::connect::envelope::{encode, Decoder, Envelope};
pub use super::control::{translate, NewSandbox, Version};
pub use super::reply::Failure;
