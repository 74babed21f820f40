//! The iterator and table seams shared by every tier and format.
//!
//! [`InternalIterator`] walks internal keys (see [`crate::key`]) in the
//! engine's order; memtables, SST files, PM tables, the merging iterator and
//! level iterators all implement it, so the read path does not care which
//! tier or format a table uses. [`TableReader`] is the point-lookup side.
//!
//! Error contract (leveldb style): an iterator that hits an I/O error or
//! corrupt data becomes invalid and reports the error from
//! [`InternalIterator::status`]; it never panics.

use std::sync::Arc;

use crate::error::Result;
use crate::key::{Kind, SeqNo};

/// A cursor over internal keys in [`crate::key::compare_internal`] order.
pub trait InternalIterator: Send {
    /// True if positioned on an entry.
    fn valid(&self) -> bool;
    /// Positions at the first entry.
    fn seek_to_first(&mut self);
    /// Positions at the last entry.
    fn seek_to_last(&mut self);
    /// Positions at the first entry `>= target` (an internal key).
    fn seek(&mut self, target: &[u8]);
    /// Moves to the next entry. REQUIRES: `valid()`.
    fn next(&mut self);
    /// Moves to the previous entry. REQUIRES: `valid()`.
    fn prev(&mut self);
    /// The current internal key. REQUIRES: `valid()`.
    fn key(&self) -> &[u8];
    /// The current value. REQUIRES: `valid()`.
    fn value(&self) -> &[u8];
    /// The first error met, if any.
    fn status(&self) -> Result<()>;
}

/// The newest entry of a user key visible at a snapshot, as a table found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Seqno of the entry.
    pub seq: SeqNo,
    /// Put or Delete.
    pub kind: Kind,
    /// The value (empty for a Delete).
    pub value: Vec<u8>,
}

/// Point lookups and iteration over one immutable table of any format.
pub trait TableReader: Send + Sync {
    /// The newest entry for `user_key` with seqno `<= seq`, if the table holds one.
    fn get(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<Found>>;
    /// An iterator over the whole table. `fill_cache`: whether blocks read
    /// by this iterator enter the block cache.
    fn iter(self: Arc<Self>, fill_cache: bool) -> Box<dyn InternalIterator>;
}

/// An iterator over nothing (an empty table, or a failed open carrying its error).
pub struct EmptyIterator(Result<()>);

impl EmptyIterator {
    /// An empty iterator with OK status.
    pub fn new() -> Self {
        EmptyIterator(Ok(()))
    }
    /// An empty iterator that reports `err`.
    pub fn with_error(err: crate::Error) -> Self {
        EmptyIterator(Err(err))
    }
}

impl Default for EmptyIterator {
    fn default() -> Self {
        Self::new()
    }
}

impl InternalIterator for EmptyIterator {
    fn valid(&self) -> bool {
        false
    }
    fn seek_to_first(&mut self) {}
    fn seek_to_last(&mut self) {}
    fn seek(&mut self, _target: &[u8]) {}
    fn next(&mut self) {}
    fn prev(&mut self) {}
    fn key(&self) -> &[u8] {
        &[]
    }
    fn value(&self) -> &[u8] {
        &[]
    }
    fn status(&self) -> Result<()> {
        self.0.clone()
    }
}
