//! The index block's pieces: block handles and short separator keys.
//!
//! The index is an ordinary block (restart interval 1) with one entry per
//! data block:
//!
//! ```text
//! key   = an internal key K with  last_key(block i) <= K < first_key(block i+1)
//!         (for the last block: K >= last_key)
//! value = handle = offset: varint ‖ size: varint
//!         (offset of the data block in the file, size without its trailer)
//! ```
//!
//! `K` is made short: the user key of the last key is cut right after the
//! first byte that can be incremented while staying below the next block's
//! user key, and given the trailer `(MAX_SEQNO, Put)`, which sorts before
//! every other entry of that user key. When no shorter user key fits, `K` is
//! the last key itself.
//!
//! Worked example: last key of block 0 `"apple"@5`, first key of block 1
//! `"banana"@9`: the separator is `"b"@MAX_SEQNO` (9 bytes instead of 13);
//! a block at offset 0 of 4017 bytes has the handle `00 b1 1f`.
//!
//! Invariant: for every index entry i, `last(i) <= K_i < first(i+1)`, so the
//! first index entry `>= t` names the only block that can hold the first
//! entry `>= t` (or the block after it holds it, when `t > last(i)`).
//!
//! Concurrency: everything here is a pure function or a `Copy` value.

use std::cmp::Ordering;

use crate::coding::{get_varint, put_varint};
use crate::key::{compare_internal, pack_trailer, user_key, Kind, MAX_SEQNO, TRAILER_LEN};

/// Where a block lies in its file: offset and size, the 5-byte trailer
/// excluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockHandle {
    /// Offset of the block's first byte.
    pub offset: u64,
    /// Size of the block, trailer excluded.
    pub size: u64,
}

impl BlockHandle {
    /// Longest varint encoding of a handle.
    pub const MAX_ENCODED_LEN: usize = 20;

    /// Appends the varint encoding (`offset ‖ size`).
    pub fn encode_to(&self, dst: &mut Vec<u8>) {
        put_varint(dst, self.offset);
        put_varint(dst, self.size);
    }

    /// Decodes a varint-encoded handle that must fill `src` exactly.
    pub fn decode(src: &[u8]) -> Option<BlockHandle> {
        let (offset, n) = get_varint(src)?;
        let (size, m) = get_varint(src.get(n..)?)?;
        if n + m != src.len() {
            return None;
        }
        Some(BlockHandle { offset, size })
    }

    /// The offset just past the block's trailer; `None` on overflow.
    pub fn end_with_trailer(&self) -> Option<u64> {
        self.offset
            .checked_add(self.size)?
            .checked_add(super::builder::BLOCK_TRAILER_LEN as u64)
    }
}

/// The trailer that sorts first among a user key's entries.
fn max_trailer() -> [u8; TRAILER_LEN] {
    pack_trailer(MAX_SEQNO, Kind::MAX).to_le_bytes()
}

/// Writes into `out` a short internal key `K` with `start <= K < limit`.
///
/// REQUIRES: `start < limit` in [`compare_internal`] order; both are internal
/// keys.
pub fn shortest_separator(start: &[u8], limit: &[u8], out: &mut Vec<u8>) {
    debug_assert!(compare_internal(start, limit) == Ordering::Less);
    out.clear();
    let us = user_key(start);
    let ul = user_key(limit);
    let n = us.len().min(ul.len());
    let mut diff = 0;
    while diff < n && us[diff] == ul[diff] {
        diff += 1;
    }
    if diff < n {
        let b = us[diff];
        // us[diff] < ul[diff] since start < limit and they differ here, so
        // b + 1 <= ul[diff]: us[..diff] ‖ (b+1) is < ul unless it *is* ul.
        if b + 1 < ul[diff] || diff + 1 < ul.len() {
            out.extend_from_slice(&us[..diff]);
            out.push(b + 1);
        } else {
            // Keep us[..=diff] (already < ul) and increment a later byte.
            let mut j = diff + 1;
            while j < us.len() && us[j] == 0xff {
                j += 1;
            }
            if j + 1 < us.len() {
                out.extend_from_slice(&us[..j]);
                out.push(us[j] + 1);
            }
        }
    }
    if out.is_empty() || out.len() >= us.len() {
        out.clear();
        out.extend_from_slice(start);
        return;
    }
    out.extend_from_slice(&max_trailer());
    debug_assert!(compare_internal(start, out) != Ordering::Greater);
    debug_assert!(compare_internal(out, limit) == Ordering::Less);
}

/// Writes into `out` a short internal key `K >= key`.
pub fn short_successor(key: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let uk = user_key(key);
    if let Some(i) = uk.iter().position(|&b| b != 0xff) {
        if i + 1 < uk.len() {
            out.extend_from_slice(&uk[..i]);
            out.push(uk[i] + 1);
            out.extend_from_slice(&max_trailer());
            debug_assert!(compare_internal(key, out) == Ordering::Less);
            return;
        }
    }
    out.extend_from_slice(key);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::key::make_internal_key;

    fn ik(k: &[u8], s: u64) -> Vec<u8> {
        make_internal_key(k, s, Kind::Put)
    }

    #[test]
    fn separators() {
        let mut out = Vec::new();
        let cases: &[(&[u8], &[u8], &[u8])] = &[
            (b"apple", b"banana", b"b"),
            (b"abc1zzz", b"abd", b"abc2"),
            (b"abc1zzz", b"abdx", b"abd"),
            (b"abc", b"abcd", b"abc"),
            (b"abc", b"abd", b"abc"),
            (b"ab\xff\xffzz", b"ac", b"ab\xff\xff{"),
            (b"ab\xff\xffz", b"ac", b"ab\xff\xffz"),
            (b"a", b"a", b"a"),
        ];
        for &(s, l, want) in cases {
            let start = ik(s, 5);
            let limit = ik(l, if s == l { 4 } else { 9 });
            shortest_separator(&start, &limit, &mut out);
            assert_eq!(user_key(&out), want, "{s:?} {l:?}");
            assert_ne!(compare_internal(&start, &out), Ordering::Greater);
            assert_eq!(compare_internal(&out, &limit), Ordering::Less);
        }
        shortest_separator(&ik(b"apple", 5), &ik(b"banana", 9), &mut out);
        assert_eq!(out.len(), 9);
    }

    #[test]
    fn successors() {
        let mut out = Vec::new();
        short_successor(&ik(b"apple", 5), &mut out);
        assert_eq!(user_key(&out), b"b");
        short_successor(&ik(b"\xff\xffa", 5), &mut out);
        assert_eq!(out, ik(b"\xff\xffa", 5));
        short_successor(&ik(b"\xff\xff", 5), &mut out);
        assert_eq!(out, ik(b"\xff\xff", 5));
        short_successor(&ik(b"", 5), &mut out);
        assert_eq!(out, ik(b"", 5));
    }

    #[test]
    fn handle_roundtrip() {
        let h = BlockHandle {
            offset: 0,
            size: 4017,
        };
        let mut b = Vec::new();
        h.encode_to(&mut b);
        assert_eq!(b, [0x00, 0xb1, 0x1f]);
        assert_eq!(BlockHandle::decode(&b), Some(h));
        b.push(0);
        assert_eq!(BlockHandle::decode(&b), None);
    }
}
