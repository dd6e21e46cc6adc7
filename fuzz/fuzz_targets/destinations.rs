//! Destinations and fake addresses (the gateway's `policy` and `fake_ip`):
//! the rules that decide where a guest may connect, the addresses a name may
//! not resolve to without a range rule, and the table of fake addresses
//! that stand for names the guest resolved.
//!
//! Input: operations, each `[op: u8][operand]`, on a policy and a table of
//! `1 + first byte % 6` names, checked against a model of the table:
//! 0 a rule (`field`), 1 assign a name (`field`), 2 look up an address
//! (`u16`: an address near the table's), 3 judge an address (16 bytes),
//! 4 judge a name on a port (`u16` port, `field`).
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use airlock_gateway::fuzzing::{FakeIps, FAKE_RANGE};
use airlock_gateway::GATEWAY_ADDR;
use airlock_gateway::policy::{
    is_restricted, normalize_name, DomainPattern, NetRule, NetworkPolicy,
};
use airlock_fuzz::Input;
use libfuzzer_sys::fuzz_target;

const FIRST: u32 = Ipv4Addr::new(198, 18, 0, 2).to_bits();

/// The table as it must behave: names by slot, least recently used first
/// out once every slot is taken.
struct Model {
    capacity: u32,
    fresh: u32,
    clock: u64,
    held: Vec<(String, u32, u64)>,
}

impl Model {
    fn assign(&mut self, name: &str) -> Ipv4Addr {
        let name = normalize_name(name);
        self.clock += 1;
        if let Some(entry) = self.held.iter_mut().find(|(n, _, _)| *n == name) {
            entry.2 = self.clock;
            return Ipv4Addr::from_bits(FIRST + entry.1);
        }
        let slot = if self.fresh < self.capacity {
            self.fresh += 1;
            self.fresh - 1
        } else {
            let oldest = (0..self.held.len())
                .min_by_key(|&i| self.held[i].2)
                .expect("a full table holds names");
            self.held.remove(oldest).1
        };
        self.clock += 1;
        self.held.push((name, slot, self.clock));
        Ipv4Addr::from_bits(FIRST + slot)
    }

    fn name_of(&mut self, addr: Ipv4Addr) -> Option<String> {
        let slot = addr.to_bits().checked_sub(FIRST)?;
        self.clock += 1;
        let clock = self.clock;
        let entry = self.held.iter_mut().find(|(_, s, _)| *s == slot)?;
        entry.2 = clock;
        Some(entry.0.clone())
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let capacity = u32::from(input.u8() % 6) + 1;
    let mut fake = FakeIps::with_capacity(capacity as usize);
    let mut model = Model {
        capacity,
        fresh: 0,
        clock: 0,
        held: Vec::new(),
    };
    let mut policy = NetworkPolicy::new();
    while !input.is_empty() {
        match input.u8() % 5 {
            0 => {
                if let Some(rule) = rule(input.field()) {
                    policy.push(rule);
                }
            }
            1 => {
                let name = String::from_utf8_lossy(input.field()).into_owned();
                let addr = fake.assign(&name);
                assert_eq!(addr, model.assign(&name), "assign({name:?})");
                assert!(FAKE_RANGE.contains(&addr) && addr != GATEWAY_ADDR);
                assert!(
                    is_restricted(IpAddr::V4(addr)),
                    "a fake address is dialable"
                );
            }
            2 => {
                let addr =
                    Ipv4Addr::from_bits(FIRST.wrapping_add(u32::from(input.u16())).wrapping_sub(2));
                let got = fake.name_of(addr).map(str::to_owned);
                assert_eq!(got, model.name_of(addr), "name_of({addr})");
            }
            3 => addresses(input.bytes(16), &policy),
            _ => {
                let port = input.u16();
                let name = String::from_utf8_lossy(input.field()).into_owned();
                names(&name, port, &policy);
            }
        }
        assert_eq!(fake.len(), model.held.len());
        assert!(fake.len() <= fake.capacity());
    }
});

/// A rule that parses writes back to itself and allows what it names.
fn rule(text: &[u8]) -> Option<NetRule> {
    let text = std::str::from_utf8(text).ok()?;
    let rule: NetRule = text.parse().ok()?;
    let written = rule.to_string();
    let again: NetRule = written.parse().unwrap_or_else(|e| {
        panic!("{text:?} is written as {written:?}, which does not parse: {e}")
    });
    assert_eq!(
        again, rule,
        "{text:?} does not survive being written as {written:?}"
    );
    let port = rule.port().unwrap_or(1);
    let alone = NetworkPolicy::new().allow(rule.clone());
    match &rule {
        NetRule::Domain {
            pattern: DomainPattern::Exact(name),
            ..
        } => {
            assert!(
                alone.allows_name(name, port),
                "{written} does not allow {name}"
            );
            assert!(alone.allows_name(&format!("{}.", name.to_ascii_uppercase()), port));
            assert!(!alone.allows_addr(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
        }
        NetRule::Domain {
            pattern: DomainPattern::Suffix(suffix),
            ..
        } => {
            assert!(alone.allows_name(&format!("a.{suffix}"), port));
            assert!(
                !alone.allows_name(suffix, port),
                "{written} allows its own suffix"
            );
        }
        NetRule::Network { net, .. } => {
            assert!(alone.allows_addr(net.network(), port));
            assert!(alone.allows_addr(net.broadcast(), port));
            assert!(!alone.allows_name("example.com", port));
        }
    }
    if let Some(only) = rule.port() {
        let other = only.wrapping_add(1).max(1);
        if other != only {
            match &rule {
                NetRule::Domain {
                    pattern: DomainPattern::Exact(name),
                    ..
                } => {
                    assert!(!alone.allows_name(name, other));
                    assert!(alone.allows_name_on_some_port(name));
                }
                NetRule::Network { net, .. } => assert!(!alone.allows_addr(net.network(), other)),
                NetRule::Domain { .. } => {}
            }
        }
    }
    Some(rule)
}

/// An IPv4 address and every IPv6 form that embeds it are judged alike,
/// by the restriction and by range rules for IPv4.
fn addresses(bytes: &[u8], policy: &NetworkPolicy) {
    let mut raw = [0u8; 16];
    raw[..bytes.len()].copy_from_slice(bytes);
    let v6 = Ipv6Addr::from(raw);
    let v4 = Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]);
    let restricted = is_restricted(IpAddr::V4(v4));
    let embedded = [
        v4.to_ipv6_mapped(),
        Ipv6Addr::from_bits(u128::from(v4.to_bits())),
        Ipv6Addr::from_bits((0x64_ff9b_u128 << 96) | u128::from(v4.to_bits())),
        Ipv6Addr::from_bits((0x2002_u128 << 112) | (u128::from(v4.to_bits()) << 80)),
    ];
    for form in embedded {
        let judged = is_restricted(IpAddr::V6(form));
        // `::` and `::1` are restricted whatever they embed.
        if !(form.is_unspecified() || form.is_loopback()) {
            assert_eq!(judged, restricted, "{form} and {v4} are judged apart");
        } else {
            assert!(judged);
        }
    }
    if FAKE_RANGE.contains(&v4) || v4.is_loopback() || v4.is_private() || v4.is_link_local() {
        assert!(restricted, "{v4} is not restricted");
    }
    if v6.is_loopback() || v6.is_unspecified() {
        assert!(is_restricted(IpAddr::V6(v6)));
    }
    for port in [1, 80, 443] {
        if policy.allows_addr(IpAddr::V4(v4), port) {
            assert!(policy.allows_addr(IpAddr::V6(v4.to_ipv6_mapped()), port));
        }
    }
}

/// Names are compared without case or a trailing dot, and a name allowed
/// on a port is allowed on some port.
fn names(name: &str, port: u16, policy: &NetworkPolicy) {
    let allowed = policy.allows_name(name, port);
    if allowed {
        assert!(policy.allows_name_on_some_port(name));
    }
    if !name.ends_with('.') {
        assert_eq!(
            allowed,
            policy.allows_name(&format!("{}.", name.to_ascii_uppercase()), port)
        );
    }
}
