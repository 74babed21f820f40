//! The L0 of a version read as RangeTabs (`TableContext::level_view`):
//! a point read routes its key by the boundaries to one RangeTab and
//! searches that RangeTab's buffers newest first, each buffer's chunks
//! newest first (hash index, or binary search); an iterator visits the
//! RangeTabs in key order, merging the chunks of one RangeTab at a time.
//!
//! Built for every version, so building only groups nothing: the tables
//! are grouped by RangeTab on the first read (`OnceLock`).
//!
//! Why newest first is right: a RangeTab's buffers hold disjoint,
//! ordered seqno ranges (the older buffer was sealed before the younger
//! one took a chunk: layout.rs invariant 3), and a buffer's chunks are in
//! flush order.

use std::sync::{Arc, OnceLock};

use super::buffer::{BufferReader, Readers};
use super::layout::Layout;
use crate::error::{Error, Result};
use crate::iter::{EmptyIterator, Found, InternalIterator, MergingIterator, TableReader};
use crate::key::{self, SeqNo};
use crate::version::TableHandle;

/// One table of a view and its reader, resolved on first use (an error,
/// e.g. a corrupt chunk, fails the reads of this RangeTab only).
struct Slot {
    table: Arc<TableHandle>,
    reader: OnceLock<std::result::Result<Arc<BufferReader>, Error>>,
}

impl Slot {
    fn reader(&self, readers: &Readers) -> Result<&Arc<BufferReader>> {
        match self.reader.get_or_init(|| readers.get(&self.table.meta)) {
            Ok(r) => Ok(r),
            Err(e) => Err(e.clone()),
        }
    }
}

/// The tables of one RangeTab, newest first.
struct Group {
    r: u32,
    tables: Vec<Slot>,
}

/// L0 of one version.
pub struct L0View {
    layout: Arc<Layout>,
    tables: Vec<Arc<TableHandle>>,
    readers: Arc<Readers>,
    groups: OnceLock<std::result::Result<Vec<Group>, Error>>,
}

impl L0View {
    /// The view of `tables` (a version's L0, newest first).
    pub fn new(
        layout: Arc<Layout>,
        tables: Vec<Arc<TableHandle>>,
        readers: Arc<Readers>,
    ) -> L0View {
        L0View {
            layout,
            tables,
            readers,
            groups: OnceLock::new(),
        }
    }

    fn groups(&self) -> Result<&[Group]> {
        let g = self.groups.get_or_init(|| {
            let mut groups: Vec<Group> = Vec::new();
            for t in &self.tables {
                let r = t
                    .meta
                    .pm_pages
                    .first()
                    .and_then(|run| self.layout.locate(run.first))
                    .map(|(r, _)| r)
                    .ok_or_else(|| {
                        Error::corruption(
                            "MANIFEST",
                            0,
                            format!("L0 table {} is not a RangeTab buffer", t.meta.id),
                        )
                    })?;
                let slot = Slot {
                    table: Arc::clone(t),
                    reader: OnceLock::new(),
                };
                match groups.iter_mut().find(|g| g.r == r) {
                    Some(g) => g.tables.push(slot),
                    None => groups.push(Group {
                        r,
                        tables: vec![slot],
                    }),
                }
            }
            groups.sort_by_key(|g| g.r);
            for g in &mut groups {
                g.tables
                    .sort_by_key(|s| std::cmp::Reverse(s.table.meta.seq_max));
            }
            Ok(groups)
        });
        match g {
            Ok(g) => Ok(g),
            Err(e) => Err(e.clone()),
        }
    }

    /// A merge of the chunks of group `i`.
    fn group_iter(&self, i: usize) -> Box<dyn InternalIterator> {
        let groups = match self.groups() {
            Ok(g) => g,
            Err(e) => return Box::new(EmptyIterator::with_error(e)),
        };
        let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
        for s in &groups[i].tables {
            match s.reader(&self.readers) {
                Ok(r) => r.add_iterators(&mut children),
                Err(e) => return Box::new(EmptyIterator::with_error(e)),
            }
        }
        Box::new(MergingIterator::new(children))
    }
}

impl TableReader for L0View {
    fn get(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<Found>> {
        let groups = self.groups()?;
        let r = self.layout.route(user_key);
        let Ok(i) = groups.binary_search_by_key(&r, |g| g.r) else {
            return Ok(None);
        };
        for s in &groups[i].tables {
            if s.table.meta.seq_min > seq {
                continue;
            }
            if let Some(f) = s.reader(&self.readers)?.find(user_key, seq) {
                return Ok(Some(f));
            }
        }
        Ok(None)
    }

    fn iter(self: Arc<Self>, _fill_cache: bool) -> Box<dyn InternalIterator> {
        Box::new(L0Iter {
            view: self,
            index: 0,
            cur: None,
            err: None,
        })
    }
}

/// The RangeTabs of a view in key order, one merged RangeTab at a time.
struct L0Iter {
    view: Arc<L0View>,
    index: usize,
    cur: Option<Box<dyn InternalIterator>>,
    err: Option<Error>,
}

impl L0Iter {
    fn count(&self) -> usize {
        self.view.groups().map_or(0, |g| g.len())
    }

    fn open(&mut self, index: usize) {
        if let Some(Err(e)) = self.cur.as_ref().map(|c| c.status()) {
            self.err.get_or_insert(e);
        }
        if let Err(e) = self.view.groups() {
            self.err.get_or_insert(e);
            self.cur = None;
            return;
        }
        self.index = index;
        self.cur = (index < self.count()).then(|| self.view.group_iter(index));
    }

    fn skip_forward(&mut self) {
        while self.cur.as_ref().is_some_and(|c| !c.valid()) {
            if let Some(Err(e)) = self.cur.as_ref().map(|c| c.status()) {
                self.err.get_or_insert(e);
                self.cur = None;
                return;
            }
            if self.index + 1 >= self.count() {
                self.cur = None;
                return;
            }
            self.open(self.index + 1);
            if let Some(c) = &mut self.cur {
                c.seek_to_first();
            }
        }
    }

    fn skip_backward(&mut self) {
        while self.cur.as_ref().is_some_and(|c| !c.valid()) {
            if let Some(Err(e)) = self.cur.as_ref().map(|c| c.status()) {
                self.err.get_or_insert(e);
                self.cur = None;
                return;
            }
            if self.index == 0 {
                self.cur = None;
                return;
            }
            self.open(self.index - 1);
            if let Some(c) = &mut self.cur {
                c.seek_to_last();
            }
        }
    }
}

impl InternalIterator for L0Iter {
    fn valid(&self) -> bool {
        self.cur.as_ref().is_some_and(|c| c.valid())
    }
    fn seek_to_first(&mut self) {
        self.open(0);
        if let Some(c) = &mut self.cur {
            c.seek_to_first();
        }
        self.skip_forward();
    }
    fn seek_to_last(&mut self) {
        self.open(self.count().saturating_sub(1));
        if let Some(c) = &mut self.cur {
            c.seek_to_last();
        }
        self.skip_backward();
    }
    fn seek(&mut self, target: &[u8]) {
        let r = self.view.layout.route(key::user_key(target));
        let i = match self.view.groups() {
            Ok(g) => g.partition_point(|g| g.r < r),
            Err(e) => {
                self.err.get_or_insert(e);
                self.cur = None;
                return;
            }
        };
        if i >= self.count() {
            self.cur = None;
            return;
        }
        if self.index != i || self.cur.is_none() {
            self.open(i);
        }
        if let Some(c) = &mut self.cur {
            c.seek(target);
        }
        self.skip_forward();
    }
    fn next(&mut self) {
        if let Some(c) = &mut self.cur {
            c.next();
        }
        self.skip_forward();
    }
    fn prev(&mut self) {
        if let Some(c) = &mut self.cur {
            c.prev();
        }
        self.skip_backward();
    }
    fn key(&self) -> &[u8] {
        self.cur.as_ref().map_or(&[], |c| c.key())
    }
    fn value(&self) -> &[u8] {
        self.cur.as_ref().map_or(&[], |c| c.value())
    }
    fn status(&self) -> Result<()> {
        if let Some(e) = &self.err {
            return Err(e.clone());
        }
        self.cur.as_ref().map_or(Ok(()), |c| c.status())
    }
}
