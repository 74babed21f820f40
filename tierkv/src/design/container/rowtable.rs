//! RowTable: one immutable memtable flushed into the PM container
//! (TriangleKV §3.1, Fig. 10a; MatrixKV's rows have the same format).
//!
//! A RowTable is a *data region* — the values of the memtable's entries in
//! key order, packed into extents (runs of 4 KiB pages from the persistent
//! page allocator) — and a *metadata run* holding a header, the extent
//! table, and the sorted metadata array: one fixed-size element per entry
//! with the key (a prefix, and the offset of the whole internal key in the
//! key area that follows the array), the page number and offset in page of
//! the value, and the 4-byte **forward pointer**: the index of the first
//! element of the preceding (older) RowTable whose internal key is `>=`
//! this element's (fractional cascading, §3.4).
//!
//! Keys live in the metadata run and values in the extents, so a search
//! never touches a data page: the extents of consumed key ranges can be
//! freed while the row's metadata (and its forward pointers) stays.
//!
//! # Byte layout (docs/format/pm.md, "RowTable")
//!
//! ```text
//! metadata run (pm_pages[0]), at region offset M = first_page × 4096:
//!  M+0      header (80 bytes)
//!  M+80     extent table: x × 24 bytes
//!  M+80+24x element array: n × 32 bytes, sorted by internal key
//!  E+32n    key area: the n internal keys, concatenated in element order
//!           (E = M+80+24x); the run is rounded up to whole pages
//! data extents (pm_pages[1..], in key order): values, back to back
//!
//! header                          extent (24 bytes)
//!  0  8  magic "RowTable"          0  8  first_page (absolute)
//!  8  4  format version = 1        8  4  page_count
//! 12  4  header bytes = 80        12  4  first_entry (index of the first
//! 16  8  seq_min                          element whose value is here)
//! 24  8  seq_max                  16  4  used_bytes
//! 32  8  prev_seq_max (0: none)   20  4  crc32c of the used bytes
//! 40  4  entry count n
//! 44  4  prev entry count         element (32 bytes)
//! 48  4  extent count x            0  8  key prefix: the first 8 user-key
//! 52  4  key area bytes K                 bytes, zero padded (compared as
//!                                         a big-endian number)
//! 56  8  value bytes               8  4  key offset in the key area
//! 64  4  meta crc: crc32c of      12  4  internal key length (>= 8)
//!        bytes 80 .. 80+24x+32n+K 16  4  value page (absolute page number)
//! 68  4  reserved, 0              20  4  value length
//! 72  4  header crc: crc32c of    24  2  value offset in page (0..4095)
//!        bytes 0 .. 72            26  2  reserved, 0
//! 76  4  reserved, 0              28  4  forward pointer
//! ```
//!
//! All integers are little-endian (the key prefix is raw key bytes). `prev_seq_max` names the preceding row
//! (rows are identified by their largest seqno, unique because memtables
//! have disjoint seqno ranges) and `prev entry count` its length, so a
//! reader uses the forward pointers only when the next older row of the
//! version *is* that row. A value of length 0 (a tombstone or an empty
//! value) has page 0, offset 0 and lives in no extent.
//!
//! Worked example (the unit test `worked_example` checks it byte for
//! byte): a row with seqnos 5..=7 holding `apple@7 = "red"`, `apple@5 =
//! "green"` (an older version kept for a snapshot) and `kiwi@6` deleted,
//! flushed into a fresh 64 KiB region (data pages start at page 2) with no
//! predecessor and one-page extents. The values go first, into one extent
//! at page 2 (8 bytes used); then the metadata run at page 3 holds 80 +
//! 24 + 3 × 32 + (13 + 13 + 12) = 238 bytes:
//!
//! ```text
//! 2000  72 65 64 67 72 65 65 6e                          "redgreen"
//! 3000  52 6f 77 54 61 62 6c 65 01 00 00 00 50 00 00 00  "RowTable", v1, 80
//! 3010  05 00 00 00 00 00 00 00 07 00 00 00 00 00 00 00  seq_min 5, seq_max 7
//! 3020  00 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00  no predecessor; n 3
//! 3030  01 00 00 00 26 00 00 00 08 00 00 00 00 00 00 00  x 1, K 38, 8 value bytes
//! 3040  42 a2 0e 3b 00 00 00 00 48 86 04 87 00 00 00 00  meta crc, header crc
//! 3050  02 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00  extent: page 2, 1 page,
//! 3060  08 00 00 00 38 4d 97 9d                          entry 0, 8 used, crc
//! 3068                          61 70 70 6c 65 00 00 00  element 0: "apple"
//! 3070  00 00 00 00 0d 00 00 00 02 00 00 00 03 00 00 00   key 0+13, page 2, 3 bytes
//! 3080  00 00 00 00 00 00 00 00                           at 0, fwd 0
//! 3088                          61 70 70 6c 65 00 00 00  element 1: "apple"
//! 3090  0d 00 00 00 0d 00 00 00 02 00 00 00 05 00 00 00   key 13+13, page 2, 5 bytes
//! 30a0  03 00 00 00 00 00 00 00                           at 3, fwd 0
//! 30a8                          6b 69 77 69 00 00 00 00  element 2: "kiwi"
//! 30b0  1a 00 00 00 0c 00 00 00 00 00 00 00 00 00 00 00   key 26+12, no value
//! 30c0  00 00 00 00 00 00 00 00
//! 30c8                          61 70 70 6c 65 01 07 00  keys: apple (Put, 7),
//! 30d0  00 00 00 00 00 61 70 70 6c 65 01 05 00 00 00 00  apple (Put, 5),
//! 30e0  00 00 6b 69 77 69 00 06 00 00 00 00 00 00        kiwi (Delete, 6)
//! ```
//!
//! # Crash consistency
//!
//! A RowTable becomes part of the database only through the MANIFEST edit
//! that lists its page runs, written after [`build`] has persisted every
//! extent and the metadata run. A crash before that edit leaves allocated
//! pages no table lists (reclaimed by the allocator's reconcile at open)
//! and the memtable still in the WAL. Nothing in a RowTable is ever written
//! again; runs are freed only after the edit that releases them is durable
//! and no live version lists them (version/mod.rs invariant 3).
//!
//! # Concurrency
//!
//! A [`RowTable`] is immutable and shared by any number of readers.
//!
//! # Invariants
//!
//! 1. Elements are sorted by internal key, strictly (seqnos are unique).
//! 2. Every key lies inside the key area; every non-empty value inside the
//!    used bytes of the extent that holds its element's index range.
//! 3. Forward pointers are non-decreasing and `<= prev entry count`;
//!    `fwd[i]` = number of predecessor elements `<` element `i`.
//! 4. Extents are in entry order: `first_entry` is non-decreasing.
//!
//! [`RowTable::open`] checks 2–4 and both checksums (and the used bytes of
//! the live extents when asked); any failure is `Error::Corruption` naming
//! the region and the byte offset.
//!
//! # The DRAM filter
//!
//! `open` also builds a bloom filter over the row's user keys in DRAM
//! ([`FILTER_BITS_PER_KEY`], the SSTs' default: about 0.8% false
//! positives), from the keys its walk of the elements checks anyway. It is
//! not stored in PM: a row is opened once per process (the row cache), and
//! the walk is already paid. A point read asks it before searching the row:
//! the search is a binary search over elements in PM, one cache miss per
//! step, and was 8% of a quiesced `medium` triangle readrandom's reading
//! thread, 64% of it on the element loads, for rows that almost never hold
//! the key.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::iter::{Found, InternalIterator, TableReader};
use crate::key::{self, Kind, SeqNo};
use crate::sst::bloom::{BloomBuilder, BloomFilter};
use crate::stats::Tier;
use crate::storage::alloc::PageRun;
use crate::storage::alloc::PAGE_SIZE_BYTES;
use crate::storage::PmRegion;
use crate::version::edit::{TableFormat, TableMeta};

/// `"RowTable"`.
pub const MAGIC: [u8; 8] = *b"RowTable";
/// Format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of the header.
pub const HEADER_BYTES: usize = 80;
/// Bytes of one extent-table entry.
pub const EXTENT_BYTES: usize = 24;
/// Bytes of one element of the metadata array.
pub const ELEMENT_BYTES: usize = 32;

const PAGE: u64 = PAGE_SIZE_BYTES;

/// The first 8 bytes of a user key as a big-endian number (zero padded):
/// if two prefixes differ, they order the keys (module docs).
pub use crate::key::user_key_prefix as key_prefix;

/// A search target: an internal key given as its parts.
#[derive(Debug, Clone, Copy)]
pub struct Probe<'a> {
    /// User key.
    pub user_key: &'a [u8],
    /// `(seq << 8) | kind`; larger sorts first among equal user keys.
    pub trailer: u64,
    /// [`key_prefix`] of the user key.
    pub prefix: u64,
}

impl<'a> Probe<'a> {
    /// The first entry of `user_key` visible at `seq` (a get or a seek).
    #[inline]
    pub fn seek(user_key: &'a [u8], seq: SeqNo) -> Probe<'a> {
        Probe {
            user_key,
            trailer: key::pack_trailer(seq, Kind::MAX),
            prefix: key_prefix(user_key),
        }
    }

    /// Before every entry of `user_key` (user-key lower bounds).
    #[inline]
    pub fn before(user_key: &'a [u8]) -> Probe<'a> {
        Probe {
            user_key,
            trailer: u64::MAX,
            prefix: key_prefix(user_key),
        }
    }

    /// An internal key as a probe (malformed keys sort as their bytes).
    #[inline]
    pub fn internal(ikey: &'a [u8]) -> Probe<'a> {
        let user_key = key::user_key(ikey);
        Probe {
            user_key,
            trailer: key::trailer(ikey),
            prefix: key_prefix(user_key),
        }
    }
}

/// One data extent of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// The pages.
    pub run: PageRun,
    /// Index of the first element whose value is here.
    pub first_entry: u32,
    /// Bytes of values in it.
    pub used_bytes: u32,
    /// crc32c of the used bytes.
    pub crc: u32,
}

/// A RowTable opened for reading.
pub struct RowTable {
    region: Arc<dyn PmRegion>,
    /// Start of the mapping; only ranges validated by `open` are read.
    base: *const u8,
    meta_run: PageRun,
    elems_at: usize,
    keys_at: usize,
    n: u32,
    seq_min: SeqNo,
    seq_max: SeqNo,
    prev_seq_max: SeqNo,
    prev_n: u32,
    value_bytes: u64,
    key_bytes: u32,
    extents: Vec<Extent>,
    /// Over the row's user keys (module docs). `None` would mean every
    /// key may be present; `open` always builds one.
    filter: Option<BloomFilter>,
}

/// Bits per user key of a row's DRAM filter: the SSTs' default
/// `bloom_bits_per_key` (about 0.8% false positives), 1.25 bytes per
/// element beside its 32 in PM.
pub const FILTER_BITS_PER_KEY: usize = 10;

// SAFETY: `base` points into the region's mapping, which the `Arc` keeps
// alive; the bytes read through it are immutable while the table is live
// (PmRegion contract, invariant 4), so sharing across threads is sound.
unsafe impl Send for RowTable {}
// SAFETY: as above; every method takes `&self` and only reads.
unsafe impl Sync for RowTable {}

impl std::fmt::Debug for RowTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowTable")
            .field("meta_run", &self.meta_run)
            .field("entries", &self.n)
            .field("seq", &(self.seq_min..=self.seq_max))
            .field("prev_seq_max", &self.prev_seq_max)
            .field("extents", &self.extents.len())
            .finish()
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// What the manifest says a row must be.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    /// Smallest seqno.
    pub seq_min: SeqNo,
    /// Largest seqno (the row's identity).
    pub seq_max: SeqNo,
    /// Number of entries.
    pub entries: u64,
}

/// For tools that find rows without the MANIFEST (`Db::repair`): reads the
/// header at page `meta_page` and returns what the MANIFEST would say of
/// the row and its metadata run. Fails (`Corruption`) unless the magic and
/// the header checksum verify; [`RowTable::open`] with these checks the
/// rest.
pub fn read_header(region: &dyn PmRegion, meta_page: u64) -> Result<(Expect, PageRun)> {
    let m = meta_page.saturating_mul(PAGE);
    let h = region.slice(m, HEADER_BYTES)?;
    let corrupt = |off: u64, what: &str| Error::corruption(region.name(), off, what);
    if h[0..8] != MAGIC {
        return Err(corrupt(m, "bad RowTable magic"));
    }
    if u32_at(h, 72) != crate::coding::crc32c(&h[..72]) {
        return Err(corrupt(m + 72, "RowTable header checksum mismatch"));
    }
    let meta_len = HEADER_BYTES as u64
        + EXTENT_BYTES as u64 * u64::from(u32_at(h, 48))
        + ELEMENT_BYTES as u64 * u64::from(u32_at(h, 40))
        + u64::from(u32_at(h, 52));
    Ok((
        Expect {
            seq_min: u64_at(h, 16),
            seq_max: u64_at(h, 24),
            entries: u64::from(u32_at(h, 40)),
        },
        PageRun {
            first: meta_page,
            count: meta_len.div_ceil(PAGE),
        },
    ))
}

impl RowTable {
    /// Opens the row whose metadata run is `meta_run`, checking what the
    /// module docs list. `live` are the page runs the row still owns; with
    /// `verify_data`, the crc of every live extent is checked too.
    pub fn open(
        region: Arc<dyn PmRegion>,
        meta_run: PageRun,
        expect: Expect,
        live: &[PageRun],
        verify_data: bool,
    ) -> Result<RowTable> {
        let name = region.name().to_string();
        let total_pages = region.len() / PAGE;
        let m = meta_run.first.saturating_mul(PAGE);
        let corrupt = |off: u64, what: String| Error::corruption(name.clone(), off, what);
        if meta_run.count == 0
            || meta_run
                .first
                .checked_add(meta_run.count)
                .is_none_or(|e| e > total_pages)
        {
            return Err(corrupt(
                m,
                format!(
                    "RowTable metadata run {}+{} outside the region",
                    meta_run.first, meta_run.count
                ),
            ));
        }
        let run_bytes = meta_run.count * PAGE;
        let h = region.slice(m, HEADER_BYTES)?;
        if h[0..8] != MAGIC {
            return Err(corrupt(m, "bad RowTable magic".into()));
        }
        let stored = u32_at(h, 72);
        let computed = crate::coding::crc32c(&h[..72]);
        if stored != computed {
            return Err(corrupt(
                m + 72,
                format!("RowTable header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"),
            ));
        }
        let version = u32_at(h, 8);
        if version != FORMAT_VERSION {
            return Err(corrupt(
                m + 8,
                format!("RowTable format version {version}, this build reads {FORMAT_VERSION}"),
            ));
        }
        if u32_at(h, 12) as usize != HEADER_BYTES {
            return Err(corrupt(m + 12, "RowTable header length is not 80".into()));
        }
        let seq_min = u64_at(h, 16);
        let seq_max = u64_at(h, 24);
        let prev_seq_max = u64_at(h, 32);
        let n = u32_at(h, 40);
        let prev_n = u32_at(h, 44);
        let x = u32_at(h, 48);
        let key_bytes = u32_at(h, 52);
        let value_bytes = u64_at(h, 56);
        if (seq_min, seq_max, u64::from(n)) != (expect.seq_min, expect.seq_max, expect.entries) {
            return Err(corrupt(
                m + 16,
                format!(
                    "RowTable holds seqnos {seq_min}..={seq_max} and {n} entries, the manifest says {}..={} and {}",
                    expect.seq_min, expect.seq_max, expect.entries
                ),
            ));
        }
        let meta_len = HEADER_BYTES as u64
            + EXTENT_BYTES as u64 * u64::from(x)
            + ELEMENT_BYTES as u64 * u64::from(n)
            + u64::from(key_bytes);
        if meta_len > run_bytes {
            return Err(corrupt(
                m + 40,
                format!(
                    "RowTable metadata of {meta_len} bytes does not fit its {run_bytes}-byte run"
                ),
            ));
        }
        let body = region.slice(
            m + HEADER_BYTES as u64,
            (meta_len - HEADER_BYTES as u64) as usize,
        )?;
        let stored = u32_at(h, 64);
        let computed = crate::coding::crc32c(body);
        if stored != computed {
            return Err(corrupt(
                m + 64,
                format!("RowTable metadata checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"),
            ));
        }
        // Extents (invariant 4).
        let mut extents = Vec::with_capacity(x as usize);
        for i in 0..x as usize {
            let e = &body[i * EXTENT_BYTES..(i + 1) * EXTENT_BYTES];
            let at = m + (HEADER_BYTES + i * EXTENT_BYTES) as u64;
            let ext = Extent {
                run: PageRun {
                    first: u64_at(e, 0),
                    count: u64::from(u32_at(e, 8)),
                },
                first_entry: u32_at(e, 12),
                used_bytes: u32_at(e, 16),
                crc: u32_at(e, 20),
            };
            let in_region = ext.run.count > 0
                && ext
                    .run
                    .first
                    .checked_add(ext.run.count)
                    .is_some_and(|end| end <= total_pages);
            if !in_region
                || u64::from(ext.used_bytes) > ext.run.count * PAGE
                || ext.first_entry > n
                || extents
                    .last()
                    .is_some_and(|p: &Extent| p.first_entry > ext.first_entry)
            {
                return Err(corrupt(
                    at,
                    format!("RowTable extent {i} is malformed: {ext:?}"),
                ));
            }
            extents.push(ext);
        }
        let elems_rel = x as usize * EXTENT_BYTES;
        let keys_rel = elems_rel + n as usize * ELEMENT_BYTES;
        // Elements (invariants 2 and 3).
        let mut ext_i = 0usize;
        let mut last_fwd = 0u32;
        let mut filter = BloomBuilder::new(FILTER_BITS_PER_KEY);
        for i in 0..n as usize {
            let el = &body[elems_rel + i * ELEMENT_BYTES..elems_rel + (i + 1) * ELEMENT_BYTES];
            let at = m + (HEADER_BYTES + elems_rel + i * ELEMENT_BYTES) as u64;
            let key_off = u64::from(u32_at(el, 8));
            let key_len = u64::from(u32_at(el, 12));
            if key_len < key::TRAILER_LEN as u64 || key_off + key_len > u64::from(key_bytes) {
                return Err(corrupt(
                    at,
                    format!("RowTable element {i}: key out of the key area"),
                ));
            }
            let k = keys_rel + key_off as usize;
            filter.add_key(key::user_key(&body[k..k + key_len as usize]));
            let fwd = u32_at(el, 28);
            if fwd > prev_n || fwd < last_fwd {
                return Err(corrupt(
                    at + 28,
                    format!("RowTable element {i}: bad forward pointer {fwd}"),
                ));
            }
            last_fwd = fwd;
            let vlen = u64::from(u32_at(el, 20));
            if vlen > 0 {
                while ext_i + 1 < extents.len() && extents[ext_i + 1].first_entry as usize <= i {
                    ext_i += 1;
                }
                let page = u64::from(u32_at(el, 16));
                let off = u64::from(u16::from_le_bytes([el[24], el[25]]));
                let ok = extents.get(ext_i).is_some_and(|e| {
                    let start = e.run.first * PAGE;
                    let v = page * PAGE + off;
                    e.first_entry as usize <= i
                        && off < PAGE
                        && v >= start
                        && v + vlen <= start + u64::from(e.used_bytes)
                });
                if !ok {
                    return Err(corrupt(
                        at + 16,
                        format!("RowTable element {i}: value outside its extent"),
                    ));
                }
            }
        }
        if verify_data {
            for (i, e) in extents.iter().enumerate() {
                if !live.contains(&e.run) {
                    continue;
                }
                let data = region.slice(e.run.first * PAGE, e.used_bytes as usize)?;
                let c = crate::coding::crc32c(data);
                if c != e.crc {
                    return Err(corrupt(
                        e.run.first * PAGE,
                        format!("RowTable extent {i}: data checksum mismatch: stored {:#010x}, computed {c:#010x}", e.crc),
                    ));
                }
            }
        }
        let base = region.slice(0, region.len() as usize)?.as_ptr();
        let at = (m + HEADER_BYTES as u64) as usize;
        Ok(RowTable {
            base,
            region,
            meta_run,
            elems_at: at + elems_rel,
            keys_at: at + keys_rel,
            n,
            seq_min,
            seq_max,
            prev_seq_max,
            prev_n,
            value_bytes,
            key_bytes,
            extents,
            filter: BloomFilter::new(filter.finish()),
        })
    }

    /// False if the row surely holds no entry of `user_key`, given its
    /// filter hash ([`bloom_hash`](crate::sst::bloom::bloom_hash)).
    #[inline]
    pub fn may_contain_hash(&self, h: u64) -> bool {
        self.filter.as_ref().is_none_or(|f| f.may_contain_hash(h))
    }

    /// DRAM bytes of the row's filter.
    pub fn filter_bytes(&self) -> u64 {
        self.filter.as_ref().map_or(0, |f| f.size_bytes() as u64)
    }

    #[inline]
    fn bytes(&self, at: usize, len: usize) -> &[u8] {
        // SAFETY: every range read is inside the region (checked by `open`:
        // the metadata run is inside the region, and each element's key and
        // value lie inside the key area or an extent of this row), the
        // mapping outlives `self` (we hold the region), and the bytes are
        // not written while the row is live (module docs).
        unsafe { std::slice::from_raw_parts(self.base.add(at), len) }
    }

    #[inline]
    fn elem(&self, i: usize) -> &[u8] {
        debug_assert!(i < self.n as usize);
        self.bytes(self.elems_at + i * ELEMENT_BYTES, ELEMENT_BYTES)
    }

    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// True for a row without entries (never built).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Smallest seqno.
    pub fn seq_min(&self) -> SeqNo {
        self.seq_min
    }

    /// Largest seqno: the row's identity.
    pub fn seq_max(&self) -> SeqNo {
        self.seq_max
    }

    /// `seq_max` of the row the forward pointers point into (0: none).
    pub fn prev_seq_max(&self) -> SeqNo {
        self.prev_seq_max
    }

    /// Number of entries of that row.
    pub fn prev_len(&self) -> usize {
        self.prev_n as usize
    }

    /// The data extents.
    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }

    /// The metadata run.
    pub fn meta_run(&self) -> PageRun {
        self.meta_run
    }

    /// Bytes of keys and values (what a compaction of the whole row reads).
    pub fn data_bytes(&self) -> u64 {
        self.value_bytes + u64::from(self.key_bytes)
    }

    /// The region holding the row.
    pub fn region(&self) -> &Arc<dyn PmRegion> {
        &self.region
    }

    /// Key prefix of element `i`.
    #[inline]
    pub fn prefix(&self, i: usize) -> u64 {
        u64::from_be_bytes(self.elem(i)[0..8].try_into().unwrap_or([0; 8]))
    }

    /// Internal key of element `i`.
    #[inline]
    pub fn ikey(&self, i: usize) -> &[u8] {
        let e = self.elem(i);
        let off = u32_at(e, 8) as usize;
        let len = u32_at(e, 12) as usize;
        self.bytes(self.keys_at + off, len)
    }

    /// User key of element `i`.
    #[inline]
    pub fn user_key(&self, i: usize) -> &[u8] {
        key::user_key(self.ikey(i))
    }

    /// Value of element `i`.
    #[inline]
    pub fn value(&self, i: usize) -> &[u8] {
        let e = self.elem(i);
        let len = u32_at(e, 20) as usize;
        if len == 0 {
            return &[];
        }
        let page = u32_at(e, 16) as usize;
        let off = u16::from_le_bytes([e[24], e[25]]) as usize;
        self.bytes(page * PAGE as usize + off, len)
    }

    /// Value length of element `i` (without reading the value).
    #[inline]
    pub fn value_len(&self, i: usize) -> usize {
        u32_at(self.elem(i), 20) as usize
    }

    /// Forward pointer of element `i`.
    #[inline]
    pub fn fwd(&self, i: usize) -> usize {
        u32_at(self.elem(i), 28) as usize
    }

    /// Orders element `i` against a probe.
    #[inline]
    pub fn cmp(&self, i: usize, p: &Probe<'_>) -> Ordering {
        let pre = self.prefix(i);
        if pre != p.prefix {
            return pre.cmp(&p.prefix);
        }
        let ik = self.ikey(i);
        match key::user_key(ik).cmp(p.user_key) {
            Ordering::Equal => p.trailer.cmp(&key::trailer(ik)),
            o => o,
        }
    }

    /// First index in `[lo, hi)` whose element is `>= p` (`hi` if none).
    /// REQUIRES: `lo <= hi <= len()`.
    #[inline]
    pub fn lower_bound(&self, p: &Probe<'_>, mut lo: usize, mut hi: usize) -> usize {
        debug_assert!(lo <= hi && hi <= self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.cmp(mid, p) == Ordering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// First index whose user key is `>= user_key`.
    #[inline]
    pub fn lower_bound_user(&self, user_key: &[u8]) -> usize {
        self.lower_bound(&Probe::before(user_key), 0, self.len())
    }

    /// Where in the predecessor row the lower bound of a probe lies, given
    /// its lower bound `j` in this row (fractional cascading): the window
    /// `[fwd(j-1), fwd(j)]` (inclusive), as a half-open search range whose
    /// end is itself a possible answer.
    #[inline]
    pub fn hint_window(&self, j: usize) -> (usize, usize) {
        let lo = if j == 0 { 0 } else { self.fwd(j - 1) };
        let hi = if j < self.len() {
            self.fwd(j)
        } else {
            self.prev_n as usize
        };
        (lo, hi)
    }

    /// The entry at `i` as a [`Found`] (copies the value).
    pub fn found(&self, i: usize) -> Option<Found> {
        let p = key::parse_internal_key(self.ikey(i))?;
        Some(Found {
            seq: p.seq,
            kind: p.kind,
            value: match p.kind {
                Kind::Put => self.value(i).to_vec(),
                Kind::Delete => Vec::new(),
            },
        })
    }
}

/// The raw row as a table: every entry, whatever the container has
/// consumed. The engine reads L0 through the container view (hint.rs);
/// this reader serves tools and tests.
impl TableReader for RowTable {
    fn get(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<Found>> {
        if !self.may_contain_hash(crate::sst::bloom::bloom_hash(user_key)) {
            return Ok(None);
        }
        let j = self.lower_bound(&Probe::seek(user_key, seq), 0, self.len());
        if j < self.len() && self.user_key(j) == user_key {
            return Ok(self.found(j));
        }
        Ok(None)
    }

    fn iter(self: Arc<Self>, _fill_cache: bool) -> Box<dyn InternalIterator> {
        Box::new(RowIter {
            pos: self.len(),
            row: self,
        })
    }
}

/// Iterator over every entry of one row (`pos == len` = not valid).
pub struct RowIter {
    row: Arc<RowTable>,
    pos: usize,
}

impl InternalIterator for RowIter {
    fn valid(&self) -> bool {
        self.pos < self.row.len()
    }
    fn seek_to_first(&mut self) {
        self.pos = 0;
    }
    fn seek_to_last(&mut self) {
        self.pos = if self.row.is_empty() {
            0
        } else {
            self.row.len() - 1
        };
    }
    fn seek(&mut self, target: &[u8]) {
        self.pos = self
            .row
            .lower_bound(&Probe::internal(target), 0, self.row.len());
    }
    fn next(&mut self) {
        self.pos += 1;
    }
    fn prev(&mut self) {
        self.pos = if self.pos == 0 {
            self.row.len()
        } else {
            self.pos - 1
        };
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

/// Where a row's pages come from.
pub trait PageSource {
    /// A run of between `min` and `want` pages (`min <= want`) for values,
    /// waiting for space if needed; an error if none comes.
    fn alloc(&self, want: u64, min: u64) -> Result<PageRun>;
    /// A run of exactly `pages` pages for the metadata.
    fn alloc_meta(&self, pages: u64) -> Result<PageRun> {
        self.alloc(pages, pages)
    }
    /// Gives back a run (or the tail of one) never published.
    fn free(&self, run: PageRun) -> Result<()>;
}

/// What [`build`] needs.
pub struct BuildParams<'a> {
    /// The region to write into.
    pub region: &'a Arc<dyn PmRegion>,
    /// Pages.
    pub pages: &'a dyn PageSource,
    /// Target extent size in pages.
    pub extent_pages: u64,
    /// The preceding (older) row the forward pointers point into.
    pub pred: Option<&'a RowTable>,
    /// Expected entry count (capacity hint).
    pub entries_hint: usize,
    /// Expected key bytes (capacity hint).
    pub key_bytes_hint: usize,
}

/// A row written and persisted by [`build`].
#[derive(Debug)]
pub struct Built {
    /// Its page runs: the metadata run first, then the extents.
    pub runs: Vec<PageRun>,
    /// Smallest and largest internal key.
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
    /// Seqno range.
    pub seq_min: SeqNo,
    /// Seqno range.
    pub seq_max: SeqNo,
    /// Entries and tombstones.
    pub entries: u64,
    /// Tombstones.
    pub deletions: u64,
    /// Bytes of PM the row occupies (whole pages).
    pub size_bytes: u64,
    /// Bytes the build stored into PM: values, then the metadata run's
    /// header, extent array, elements and keys.
    pub written_bytes: u64,
}

impl Built {
    /// The table metadata of the row, as table `id` of the PM tier.
    pub fn into_meta(self, id: u64) -> TableMeta {
        TableMeta {
            id,
            tier: Tier::Pm,
            format: TableFormat::RowTable,
            size_bytes: self.size_bytes,
            smallest: self.smallest,
            largest: self.largest,
            seq_min: self.seq_min,
            seq_max: self.seq_max,
            entries: self.entries,
            deletions: self.deletions,
            pm_pages: self.runs,
        }
    }
}

struct OpenExtent {
    run: PageRun,
    used: u64,
    crc: u32,
    first_entry: u32,
}

/// Writes the entries of `it` (internal-key order) as a RowTable and
/// persists it. Nothing is published: the caller adds the returned runs to
/// the MANIFEST. On error every page allocated here is given back.
pub fn build(p: &BuildParams<'_>, it: &mut dyn InternalIterator) -> Result<Built> {
    let mut runs: Vec<PageRun> = Vec::new();
    match build_inner(p, it, &mut runs) {
        Ok(b) => Ok(b),
        Err(e) => {
            for r in runs {
                let _ = p.pages.free(r);
            }
            Err(e)
        }
    }
}

fn build_inner(
    p: &BuildParams<'_>,
    it: &mut dyn InternalIterator,
    runs: &mut Vec<PageRun>,
) -> Result<Built> {
    let region = p.region;
    let name = region.name().to_string();
    let mut elems: Vec<u8> = Vec::with_capacity(p.entries_hint.saturating_mul(ELEMENT_BYTES));
    let mut keys: Vec<u8> = Vec::with_capacity(p.key_bytes_hint);
    let mut extents: Vec<Extent> = Vec::new();
    let mut cur: Option<OpenExtent> = None;
    let mut pred_pos = 0usize;
    let (mut n, mut deletions, mut value_bytes) = (0u64, 0u64, 0u64);
    let (mut seq_min, mut seq_max) = (SeqNo::MAX, 0);
    let mut smallest: Vec<u8> = Vec::new();
    let mut last_len = 0usize;

    let close = |cur: &mut Option<OpenExtent>,
                 extents: &mut Vec<Extent>,
                 runs: &mut Vec<PageRun>|
     -> Result<()> {
        if let Some(mut e) = cur.take() {
            let used_pages = e.used.div_ceil(PAGE).max(1);
            if used_pages < e.run.count {
                let tail = PageRun {
                    first: e.run.first + used_pages,
                    count: e.run.count - used_pages,
                };
                p.pages.free(tail)?;
                e.run.count = used_pages;
                if let Some(r) = runs.iter_mut().rev().find(|r| r.first == e.run.first) {
                    r.count = used_pages;
                }
            }
            region.persist(e.run.first * PAGE, e.used as usize)?;
            extents.push(Extent {
                run: e.run,
                first_entry: e.first_entry,
                used_bytes: e.used as u32,
                crc: e.crc,
            });
        }
        Ok(())
    };

    it.seek_to_first();
    while it.valid() {
        let ik = it.key();
        let value = it.value();
        let parsed = key::parse_internal_key(ik)
            .ok_or_else(|| Error::corruption("flush input", n, "malformed internal key"))?;
        if n >= u64::from(u32::MAX) || keys.len() as u64 + ik.len() as u64 > u64::from(u32::MAX) {
            return Err(Error::InvalidArgument(format!(
                "{name}: a RowTable holds fewer than 2^32 entries and 4 GiB of keys"
            )));
        }
        seq_min = seq_min.min(parsed.seq);
        seq_max = seq_max.max(parsed.seq);
        if parsed.kind == Kind::Delete {
            deletions += 1;
        }
        let vlen = value.len() as u64;
        let (page, off) = if vlen == 0 {
            (0u64, 0u64)
        } else {
            if vlen > u64::from(u32::MAX) / 2 {
                return Err(Error::InvalidArgument(format!(
                    "{name}: value of {vlen} bytes is too large for a RowTable"
                )));
            }
            let fits = cur
                .as_ref()
                .is_some_and(|e| e.used + vlen <= e.run.count * PAGE);
            if !fits {
                close(&mut cur, &mut extents, runs)?;
                let min = vlen.div_ceil(PAGE);
                let run = p.pages.alloc(p.extent_pages.max(min), min)?;
                runs.push(run);
                cur = Some(OpenExtent {
                    run,
                    used: 0,
                    crc: 0,
                    first_entry: n as u32,
                });
            }
            let e = cur
                .as_mut()
                .ok_or_else(|| Error::InvalidArgument("no extent".into()))?;
            let at = e.run.first * PAGE + e.used;
            region.write(at, value)?;
            e.crc = crate::coding::crc32c_append(e.crc, value);
            e.used += vlen;
            value_bytes += vlen;
            (at / PAGE, at % PAGE)
        };
        let probe = Probe::internal(ik);
        if let Some(pred) = p.pred {
            while pred_pos < pred.len() && pred.cmp(pred_pos, &probe) == Ordering::Less {
                pred_pos += 1;
            }
        }
        elems.extend_from_slice(&probe.prefix.to_be_bytes());
        elems.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        elems.extend_from_slice(&(ik.len() as u32).to_le_bytes());
        elems.extend_from_slice(&(page as u32).to_le_bytes());
        elems.extend_from_slice(&(vlen as u32).to_le_bytes());
        elems.extend_from_slice(&(off as u16).to_le_bytes());
        elems.extend_from_slice(&0u16.to_le_bytes());
        elems.extend_from_slice(&(pred_pos as u32).to_le_bytes());
        if n == 0 {
            smallest = ik.to_vec();
        }
        last_len = ik.len();
        keys.extend_from_slice(ik);
        n += 1;
        it.next();
    }
    it.status()?;
    if n == 0 {
        return Err(Error::InvalidArgument(format!(
            "{name}: a RowTable needs at least one entry"
        )));
    }
    close(&mut cur, &mut extents, runs)?;
    let largest = keys[keys.len() - last_len..].to_vec();

    let mut ext_bytes = Vec::with_capacity(extents.len() * EXTENT_BYTES);
    for e in &extents {
        ext_bytes.extend_from_slice(&e.run.first.to_le_bytes());
        ext_bytes.extend_from_slice(&(e.run.count as u32).to_le_bytes());
        ext_bytes.extend_from_slice(&e.first_entry.to_le_bytes());
        ext_bytes.extend_from_slice(&e.used_bytes.to_le_bytes());
        ext_bytes.extend_from_slice(&e.crc.to_le_bytes());
    }
    let meta_len = HEADER_BYTES + ext_bytes.len() + elems.len() + keys.len();
    let meta_pages = (meta_len as u64).div_ceil(PAGE);
    let meta_run = p.pages.alloc_meta(meta_pages)?;
    runs.insert(0, meta_run);
    let m = meta_run.first * PAGE;
    let mut crc = crate::coding::crc32c(&ext_bytes);
    crc = crate::coding::crc32c_append(crc, &elems);
    crc = crate::coding::crc32c_append(crc, &keys);
    let (prev_seq_max, prev_n) = p.pred.map_or((0, 0), |r| (r.seq_max(), r.len() as u32));
    let mut h = [0u8; HEADER_BYTES];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
    h[16..24].copy_from_slice(&seq_min.to_le_bytes());
    h[24..32].copy_from_slice(&seq_max.to_le_bytes());
    h[32..40].copy_from_slice(&prev_seq_max.to_le_bytes());
    h[40..44].copy_from_slice(&(n as u32).to_le_bytes());
    h[44..48].copy_from_slice(&prev_n.to_le_bytes());
    h[48..52].copy_from_slice(&(extents.len() as u32).to_le_bytes());
    h[52..56].copy_from_slice(&(keys.len() as u32).to_le_bytes());
    h[56..64].copy_from_slice(&value_bytes.to_le_bytes());
    h[64..68].copy_from_slice(&crc.to_le_bytes());
    let hcrc = crate::coding::crc32c(&h[..72]);
    h[72..76].copy_from_slice(&hcrc.to_le_bytes());
    let mut at = m;
    for part in [&h[..], &ext_bytes[..], &elems[..], &keys[..]] {
        region.write(at, part)?;
        at += part.len() as u64;
    }
    region.persist(m, meta_len)?;
    let size_bytes = runs.iter().map(|r| r.count * PAGE).sum();
    Ok(Built {
        runs: runs.clone(),
        smallest,
        largest,
        seq_min,
        seq_max,
        entries: n,
        deletions,
        size_bytes,
        written_bytes: value_bytes + meta_len as u64,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(super) mod tests {
    use super::*;
    use crate::key::make_internal_key;
    use crate::memtable::MemTable;
    use crate::sst::bloom::bloom_hash;
    use crate::storage::alloc::PageAllocator;
    use crate::storage::sim::SimRegion;

    pub(in crate::design::container) struct Pages(Arc<PageAllocator>);
    impl PageSource for Pages {
        fn alloc(&self, want: u64, min: u64) -> Result<PageRun> {
            let mut n = want;
            loop {
                if let Some(r) = self.0.alloc(n)? {
                    return Ok(r);
                }
                if n == min {
                    return Err(Error::InvalidArgument("full".into()));
                }
                n = (n / 2).max(min);
            }
        }
        fn free(&self, run: PageRun) -> Result<()> {
            self.0.free(run)
        }
    }

    pub(in crate::design::container) fn setup(
        len: usize,
    ) -> (Arc<dyn PmRegion>, Arc<SimRegion>, Pages) {
        let sim = Arc::new(SimRegion::new(len));
        let region: Arc<dyn PmRegion> = sim.clone();
        let alloc = Arc::new(PageAllocator::format(Arc::clone(&region)).unwrap());
        (region, sim, Pages(alloc))
    }

    pub(in crate::design::container) fn mem(entries: &[(&str, u64, Kind, &str)]) -> Arc<MemTable> {
        let m = Arc::new(MemTable::new(1));
        for (k, s, kind, v) in entries {
            m.add(*s, *kind, k.as_bytes(), v.as_bytes());
        }
        m
    }

    pub(in crate::design::container) fn build_mem(
        region: &Arc<dyn PmRegion>,
        pages: &Pages,
        m: &Arc<MemTable>,
        pred: Option<&RowTable>,
        extent_pages: u64,
    ) -> (Built, RowTable) {
        let b = build(
            &BuildParams {
                region,
                pages,
                extent_pages,
                pred,
                entries_hint: 0,
                key_bytes_hint: 0,
            },
            &mut m.iter(),
        )
        .unwrap();
        let t = RowTable::open(
            Arc::clone(region),
            b.runs[0],
            Expect {
                seq_min: b.seq_min,
                seq_max: b.seq_max,
                entries: b.entries,
            },
            &b.runs,
            true,
        )
        .unwrap();
        (b, t)
    }

    /// The DRAM filter holds every user key of the row (a get never
    /// misses through it), answers most absent keys, and its bytes are
    /// counted.
    #[test]
    fn filter_has_every_key_and_rules_out_most_others() {
        let (region, _sim, pages) = setup(4 << 20);
        let m = Arc::new(MemTable::new(1));
        for i in 0..2000u64 {
            let k = format!("key{:08}", i * 2);
            m.add(i + 1, Kind::Put, k.as_bytes(), b"v");
        }
        let (_, t) = build_mem(&region, &pages, &m, None, 4);
        assert!(t.filter_bytes() >= 2000 * FILTER_BITS_PER_KEY as u64 / 8);
        for i in 0..2000u64 {
            let k = format!("key{:08}", i * 2);
            assert!(t.may_contain_hash(bloom_hash(k.as_bytes())), "{k}");
            assert!(TableReader::get(&t, k.as_bytes(), u64::MAX)
                .unwrap()
                .is_some());
        }
        let passed = (0..2000u64)
            .filter(|i| t.may_contain_hash(bloom_hash(format!("key{:08}", i * 2 + 1).as_bytes())))
            .count();
        assert!(
            passed < 60,
            "{passed} of 2000 absent keys passed the filter"
        );
    }

    #[test]
    fn worked_example() {
        let (region, _sim, pages) = setup(64 << 10);
        let m = mem(&[
            ("apple", 7, Kind::Put, "red"),
            ("apple", 5, Kind::Put, "green"),
            ("kiwi", 6, Kind::Delete, ""),
        ]);
        let (b, t) = build_mem(&region, &pages, &m, None, 1);
        assert_eq!(
            b.runs,
            vec![
                PageRun { first: 3, count: 1 },
                PageRun { first: 2, count: 1 }
            ]
        );
        assert_eq!(region.slice(0x2000, 8).unwrap(), b"redgreen");
        let h = region.slice(0x3000, 80).unwrap();
        assert_eq!(&h[0..8], b"RowTable");
        assert_eq!(u32_at(h, 40), 3);
        assert_eq!(u32_at(h, 52), 38);
        assert_eq!(u64_at(h, 56), 8);
        assert_eq!(t.len(), 3);
        assert_eq!(t.ikey(0), make_internal_key(b"apple", 7, Kind::Put));
        assert_eq!(t.value(1), b"green");
        assert_eq!(t.prefix(2), key_prefix(b"kiwi"));
        assert_eq!(region.slice(0x3068, 8).unwrap(), b"apple\0\0\0");
        assert_eq!((b.entries, b.deletions, b.size_bytes), (3, 1, 8192));
        // Byte-exact, as docs/format/pm.md shows it.
        let hex = "526f775461626c65010000005000000005000000000000000700000000000000\
                   0000000000000000030000000000000001000000260000000800000000000000\
                   42a20e3b00000000488604870000000002000000000000000100000000000000\
                   08000000384d979d6170706c65000000000000000d0000000200000003000000\
                   00000000000000006170706c650000000d0000000d0000000200000005000000\
                   03000000000000006b697769000000001a0000000c0000000000000000000000\
                   00000000000000006170706c6501070000000000006170706c65010500000000\
                   00006b6977690006000000000000";
        let want: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        assert_eq!(region.slice(0x3000, 238).unwrap(), want.as_slice());
        assert_eq!(t.get(b"apple", 6).unwrap().unwrap().value, b"green");
        assert_eq!(t.get(b"apple", 9).unwrap().unwrap().value, b"red");
        assert_eq!(t.get(b"kiwi", 9).unwrap().unwrap().kind, Kind::Delete);
        assert!(t.get(b"apple", 4).unwrap().is_none());
        assert!(t.get(b"banana", 9).unwrap().is_none());
    }

    #[test]
    fn forward_pointers_are_lower_bounds_in_the_predecessor() {
        let (region, _sim, pages) = setup(1 << 20);
        let m0 = mem(&[
            ("b", 1, Kind::Put, "x"),
            ("d", 2, Kind::Put, "y"),
            ("f", 3, Kind::Put, "z"),
        ]);
        let (_, r0) = build_mem(&region, &pages, &m0, None, 1);
        let m1 = mem(&[
            ("a", 4, Kind::Put, "1"),
            ("d", 5, Kind::Put, "2"),
            ("e", 6, Kind::Put, "3"),
            ("g", 7, Kind::Put, "4"),
        ]);
        let (_, r1) = build_mem(&region, &pages, &m1, Some(&r0), 1);
        assert_eq!(r1.prev_seq_max(), 3);
        assert_eq!(r1.prev_len(), 3);
        let fwd: Vec<usize> = (0..r1.len()).map(|i| r1.fwd(i)).collect();
        // a < b; d@5 sorts before d@2; e before f; g past the end.
        assert_eq!(fwd, vec![0, 1, 2, 3]);
        // Windows bracket the true lower bound in the predecessor.
        for target in [&b"a"[..], b"c", b"d", b"e", b"f", b"h"] {
            let p = Probe::seek(target, 100);
            let j = r1.lower_bound(&p, 0, r1.len());
            let (lo, hi) = r1.hint_window(j);
            let want = r0.lower_bound(&p, 0, r0.len());
            assert!(lo <= want && want <= hi, "{target:?}");
            assert_eq!(r0.lower_bound(&p, lo, hi), want);
        }
    }

    #[test]
    fn large_values_get_their_own_extents_and_tails_are_given_back() {
        let (region, _sim, pages) = setup(1 << 20);
        let big = "v".repeat(10_000);
        let m = mem(&[
            ("a", 1, Kind::Put, "small"),
            ("b", 2, Kind::Put, &big),
            ("c", 3, Kind::Put, "tail"),
        ]);
        let free_before = pages.0.free_pages();
        let (b, t) = build_mem(&region, &pages, &m, None, 2);
        assert_eq!(t.value(1), big.as_bytes());
        assert_eq!(t.value(2), b"tail");
        let used: u64 = b.runs.iter().map(|r| r.count).sum();
        assert_eq!(free_before - pages.0.free_pages(), used);
        assert_eq!(t.extents().len(), 2);
    }

    #[test]
    fn corruption_is_reported_with_region_and_offset() {
        let (region, sim, pages) = setup(64 << 10);
        let m = mem(&[("a", 1, Kind::Put, "aaaa"), ("b", 2, Kind::Put, "bbbb")]);
        let (b, _) = build_mem(&region, &pages, &m, None, 1);
        let expect = Expect {
            seq_min: 1,
            seq_max: 2,
            entries: 2,
        };
        let meta = b.runs[0].first * PAGE;
        for (off, want) in [
            (meta, meta),
            (meta + 20, meta + 72),
            (meta + 120, meta + 64),
        ] {
            sim.corrupt(off, 0x40).unwrap();
            let e =
                RowTable::open(Arc::clone(&region), b.runs[0], expect, &b.runs, true).unwrap_err();
            match e {
                Error::Corruption { at, .. } => {
                    assert_eq!(at.source, region.name());
                    assert_eq!(at.offset, want);
                }
                other => panic!("{other}"),
            }
            sim.corrupt(off, 0x40).unwrap();
        }
        // A damaged value is found by the data checksum.
        let data = b.runs[1].first * PAGE;
        sim.corrupt(data + 1, 1).unwrap();
        let e = RowTable::open(Arc::clone(&region), b.runs[0], expect, &b.runs, true).unwrap_err();
        assert!(e.is_corruption());
        // Without data verification (or with the extent released) it opens.
        RowTable::open(Arc::clone(&region), b.runs[0], expect, &b.runs[..1], true).unwrap();
        // The manifest disagreeing with the row is corruption too.
        let wrong = Expect {
            seq_max: 3,
            ..expect
        };
        assert!(
            RowTable::open(Arc::clone(&region), b.runs[0], wrong, &b.runs, false)
                .unwrap_err()
                .is_corruption()
        );
    }

    #[test]
    fn random_rows_search_like_a_btreemap() {
        use rand::{Rng, SeedableRng};
        let (region, _sim, pages) = setup(8 << 20);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let m = Arc::new(MemTable::new(1));
        let mut model = std::collections::BTreeMap::new();
        for s in 1..2000u64 {
            let k = format!("k{:04}", rng.gen_range(0..500));
            let v = "x".repeat(rng.gen_range(0..300));
            m.add(s, Kind::Put, k.as_bytes(), v.as_bytes());
            model.insert(make_internal_key(k.as_bytes(), s, Kind::Put), v);
        }
        let (_, t) = build_mem(&region, &pages, &m, None, 3);
        assert_eq!(t.len(), model.len());
        let mut sorted: Vec<_> = model.into_iter().collect();
        sorted.sort_by(|a, b| key::compare_internal(&a.0, &b.0));
        for (i, (k, v)) in sorted.iter().enumerate() {
            assert_eq!(t.ikey(i), k.as_slice());
            assert_eq!(t.value(i), v.as_bytes());
            assert_eq!(t.lower_bound(&Probe::internal(k), 0, t.len()), i);
        }
    }
}
