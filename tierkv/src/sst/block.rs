//! Data and index blocks: sorted entries with shared-prefix compression and
//! restart points (leveldb's block format).
//!
//! # Layout
//!
//! ```text
//! block   = entry* ‖ restart[n]: u32le ‖ n: u32le
//! entry   = shared: varint ‖ unshared: varint ‖ value_len: varint
//!           ‖ key_delta: [u8; unshared] ‖ value: [u8; value_len]
//! ```
//!
//! An entry's key is the first `shared` bytes of the previous entry's key
//! followed by `key_delta`. Every `restart_interval`-th entry is a *restart
//! point*: it stores its whole key (`shared = 0`) and its offset is listed in
//! the restart array, so a seek binary-searches the restart keys and then
//! scans at most `restart_interval` entries. Data blocks use an interval of
//! 16, index blocks 1 (every index key is stored whole).
//!
//! Worked example (restart interval 2): keys `ab@1`, `ac@1` and `b@1` (internal
//! keys, trailer `01 01 00 00 00 00 00 00`), values `x`, `y`, `z`:
//!
//! ```text
//! off  bytes
//!  0   00 0a 01 | 61 62 01 01 00 00 00 00 00 00 | 78      "ab@1" → "x" (restart 0)
//! 14   01 09 01 | 63 01 01 00 00 00 00 00 00    | 79      shares "a": "c@1" → "y"
//! 27   00 09 01 | 62 01 01 00 00 00 00 00 00    | 7a      "b@1" → "z" (restart 1)
//! 40   00 00 00 00 | 1b 00 00 00                          restarts [0, 27]
//! 48   02 00 00 00                                        n = 2
//! ```
//!
//! # Invariants
//!
//! 1. `n >= 1`, `restart[0] == 0`, and the restart offsets are strictly
//!    increasing and lie inside the entry area (all checked by
//!    [`Block::new`]; an empty block has `n == 1`, `restart[0] == 0` and no
//!    entries).
//! 2. The entry at a restart offset has `shared == 0`.
//! 3. Keys are strictly increasing in [`compare_internal`] order.
//!
//! Invariant 1 is validated when a block is constructed; 2 and 3 are checked
//! lazily: a malformed entry turns the iterator invalid with a
//! `Error::Corruption` status naming the file and the byte offset of the entry
//! — never a panic or an out-of-bounds slice.
//!
//! # Concurrency
//!
//! A [`Block`] is immutable and shared (`Arc<Block>`, e.g. from the block
//! cache) by any number of threads; each [`BlockIter`] is owned by one thread.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::coding::{get_u32, get_varint, put_u32, put_varint};
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::compare_internal;

/// Bytes of the restart count at the end of a block.
const COUNT_LEN: usize = 4;

/// Builds one block. Reused across blocks via [`BlockBuilder::reset`], which
/// keeps its buffers' capacity.
#[derive(Debug)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    /// Entries added since the last restart point.
    counter: usize,
    restart_interval: usize,
    last_key: Vec<u8>,
    entries: usize,
    finished: bool,
}

impl BlockBuilder {
    /// A builder placing a restart point every `restart_interval` entries
    /// (values below 1 are treated as 1).
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            counter: 0,
            restart_interval: restart_interval.max(1),
            last_key: Vec::new(),
            entries: 0,
            finished: false,
        }
    }

    /// Forgets everything added, keeping the allocated buffers.
    pub fn reset(&mut self) {
        self.buf.clear();
        self.restarts.clear();
        self.restarts.push(0);
        self.counter = 0;
        self.last_key.clear();
        self.entries = 0;
        self.finished = false;
    }

    /// Appends an entry.
    ///
    /// REQUIRES: `finish` was not called since the last reset; `key` is
    /// greater than every key added before ([`compare_internal`] order).
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        debug_assert!(!self.finished, "BlockBuilder::add after finish");
        debug_assert!(
            self.entries == 0 || compare_internal(key, &self.last_key) == Ordering::Greater,
            "BlockBuilder keys must be strictly increasing"
        );
        let shared = if self.counter < self.restart_interval {
            common_prefix_len(&self.last_key, key)
        } else {
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
            0
        };
        let unshared = key.len() - shared;
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, unshared as u64);
        put_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(&key[shared..]);
        self.counter += 1;
        self.entries += 1;
    }

    /// Appends the restart array and count and returns the finished block.
    /// The slice stays valid until the next `reset` or `add`.
    pub fn finish(&mut self) -> &[u8] {
        if !self.finished {
            self.buf.reserve(self.restarts.len() * 4 + COUNT_LEN);
            for &r in &self.restarts {
                put_u32(&mut self.buf, r);
            }
            put_u32(&mut self.buf, self.restarts.len() as u32);
            self.finished = true;
        }
        &self.buf
    }

    /// The size of the block if it were finished now.
    pub fn current_size_estimate(&self) -> usize {
        if self.finished {
            self.buf.len()
        } else {
            self.buf.len() + self.restarts.len() * 4 + COUNT_LEN
        }
    }

    /// True if no entry was added since the last reset.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Entries added since the last reset.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// The last key added (empty if none).
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }
}

#[inline]
fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    // Compare 8 bytes at a time; most keys share long prefixes.
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_ne_bytes(a[i..i + 8].try_into().unwrap_or([0; 8]));
        let y = u64::from_ne_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        if x != y {
            break;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// A decoded entry header: where the key delta and value lie.
#[derive(Clone, Copy)]
struct EntryHeader {
    shared: usize,
    unshared: usize,
    value_len: usize,
    /// Offset of the key delta (just after the three varints).
    delta_off: usize,
}

/// Decodes the entry header at `off`; `None` if any field is malformed or the
/// entry does not fit before `limit`.
#[inline]
fn decode_entry(data: &[u8], off: usize, limit: usize) -> Option<EntryHeader> {
    let p = data.get(off..limit)?;
    if p.len() < 3 {
        return None;
    }
    let (shared, unshared, value_len, header_len);
    if (p[0] | p[1] | p[2]) < 0x80 {
        // Fast path: three one-byte varints.
        shared = p[0] as usize;
        unshared = p[1] as usize;
        value_len = p[2] as usize;
        header_len = 3;
    } else {
        let (a, n1) = get_varint(p)?;
        let (b, n2) = get_varint(p.get(n1..)?)?;
        let (c, n3) = get_varint(p.get(n1 + n2..)?)?;
        shared = usize::try_from(a).ok()?;
        unshared = usize::try_from(b).ok()?;
        value_len = usize::try_from(c).ok()?;
        header_len = n1 + n2 + n3;
    }
    let body = unshared.checked_add(value_len)?;
    if body > p.len() - header_len {
        return None;
    }
    Some(EntryHeader {
        shared,
        unshared,
        value_len,
        delta_off: off + header_len,
    })
}

/// An immutable, validated block (see the module docs for the layout).
pub struct Block {
    data: Vec<u8>,
    /// Offset of the restart array = end of the entry area.
    restarts_off: usize,
    num_restarts: usize,
    /// File (or other source) the block came from, for error messages.
    source: Arc<str>,
    /// Offset of the block in that file.
    file_offset: u64,
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("source", &self.source)
            .field("file_offset", &self.file_offset)
            .field("size_bytes", &self.data.len())
            .field("num_restarts", &self.num_restarts)
            .finish()
    }
}

impl Block {
    /// Validates the restart array of `data` (invariant 1) and wraps it.
    /// `source` and `file_offset` name where the block came from; a
    /// malformed block is `Error::Corruption` at `file_offset`.
    pub fn new(data: Vec<u8>, source: Arc<str>, file_offset: u64) -> Result<Block> {
        let bad = |what: String| Err(Error::corruption(&*source, file_offset, what));
        let len = data.len();
        let Some(n) = len.checked_sub(COUNT_LEN).and_then(|at| get_u32(&data, at)) else {
            return bad(format!("block of {len} bytes is too short"));
        };
        let n = n as usize;
        let max_restarts = (len - COUNT_LEN) / 4;
        if n == 0 || n > max_restarts {
            return bad(format!(
                "block restart count {n} invalid for a block of {len} bytes"
            ));
        }
        let restarts_off = len - COUNT_LEN - n * 4;
        let mut prev = 0usize;
        for i in 0..n {
            let r = get_u32(&data, restarts_off + i * 4).unwrap_or(u32::MAX) as usize;
            let ok = if i == 0 {
                r == 0
            } else {
                r > prev && r < restarts_off
            };
            if !ok {
                return bad(format!(
                    "block restart {i} = {r} invalid (entry area is {restarts_off} bytes)"
                ));
            }
            prev = r;
        }
        Ok(Block {
            data,
            restarts_off,
            num_restarts: n,
            source,
            file_offset,
        })
    }

    /// Bytes the block's buffer takes (its capacity: what the block cache
    /// charges).
    pub fn size_bytes(&self) -> usize {
        self.data.capacity()
    }

    /// The block's bytes, giving the block up (for reusing its buffer).
    pub fn into_data(self) -> Vec<u8> {
        self.data
    }

    /// Where the block came from (file path).
    pub fn source(&self) -> &Arc<str> {
        &self.source
    }

    /// Offset of the block in its file.
    pub fn file_offset(&self) -> u64 {
        self.file_offset
    }

    /// Number of restart points.
    pub fn num_restarts(&self) -> usize {
        self.num_restarts
    }

    /// The raw bytes of the block.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// An iterator over the block, not yet positioned.
    pub fn iter(self: &Arc<Self>) -> BlockIter {
        BlockIter::new(Arc::clone(self))
    }

    #[inline]
    fn restart_point(&self, i: usize) -> usize {
        debug_assert!(i < self.num_restarts);
        // In bounds by invariant 1 (validated in `new`).
        get_u32(&self.data, self.restarts_off + i * 4).unwrap_or(0) as usize
    }

    /// The whole key stored at restart `i`, or `None` if malformed.
    #[inline]
    fn restart_key(&self, i: usize) -> Option<&[u8]> {
        let off = self.restart_point(i);
        let h = decode_entry(&self.data, off, self.restarts_off)?;
        if h.shared != 0 {
            return None;
        }
        self.data.get(h.delta_off..h.delta_off + h.unshared)
    }

    fn corruption(&self, entry_off: usize, what: &str) -> Error {
        Error::corruption(
            &*self.source,
            self.file_offset + entry_off as u64,
            format!("{what} (block at offset {})", self.file_offset),
        )
    }
}

/// A cursor over one [`Block`], implementing [`InternalIterator`].
///
/// The current key is rebuilt in one reused buffer (no per-entry
/// allocation); the value is borrowed from the block.
pub struct BlockIter {
    block: Arc<Block>,
    /// Offset of the current entry (`restarts_off` when not positioned).
    current: usize,
    /// Offset of the entry after the current one.
    next_off: usize,
    /// Restart region holding `current`.
    restart_index: usize,
    key: Vec<u8>,
    value_off: usize,
    value_len: usize,
    valid: bool,
    err: Option<Error>,
}

impl BlockIter {
    /// An unpositioned iterator over `block`.
    pub fn new(block: Arc<Block>) -> Self {
        Self::with_buffer(block, Vec::new())
    }

    /// Like [`BlockIter::new`] but reusing `key_buf` (its contents are
    /// discarded) for the current key.
    pub fn with_buffer(block: Arc<Block>, mut key_buf: Vec<u8>) -> Self {
        key_buf.clear();
        let end = block.restarts_off;
        BlockIter {
            block,
            current: end,
            next_off: end,
            restart_index: 0,
            key: key_buf,
            value_off: 0,
            value_len: 0,
            valid: false,
            err: None,
        }
    }

    /// Switches to another block, keeping the key buffer; unpositioned.
    pub fn reset(&mut self, block: Arc<Block>) {
        self.block = block;
        self.current = self.block.restarts_off;
        self.next_off = self.current;
        self.restart_index = 0;
        self.key.clear();
        self.valid = false;
        self.err = None;
    }

    /// Gives back the key buffer for reuse.
    pub fn into_key_buffer(self) -> Vec<u8> {
        self.key
    }

    /// The block being iterated.
    pub fn block(&self) -> &Arc<Block> {
        &self.block
    }

    #[inline]
    fn invalidate(&mut self) {
        self.valid = false;
        self.current = self.block.restarts_off;
        self.next_off = self.current;
    }

    fn fail(&mut self, entry_off: usize, what: &str) {
        if self.err.is_none() {
            self.err = Some(self.block.corruption(entry_off, what));
        }
        self.invalidate();
        self.key.clear();
    }

    #[inline]
    fn seek_to_restart(&mut self, i: usize) {
        self.key.clear();
        self.restart_index = i;
        self.next_off = self.block.restart_point(i);
        self.valid = false;
    }

    /// Decodes the entry at `next_off`. False at the end of the block or on
    /// corruption (then `err` is set).
    #[inline]
    fn parse_next(&mut self) -> bool {
        let b = &*self.block;
        let off = self.next_off;
        if off >= b.restarts_off {
            self.invalidate();
            return false;
        }
        let Some(h) = decode_entry(&b.data, off, b.restarts_off) else {
            self.fail(off, "malformed block entry");
            return false;
        };
        if h.shared > self.key.len() {
            self.fail(
                off,
                "block entry shares more bytes than the previous key has",
            );
            return false;
        }
        self.current = off;
        self.key.truncate(h.shared);
        let delta_end = h.delta_off + h.unshared;
        // In bounds: decode_entry checked delta + value fit before restarts_off.
        self.key.extend_from_slice(&b.data[h.delta_off..delta_end]);
        self.value_off = delta_end;
        self.value_len = h.value_len;
        self.next_off = delta_end + h.value_len;
        while self.restart_index + 1 < b.num_restarts
            && b.restart_point(self.restart_index + 1) <= off
        {
            self.restart_index += 1;
        }
        self.valid = true;
        true
    }

    /// Index of the last restart whose key is `< target` (0 if none), found
    /// by binary search. `None` on a malformed restart entry (err set).
    fn find_restart(&mut self, target: &[u8]) -> Option<usize> {
        let b = &*self.block;
        let (mut left, mut right) = (0usize, b.num_restarts - 1);
        while left < right {
            let mid = left + (right - left).div_ceil(2);
            let Some(k) = b.restart_key(mid) else {
                let off = b.restart_point(mid);
                self.fail(off, "malformed block entry at restart point");
                return None;
            };
            if compare_internal(k, target) == Ordering::Less {
                left = mid;
            } else {
                right = mid - 1;
            }
        }
        Some(left)
    }
}

impl InternalIterator for BlockIter {
    #[inline]
    fn valid(&self) -> bool {
        self.valid
    }

    fn seek_to_first(&mut self) {
        self.seek_to_restart(0);
        self.parse_next();
    }

    fn seek_to_last(&mut self) {
        let last = self.block.num_restarts - 1;
        self.seek_to_restart(last);
        while self.parse_next() && self.next_off < self.block.restarts_off {}
    }

    fn seek(&mut self, target: &[u8]) {
        let Some(i) = self.find_restart(target) else {
            return;
        };
        self.seek_to_restart(i);
        while self.parse_next() {
            if compare_internal(&self.key, target) != Ordering::Less {
                return;
            }
        }
    }

    #[inline]
    fn next(&mut self) {
        debug_assert!(self.valid, "BlockIter::next on an invalid iterator");
        self.parse_next();
    }

    fn prev(&mut self) {
        debug_assert!(self.valid, "BlockIter::prev on an invalid iterator");
        let original = self.current;
        while self.block.restart_point(self.restart_index) >= original {
            if self.restart_index == 0 {
                // No entry before the first one.
                self.invalidate();
                self.key.clear();
                return;
            }
            self.restart_index -= 1;
        }
        let i = self.restart_index;
        self.seek_to_restart(i);
        while self.parse_next() && self.next_off < original {}
        if self.valid && self.next_off != original {
            // The entries did not line up with the one we were on.
            let off = self.current;
            self.fail(off, "block entries do not chain to the current entry");
        }
    }

    #[inline]
    fn key(&self) -> &[u8] {
        debug_assert!(self.valid);
        &self.key
    }

    #[inline]
    fn value(&self) -> &[u8] {
        debug_assert!(self.valid);
        self.block
            .data
            .get(self.value_off..self.value_off + self.value_len)
            .unwrap_or(&[])
    }

    fn status(&self) -> Result<()> {
        match &self.err {
            None => Ok(()),
            Some(e) => Err(e.clone()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, Kind};

    fn src() -> Arc<str> {
        Arc::from("test.sst")
    }

    fn ik(k: &str, seq: u64) -> Vec<u8> {
        make_internal_key(k.as_bytes(), seq, Kind::Put)
    }

    #[test]
    fn worked_example_bytes() {
        let mut b = BlockBuilder::new(2);
        b.add(&ik("ab", 1), b"x");
        b.add(&ik("ac", 1), b"y");
        b.add(&ik("b", 1), b"z");
        let data = b.finish().to_vec();
        let t = [1u8, 1, 0, 0, 0, 0, 0, 0];
        let mut want = vec![0u8, 10, 1, b'a', b'b'];
        want.extend_from_slice(&t);
        want.push(b'x');
        want.extend_from_slice(&[1, 9, 1, b'c']);
        want.extend_from_slice(&t);
        want.push(b'y');
        want.extend_from_slice(&[0, 9, 1, b'b']);
        want.extend_from_slice(&t);
        want.push(b'z');
        want.extend_from_slice(&[0, 0, 0, 0, 27, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(data, want);
    }

    #[test]
    fn empty_block_iterates_nothing() {
        let mut b = BlockBuilder::new(16);
        let block = Arc::new(Block::new(b.finish().to_vec(), src(), 0).unwrap());
        let mut it = block.iter();
        it.seek_to_first();
        assert!(!it.valid());
        it.seek_to_last();
        assert!(!it.valid());
        it.seek(&ik("a", 1));
        assert!(!it.valid());
        assert!(it.status().is_ok());
    }

    #[test]
    fn rejects_bad_restarts() {
        for data in [
            vec![],
            vec![1, 0, 0],
            vec![0, 0, 0, 0],                                  // n = 0
            vec![5, 0, 0, 0],                                  // n too large
            vec![1, 0, 0, 0, 1, 0, 0, 0],                      // restart 0 != 0
            vec![9, 9, 9, 0, 0, 0, 0, 9, 0, 0, 0, 2, 0, 0, 0], // restart beyond area
        ] {
            let e = Block::new(data.clone(), src(), 77).unwrap_err();
            match e {
                Error::Corruption { at, .. } => {
                    assert_eq!(at.source, "test.sst");
                    assert_eq!(at.offset, 77);
                }
                e => panic!("{data:?}: {e}"),
            }
        }
    }

    #[test]
    fn malformed_entry_is_corruption_not_panic() {
        let mut b = BlockBuilder::new(16);
        b.add(&ik("abc", 1), b"value");
        b.add(&ik("abd", 1), b"value");
        let mut data = b.finish().to_vec();
        // Second entry: claim it shares 200 bytes.
        let second = 3 + 11 + 5;
        data[second] = 100;
        let block = Arc::new(Block::new(data, src(), 1000).unwrap());
        let mut it = block.iter();
        it.seek_to_first();
        assert!(it.valid());
        it.next();
        assert!(!it.valid());
        match it.status().unwrap_err() {
            Error::Corruption { at, .. } => assert_eq!(at.offset, 1000 + second as u64),
            e => panic!("{e}"),
        }
    }
}
