//! The remote-read API's wire format (ADR 0008): its protobuf messages, the request body's
//! snappy block (written as literals), the streamed answer's frames (each checked by its
//! CRC-32C) and the XOR chunks of float samples Prometheus' TSDB stores.

use anyhow::{Context as _, bail};

/// `prometheus.ReadRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct ReadRequest {
    #[prost(message, repeated, tag = "1")]
    pub queries: Vec<Query>,
    /// `prometheus.ReadRequest.ResponseType`: 1 is `STREAMED_XOR_CHUNKS`.
    #[prost(int32, repeated, tag = "2")]
    pub accepted_response_types: Vec<i32>,
}

/// `ReadRequest.ResponseType.STREAMED_XOR_CHUNKS`.
pub(super) const STREAMED_XOR_CHUNKS: i32 = 1;

/// `prometheus.Query`: a time range in milliseconds and the label matchers.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Query {
    #[prost(int64, tag = "1")]
    pub start_timestamp_ms: i64,
    #[prost(int64, tag = "2")]
    pub end_timestamp_ms: i64,
    #[prost(message, repeated, tag = "3")]
    pub matchers: Vec<LabelMatcher>,
}

/// `prometheus.LabelMatcher`: `type` 0 `=`, 1 `!=`, 2 `=~`, 3 `!~`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub(super) struct LabelMatcher {
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub value: String,
}

/// `prometheus.ChunkedReadResponse`: one frame of a streamed answer.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct ChunkedReadResponse {
    #[prost(message, repeated, tag = "1")]
    pub chunked_series: Vec<ChunkedSeries>,
    #[prost(int64, tag = "2")]
    pub query_index: i64,
}

/// `prometheus.ChunkedSeries`: a series' labels and some of its chunks, in time order (a
/// series may go on in the next frame).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct ChunkedSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub chunks: Vec<Chunk>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub(super) struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Chunk`: `type` 1 is XOR (float samples).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Chunk {
    #[prost(int64, tag = "1")]
    pub min_time_ms: i64,
    #[prost(int64, tag = "2")]
    pub max_time_ms: i64,
    #[prost(int32, tag = "3")]
    pub r#type: i32,
    #[prost(bytes = "vec", tag = "4")]
    pub data: Vec<u8>,
}

/// `prometheus.Chunk.Encoding.XOR`.
pub(super) const XOR: i32 = 1;

/// `bytes` as a snappy block (what `Content-Encoding: snappy` means to Prometheus): the
/// length, then the bytes as literals. Valid snappy that any decoder reads; a request is a
/// few hundred bytes, so compressing it would save nothing worth a dependency.
pub(super) fn snappy_literal(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 16);
    put_uvarint(&mut out, bytes.len() as u64);
    // Literals of at most 65 536 bytes: a tag 0b1111_0000 (length − 1 in the next two
    // bytes, little-endian) or, under 61 bytes, the length − 1 in the tag's six high bits.
    for piece in bytes.chunks(1 << 16) {
        let n = piece.len() - 1;
        if n < 60 {
            out.push((n as u8) << 2);
        } else {
            out.push(61 << 2);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        out.extend_from_slice(piece);
    }
    out
}

/// Append `v` as a protobuf/Go unsigned varint.
fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// An unsigned varint from the start of `bytes`: the value and its length; `None` when
/// cut short or longer than ten bytes.
fn uvarint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some((v, i + 1));
        }
    }
    None
}

/// [`uvarint`] for the tests of the request.
#[cfg(test)]
pub(super) fn tests_uvarint(bytes: &[u8]) -> (u64, usize) {
    uvarint(bytes).unwrap_or_default()
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), eight bytes a step.
const CRC_TABLES: [[u32; 256]; 8] = crc_tables();

const fn crc_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut j = 1;
    while j < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[j - 1][i];
            t[j][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        j += 1;
    }
    t
}

/// The CRC-32C of `bytes`.
pub(super) fn crc32c(bytes: &[u8]) -> u32 {
    let t = &CRC_TABLES;
    let mut crc = !0u32;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let lo = crc ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        crc = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][w[4] as usize]
            ^ t[2][w[5] as usize]
            ^ t[1][w[6] as usize]
            ^ t[0][w[7] as usize];
    }
    for &b in words.remainder() {
        crc = (crc >> 8) ^ t[0][((crc ^ u32::from(b)) & 0xff) as usize];
    }
    !crc
}

/// The frames of a streamed answer: each a varint length, the message's CRC-32C
/// (big-endian) and the message, handed to `each` decoded.
///
/// # Errors
/// A frame cut short, whose CRC does not match, or that is not a `ChunkedReadResponse`,
/// named by its place in the body.
pub(super) fn frames(
    mut body: &[u8],
    mut each: impl FnMut(ChunkedReadResponse) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    use prost::Message as _;
    let total = body.len();
    while !body.is_empty() {
        let at = total - body.len();
        let (len, n) = uvarint(body).with_context(|| format!("frame at byte {at}: no length"))?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let rest = &body[n..];
        if rest.len() < 4 || rest.len() - 4 < len {
            if at > 0 {
                ended_with_text(body)?;
            }
            bail!("frame at byte {at}: cut short ({len} bytes announced)");
        }
        let (crc, rest) = rest.split_at(4);
        let (message, rest) = rest.split_at(len);
        let want = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if crc32c(message) != want {
            if at > 0 {
                ended_with_text(body)?;
            }
            bail!("frame at byte {at}: its CRC-32C does not match");
        }
        let frame = ChunkedReadResponse::decode(message)
            .with_context(|| format!("frame at byte {at}: not a ChunkedReadResponse"))?;
        each(frame)?;
        body = rest;
    }
    Ok(())
}

/// The server's own error, written after frames it had sent (Prometheus' `http.Error` once
/// the answer's 200 is out: a query timeout, a cancelled read): a passing failure, retried.
#[derive(Debug)]
pub(crate) struct StreamEnded(pub(crate) String);

impl std::fmt::Display for StreamEnded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server ended the stream with an error: {}", self.0)
    }
}

impl std::error::Error for StreamEnded {}

/// Where a frame after the first does not read, the rest of the body when it is a line of
/// text (printable UTF-8, a few KiB at most): the server's error, not a frame. (Text from
/// the first byte is no stream at all: a front that rewrote the answer.)
fn ended_with_text(rest: &[u8]) -> Result<(), StreamEnded> {
    let text = std::str::from_utf8(rest).ok().filter(|t| {
        t.len() <= 4096 && t.chars().all(|c| !c.is_control() || c == '\n' || c == '\t')
    });
    match text.map(str::trim).filter(|t| !t.is_empty()) {
        Some(t) => Err(StreamEnded(t.to_owned())),
        None => Ok(()),
    }
}

/// `message` as one frame of a streamed answer: its length, its CRC-32C and itself. For
/// the fuzz target, which reaches the chunks through frames that check.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 14);
    put_uvarint(&mut out, message.len() as u64);
    out.extend_from_slice(&crc32c(message).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// Reads bits most significant first, as Prometheus' `bstream` writes them.
struct Bits<'a> {
    data: &'a [u8],
    /// The next bit's position.
    pos: usize,
}

impl Bits<'_> {
    /// The next `n` bits (at most 64) as a number; `None` past the end.
    fn read(&mut self, n: u32) -> Option<u64> {
        if n > 56 {
            let high = self.read(n - 32)?;
            return Some(high << 32 | self.read(32)?);
        }
        if n == 0 {
            return Some(0);
        }
        let end = self.pos + n as usize;
        if end > self.data.len() * 8 {
            return None;
        }
        let byte = self.pos / 8;
        let mut word = [0u8; 8];
        // Eight whole bytes in one load; the last few of the stream copied one by one.
        match self.data.get(byte..byte + 8) {
            Some(eight) => word.copy_from_slice(eight),
            None => {
                for (w, b) in word.iter_mut().zip(&self.data[byte..]) {
                    *w = *b;
                }
            }
        }
        let word = u64::from_be_bytes(word) << (self.pos % 8);
        self.pos = end;
        Some(word >> (64 - n))
    }

    fn bit(&mut self) -> Option<bool> {
        self.read(1).map(|b| b == 1)
    }

    /// A Go unsigned varint written into the stream byte by byte.
    fn uvarint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.read(8)?;
            v |= (b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    /// A Go (zig-zag) signed varint.
    fn varint(&mut self) -> Option<i64> {
        let u = self.uvarint()?;
        let v = (u >> 1) as i64;
        Some(if u & 1 == 1 { !v } else { v })
    }
}

/// The XOR state of a chunk's values: the last value's bits and the window of meaningful
/// bits last written.
struct Xor {
    bits: u64,
    leading: u32,
    trailing: u32,
}

impl Xor {
    /// The next value: unchanged (`0`), the XOR in the last window (`10`), or in a new
    /// window (`11`, five bits of leading zeros and six of its width, 0 meaning 64).
    fn next(&mut self, r: &mut Bits<'_>) -> Option<f64> {
        if r.bit()? {
            if r.bit()? {
                let leading = r.read(5)? as u32;
                let width = match r.read(6)? as u32 {
                    0 => 64,
                    w => w,
                };
                self.leading = leading;
                self.trailing = 64u32.checked_sub(leading + width)?;
            }
            let width = 64 - self.leading - self.trailing;
            let xor = r.read(width)?;
            self.bits ^= xor.checked_shl(self.trailing).unwrap_or(0);
        }
        Some(f64::from_bits(self.bits))
    }
}

/// The delta of delta of a chunk's third and later times: `0`, then `10`, `110`, `1110`
/// with 14, 17 or 20 bits (two's complement), or `1111` with 64.
fn delta_of_delta(r: &mut Bits<'_>) -> Option<i64> {
    let mut ones = 0;
    while ones < 4 && r.bit()? {
        ones += 1;
    }
    let size = match ones {
        0 => return Some(0),
        1 => 14,
        2 => 17,
        3 => 20,
        _ => return r.read(64).map(|b| b as i64),
    };
    let bits = r.read(size)?;
    // As Prometheus reads it: a value over half the range is negative.
    Some(if bits > 1 << (size - 1) {
        bits as i64 - (1i64 << size)
    } else {
        bits as i64
    })
}

/// Append the samples `(time ms, value)` of an XOR chunk within `[from, to]` to `out`:
/// two bytes of count (big-endian), the first time (varint) and value (64 bits), the
/// second time's delta (unsigned varint), then each time as a delta of deltas and each
/// value as an XOR with the one before. The chunk is read no further than its first
/// sample after `to` (its times increase).
///
/// # Errors
/// A chunk cut short or malformed (in the part read).
pub(super) fn xor_samples(
    data: &[u8],
    (from, to): (i64, i64),
    out: &mut Vec<(i64, f64)>,
) -> anyhow::Result<()> {
    let (count, stream) = match data {
        [a, b, rest @ ..] => (u16::from_be_bytes([*a, *b]), rest),
        _ => bail!("an XOR chunk of {} bytes, without its count", data.len()),
    };
    let mut r = Bits {
        data: stream,
        pos: 0,
    };
    let cut = || anyhow::anyhow!("an XOR chunk of {count} samples is cut short or malformed");
    if count == 0 {
        return Ok(());
    }
    let mut t = r.varint().ok_or_else(cut)?;
    let mut xor = Xor {
        bits: r.read(64).ok_or_else(cut)?,
        leading: 0,
        trailing: 0,
    };
    let mut delta = 0i64;
    for i in 0..count {
        if i > 0 {
            delta = if i == 1 {
                r.uvarint().ok_or_else(cut)? as i64
            } else {
                delta.wrapping_add(delta_of_delta(&mut r).ok_or_else(cut)?)
            };
            // Prometheus appends a sample only after the last one: a time that does not
            // increase is no chunk it wrote (and 65 535 samples at one time, 2 bits each,
            // would be kept until the series ends).
            t = match t.checked_add(delta) {
                Some(next) if delta > 0 => next,
                _ => bail!(
                    "an XOR chunk of {count} samples whose time does not increase at sample {i}: not Prometheus' encoding"
                ),
            };
            xor.next(&mut r).ok_or_else(cut)?;
        }
        if t > to {
            break;
        }
        if t >= from {
            out.push((t, f64::from_bits(xor.bits)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sample of a chunk.
    const ALL: (i64, i64) = (i64::MIN, i64::MAX);

    #[test]
    fn a_chunk_is_read_within_its_range_and_no_further() {
        // Two samples, as Prometheus writes them: the count, the first time (zig-zag
        // varint) and value, the second time's delta (varint) and the value unchanged
        // (one 0 bit; the rest of the byte is padding).
        let mut chunk = vec![0, 2];
        put_uvarint(&mut chunk, 2 * 120_000);
        chunk.extend_from_slice(&1.5f64.to_bits().to_be_bytes());
        put_uvarint(&mut chunk, 60_000);
        chunk.push(0);
        let read = |chunk: &[u8], range| {
            let mut out = Vec::new();
            xor_samples(chunk, range, &mut out).map(|()| out).ok()
        };
        let both = vec![(120_000, 1.5), (180_000, 1.5)];
        assert_eq!(read(&chunk, ALL), Some(both.clone()));
        assert_eq!(read(&chunk, (120_000, 180_000)), Some(both));
        assert_eq!(read(&chunk, (120_001, 180_000)), Some(vec![(180_000, 1.5)]));
        assert_eq!(read(&chunk, (0, 179_999)), Some(vec![(120_000, 1.5)]));
        assert_eq!(read(&chunk, (0, 119_999)), Some(vec![]));
        // The second sample at the first one's time: malformed, whatever the range.
        let mut same = vec![0, 2];
        put_uvarint(&mut same, 2 * 120_000);
        same.extend_from_slice(&1.5f64.to_bits().to_be_bytes());
        put_uvarint(&mut same, 0);
        same.push(0);
        let e = xor_samples(&same, ALL, &mut Vec::new()).unwrap_err();
        assert!(
            e.to_string().contains("time does not increase at sample 1"),
            "{e}"
        );
        // More samples announced than the bits hold (the padding reads as three more, each
        // a time and a value unchanged): an error where the missing one is read, none where
        // the second is already past the range.
        chunk[1] = 200;
        assert_eq!(read(&chunk, ALL), None);
        assert_eq!(read(&chunk, (0, 150_000)), Some(vec![(120_000, 1.5)]));
    }

    #[test]
    fn crc32c_reads_the_check_values() {
        // The standard check value of CRC-32C, and RFC 3720's test vectors (iSCSI).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn snappy_literals_carry_the_length_and_the_bytes() {
        assert_eq!(snappy_literal(b"abc"), vec![3, 2 << 2, b'a', b'b', b'c']);
        let long = vec![7u8; 300];
        let out = snappy_literal(&long);
        // 300 = 0b10_0101100: varint 0xAC 0x02; tag 61<<2, then 299 little-endian.
        assert_eq!(out[..5], [0xAC, 0x02, 61 << 2, 0x2B, 0x01]);
        assert_eq!(out.len(), 5 + 300);
    }

    #[test]
    fn the_servers_error_after_frames_is_said_as_its_own() {
        // An empty frame, then Prometheus' error text appended to the 200 body.
        let mut body = vec![0, 0, 0, 0, 0];
        body.extend_from_slice(b"expanding series: context deadline exceeded\n");
        let e = frames(&body, |_| Ok(())).unwrap_err();
        assert!(e.downcast_ref::<StreamEnded>().is_some());
        assert_eq!(
            e.to_string(),
            "the server ended the stream with an error: expanding series: context deadline exceeded"
        );
        // Text from the first byte is no stream at all; bytes that are no text stay a frame
        // that does not read.
        let e = frames(b"no frames here", |_| Ok(())).unwrap_err();
        assert!(e.downcast_ref::<StreamEnded>().is_none());
        assert!(e.to_string().contains("frame at byte 0"), "{e}");
        let e = frames(&[5, 0, 0, 0, 0, 1], |_| Ok(())).unwrap_err();
        assert!(e.downcast_ref::<StreamEnded>().is_none());
        assert!(e.to_string().contains("cut short"), "{e}");
    }

    #[test]
    fn a_malformed_chunk_or_frame_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        assert!(xor_samples(&[], ALL, &mut out).is_err());
        assert!(xor_samples(&[0, 3, 0x80], ALL, &mut out).is_err());
        assert!(xor_samples(&[0, 0], ALL, &mut out).is_ok());
        assert!(frames(&[5, 0, 0, 0, 0, 1], |_| Ok(())).is_err());
        let bad_crc = [0u8, 1, 2, 3, 4];
        assert!(frames(&bad_crc, |_| Ok(())).is_err());
        // An empty message with its CRC (of nothing: 0) is an empty frame.
        assert!(
            frames(&[0, 0, 0, 0, 0], |f| {
                assert!(f.chunked_series.is_empty());
                Ok(())
            })
            .is_ok()
        );
    }
}
