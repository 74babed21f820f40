//! Byte layouts of NV-Cache's PM structures: segments, nodes and the
//! offset-array run of a completed NVTable (docs/format/pm.md, "NVTable").
//!
//! # Segment (a run of 4 KiB pages from the page allocator)
//!
//! ```text
//!  S = first_page × 4096
//!  S+0   8  magic "NVSegmnt"
//!  S+8   8  owner: the log number of the NVTable that allocated it (log
//!           segments), or the output id of the compaction that filled it
//!           with copied nodes (arena segments)
//!  S+16  8  page count of the run
//!  S+24  4  index along the log's chain (0 = the log's first segment)
//!  S+28  2  kind: 1 log segment, 2 arena segment
//!  S+30  2  flags: bit 0 = nodes published one by one (`NvAppend::PerEntry`)
//!  S+32  4  format version = 1
//!  S+36  4  crc32c of bytes 0..36
//!  S+40  8  head: link word — offset of the log's first node (segment 0
//!           of a log only; 0 = no node published yet)
//!  S+48  8  next segment: link word — region offset of the next segment
//!           of the log's chain (0 = last)
//!  S+56  8  seal: link word (segment 0 of a log only; 0 = not sealed) —
//!           stored when the log's writer is retired (a memtable switch,
//!           a clean close): the log's published node count c
//!           (u32, low half) | crc32c(u64le log number ‖ u32le c) << 32
//!  S+64     nodes, each starting 8-aligned, up to the end of the run
//! ```
//!
//! A sealed log ends exactly after its c published nodes: recovery then
//! reads any shortfall (a link that ends the list early, a node that does
//! not check) as corruption, never as a torn tail. The seal is one atomic
//! 8-byte store made after every node was persisted and published, so it
//! is either absent (0) or whole; a non-zero seal whose checksum does not
//! match is damage.
//!
//! # Node (one entry; a member of a doubly linked KV list)
//!
//! ```text
//!  N+0   8  next: link word — offset of the next node of the list (0 = end)
//!  N+8   8  prev: link word — offset of the previous node (0 = first)
//!  N+16  8  tag: seqno << 8 | kind (0 delete, 1 put)
//!  N+24  4  key length k
//!  N+28  4  value length v
//!  N+32  4  group: nodes in the committed group this node belongs to
//!  N+36  4  kcrc: crc32c of bytes 16..36, bytes 40..44 and the key
//!  N+40  4  vcrc: crc32c of the value
//!  N+44  k  user key
//!  N+44+k v value
//!           zero padding to a multiple of 8 (node size = round8(44 + k + v))
//! ```
//!
//! The link words (0..16) are outside both checksums and are the only
//! bytes of a published node ever written again (the `PmRegion` contract,
//! rule 5): readers slice a node from `N+16` on.
//!
//! # Offset-array run (a completed NVTable; the table's `pm_pages[0]`)
//!
//! ```text
//!  A+0   8  magic "NVTable\0"
//!  A+8   4  format version = 1
//!  A+12  4  header bytes = 64
//!  A+16  8  table id (the MANIFEST's)
//!  A+24  8  seq_min      A+32  8  seq_max
//!  A+40  8  n: entries
//!  A+48  4  u: segments the nodes live in
//!  A+52  4  body crc: crc32c of the n offsets and u usage entries
//!  A+56  4  reserved, 0
//!  A+60  4  header crc: crc32c of bytes 0..60
//!  A+64     n × u64: node offsets, in internal-key order (every version)
//!  A+64+8n  u × 16: usage — first_page u64 | page count u32 | live bytes u32
//!           (the bytes of this table's nodes in that segment), by first page
//! ```
//!
//! All integers little-endian. The table's `pm_pages` are the array run,
//! then the usage runs in the same order.
//!
//! Worked example (the unit test `log::tests::worked_example` checks it
//! byte for byte): log 7 in a fresh 64 KiB region (data pages start at
//! page 2), segments of 4 pages; one group `put("apple","red")` at seqno 5
//! makes segment 0 at page 2 (offset 0x2000) and its node at 0x2040,
//! published by storing 0x2040 into the head word at 0x2028:
//!
//! ```text
//! 2000  4e 56 53 65 67 6d 6e 74 07 00 00 00 00 00 00 00  "NVSegmnt", log 7
//! 2010  04 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00  4 pages, index 0, kind 1, flags 0
//! 2020  01 00 00 00 0e 6e b1 df 40 20 00 00 00 00 00 00  v1, crc; head = 0x2040
//! 2030  00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  next segment 0, seal 0 (open)
//! 2040  00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  next 0, prev 0
//! 2050  01 05 00 00 00 00 00 00 05 00 00 00 03 00 00 00  tag 5 << 8 | 1, k 5, v 3
//! 2060  01 00 00 00 02 92 64 10 e0 2f 60 02 61 70 70 6c  group 1, kcrc, vcrc, "appl"
//! 2070  65 72 65 64 00 00 00 00                          "e", "red", pad: 56 bytes
//! ```
//!
//! When its writer is retired (a memtable switch, a clean close) the log
//! is sealed with its one node
//! (crc32c of `07 00 00 00 00 00 00 00 01 00 00 00` = 0x60703375):
//!
//! ```text
//! 2038  01 00 00 00 75 33 70 60                          seal: c = 1, crc
//! ```
//!
//! Its flush (table id 9) writes the array run at page 6 (0x6000):
//!
//! ```text
//! 6000  4e 56 54 61 62 6c 65 00 01 00 00 00 40 00 00 00  "NVTable\0", v1, 64
//! 6010  09 00 00 00 00 00 00 00 05 00 00 00 00 00 00 00  id 9, seq_min 5
//! 6020  05 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00  seq_max 5, n 1
//! 6030  01 00 00 00 7e bf 17 18 00 00 00 00 67 dd ac d0  u 1, body crc, 0, header crc
//! 6040  40 20 00 00 00 00 00 00                          offset 0x2040
//! 6048  02 00 00 00 00 00 00 00 04 00 00 00 38 00 00 00  segment page 2, 4 pages, 56 live
//! ```
//!
//! and the table's `pm_pages` are `[6+1, 2+4]`.

use crate::error::{Error, Result};
use crate::key::{Kind, SeqNo, MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::storage::PmRegion;

/// `"NVSegmnt"`.
pub const SEGMENT_MAGIC: [u8; 8] = *b"NVSegmnt";
/// `"NVTable\0"`.
pub const TABLE_MAGIC: [u8; 8] = *b"NVTable\0";
/// Format version of segments, nodes and arrays.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of a segment header; nodes start this far into a segment.
pub const SEGMENT_HEADER_BYTES: u64 = 64;
/// Bytes of a node before its key.
pub const NODE_HEADER_BYTES: u64 = 44;
/// Bytes of an offset-array run's header.
pub const TABLE_HEADER_BYTES: u64 = 64;
/// Bytes of one usage entry.
pub const USAGE_BYTES: u64 = 16;

/// Offset of the head link word inside a segment header.
pub const HEAD_WORD: u64 = 40;
/// Offset of the next-segment link word inside a segment header.
pub const NEXT_SEGMENT_WORD: u64 = 48;
/// Offset of the seal link word inside a log's segment 0 header.
pub const SEAL_WORD: u64 = 56;
/// Offset of a node's `next` link word.
pub const NODE_NEXT: u64 = 0;
/// Offset of a node's `prev` link word.
pub const NODE_PREV: u64 = 8;
/// Where a node's checksummed part (what readers slice) starts.
pub const NODE_BODY: u64 = 16;

const PAGE: u64 = PAGE_SIZE_BYTES;

/// What a segment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentKind {
    /// Nodes appended by the write path to one log (an active NVTable).
    Log = 1,
    /// Nodes copied out of sparse segments by a compaction.
    Arena = 2,
}

/// Flag: the log published its nodes one at a time (`NvAppend::PerEntry`).
pub const FLAG_PER_ENTRY: u16 = 1;

/// The checked fields of a segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Log number (log segments) or output id (arena segments).
    pub owner: u64,
    /// Pages of the run.
    pub pages: u64,
    /// Position along the log's chain.
    pub index: u32,
    /// What it holds.
    pub kind: SegmentKind,
    /// [`FLAG_PER_ENTRY`] or 0.
    pub flags: u16,
}

impl SegmentHeader {
    /// The 64 header bytes, link words zero.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES as usize] {
        let mut b = [0u8; SEGMENT_HEADER_BYTES as usize];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..16].copy_from_slice(&self.owner.to_le_bytes());
        b[16..24].copy_from_slice(&self.pages.to_le_bytes());
        b[24..28].copy_from_slice(&self.index.to_le_bytes());
        b[28..30].copy_from_slice(&(self.kind as u16).to_le_bytes());
        b[30..32].copy_from_slice(&self.flags.to_le_bytes());
        b[32..36].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        let crc = crate::coding::crc32c(&b[..36]);
        b[36..40].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Reads and checks the header of the segment at region offset `at`
    /// (magic, version, checksum, a page count inside the region).
    pub fn read(region: &dyn PmRegion, at: u64) -> Result<SegmentHeader> {
        let bad = |off: u64, what: String| {
            Error::corruption(
                region.name(),
                off,
                format!("NVTable segment at {at}: {what}"),
            )
        };
        if !at.is_multiple_of(PAGE) || at.saturating_add(SEGMENT_HEADER_BYTES) > region.len() {
            return Err(bad(at, "not a page inside the region".into()));
        }
        let b = region.slice(at, 40)?;
        if b[0..8] != SEGMENT_MAGIC {
            return Err(bad(at, "bad segment magic".into()));
        }
        let stored = u32_at(b, 36);
        let computed = crate::coding::crc32c(&b[..36]);
        if stored != computed {
            return Err(bad(
                at + 36,
                format!(
                    "header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
                ),
            ));
        }
        let version = u32_at(b, 32);
        if version != FORMAT_VERSION {
            return Err(bad(
                at + 32,
                format!("format version {version}, this build reads {FORMAT_VERSION}"),
            ));
        }
        let pages = u64_at(b, 16);
        let kind = match u16::from_le_bytes([b[28], b[29]]) {
            1 => SegmentKind::Log,
            2 => SegmentKind::Arena,
            k => return Err(bad(at + 28, format!("unknown segment kind {k}"))),
        };
        if pages == 0
            || (at / PAGE)
                .checked_add(pages)
                .is_none_or(|end| end > region.len() / PAGE)
        {
            return Err(bad(at + 16, format!("{pages} pages do not fit the region")));
        }
        Ok(SegmentHeader {
            owner: u64_at(b, 8),
            pages,
            index: u32_at(b, 24),
            kind,
            flags: u16::from_le_bytes([b[30], b[31]]),
        })
    }
}

/// The seal word of log `number` with `nodes` published nodes (module
/// doc, "Segment").
pub fn encode_seal(number: u64, nodes: u32) -> u64 {
    u64::from(nodes) | u64::from(seal_crc(number, nodes)) << 32
}

fn seal_crc(number: u64, nodes: u32) -> u32 {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&number.to_le_bytes());
    b[8..].copy_from_slice(&nodes.to_le_bytes());
    crate::coding::crc32c(&b)
}

/// Reads the seal of log `number` whose segment 0 is at `at`: `None` if
/// the log was not sealed (a crash, or a log still being written),
/// `Some(nodes)` if it was; a non-zero word that does not check is
/// `Error::Corruption` at the word.
pub fn read_seal(region: &dyn PmRegion, at: u64, number: u64) -> Result<Option<u32>> {
    let word = region.load_u64(at + SEAL_WORD)?;
    if word == 0 {
        return Ok(None);
    }
    let nodes = word as u32;
    let stored = (word >> 32) as u32;
    let computed = seal_crc(number, nodes);
    if stored != computed {
        return Err(Error::corruption(
            region.name(),
            at + SEAL_WORD,
            format!(
                "NVTable log {number}: seal {word:#018x} damaged (checksum {stored:#010x}, computed {computed:#010x})"
            ),
        ));
    }
    Ok(Some(nodes))
}

/// Bytes a node with a `klen`-byte key and a `vlen`-byte value occupies.
#[inline]
pub fn node_size(klen: usize, vlen: usize) -> u64 {
    (NODE_HEADER_BYTES + klen as u64 + vlen as u64).next_multiple_of(8)
}

/// The checksum of a node's header fields (bytes 16..36 and 40..44) and key.
#[inline]
fn kcrc(fields: &[u8], vcrc: &[u8], key: &[u8]) -> u32 {
    let c = crate::coding::crc32c(fields);
    let c = crate::coding::crc32c_append(c, vcrc);
    crate::coding::crc32c_append(c, key)
}

/// Appends the bytes of one node to `buf` (size [`node_size`]).
#[allow(clippy::too_many_arguments)]
pub fn encode_node(
    buf: &mut Vec<u8>,
    next: u64,
    prev: u64,
    seq: SeqNo,
    kind: Kind,
    key: &[u8],
    value: &[u8],
    group: u32,
) {
    let start = buf.len();
    buf.extend_from_slice(&next.to_le_bytes());
    buf.extend_from_slice(&prev.to_le_bytes());
    buf.extend_from_slice(&crate::key::pack_trailer(seq, kind).to_le_bytes());
    buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
    buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
    buf.extend_from_slice(&group.to_le_bytes());
    let vcrc = crate::coding::crc32c(value).to_le_bytes();
    let k = kcrc(&buf[start + 16..start + 36], &vcrc, key);
    buf.extend_from_slice(&k.to_le_bytes());
    buf.extend_from_slice(&vcrc);
    buf.extend_from_slice(key);
    buf.extend_from_slice(value);
    let size = node_size(key.len(), value.len()) as usize;
    buf.resize(start + size, 0);
}

/// A node read back and checked (key checksum verified; the value is
/// checked by [`Node::value`]).
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    /// Region offset of the node.
    pub at: u64,
    /// `seq << 8 | kind`.
    pub tag: u64,
    /// The user key.
    pub key: &'a [u8],
    /// Value length.
    pub vlen: usize,
    /// Nodes of its committed group.
    pub group: u32,
    /// Checksum of the value.
    pub vcrc: u32,
}

impl<'a> Node<'a> {
    /// Reads the node at `at` and checks it lies inside `[lo, hi)` (its
    /// segment, after the header) and that its key checksum matches.
    pub fn read(region: &'a dyn PmRegion, at: u64, lo: u64, hi: u64) -> Result<Node<'a>> {
        Node::read_with(region, at, lo, hi, true)
    }

    /// [`Node::read`], the key checksum checked only if `check_key`: for a
    /// node whose checksum the caller has checked before and whose bytes
    /// cannot have been written since (a completed table's, while a
    /// version lists it). The bounds, lengths and kind are always checked.
    pub fn read_with(
        region: &'a dyn PmRegion,
        at: u64,
        lo: u64,
        hi: u64,
        check_key: bool,
    ) -> Result<Node<'a>> {
        let bad = |off: u64, what: &str| {
            Error::corruption(region.name(), off, format!("NVTable node at {at}: {what}"))
        };
        if !at.is_multiple_of(8) || at < lo || at.saturating_add(NODE_HEADER_BYTES) > hi {
            return Err(bad(at, "offset outside its segment"));
        }
        let h = region.slice(at + NODE_BODY, (NODE_HEADER_BYTES - NODE_BODY) as usize)?;
        let tag = u64_at(h, 0);
        let klen = u32_at(h, 8) as usize;
        let vlen = u32_at(h, 12) as usize;
        let group = u32_at(h, 16);
        let stored = u32_at(h, 20);
        if klen > MAX_KEY_LEN
            || vlen > MAX_VALUE_LEN
            || at + node_size(klen, vlen) > hi
            || Kind::from_u8(tag as u8).is_none()
        {
            return Err(bad(at + NODE_BODY, "malformed header (lengths or kind)"));
        }
        let key = region.slice(at + NODE_HEADER_BYTES, klen)?;
        if check_key && stored != kcrc(&h[..20], &h[24..28], key) {
            return Err(bad(
                at + 36,
                "key checksum mismatch (header or key damaged)",
            ));
        }
        Ok(Node {
            at,
            tag,
            key,
            vlen,
            group,
            vcrc: u32_at(h, 24),
        })
    }

    /// The seqno.
    #[inline]
    pub fn seq(&self) -> SeqNo {
        self.tag >> 8
    }

    /// The kind (checked by `read`).
    #[inline]
    pub fn kind(&self) -> Kind {
        if self.tag & 0xff == Kind::Put as u64 {
            Kind::Put
        } else {
            Kind::Delete
        }
    }

    /// Region offset of the value.
    #[inline]
    pub fn value_at(&self) -> u64 {
        self.at + NODE_HEADER_BYTES + self.key.len() as u64
    }

    /// Bytes the node occupies.
    #[inline]
    pub fn size(&self) -> u64 {
        node_size(self.key.len(), self.vlen)
    }

    /// The value; with `verify`, its checksum is checked.
    pub fn value(&self, region: &'a dyn PmRegion, verify: bool) -> Result<&'a [u8]> {
        let v = region.slice(self.value_at(), self.vlen)?;
        if verify {
            let c = crate::coding::crc32c(v);
            if c != self.vcrc {
                return Err(Error::corruption(
                    region.name(),
                    self.value_at(),
                    format!(
                        "NVTable node at {}: value checksum mismatch: stored {:#010x}, computed {c:#010x}",
                        self.at, self.vcrc
                    ),
                ));
            }
        }
        Ok(v)
    }
}

/// One usage entry: a segment a table's nodes live in and their bytes there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// The segment.
    pub run: PageRun,
    /// Bytes of the table's nodes in it.
    pub live_bytes: u32,
}

impl Usage {
    /// Region offset where nodes of the segment start.
    #[inline]
    pub fn nodes_start(&self) -> u64 {
        self.run.first * PAGE + SEGMENT_HEADER_BYTES
    }
    /// Region offset of the end of the segment.
    #[inline]
    pub fn end(&self) -> u64 {
        (self.run.first + self.run.count) * PAGE
    }
}

/// The header fields of an offset-array run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableHeader {
    /// Table id.
    pub id: u64,
    /// Smallest seqno.
    pub seq_min: SeqNo,
    /// Largest seqno.
    pub seq_max: SeqNo,
    /// Entries.
    pub n: u64,
    /// Usage entries.
    pub u: u32,
}

/// Bytes of the array run of a table with `n` entries in `u` segments.
#[inline]
pub fn table_bytes(n: u64, u: u64) -> u64 {
    TABLE_HEADER_BYTES + 8 * n + USAGE_BYTES * u
}

/// Encodes a whole array run (header, offsets, usage).
pub fn encode_table(h: &TableHeader, offsets: &[u64], usage: &[Usage]) -> Vec<u8> {
    let len = table_bytes(offsets.len() as u64, usage.len() as u64) as usize;
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(&TABLE_MAGIC);
    b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&(TABLE_HEADER_BYTES as u32).to_le_bytes());
    b.extend_from_slice(&h.id.to_le_bytes());
    b.extend_from_slice(&h.seq_min.to_le_bytes());
    b.extend_from_slice(&h.seq_max.to_le_bytes());
    b.extend_from_slice(&h.n.to_le_bytes());
    b.extend_from_slice(&h.u.to_le_bytes());
    b.extend_from_slice(&[0u8; 12]); // body crc, reserved, header crc
    for o in offsets {
        b.extend_from_slice(&o.to_le_bytes());
    }
    for u in usage {
        b.extend_from_slice(&u.run.first.to_le_bytes());
        b.extend_from_slice(&(u.run.count as u32).to_le_bytes());
        b.extend_from_slice(&u.live_bytes.to_le_bytes());
    }
    let body = crate::coding::crc32c(&b[TABLE_HEADER_BYTES as usize..]);
    b[52..56].copy_from_slice(&body.to_le_bytes());
    let hcrc = crate::coding::crc32c(&b[..60]);
    b[60..64].copy_from_slice(&hcrc.to_le_bytes());
    debug_assert_eq!(b.len(), len);
    b
}

/// Reads and checks an array run's header and body checksum; returns the
/// header and the region offset of the offsets.
pub fn read_table_header(region: &dyn PmRegion, run: PageRun) -> Result<TableHeader> {
    let at = run.first.saturating_mul(PAGE);
    let bad = |off: u64, what: String| {
        Error::corruption(
            region.name(),
            off,
            format!("NVTable offset array at {at}: {what}"),
        )
    };
    let total = region.len() / PAGE;
    if run.count == 0 || run.first.checked_add(run.count).is_none_or(|e| e > total) {
        return Err(bad(
            at,
            format!("run {}+{} outside the region", run.first, run.count),
        ));
    }
    let h = region.slice(at, TABLE_HEADER_BYTES as usize)?;
    if h[0..8] != TABLE_MAGIC {
        return Err(bad(at, "bad magic".into()));
    }
    let stored = u32_at(h, 60);
    let computed = crate::coding::crc32c(&h[..60]);
    if stored != computed {
        return Err(bad(
            at + 60,
            format!("header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"),
        ));
    }
    let version = u32_at(h, 8);
    if version != FORMAT_VERSION || u64::from(u32_at(h, 12)) != TABLE_HEADER_BYTES {
        return Err(bad(
            at + 8,
            format!("format version {version}, this build reads {FORMAT_VERSION}"),
        ));
    }
    let th = TableHeader {
        id: u64_at(h, 16),
        seq_min: u64_at(h, 24),
        seq_max: u64_at(h, 32),
        n: u64_at(h, 40),
        u: u32_at(h, 48),
    };
    let len =
        th.n.checked_mul(8)
            .and_then(|x| x.checked_add(TABLE_HEADER_BYTES + USAGE_BYTES * u64::from(th.u)));
    if len.is_none_or(|l| l > run.count * PAGE) {
        return Err(bad(
            at + 40,
            format!("{} entries and {} segments do not fit the run", th.n, th.u),
        ));
    }
    let body = region.slice(
        at + TABLE_HEADER_BYTES,
        (8 * th.n + USAGE_BYTES * u64::from(th.u)) as usize,
    )?;
    let stored = u32_at(h, 52);
    let computed = crate::coding::crc32c(body);
    if stored != computed {
        return Err(bad(
            at + 52,
            format!("body checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"),
        ));
    }
    Ok(th)
}

/// Little-endian u32 at `at` of `b` (which holds it).
#[inline]
pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Little-endian u64 at `at` of `b` (which holds it).
#[inline]
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::sim::SimRegion;

    #[test]
    fn node_roundtrip_and_checks() {
        let r = SimRegion::new(8192);
        let mut b = Vec::new();
        encode_node(&mut b, 77, 66, 5, Kind::Put, b"apple", b"red", 1);
        assert_eq!(b.len() as u64, node_size(5, 3));
        assert_eq!(b.len(), 56);
        r.write(4096, &b).unwrap();
        let n = Node::read(&r, 4096, 4096, 8192).unwrap();
        assert_eq!(
            (n.seq(), n.kind(), n.key, n.vlen, n.group),
            (5, Kind::Put, &b"apple"[..], 3, 1)
        );
        assert_eq!(n.value(&r, true).unwrap(), b"red");
        // Link words are outside the checksums.
        r.store_u64(4096, 1234).unwrap();
        assert!(Node::read(&r, 4096, 4096, 8192).is_ok());
        // Every checked byte is covered by one of the two checksums.
        for off in 16..56 {
            let r2 = SimRegion::new(8192);
            r2.write(4096, &b).unwrap();
            r2.corrupt(4096 + off, 0x40).unwrap();
            let res =
                Node::read(&r2, 4096, 4096, 8192).and_then(|n| n.value(&r2, true).map(|_| ()));
            if off < 52 {
                assert!(res.unwrap_err().is_corruption(), "byte {off}");
            }
        }
        // Outside its segment.
        assert!(Node::read(&r, 4096, 4096, 4096 + 50)
            .unwrap_err()
            .is_corruption());
        assert!(Node::read(&r, 4100, 4096, 8192)
            .unwrap_err()
            .is_corruption());
    }

    #[test]
    fn seal_roundtrip_and_damage() {
        let r = SimRegion::new(2 * 4096);
        assert_eq!(read_seal(&r, 4096, 7).unwrap(), None);
        let w = encode_seal(7, 3);
        assert_eq!(w as u32, 3);
        r.store_u64(4096 + SEAL_WORD, w).unwrap();
        assert_eq!(read_seal(&r, 4096, 7).unwrap(), Some(3));
        // Another log's seal, and every flipped bit, are corruption.
        assert!(read_seal(&r, 4096, 8).unwrap_err().is_corruption());
        for bit in 0..64 {
            r.store_u64(4096 + SEAL_WORD, w ^ (1 << bit)).unwrap();
            let e = read_seal(&r, 4096, 7).unwrap_err();
            assert!(e.is_corruption(), "bit {bit}");
        }
    }

    #[test]
    fn segment_header_roundtrip_and_damage() {
        let r = SimRegion::new(5 * 4096);
        let h = SegmentHeader {
            owner: 7,
            pages: 2,
            index: 3,
            kind: SegmentKind::Log,
            flags: 0,
        };
        r.write(4096, &h.encode()).unwrap();
        assert_eq!(SegmentHeader::read(&r, 4096).unwrap(), h);
        for off in 0..40 {
            let r2 = SimRegion::new(5 * 4096);
            r2.write(4096, &h.encode()).unwrap();
            r2.corrupt(4096 + off, 1).unwrap();
            assert!(
                SegmentHeader::read(&r2, 4096).unwrap_err().is_corruption(),
                "byte {off}"
            );
        }
        // A page count beyond the region.
        let big = SegmentHeader { pages: 9, ..h };
        r.write(4096, &big.encode()).unwrap();
        assert!(SegmentHeader::read(&r, 4096).unwrap_err().is_corruption());
        // One whose end overflows (seen writing fuzz/fuzz_targets/nvcache.rs,
        // which panics on such a header: the sum wrapped — a panic where
        // overflow is checked; where it is not, a segment of 2^64 - 1 pages
        // was accepted).
        for pages in [u64::MAX, u64::MAX - 1] {
            r.write(4096, &SegmentHeader { pages, ..h }.encode())
                .unwrap();
            assert!(SegmentHeader::read(&r, 4096).unwrap_err().is_corruption());
        }
    }

    #[test]
    fn table_roundtrip_and_damage() {
        let r = SimRegion::new(4 * 4096);
        let h = TableHeader {
            id: 9,
            seq_min: 5,
            seq_max: 6,
            n: 2,
            u: 1,
        };
        let usage = [Usage {
            run: PageRun { first: 2, count: 1 },
            live_bytes: 112,
        }];
        let b = encode_table(&h, &[8256, 8192], &usage);
        assert_eq!(b.len() as u64, table_bytes(2, 1));
        r.write(3 * 4096, &b).unwrap();
        let run = PageRun { first: 3, count: 1 };
        assert_eq!(read_table_header(&r, run).unwrap(), h);
        for off in 0..b.len() as u64 {
            let r2 = SimRegion::new(4 * 4096);
            r2.write(3 * 4096, &b).unwrap();
            r2.corrupt(3 * 4096 + off, 0x80).unwrap();
            assert!(
                read_table_header(&r2, run).unwrap_err().is_corruption(),
                "byte {off}"
            );
        }
    }
}
