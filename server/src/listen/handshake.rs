//! TLS handshakes in progress, bounded so that idle connections cannot
//! stall new clients: at most [`PER_SOURCE`] from one address (more are
//! closed at once), at most [`TOTAL`] in all (one more cuts the oldest, so
//! the newest client always gets its turn), and each has
//! [`FIRST_BYTE`] to start and [`DEADLINE`] to finish. Established
//! connections are no longer counted; the owner's Unix socket never is.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

/// Handshakes in progress from one address (an IPv6 /64 counts as one).
pub const PER_SOURCE: usize = 16;
/// Handshakes in progress in all.
pub const TOTAL: usize = 256;
/// How long a new connection has to send its first byte.
pub const FIRST_BYTE: Duration = Duration::from_secs(1);
/// How long a handshake may take in all, from the accept.
pub const DEADLINE: Duration = Duration::from_secs(3);

/// The handshakes in progress on one listener.
#[derive(Debug, Default)]
pub struct Handshakes {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    by_source: HashMap<IpAddr, usize>,
    /// By age: the first is the oldest.
    pending: BTreeMap<u64, (IpAddr, oneshot::Sender<()>)>,
    next: u64,
}

/// One handshake's place; given back when dropped. `cut` fires when a
/// newer handshake took the place.
#[derive(Debug)]
pub struct Slot {
    handshakes: Arc<Handshakes>,
    id: u64,
    pub cut: oneshot::Receiver<()>,
}

/// What a source address is counted as.
fn source_of(peer: IpAddr) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

impl Handshakes {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a handshake from `peer`, or `None` when that address
    /// has [`PER_SOURCE`] in progress. With [`TOTAL`] in progress, the
    /// oldest is cut.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Slot> {
        let source = source_of(peer);
        let mut state = self.state();
        if state.by_source.get(&source).copied().unwrap_or(0) >= PER_SOURCE {
            return None;
        }
        while state.pending.len() >= TOTAL {
            let Some((_, (oldest, cut))) = state.pending.pop_first() else {
                break;
            };
            state.release(oldest);
            let _ = cut.send(());
        }
        let (cut_tx, cut) = oneshot::channel();
        let id = state.next;
        state.next += 1;
        state.pending.insert(id, (source, cut_tx));
        *state.by_source.entry(source).or_insert(0) += 1;
        Some(Slot {
            handshakes: Arc::clone(self),
            id,
            cut,
        })
    }

    /// Handshakes in progress now.
    #[cfg(test)]
    fn in_progress(&self) -> usize {
        self.state().pending.len()
    }
}

impl State {
    fn release(&mut self, source: IpAddr) {
        if let Some(count) = self.by_source.get_mut(&source) {
            *count -= 1;
            if *count == 0 {
                self.by_source.remove(&source);
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.handshakes.state();
        if let Some((source, _)) = state.pending.remove(&self.id) {
            state.release(source);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn one_source_is_bounded_and_the_oldest_is_cut_when_all_are_taken() {
        let handshakes = Arc::new(Handshakes::default());
        let one: IpAddr = [192, 0, 2, 1].into();
        let mut held: Vec<Slot> = (0..PER_SOURCE)
            .map(|_| handshakes.admit(one).unwrap())
            .collect();
        assert!(handshakes.admit(one).is_none(), "past the per-source bound");
        held.pop();
        assert!(handshakes.admit(one).is_some(), "a place given back");

        // Fill the rest from many addresses; the next cuts the oldest.
        let handshakes = Arc::new(Handshakes::default());
        let mut slots: Vec<Slot> = (0..TOTAL)
            .map(|i| {
                let peer = IpAddr::from([10, 0, (i / 8) as u8, (i % 8) as u8]);
                handshakes.admit(peer).unwrap()
            })
            .collect();
        let newest = handshakes.admit([198, 51, 100, 7].into()).unwrap();
        assert_eq!(handshakes.in_progress(), TOTAL);
        assert!(slots[0].cut.try_recv().is_ok(), "the oldest was cut");
        assert!(slots[1].cut.try_recv().is_err(), "the next was not");
        drop(slots);
        drop(newest);
        assert_eq!(handshakes.in_progress(), 0);
        assert!(handshakes.state().by_source.is_empty());
    }

    #[test]
    fn an_ipv6_64_is_one_source() {
        let handshakes = Arc::new(Handshakes::default());
        let _held: Vec<Slot> = (0..PER_SOURCE)
            .map(|i| {
                let peer = IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, i as u16]);
                handshakes.admit(peer).unwrap()
            })
            .collect();
        assert!(handshakes
            .admit("2001:db8:0:1:ffff::9".parse().unwrap())
            .is_none());
        assert!(handshakes
            .admit("2001:db8:0:2::9".parse().unwrap())
            .is_some());
    }
}
