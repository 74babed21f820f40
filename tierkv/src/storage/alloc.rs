//! The persistent 4 KiB page allocator of the PM tier.
//!
//! Every PM structure (WAL extents, RowTables, RangeTab chunks, NVTables,
//! skip-list nodes) lives in runs of contiguous 4 KiB pages handed out by
//! [`PageAllocator`]. The allocator's state is a bitmap persisted in the
//! region itself, one bit per page, so it survives restarts; the MANIFEST
//! records which runs each table owns, and at recovery
//! [`PageAllocator::reconcile`] makes the bitmap agree with it exactly.
//!
//! # Layout (docs/format/pm.md)
//!
//! ```text
//!  page 0            pages 1 ..= B           pages B+1 .. N-1
//! +-----------------+-----------------------+---------------------------+
//! | superblock      | bitmap (1 bit / page) | data pages                |
//! +-----------------+-----------------------+---------------------------+
//!
//!  superblock (little-endian; rest of page 0 reserved, zero):
//!   0       8      12     16          24            32            40    44    48
//!  +-------+------+------+-----------+-------------+-------------+-----+-----+
//!  | magic | ver  | page | page_count| bitmap_first| bitmap_pages| crc | pad |
//!  |"tier- | u32  | size | u64       | _page u64   | u64         | u32 | 0   |
//!  | kvPM" | = 1  | 4096 |           | = 1         | = B         |     |     |
//!  +-------+------+------+-----------+-------------+-------------+-----+-----+
//!   crc = crc32c(bytes 0..40)
//!
//!  identity block (bytes 48..88 of page 0; all zero in regions formatted
//!  before it existed):
//!   48       56          64           72    76    80
//!  +--------+-----------+------------+-----+-----+----------+
//!  | id     | region_id | size_bytes | crc | pad | owner    |
//!  | magic  | u64 ≠ 0   | u64        | u32 | 0   | u64      |
//!  +--------+-----------+------------+-----+-----+----------+
//!   id magic = "tkvPMid\0"; crc = crc32c(bytes 48..72); owner = the id of
//!   the database the region belongs to (0: none yet), one aligned 8-byte
//!   word outside the crc, so binding the region is one atomic store: a
//!   database id has 56 bits, and the owner word's top byte is a CRC-8 of
//!   the low seven (`owner_word`), so a damaged word is corruption, not
//!   another database.
//!
//!  bitmap: u64 little-endian words; page p is bit (p % 64) of word p / 64,
//!  at region offset 4096 * bitmap_first_page + 8 * (p / 64); 1 = allocated.
//! ```
//!
//! `N` = region length / 4096 (a partial last page is unused),
//! `B` = ceil(N / 32768) (one bitmap page covers 32768 pages = 128 MiB).
//!
//! Worked example: a 64 MiB region has N = 16384 pages, so B = 1 bitmap page
//! (of which the first 2048 bytes are used) and data pages 2..16383. After
//! `format`, word 0 of the bitmap is `0x3` (pages 0 and 1: superblock and
//! bitmap). `alloc(3)` then returns pages 2..5, sets word 0 to `0x1f`,
//! writes the 8 bytes at region offset 4096 and persists them;
//! `page_offset(2)` = 8192 is where the caller writes its data.
//!
//! # Crash consistency
//!
//! * `format` commits with the magic: it first zeroes the magic, then writes
//!   and persists the bitmap, then the rest of the superblock, and writes
//!   and persists the 8-byte magic last. A region whose magic is zero was
//!   never (completely) formatted: [`PageAllocator::open`] reports
//!   [`Error::NotADatabase`] and the engine may format it.
//! * `alloc` persists the bitmap words it changed before it returns, so a
//!   returned run is allocated in the durable image; `free` persists too.
//!   A crash may still leave a run allocated that the caller never recorded
//!   in the MANIFEST (allocated, then crash before the edit committed), or
//!   leave a freed run marked allocated: both are leaks, never double use,
//!   and [`PageAllocator::reconcile`] at recovery removes them. That is why
//!   the bitmap words carry no checksum: the MANIFEST (which has checksums)
//!   is the truth, and the bitmap is only a cache of it that must never
//!   claim a live page is free — which persist-before-return guarantees.
//!
//! * The identity block is written before the magic at `format` (an
//!   interrupted format leaves no identity to trust), and added to an older
//!   region by [`PageAllocator::adopt_identity`] id-magic last (a torn
//!   write leaves the block all zero or without its magic: no identity,
//!   never a wrong one). Binding the region to a database
//!   ([`PageAllocator::bind`]) stores and persists the aligned `owner`
//!   word alone.
//!
//! # Concurrency
//!
//! All methods take `&self`; one internal mutex serialises allocations,
//! frees and reconciles (including their bitmap writes and persists, so two
//! updates of one bitmap word can never interleave). Geometry accessors take
//! no lock. The allocator never touches data pages.
//!
//! # Invariants
//!
//! 1. Metadata pages (0 ..= B) are always marked allocated.
//! 2. Between calls, the DRAM copy of the bitmap equals the region's bitmap
//!    (volatile image), and `free_pages` equals the clear bits among data
//!    pages.
//! 3. A run returned by `alloc` was persisted as allocated before `alloc`
//!    returned; a run is never returned twice without a `free` in between.
//! 4. Bits of pages ≥ N are zero on PM and ignored.
//! 5. The superblock is written only by `format`.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::PmRegion;
use crate::error::{Error, Result};

/// A run of contiguous PM pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageRun {
    /// First page number.
    pub first: u64,
    /// Number of pages.
    pub count: u64,
}

/// Takes a run with `take` (which asks for `want` pages), counted in
/// `held` (bytes) from before it is taken and set to what was taken after:
/// a flush's reservation, which the write control subtracts from the
/// waiting memtable's need, so never lags behind the pages gone from the
/// free ones (the PM container's and `tlsm`'s flushes). While `take` waits
/// for pages, `held` counts the one run ahead.
pub fn take_counted(
    held: &AtomicU64,
    want: u64,
    take: impl FnOnce() -> Result<PageRun>,
) -> Result<PageRun> {
    held.fetch_add(want * PAGE_SIZE_BYTES, Ordering::AcqRel);
    let r = take();
    let took = r.as_ref().map_or(0, |run| run.count);
    let _ = held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
        Some(h.saturating_sub(want * PAGE_SIZE_BYTES) + took * PAGE_SIZE_BYTES)
    });
    r
}

/// Size of an allocator page in bytes.
pub const PAGE_SIZE_BYTES: u64 = 4096;
/// `"tierkvPM"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"tierkvPM");
/// The allocator's format version.
pub const FORMAT_VERSION: u32 = 1;
/// Smallest region the allocator accepts: superblock, one bitmap page, one
/// data page.
pub const MIN_PAGES: u64 = 3;

/// Pages one bitmap page describes.
const PAGES_PER_BITMAP_PAGE: u64 = PAGE_SIZE_BYTES * 8;
/// Bytes of the superblock that carry data (the rest of page 0 is zero).
const SUPERBLOCK_BYTES: usize = 48;
/// The identity block: offset, magic and field offsets (module doc).
/// Offset of the identity block in the region.
pub const ID_OFFSET: u64 = 48;
const ID_MAGIC: u64 = u64::from_le_bytes(*b"tkvPMid\0");
const ID_BYTES: usize = 40;
const ID_CRC_END: usize = 24;
const ID_OWNER: u64 = ID_OFFSET + 32;

/// Who a PM region is: set at format (or adopted by an older region), and
/// the database that owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionIdentity {
    /// A random id chosen when the region was formatted (never 0).
    pub region_id: u64,
    /// The region's length when it was formatted.
    pub size_bytes: u64,
    /// The id of the database the region belongs to; 0: none yet.
    pub owner: u64,
}

/// A random non-zero 64-bit id (`getrandom`).
pub fn random_id() -> Result<u64> {
    let mut b = [0u8; 8];
    loop {
        rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty())
            .map_err(|e| Error::io("getrandom", e.into()))?;
        let id = u64::from_le_bytes(b);
        if id != 0 {
            return Ok(id);
        }
    }
}

/// Reads the identity block of `region`: `None` for a region formatted
/// before identities existed (or never formatted); damage is
/// `Error::Corruption` naming the region and offset. Reads only.
pub fn read_identity(region: &dyn PmRegion) -> Result<Option<RegionIdentity>> {
    if region.len() < ID_OFFSET + ID_BYTES as u64 {
        return Ok(None);
    }
    let mut b = [0u8; ID_BYTES];
    region.read(ID_OFFSET, &mut b)?;
    decode_identity(region.name(), &b)
}

/// The identity in the first bytes of a region file (`head`: at least its
/// first [`IDENTITY_END`] bytes, read by the caller), as
/// [`read_identity`] gives it; `name` names the region in errors.
pub fn identity_from_head(name: &str, head: &[u8]) -> Result<Option<RegionIdentity>> {
    match head.get(ID_OFFSET as usize..IDENTITY_END) {
        Some(b) => decode_identity(name, b),
        None => Ok(None),
    }
}

/// Bytes of a region file that [`identity_from_head`] needs.
pub const IDENTITY_END: usize = ID_OFFSET as usize + ID_BYTES;

fn decode_identity(name: &str, b: &[u8]) -> Result<Option<RegionIdentity>> {
    let magic = u64_at(b, 0);
    if magic == 0 {
        return Ok(None);
    }
    if magic != ID_MAGIC {
        return Err(Error::corruption(
            name,
            ID_OFFSET,
            format!("bad PM region identity magic {magic:#018x}"),
        ));
    }
    let stored = u32_at(b, ID_CRC_END);
    let computed = crate::coding::crc32c(&b[..ID_CRC_END]);
    if stored != computed {
        return Err(Error::corruption(
            name,
            ID_OFFSET + ID_CRC_END as u64,
            format!("PM region identity checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"),
        ));
    }
    let word = u64_at(b, 32);
    let owner = word & DB_ID_MASK;
    if word != 0 && (owner == 0 || owner_word(owner) != word) {
        return Err(Error::corruption(
            name,
            ID_OWNER,
            format!("PM region owner word {word:#018x} fails its check byte"),
        ));
    }
    let id = RegionIdentity {
        region_id: u64_at(b, 8),
        size_bytes: u64_at(b, 16),
        owner,
    };
    if id.region_id == 0 {
        return Err(Error::corruption(
            name,
            ID_OFFSET + 8,
            "PM region identity holds region id 0",
        ));
    }
    Ok(Some(id))
}

/// Database ids (the owner a region records) have 56 bits.
const DB_ID_MASK: u64 = (1 << 56) - 1;

/// A random non-zero 56-bit database id.
pub fn random_db_id() -> Result<u64> {
    loop {
        let id = random_id()? & DB_ID_MASK;
        if id != 0 {
            return Ok(id);
        }
    }
}

/// The stored owner word of database `owner` (56 bits): the id, and in the
/// top byte a CRC-8 (polynomial 0x07) of its seven low bytes, which detects
/// every change of up to eight adjacent bits.
fn owner_word(owner: u64) -> u64 {
    let mut crc: u8 = 0;
    for byte in &owner.to_le_bytes()[..7] {
        crc ^= byte;
        for _ in 0..8 {
            crc = if crc & 0x80 != 0 {
                (crc << 1) ^ 0x07
            } else {
                crc << 1
            };
        }
    }
    owner | (u64::from(crc) << 56)
}

/// The identity block of a region `region_id` of `size_bytes`, owner 0.
fn encode_identity(region_id: u64, size_bytes: u64) -> [u8; ID_BYTES] {
    let mut b = [0u8; ID_BYTES];
    b[0..8].copy_from_slice(&ID_MAGIC.to_le_bytes());
    b[8..16].copy_from_slice(&region_id.to_le_bytes());
    b[16..24].copy_from_slice(&size_bytes.to_le_bytes());
    let crc = crate::coding::crc32c(&b[..ID_CRC_END]);
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}
/// Offset of the checksum; it covers bytes `0..CRC_OFFSET`.
const CRC_OFFSET: usize = 40;

// Field offsets inside the superblock.
const OFF_VERSION: usize = 8;
const OFF_PAGE_SIZE: usize = 12;
const OFF_PAGE_COUNT: usize = 16;
const OFF_BITMAP_FIRST: usize = 24;
const OFF_BITMAP_PAGES: usize = 32;

/// Geometry of a region of `page_count` pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geometry {
    page_count: u64,
    bitmap_first_page: u64,
    bitmap_page_count: u64,
}

impl Geometry {
    fn for_pages(page_count: u64) -> Geometry {
        Geometry {
            page_count,
            bitmap_first_page: 1,
            bitmap_page_count: page_count.div_ceil(PAGES_PER_BITMAP_PAGE),
        }
    }

    /// First data page (= number of metadata pages).
    fn data_start(&self) -> u64 {
        self.bitmap_first_page + self.bitmap_page_count
    }

    fn word_count(&self) -> usize {
        // page_count ≤ region length / 4096, which fits in usize / 64.
        self.page_count.div_ceil(64) as usize
    }

    fn bitmap_offset(&self) -> u64 {
        self.bitmap_first_page * PAGE_SIZE_BYTES
    }

    fn word_offset(&self, w: usize) -> u64 {
        self.bitmap_offset() + 8 * w as u64
    }

    fn encode(&self) -> [u8; SUPERBLOCK_BYTES] {
        let mut b = [0u8; SUPERBLOCK_BYTES];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[OFF_PAGE_SIZE..OFF_PAGE_SIZE + 4]
            .copy_from_slice(&(PAGE_SIZE_BYTES as u32).to_le_bytes());
        b[OFF_PAGE_COUNT..OFF_PAGE_COUNT + 8].copy_from_slice(&self.page_count.to_le_bytes());
        b[OFF_BITMAP_FIRST..OFF_BITMAP_FIRST + 8]
            .copy_from_slice(&self.bitmap_first_page.to_le_bytes());
        b[OFF_BITMAP_PAGES..OFF_BITMAP_PAGES + 8]
            .copy_from_slice(&self.bitmap_page_count.to_le_bytes());
        let crc = crate::coding::crc32c(&b[..CRC_OFFSET]);
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// Bitmap search helpers on the DRAM copy (bit set = allocated).
mod bits {
    pub(super) fn is_set(words: &[u64], p: u64) -> bool {
        words[(p / 64) as usize] & (1 << (p % 64)) != 0
    }

    /// First page in `[from, limit)` whose bit equals `set`, if any.
    fn next_with(words: &[u64], from: u64, limit: u64, set: bool) -> Option<u64> {
        if from >= limit {
            return None;
        }
        let mut w = (from / 64) as usize;
        let flip = if set { 0 } else { u64::MAX };
        let mut x = (words[w] ^ flip) & (u64::MAX << (from % 64));
        loop {
            if x != 0 {
                let p = w as u64 * 64 + u64::from(x.trailing_zeros());
                return (p < limit).then_some(p);
            }
            w += 1;
            if w as u64 * 64 >= limit || w >= words.len() {
                return None;
            }
            x = words[w] ^ flip;
        }
    }

    pub(super) fn next_clear(words: &[u64], from: u64, limit: u64) -> Option<u64> {
        next_with(words, from, limit, false)
    }

    /// First allocated page in `[from, limit)`, or `limit`.
    pub(super) fn next_set(words: &[u64], from: u64, limit: u64) -> u64 {
        next_with(words, from, limit, true).unwrap_or(limit)
    }

    /// First page of a run of `n` clear bits inside `[lo, hi)`.
    pub(super) fn find_run(words: &[u64], lo: u64, hi: u64, n: u64) -> Option<u64> {
        let mut p = lo;
        while p.checked_add(n)? <= hi {
            let z = next_clear(words, p, hi)?;
            let end = z.checked_add(n)?;
            if end > hi {
                return None;
            }
            let s = next_set(words, z, end);
            if s == end {
                return Some(z);
            }
            p = s;
        }
        None
    }

    /// Sets (or clears) the bits of `[first, first+n)`; returns the range of
    /// word indexes touched.
    pub(super) fn fill(words: &mut [u64], first: u64, n: u64, set: bool) -> (usize, usize) {
        debug_assert!(n > 0);
        let end = first + n;
        let (w0, w1) = ((first / 64) as usize, ((end - 1) / 64) as usize);
        for (w, word) in words.iter_mut().enumerate().take(w1 + 1).skip(w0) {
            let lo = if w == w0 { first % 64 } else { 0 };
            let hi = if w == w1 { (end - 1) % 64 + 1 } else { 64 };
            let mask = (u64::MAX >> (64 - (hi - lo))) << lo;
            if set {
                *word |= mask;
            } else {
                *word &= !mask;
            }
        }
        (w0, w1)
    }
}

/// Mutable state, behind the mutex.
struct Inner {
    /// DRAM copy of the bitmap (invariant 2).
    words: Vec<u64>,
    /// Clear bits among data pages.
    free_pages: u64,
    /// Next-fit cursor: where the next search starts.
    cursor: u64,
}

/// The persistent page allocator of one PM region.
pub struct PageAllocator {
    region: Arc<dyn PmRegion>,
    geo: Geometry,
    inner: Mutex<Inner>,
    /// Bytes this allocator has stored into the region (superblock and
    /// bitmap), for the stats' PM metadata bytes.
    bytes_written: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for PageAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageAllocator")
            .field("region", &self.region.name())
            .field("total_pages", &self.geo.page_count)
            .field("free_pages", &self.free_pages())
            .finish()
    }
}

impl PageAllocator {
    /// Formats `region` (its previous contents are abandoned): writes and
    /// persists the bitmap (metadata pages allocated, every data page free),
    /// then the superblock, magic last.
    ///
    /// Errors: [`Error::InvalidOptions`] naming `pm_size_bytes` if the region
    /// holds fewer than [`MIN_PAGES`] pages.
    pub fn format(region: Arc<dyn PmRegion>) -> Result<PageAllocator> {
        let page_count = region.len() / PAGE_SIZE_BYTES;
        if page_count < MIN_PAGES {
            return Err(Error::InvalidOptions(format!(
                "pm_size_bytes = {} is too small: the PM tier needs at least {MIN_PAGES} pages \
                 of {PAGE_SIZE_BYTES} bytes ({})",
                region.len(),
                region.name()
            )));
        }
        let geo = Geometry::for_pages(page_count);
        // 1. Invalidate any previous superblock.
        region.write(0, &0u64.to_le_bytes())?;
        region.persist(0, 8)?;
        // 2. The bitmap: metadata pages allocated, the rest free.
        let mut words = vec![0u64; geo.word_count()];
        bits::fill(&mut words, 0, geo.data_start(), true);
        let bitmap_len = (geo.bitmap_page_count * PAGE_SIZE_BYTES) as usize;
        let mut image = vec![0u8; bitmap_len];
        for (chunk, w) in image.chunks_exact_mut(8).zip(&words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        region.write(geo.bitmap_offset(), &image)?;
        region.persist(geo.bitmap_offset(), bitmap_len)?;
        // 3. The superblock without its magic, the identity block (a new
        // random region id, no owner), and the reserved rest of page 0.
        let sb = geo.encode();
        let mut page0 = vec![0u8; PAGE_SIZE_BYTES as usize];
        page0[8..SUPERBLOCK_BYTES].copy_from_slice(&sb[8..]);
        let id = encode_identity(random_id()?, region.len());
        page0[ID_OFFSET as usize..ID_OFFSET as usize + ID_BYTES].copy_from_slice(&id);
        region.write(8, &page0[8..])?;
        region.persist(0, PAGE_SIZE_BYTES as usize)?;
        // 4. Commit: the 8-byte magic.
        region.write(0, &sb[..8])?;
        region.persist(0, 8)?;
        let free_pages = page_count - geo.data_start();
        let written = 8 + image.len() + page0.len() - 8 + 8;
        Ok(PageAllocator {
            region,
            geo,
            inner: Mutex::new(Inner {
                words,
                free_pages,
                cursor: geo.data_start(),
            }),
            bytes_written: std::sync::atomic::AtomicU64::new(written as u64),
        })
    }

    /// Opens a formatted region, validating the superblock and loading the
    /// bitmap.
    ///
    /// Errors: [`Error::NotADatabase`] if the region was never formatted
    /// (zero magic: the engine may [`format`](Self::format) it) or has an
    /// unsupported format version; [`Error::Corruption`] naming the region
    /// and offset for a bad magic, checksum or geometry, or a metadata page
    /// marked free.
    pub fn open(region: Arc<dyn PmRegion>) -> Result<PageAllocator> {
        let name = region.name().to_string();
        if region.len() < PAGE_SIZE_BYTES {
            return Err(Error::NotADatabase(format!(
                "{name}: region of {} bytes is too small to hold a PM allocator",
                region.len()
            )));
        }
        let mut sb = [0u8; SUPERBLOCK_BYTES];
        region.read(0, &mut sb)?;
        let magic = u64_at(&sb, 0);
        if magic == 0 {
            return Err(Error::NotADatabase(format!(
                "{name}: no PM allocator superblock (region never formatted)"
            )));
        }
        if magic != MAGIC {
            return Err(Error::corruption(
                &name,
                0,
                format!("bad PM superblock magic {magic:#018x} (expected {MAGIC:#018x})"),
            ));
        }
        let stored = u32_at(&sb, CRC_OFFSET);
        let computed = crate::coding::crc32c(&sb[..CRC_OFFSET]);
        if stored != computed {
            return Err(Error::corruption(
                &name,
                CRC_OFFSET as u64,
                format!(
                    "PM superblock checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
                ),
            ));
        }
        let version = u32_at(&sb, OFF_VERSION);
        if version != FORMAT_VERSION {
            return Err(Error::NotADatabase(format!(
                "{name}: PM allocator format version {version}, this build reads {FORMAT_VERSION}"
            )));
        }
        let expect = Geometry::for_pages(region.len() / PAGE_SIZE_BYTES);
        let fields = [
            (
                OFF_PAGE_SIZE,
                u64::from(u32_at(&sb, OFF_PAGE_SIZE)),
                PAGE_SIZE_BYTES,
                "page size",
            ),
            (
                OFF_PAGE_COUNT,
                u64_at(&sb, OFF_PAGE_COUNT),
                expect.page_count,
                "page count",
            ),
            (
                OFF_BITMAP_FIRST,
                u64_at(&sb, OFF_BITMAP_FIRST),
                expect.bitmap_first_page,
                "first bitmap page",
            ),
            (
                OFF_BITMAP_PAGES,
                u64_at(&sb, OFF_BITMAP_PAGES),
                expect.bitmap_page_count,
                "bitmap page count",
            ),
        ];
        for (off, got, want, what) in fields {
            if got != want {
                return Err(Error::corruption(
                    &name,
                    off as u64,
                    format!(
                        "PM superblock {what} is {got}, but a region of {} bytes needs {want}",
                        region.len()
                    ),
                ));
            }
        }
        if expect.page_count < MIN_PAGES {
            return Err(Error::corruption(
                &name,
                OFF_PAGE_COUNT as u64,
                format!(
                    "PM superblock page count {} is below {MIN_PAGES}",
                    expect.page_count
                ),
            ));
        }
        let geo = expect;
        let mut words = vec![0u64; geo.word_count()];
        let raw = region.slice(geo.bitmap_offset(), words.len() * 8)?;
        for (w, chunk) in words.iter_mut().zip(raw.chunks_exact(8)) {
            let mut a = [0u8; 8];
            a.copy_from_slice(chunk);
            *w = u64::from_le_bytes(a);
        }
        // Invariant 4: ignore bits beyond the last page.
        let tail = geo.page_count % 64;
        if tail != 0 {
            if let Some(last) = words.last_mut() {
                *last &= (1u64 << tail) - 1;
            }
        }
        // Invariant 1: written before the magic, so always present.
        if let Some(p) = bits::next_clear(&words, 0, geo.data_start()) {
            return Err(Error::corruption(
                &name,
                geo.word_offset((p / 64) as usize),
                format!("PM bitmap marks metadata page {p} free"),
            ));
        }
        let used: u64 = words.iter().map(|w| u64::from(w.count_ones())).sum();
        let free_pages = geo.page_count - used;
        Ok(PageAllocator {
            region,
            geo,
            inner: Mutex::new(Inner {
                words,
                free_pages,
                cursor: geo.data_start(),
            }),
            bytes_written: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Stores one bitmap word into the region (volatile; the caller
    /// persists), counting the bytes.
    fn store_word(&self, w: usize, word: u64) -> Result<()> {
        self.bytes_written
            .fetch_add(8, std::sync::atomic::Ordering::Relaxed);
        self.region
            .write(self.geo.word_offset(w), &word.to_le_bytes())
    }

    /// The region's identity (`None`: formatted before identities existed;
    /// see [`PageAllocator::adopt_identity`]).
    pub fn identity(&self) -> Result<Option<RegionIdentity>> {
        read_identity(self.region.as_ref())
    }

    /// Gives a region formatted before identities existed one (a new random
    /// region id, no owner), persisted id-magic last; returns it. A region
    /// that has one keeps it.
    pub fn adopt_identity(&self) -> Result<RegionIdentity> {
        if let Some(id) = self.identity()? {
            return Ok(id);
        }
        let b = encode_identity(random_id()?, self.region.len());
        self.region.write(ID_OFFSET + 8, &b[8..])?;
        self.region.persist(ID_OFFSET + 8, ID_BYTES - 8)?;
        self.region.write(ID_OFFSET, &b[..8])?;
        self.region.persist(ID_OFFSET, 8)?;
        self.bytes_written
            .fetch_add(ID_BYTES as u64, std::sync::atomic::Ordering::Relaxed);
        self.identity()?.ok_or_else(|| {
            Error::corruption(
                self.region.name(),
                ID_OFFSET,
                "PM region identity did not stick",
            )
        })
    }

    /// Records `owner` (a database id) as the region's owner: one atomic,
    /// persisted 8-byte store.
    pub fn bind(&self, owner: u64) -> Result<()> {
        if owner & !DB_ID_MASK != 0 {
            return Err(Error::InvalidArgument(format!(
                "database id {owner:#x} has more than 56 bits"
            )));
        }
        let word = if owner == 0 { 0 } else { owner_word(owner) };
        self.region.write(ID_OWNER, &word.to_le_bytes())?;
        self.region.persist(ID_OWNER, 8)?;
        self.bytes_written
            .fetch_add(8, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Bytes this allocator has stored into the region since it was opened
    /// (or formatted): its PM metadata writes.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Writes words `w0..=w1` of the DRAM bitmap to the region and persists
    /// them.
    fn write_words(&self, words: &[u64], w0: usize, w1: usize) -> Result<()> {
        for (w, word) in words.iter().enumerate().take(w1 + 1).skip(w0) {
            self.store_word(w, *word)?;
        }
        self.region
            .persist(self.geo.word_offset(w0), (w1 - w0 + 1) * 8)
    }

    /// Applies `fill` to the DRAM bitmap and persists the touched words; on
    /// failure restores the previous words (DRAM and volatile PM).
    fn update(&self, inner: &mut Inner, first: u64, n: u64, set: bool) -> Result<()> {
        let w0 = (first / 64) as usize;
        let w1 = ((first + n - 1) / 64) as usize;
        let saved: Vec<u64> = inner.words[w0..=w1].to_vec();
        bits::fill(&mut inner.words, first, n, set);
        if let Err(e) = self.write_words(&inner.words, w0, w1) {
            inner.words[w0..=w1].copy_from_slice(&saved);
            for (i, word) in saved.iter().enumerate() {
                // Best effort: a write in range cannot fail.
                let _ = self.store_word(w0 + i, *word);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Allocates a run of `pages` contiguous pages (next fit from a cursor).
    /// The run is persisted as allocated before this returns. `Ok(None)` if
    /// no free run is long enough (PM full).
    ///
    /// Errors: [`Error::InvalidArgument`] for `pages == 0`; I/O errors from
    /// the persist (the allocation is then undone).
    pub fn alloc(&self, pages: u64) -> Result<Option<PageRun>> {
        if pages == 0 {
            return Err(Error::InvalidArgument(format!(
                "{}: allocation of 0 pages",
                self.region.name()
            )));
        }
        let mut inner = self.inner.lock();
        if pages > inner.free_pages {
            return Ok(None);
        }
        let (start, total) = (self.geo.data_start(), self.geo.page_count);
        let cursor = inner.cursor;
        let found = bits::find_run(&inner.words, cursor, total, pages).or_else(|| {
            let hi = cursor.saturating_add(pages - 1).min(total);
            bits::find_run(&inner.words, start, hi, pages)
        });
        let Some(first) = found else {
            return Ok(None);
        };
        self.update(&mut inner, first, pages, true)?;
        inner.free_pages -= pages;
        let end = first + pages;
        inner.cursor = if end >= total { start } else { end };
        Ok(Some(PageRun {
            first,
            count: pages,
        }))
    }

    /// Checks that `run` is non-empty and inside the data pages.
    fn check_run(&self, run: PageRun, what: &str) -> Result<()> {
        let end = run.first.checked_add(run.count);
        match end {
            Some(end)
                if run.count > 0
                    && run.first >= self.geo.data_start()
                    && end <= self.geo.page_count =>
            {
                Ok(())
            }
            _ => Err(Error::InvalidArgument(format!(
                "{}: {what} of pages {}+{} outside the data pages {}..{}",
                self.region.name(),
                run.first,
                run.count,
                self.geo.data_start(),
                self.geo.page_count
            ))),
        }
    }

    /// Frees a run returned by [`alloc`](Self::alloc) (or a sub-run of one)
    /// and persists that.
    ///
    /// Errors: [`Error::InvalidArgument`] if the run is empty, outside the
    /// data pages, or contains a page that is not allocated (a double free);
    /// nothing is changed then.
    pub fn free(&self, run: PageRun) -> Result<()> {
        self.check_run(run, "free")?;
        let mut inner = self.inner.lock();
        let end = run.first + run.count;
        if let Some(p) = bits::next_clear(&inner.words, run.first, end) {
            return Err(Error::InvalidArgument(format!(
                "{}: free of pages {}+{}: page {p} is not allocated (double free?)",
                self.region.name(),
                run.first,
                run.count
            )));
        }
        self.update(&mut inner, run.first, run.count, false)?;
        inner.free_pages += run.count;
        Ok(())
    }

    /// Recovery: rebuilds the bitmap to exactly the metadata pages plus the
    /// `live` runs (those the MANIFEST references) and persists it. Pages
    /// allocated before a crash but never committed are reclaimed; runs
    /// freed before a crash whose free was not persisted are freed.
    ///
    /// Errors: [`Error::InvalidArgument`] if a run is empty, outside the data
    /// pages, or overlaps another live run; nothing is changed then.
    pub fn reconcile(&self, live: &[PageRun]) -> Result<()> {
        let mut words = vec![0u64; self.geo.word_count()];
        bits::fill(&mut words, 0, self.geo.data_start(), true);
        let mut used = 0u64;
        for &run in live {
            self.check_run(run, "live run")?;
            let end = run.first + run.count;
            if bits::next_set(&words, run.first, end) != end {
                return Err(Error::InvalidArgument(format!(
                    "{}: live run of pages {}+{} overlaps another live run",
                    self.region.name(),
                    run.first,
                    run.count
                )));
            }
            bits::fill(&mut words, run.first, run.count, true);
            used += run.count;
        }
        let mut inner = self.inner.lock();
        let differs = |w: &usize| words[*w] != inner.words[*w];
        let w0 = (0..words.len()).find(differs);
        let w1 = (0..words.len()).rev().find(differs);
        if let (Some(w0), Some(w1)) = (w0, w1) {
            for w in (w0..=w1).filter(differs) {
                self.store_word(w, words[w])?;
            }
            self.region
                .persist(self.geo.word_offset(w0), (w1 - w0 + 1) * 8)?;
        }
        inner.words = words;
        inner.free_pages = self.geo.page_count - self.geo.data_start() - used;
        inner.cursor = self.geo.data_start();
        Ok(())
    }

    /// True if `page` is marked allocated (metadata pages included).
    pub fn is_allocated(&self, page: u64) -> bool {
        page < self.geo.page_count && bits::is_set(&self.inner.lock().words, page)
    }

    /// Byte offset of `page` in the region.
    pub fn page_offset(&self, page: u64) -> u64 {
        debug_assert!(page < self.geo.page_count, "page {page} out of range");
        page * PAGE_SIZE_BYTES
    }

    /// Page size in bytes (4096).
    pub fn page_size(&self) -> u64 {
        PAGE_SIZE_BYTES
    }

    /// Pages in the region, metadata pages included.
    pub fn total_pages(&self) -> u64 {
        self.geo.page_count
    }

    /// First data page (= number of metadata pages: superblock + bitmap).
    pub fn data_start_page(&self) -> u64 {
        self.geo.data_start()
    }

    /// Data pages not allocated.
    pub fn free_pages(&self) -> u64 {
        self.inner.lock().free_pages
    }

    /// The region the allocator manages.
    pub fn region(&self) -> &Arc<dyn PmRegion> {
        &self.region
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::storage::sim::SimRegion;
    use rand::{Rng, SeedableRng};

    fn sim(pages: u64) -> Arc<SimRegion> {
        Arc::new(SimRegion::new((pages * PAGE_SIZE_BYTES) as usize))
    }

    fn run(first: u64, count: u64) -> PageRun {
        PageRun { first, count }
    }

    #[test]
    fn geometry() {
        let g = Geometry::for_pages(16384);
        assert_eq!((g.bitmap_page_count, g.data_start()), (1, 2));
        assert_eq!(Geometry::for_pages(32768).bitmap_page_count, 1);
        assert_eq!(Geometry::for_pages(32769).bitmap_page_count, 2);
        // 800 MB (the paper10 PM tier): 204800 pages, 7 bitmap pages.
        let g = Geometry::for_pages(800 * 1024 * 1024 / 4096);
        assert_eq!((g.bitmap_page_count, g.data_start()), (7, 8));
    }

    #[test]
    fn worked_example_from_the_docs() {
        let r = sim(16384);
        let a = PageAllocator::format(r.clone()).unwrap();
        assert_eq!(r.slice(0, 8).unwrap(), b"tierkvPM");
        assert_eq!(u64_at(r.slice(4096, 8).unwrap(), 0), 0x3);
        assert_eq!(a.alloc(3).unwrap(), Some(run(2, 3)));
        assert_eq!(u64_at(r.slice(4096, 8).unwrap(), 0), 0x1f);
        assert_eq!(a.page_offset(2), 8192);
        assert_eq!(a.free_pages(), 16384 - 2 - 3);
        let sb = r.slice(0, 48).unwrap();
        assert_eq!(u64_at(sb, 16), 16384);
        assert_eq!(u32_at(sb, 40), crate::coding::crc32c(&sb[..40]));
        assert_eq!(
            u32_at(sb, 40),
            0x0f01_11b4,
            "the crc shown in docs/format/pm.md"
        );
        a.alloc(1).unwrap();
        a.free(run(2, 3)).unwrap();
        assert_eq!(u64_at(r.slice(4096, 8).unwrap(), 0), 0x23);
        assert_eq!(a.alloc(1).unwrap(), Some(run(6, 1)));
    }

    #[test]
    fn bit_helpers() {
        let mut w = vec![0u64; 3];
        assert_eq!(bits::fill(&mut w, 60, 10, true), (0, 1));
        assert_eq!(w[0], 0xf000_0000_0000_0000);
        assert_eq!(w[1], 0x3f);
        assert_eq!(bits::next_clear(&w, 60, 192), Some(70));
        assert_eq!(bits::next_set(&w, 0, 192), 60);
        assert_eq!(bits::next_set(&w, 70, 192), 192);
        assert_eq!(bits::find_run(&w, 0, 192, 60), Some(0));
        assert_eq!(bits::find_run(&w, 1, 192, 60), Some(70));
        assert_eq!(bits::find_run(&w, 1, 129, 60), None);
        bits::fill(&mut w, 0, 192, true);
        assert_eq!(w, vec![u64::MAX; 3]);
        assert_eq!(bits::next_clear(&w, 0, 192), None);
        bits::fill(&mut w, 64, 64, false);
        assert_eq!(w[1], 0);
        assert_eq!(bits::find_run(&w, 0, 192, 64), Some(64));
    }

    #[test]
    fn alloc_free_next_fit_and_full() {
        let r = sim(64);
        let a = PageAllocator::format(r).unwrap();
        assert_eq!(a.total_pages(), 64);
        assert_eq!(a.data_start_page(), 2);
        assert_eq!(a.free_pages(), 62);
        let x = a.alloc(10).unwrap().unwrap();
        let y = a.alloc(10).unwrap().unwrap();
        assert_eq!((x, y), (run(2, 10), run(12, 10)));
        a.free(x).unwrap();
        // Next fit: continues after y rather than reusing x at once.
        assert_eq!(a.alloc(5).unwrap(), Some(run(22, 5)));
        // 37 pages left at the end: 27..64; a 40-page run only fits nowhere.
        assert_eq!(a.alloc(40).unwrap(), None);
        assert_eq!(a.alloc(37).unwrap(), Some(run(27, 37)));
        // Wraps around to the freed x.
        assert_eq!(a.alloc(10).unwrap(), Some(run(2, 10)));
        assert_eq!(a.free_pages(), 0);
        assert_eq!(a.alloc(1).unwrap(), None);
        assert!(matches!(a.alloc(0), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn bad_frees_are_invalid_arguments_and_change_nothing() {
        let a = PageAllocator::format(sim(64)).unwrap();
        let x = a.alloc(4).unwrap().unwrap();
        for bad in [
            run(0, 1),
            run(1, 2),
            run(60, 10),
            run(u64::MAX, 2),
            run(x.first, 0),
        ] {
            assert!(
                matches!(a.free(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        // Partly free: rejected whole.
        assert!(matches!(
            a.free(run(x.first, 5)),
            Err(Error::InvalidArgument(_))
        ));
        assert!(a.is_allocated(x.first + 3));
        a.free(x).unwrap();
        match a.free(x) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("double free"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(a.free_pages(), 62);
    }

    #[test]
    fn reopen_keeps_state_and_reconcile_is_exact() {
        let r = sim(300);
        let a = PageAllocator::format(r.clone()).unwrap();
        let runs: Vec<_> = (1..=12).map(|n| a.alloc(n).unwrap().unwrap()).collect();
        a.free(runs[3]).unwrap();
        drop(a);
        let b = PageAllocator::open(r.clone()).unwrap();
        for (i, x) in runs.iter().enumerate() {
            assert_eq!(b.is_allocated(x.first), i != 3);
        }
        assert_eq!(b.free_pages(), 298 - (78 - 4));
        // The manifest only knows runs 0, 5 and 11.
        let live = [runs[0], runs[5], runs[11]];
        b.reconcile(&live).unwrap();
        let live_pages: u64 = live.iter().map(|r| r.count).sum();
        assert_eq!(b.free_pages(), 298 - live_pages);
        for p in 0..300 {
            let want = p < 2
                || live
                    .iter()
                    .any(|r| (r.first..r.first + r.count).contains(&p));
            assert_eq!(b.is_allocated(p), want, "page {p}");
        }
        // Persisted: a crash keeps the reconciled bitmap.
        let c = PageAllocator::open(Arc::new(r.crash())).unwrap();
        assert_eq!(c.free_pages(), 298 - live_pages);
        // Overlapping or out-of-range live runs are refused.
        assert!(c.reconcile(&[run(2, 5), run(6, 1)]).is_err());
        assert!(c.reconcile(&[run(1, 1)]).is_err());
        assert_eq!(c.free_pages(), 298 - live_pages);
    }

    #[test]
    fn unformatted_and_too_small_regions() {
        assert!(matches!(
            PageAllocator::open(sim(8)),
            Err(Error::NotADatabase(_))
        ));
        assert!(matches!(
            PageAllocator::open(Arc::new(SimRegion::new(100))),
            Err(Error::NotADatabase(_))
        ));
        match PageAllocator::format(sim(2)) {
            Err(Error::InvalidOptions(m)) => assert!(m.contains("pm_size_bytes"), "{m}"),
            other => panic!("{other:?}"),
        }
        // A partial last page is ignored.
        let r = Arc::new(SimRegion::new(5 * 4096 + 1000));
        let a = PageAllocator::format(r.clone()).unwrap();
        assert_eq!(a.total_pages(), 5);
        drop(a);
        assert_eq!(PageAllocator::open(r).unwrap().free_pages(), 3);
    }

    #[test]
    fn flipped_superblock_byte_is_corruption_naming_region_and_offset() {
        for byte in 0..CRC_OFFSET as u64 + 4 {
            let r = sim(64);
            drop(PageAllocator::format(r.clone()).unwrap());
            r.corrupt(byte, 0x10).unwrap();
            match PageAllocator::open(r.clone()) {
                Err(Error::Corruption { at, what }) => {
                    assert_eq!(at.source, r.name());
                    assert!(
                        at.offset == 0 || at.offset == CRC_OFFSET as u64,
                        "{byte}: {at}"
                    );
                    assert!(what.contains("superblock"), "{what}");
                }
                other => panic!("byte {byte}: expected corruption, got {other:?}"),
            }
        }
    }

    #[test]
    fn geometry_and_version_mismatch_with_valid_crc() {
        // A superblock for 128 pages in a 64-page region.
        let r = sim(64);
        drop(PageAllocator::format(r.clone()).unwrap());
        let sb = Geometry::for_pages(128).encode();
        r.write(0, &sb).unwrap();
        match PageAllocator::open(r.clone()) {
            Err(Error::Corruption { at, what }) => {
                assert_eq!(at.offset, OFF_PAGE_COUNT as u64);
                assert!(what.contains("128") && what.contains("64"), "{what}");
            }
            other => panic!("{other:?}"),
        }
        // Version 2, checksum valid: not ours to read.
        let mut sb = Geometry::for_pages(64).encode();
        sb[OFF_VERSION] = 2;
        let crc = crate::coding::crc32c(&sb[..CRC_OFFSET]);
        sb[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        r.write(0, &sb).unwrap();
        assert!(matches!(
            PageAllocator::open(r.clone()),
            Err(Error::NotADatabase(_))
        ));
        // Metadata page marked free in the bitmap.
        r.write(0, &Geometry::for_pages(64).encode()).unwrap();
        r.write(4096, &0u64.to_le_bytes()).unwrap();
        match PageAllocator::open(r) {
            Err(Error::Corruption { at, .. }) => assert_eq!(at.offset, 4096),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn crash_at_every_persist_point_of_format() {
        let r = sim(64);
        let base = r.persist_count();
        drop(PageAllocator::format(r.clone()).unwrap());
        let points = r.persist_count() - base;
        assert_eq!(points, 4);
        for k in 0..=points {
            let r = sim(64);
            // A previous format with 5 pages in use must not survive a torn
            // re-format, except when the crash comes before any persist.
            let old = PageAllocator::format(r.clone()).unwrap();
            old.alloc(5).unwrap().unwrap();
            drop(old);
            r.set_persist_budget(Some(k));
            drop(PageAllocator::format(r.clone()).unwrap());
            match PageAllocator::open(Arc::new(r.crash())) {
                Ok(a) if k == 0 => assert_eq!(a.free_pages(), 57),
                Ok(a) if k == points => assert_eq!(a.free_pages(), 62),
                Err(Error::NotADatabase(_)) if k > 0 && k < points => {}
                other => panic!("k={k}: {other:?}"),
            }
        }
    }

    #[derive(Debug, Clone, Copy)]
    enum Step {
        Alloc(u64),
        /// Free the live run at this index (modulo the live count).
        Free(usize),
    }

    fn script(seed: u64, len: usize) -> Vec<Step> {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        (0..len)
            .map(|_| {
                if rng.gen_bool(0.6) {
                    Step::Alloc(rng.gen_range(1..24))
                } else {
                    Step::Free(rng.gen_range(0..1000))
                }
            })
            .collect()
    }

    /// Runs `steps`; returns after each step the persists issued so far and
    /// the live runs, plus, per run, the step that freed it (if any).
    fn play(a: &PageAllocator, r: &SimRegion, steps: &[Step]) -> Vec<(u64, Vec<PageRun>)> {
        let base = r.persist_count();
        let mut live: Vec<PageRun> = Vec::new();
        let mut trace = vec![(0, live.clone())];
        for &s in steps {
            match s {
                Step::Alloc(n) => {
                    if let Some(x) = a.alloc(n).unwrap() {
                        assert!(live
                            .iter()
                            .all(|y| x.first + x.count <= y.first || y.first + y.count <= x.first));
                        live.push(x);
                    }
                }
                Step::Free(i) => {
                    if !live.is_empty() {
                        let x = live.remove(i % live.len());
                        a.free(x).unwrap();
                    }
                }
            }
            trace.push((r.persist_count() - base, live.clone()));
        }
        trace
    }

    fn check_exact(a: &PageAllocator, live: &[PageRun]) {
        let data = a.total_pages() - a.data_start_page();
        let used: u64 = live.iter().map(|r| r.count).sum();
        assert_eq!(a.free_pages(), data - used);
        for p in 0..a.total_pages() {
            let want = p < a.data_start_page()
                || live
                    .iter()
                    .any(|r| (r.first..r.first + r.count).contains(&p));
            assert_eq!(a.is_allocated(p), want, "page {p}");
        }
    }

    #[test]
    fn crash_at_every_persist_point_of_alloc_and_free() {
        const PAGES: u64 = 200; // 4 bitmap words: runs cross word boundaries
        for seed in 0..3 {
            let steps = script(seed, 60);
            let reference = {
                let r = sim(PAGES);
                let a = PageAllocator::format(r.clone()).unwrap();
                play(&a, &r, &steps)
            };
            let points = reference.last().unwrap().0;
            assert!(points > 30, "the script exercises enough persists");
            for k in 0..=points {
                for evict in [None, Some(seed * 1000 + k)] {
                    let r = sim(PAGES);
                    let a = PageAllocator::format(r.clone()).unwrap();
                    r.set_persist_budget(Some(k));
                    let trace = play(&a, &r, &steps);
                    assert_eq!(trace, reference, "deterministic");
                    // The state after the last step whose persists all took effect.
                    let i = trace.iter().rposition(|(c, _)| *c <= k).unwrap();
                    let durable = &trace[i].1;
                    let crashed = Arc::new(match evict {
                        None => r.crash(),
                        Some(s) => r.crash_with_evictions(s),
                    });
                    let b = PageAllocator::open(crashed.clone())
                        .unwrap_or_else(|e| panic!("seed {seed} k {k}: {e}"));
                    match evict {
                        // Without evictions the durable bitmap is exactly
                        // the state after step i.
                        None => check_exact(&b, durable),
                        // With evictions, later steps' words may also have
                        // landed: a run stays allocated if no later step
                        // freed it.
                        Some(_) => {
                            let end = &trace.last().unwrap().1;
                            for x in durable.iter().filter(|x| end.contains(x)) {
                                for p in x.first..x.first + x.count {
                                    assert!(b.is_allocated(p), "seed {seed} k {k} page {p}");
                                }
                            }
                        }
                    }
                    // Recovery: the manifest says `durable` is live.
                    b.reconcile(durable).unwrap();
                    check_exact(&b, durable);
                    // New allocations never hand out a live page.
                    let mut more = Vec::new();
                    while let Some(x) = b.alloc(7).unwrap() {
                        more.push(x);
                    }
                    let mut all = durable.clone();
                    all.extend(&more);
                    check_exact(&b, &all);
                    let c = PageAllocator::open(Arc::new(crashed.crash())).unwrap();
                    check_exact(&c, &all);
                }
            }
        }
    }

    #[test]
    fn concurrent_alloc_free_never_overlap() {
        let a = Arc::new(PageAllocator::format(sim(1000)).unwrap());
        let owner = Arc::new(Mutex::new(vec![usize::MAX; 1000]));
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let (a, owner) = (a.clone(), owner.clone());
                std::thread::spawn(move || {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(t as u64);
                    let mut mine = Vec::new();
                    for _ in 0..500 {
                        if rng.gen_bool(0.55) {
                            if let Some(x) = a.alloc(rng.gen_range(1..16)).unwrap() {
                                let mut o = owner.lock();
                                for p in x.first..x.first + x.count {
                                    assert_eq!(
                                        o[p as usize],
                                        usize::MAX,
                                        "page {p} handed out twice"
                                    );
                                    o[p as usize] = t;
                                }
                                mine.push(x);
                            }
                        } else if !mine.is_empty() {
                            let x = mine.swap_remove(rng.gen_range(0..mine.len()));
                            {
                                let mut o = owner.lock();
                                for p in x.first..x.first + x.count {
                                    o[p as usize] = usize::MAX;
                                }
                            }
                            a.free(x).unwrap();
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut live = Vec::new();
        for h in hs {
            live.extend(h.join().unwrap());
        }
        check_exact(&a, &live);
    }
}
