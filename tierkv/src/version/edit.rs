//! `VersionEdit`: one atomic change to the set of tables, appended to the
//! MANIFEST as one WAL-format record; and the CURRENT file that names the
//! live MANIFEST. Full description: `docs/format/manifest.md`.
//!
//! # Byte layout of an edit
//!
//! A sequence of fields, each a varint *tag* followed by the field; fields
//! may come in any order, scalar fields at most once, list fields once per
//! element (in list order).
//!
//! ```text
//! tag  field               body
//!  1   log_number          varint
//!  2   next_file_number    varint
//!  3   last_seqno          varint (<= MAX_SEQNO)
//!  4   compact_cursor      varint level, varint len, key bytes
//!  5   deleted_table       varint level, varint id
//!  6   new_table           varint level, varint len, table body (below)
//!  7   new_pm_wal          varint log_number, varint first_extent
//!  8   deleted_pm_wal      varint log_number
//!  9   design_record       varint design tag, varint len, bytes
//! 10   region              varint region id (< REGION_LIMIT): starts a
//!                          region section (below)
//! 11   region_layout       varint count, varint n, n × (varint len, key)
//! 0x2001 identity          varint len, identity fields (below); safe to
//!                          ignore (an older reader skips it)
//!  tags with bit 0x2000 set: varint len, bytes — skipped by a reader that
//!  does not know the tag (safe-to-ignore); any other unknown tag is
//!  corruption.
//!
//! table body (must be consumed exactly):
//!  varint id | u8 tier (0 pm, 1 ssd) | u8 format | varint size_bytes |
//!  varint len, smallest | varint len, largest | varint seq_min |
//!  varint seq_max | varint entries | varint deletions |
//!  varint run_count, run_count × (varint first_page, varint page_count)
//!
//! identity fields (each at most once; unknown ones are skipped, so fields
//! can be added):
//!  (varint field, varint len, bytes)*   field 1: design preset name (UTF-8)
//!                                        field 2: database id (u64le)
//!                                        field 3: PM region id, size (2 × u64le)
//! ```
//!
//! The identity says what created the database, so tools can open it
//! without being told ([`DbIdentity`]); it is written at create and in the
//! snapshot record of every later manifest.
//!
//! ```text
//! identity of a `triangle` database:
//!   81 40 0a 01 08 74 72 69 61 6e 67 6c 65
//!   tag 0x2001 | 10 bytes | field 1, 8 bytes, "triangle"
//! ```
//!
//! Levels are below [`LEVEL_LIMIT`]; `smallest`/`largest` are valid internal
//! keys and `seq_min <= seq_max <= MAX_SEQNO`; a page run has a non-zero
//! count. [`VersionEdit::encode`] requires these (checked with
//! `debug_assert!`), [`VersionEdit::decode`] verifies them.
//!
//! Worked example: `log_number = 7, next_file_number = 300` encodes as
//! `01 07 02 ac 02`.
//!
//! # Regions
//!
//! A database with `Options::regions` = N > 1 keeps N LSMs in one manifest.
//! An edit belongs to one region ([`VersionEdit::region`]); its tables,
//! cursors, design records and `log_number` are that region's. A manifest
//! record holds one *group* of edits applied atomically (a flush, or the
//! replay at open that adds tables to every region at once): the group's
//! encodings are concatenated, and every edit but a leading region-0 one
//! starts with tag 10. So tag 10 as the first field sets the region of the
//! first edit, and anywhere else starts the next edit of the group. A
//! record without tag 10 is one region-0 edit, byte for byte the encoding
//! of a database without regions.
//!
//! `region_layout` (snapshot records of databases with N > 1 only) records
//! how keys are routed, so that opening with other settings is refused:
//! N, then the N − 1 range boundaries (n = 0: hash routing).
//!
//! ```text
//! group [region 0: log 9] [region 2: deleted table L0 #14]:
//!   01 09 | 0a 02 05 00 0e
//! ```
//!
//! # CURRENT
//!
//! Two text lines: the live manifest's file name and the crc32c of that
//! name (the bytes before the first newline) as 8 lowercase hex digits:
//! `MANIFEST-000005\ncrc32c:b949be95\n` ([`encode_current`],
//! [`decode_current`]). It is written to `CURRENT.tmp`, synced, renamed to
//! `CURRENT` and the directory synced.
//!
//! # Concurrency
//!
//! Plain values; the codec is pure.

use crate::coding::{put_length_prefixed, put_varint, Reader};
use crate::error::{Error, Result};
use crate::key::{parse_internal_key, SeqNo, MAX_SEQNO};
use crate::stats::Tier;
use crate::storage::alloc::PageRun;

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
    /// The region (LSM) the edit changes; 0 without regions.
    pub region: u32,
    /// How keys are routed to regions (snapshots of databases with more
    /// than one region).
    pub region_layout: Option<RegionLayout>,
    /// What the database is (snapshot records of databases created since
    /// the record exists).
    pub identity: Option<DbIdentity>,
}

/// What created a database, recorded in the manifest (tag 0x2001) so that a
/// tool can open it without being told. Extensible: each field is tagged,
/// and a reader skips fields it does not know.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DbIdentity {
    /// The design preset's name (`Preset::name`), e.g. `"triangle"`.
    pub design: Option<String>,
    /// A random id of the database, chosen when it was created (or first
    /// opened by a build that records it); a PM region records it as its
    /// owner.
    pub db_id: Option<u64>,
    /// The PM region the database keeps data in: its id (the region's own
    /// identity block) and size; `None` without a PM tier.
    pub pm_region: Option<PmRegionRef>,
}

/// Which PM region a database uses (identity field 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmRegionRef {
    /// The region's id (`storage::alloc::RegionIdentity::region_id`).
    pub region_id: u64,
    /// Its size in bytes.
    pub size_bytes: u64,
}

impl DbIdentity {
    /// The identity of a database created with `design`.
    pub fn for_design(design: crate::options::Preset) -> DbIdentity {
        DbIdentity {
            design: Some(design.name().to_string()),
            ..DbIdentity::default()
        }
    }

    /// True if no field is set (nothing to record).
    pub fn is_empty(&self) -> bool {
        self.design.is_none() && self.db_id.is_none() && self.pm_region.is_none()
    }

    /// The design as a preset, if recorded and known to this build.
    pub fn preset(&self) -> Option<crate::options::Preset> {
        self.design
            .as_deref()
            .and_then(crate::options::Preset::from_name)
    }

    fn encode_body(&self, dst: &mut Vec<u8>) {
        if let Some(d) = &self.design {
            put_varint(dst, identity_field::DESIGN);
            put_length_prefixed(dst, d.as_bytes());
        }
        if let Some(id) = self.db_id {
            put_varint(dst, identity_field::DB_ID);
            put_length_prefixed(dst, &id.to_le_bytes());
        }
        if let Some(r) = self.pm_region {
            let mut b = r.region_id.to_le_bytes().to_vec();
            b.extend_from_slice(&r.size_bytes.to_le_bytes());
            put_varint(dst, identity_field::PM_REGION);
            put_length_prefixed(dst, &b);
        }
    }

    fn decode_body(body: &[u8]) -> std::result::Result<DbIdentity, String> {
        let mut r = Reader::new(body);
        let mut id = DbIdentity::default();
        while !r.is_empty() {
            let field = r.varint().ok_or("truncated identity field")?;
            let value = r.length_prefixed().ok_or("truncated identity field")?;
            let u64_at = |b: &[u8], at: usize| -> Option<u64> {
                Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
            };
            match field {
                identity_field::DESIGN => {
                    let name =
                        std::str::from_utf8(value).map_err(|_| "design name is not UTF-8")?;
                    if id.design.replace(name.to_string()).is_some() {
                        return Err("identity names the design twice".into());
                    }
                }
                identity_field::DB_ID => {
                    let v = u64_at(value, 0)
                        .filter(|_| value.len() == 8)
                        .ok_or("database id is not 8 bytes")?;
                    if id.db_id.replace(v).is_some() {
                        return Err("identity names the database id twice".into());
                    }
                }
                identity_field::PM_REGION => {
                    let r = (value.len() == 16)
                        .then(|| Some((u64_at(value, 0)?, u64_at(value, 8)?)))
                        .flatten()
                        .ok_or("PM region reference is not 16 bytes")?;
                    let r = PmRegionRef {
                        region_id: r.0,
                        size_bytes: r.1,
                    };
                    if id.pm_region.replace(r).is_some() {
                        return Err("identity names the PM region twice".into());
                    }
                }
                _ => {}
            }
        }
        Ok(id)
    }
}

mod identity_field {
    pub const DESIGN: u64 = 1;
    pub const DB_ID: u64 = 2;
    pub const PM_REGION: u64 = 3;
}

/// How a database splits its keys into regions (recorded in the manifest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegionLayout {
    /// Number of regions.
    pub count: u32,
    /// The `count - 1` sorted split keys of range routing; empty: hash routing.
    pub boundaries: Vec<Vec<u8>>,
}

/// Region ids are below this (`Options::regions` is at most 256).
pub const REGION_LIMIT: u32 = 256;

/// Levels recorded in a manifest are below this.
pub const LEVEL_LIMIT: u32 = 64;

/// Tags with this bit set carry a length-prefixed body and are skipped by
/// readers that do not know them.
pub const TAG_SAFE_TO_IGNORE: u64 = 0x2000;

mod tag {
    pub const LOG_NUMBER: u64 = 1;
    pub const NEXT_FILE_NUMBER: u64 = 2;
    pub const LAST_SEQNO: u64 = 3;
    pub const COMPACT_CURSOR: u64 = 4;
    pub const DELETED_TABLE: u64 = 5;
    pub const NEW_TABLE: u64 = 6;
    pub const NEW_PM_WAL: u64 = 7;
    pub const DELETED_PM_WAL: u64 = 8;
    pub const DESIGN_RECORD: u64 = 9;
    pub const REGION: u64 = 10;
    pub const REGION_LAYOUT: u64 = 11;
    /// Safe to ignore (bit 0x2000): an older reader opens the database as
    /// it did before the record existed.
    pub const IDENTITY: u64 = super::TAG_SAFE_TO_IGNORE | 1;
}

fn tier_to_u8(t: Tier) -> u8 {
    match t {
        Tier::Pm => 0,
        Tier::Ssd => 1,
    }
}

fn tier_from_u8(b: u8) -> Option<Tier> {
    match b {
        0 => Some(Tier::Pm),
        1 => Some(Tier::Ssd),
        _ => None,
    }
}

impl TableMeta {
    /// Whether [`VersionEdit::decode`] accepts this meta: keys are internal
    /// keys, `seq_min <= seq_max <= MAX_SEQNO`, page runs are non-empty.
    pub fn is_encodable(&self) -> bool {
        parse_internal_key(&self.smallest).is_some()
            && parse_internal_key(&self.largest).is_some()
            && self.seq_min <= self.seq_max
            && self.seq_max <= MAX_SEQNO
            && self.pm_pages.iter().all(|r| r.count > 0)
    }

    fn encode_body(&self, dst: &mut Vec<u8>) {
        put_varint(dst, self.id);
        dst.push(tier_to_u8(self.tier));
        dst.push(self.format.to_u8());
        put_varint(dst, self.size_bytes);
        put_length_prefixed(dst, &self.smallest);
        put_length_prefixed(dst, &self.largest);
        put_varint(dst, self.seq_min);
        put_varint(dst, self.seq_max);
        put_varint(dst, self.entries);
        put_varint(dst, self.deletions);
        put_varint(dst, self.pm_pages.len() as u64);
        for r in &self.pm_pages {
            put_varint(dst, r.first);
            put_varint(dst, r.count);
        }
    }

    fn body_len(&self) -> usize {
        use crate::coding::varint_len;
        let lp = |b: &[u8]| varint_len(b.len() as u64) + b.len();
        varint_len(self.id)
            + 2
            + varint_len(self.size_bytes)
            + lp(&self.smallest)
            + lp(&self.largest)
            + varint_len(self.seq_min)
            + varint_len(self.seq_max)
            + varint_len(self.entries)
            + varint_len(self.deletions)
            + varint_len(self.pm_pages.len() as u64)
            + self
                .pm_pages
                .iter()
                .map(|r| varint_len(r.first) + varint_len(r.count))
                .sum::<usize>()
    }
}

impl VersionEdit {
    /// Folds `later` (an edit of the same region applied after this one)
    /// into this edit, so that applying the result equals applying both in
    /// order: a table `later` deletes that this edit added is dropped from
    /// the additions (it never becomes durable); other deletions and all
    /// additions accumulate; a design record, cursor or scalar field that
    /// `later` sets replaces this edit's. Used by WAL replay, which flushes
    /// several memtables against versions chained in memory and records
    /// them in one manifest record.
    pub fn compose(&mut self, later: VersionEdit) {
        for (level, id) in later.deleted_tables {
            match self.new_tables.iter().position(|(_, m)| m.id == id) {
                Some(i) => {
                    self.new_tables.remove(i);
                }
                None => self.deleted_tables.push((level, id)),
            }
        }
        self.new_tables.extend(later.new_tables);
        for (tag, bytes) in later.design_records {
            match self.design_records.iter_mut().find(|(t, _)| *t == tag) {
                Some(r) => r.1 = bytes,
                None => self.design_records.push((tag, bytes)),
            }
        }
        for (level, key) in later.compact_cursors {
            match self.compact_cursors.iter_mut().find(|(l, _)| *l == level) {
                Some(c) => c.1 = key,
                None => self.compact_cursors.push((level, key)),
            }
        }
        self.new_pm_wals.extend(later.new_pm_wals);
        self.deleted_pm_wals.extend(later.deleted_pm_wals);
        self.log_number = later.log_number.or(self.log_number);
        self.next_file_number = later.next_file_number.or(self.next_file_number);
        self.last_seqno = later.last_seqno.or(self.last_seqno);
        if later.region_layout.is_some() {
            self.region_layout = later.region_layout;
        }
    }

    /// Appends the encoding of this edit to `dst` (format: module docs).
    /// Requires every level below [`LEVEL_LIMIT`] and every new table
    /// [`TableMeta::is_encodable`].
    pub fn encode(&self, dst: &mut Vec<u8>) {
        if self.region != 0 {
            self.encode_region(dst);
        }
        self.encode_fields(dst);
    }

    /// Appends the encoding of a group of edits applied atomically (one
    /// manifest record; see "Regions" in the module docs).
    pub fn encode_group(edits: &[VersionEdit], dst: &mut Vec<u8>) {
        for (i, e) in edits.iter().enumerate() {
            if i > 0 || e.region != 0 {
                e.encode_region(dst);
            }
            e.encode_fields(dst);
        }
    }

    fn encode_region(&self, dst: &mut Vec<u8>) {
        debug_assert!(self.region < REGION_LIMIT);
        put_varint(dst, tag::REGION);
        put_varint(dst, u64::from(self.region));
    }

    fn encode_fields(&self, dst: &mut Vec<u8>) {
        if let Some(v) = self.log_number {
            put_varint(dst, tag::LOG_NUMBER);
            put_varint(dst, v);
        }
        if let Some(v) = self.next_file_number {
            put_varint(dst, tag::NEXT_FILE_NUMBER);
            put_varint(dst, v);
        }
        if let Some(v) = self.last_seqno {
            debug_assert!(v <= MAX_SEQNO);
            put_varint(dst, tag::LAST_SEQNO);
            put_varint(dst, v);
        }
        for (level, key) in &self.compact_cursors {
            debug_assert!(*level < LEVEL_LIMIT);
            put_varint(dst, tag::COMPACT_CURSOR);
            put_varint(dst, u64::from(*level));
            put_length_prefixed(dst, key);
        }
        for (level, id) in &self.deleted_tables {
            debug_assert!(*level < LEVEL_LIMIT);
            put_varint(dst, tag::DELETED_TABLE);
            put_varint(dst, u64::from(*level));
            put_varint(dst, *id);
        }
        for (level, meta) in &self.new_tables {
            debug_assert!(*level < LEVEL_LIMIT);
            debug_assert!(meta.is_encodable(), "unencodable table meta {meta:?}");
            put_varint(dst, tag::NEW_TABLE);
            put_varint(dst, u64::from(*level));
            let len = meta.body_len();
            put_varint(dst, len as u64);
            let before = dst.len();
            meta.encode_body(dst);
            debug_assert_eq!(dst.len() - before, len);
        }
        for w in &self.new_pm_wals {
            put_varint(dst, tag::NEW_PM_WAL);
            put_varint(dst, w.log_number);
            put_varint(dst, w.first_extent);
        }
        for n in &self.deleted_pm_wals {
            put_varint(dst, tag::DELETED_PM_WAL);
            put_varint(dst, *n);
        }
        for (t, bytes) in &self.design_records {
            put_varint(dst, tag::DESIGN_RECORD);
            put_varint(dst, u64::from(*t));
            put_length_prefixed(dst, bytes);
        }
        if let Some(l) = &self.region_layout {
            debug_assert!((1..=REGION_LIMIT).contains(&l.count));
            put_varint(dst, tag::REGION_LAYOUT);
            put_varint(dst, u64::from(l.count));
            put_varint(dst, l.boundaries.len() as u64);
            for b in &l.boundaries {
                put_length_prefixed(dst, b);
            }
        }
        if let Some(id) = &self.identity {
            let mut body = Vec::new();
            id.encode_body(&mut body);
            put_varint(dst, tag::IDENTITY);
            put_length_prefixed(dst, &body);
        }
    }

    /// Decodes an edit. `source` and `offset` (the MANIFEST path and the
    /// record's offset in it) name the record in the `Error::Corruption`
    /// any malformed input yields; this never panics.
    /// A record holding a group of several edits is corruption here: the
    /// manifest reader uses [`VersionEdit::decode_group`].
    pub fn decode(src: &[u8], source: &str, offset: u64) -> Result<VersionEdit> {
        let mut group = Self::decode_group(src, source, offset)?;
        if group.len() != 1 {
            return Err(Error::corruption(
                source,
                offset,
                format!(
                    "version edit: the record holds a group of {} edits",
                    group.len()
                ),
            ));
        }
        Ok(group.pop().unwrap_or_default())
    }

    /// Decodes a manifest record: a group of edits, in order (one edit for
    /// a record without region sections). Errors as [`VersionEdit::decode`].
    pub fn decode_group(src: &[u8], source: &str, offset: u64) -> Result<Vec<VersionEdit>> {
        let mut r = Reader::new(src);
        let mut group = Vec::new();
        let mut e = VersionEdit::default();
        while !r.is_empty() {
            let field_at = r.pos();
            let bad = |what: String| {
                Error::corruption(
                    source,
                    offset,
                    format!("version edit: {what} (field at byte {field_at} of the record)"),
                )
            };
            let truncated = || bad("truncated or malformed field".to_string());
            let t = r.varint().ok_or_else(truncated)?;
            let level = |r: &mut Reader<'_>| -> Result<u32> {
                let l = r.varint32().ok_or_else(truncated)?;
                if l >= LEVEL_LIMIT {
                    return Err(bad(format!("level {l} is not below {LEVEL_LIMIT}")));
                }
                Ok(l)
            };
            let once = |slot: &mut Option<u64>, v: u64, name: &str| -> Result<()> {
                if slot.replace(v).is_some() {
                    return Err(bad(format!("{name} appears twice")));
                }
                Ok(())
            };
            match t {
                tag::LOG_NUMBER => {
                    let v = r.varint().ok_or_else(truncated)?;
                    once(&mut e.log_number, v, "log_number")?;
                }
                tag::NEXT_FILE_NUMBER => {
                    let v = r.varint().ok_or_else(truncated)?;
                    once(&mut e.next_file_number, v, "next_file_number")?;
                }
                tag::LAST_SEQNO => {
                    let v = r.varint().ok_or_else(truncated)?;
                    if v > MAX_SEQNO {
                        return Err(bad(format!("last_seqno {v} exceeds the maximum")));
                    }
                    once(&mut e.last_seqno, v, "last_seqno")?;
                }
                tag::COMPACT_CURSOR => {
                    let l = level(&mut r)?;
                    let key = r.length_prefixed().ok_or_else(truncated)?;
                    e.compact_cursors.push((l, key.to_vec()));
                }
                tag::DELETED_TABLE => {
                    let l = level(&mut r)?;
                    let id = r.varint().ok_or_else(truncated)?;
                    e.deleted_tables.push((l, id));
                }
                tag::NEW_TABLE => {
                    let l = level(&mut r)?;
                    let body = r.length_prefixed().ok_or_else(truncated)?;
                    let meta =
                        decode_table(body).map_err(|what| bad(format!("new table: {what}")))?;
                    e.new_tables.push((l, meta));
                }
                tag::NEW_PM_WAL => {
                    let log_number = r.varint().ok_or_else(truncated)?;
                    let first_extent = r.varint().ok_or_else(truncated)?;
                    e.new_pm_wals.push(PmWal {
                        log_number,
                        first_extent,
                    });
                }
                tag::DELETED_PM_WAL => {
                    let n = r.varint().ok_or_else(truncated)?;
                    e.deleted_pm_wals.push(n);
                }
                tag::DESIGN_RECORD => {
                    let dt = r.varint32().ok_or_else(truncated)?;
                    let bytes = r.length_prefixed().ok_or_else(truncated)?;
                    e.design_records.push((dt, bytes.to_vec()));
                }
                tag::REGION => {
                    let region = r.varint32().ok_or_else(truncated)?;
                    if region >= REGION_LIMIT {
                        return Err(bad(format!("region {region} is not below {REGION_LIMIT}")));
                    }
                    // A region marker closes the edit before it, except
                    // an empty first one (`encode_group` writes nothing
                    // for it, so it must decode to nothing).
                    if !(group.is_empty() && e == VersionEdit::default()) {
                        group.push(std::mem::take(&mut e));
                    }
                    e.region = region;
                }
                tag::REGION_LAYOUT => {
                    let count = r.varint32().ok_or_else(truncated)?;
                    if !(1..=REGION_LIMIT).contains(&count) {
                        return Err(bad(format!(
                            "region count {count} is not in 1..={REGION_LIMIT}"
                        )));
                    }
                    let n = r.varint().ok_or_else(truncated)?;
                    if n != 0 && n != u64::from(count) - 1 {
                        return Err(bad(format!("{n} region boundaries for {count} regions")));
                    }
                    let mut boundaries = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        boundaries.push(r.length_prefixed().ok_or_else(truncated)?.to_vec());
                    }
                    if e.region_layout.is_some() {
                        return Err(bad("region_layout appears twice".to_string()));
                    }
                    e.region_layout = Some(RegionLayout { count, boundaries });
                }
                tag::IDENTITY => {
                    let body = r.length_prefixed().ok_or_else(truncated)?;
                    let id = DbIdentity::decode_body(body)
                        .map_err(|what| bad(format!("identity: {what}")))?;
                    if e.identity.replace(id).is_some() {
                        return Err(bad("identity appears twice".to_string()));
                    }
                }
                t if t & TAG_SAFE_TO_IGNORE != 0 => {
                    r.length_prefixed().ok_or_else(truncated)?;
                }
                t => return Err(bad(format!("unknown tag {t}"))),
            }
        }
        group.push(e);
        Ok(group)
    }
}

/// Decodes a table body; the error is a description for the caller's
/// `Error::Corruption`.
fn decode_table(body: &[u8]) -> std::result::Result<TableMeta, String> {
    let mut r = Reader::new(body);
    let short = || "truncated table".to_string();
    let id = r.varint().ok_or_else(short)?;
    let tier_byte = r.u8().ok_or_else(short)?;
    let tier = tier_from_u8(tier_byte).ok_or_else(|| format!("unknown tier {tier_byte}"))?;
    let format_byte = r.u8().ok_or_else(short)?;
    let format =
        TableFormat::from_u8(format_byte).ok_or_else(|| format!("unknown format {format_byte}"))?;
    let size_bytes = r.varint().ok_or_else(short)?;
    let smallest = r.length_prefixed().ok_or_else(short)?.to_vec();
    let largest = r.length_prefixed().ok_or_else(short)?.to_vec();
    let seq_min = r.varint().ok_or_else(short)?;
    let seq_max = r.varint().ok_or_else(short)?;
    let entries = r.varint().ok_or_else(short)?;
    let deletions = r.varint().ok_or_else(short)?;
    let runs = r.varint().ok_or_else(short)?;
    // Each run takes at least 2 bytes: bound the allocation by the input.
    if runs > (r.remaining().len() / 2) as u64 {
        return Err(format!("{runs} page runs in {} bytes", r.remaining().len()));
    }
    let mut pm_pages = Vec::with_capacity(runs as usize);
    for _ in 0..runs {
        let first = r.varint().ok_or_else(short)?;
        let count = r.varint().ok_or_else(short)?;
        if count == 0 {
            return Err(format!("empty page run at page {first}"));
        }
        pm_pages.push(PageRun { first, count });
    }
    if !r.is_empty() {
        return Err(format!(
            "{} unexpected bytes after the table",
            r.remaining().len()
        ));
    }
    let meta = TableMeta {
        id,
        tier,
        format,
        size_bytes,
        smallest,
        largest,
        seq_min,
        seq_max,
        entries,
        deletions,
        pm_pages,
    };
    if parse_internal_key(&meta.smallest).is_none() || parse_internal_key(&meta.largest).is_none() {
        return Err(format!(
            "table {id}: smallest or largest is not an internal key"
        ));
    }
    if meta.seq_min > meta.seq_max || meta.seq_max > MAX_SEQNO {
        return Err(format!(
            "table {id}: bad seqno range {}..={}",
            meta.seq_min, meta.seq_max
        ));
    }
    Ok(meta)
}

/// The file name of manifest `number`: `MANIFEST-000005`.
pub fn manifest_file_name(number: u64) -> String {
    format!("MANIFEST-{number:06}")
}

/// The contents of CURRENT naming manifest `number` (format: module docs).
pub fn encode_current(number: u64) -> Vec<u8> {
    let name = manifest_file_name(number);
    let crc = crate::coding::crc32c(name.as_bytes());
    format!("{name}\ncrc32c:{crc:08x}\n").into_bytes()
}

/// Parses CURRENT and returns the manifest number it names; anything but
/// the exact [`encode_current`] form (or a checksum mismatch) is
/// `Error::Corruption` naming `source`.
pub fn decode_current(data: &[u8], source: &str) -> Result<u64> {
    let bad = |what: &str| Error::corruption(source, 0, format!("CURRENT: {what}"));
    let text = std::str::from_utf8(data).map_err(|_| bad("not UTF-8"))?;
    let mut lines = text.split_terminator('\n');
    let (Some(name), Some(crc_line), None) = (lines.next(), lines.next(), lines.next()) else {
        return Err(bad("expected two lines"));
    };
    if !text.ends_with('\n') {
        return Err(bad("missing final newline"));
    }
    let digits = name
        .strip_prefix("MANIFEST-")
        .filter(|d| !d.is_empty() && d.len() <= 20 && d.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| bad("first line is not MANIFEST-<number>"))?;
    let number: u64 = digits
        .parse()
        .map_err(|_| bad("manifest number out of range"))?;
    let stored = crc_line
        .strip_prefix("crc32c:")
        .filter(|h| h.len() == 8 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| bad("second line is not crc32c:<8 hex digits>"))?;
    if stored != crate::coding::crc32c(name.as_bytes()) {
        return Err(bad("checksum mismatch"));
    }
    Ok(number)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::key::{make_internal_key, Kind};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn random_bytes(rng: &mut SmallRng, max: usize) -> Vec<u8> {
        let n = rng.gen_range(0..=max);
        (0..n).map(|_| rng.gen()).collect()
    }

    fn random_u64(rng: &mut SmallRng) -> u64 {
        // Mix small and large values so every varint length shows up.
        match rng.gen_range(0..3) {
            0 => rng.gen_range(0..200),
            1 => rng.gen::<u64>() >> rng.gen_range(0..64),
            _ => rng.gen(),
        }
    }

    fn random_meta(rng: &mut SmallRng) -> TableMeta {
        let a = rng.gen_range(0..MAX_SEQNO);
        let b = rng.gen_range(0..MAX_SEQNO);
        let key = |rng: &mut SmallRng| {
            let kind = if rng.gen() { Kind::Put } else { Kind::Delete };
            make_internal_key(&random_bytes(rng, 40), rng.gen_range(0..=MAX_SEQNO), kind)
        };
        TableMeta {
            id: random_u64(rng),
            tier: if rng.gen() { Tier::Pm } else { Tier::Ssd },
            format: TableFormat::from_u8(rng.gen_range(0..5)).unwrap(),
            size_bytes: random_u64(rng),
            smallest: key(rng),
            largest: key(rng),
            seq_min: a.min(b),
            seq_max: a.max(b),
            entries: random_u64(rng),
            deletions: random_u64(rng),
            pm_pages: (0..rng.gen_range(0..4))
                .map(|_| PageRun {
                    first: random_u64(rng),
                    count: random_u64(rng).max(1),
                })
                .collect(),
        }
    }

    fn random_edit(rng: &mut SmallRng) -> VersionEdit {
        let (a, b, c) = (
            random_u64(rng),
            random_u64(rng),
            rng.gen_range(0..=MAX_SEQNO),
        );
        let log_number = rng.gen_bool(0.5).then_some(a);
        let next_file_number = rng.gen_bool(0.5).then_some(b);
        let last_seqno = rng.gen_bool(0.5).then_some(c);
        let n = |rng: &mut SmallRng| rng.gen_range(0..4);
        VersionEdit {
            log_number,
            next_file_number,
            last_seqno,
            compact_cursors: (0..n(rng))
                .map(|_| (rng.gen_range(0..LEVEL_LIMIT), random_bytes(rng, 30)))
                .collect(),
            deleted_tables: (0..n(rng))
                .map(|_| (rng.gen_range(0..LEVEL_LIMIT), random_u64(rng)))
                .collect(),
            new_tables: (0..n(rng))
                .map(|_| (rng.gen_range(0..LEVEL_LIMIT), random_meta(rng)))
                .collect(),
            new_pm_wals: (0..n(rng))
                .map(|_| PmWal {
                    log_number: random_u64(rng),
                    first_extent: random_u64(rng),
                })
                .collect(),
            deleted_pm_wals: (0..n(rng)).map(|_| random_u64(rng)).collect(),
            design_records: (0..n(rng))
                .map(|_| (rng.gen(), random_bytes(rng, 50)))
                .collect(),
            region: if rng.gen_bool(0.5) {
                0
            } else {
                rng.gen_range(0..REGION_LIMIT)
            },
            region_layout: rng
                .gen_bool(0.2)
                .then(|| {
                    let count = rng.gen_range(1..=REGION_LIMIT);
                    let n = if rng.gen_bool(0.5) {
                        0
                    } else {
                        count as usize - 1
                    };
                    RegionLayout {
                        count,
                        boundaries: (0..n.min(5)).map(|_| random_bytes(rng, 8)).collect(),
                    }
                })
                .filter(|l| l.boundaries.is_empty() || l.boundaries.len() as u32 == l.count - 1),
            identity: rng.gen_bool(0.2).then(|| DbIdentity {
                design: rng
                    .gen_bool(0.7)
                    .then(|| String::from_utf8_lossy(&random_bytes(rng, 12)).into_owned()),
                db_id: rng.gen_bool(0.5).then(|| rng.gen()),
                pm_region: rng.gen_bool(0.5).then(|| PmRegionRef {
                    region_id: rng.gen(),
                    size_bytes: rng.gen(),
                }),
            }),
        }
    }

    #[test]
    fn identity_worked_example_and_unknown_fields() {
        let e = VersionEdit {
            identity: Some(DbIdentity::for_design(crate::options::Preset::Triangle)),
            ..Default::default()
        };
        let mut b = Vec::new();
        e.encode(&mut b);
        assert_eq!(
            b,
            [0x81, 0x40, 0x0a, 0x01, 0x08, b't', b'r', b'i', b'a', b'n', b'g', b'l', b'e']
        );
        let d = VersionEdit::decode(&b, "m", 0).unwrap();
        assert_eq!(d, e);
        assert_eq!(
            d.identity.unwrap().preset(),
            Some(crate::options::Preset::Triangle)
        );
        // A later field this build does not know is skipped.
        let b = [0x81, 0x40, 0x07, 0x09, 0x02, 0xaa, 0xbb, 0x01, 0x01, b'x'];
        let d = VersionEdit::decode(&b, "m", 0).unwrap();
        assert_eq!(d.identity.unwrap().design.as_deref(), Some("x"));
        // Twice, or a truncated field: corruption.
        let twice = [0x81, 0x40, 0x00, 0x81, 0x40, 0x00];
        assert!(VersionEdit::decode(&twice, "m", 0)
            .unwrap_err()
            .is_corruption());
        let short = [0x81, 0x40, 0x02, 0x01, 0x05];
        assert!(VersionEdit::decode(&short, "m", 0)
            .unwrap_err()
            .is_corruption());
    }

    #[test]
    fn region_group_worked_example_and_roundtrip() {
        let group = vec![
            VersionEdit {
                log_number: Some(9),
                ..Default::default()
            },
            VersionEdit {
                region: 2,
                deleted_tables: vec![(0, 14)],
                ..Default::default()
            },
        ];
        let mut b = Vec::new();
        VersionEdit::encode_group(&group, &mut b);
        assert_eq!(b, [0x01, 0x09, 0x0a, 0x02, 0x05, 0x00, 0x0e]);
        assert_eq!(VersionEdit::decode_group(&b, "m", 0).unwrap(), group);
        // A group is not a single edit.
        assert!(VersionEdit::decode(&b, "m", 0)
            .unwrap_err()
            .to_string()
            .contains("group of 2"));
        // Random groups round-trip, whatever their regions.
        let mut rng = SmallRng::seed_from_u64(99);
        for _ in 0..300 {
            let group: Vec<VersionEdit> = (0..rng.gen_range(1..5))
                .map(|_| random_edit(&mut rng))
                .collect();
            let mut b = Vec::new();
            VersionEdit::encode_group(&group, &mut b);
            assert_eq!(VersionEdit::decode_group(&b, "m", 0).unwrap(), group);
        }
        // A region-0 edit without layout encodes as it always did.
        let mut one = Vec::new();
        group[0].encode(&mut one);
        assert_eq!(one, [0x01, 0x09]);
        // An ignorable field, then a region marker (found by the fuzzer):
        // the empty first edit is not one of the group, so the group
        // re-encodes to bytes that decode to it again.
        let b = [0xff, 0xff, 0xff, 0xff, 0xff, 0x04, 0x00, 0x0a, 0x7d];
        let group = VersionEdit::decode_group(&b, "m", 0).unwrap();
        assert_eq!(group.len(), 1);
        assert_eq!(group[0].region, 125);
        let mut again = Vec::new();
        VersionEdit::encode_group(&group, &mut again);
        assert_eq!(VersionEdit::decode_group(&again, "m", 0).unwrap(), group);
        // Regions beyond the limit are corruption.
        assert!(VersionEdit::decode(&[0x0a, 0x80, 0x02], "m", 0)
            .unwrap_err()
            .is_corruption());
    }

    #[test]
    fn compose_equals_applying_in_order() {
        let mut rng = SmallRng::seed_from_u64(7);
        let meta = |id: u64, rng: &mut SmallRng| TableMeta {
            id,
            ..random_meta(rng)
        };
        // #1 existed; the first edit replaces it by #2 and adds #3; the
        // second replaces #2 by #4 and moves #3 nowhere (deletes it).
        let mut a = VersionEdit {
            deleted_tables: vec![(0, 1)],
            new_tables: vec![(0, meta(2, &mut rng)), (0, meta(3, &mut rng))],
            design_records: vec![(5, vec![1]), (6, vec![1])],
            log_number: Some(4),
            ..Default::default()
        };
        let m4 = meta(4, &mut rng);
        a.compose(VersionEdit {
            deleted_tables: vec![(0, 2), (0, 3), (1, 9)],
            new_tables: vec![(0, m4.clone())],
            design_records: vec![(6, vec![2]), (7, vec![2])],
            ..Default::default()
        });
        assert_eq!(a.deleted_tables, vec![(0, 1), (1, 9)]);
        assert_eq!(a.new_tables, vec![(0, m4)]);
        assert_eq!(
            a.design_records,
            vec![(5, vec![1]), (6, vec![2]), (7, vec![2])]
        );
        assert_eq!(a.log_number, Some(4));
    }

    #[test]
    fn worked_example() {
        let e = VersionEdit {
            log_number: Some(7),
            next_file_number: Some(300),
            ..Default::default()
        };
        let mut b = Vec::new();
        e.encode(&mut b);
        assert_eq!(b, [0x01, 0x07, 0x02, 0xac, 0x02]);
        assert_eq!(VersionEdit::decode(&b, "m", 0).unwrap(), e);
    }

    #[test]
    fn worked_example_of_a_new_table() {
        // docs/format/manifest.md §4.
        let e = VersionEdit {
            new_tables: vec![(
                1,
                TableMeta {
                    id: 12,
                    tier: Tier::Ssd,
                    format: TableFormat::Sst,
                    size_bytes: 4096,
                    smallest: make_internal_key(b"a", 5, Kind::Put),
                    largest: make_internal_key(b"b", 3, Kind::Put),
                    seq_min: 3,
                    seq_max: 5,
                    entries: 2,
                    deletions: 0,
                    pm_pages: vec![],
                },
            )],
            ..Default::default()
        };
        let mut b = Vec::new();
        e.encode(&mut b);
        #[rustfmt::skip]
        let want = [
            0x06, 0x01, 0x1e,
            0x0c, 0x01, 0x00, 0x80, 0x20,
            0x09, 0x61, 0x01, 0x05, 0, 0, 0, 0, 0, 0,
            0x09, 0x62, 0x01, 0x03, 0, 0, 0, 0, 0, 0,
            0x03, 0x05, 0x02, 0x00, 0x00,
        ];
        assert_eq!(b, want);
        assert_eq!(VersionEdit::decode(&b, "m", 0).unwrap(), e);
    }

    #[test]
    fn random_edits_roundtrip() {
        let mut rng = SmallRng::seed_from_u64(0x5eed);
        for _ in 0..2000 {
            let e = random_edit(&mut rng);
            let mut b = Vec::new();
            e.encode(&mut b);
            let d = VersionEdit::decode(&b, "MANIFEST-000001", 42).unwrap();
            assert_eq!(d, e);
        }
    }

    #[test]
    fn every_truncation_and_byte_flip_is_an_error_or_a_valid_edit() {
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..50 {
            let e = random_edit(&mut rng);
            let mut b = Vec::new();
            e.encode(&mut b);
            for cut in 0..b.len() {
                check_decode_is_clean(&b[..cut]);
            }
            for i in 0..b.len() {
                let mut c = b.clone();
                c[i] ^= 1 << rng.gen_range(0..8);
                check_decode_is_clean(&c);
            }
        }
    }

    /// A decode either fails with a located corruption or yields an edit
    /// that re-encodes to something decoding to the same edit.
    fn check_decode_is_clean(b: &[u8]) {
        match VersionEdit::decode(b, "MANIFEST-000009", 1234) {
            Ok(e) => {
                let mut again = Vec::new();
                e.encode(&mut again);
                assert_eq!(VersionEdit::decode(&again, "x", 0).unwrap(), e);
            }
            Err(Error::Corruption { at, .. }) => {
                assert_eq!(at.source, "MANIFEST-000009");
                assert_eq!(at.offset, 1234);
            }
            Err(other) => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn rejects_malformed_edits() {
        let cases: &[(&[u8], &str)] = &[
            (&[0x01], "truncated"),
            (&[0x01, 0x01, 0x01, 0x02], "twice"),
            (&[0x63, 0x00], "unknown tag 99"),
            (&[0x04, 0x40, 0x00], "level 64"),
            (
                &[0x06, 0x00, 0x05, 0x01, 0x00, 0x00, 0x00, 0x00],
                "truncated table",
            ),
            (
                &[0x03, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                "maximum",
            ),
        ];
        for (bytes, needle) in cases {
            let err = VersionEdit::decode(bytes, "MANIFEST-000003", 77).unwrap_err();
            let msg = err.to_string();
            assert!(err.is_corruption(), "{msg}");
            assert!(msg.contains(needle), "{msg} should mention {needle}");
            assert!(msg.contains("MANIFEST-000003 at offset 77"), "{msg}");
        }
    }

    #[test]
    fn skips_safe_to_ignore_tags() {
        let mut b = Vec::new();
        put_varint(&mut b, TAG_SAFE_TO_IGNORE | 5);
        put_length_prefixed(&mut b, b"future");
        VersionEdit {
            log_number: Some(3),
            ..Default::default()
        }
        .encode(&mut b);
        let e = VersionEdit::decode(&b, "m", 0).unwrap();
        assert_eq!(e.log_number, Some(3));
    }

    #[test]
    fn table_body_checks() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut m = random_meta(&mut rng);
        m.smallest = b"short".to_vec();
        let mut body = Vec::new();
        m.encode_body(&mut body);
        assert!(decode_table(&body).unwrap_err().contains("internal key"));
        // Trailing bytes in a table body are rejected.
        let m = random_meta(&mut rng);
        let mut body = Vec::new();
        m.encode_body(&mut body);
        assert_eq!(decode_table(&body).unwrap(), m);
        body.push(0);
        assert!(decode_table(&body).unwrap_err().contains("unexpected"));
    }

    #[test]
    fn current_roundtrip_and_rejects_garbage() {
        for n in [1u64, 5, 999_999, 1_000_000, u64::MAX] {
            let b = encode_current(n);
            assert_eq!(decode_current(&b, "CURRENT").unwrap(), n);
        }
        let b = encode_current(5);
        assert_eq!(b, b"MANIFEST-000005\ncrc32c:b949be95\n");
        let mut flipped = b.clone();
        flipped[14] = b'4';
        assert!(decode_current(&flipped, "CURRENT")
            .unwrap_err()
            .to_string()
            .contains("checksum"));
        for bad in [
            &b""[..],
            b"MANIFEST-5\n",
            b"MANIFEST-\ncrc32c:00000000\n",
            &b[..b.len() - 1],
        ] {
            assert!(decode_current(bad, "CURRENT").unwrap_err().is_corruption());
        }
    }
}
