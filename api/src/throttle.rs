//! [`Throttle`]: failed authentications counted per peer address, and the
//! addresses refused for a while because of them. The server counts failed
//! API keys with it; the MCP server's HTTP transport counts its callers'
//! too, since the server sees the MCP server's address for every caller
//! (refusing a caller there after a few failures keeps one caller's
//! guessing from getting every caller refused by the server).
//!
//! A success forgets nothing: a guesser who also holds one valid key (a
//! tenant guessing another's) would otherwise reset its count with every
//! other call. Failures decay instead, one forgiven every
//! [`FORGIVE_EVERY`], and past the free ones each failure doubles the
//! block. IPv6 peers are counted per /64 (one host commonly holds a whole
//! /64) and IPv4-mapped IPv6 addresses as the IPv4 address they are.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Failures an address may have before it is refused for a while, unless
/// [`Throttle::with_free_failures`] says otherwise.
pub const FREE_FAILURES: u32 = 5;
/// One failure is forgiven this often.
pub const FORGIVE_EVERY: Duration = Duration::from_secs(120);
/// How long it is refused the first time; doubled with each failure after,
/// up to [`MAX_BLOCK`].
const FIRST_BLOCK: Duration = Duration::from_secs(1);
const MAX_BLOCK: Duration = Duration::from_secs(300);
/// Failures counted at most (enough to reach [`MAX_BLOCK`]; more would
/// only take longer to forgive).
const MAX_COUNTED: u32 = 64;
/// Addresses remembered at most (the oldest are forgotten first).
const MAX_PEERS: usize = 16 * 1024;

/// What the throttle counts failures of: an IPv4 address, or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerKey(IpAddr);

impl PeerKey {
    /// The key `peer` is counted under.
    pub fn of(peer: IpAddr) -> PeerKey {
        match peer.to_canonical() {
            IpAddr::V4(v4) => PeerKey(IpAddr::V4(v4)),
            IpAddr::V6(v6) => {
                let prefix = u128::from(v6) & !(u128::from(u64::MAX));
                PeerKey(IpAddr::V6(Ipv6Addr::from(prefix)))
            }
        }
    }
}

impl std::fmt::Display for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Peer {
    /// Failures not yet forgiven.
    failures: u32,
    /// Since when the time to the next forgiveness runs.
    since: Instant,
    blocked_until: Option<Instant>,
}

impl Peer {
    /// Forgives the failures `now` has earned.
    fn decay(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.since);
        let forgiven = elapsed.as_secs() / FORGIVE_EVERY.as_secs().max(1);
        if forgiven == 0 {
            return;
        }
        let forgiven = u32::try_from(forgiven).unwrap_or(u32::MAX);
        self.failures = self.failures.saturating_sub(forgiven);
        self.since = if self.failures == 0 {
            now
        } else {
            self.since + FORGIVE_EVERY * forgiven
        };
    }

    fn forgotten(&self, now: Instant) -> bool {
        let mut peer = *self;
        peer.decay(now);
        peer.failures == 0 && peer.blocked_until.is_none_or(|until| until <= now)
    }
}

/// Failed authentications per peer address.
#[derive(Debug)]
pub struct Throttle {
    free_failures: u32,
    peers: Mutex<HashMap<PeerKey, Peer>>,
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

    fn peers(&self) -> MutexGuard<'_, HashMap<PeerKey, Peer>> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long `peer` is still refused, if it is.
    pub fn blocked_for(&self, peer: IpAddr) -> Option<Duration> {
        self.blocked_for_at(peer, Instant::now())
    }

    fn blocked_for_at(&self, peer: IpAddr, now: Instant) -> Option<Duration> {
        let until = self.peers().get(&PeerKey::of(peer))?.blocked_until?;
        until.checked_duration_since(now).filter(|d| !d.is_zero())
    }

    /// Counts a failure of `peer`; past the free ones it is refused for a
    /// while, twice as long with each failure.
    pub fn failed(&self, peer: IpAddr) {
        self.failed_at(peer, Instant::now());
    }

    fn failed_at(&self, peer: IpAddr, now: Instant) {
        let key = PeerKey::of(peer);
        let mut peers = self.peers();
        if peers.len() >= MAX_PEERS && !peers.contains_key(&key) {
            peers.retain(|_, p| !p.forgotten(now));
            if peers.len() >= MAX_PEERS {
                if let Some(oldest) = peers.iter().min_by_key(|(_, p)| p.since).map(|(a, _)| *a) {
                    peers.remove(&oldest);
                }
            }
        }
        let entry = peers.entry(key).or_insert(Peer {
            failures: 0,
            since: now,
            blocked_until: None,
        });
        entry.decay(now);
        if entry.failures == 0 {
            entry.since = now;
        }
        entry.failures = entry.failures.saturating_add(1).min(MAX_COUNTED);
        if entry.failures > self.free_failures {
            let doublings = (entry.failures - self.free_failures - 1).min(16);
            let block = FIRST_BLOCK.saturating_mul(1 << doublings).min(MAX_BLOCK);
            entry.blocked_until = Some(now + block);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
        // Still counted: the next failure blocks at once, for longer.
        let later = start + FIRST_BLOCK * 2;
        throttle.failed_at(peer, later);
        assert_eq!(throttle.blocked_for_at(peer, later), Some(FIRST_BLOCK * 4));
    }

    #[test]
    fn failures_decay_one_per_period_and_are_not_reset() {
        let throttle = Throttle::default();
        let peer: IpAddr = [192, 0, 2, 9].into();
        let start = Instant::now();
        for _ in 0..=FREE_FAILURES {
            throttle.failed_at(peer, start);
        }
        // Two periods later two of the six are forgiven: one failure is
        // free again, the next blocks.
        let later = start + FORGIVE_EVERY * 2;
        throttle.failed_at(peer, later);
        assert_eq!(throttle.blocked_for_at(peer, later), None);
        throttle.failed_at(peer, later);
        assert_eq!(throttle.blocked_for_at(peer, later), Some(FIRST_BLOCK));
        // Long after, all are forgiven.
        let much_later = later + FORGIVE_EVERY * (MAX_COUNTED + 1);
        for _ in 0..FREE_FAILURES {
            throttle.failed_at(peer, much_later);
        }
        assert_eq!(throttle.blocked_for_at(peer, much_later), None);
    }

    #[test]
    fn ipv6_peers_are_counted_per_64_and_mapped_ipv4_as_ipv4() {
        let throttle = Throttle::default();
        let start = Instant::now();
        for host in 0..=(FREE_FAILURES as u16) {
            let peer = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, host));
            throttle.failed_at(peer, start);
        }
        let same_64: IpAddr = "2001:db8:0:1:ffff::1".parse().unwrap();
        let other_64: IpAddr = "2001:db8:0:2::1".parse().unwrap();
        assert_eq!(throttle.blocked_for_at(same_64, start), Some(FIRST_BLOCK));
        assert_eq!(throttle.blocked_for_at(other_64, start), None);

        let v4: IpAddr = [192, 0, 2, 77].into();
        let mapped: IpAddr = "::ffff:192.0.2.77".parse().unwrap();
        for _ in 0..=FREE_FAILURES {
            throttle.failed_at(mapped, start);
        }
        assert_eq!(throttle.blocked_for_at(v4, start), Some(FIRST_BLOCK));
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
    fn the_table_is_bounded() {
        let throttle = Throttle::default();
        let start = Instant::now();
        for i in 0..(MAX_PEERS as u32 + 10) {
            throttle.failed_at(IpAddr::from(i.to_be_bytes()), start);
        }
        assert!(throttle.peers().len() <= MAX_PEERS);
    }
}
