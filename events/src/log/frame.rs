//! Record framing: `body length u32 LE | BLAKE3(body) | body`.

use crate::format::{EventHash, MAX_BODY_LEN, RECORD_HEADER_LEN};

/// What is at a given offset of a segment.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    /// A whole record whose hash matches its body.
    Record {
        /// The body's hash (the envelope's own hash).
        hash: EventHash,
        /// The body.
        body: &'a [u8],
        /// Bytes taken by the record, header included.
        len: usize,
    },
    /// Nothing: the end of the data.
    End,
    /// Fewer bytes than the record header or its body claims.
    Truncated,
    /// A length no writer produces.
    BadLength(u32),
    /// The body does not match its hash; the frame's length fields were
    /// plausible and its bytes are all there (`len`, header included).
    BadHash {
        /// Bytes the frame claims, header included.
        len: usize,
    },
}

/// Reads the frame at the start of `buf`.
pub(crate) fn read_frame(buf: &[u8]) -> Frame<'_> {
    if buf.is_empty() {
        return Frame::End;
    }
    if buf.len() < RECORD_HEADER_LEN {
        return Frame::Truncated;
    }
    let mut l = [0u8; 4];
    l.copy_from_slice(&buf[..4]);
    let body_len = u32::from_le_bytes(l);
    if body_len == 0 || body_len > MAX_BODY_LEN {
        return Frame::BadLength(body_len);
    }
    let total = RECORD_HEADER_LEN + body_len as usize;
    if buf.len() < total {
        return Frame::Truncated;
    }
    let mut h = [0u8; 32];
    h.copy_from_slice(&buf[4..36]);
    let body = &buf[RECORD_HEADER_LEN..total];
    let hash = EventHash::of(body);
    if hash.0 != h {
        return Frame::BadHash { len: total };
    }
    Frame::Record {
        hash,
        body,
        len: total,
    }
}

/// Appends the frame of `body` to `out`; returns its hash.
pub(crate) fn write_frame(out: &mut Vec<u8>, body: &[u8]) -> EventHash {
    let hash = EventHash::of(body);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&hash.0);
    out.extend_from_slice(body);
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_damage_is_named() {
        let mut buf = Vec::new();
        let h = write_frame(&mut buf, b"hello");
        assert_eq!(
            read_frame(&buf),
            Frame::Record {
                hash: h,
                body: b"hello",
                len: 41
            }
        );
        assert_eq!(read_frame(&[]), Frame::End);
        assert_eq!(read_frame(&buf[..40]), Frame::Truncated);
        assert_eq!(read_frame(&buf[..10]), Frame::Truncated);
        let mut bad = buf.clone();
        bad[40] ^= 1;
        assert_eq!(read_frame(&bad), Frame::BadHash { len: 41 });
        let zeros = [0u8; 64];
        assert_eq!(read_frame(&zeros), Frame::BadLength(0));
    }
}
