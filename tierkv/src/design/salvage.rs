//! What each design contributes to `Db::repair` (`db/repair.rs`): the
//! entries its PM structures still hold, found in the region **without the
//! MANIFEST** — by their magic at page starts, checked by their own
//! checksums — dispatched on the preset. Repair merges them with the SSTs,
//! the WALs and the PM WALs (the engine's own, read by `db/repair.rs`) and
//! keeps the newest entry of each key by seqno, so a source may return
//! entries that a newer source shadows, duplicates of entries another
//! source holds (a node linked by several lists, a chunk re-listed under a
//! new table) and versions a compaction had already superseded. What it
//! must never return is an entry that does not verify.
//!
//! | preset | PM structures read |
//! |---|---|
//! | `classic`, `vlsm` | none |
//! | `triangle`, `matrix` | the RowTables ([`super::container::salvage`]) |
//! | `rangetab` | the RangeTab buffers: each chunk that verifies, up to the header's used bytes ([`super::rangetab::salvage`]) |
//! | `nvcache` | the completed NVTables (offset arrays) and the logs (active NVTables; there is no WAL) ([`super::nvcache::salvage`]) |
//! | `tlsm` | every closed persistent skip list, and every persistent buffer no list that opened links ([`super::tlsm::salvage`]) |

use std::sync::Arc;

use crate::iter::InternalIterator;
use crate::key::SeqNo;
use crate::options::Preset;
use crate::storage::PmRegion;

/// The kind of a source repair read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// An SST file.
    Sst,
    /// An SSD WAL file.
    Wal,
    /// A WAL in the PM region (an extent chain).
    PmWal,
    /// A RowTable in the PM region (`triangle`, `matrix`).
    PmRow,
    /// A RangeTab buffer in the PM region (`rangetab`).
    PmRangeTab,
    /// A completed NVTable in the PM region (`nvcache`): an offset array
    /// over nodes in segments.
    NvTable,
    /// An NVTable log in the PM region (`nvcache`): the node list of an
    /// active NVTable, which is the design's write-ahead log.
    NvLog,
    /// A closed persistent skip list in the PM region (`tlsm`).
    PmSkipList,
    /// A persistent buffer no skip list that opened links (`tlsm`).
    PmBuffer,
}

impl SourceKind {
    /// What it is, in words ("table", "WAL", "PM WAL", "PM row",
    /// "RangeTab buffer", "NVTable", "NVTable log", "PM skip list", "PM
    /// buffer").
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Sst => "table",
            SourceKind::Wal => "WAL",
            SourceKind::PmWal => "PM WAL",
            SourceKind::PmRow => "PM row",
            SourceKind::PmRangeTab => "RangeTab buffer",
            SourceKind::NvTable => "NVTable",
            SourceKind::NvLog => "NVTable log",
            SourceKind::PmSkipList => "PM skip list",
            SourceKind::PmBuffer => "PM buffer",
        }
    }
}

/// One PM structure a design found.
pub struct Salvaged {
    /// What it is.
    pub kind: SourceKind,
    /// The region and offset (and the structure's own name or id).
    pub name: String,
    /// Its readable entries in internal-key order, or `None` if it could
    /// not be opened at all (the problems say why). The iterator may end
    /// with an error: repair keeps what came before it and reports it.
    pub entries: Option<Box<dyn InternalIterator>>,
    /// The largest seqno it holds (or claims to: repair continues after
    /// it).
    pub seq_max: SeqNo,
    /// What was skipped or could not be read, each naming the region and
    /// offset. Non-empty marks the source incomplete.
    pub problems: Vec<String>,
}

/// Whether repair can read every PM structure `design` keeps (every
/// design today). A design it could not read would be refused: the
/// rebuilt database references nothing in PM, so its next open would give
/// the unread structures' pages back. A new design answers here when it
/// joins (the match is exhaustive).
pub fn can_salvage(design: Preset) -> bool {
    match design {
        Preset::Classic
        | Preset::Vlsm
        | Preset::Triangle
        | Preset::Matrix
        | Preset::RangeTab
        | Preset::NvCache
        | Preset::Tlsm => true,
    }
}

/// The structures of `design` in `region`, looked for at the starts of
/// `pages` (the allocated pages when the page allocator opens, else every
/// data page).
pub fn salvage_pm(design: Preset, region: &Arc<dyn PmRegion>, pages: &[u64]) -> Vec<Salvaged> {
    match design {
        Preset::Classic | Preset::Vlsm => Vec::new(),
        Preset::Triangle | Preset::Matrix => super::container::salvage::rows(region, pages),
        Preset::RangeTab => super::rangetab::salvage::salvage(region, pages),
        Preset::NvCache => super::nvcache::salvage::salvage(region, pages),
        Preset::Tlsm => super::tlsm::salvage::salvage(region, pages),
    }
}
