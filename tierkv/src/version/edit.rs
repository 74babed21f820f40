//! `VersionEdit`: one atomic change to the set of tables, appended to the
//! MANIFEST as one WAL-format record. (Codec: see `encode`/`decode`.)

use crate::key::SeqNo;
use crate::stats::Tier;

/// The on-disk/on-PM format of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableFormat {
    /// An SST file (docs/format/sst.md).
    Sst,
    /// A TriangleKV/MatrixKV RowTable in PM.
    RowTable,
    /// A RangeKV RangeTab chunk set in PM.
    RangeTab,
    /// An NV-Cache NVTable in PM.
    NvTable,
    /// A TLSM persistent skip list in PM.
    PmSkipList,
}

impl TableFormat {
    /// The byte stored in the manifest.
    pub fn to_u8(self) -> u8 {
        match self {
            TableFormat::Sst => 0,
            TableFormat::RowTable => 1,
            TableFormat::RangeTab => 2,
            TableFormat::NvTable => 3,
            TableFormat::PmSkipList => 4,
        }
    }
    /// Decodes the manifest byte.
    pub fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            0 => TableFormat::Sst,
            1 => TableFormat::RowTable,
            2 => TableFormat::RangeTab,
            3 => TableFormat::NvTable,
            4 => TableFormat::PmSkipList,
            _ => return None,
        })
    }
}

/// A run of contiguous PM pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageRun {
    /// First page number.
    pub first: u64,
    /// Number of pages.
    pub count: u64,
}

/// Everything the manifest records about one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMeta {
    /// Unique id (also the SST file number).
    pub id: u64,
    /// Tier the table lives in.
    pub tier: Tier,
    /// Its format.
    pub format: TableFormat,
    /// Bytes it occupies.
    pub size_bytes: u64,
    /// Smallest internal key.
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
    /// Smallest seqno in the table.
    pub seq_min: SeqNo,
    /// Largest seqno in the table.
    pub seq_max: SeqNo,
    /// Number of entries.
    pub entries: u64,
    /// Number of tombstones.
    pub deletions: u64,
    /// PM pages the table owns (empty for SSD tables).
    pub pm_pages: Vec<PageRun>,
}

/// A WAL that lives in PM, found by the offset of its first extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmWal {
    /// The log number.
    pub log_number: u64,
    /// Byte offset of the first extent in the PM region.
    pub first_extent: u64,
}

/// One atomic change to the version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionEdit {
    /// WALs with a number below this are obsolete (their data is in tables).
    pub log_number: Option<u64>,
    /// The next file/table number to hand out.
    pub next_file_number: Option<u64>,
    /// The last sequence number used.
    pub last_seqno: Option<SeqNo>,
    /// Per-level compaction cursor: `(level, internal key)`.
    pub compact_cursors: Vec<(u32, Vec<u8>)>,
    /// Tables removed: `(level, id)`.
    pub deleted_tables: Vec<(u32, u64)>,
    /// Tables added: `(level, meta)`.
    pub new_tables: Vec<(u32, TableMeta)>,
    /// WALs placed in PM that recovery must replay.
    pub new_pm_wals: Vec<PmWal>,
    /// PM WALs no longer needed.
    pub deleted_pm_wals: Vec<u64>,
    /// Design-specific state (e.g. consumed key ranges of a RowTable):
    /// `(tag, bytes)`, opaque to the version set, interpreted by the design.
    pub design_records: Vec<(u32, Vec<u8>)>,
}
