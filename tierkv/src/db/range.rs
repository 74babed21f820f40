//! Rust iteration over a database: [`Db::range`] and [`Db::prefix`] return
//! a [`Range`], a double-ended `Iterator<Item = Result<(key, value)>>` over
//! one snapshot, beside the cursor ([`Db::iter`], [`crate::DbIterator`]).
//!
//! A `Range` holds up to two cursors over the same snapshot, created when
//! first needed: one walking forward from the start bound, one backward
//! from the end bound. They never cross: each remembers the last key it
//! yielded, and an end stops at the other's last key, so every key of the
//! range is yielded exactly once however `next` and `next_back` interleave.
//!
//! Bounds are translated to the cursor's `[lower, upper)` form on bytes:
//! `Excluded(k)` as a start and `Included(k)` as an end both become
//! `k ‖ 0x00`, the smallest key after `k`. A prefix `p` is
//! `[p, successor(p))`, where the successor increments the last byte below
//! 0xff after cutting the trailing 0xff bytes (none for an all-0xff or empty
//! prefix: unbounded above).
//!
//! Errors (corruption, I/O) end the iteration: the failing step yields
//! `Some(Err(e))`, and every later call `None`.

use std::iter::FusedIterator;
use std::ops::{Bound, RangeBounds};

use super::{Db, ReadOptions, Snapshot};
use crate::error::Result;
use crate::iter::DbIterator;

/// A double-ended iterator over the keys of a [`Db`] in a range, as of one
/// snapshot (see [`Db::range`]). Items are `Result<(key, value)>`.
pub struct Range<'a> {
    db: &'a Db,
    opts: ReadOptions,
    front: Option<DbIterator>,
    back: Option<DbIterator>,
    /// The last key `next` yielded.
    front_key: Option<Vec<u8>>,
    /// The last key `next_back` yielded.
    back_key: Option<Vec<u8>>,
    done: bool,
}

impl std::fmt::Debug for Range<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Range")
            .field("lower", &self.opts.lower_bound)
            .field("upper", &self.opts.upper_bound)
            .field("snapshot", &self.opts.snapshot)
            .field("done", &self.done)
            .finish()
    }
}

/// `k ‖ 0x00`: the smallest key after `k`.
fn after(k: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(k.len() + 1);
    v.extend_from_slice(k);
    v.push(0);
    v
}

/// The smallest key greater than every key starting with `prefix`, if any.
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let end = prefix.iter().rposition(|&b| b != 0xff)?;
    let mut v = prefix[..=end].to_vec();
    v[end] += 1;
    Some(v)
}

impl<'a> Range<'a> {
    fn new(db: &'a Db, lower: Option<Vec<u8>>, upper: Option<Vec<u8>>) -> Range<'a> {
        let done = matches!((&lower, &upper), (Some(l), Some(u)) if l >= u);
        Range {
            db,
            opts: ReadOptions {
                // Pinned now: both ends read the state of this call.
                snapshot: Some(db.snapshot()),
                lower_bound: lower,
                upper_bound: upper,
                skip_cache: false,
            },
            front: None,
            back: None,
            front_key: None,
            back_key: None,
            done,
        }
    }

    /// Reads as of `snapshot` instead of the state when the range was made.
    /// Call it before the first `next` / `next_back` (a cursor already
    /// open keeps its snapshot).
    pub fn at(mut self, snapshot: &Snapshot) -> Self {
        self.opts.snapshot = Some(snapshot.clone());
        self
    }

    /// Keeps the blocks this iteration reads out of the block cache (a
    /// one-off scan that should not evict the working set). Before the
    /// first step, as [`Range::at`].
    pub fn skip_cache(mut self) -> Self {
        self.opts.skip_cache = true;
        self
    }

    /// Ends the iteration with `e` (yielded once).
    fn fail(&mut self, e: crate::Error) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        self.done = true;
        Some(Err(e))
    }
}

impl Iterator for Range<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match &mut self.front {
            Some(it) => it.next(),
            None => match self.db.iter(self.opts.clone()) {
                Ok(mut it) => {
                    it.seek_to_first();
                    self.front = Some(it);
                }
                Err(e) => return self.fail(e),
            },
        }
        let it = self.front.as_ref()?;
        if !it.valid() {
            let status = it.status();
            self.done = true;
            return status.err().map(Err);
        }
        if self.back_key.as_deref().is_some_and(|b| it.key() >= b) {
            self.done = true;
            return None;
        }
        let item = (it.key().to_vec(), it.value().to_vec());
        self.front_key = Some(item.0.clone());
        Some(Ok(item))
    }
}

impl DoubleEndedIterator for Range<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match &mut self.back {
            Some(it) => it.prev(),
            None => match self.db.iter(self.opts.clone()) {
                Ok(mut it) => {
                    it.seek_to_last();
                    self.back = Some(it);
                }
                Err(e) => return self.fail(e),
            },
        }
        let it = self.back.as_ref()?;
        if !it.valid() {
            let status = it.status();
            self.done = true;
            return status.err().map(Err);
        }
        if self.front_key.as_deref().is_some_and(|f| it.key() <= f) {
            self.done = true;
            return None;
        }
        let item = (it.key().to_vec(), it.value().to_vec());
        self.back_key = Some(item.0.clone());
        Some(Ok(item))
    }
}

impl FusedIterator for Range<'_> {}

impl Db {
    /// The keys in `range`, in order, as a double-ended iterator of
    /// `Result<(key, value)>` over the state at this call (a snapshot is
    /// pinned until the `Range` is dropped). Any `RangeBounds` of byte
    /// strings: `..`, `a..b`, `a..=b`, `a..`, `(Bound::Excluded(a),
    /// Bound::Unbounded)`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let db = tierkv::Db::open(dir.path(), tierkv::Options::default())?;
    /// for k in ["apple", "banana", "cherry", "date"] {
    ///     db.put(k.as_bytes(), b"fruit")?;
    /// }
    /// let keys: Vec<Vec<u8>> = db
    ///     .range("banana".as_bytes().."date".as_bytes())
    ///     .map(|r| r.map(|(k, _)| k))
    ///     .collect::<tierkv::Result<_>>()?;
    /// assert_eq!(keys, [b"banana".to_vec(), b"cherry".to_vec()]);
    ///
    /// // Double-ended: the last two keys, newest-last order reversed.
    /// let last: Vec<_> = db.range::<&[u8], _>(..).rev().take(2).collect::<tierkv::Result<_>>()?;
    /// assert_eq!(last[0].0, b"date");
    /// assert_eq!(last[1].0, b"cherry");
    /// # Ok(()) }
    /// ```
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Range<'_> {
        let lower = match range.start_bound() {
            Bound::Included(k) => Some(k.as_ref().to_vec()),
            Bound::Excluded(k) => Some(after(k.as_ref())),
            Bound::Unbounded => None,
        };
        let upper = match range.end_bound() {
            Bound::Included(k) => Some(after(k.as_ref())),
            Bound::Excluded(k) => Some(k.as_ref().to_vec()),
            Bound::Unbounded => None,
        };
        Range::new(self, lower, upper)
    }

    /// The keys that start with `prefix`, as [`Db::range`] does.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let db = tierkv::Db::open(dir.path(), tierkv::Options::default())?;
    /// db.put(b"user:1:name", b"ada")?;
    /// db.put(b"user:1:mail", b"ada@example.org")?;
    /// db.put(b"user:2:name", b"bob")?;
    /// let user1: Vec<_> = db.prefix(b"user:1:").collect::<tierkv::Result<_>>()?;
    /// assert_eq!(user1.len(), 2);
    /// assert_eq!(user1[0], (b"user:1:mail".to_vec(), b"ada@example.org".to_vec()));
    /// // Newest user first:
    /// let (k, _) = db.prefix(b"user:").next_back().expect("a user")?;
    /// assert_eq!(k, b"user:2:name");
    /// # Ok(()) }
    /// ```
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Range<'_> {
        let p = prefix.as_ref();
        Range::new(self, Some(p.to_vec()), prefix_successor(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_successors() {
        assert_eq!(prefix_successor(b"abc"), Some(b"abd".to_vec()));
        assert_eq!(prefix_successor(b"ab\xff\xff"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
        assert_eq!(prefix_successor(b""), None);
        assert_eq!(after(b"k"), b"k\0".to_vec());
    }
}
