//! [`ByteMeter`]: the bytes a sandbox's connections carried, each way,
//! counted on the host as they pass (so the guest cannot skew them, and a
//! long connection counts before it ends).
//!
//! The gateway keeps one for the guest's own connections (egress: every
//! carried connection, refused ones' first bytes and the HTTP proxy's
//! requests included; DNS not); the library keeps another for connections
//! into the guest (ingress: every [`GuestPort`](crate::GuestPort) of the
//! sandbox). Counts start at zero with the value that holds them and only
//! grow.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes counted both ways, as seen from the guest.
#[derive(Debug, Default)]
pub struct ByteMeter {
    from_guest: AtomicU64,
    to_guest: AtomicU64,
}

/// A reading of a [`ByteMeter`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ByteCounts {
    /// Bytes the guest's side sent.
    pub from_guest: u64,
    /// Bytes delivered to the guest's side.
    pub to_guest: u64,
}

impl ByteMeter {
    /// The counts so far.
    pub fn counts(&self) -> ByteCounts {
        ByteCounts {
            from_guest: self.from_guest.load(Ordering::Relaxed),
            to_guest: self.to_guest.load(Ordering::Relaxed),
        }
    }

    /// Counts `n` bytes the guest sent.
    pub fn add_from_guest(&self, n: usize) {
        self.from_guest
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Counts `n` bytes on their way to the guest.
    pub fn add_to_guest(&self, n: usize) {
        self.to_guest
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_way_apart() {
        let meter = ByteMeter::default();
        meter.add_from_guest(3);
        meter.add_to_guest(10);
        meter.add_from_guest(4);
        assert_eq!(
            meter.counts(),
            ByteCounts {
                from_guest: 7,
                to_guest: 10
            }
        );
    }
}
