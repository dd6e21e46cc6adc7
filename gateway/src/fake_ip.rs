//! Fake addresses: what the guest's DNS answers hold instead of real ones.
//!
//! The host answers the guest's queries for allowed names with addresses
//! from [`FAKE_RANGE`] (198.18.0.0/15, set aside for benchmarking, so never
//! a real destination), one per name. When the guest then connects to such
//! an address, [`FakeIps::name_of`] says which name it meant, and the host
//! resolves and dials that name itself. The guest never learns a real
//! address, so it cannot reach one a rule does not allow by name.
//!
//! A name keeps its address while it is held; once every address is in use,
//! the least recently used name gives its address up to the next new name.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::policy::normalize_name;

/// The addresses that stand for names: 198.18.0.0/15.
pub const FAKE_RANGE: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(198, 18, 0, 0), 15);

/// The guest's DNS server and HTTP proxy address: in `FAKE_RANGE` (198.18.0.0/15) but never
/// assigned to a name.
pub const GATEWAY_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

/// The first assignable address, past the network address and the gateway.
const FIRST: u32 = Ipv4Addr::new(198, 18, 0, 2).to_bits();
/// How many addresses names can have: all but the network address, the
/// gateway and the last address of the range.
const MAX_SLOTS: u32 = Ipv4Addr::new(198, 19, 255, 255).to_bits() - FIRST;

/// A name's address, and when it was last assigned or looked up.
#[derive(Debug, Clone, Copy)]
struct Held {
    slot: u32,
    used: u64,
}

/// The table of names and the fake addresses that stand for them.
#[derive(Debug)]
pub struct FakeIps {
    capacity: u32,
    /// Slots below this have been handed out at least once.
    fresh: u32,
    /// A counter that orders uses.
    clock: u64,
    by_name: HashMap<String, Held>,
    by_slot: HashMap<u32, String>,
    /// Least recently used first: use time to slot.
    lru: BTreeMap<u64, u32>,
}

impl Default for FakeIps {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeIps {
    /// A table over the whole range (131,069 names at once).
    pub fn new() -> Self {
        Self::with_capacity(MAX_SLOTS as usize)
    }

    /// A table that holds at most `names` names (at least one, at most the
    /// whole range), from 198.18.0.2 on: a small one shows eviction in tests.
    pub fn with_capacity(names: usize) -> Self {
        let capacity = u32::try_from(names)
            .unwrap_or(MAX_SLOTS)
            .clamp(1, MAX_SLOTS);
        Self {
            capacity,
            fresh: 0,
            clock: 0,
            by_name: HashMap::new(),
            by_slot: HashMap::new(),
            lru: BTreeMap::new(),
        }
    }

    /// The address for `name` (compared lowercase, without a trailing dot):
    /// the one it already holds, or a new one. With every address taken, the
    /// least recently used name loses its address to this one.
    pub fn assign(&mut self, name: &str) -> Ipv4Addr {
        let name = normalize_name(name);
        if let Some(slot) = self.by_name.get(&name).map(|held| held.slot) {
            self.touch(&name);
            return slot_addr(slot);
        }
        let slot = if self.fresh < self.capacity {
            self.fresh += 1;
            self.fresh - 1
        } else {
            self.evict_oldest()
        };
        self.clock += 1;
        self.lru.insert(self.clock, slot);
        self.by_slot.insert(slot, name.clone());
        self.by_name.insert(
            name,
            Held {
                slot,
                used: self.clock,
            },
        );
        tracing::trace!(addr = %slot_addr(slot), "fake address assigned");
        slot_addr(slot)
    }

    /// The name `addr` stands for, if it stands for one now; the lookup
    /// counts as a use, keeping the name from being evicted soon.
    pub fn name_of(&mut self, addr: Ipv4Addr) -> Option<&str> {
        let slot = addr_slot(addr)?;
        let name = self.by_slot.get(&slot)?.clone();
        self.touch(&name);
        self.by_slot.get(&slot).map(String::as_str)
    }

    /// Whether `addr` is in [`FAKE_RANGE`] (assigned or not, or the gateway).
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        FAKE_RANGE.contains(&addr)
    }

    fn touch(&mut self, name: &str) {
        self.clock += 1;
        if let Some(held) = self.by_name.get_mut(name) {
            self.lru.remove(&held.used);
            held.used = self.clock;
            self.lru.insert(self.clock, held.slot);
        }
    }

    /// Frees the least recently used slot and returns it. Only called when
    /// every slot is taken, so there is one.
    fn evict_oldest(&mut self) -> u32 {
        let Some((_, slot)) = self.lru.pop_first() else {
            return 0;
        };
        if let Some(name) = self.by_slot.remove(&slot) {
            tracing::debug!(%name, addr = %slot_addr(slot), "fake address reused");
            self.by_name.remove(&name);
        }
        slot
    }
}

fn slot_addr(slot: u32) -> Ipv4Addr {
    Ipv4Addr::from_bits(FIRST + slot)
}

fn addr_slot(addr: Ipv4Addr) -> Option<u32> {
    let slot = addr.to_bits().checked_sub(FIRST)?;
    (slot < MAX_SLOTS).then_some(slot)
}

/// The table's size, which the tests and the fuzz targets read.
#[cfg_attr(not(feature = "fuzzing"), allow(dead_code))]
impl FakeIps {
    /// How many names hold an address now.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether no name holds an address.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// How many names the table holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_keeps_its_address() {
        let mut fake = FakeIps::new();
        let first = fake.assign("api.example.com");
        let other = fake.assign("www.example.com");
        assert_ne!(first, other);
        assert_eq!(fake.assign("API.Example.com."), first);
        assert_eq!(fake.len(), 2);
    }

    #[test]
    fn addresses_are_in_the_fake_range_and_never_the_gateway() {
        let mut fake = FakeIps::with_capacity(3);
        for name in ["a.test", "b.test", "c.test", "d.test", "e.test"] {
            let addr = fake.assign(name);
            assert!(FAKE_RANGE.contains(&addr), "{addr}");
            assert!(fake.contains(addr));
            assert_ne!(addr, GATEWAY_ADDR);
            assert_ne!(addr, FAKE_RANGE.network());
        }
    }

    #[test]
    fn an_address_leads_back_to_its_name() {
        let mut fake = FakeIps::new();
        let addr = fake.assign("Api.Example.com.");
        assert_eq!(fake.name_of(addr), Some("api.example.com"));
        assert_eq!(fake.name_of(GATEWAY_ADDR), None);
        assert_eq!(fake.name_of(Ipv4Addr::new(198, 18, 0, 200)), None);
        assert_eq!(fake.name_of(Ipv4Addr::new(1, 1, 1, 1)), None);
        assert!(!fake.contains(Ipv4Addr::new(198, 20, 0, 1)));
    }

    #[test]
    fn a_full_table_gives_the_least_recently_used_address_away() {
        let mut fake = FakeIps::with_capacity(2);
        let a = fake.assign("a.test");
        let b = fake.assign("b.test");
        // Using a makes b the oldest.
        assert_eq!(fake.name_of(a), Some("a.test"));
        let c = fake.assign("c.test");
        assert_eq!(c, b);
        assert_eq!(fake.name_of(c), Some("c.test"));
        assert_eq!(fake.name_of(a), Some("a.test"));
        assert_eq!(fake.len(), 2);
        // b comes back with a fresh address, taking c's (now the oldest).
        assert_eq!(fake.assign("b.test"), c);
        assert_eq!(fake.name_of(a), Some("a.test"));
    }

    #[test]
    fn reassigning_counts_as_a_use() {
        let mut fake = FakeIps::with_capacity(2);
        let a = fake.assign("a.test");
        let b = fake.assign("b.test");
        fake.assign("a.test");
        assert_eq!(fake.assign("c.test"), b);
        assert_eq!(fake.name_of(a), Some("a.test"));
    }

    #[test]
    fn the_whole_range_less_three_addresses_is_usable() {
        let fake = FakeIps::new();
        assert_eq!(fake.capacity(), (1 << 17) - 3);
        assert_eq!(slot_addr(MAX_SLOTS - 1), Ipv4Addr::new(198, 19, 255, 254));
        assert_eq!(FakeIps::with_capacity(0).capacity(), 1);
    }
}
