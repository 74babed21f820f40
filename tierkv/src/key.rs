//! Internal keys: a user key tagged with a sequence number and a kind.
//!
//! ```text
//! internal key = user_key ‖ trailer
//! trailer      = u64 little-endian: (seqno << 8) | kind
//!
//! "apple" written at seqno 7 as a value:
//!   61 70 70 6c 65 | 01 07 00 00 00 00 00 00
//! ```
//!
//! Order (every memtable, table and iterator in the engine uses it):
//! 1. user keys ascending, bytewise;
//! 2. for the same user key, seqno *descending* (newest first);
//! 3. for the same seqno, kind descending.
//!
//! Sequence numbers are 56 bits. A reader at snapshot `s` sees, for each
//! user key, the newest entry with `seqno <= s`.

use std::cmp::Ordering;

/// A sequence number: every write gets the next one; 56 bits are usable.
pub type SeqNo = u64;

/// The largest sequence number an entry can carry.
pub const MAX_SEQNO: SeqNo = (1 << 56) - 1;

/// Length of the trailer appended to every user key.
pub const TRAILER_LEN: usize = 8;

/// Longest user key the engine accepts.
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// Longest value the engine accepts.
pub const MAX_VALUE_LEN: usize = 64 * 1024 * 1024;

/// What an entry says about its user key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A tombstone: the key is deleted as of this seqno.
    Delete = 0,
    /// A value.
    Put = 1,
}

impl Kind {
    /// Decodes a kind byte.
    #[inline]
    pub fn from_u8(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Delete),
            1 => Some(Kind::Put),
            _ => None,
        }
    }
    /// The largest kind: used to build seek keys that sort before every
    /// entry with the same user key and seqno.
    pub const MAX: Kind = Kind::Put;
}

/// Packs a seqno and kind into a trailer.
#[inline]
pub fn pack_trailer(seq: SeqNo, kind: Kind) -> u64 {
    debug_assert!(seq <= MAX_SEQNO);
    (seq << 8) | kind as u64
}

/// Appends the internal key for (`user_key`, `seq`, `kind`) to `dst`.
#[inline]
pub fn append_internal_key(dst: &mut Vec<u8>, user_key: &[u8], seq: SeqNo, kind: Kind) {
    dst.extend_from_slice(user_key);
    dst.extend_from_slice(&pack_trailer(seq, kind).to_le_bytes());
}

/// Builds a new internal key.
#[inline]
pub fn make_internal_key(user_key: &[u8], seq: SeqNo, kind: Kind) -> Vec<u8> {
    let mut v = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    append_internal_key(&mut v, user_key, seq, kind);
    v
}

/// The seek key that positions at the newest entry of `user_key` visible at
/// snapshot `seq`.
#[inline]
pub fn seek_key(user_key: &[u8], seq: SeqNo) -> Vec<u8> {
    make_internal_key(user_key, seq, Kind::MAX)
}

/// A decoded internal key borrowing from its encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The user key.
    pub user_key: &'a [u8],
    /// The sequence number.
    pub seq: SeqNo,
    /// The kind.
    pub kind: Kind,
}

/// Decodes an internal key; `None` if it is shorter than a trailer or the
/// kind byte is unknown (the caller reports corruption with a location).
#[inline]
pub fn parse_internal_key(ikey: &[u8]) -> Option<ParsedKey<'_>> {
    let n = ikey.len().checked_sub(TRAILER_LEN)?;
    let mut t = [0u8; 8];
    t.copy_from_slice(&ikey[n..]);
    let trailer = u64::from_le_bytes(t);
    Some(ParsedKey {
        user_key: &ikey[..n],
        seq: trailer >> 8,
        kind: Kind::from_u8(trailer as u8)?,
    })
}

/// A user key's first 8 bytes as a big-endian number, zero-padded. If
/// two keys' numbers differ, they order as the keys do: the first byte
/// where the padded forms differ is either a real byte of both keys, or a
/// pad of the shorter one against a nonzero byte of the longer, which then
/// has the shorter as a prefix. (Equal numbers settle nothing.)
#[inline]
pub fn user_key_prefix(user_key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = user_key.len().min(8);
    b[..n].copy_from_slice(&user_key[..n]);
    u64::from_be_bytes(b)
}

/// The user-key part of an internal key (empty if malformed).
#[inline]
pub fn user_key(ikey: &[u8]) -> &[u8] {
    &ikey[..ikey.len().saturating_sub(TRAILER_LEN)]
}

/// The trailer of an internal key (0 if malformed).
#[inline]
pub fn trailer(ikey: &[u8]) -> u64 {
    match ikey.len().checked_sub(TRAILER_LEN) {
        Some(n) => {
            let mut t = [0u8; 8];
            t.copy_from_slice(&ikey[n..]);
            u64::from_le_bytes(t)
        }
        None => 0,
    }
}

/// Compares two encoded internal keys in the engine's order.
#[inline]
pub fn compare_internal(a: &[u8], b: &[u8]) -> Ordering {
    match user_key(a).cmp(user_key(b)) {
        Ordering::Equal => trailer(b).cmp(&trailer(a)),
        o => o,
    }
}

/// Bytes of an internal key an [`InternalKey`] holds without a heap
/// allocation: a 24-byte user key and its trailer.
pub const INLINE_KEY_BYTES: usize = 32;

/// An owned internal key that orders as [`compare_internal`]; the key type of
/// the memtable skiplist. Keys up to [`INLINE_KEY_BYTES`] live inside the
/// `InternalKey` itself, so a skiplist node holds its key's bytes: an
/// insert makes one allocation fewer and a search step compares against
/// the node it has already loaded. (A search's cost is still the node
/// loads: a `Vec` key's buffer sat next to its node, allocated just
/// before it — README, issue 21.)
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct InternalKey(smallvec::SmallVec<[u8; INLINE_KEY_BYTES]>);

impl InternalKey {
    /// Builds one.
    #[inline]
    pub fn new(user_key: &[u8], seq: SeqNo, kind: Kind) -> Self {
        let mut v = smallvec::SmallVec::with_capacity(user_key.len() + TRAILER_LEN);
        v.extend_from_slice(user_key);
        v.extend_from_slice(&pack_trailer(seq, kind).to_le_bytes());
        InternalKey(v)
    }
    /// The key that positions at the newest entry of `user_key` visible at
    /// snapshot `seq` (as [`seek_key`]).
    #[inline]
    pub fn seek(user_key: &[u8], seq: SeqNo) -> Self {
        Self::new(user_key, seq, Kind::MAX)
    }
    /// The encoding.
    #[inline]
    pub fn encoded(&self) -> &[u8] {
        &self.0
    }
    /// The user key.
    pub fn user_key(&self) -> &[u8] {
        user_key(&self.0)
    }
}

/// A borrowed encoded internal key that orders as [`compare_internal`]:
/// what [`InternalKey`] borrows as, so a skiplist can be searched with an
/// encoding it did not build (`SkipMap::lower_bound(Bound::Included(
/// InternalKeyRef::new(bytes)))`) without copying it.
#[derive(PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct InternalKeyRef([u8]);

impl InternalKeyRef {
    /// Views an encoding as a key.
    #[inline]
    pub fn new(encoded: &[u8]) -> &InternalKeyRef {
        // SAFETY: `InternalKeyRef` is `repr(transparent)` over `[u8]`, so the
        // two references have the same layout and metadata.
        unsafe { &*(encoded as *const [u8] as *const InternalKeyRef) }
    }
}

impl Ord for InternalKeyRef {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        compare_internal(&self.0, &other.0)
    }
}

impl PartialOrd for InternalKeyRef {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::borrow::Borrow<InternalKeyRef> for InternalKey {
    #[inline]
    fn borrow(&self) -> &InternalKeyRef {
        InternalKeyRef::new(&self.0)
    }
}

impl Ord for InternalKey {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        compare_internal(&self.0, &other.0)
    }
}

impl PartialOrd for InternalKey {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for InternalKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match parse_internal_key(&self.0) {
            Some(p) => write!(
                f,
                "{}@{}:{:?}",
                String::from_utf8_lossy(p.user_key),
                p.seq,
                p.kind
            ),
            None => write!(f, "<bad key {:?}>", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_user_key_then_newest_first() {
        let a1 = make_internal_key(b"a", 1, Kind::Put);
        let a2 = make_internal_key(b"a", 2, Kind::Put);
        let a2d = make_internal_key(b"a", 2, Kind::Delete);
        let b0 = make_internal_key(b"b", 0, Kind::Put);
        assert_eq!(compare_internal(&a2, &a1), Ordering::Less);
        assert_eq!(compare_internal(&a2, &a2d), Ordering::Less);
        assert_eq!(compare_internal(&a1, &b0), Ordering::Less);
        assert_eq!(compare_internal(&seek_key(b"a", 2), &a2), Ordering::Equal);
        assert_eq!(compare_internal(&seek_key(b"a", 1), &a2), Ordering::Greater);
        let p = parse_internal_key(&a2d).unwrap();
        assert_eq!((p.user_key, p.seq, p.kind), (&b"a"[..], 2, Kind::Delete));
        assert!(parse_internal_key(b"short").is_none());
    }
}
