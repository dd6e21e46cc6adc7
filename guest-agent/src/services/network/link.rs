//! The guest's side of the network: loopback up, and a dummy link that
//! carries the default route. Nothing sent on the dummy link goes anywhere;
//! the route only lets programs connect, so that the redirect in
//! [`super::nftables`] can hand the connection to the agent.

use std::net::Ipv4Addr;

use nix::sys::socket::SockProtocol;

use super::netlink::{self, Message, NetlinkError, F_ACK, F_CREATE, F_REPLACE, F_REQUEST};

/// The dummy link's name.
pub const LINK_NAME: &str = "airlock0";
/// The guest's own address on it: in TEST-NET-1, which no real network
/// routes.
pub const GUEST_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const IFLA_IFNAME: u16 = 3;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTA_OIF: u16 = 4;
const RTA_PREFSRC: u16 = 7;
const IFF_UP: u32 = 1;
const AF_UNSPEC: u8 = 0;
const AF_INET: u8 = 2;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;

/// Setting the links up failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A netlink request failed.
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    /// The dummy link was made but cannot be found.
    #[error("link {LINK_NAME} not found after creating it")]
    Missing(#[source] nix::Error),
}

/// Raises loopback alone (at boot: servers in the guest listen there,
/// and ingress dials them there). Safe to repeat.
pub fn raise_loopback() -> Result<(), LinkError> {
    let mut lo = Message::new(RTM_NEWLINK, F_REQUEST | F_ACK, &ifinfo(0), "raising lo");
    lo.attr_str(IFLA_IFNAME, "lo");
    netlink::transact(SockProtocol::NetlinkRoute, vec![lo])?;
    Ok(())
}

/// Raises loopback, creates and raises [`LINK_NAME`] with [`GUEST_ADDR`]
/// and routes everything else through it. Safe to repeat.
pub fn bring_up() -> Result<(), LinkError> {
    let mut lo = Message::new(RTM_NEWLINK, F_REQUEST | F_ACK, &ifinfo(0), "raising lo");
    lo.attr_str(IFLA_IFNAME, "lo");
    let mut dummy = Message::new(
        RTM_NEWLINK,
        F_REQUEST | F_ACK | F_CREATE,
        &ifinfo(0),
        "creating the dummy link",
    );
    dummy
        .attr_str(IFLA_IFNAME, LINK_NAME)
        .nested(IFLA_LINKINFO, |m| {
            m.attr_str(IFLA_INFO_KIND, "dummy");
        });
    netlink::transact(SockProtocol::NetlinkRoute, vec![lo, dummy])?;

    let index = nix::net::if_::if_nametoindex(LINK_NAME).map_err(LinkError::Missing)?;
    // By index alone: naming an up link, even by its own name, is EBUSY.
    let up = Message::new(
        RTM_NEWLINK,
        F_REQUEST | F_ACK,
        &ifinfo(index),
        "raising the dummy link",
    );
    let mut addr = Message::new(
        RTM_NEWADDR,
        F_REQUEST | F_ACK | F_CREATE | F_REPLACE,
        &ifaddr(index),
        "adding the guest's address",
    );
    addr.attr(IFA_LOCAL, &GUEST_ADDR.octets())
        .attr(IFA_ADDRESS, &GUEST_ADDR.octets());
    let mut route = Message::new(
        RTM_NEWROUTE,
        F_REQUEST | F_ACK | F_CREATE | F_REPLACE,
        &rtmsg(),
        "adding the default route",
    );
    route
        .attr_u32(RTA_OIF, index)
        .attr(RTA_PREFSRC, &GUEST_ADDR.octets());
    netlink::transact(SockProtocol::NetlinkRoute, vec![up, addr, route])?;
    tracing::info!(link = LINK_NAME, addr = %GUEST_ADDR, "network links up");
    Ok(())
}

/// `struct ifinfomsg` for link `index` (0: by name), raising it.
fn ifinfo(index: u32) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[0] = AF_UNSPEC;
    m[4..8].copy_from_slice(&index.to_ne_bytes());
    m[8..12].copy_from_slice(&IFF_UP.to_ne_bytes());
    m[12..16].copy_from_slice(&IFF_UP.to_ne_bytes());
    m
}

/// `struct ifaddrmsg`: an IPv4 /32 on link `index`.
fn ifaddr(index: u32) -> [u8; 8] {
    let mut m = [0u8; 8];
    m[0] = AF_INET;
    m[1] = 32;
    m[3] = RT_SCOPE_UNIVERSE;
    m[4..8].copy_from_slice(&index.to_ne_bytes());
    m
}

/// `struct rtmsg`: an IPv4 default route in the main table, on-link.
fn rtmsg() -> [u8; 12] {
    let mut m = [0u8; 12];
    m[0] = AF_INET;
    m[4] = RT_TABLE_MAIN;
    m[5] = RTPROT_BOOT;
    m[6] = RT_SCOPE_LINK;
    m[7] = RTN_UNICAST;
    m
}
