//! Netlink requests, written and sent by hand: the few messages the agent
//! needs to raise links, add an address and a route (`NETLINK_ROUTE`) and
//! install nftables rules (`NETLINK_NETFILTER`). nix opens and binds the
//! socket; [`Message`] lays out a request (header, family header, nested
//! attributes) as `<linux/netlink.h>` describes; [`transact`] sends a batch
//! and reads one acknowledgement per message that asked for one.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    bind, recv, send, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};
use nix::sys::time::TimeVal;

/// `NLM_F_REQUEST`: a request.
pub const F_REQUEST: u16 = 0x1;
/// `NLM_F_ACK`: answer with an acknowledgement.
pub const F_ACK: u16 = 0x4;
/// `NLM_F_REPLACE`: replace an existing object.
pub const F_REPLACE: u16 = 0x100;
/// `NLM_F_CREATE`: create the object if it does not exist.
pub const F_CREATE: u16 = 0x400;
/// `NLM_F_APPEND`: add to the end of a list.
pub const F_APPEND: u16 = 0x800;
/// `NLA_F_NESTED`: the attribute holds attributes.
const NLA_F_NESTED: u16 = 0x8000;
/// `NLMSG_ERROR`: an acknowledgement or an error.
const NLMSG_ERROR: u16 = 2;
/// `sizeof(struct nlmsghdr)`.
const HEADER_LEN: usize = 16;
/// How long the kernel gets to answer.
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// A netlink request that failed.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The socket could not be opened, bound or used.
    #[error("netlink socket: {0}")]
    Socket(#[source] Errno),
    /// The kernel refused one of the messages.
    #[error("the kernel refused {what}")]
    Refused {
        /// What the refused message asked for.
        what: &'static str,
        /// The kernel's errno.
        #[source]
        errno: Errno,
    },
    /// The kernel's answer could not be read as netlink.
    #[error("malformed netlink answer")]
    Malformed,
}

/// One netlink message being laid out.
#[derive(Debug)]
pub struct Message {
    buf: Vec<u8>,
    flags: u16,
    what: &'static str,
}

impl Message {
    /// A message of `kind` with `flags`, its family header `family_header`
    /// (e.g. `struct ifinfomsg`), described as `what` in errors.
    pub fn new(kind: u16, flags: u16, family_header: &[u8], what: &'static str) -> Self {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&[0; 4]); // length, filled in by `finish`
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&[0; 8]); // sequence number and port id
        buf.extend_from_slice(family_header);
        pad(&mut buf);
        Self { buf, flags, what }
    }

    /// Adds an attribute holding `value`.
    pub fn attr(&mut self, kind: u16, value: &[u8]) -> &mut Self {
        let len = u16::try_from(4 + value.len()).unwrap_or(u16::MAX);
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        pad(&mut self.buf);
        self
    }

    /// Adds a NUL-terminated string attribute.
    pub fn attr_str(&mut self, kind: u16, value: &str) -> &mut Self {
        let mut bytes = Vec::with_capacity(value.len() + 1);
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
        self.attr(kind, &bytes)
    }

    /// Adds a big-endian `u32` attribute (nftables' convention).
    pub fn attr_be32(&mut self, kind: u16, value: u32) -> &mut Self {
        self.attr(kind, &value.to_be_bytes())
    }

    /// Adds a native-endian `u32` attribute (rtnetlink's convention).
    pub fn attr_u32(&mut self, kind: u16, value: u32) -> &mut Self {
        self.attr(kind, &value.to_ne_bytes())
    }

    /// Adds a nested attribute whose contents `fill` adds.
    pub fn nested(&mut self, kind: u16, fill: impl FnOnce(&mut Self)) -> &mut Self {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0; 2]);
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        fill(self);
        let len = u16::try_from(self.buf.len() - start).unwrap_or(u16::MAX);
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    /// The finished bytes, numbered `seq`.
    fn finish(mut self, seq: u32) -> (Vec<u8>, bool, &'static str) {
        let len = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf[8..12].copy_from_slice(&seq.to_ne_bytes());
        (self.buf, self.flags & F_ACK != 0, self.what)
    }
}

/// Pads `buf` to netlink's 4-byte alignment.
fn pad(buf: &mut Vec<u8>) {
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

/// Sends `messages` in one datagram on a `protocol` socket and waits for
/// the acknowledgement of each message that asked for one. The first
/// refusal is the error.
pub fn transact(protocol: SockProtocol, messages: Vec<Message>) -> Result<(), NetlinkError> {
    let fd = open(protocol)?;
    let mut datagram = Vec::new();
    let mut waiting = Vec::new();
    for (seq, message) in (1u32..).zip(messages) {
        let (bytes, acked, what) = message.finish(seq);
        datagram.extend_from_slice(&bytes);
        if acked {
            waiting.push((seq, what));
        }
    }
    send(fd.as_raw_fd(), &datagram, MsgFlags::empty()).map_err(NetlinkError::Socket)?;
    let mut answer = vec![0u8; 64 * 1024];
    while !waiting.is_empty() {
        let n =
            recv(fd.as_raw_fd(), &mut answer, MsgFlags::empty()).map_err(NetlinkError::Socket)?;
        for (seq, errno) in acknowledgements(&answer[..n])? {
            let Some(at) = waiting.iter().position(|(s, _)| *s == seq) else {
                continue;
            };
            let (_, what) = waiting.remove(at);
            if errno != 0 {
                return Err(NetlinkError::Refused {
                    what,
                    errno: Errno::from_raw(errno),
                });
            }
        }
    }
    Ok(())
}

/// A bound netlink socket that gives up waiting after [`ANSWER_WAIT`].
fn open(protocol: SockProtocol) -> Result<OwnedFd, NetlinkError> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        protocol,
    )
    .map_err(NetlinkError::Socket)?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(NetlinkError::Socket)?;
    let wait = TimeVal::new(ANSWER_WAIT.as_secs() as i64, 0);
    setsockopt(&fd, sockopt::ReceiveTimeout, &wait).map_err(NetlinkError::Socket)?;
    Ok(fd)
}

/// The `(sequence number, errno)` of each `NLMSG_ERROR` in `datagram`
/// (errno 0 is an acknowledgement).
fn acknowledgements(mut datagram: &[u8]) -> Result<Vec<(u32, i32)>, NetlinkError> {
    let mut found = Vec::new();
    while datagram.len() >= HEADER_LEN {
        let len = read_u32(datagram, 0)? as usize;
        let kind = u16::from_ne_bytes([datagram[4], datagram[5]]);
        let seq = read_u32(datagram, 8)?;
        if len < HEADER_LEN || len > datagram.len() {
            return Err(NetlinkError::Malformed);
        }
        if kind == NLMSG_ERROR {
            let errno = read_u32(datagram, HEADER_LEN)? as i32;
            found.push((seq, -errno));
        }
        let next = len.div_ceil(4) * 4;
        datagram = datagram.get(next..).unwrap_or_default();
    }
    Ok(found)
}

/// The native-endian `u32` at `at`.
fn read_u32(bytes: &[u8], at: usize) -> Result<u32, NetlinkError> {
    let raw = bytes.get(at..at + 4).ok_or(NetlinkError::Malformed)?;
    let mut word = [0; 4];
    word.copy_from_slice(raw);
    Ok(u32::from_ne_bytes(word))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_laid_out_with_padded_and_nested_attributes() {
        let mut message = Message::new(16, F_REQUEST | F_ACK, &[1, 2, 3], "a link");
        message.attr_str(3, "lo").nested(18, |m| {
            m.attr_str(1, "dummy");
        });
        let (bytes, acked, _) = message.finish(7);
        assert!(acked);
        assert_eq!(read_u32(&bytes, 0).unwrap() as usize, bytes.len());
        assert_eq!(read_u32(&bytes, 8).unwrap(), 7);
        // The 3-byte family header is padded to 4.
        assert_eq!(&bytes[16..20], &[1, 2, 3, 0]);
        // "lo\0" is a 7-byte attribute padded to 8.
        assert_eq!(&bytes[20..28], &[7, 0, 3, 0, b'l', b'o', 0, 0]);
        // The nested attribute's length covers "dummy\0" (4 + 6, padded).
        assert_eq!(u16::from_ne_bytes([bytes[28], bytes[29]]), 4 + 12);
        assert_eq!(
            u16::from_ne_bytes([bytes[30], bytes[31]]),
            18 | NLA_F_NESTED
        );
        assert_eq!(bytes.len() % 4, 0);
    }

    #[test]
    fn acknowledgements_and_errors_are_read_by_sequence_number() {
        let mut datagram = Vec::new();
        for (seq, errno) in [(1u32, 0i32), (2, -17)] {
            datagram.extend_from_slice(&36u32.to_ne_bytes());
            datagram.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
            datagram.extend_from_slice(&0u16.to_ne_bytes());
            datagram.extend_from_slice(&seq.to_ne_bytes());
            datagram.extend_from_slice(&0u32.to_ne_bytes());
            datagram.extend_from_slice(&errno.to_ne_bytes());
            datagram.extend_from_slice(&[0; 16]);
        }
        assert_eq!(acknowledgements(&datagram).unwrap(), [(1, 0), (2, 17)]);
        assert!(acknowledgements(&datagram[..20]).is_err(), "a cut message");
        let mut bad = datagram.clone();
        bad[0] = 200;
        assert!(matches!(
            acknowledgements(&bad),
            Err(NetlinkError::Malformed)
        ));
    }
}
