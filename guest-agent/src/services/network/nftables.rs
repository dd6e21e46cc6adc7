//! The redirect: an nftables NAT chain on the output hook that sends every
//! TCP connection to a non-loopback IPv4 address, whatever its port, to the
//! agent's connection listener, and every UDP datagram to port 53 to its
//! DNS listener. The rules are a convenience for programs, not a wall: a
//! root program that flushes them only loses its network, since the guest
//! has no device that reaches anything (see [`super::link`]).
//!
//! Written as one nfnetlink batch, as `nft -f` would send:
//! ```text
//! table ip airlock {            # created, deleted and created again,
//!   chain redirect {            # so that a repeat starts from scratch
//!     type nat hook output priority -100; policy accept;
//!     ip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :TCP_PORT
//!     ip daddr != 127.0.0.0/8 meta l4proto udp udp dport 53 redirect to :DNS_PORT
//!   }
//! }
//! ```
//! Attribute numbers are those of `<linux/netfilter/nf_tables.h>`.

use nix::sys::socket::SockProtocol;

use super::netlink::{self, Message, NetlinkError, F_ACK, F_APPEND, F_CREATE, F_REQUEST};

const TABLE: &str = "airlock";
const CHAIN: &str = "redirect";

/// `NFNL_SUBSYS_NFTABLES`.
const SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 16;
const NFNL_MSG_BATCH_END: u16 = 17;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFPROTO_IPV4: u8 = 2;
const NF_INET_LOCAL_OUT: u32 = 3;
/// `NF_IP_PRI_NAT_DST`.
const PRIORITY_NAT_DST: i32 = -100;
const NF_ACCEPT: u32 = 1;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;

/// `NFT_REG_1`: the register every rule works in.
const REG: u32 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const DNS_PORT: u16 = 53;

/// One expression of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expr {
    /// Load `len` bytes at `offset` of the network (1) or transport (2)
    /// header into the register.
    Payload { base: u32, offset: u32, len: u32 },
    /// Register &= mask (xor 0).
    Mask([u8; 4]),
    /// Compare the register with `value`: equal (op 0) or not (op 1).
    Cmp { op: u32, value: &'static [u8] },
    /// Compare the register with a 16-bit big-endian `value`, equal.
    CmpPort(u16),
    /// Load the layer 4 protocol into the register.
    L4Proto,
    /// Put a 16-bit big-endian port in the register.
    Port(u16),
    /// Redirect to the local port in the register.
    Redirect,
}

const LOOPBACK_NET: [u8; 4] = [127, 0, 0, 0];
const LOOPBACK_MASK: [u8; 4] = [255, 0, 0, 0];
const NETWORK_HEADER: u32 = 1;
const TRANSPORT_HEADER: u32 = 2;
/// Offset of the destination address in an IPv4 header.
const DADDR_OFFSET: u32 = 16;
/// Offset of the destination port in a UDP header.
const DPORT_OFFSET: u32 = 2;

/// The expressions matching a destination outside 127.0.0.0/8.
const NOT_LOOPBACK: [Expr; 3] = [
    Expr::Payload {
        base: NETWORK_HEADER,
        offset: DADDR_OFFSET,
        len: 4,
    },
    Expr::Mask(LOOPBACK_MASK),
    Expr::Cmp {
        op: 1,
        value: &LOOPBACK_NET,
    },
];

/// Installing the redirect failed.
#[derive(Debug, thiserror::Error)]
#[error("installing the redirect rules")]
pub struct RedirectError(#[from] NetlinkError);

/// Installs (or re-installs) the redirect to `tcp_port` and `dns_port`.
pub fn install(tcp_port: u16, dns_port: u16) -> Result<(), RedirectError> {
    let mut batch = vec![
        batch_marker(NFNL_MSG_BATCH_BEGIN),
        table(NFT_MSG_NEWTABLE, F_CREATE, "creating the nftables table"),
        table(NFT_MSG_DELTABLE, 0, "clearing the nftables table"),
        table(NFT_MSG_NEWTABLE, F_CREATE, "creating the nftables table"),
        chain(),
    ];
    let mut tcp = NOT_LOOPBACK.to_vec();
    tcp.extend([
        Expr::L4Proto,
        Expr::Cmp {
            op: 0,
            value: &[IPPROTO_TCP],
        },
        Expr::Port(tcp_port),
        Expr::Redirect,
    ]);
    let mut dns = NOT_LOOPBACK.to_vec();
    dns.extend([
        Expr::L4Proto,
        Expr::Cmp {
            op: 0,
            value: &[IPPROTO_UDP],
        },
        Expr::Payload {
            base: TRANSPORT_HEADER,
            offset: DPORT_OFFSET,
            len: 2,
        },
        Expr::CmpPort(DNS_PORT),
        Expr::Port(dns_port),
        Expr::Redirect,
    ]);
    batch.push(rule(&tcp, "adding the TCP redirect"));
    batch.push(rule(&dns, "adding the DNS redirect"));
    batch.push(batch_marker(NFNL_MSG_BATCH_END));
    netlink::transact(SockProtocol::NetlinkNetFilter, batch)?;
    tracing::info!(tcp_port, dns_port, "network redirect installed");
    Ok(())
}

/// `struct nfgenmsg` for `family`, naming the nftables subsystem.
fn nfgen(family: u8, res_id: u16) -> [u8; 4] {
    let id = res_id.to_be_bytes();
    [family, 0, id[0], id[1]]
}

fn nft_kind(msg: u16) -> u16 {
    (SUBSYS_NFTABLES << 8) | msg
}

fn batch_marker(kind: u16) -> Message {
    Message::new(
        kind,
        F_REQUEST,
        &nfgen(0, SUBSYS_NFTABLES),
        "a batch marker",
    )
}

fn table(msg: u16, flags: u16, what: &'static str) -> Message {
    let mut m = Message::new(
        nft_kind(msg),
        F_REQUEST | F_ACK | flags,
        &nfgen(NFPROTO_IPV4, 0),
        what,
    );
    m.attr_str(NFTA_TABLE_NAME, TABLE);
    m
}

fn chain() -> Message {
    let mut m = Message::new(
        nft_kind(NFT_MSG_NEWCHAIN),
        F_REQUEST | F_ACK | F_CREATE,
        &nfgen(NFPROTO_IPV4, 0),
        "adding the nat chain",
    );
    m.attr_str(NFTA_CHAIN_TABLE, TABLE)
        .attr_str(NFTA_CHAIN_NAME, CHAIN)
        .nested(NFTA_CHAIN_HOOK, |h| {
            h.attr_be32(NFTA_HOOK_HOOKNUM, NF_INET_LOCAL_OUT)
                .attr_be32(NFTA_HOOK_PRIORITY, PRIORITY_NAT_DST as u32);
        })
        .attr_be32(NFTA_CHAIN_POLICY, NF_ACCEPT)
        .attr_str(NFTA_CHAIN_TYPE, "nat");
    m
}

fn rule(exprs: &[Expr], what: &'static str) -> Message {
    let mut m = Message::new(
        nft_kind(NFT_MSG_NEWRULE),
        F_REQUEST | F_ACK | F_CREATE | F_APPEND,
        &nfgen(NFPROTO_IPV4, 0),
        what,
    );
    m.attr_str(NFTA_RULE_TABLE, TABLE)
        .attr_str(NFTA_RULE_CHAIN, CHAIN)
        .nested(NFTA_RULE_EXPRESSIONS, |list| {
            for expr in exprs {
                list.nested(NFTA_LIST_ELEM, |elem| expression(elem, *expr));
            }
        });
    m
}

/// Adds `expr`'s name and data to a list element.
fn expression(m: &mut Message, expr: Expr) {
    let value = |m: &mut Message, kind: u16, bytes: &[u8]| {
        m.nested(kind, |d| {
            d.attr(NFTA_DATA_VALUE, bytes);
        });
    };
    match expr {
        Expr::Payload { base, offset, len } => {
            m.attr_str(NFTA_EXPR_NAME, "payload")
                .nested(NFTA_EXPR_DATA, |d| {
                    // NFTA_PAYLOAD_{DREG, BASE, OFFSET, LEN}
                    d.attr_be32(1, REG)
                        .attr_be32(2, base)
                        .attr_be32(3, offset)
                        .attr_be32(4, len);
                });
        }
        Expr::Mask(mask) => {
            m.attr_str(NFTA_EXPR_NAME, "bitwise")
                .nested(NFTA_EXPR_DATA, |d| {
                    // NFTA_BITWISE_{SREG, DREG, LEN, MASK, XOR}
                    d.attr_be32(1, REG).attr_be32(2, REG).attr_be32(3, 4);
                    value(d, 4, &mask);
                    value(d, 5, &[0; 4]);
                });
        }
        Expr::Cmp { op, value: bytes } => {
            m.attr_str(NFTA_EXPR_NAME, "cmp")
                .nested(NFTA_EXPR_DATA, |d| {
                    // NFTA_CMP_{SREG, OP, DATA}
                    d.attr_be32(1, REG).attr_be32(2, op);
                    value(d, 3, bytes);
                });
        }
        Expr::CmpPort(port) => {
            m.attr_str(NFTA_EXPR_NAME, "cmp")
                .nested(NFTA_EXPR_DATA, |d| {
                    d.attr_be32(1, REG).attr_be32(2, 0);
                    value(d, 3, &port.to_be_bytes());
                });
        }
        Expr::L4Proto => {
            m.attr_str(NFTA_EXPR_NAME, "meta")
                .nested(NFTA_EXPR_DATA, |d| {
                    // NFTA_META_{DREG, KEY}; NFT_META_L4PROTO = 16
                    d.attr_be32(1, REG).attr_be32(2, 16);
                });
        }
        Expr::Port(port) => {
            m.attr_str(NFTA_EXPR_NAME, "immediate")
                .nested(NFTA_EXPR_DATA, |d| {
                    // NFTA_IMMEDIATE_{DREG, DATA}
                    d.attr_be32(1, REG);
                    value(d, 2, &port.to_be_bytes());
                });
        }
        Expr::Redirect => {
            m.attr_str(NFTA_EXPR_NAME, "redir")
                .nested(NFTA_EXPR_DATA, |d| {
                    // NFTA_REDIR_REG_PROTO_MIN
                    d.attr_be32(1, REG);
                });
        }
    }
}
