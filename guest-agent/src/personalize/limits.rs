//! The bounds of a `PersonalizeRequest`.

/// The fewest bytes of entropy a request must carry.
pub const ENTROPY_MIN: usize = 32;
/// The most bytes of entropy a request may carry.
pub const ENTROPY_MAX: usize = 512;
/// The longest sandbox id, in bytes.
pub const SANDBOX_ID_MAX: usize = 128;
