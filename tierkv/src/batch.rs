//! `WriteBatch`: writes applied atomically, and the WAL payload.
//!
//! ```text
//! batch  = seqno u64le ‖ count u32le ‖ record*
//! record = kind u8 ‖ varint key_len ‖ key ‖ (varint value_len ‖ value, if kind = Put)
//!
//! put("k","v") at seqno 5:
//!   05 00 00 00 00 00 00 00 | 01 00 00 00 | 01 01 6b 01 76
//! ```
//!
//! The engine stamps the first seqno when the batch is committed; record `i`
//! gets `seqno + i`. A batch is one WAL record, so it is applied whole or
//! not at all after a crash.

use crate::coding::{put_length_prefixed, Reader};
use crate::error::{Error, Result};
use crate::key::{Kind, SeqNo, MAX_KEY_LEN, MAX_VALUE_LEN};

/// Size of the batch header (seqno + count).
pub const HEADER_LEN: usize = 12;

/// A set of puts and deletes applied atomically.
#[derive(Clone, PartialEq, Eq)]
pub struct WriteBatch {
    rep: Vec<u8>,
    /// Key + value bytes (the "user bytes" of the batch).
    user_bytes: u64,
}

impl Default for WriteBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for WriteBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBatch")
            .field("count", &self.count())
            .field("bytes", &self.rep.len())
            .finish()
    }
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        WriteBatch {
            rep: vec![0; HEADER_LEN],
            user_bytes: 0,
        }
    }

    /// An empty batch with room for `bytes` of records.
    pub fn with_capacity(bytes: usize) -> Self {
        let mut rep = Vec::with_capacity(HEADER_LEN + bytes);
        rep.resize(HEADER_LEN, 0);
        WriteBatch { rep, user_bytes: 0 }
    }

    /// Adds a put.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.rep.push(Kind::Put as u8);
        put_length_prefixed(&mut self.rep, key);
        put_length_prefixed(&mut self.rep, value);
        self.user_bytes += (key.len() + value.len()) as u64;
        self.set_count(self.count() + 1);
        self
    }

    /// Adds a delete.
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.rep.push(Kind::Delete as u8);
        put_length_prefixed(&mut self.rep, key);
        self.user_bytes += key.len() as u64;
        self.set_count(self.count() + 1);
        self
    }

    /// Removes every record.
    pub fn clear(&mut self) {
        self.rep.truncate(HEADER_LEN);
        self.rep[..HEADER_LEN].fill(0);
        self.user_bytes = 0;
    }

    /// Number of records.
    pub fn count(&self) -> u32 {
        u32::from_le_bytes([self.rep[8], self.rep[9], self.rep[10], self.rep[11]])
    }

    /// True if the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    fn set_count(&mut self, n: u32) {
        self.rep[8..12].copy_from_slice(&n.to_le_bytes());
    }

    /// The first seqno (set by the engine at commit).
    pub fn seqno(&self) -> SeqNo {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.rep[..8]);
        u64::from_le_bytes(b)
    }

    /// Stamps the first seqno.
    pub(crate) fn set_seqno(&mut self, seq: SeqNo) {
        self.rep[..8].copy_from_slice(&seq.to_le_bytes());
    }

    /// Key + value bytes of all records.
    pub fn user_bytes(&self) -> u64 {
        self.user_bytes
    }

    /// The encoding (the WAL payload).
    pub fn encoded(&self) -> &[u8] {
        &self.rep
    }

    /// Appends every record of `other` (used by group commit).
    pub(crate) fn append(&mut self, other: &WriteBatch) {
        self.rep.extend_from_slice(&other.rep[HEADER_LEN..]);
        self.user_bytes += other.user_bytes;
        self.set_count(self.count() + other.count());
    }

    /// Checks caller-supplied keys and values against the engine's limits.
    pub(crate) fn validate(&self) -> Result<()> {
        for r in self.iter() {
            let (_, key, value) = r?;
            if key.len() > MAX_KEY_LEN {
                return Err(Error::InvalidArgument(format!(
                    "key of {} bytes exceeds the maximum of {MAX_KEY_LEN}",
                    key.len()
                )));
            }
            if value.len() > MAX_VALUE_LEN {
                return Err(Error::InvalidArgument(format!(
                    "value of {} bytes exceeds the maximum of {MAX_VALUE_LEN}",
                    value.len()
                )));
            }
        }
        Ok(())
    }

    /// Decodes a batch read back from a WAL; `source`/`offset` name where it
    /// came from for the corruption error.
    pub fn decode(rep: Vec<u8>, source: &str, offset: u64) -> Result<WriteBatch> {
        if rep.len() < HEADER_LEN {
            return Err(Error::corruption(
                source,
                offset,
                "write batch shorter than its header",
            ));
        }
        let mut b = WriteBatch { rep, user_bytes: 0 };
        let mut n = 0u32;
        let mut user = 0u64;
        for r in b.iter() {
            let (_, k, v) = r.map_err(|_| {
                Error::corruption(source, offset, "malformed record in write batch")
            })?;
            n += 1;
            user += (k.len() + v.len()) as u64;
        }
        if n != b.count() {
            return Err(Error::corruption(
                source,
                offset,
                format!("write batch says {} records, holds {n}", b.count()),
            ));
        }
        b.user_bytes = user;
        Ok(b)
    }

    /// Iterates `(kind, key, value)`; a malformed record yields an error.
    pub fn iter(&self) -> BatchIter<'_> {
        BatchIter {
            r: Reader::new(&self.rep[HEADER_LEN..]),
        }
    }
}

/// Iterator over a batch's records.
pub struct BatchIter<'a> {
    r: Reader<'a>,
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<(Kind, &'a [u8], &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.r.is_empty() {
            return None;
        }
        let bad = || Error::corruption("write batch", 0, "malformed record");
        let rec = (|| {
            let kind = Kind::from_u8(self.r.u8()?)?;
            let key = self.r.length_prefixed()?;
            let value = match kind {
                Kind::Put => self.r.length_prefixed()?,
                Kind::Delete => &[][..],
            };
            Some((kind, key, value))
        })();
        match rec {
            Some(r) => Some(Ok(r)),
            None => {
                // Stop after the first malformed record.
                self.r = Reader::new(&[]);
                Some(Err(bad()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_append() {
        let mut a = WriteBatch::new();
        a.put(b"k", b"v").delete(b"d");
        let mut b = WriteBatch::new();
        b.put(b"x", b"yy");
        a.append(&b);
        a.set_seqno(42);
        let d = WriteBatch::decode(a.encoded().to_vec(), "t", 0).unwrap();
        assert_eq!(d.seqno(), 42);
        assert_eq!(d.count(), 3);
        assert_eq!(d.user_bytes(), a.user_bytes());
        let recs: Vec<_> = d.iter().map(|r| r.unwrap()).collect();
        assert_eq!(recs[1], (Kind::Delete, &b"d"[..], &b""[..]));
        assert_eq!(recs[2], (Kind::Put, &b"x"[..], &b"yy"[..]));
    }

    #[test]
    fn garbage_is_corruption() {
        let mut a = WriteBatch::new();
        a.put(b"key", b"value");
        let mut enc = a.encoded().to_vec();
        enc.truncate(enc.len() - 2);
        assert!(WriteBatch::decode(enc, "t", 7).unwrap_err().is_corruption());
        assert!(WriteBatch::decode(vec![1, 2], "t", 0).is_err());
    }
}
