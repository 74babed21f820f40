//! The RowTables of `triangle` and `matrix` for `Db::repair`
//! (`design/salvage.rs`): every row whose header is found at a page start
//! and opens, with the entries whose value extent still verifies.

use std::sync::Arc;

use crate::design::salvage::{Salvaged, SourceKind};
use crate::error::Result;
use crate::iter::InternalIterator;
use crate::storage::alloc::PAGE_SIZE_BYTES;
use crate::storage::PmRegion;

use super::rowtable::{self, RowTable};

/// Every RowTable at the start of one of `pages`.
pub fn rows(region: &Arc<dyn PmRegion>, pages: &[u64]) -> Vec<Salvaged> {
    let mut out = Vec::new();
    for &page in pages {
        if region.slice(page * PAGE_SIZE_BYTES, 8).ok() != Some(&rowtable::MAGIC[..]) {
            continue;
        }
        let at = page * PAGE_SIZE_BYTES;
        let mut found = Salvaged {
            kind: SourceKind::PmRow,
            name: format!("{} at offset {at}", region.name()),
            entries: None,
            seq_max: 0,
            problems: Vec::new(),
        };
        let opened = rowtable::read_header(region.as_ref(), page)
            .and_then(|(expect, run)| RowTable::open(Arc::clone(region), run, expect, &[], false));
        let row = match opened {
            Ok(r) => Arc::new(r),
            Err(e) => {
                found.problems.push(format!("PM row at offset {at}: {e}"));
                out.push(found);
                continue;
            }
        };
        found.seq_max = row.seq_max();
        let good: Vec<bool> = row
            .extents()
            .iter()
            .map(|e| {
                region
                    .slice(e.run.first * PAGE_SIZE_BYTES, e.used_bytes as usize)
                    .is_ok_and(|d| crate::coding::crc32c(d) == e.crc)
            })
            .collect();
        let bad = good.iter().filter(|g| !**g).count();
        if bad > 0 {
            found.problems.push(format!(
                "PM row at offset {at}: {bad} of {} value extents fail their checksum (freed after compaction consumed them, or damaged): their entries skipped",
                good.len()
            ));
        }
        found.entries = Some(Box::new(RowSalvage { row, good, pos: 0 }));
        out.push(found);
    }
    out
}

/// The readable entries of a row found in PM: every entry whose value lies
/// in an extent whose checksum verifies (tombstones and empty values have
/// none). Forward only.
struct RowSalvage {
    row: Arc<RowTable>,
    /// Per extent: its checksum verified.
    good: Vec<bool>,
    pos: usize,
}

impl RowSalvage {
    fn readable(&self, i: usize) -> bool {
        if self.row.value_len(i) == 0 {
            return true;
        }
        let e = self
            .row
            .extents()
            .partition_point(|x| x.first_entry as usize <= i);
        e > 0 && self.good.get(e - 1).copied().unwrap_or(false)
    }

    fn skip_unreadable(&mut self) {
        while self.pos < self.row.len() && !self.readable(self.pos) {
            self.pos += 1;
        }
    }
}

impl InternalIterator for RowSalvage {
    fn valid(&self) -> bool {
        self.pos < self.row.len()
    }
    fn seek_to_first(&mut self) {
        self.pos = 0;
        self.skip_unreadable();
    }
    fn seek_to_last(&mut self) {
        self.pos = self.row.len();
    }
    fn seek(&mut self, target: &[u8]) {
        self.pos = self
            .row
            .lower_bound(&rowtable::Probe::internal(target), 0, self.row.len());
        self.skip_unreadable();
    }
    fn next(&mut self) {
        self.pos += 1;
        self.skip_unreadable();
    }
    fn prev(&mut self) {
        self.pos = self.row.len();
    }
    fn key(&self) -> &[u8] {
        self.row.ikey(self.pos)
    }
    fn value(&self) -> &[u8] {
        self.row.value(self.pos)
    }
    fn status(&self) -> Result<()> {
        Ok(())
    }
}
