//! [`FrameCursor`]: where the HTTP/2 frames are in the bytes the host
//! writes, so that a connection can be ended between two of them.

/// The client's connection preface (`PRI * HTTP/2.0...`), which comes
/// before its first frame.
const PREFACE_LEN: usize = 24;
/// A frame header: a 24-bit payload length, type, flags, stream id.
const HEADER_LEN: usize = 9;

/// A position in an HTTP/2 client's byte stream: in the preface, in a
/// frame's header or payload, or between two of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FrameCursor {
    preface_left: usize,
    header: [u8; HEADER_LEN],
    header_len: usize,
    payload_left: usize,
}

impl FrameCursor {
    /// The start of a client's stream, before its preface.
    pub fn client() -> Self {
        FrameCursor {
            preface_left: PREFACE_LEN,
            header: [0; HEADER_LEN],
            header_len: 0,
            payload_left: 0,
        }
    }

    /// Whether the stream so far ends between two frames (or before the
    /// preface, or right after it): nothing the peer has is a part of one.
    pub fn at_boundary(&self) -> bool {
        self.header_len == 0
            && self.payload_left == 0
            && (self.preface_left == 0 || self.preface_left == PREFACE_LEN)
    }

    /// Follows `bytes`, written next.
    pub fn advance(&mut self, bytes: &[u8]) {
        self.take(bytes, false);
    }

    /// How many of `bytes`, written next, finish the preface or frame in
    /// progress: 0 at a boundary, all of them if they do not reach its end.
    pub fn to_boundary(&self, bytes: &[u8]) -> usize {
        if self.at_boundary() {
            return 0;
        }
        self.clone().take(bytes, true)
    }

    /// Follows bytes from the front of `bytes` and returns how many it
    /// took: all of them, or with `stop` up to the next boundary.
    fn take(&mut self, bytes: &[u8], stop: bool) -> usize {
        let mut taken = 0;
        while taken < bytes.len() {
            let rest = &bytes[taken..];
            if self.preface_left > 0 {
                let n = rest.len().min(self.preface_left);
                self.preface_left -= n;
                taken += n;
            } else if self.payload_left > 0 {
                let n = rest.len().min(self.payload_left);
                self.payload_left -= n;
                taken += n;
            } else {
                let n = rest.len().min(HEADER_LEN - self.header_len);
                self.header[self.header_len..self.header_len + n].copy_from_slice(&rest[..n]);
                self.header_len += n;
                taken += n;
                if self.header_len == HEADER_LEN {
                    self.header_len = 0;
                    self.payload_left = usize::from(self.header[0]) << 16
                        | usize::from(self.header[1]) << 8
                        | usize::from(self.header[2]);
                }
            }
            if stop && self.at_boundary() {
                break;
            }
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFACE: &[u8; PREFACE_LEN] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut bytes = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            0,
            0,
            0,
            0,
            1,
        ];
        bytes.extend_from_slice(payload);
        bytes
    }

    /// A preface, a SETTINGS frame, an empty DATA frame and a 20 KiB one.
    fn stream() -> (Vec<u8>, Vec<usize>) {
        let mut bytes = PREFACE.to_vec();
        let mut boundaries = vec![0, bytes.len()];
        for piece in [frame(4, &[0; 6]), frame(0, &[]), frame(0, &[7; 20 << 10])] {
            bytes.extend_from_slice(&piece);
            boundaries.push(bytes.len());
        }
        (bytes, boundaries)
    }

    #[test]
    fn every_split_point_is_placed_in_its_frame() {
        let (bytes, boundaries) = stream();
        for split in 0..=bytes.len() {
            let mut cursor = FrameCursor::client();
            cursor.advance(&bytes[..split]);
            assert_eq!(cursor.at_boundary(), boundaries.contains(&split), "{split}");
            let next = boundaries.iter().copied().find(|&b| b >= split).unwrap();
            assert_eq!(cursor.to_boundary(&bytes[split..]), next - split, "{split}");
        }
    }

    #[test]
    fn bytes_fed_one_at_a_time_land_where_one_write_would() {
        let (bytes, _) = stream();
        let mut whole = FrameCursor::client();
        let mut single = FrameCursor::client();
        for (i, byte) in bytes.iter().enumerate() {
            single.advance(std::slice::from_ref(byte));
            whole = FrameCursor::client();
            whole.advance(&bytes[..=i]);
            assert_eq!(single, whole, "{i}");
        }
        assert!(whole.at_boundary());
    }

    #[test]
    fn a_short_write_inside_a_header_reaches_only_as_far_as_it_goes() {
        let mut cursor = FrameCursor::client();
        cursor.advance(PREFACE);
        cursor.advance(&[0, 0]);
        // The length is not known yet: all three bytes belong to the frame.
        assert_eq!(cursor.to_boundary(&[5, 0, 0]), 3);
        assert_eq!(
            cursor.to_boundary(&[5, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 9]),
            12
        );
    }
}
