//! [`Throttle`]: failed authentications counted per peer address, and the
//! addresses refused for a while because of them. The server counts failed
//! API keys with it; the MCP server's HTTP transport counts its callers'
//! too, since the server sees the MCP server's address for every caller
//! (refusing a caller there after a few failures keeps one caller's
//! guessing from getting every caller refused by the server).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Failures an address may have before it is refused for a while, unless
/// [`Throttle::with_free_failures`] says otherwise.
pub const FREE_FAILURES: u32 = 5;
/// How long it is refused the first time; doubled each time after, up to
/// [`MAX_BLOCK`].
const FIRST_BLOCK: Duration = Duration::from_secs(1);
const MAX_BLOCK: Duration = Duration::from_secs(300);
/// Failures older than this are forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(600);
/// Addresses remembered at most (the oldest are forgotten first).
const MAX_PEERS: usize = 16 * 1024;

#[derive(Debug, Clone, Copy)]
struct Peer {
    failures: u32,
    last: Instant,
    blocked_until: Option<Instant>,
}

/// Failed authentications per peer address.
#[derive(Debug)]
pub struct Throttle {
    free_failures: u32,
    peers: Mutex<HashMap<IpAddr, Peer>>,
}

impl Default for Throttle {
    fn default() -> Self {
        Self::with_free_failures(FREE_FAILURES)
    }
}

impl Throttle {
    /// A throttle that refuses an address after `free_failures` failures.
    pub fn with_free_failures(free_failures: u32) -> Self {
        Self {
            free_failures,
            peers: Mutex::default(),
        }
    }

    fn peers(&self) -> MutexGuard<'_, HashMap<IpAddr, Peer>> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long `peer` is still refused, if it is.
    pub fn blocked_for(&self, peer: IpAddr) -> Option<Duration> {
        self.blocked_for_at(peer, Instant::now())
    }

    fn blocked_for_at(&self, peer: IpAddr, now: Instant) -> Option<Duration> {
        let until = self.peers().get(&peer)?.blocked_until?;
        until.checked_duration_since(now).filter(|d| !d.is_zero())
    }

    /// Counts a failure of `peer`; past the free ones it is refused for a
    /// while, longer each time.
    pub fn failed(&self, peer: IpAddr) {
        self.failed_at(peer, Instant::now());
    }

    fn failed_at(&self, peer: IpAddr, now: Instant) {
        let mut peers = self.peers();
        if peers.len() >= MAX_PEERS && !peers.contains_key(&peer) {
            peers.retain(|_, p| now.duration_since(p.last) < FORGET_AFTER);
            if peers.len() >= MAX_PEERS {
                if let Some(oldest) = peers.iter().min_by_key(|(_, p)| p.last).map(|(a, _)| *a) {
                    peers.remove(&oldest);
                }
            }
        }
        let entry = peers.entry(peer).or_insert(Peer {
            failures: 0,
            last: now,
            blocked_until: None,
        });
        if now.duration_since(entry.last) >= FORGET_AFTER {
            entry.failures = 0;
        }
        entry.failures = entry.failures.saturating_add(1);
        entry.last = now;
        if entry.failures > self.free_failures {
            let doublings = (entry.failures - self.free_failures - 1).min(16);
            let block = FIRST_BLOCK.saturating_mul(1 << doublings).min(MAX_BLOCK);
            entry.blocked_until = Some(now + block);
        }
    }

    /// `peer` authenticated: its failures are forgotten.
    pub fn succeeded(&self, peer: IpAddr) {
        self.peers().remove(&peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_refused_after_its_free_failures_longer_each_time() {
        let throttle = Throttle::default();
        let peer: IpAddr = [192, 0, 2, 1].into();
        let other: IpAddr = [192, 0, 2, 2].into();
        let start = Instant::now();
        for _ in 0..FREE_FAILURES {
            throttle.failed_at(peer, start);
        }
        assert_eq!(throttle.blocked_for_at(peer, start), None);
        throttle.failed_at(peer, start);
        assert_eq!(throttle.blocked_for_at(peer, start), Some(FIRST_BLOCK));
        assert_eq!(throttle.blocked_for_at(other, start), None);
        throttle.failed_at(peer, start);
        assert_eq!(throttle.blocked_for_at(peer, start), Some(FIRST_BLOCK * 2));
        assert_eq!(throttle.blocked_for_at(peer, start + FIRST_BLOCK * 2), None);
        throttle.succeeded(peer);
        throttle.failed_at(peer, start);
        assert_eq!(throttle.blocked_for_at(peer, start), None);
    }

    #[test]
    fn the_free_failures_are_the_callers_choice() {
        let throttle = Throttle::with_free_failures(3);
        let peer: IpAddr = [192, 0, 2, 3].into();
        let start = Instant::now();
        for _ in 0..3 {
            throttle.failed_at(peer, start);
        }
        assert_eq!(throttle.blocked_for_at(peer, start), None);
        throttle.failed_at(peer, start);
        assert_eq!(throttle.blocked_for_at(peer, start), Some(FIRST_BLOCK));
    }

    #[test]
    fn old_failures_are_forgotten_and_the_table_is_bounded() {
        let throttle = Throttle::default();
        let peer: IpAddr = [198, 51, 100, 1].into();
        let start = Instant::now();
        for _ in 0..FREE_FAILURES {
            throttle.failed_at(peer, start);
        }
        throttle.failed_at(peer, start + FORGET_AFTER);
        assert_eq!(throttle.blocked_for_at(peer, start + FORGET_AFTER), None);
        for i in 0..(MAX_PEERS as u32 + 10) {
            throttle.failed_at(IpAddr::from(i.to_be_bytes()), start);
        }
        assert!(throttle.peers().len() <= MAX_PEERS);
    }
}
