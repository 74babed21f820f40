//! The byte layouts of TLSM's PM structures (docs/format/pm.md, "TLSM
//! persistent skip lists"): entries, persistent buffers, nodes, the list
//! header with its link words, the directory, and the slot run of an
//! in-flight compaction. Encoders write into DRAM buffers; decoders take
//! bytes read from PM and return `None` (or a reason) on anything out of
//! shape — the callers turn that into `Error::Corruption` with the region
//! and offset. Nothing here panics on any input.
//!
//! ```text
//! entry (in a buffer):      varint klen | varint vlen | internal key | value
//! entry (inline, PS):       u32 crc32c(rest) | varint klen | varint vlen | ikey | value
//!
//! buffer run (full variant: one per flush, shared by every list linking into it)
//!   0  8  magic "TLSMBuf\0"        24  8  entry bytes L
//!   8  4  version = 1              32  4  crc32c of the entries
//!  12  4  header bytes = 40        36  4  crc32c of bytes 0..36
//!  16  8  buffer id (a flush's: its list id; a copy-forward's: its job id)
//!  40  L  entries, back to back
//!
//! node (8-byte aligned; nodes of a list are laid out in key order)
//!   0  8  entry_off: region offset of the entry (HEAD_MARK: the head node;
//!         0: the null sentinel or a run marker)
//!   8  1  height h (1..=12; head 12; sentinel 0; run marker 0xff)
//!   9  3  reserved 0
//!  12  4  sentinel: crc32c of every node and marker before it; else 0
//!  16 8h  next[0..h]: region offset of the next node of each level (0:
//!         none; the last node's next[0] is the sentinel)
//!  16+8h  PS variants, when entry_off = node + 16 + 8h: the inline entry,
//!         zero padded to 8 bytes
//!
//! header run (one or more pages; pm_pages[0] of the list)
//!   0  8  magic "TLSMSkip"         36  1  variant (0 ps, 1 ps_bac, 2 full)
//!   8  4  version = 1              37  1  origin (0 flush, 1 compaction,
//!  12  4  link offset W                    2 copy-forward)
//!  16  8  list id                  40  4  ordinal (output number in its job)
//!  24  8  job id (0: a flush)      44  4  input count m
//!  32  4  level                    48 8m  input list ids
//!  48+8m  4  crc32c of bytes 0 .. 48+8m          W = align8(52 + 8m)
//!  W       8  linked count         (link word)
//!  W+8     8  directory offset     (link word; 0 = the list is not closed)
//!  W+16    8  node run count k     (link word)
//!  W+24  8×64 node run slots       (link words: first_page << 20 | pages)
//!  W+536      the directory, when it fits in the header run
//!
//! directory
//!   0  8  magic "TLSMDir\0"    24  8  entry bytes (Σ referenced entries)
//!   8  4  version = 1          32  4  node run count k
//!  12  4  data run count r     36  4  reserved 0
//!  16  8  entries n            40 12k node runs (u64 first page, u32 pages)
//!  40+12k 20r  data runs, by first page (u64 first page, u32 pages,
//!              u64 bytes of this list's entries in the run)
//!  end  4  crc32c of everything before
//!
//! slot run (one per in-flight compaction, named by its MANIFEST record)
//!   0  8  magic "TLSMSlot"    16  4  output capacity c
//!   8  8  job id              20  4  grandparent block bytes G
//!  24  G  grandparents: varint g, g × (varint len, largest ikey, varint bytes)
//!  24+G 4 crc32c of bytes 0 .. 24+G              V = align8(28 + G)
//!  V     8  output count        (link word)
//!  V+8   8  job buffer          (link word: first_page << 20 | pages)
//!  V+16 8c  output header offsets (link words)
//! ```

use crate::coding::{get_u32, get_u64, get_varint, put_u32, put_u64, put_varint, varint_len};
use crate::storage::alloc::PageRun;

/// `"TLSMBuf\0"`.
pub const BUFFER_MAGIC: [u8; 8] = *b"TLSMBuf\0";
/// `"TLSMSkip"`.
pub const HEADER_MAGIC: [u8; 8] = *b"TLSMSkip";
/// `"TLSMDir\0"`.
pub const DIR_MAGIC: [u8; 8] = *b"TLSMDir\0";
/// `"TLSMSlot"`.
pub const SLOT_MAGIC: [u8; 8] = *b"TLSMSlot";
/// Version of every TLSM structure this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Tallest node (the head's height).
pub const MAX_HEIGHT: usize = 12;
/// `entry_off` of the head node.
pub const HEAD_MARK: u64 = u64::MAX;
/// Height byte of a run marker (the list continues at the next node run).
pub const MARKER_HEIGHT: u8 = 0xff;
/// Bytes of a node before its `next` words (also the size of the
/// sentinel and of a run marker).
pub const NODE_FIXED: usize = 16;
/// Bytes of a buffer's header.
pub const BUFFER_HEADER_BYTES: usize = 40;
/// Node run slots in a header.
pub const NODE_RUN_SLOTS: usize = 64;
/// Bytes of the link-word block of a header (count, dir, k, slots).
pub const HEADER_LINK_BYTES: usize = 24 + 8 * NODE_RUN_SLOTS;
/// Fixed bytes of a directory (without runs and crc).
pub const DIR_FIXED: usize = 40;
/// Bytes of one node run in a directory.
pub const DIR_NODE_RUN: usize = 12;
/// Bytes of one data run in a directory.
pub const DIR_DATA_RUN: usize = 20;

/// Rounds `n` up to a multiple of 8.
#[inline]
pub fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// The height of the node of `ikey`: 1 + (trailing zero bit pairs of a
/// hash of the key), at most [`MAX_HEIGHT`] — p = 1/4 per level, and the
/// same height for the same key in every build (so a resumed compaction
/// writes the very nodes an uninterrupted one would).
#[inline]
pub fn height_of(ikey: &[u8]) -> usize {
    let h = xxhash_rust::xxh3::xxh3_64(ikey);
    1 + ((h.trailing_zeros() / 2) as usize).min(MAX_HEIGHT - 1)
}

/// Bytes of a node of `height` carrying an inline entry of `inline_len`
/// bytes (0: none).
#[inline]
pub fn node_size(height: usize, inline_len: usize) -> usize {
    NODE_FIXED + 8 * height + align8(inline_len)
}

/// Packs a page run into one link word.
#[inline]
pub fn pack_run(r: PageRun) -> u64 {
    (r.first << 20) | r.count
}

/// Unpacks a link word made by [`pack_run`]; `None` for 0 or a run too
/// large to pack.
#[inline]
pub fn unpack_run(w: u64) -> Option<PageRun> {
    let r = PageRun {
        first: w >> 20,
        count: w & ((1 << 20) - 1),
    };
    (r.count > 0).then_some(r)
}

/// True if `r` can be packed into a link word.
#[inline]
pub fn packable(r: PageRun) -> bool {
    r.count > 0 && r.count < (1 << 20) && r.first < (1 << 44)
}

// --------------------------------------------------------------- entries

/// Where the parts of an entry lie, relative to its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryShape {
    /// Offset of the internal key.
    pub key_at: usize,
    /// Internal key length.
    pub key_len: usize,
    /// Offset of the value.
    pub value_at: usize,
    /// Value length.
    pub value_len: usize,
    /// Bytes of the whole entry (padding excluded).
    pub len: usize,
}

/// Bytes of a buffer entry for `ikey` and `value`.
#[inline]
pub fn entry_len(key_len: usize, value_len: usize) -> usize {
    varint_len(key_len as u64) + varint_len(value_len as u64) + key_len + value_len
}

/// Bytes of an inline entry (with its crc).
#[inline]
pub fn inline_len(key_len: usize, value_len: usize) -> usize {
    4 + entry_len(key_len, value_len)
}

/// Appends a buffer entry.
pub fn put_entry(dst: &mut Vec<u8>, ikey: &[u8], value: &[u8]) {
    put_varint(dst, ikey.len() as u64);
    put_varint(dst, value.len() as u64);
    dst.extend_from_slice(ikey);
    dst.extend_from_slice(value);
}

/// Appends an inline entry (crc first), zero padded to 8 bytes.
pub fn put_inline_entry(dst: &mut Vec<u8>, ikey: &[u8], value: &[u8]) {
    let start = dst.len();
    dst.extend_from_slice(&[0; 4]);
    put_entry(dst, ikey, value);
    let crc = crate::coding::crc32c(&dst[start + 4..]);
    dst[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    let end = start + align8(dst.len() - start);
    dst.resize(end, 0);
}

/// Decodes the lengths of an entry at the front of `b` (a buffer entry;
/// for an inline entry pass the bytes after its crc). `None` if the
/// varints are malformed or the entry does not fit in `b`.
#[inline]
pub fn entry_shape(b: &[u8]) -> Option<EntryShape> {
    entry_shape_from_prefix(b).filter(|s| s.len <= b.len())
}

/// Decodes the lengths of an entry from its first bytes (`ENTRY_PROBE` of
/// them hold both varints); the entry may run past `b` (the caller checks
/// `len` against the room it has). `None` if the varints are malformed.
#[inline]
pub fn entry_shape_from_prefix(b: &[u8]) -> Option<EntryShape> {
    let (k, a) = get_varint(b)?;
    let (v, c) = get_varint(b.get(a..)?)?;
    let key_at = a + c;
    let key_len = usize::try_from(k).ok()?;
    let value_len = usize::try_from(v).ok()?;
    let value_at = key_at.checked_add(key_len)?;
    let len = value_at.checked_add(value_len)?;
    Some(EntryShape {
        key_at,
        key_len,
        value_at,
        value_len,
        len,
    })
}

/// Bytes to read at an entry to learn its shape: both varints.
pub const ENTRY_PROBE: usize = 10;

// ----------------------------------------------------------------- buffer

/// A buffer header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferHeader {
    /// The buffer id: the flushed list's id, or for a copy-forward's
    /// buffer the job id.
    pub id: u64,
    /// Bytes of entries after the header.
    pub entry_bytes: u64,
    /// crc32c of the entries.
    pub entries_crc: u32,
}

/// Encodes a buffer header.
pub fn encode_buffer_header(h: &BufferHeader) -> [u8; BUFFER_HEADER_BYTES] {
    let mut b = [0u8; BUFFER_HEADER_BYTES];
    b[0..8].copy_from_slice(&BUFFER_MAGIC);
    b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&(BUFFER_HEADER_BYTES as u32).to_le_bytes());
    b[16..24].copy_from_slice(&h.id.to_le_bytes());
    b[24..32].copy_from_slice(&h.entry_bytes.to_le_bytes());
    b[32..36].copy_from_slice(&h.entries_crc.to_le_bytes());
    let crc = crate::coding::crc32c(&b[..36]);
    b[36..40].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes a buffer header; the error is `(byte offset in the header, what)`.
pub fn decode_buffer_header(b: &[u8]) -> Result<BufferHeader, (u64, String)> {
    if b.len() < BUFFER_HEADER_BYTES || b[0..8] != BUFFER_MAGIC {
        return Err((0, "persistent buffer: bad magic".into()));
    }
    let crc = get_u32(b, 36).unwrap_or(0);
    if crc != crate::coding::crc32c(&b[..36]) {
        return Err((36, "persistent buffer: header checksum mismatch".into()));
    }
    if get_u32(b, 8) != Some(FORMAT_VERSION) || get_u32(b, 12) != Some(BUFFER_HEADER_BYTES as u32) {
        return Err((
            8,
            "persistent buffer: unknown version or header size".into(),
        ));
    }
    Ok(BufferHeader {
        id: get_u64(b, 16).unwrap_or(0),
        entry_bytes: get_u64(b, 24).unwrap_or(0),
        entries_crc: get_u32(b, 32).unwrap_or(0),
    })
}

// ------------------------------------------------------------------ nodes

/// The fixed part of a node, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeHead {
    /// `entry_off` (HEAD_MARK, 0, or an entry's region offset).
    pub entry_off: u64,
    /// Height byte.
    pub height: u8,
    /// The sentinel's crc word (0 for other nodes).
    pub crc: u32,
}

/// Decodes the 16 fixed bytes of a node.
#[inline]
pub fn node_head(b: &[u8]) -> Option<NodeHead> {
    Some(NodeHead {
        entry_off: get_u64(b, 0)?,
        height: *b.get(8)?,
        crc: get_u32(b, 12)?,
    })
}

/// Appends the fixed part of a node and `height` zero `next` words.
pub fn put_node(dst: &mut Vec<u8>, entry_off: u64, height: usize) {
    put_u64(dst, entry_off);
    dst.push(height as u8);
    dst.extend_from_slice(&[0; 7]);
    dst.resize(dst.len() + 8 * height, 0);
}

/// The 16 bytes of a sentinel carrying `crc`.
pub fn sentinel(crc: u32) -> [u8; NODE_FIXED] {
    let mut b = [0u8; NODE_FIXED];
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The 16 bytes of a run marker.
pub fn run_marker() -> [u8; NODE_FIXED] {
    let mut b = [0u8; NODE_FIXED];
    b[8] = MARKER_HEIGHT;
    b
}

// ----------------------------------------------------------------- header

/// Where a list came from (header byte 37).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A memtable flush.
    Flush,
    /// A compaction output.
    Compaction,
    /// A copy-forward of one list into a fresh buffer.
    CopyForward,
}

impl Origin {
    fn to_u8(self) -> u8 {
        match self {
            Origin::Flush => 0,
            Origin::Compaction => 1,
            Origin::CopyForward => 2,
        }
    }
    fn from_u8(b: u8) -> Option<Origin> {
        Some(match b {
            0 => Origin::Flush,
            1 => Origin::Compaction,
            2 => Origin::CopyForward,
            _ => return None,
        })
    }
}

/// Node layout of a list (header byte 36).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// PS: nodes carry inline entries (flush and copy compaction).
    Ps,
    /// PS+BAC: inline entries at flush, pointer nodes after compaction.
    PsBac,
    /// Full: nodes point into persistent buffers.
    Full,
}

impl Layout {
    /// The variant's byte.
    pub fn to_u8(self) -> u8 {
        match self {
            Layout::Ps => 0,
            Layout::PsBac => 1,
            Layout::Full => 2,
        }
    }
    /// From the byte.
    pub fn from_u8(b: u8) -> Option<Layout> {
        Some(match b {
            0 => Layout::Ps,
            1 => Layout::PsBac,
            2 => Layout::Full,
            _ => return None,
        })
    }
    /// True if entries are stored inline in nodes (PS variants).
    pub fn inline(self) -> bool {
        self != Layout::Full
    }
}

/// The static part of a list header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// List (table) id.
    pub id: u64,
    /// Job id (0 for a flush).
    pub job: u64,
    /// Level the list was written for.
    pub level: u32,
    /// Node layout.
    pub layout: Layout,
    /// Origin.
    pub origin: Origin,
    /// Output number within its job.
    pub ordinal: u32,
    /// Ids of the job's inputs (the paper's "input IDs in the header").
    pub inputs: Vec<u64>,
}

impl Header {
    /// Offset of the link words: `align8(52 + 8m)`.
    pub fn link_offset(&self) -> usize {
        align8(52 + 8 * self.inputs.len())
    }

    /// Bytes of the header before any directory stored inside it.
    pub fn bytes(&self) -> usize {
        self.link_offset() + HEADER_LINK_BYTES
    }

    /// Encodes the static part, padded with zero link words.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.bytes());
        b.extend_from_slice(&HEADER_MAGIC);
        put_u32(&mut b, FORMAT_VERSION);
        put_u32(&mut b, self.link_offset() as u32);
        put_u64(&mut b, self.id);
        put_u64(&mut b, self.job);
        put_u32(&mut b, self.level);
        b.push(self.layout.to_u8());
        b.push(self.origin.to_u8());
        b.extend_from_slice(&[0, 0]);
        put_u32(&mut b, self.ordinal);
        put_u32(&mut b, self.inputs.len() as u32);
        for i in &self.inputs {
            put_u64(&mut b, *i);
        }
        let crc = crate::coding::crc32c(&b);
        put_u32(&mut b, crc);
        b.resize(self.bytes(), 0);
        b
    }

    /// Decodes the static part from the first bytes of a header run
    /// (`b` = the whole run); the error is `(offset, what)`.
    pub fn decode(b: &[u8]) -> Result<Header, (u64, String)> {
        if b.len() < 52 || b[0..8] != HEADER_MAGIC {
            return Err((0, "skip list header: bad magic".into()));
        }
        let m = get_u32(b, 44).unwrap_or(u32::MAX) as usize;
        let crc_at = 48usize.saturating_add(m.saturating_mul(8));
        let Some(crc) = get_u32(b, crc_at) else {
            return Err((
                44,
                format!("skip list header: {m} inputs overrun the header run"),
            ));
        };
        if crc != crate::coding::crc32c(&b[..crc_at]) {
            return Err((crc_at as u64, "skip list header: checksum mismatch".into()));
        }
        if get_u32(b, 8) != Some(FORMAT_VERSION) {
            return Err((8, "skip list header: unknown version".into()));
        }
        let h = Header {
            id: get_u64(b, 16).unwrap_or(0),
            job: get_u64(b, 24).unwrap_or(0),
            level: get_u32(b, 32).unwrap_or(0),
            layout: Layout::from_u8(b[36])
                .ok_or((36, "skip list header: bad variant".to_string()))?,
            origin: Origin::from_u8(b[37])
                .ok_or((37, "skip list header: bad origin".to_string()))?,
            ordinal: get_u32(b, 40).unwrap_or(0),
            inputs: (0..m)
                .map(|i| get_u64(b, 48 + 8 * i).unwrap_or(0))
                .collect(),
        };
        if get_u32(b, 12) != Some(h.link_offset() as u32) || h.bytes() > b.len() {
            return Err((12, "skip list header: bad link offset".into()));
        }
        Ok(h)
    }
}

/// Offsets of a header's link words, relative to the header run.
#[derive(Debug, Clone, Copy)]
pub struct LinkWords {
    /// Linked count.
    pub linked: usize,
    /// Directory offset.
    pub dir: usize,
    /// Node run count.
    pub runs: usize,
    /// First node run slot.
    pub slots: usize,
}

impl LinkWords {
    /// The link words of a header whose link offset is `w`.
    pub fn at(w: usize) -> LinkWords {
        LinkWords {
            linked: w,
            dir: w + 8,
            runs: w + 16,
            slots: w + 24,
        }
    }
}

// -------------------------------------------------------------- directory

/// One data run a list references, with the bytes of its entries there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DataRef {
    /// The run.
    pub run: PageRun,
    /// Bytes of this list's entries inside it.
    pub bytes: u64,
}

/// A list's directory, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directory {
    /// Entries (nodes) in the list.
    pub entries: u64,
    /// Σ bytes of the referenced entries.
    pub entry_bytes: u64,
    /// Node runs, in list order (run 0 starts with the head).
    pub node_runs: Vec<PageRun>,
    /// Data runs, sorted by first page.
    pub data: Vec<DataRef>,
}

impl Directory {
    /// Bytes of the encoding.
    pub fn encoded_len(&self) -> usize {
        DIR_FIXED + DIR_NODE_RUN * self.node_runs.len() + DIR_DATA_RUN * self.data.len() + 4
    }

    /// Encodes the directory.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.encoded_len());
        b.extend_from_slice(&DIR_MAGIC);
        put_u32(&mut b, FORMAT_VERSION);
        put_u32(&mut b, self.data.len() as u32);
        put_u64(&mut b, self.entries);
        put_u64(&mut b, self.entry_bytes);
        put_u32(&mut b, self.node_runs.len() as u32);
        put_u32(&mut b, 0);
        for r in &self.node_runs {
            put_u64(&mut b, r.first);
            put_u32(&mut b, r.count as u32);
        }
        for d in &self.data {
            put_u64(&mut b, d.run.first);
            put_u32(&mut b, d.run.count as u32);
            put_u64(&mut b, d.bytes);
        }
        let crc = crate::coding::crc32c(&b);
        put_u32(&mut b, crc);
        b
    }

    /// Decodes a directory at the front of `b`; the error is `(offset, what)`.
    pub fn decode(b: &[u8]) -> Result<Directory, (u64, String)> {
        if b.len() < DIR_FIXED + 4 || b[0..8] != DIR_MAGIC {
            return Err((0, "skip list directory: bad magic".into()));
        }
        let r = get_u32(b, 12).unwrap_or(0) as usize;
        let k = get_u32(b, 32).unwrap_or(0) as usize;
        let len = DIR_FIXED
            .saturating_add(k.saturating_mul(DIR_NODE_RUN))
            .saturating_add(r.saturating_mul(DIR_DATA_RUN));
        let Some(crc) = get_u32(b, len) else {
            return Err((
                12,
                format!("skip list directory: {k} node runs and {r} data runs overrun it"),
            ));
        };
        if crc != crate::coding::crc32c(&b[..len]) {
            return Err((len as u64, "skip list directory: checksum mismatch".into()));
        }
        if get_u32(b, 8) != Some(FORMAT_VERSION) {
            return Err((8, "skip list directory: unknown version".into()));
        }
        let mut at = DIR_FIXED;
        let mut node_runs = Vec::with_capacity(k);
        for _ in 0..k {
            node_runs.push(PageRun {
                first: get_u64(b, at).unwrap_or(0),
                count: u64::from(get_u32(b, at + 8).unwrap_or(0)),
            });
            at += DIR_NODE_RUN;
        }
        let mut data = Vec::with_capacity(r);
        for _ in 0..r {
            data.push(DataRef {
                run: PageRun {
                    first: get_u64(b, at).unwrap_or(0),
                    count: u64::from(get_u32(b, at + 8).unwrap_or(0)),
                },
                bytes: get_u64(b, at + 12).unwrap_or(0),
            });
            at += DIR_DATA_RUN;
        }
        if node_runs.is_empty()
            || node_runs
                .iter()
                .chain(data.iter().map(|d| &d.run))
                .any(|r| r.count == 0)
            || data.windows(2).any(|w| {
                w[0].run
                    .first
                    .checked_add(w[0].run.count)
                    .is_none_or(|end| end > w[1].run.first)
            })
        {
            return Err((
                DIR_FIXED as u64,
                "skip list directory: empty, unsorted or overlapping runs".into(),
            ));
        }
        Ok(Directory {
            entries: get_u64(b, 16).unwrap_or(0),
            entry_bytes: get_u64(b, 24).unwrap_or(0),
            node_runs,
            data,
        })
    }
}

// ------------------------------------------------------------------- slot

/// The static part of a job's slot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// Job id.
    pub job: u64,
    /// Outputs the slot can name.
    pub capacity: u32,
    /// Grandparents of the job's output level: (largest internal key,
    /// bytes), for cutting outputs exactly as the uninterrupted job would.
    pub grandparents: Vec<(Vec<u8>, u64)>,
}

impl Slot {
    fn gp_block(&self) -> Vec<u8> {
        let mut g = Vec::new();
        put_varint(&mut g, self.grandparents.len() as u64);
        for (k, n) in &self.grandparents {
            put_varint(&mut g, k.len() as u64);
            g.extend_from_slice(k);
            put_varint(&mut g, *n);
        }
        g
    }

    /// Offset of the link words.
    pub fn link_offset(gp_bytes: usize) -> usize {
        align8(28 + gp_bytes)
    }

    /// Bytes of the slot run's contents (static part and link words).
    pub fn bytes(&self) -> usize {
        Self::link_offset(self.gp_block().len()) + 16 + 8 * self.capacity as usize
    }

    /// Encodes the static part followed by zero link words.
    pub fn encode(&self) -> Vec<u8> {
        let g = self.gp_block();
        let mut b = Vec::with_capacity(self.bytes());
        b.extend_from_slice(&SLOT_MAGIC);
        put_u64(&mut b, self.job);
        put_u32(&mut b, self.capacity);
        put_u32(&mut b, g.len() as u32);
        b.extend_from_slice(&g);
        let crc = crate::coding::crc32c(&b);
        put_u32(&mut b, crc);
        b.resize(
            Self::link_offset(g.len()) + 16 + 8 * self.capacity as usize,
            0,
        );
        b
    }

    /// Decodes the static part of a slot run (`b` = the whole run);
    /// returns it and the offset of its link words.
    pub fn decode(b: &[u8]) -> Result<(Slot, usize), (u64, String)> {
        if b.len() < 28 || b[0..8] != SLOT_MAGIC {
            return Err((0, "compaction slot: bad magic".into()));
        }
        let g = get_u32(b, 20).unwrap_or(u32::MAX) as usize;
        let crc_at = 24usize.saturating_add(g);
        let Some(crc) = get_u32(b, crc_at) else {
            return Err((
                20,
                "compaction slot: grandparent block overruns the run".into(),
            ));
        };
        if crc != crate::coding::crc32c(&b[..crc_at]) {
            return Err((crc_at as u64, "compaction slot: checksum mismatch".into()));
        }
        let capacity = get_u32(b, 16).unwrap_or(0);
        let w = Self::link_offset(g);
        if w + 16 + 8 * capacity as usize > b.len() {
            return Err((16, "compaction slot: capacity overruns the run".into()));
        }
        let block = &b[24..24 + g];
        let mut at = 0usize;
        let bad = || {
            (
                24u64,
                "compaction slot: malformed grandparent block".to_string(),
            )
        };
        let (count, n) = get_varint(block).ok_or_else(bad)?;
        at += n;
        let mut grandparents = Vec::new();
        for _ in 0..count {
            let (len, n) = get_varint(block.get(at..).ok_or_else(bad)?).ok_or_else(bad)?;
            at += n;
            let len = usize::try_from(len).map_err(|_| bad())?;
            let k = block
                .get(at..at.checked_add(len).ok_or_else(bad)?)
                .ok_or_else(bad)?;
            at += len;
            let (size, n) = get_varint(block.get(at..).ok_or_else(bad)?).ok_or_else(bad)?;
            at += n;
            grandparents.push((k.to_vec(), size));
        }
        Ok((
            Slot {
                job: get_u64(b, 8).unwrap_or(0),
                capacity,
                grandparents,
            },
            w,
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn entries_roundtrip_and_never_overrun() {
        let mut b = Vec::new();
        put_entry(&mut b, b"k\x01\0\0\0\0\0\0\0", b"value");
        let s = entry_shape(&b).unwrap();
        assert_eq!(s.len, b.len());
        assert_eq!(&b[s.key_at..s.key_at + s.key_len], b"k\x01\0\0\0\0\0\0\0");
        assert_eq!(&b[s.value_at..s.value_at + s.value_len], b"value");
        assert_eq!(entry_len(9, 5), b.len());
        for cut in 0..b.len() {
            assert!(entry_shape(&b[..cut]).is_none());
        }
        let mut i = Vec::new();
        put_inline_entry(&mut i, b"abcdefgh", b"v");
        assert_eq!(i.len() % 8, 0);
        let crc = u32::from_le_bytes([i[0], i[1], i[2], i[3]]);
        let s = entry_shape(&i[4..]).unwrap();
        assert_eq!(crc, crate::coding::crc32c(&i[4..4 + s.len]));
        assert_eq!(inline_len(8, 1), 4 + s.len);
    }

    #[test]
    fn heights_are_deterministic_and_quarter_geometric() {
        let mut hist = [0usize; MAX_HEIGHT + 1];
        for i in 0..40_000u32 {
            let k = format!("key{i:08}");
            let h = height_of(k.as_bytes());
            assert_eq!(h, height_of(k.as_bytes()));
            assert!((1..=MAX_HEIGHT).contains(&h));
            hist[h] += 1;
        }
        // About 3/4 of the nodes are of height 1, 3/16 of height 2.
        assert!((28_000..32_000).contains(&hist[1]), "{hist:?}");
        assert!((6_500..8_500).contains(&hist[2]), "{hist:?}");
    }

    #[test]
    fn header_directory_slot_roundtrip_and_reject_damage() {
        let h = Header {
            id: 42,
            job: 7,
            level: 2,
            layout: Layout::Full,
            origin: Origin::Compaction,
            ordinal: 3,
            inputs: vec![10, 11, 12],
        };
        let mut run = h.encode();
        run.resize(4096, 0);
        assert_eq!(Header::decode(&run).unwrap(), h);
        for at in [0usize, 9, 17, 36, 49, 72] {
            let mut bad = run.clone();
            bad[at] ^= 1;
            assert!(Header::decode(&bad).is_err(), "flip at {at}");
        }
        let d = Directory {
            entries: 5,
            entry_bytes: 600,
            node_runs: vec![PageRun { first: 9, count: 2 }],
            data: vec![
                DataRef {
                    run: PageRun { first: 3, count: 1 },
                    bytes: 100,
                },
                DataRef {
                    run: PageRun { first: 5, count: 2 },
                    bytes: 500,
                },
            ],
        };
        let e = d.encode();
        assert_eq!(e.len(), d.encoded_len());
        assert_eq!(Directory::decode(&e).unwrap(), d);
        for at in 0..e.len() {
            let mut bad = e.clone();
            bad[at] ^= 0x10;
            assert!(Directory::decode(&bad).is_err(), "flip at {at}");
        }
        let s = Slot {
            job: 99,
            capacity: 4,
            grandparents: vec![(b"abc\x01\0\0\0\0\0\0\0".to_vec(), 1 << 20)],
        };
        let mut run = s.encode();
        let (back, w) = Slot::decode(&run).unwrap();
        assert_eq!(back, s);
        assert_eq!(w % 8, 0);
        run[30] ^= 1;
        assert!(Slot::decode(&run).is_err());
        assert_eq!(
            unpack_run(pack_run(PageRun {
                first: 77,
                count: 5
            })),
            Some(PageRun {
                first: 77,
                count: 5
            })
        );
        assert_eq!(unpack_run(0), None);
    }

    /// A data run whose end overflows is not sorted before the next one
    /// (seen writing fuzz/fuzz_targets/tlsm.rs, which panics on such a
    /// directory: the sum wrapped — a panic where overflow is checked;
    /// where it is not, a directory of overlapping runs was accepted).
    #[test]
    fn directory_run_ends_never_overflow() {
        let d = Directory {
            entries: 1,
            entry_bytes: 10,
            node_runs: vec![PageRun { first: 5, count: 1 }],
            data: vec![
                DataRef {
                    run: PageRun { first: 3, count: 1 },
                    bytes: 5,
                },
                DataRef {
                    run: PageRun {
                        first: u64::MAX - 1,
                        count: 5,
                    },
                    bytes: 5,
                },
                DataRef {
                    run: PageRun { first: 4, count: 1 },
                    bytes: 5,
                },
            ],
        };
        assert!(Directory::decode(&d.encode()).is_err());
    }
}
