//! How the host resolves an allowed name before dialing it.
//!
//! The guest only ever sees fake addresses; the host looks the real ones up
//! through a [`Resolve`]: the system's resolver ([`SystemResolver`]) by
//! default, or a fixed table ([`StaticResolver`]) an embedder supplies, as
//! tests do to send test names to 127.0.0.1. Whatever it returns is still
//! checked against the policy's restricted addresses before it is dialed.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

use super::policy::normalize_name;

/// A future of a lookup's addresses.
pub type ResolveFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// Something that turns a name into addresses.
pub trait Resolve: Send + Sync + std::fmt::Debug {
    /// The addresses of `name`, best first, or an error (`NotFound` for a
    /// name without addresses).
    fn resolve<'a>(&'a self, name: &'a str) -> ResolveFuture<'a>;
}

fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no address for {name}"))
}

/// The system's resolver (`getaddrinfo`, through tokio): addresses without
/// duplicates, IPv4 first.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> ResolveFuture<'a> {
        Box::pin(async move {
            let found = tokio::net::lookup_host((name, 0)).await?;
            let addrs = order(found.map(|addr| addr.ip()));
            if addrs.is_empty() {
                return Err(not_found(name));
            }
            tracing::trace!(name, ?addrs, "resolved");
            Ok(addrs)
        })
    }
}

/// `addrs` without repeats, IPv4 before IPv6, otherwise in order.
fn order(addrs: impl Iterator<Item = IpAddr>) -> Vec<IpAddr> {
    let mut unique: Vec<IpAddr> = Vec::new();
    for addr in addrs {
        if !unique.contains(&addr) {
            unique.push(addr);
        }
    }
    // A stable sort keeps each family's order.
    unique.sort_by_key(IpAddr::is_ipv6);
    unique
}

/// A fixed table of names and their addresses, like `/etc/hosts`. Names are
/// compared lowercase without a trailing dot; a name's addresses come back
/// in the order they were added.
#[derive(Debug, Default, Clone)]
pub struct StaticResolver {
    table: HashMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    /// An empty table: every name is not found.
    pub fn new() -> Self {
        Self::default()
    }

    /// This table with `addr` added to `name`'s addresses.
    #[must_use]
    pub fn with(mut self, name: &str, addr: IpAddr) -> Self {
        self.insert(name, addr);
        self
    }

    /// Adds `addr` to `name`'s addresses (once).
    pub fn insert(&mut self, name: &str, addr: IpAddr) {
        let addrs = self.table.entry(normalize_name(name)).or_default();
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
}

impl Resolve for StaticResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> ResolveFuture<'a> {
        let found = self.table.get(&normalize_name(name)).cloned();
        Box::pin(async move { found.ok_or_else(|| not_found(name)) })
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    const LOCAL4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    const LOCAL6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

    #[tokio::test]
    async fn static_table_answers_its_names_in_any_case() -> io::Result<()> {
        let resolver = StaticResolver::new()
            .with("api.test", LOCAL4)
            .with("API.test.", LOCAL6)
            .with("api.test", LOCAL4);
        assert_eq!(resolver.resolve("Api.Test.").await?, vec![LOCAL4, LOCAL6]);
        Ok(())
    }

    #[tokio::test]
    async fn static_table_does_not_know_other_names() {
        let mut resolver = StaticResolver::new();
        resolver.insert("api.test", LOCAL4);
        let err = resolver.resolve("www.test").await.err();
        let err = err.map(|err| (err.kind(), err.to_string()));
        assert_eq!(
            err,
            Some((io::ErrorKind::NotFound, "no address for www.test".into()))
        );
    }

    #[test]
    fn system_answers_are_deduplicated_with_ipv4_first() {
        let a = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let b = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));
        let ordered = order([LOCAL6, a, LOCAL6, b, a].into_iter());
        assert_eq!(ordered, vec![a, b, LOCAL6]);
    }

    #[tokio::test]
    async fn system_resolver_resolves_localhost() -> io::Result<()> {
        let addrs = SystemResolver.resolve("localhost").await?;
        assert!(addrs.iter().all(IpAddr::is_loopback), "{addrs:?}");
        assert!(!addrs.is_empty());
        Ok(())
    }

    #[tokio::test]
    async fn system_resolver_takes_address_literals() -> io::Result<()> {
        assert_eq!(SystemResolver.resolve("127.0.0.1").await?, vec![LOCAL4]);
        Ok(())
    }
}
