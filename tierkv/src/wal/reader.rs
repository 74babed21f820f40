//! Reading records back, and telling a torn tail from body corruption.
//!
//! A [`Reader`] walks the blocks of a [`LogSource`] (a whole file in memory,
//! [`FileLog`], or a PM extent chain, [`PmSource`](super::PmSource), read in
//! place) and reassembles fragments into records (format: the [module
//! docs](super)).
//!
//! # Where the log ends
//!
//! The log ends cleanly at the end of the input, at a zero-filled header
//! (PM: never-written space or the end marker), or at a valid fragment of
//! *another* log (the recycled tail of a reused PM page or file).
//!
//! # The torn-tail rule
//!
//! A *damaged* record — checksum mismatch, a length that overruns its block,
//! an unknown type, a broken FIRST/MIDDLE/LAST sequence, a truncated header —
//! is either the tail a crash tore, or corruption. What a crash can tear
//! depends on the medium ([`LogSource::tail`]):
//!
//! - [`Tail::Truncated`] (a file: the MANIFEST, an SSD WAL): a crash keeps a
//!   *prefix* of the appended bytes. Only an **incomplete** final record —
//!   one the end of the input cuts short (a partial header, a payload that
//!   runs past the end, a record missing its LAST fragment) — is a torn
//!   tail. A complete fragment that fails its checksum, anywhere, is
//!   `Error::Corruption`; so is a zero-filled header (this engine never
//!   writes one into a file) and any other damage.
//! - [`Tail::Unordered`] (a PM extent chain): the cache lines of the record
//!   in flight may reach the media in any order, so the last record may be
//!   damaged anywhere. A damaged record is a torn tail unless a valid
//!   record of this log follows it, or the log was *sealed* when it was closed
//!   past it (the seal records where the log ended; then any damage or
//!   early end before that point is corruption).
//!
//! In both cases the reader first looks *after* the damage: it visits every
//! later block start (invariant 2 of the format: every block holding data
//! starts with a header) and follows the valid fragments of this log from
//! there. A later fragment of this log that *starts* a record (FULL or
//! FIRST) and verifies proves that records were written after the damaged
//! one: body corruption, named by the source and the damaged record's
//! offset. (Later MIDDLE/LAST fragments alone prove nothing: they may be
//! the rest of the very record whose beginning a crash tore.) When the
//! damage is a checksum mismatch or an unknown type, the header's length is
//! taken at its word and the search starts right after the damaged fragment,
//! in the same block; when the length itself cannot be trusted (it overruns
//! the block, or the header is zero), at the next block.
//!
//! A length that runs past the end of a file looks like a record cut short;
//! the reader tells a damaged length field apart by checking whether the
//! stored checksum verifies some shorter payload that ends at the end of the
//! file or right before another valid fragment of this log (a false match
//! needs a 32-bit checksum to verify by chance).
//!
//! A file written without sync on a file system that writes pages back out
//! of order can, after a power loss, hold a hole followed by records, or
//! garbage where unsynced pages were never written; a reader in
//! point-in-time mode ([`Reader::point_in_time`]) ends the log at the first
//! damaged record in every case and reports whether valid records were
//! dropped ([`Reader::dropped_records`]).
//!
//! Offsets are physical: the file offset, or the byte offset in the PM
//! region.
//!
//! # Concurrency
//!
//! A reader belongs to one thread; the source must not be written while it
//! is read (recovery reads logs nobody writes).

use std::path::Path;

use crate::error::{Error, Result};
use crate::storage::FileSystem;

use super::{
    header_log_number, type_log_crc, unmask_crc, Header, RecordType, BLOCK_SIZE, HEADER_SIZE,
};

/// What a crash can do to the end of a log (module docs, "The torn-tail
/// rule").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// A crash keeps a prefix of the bytes (files): only a record the end of
    /// the input cuts short is a torn tail.
    Truncated,
    /// The record in flight may be damaged anywhere (PM). `sealed_end`: the
    /// log was closed cleanly and every record before this *log offset*
    /// (block index × [`BLOCK_SIZE`] + offset in the block) is complete.
    Unordered {
        /// The log offset the log was sealed at, if it was.
        sealed_end: Option<u64>,
    },
}

/// Blocks of a log to read.
pub trait LogSource {
    /// The file path or PM region name, for error messages.
    fn name(&self) -> &str;

    /// The number of blocks. Every block is [`BLOCK_SIZE`] bytes, except
    /// that the last block of a file may be shorter.
    fn block_count(&self) -> u64;

    /// The bytes of block `index` (< `block_count()`) and the physical
    /// offset of its first byte.
    fn block(&self, index: u64) -> Result<(&[u8], u64)>;

    /// What a crash can do to the end of this log. The default,
    /// [`Tail::Truncated`], is that of a file.
    fn tail(&self) -> Tail {
        Tail::Truncated
    }
}

/// A whole log file read into memory.
#[derive(Debug, Clone)]
pub struct FileLog {
    name: String,
    data: Vec<u8>,
}

impl FileLog {
    /// A log held in `data`, called `name` in error messages.
    pub fn new(name: impl Into<String>, data: Vec<u8>) -> Self {
        FileLog {
            name: name.into(),
            data,
        }
    }

    /// Reads the file at `path` through `fs`.
    pub fn read(fs: &dyn FileSystem, path: &Path) -> Result<Self> {
        Ok(FileLog::new(path.display().to_string(), fs.read_all(path)?))
    }
}

impl LogSource for FileLog {
    fn name(&self) -> &str {
        &self.name
    }

    fn block_count(&self) -> u64 {
        self.data.len().div_ceil(BLOCK_SIZE) as u64
    }

    fn block(&self, index: u64) -> Result<(&[u8], u64)> {
        let start = usize::try_from(index)
            .ok()
            .and_then(|i| i.checked_mul(BLOCK_SIZE))
            .filter(|&s| s < self.data.len())
            .ok_or_else(|| Error::InvalidArgument(format!("{}: no block {index}", self.name)))?;
        let end = (start + BLOCK_SIZE).min(self.data.len());
        Ok((&self.data[start..end], start as u64))
    }
}

/// Reads the records of one log.
pub struct Reader<S: LogSource> {
    source: S,
    tail: Tail,
    log32: u32,
    /// Next block to read and the position in it.
    block: u64,
    pos: usize,
    done: bool,
    error: Option<Error>,
    torn_tail: Option<u64>,
    dropped: bool,
    point_in_time: bool,
    /// Salvage mode: damage followed by records is skipped, not an error.
    salvage: bool,
    /// Salvage mode: the damaged ranges skipped, as (offset, what).
    skipped: Vec<(u64, String)>,
    last_record_offset: u64,
}

impl Reader<FileLog> {
    /// A reader over the log file at `path` (read whole through `fs`).
    pub fn open_file(fs: &dyn FileSystem, path: &Path, log_number: u64) -> Result<Self> {
        Ok(Reader::new(FileLog::read(fs, path)?, log_number))
    }
}

/// Why the log stops at a fragment position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopKind {
    /// The input ended (at a block boundary, or in block padding).
    EndOfInput,
    /// A zero-filled header: never-written space or the PM end marker.
    ZeroHeader,
    /// A fragment of another log whose checksum verifies.
    OtherLog,
    /// The input ends inside this fragment (a partial header, or a payload
    /// running past the end of a file): what a crash of a file can leave.
    Incomplete,
    /// Any other damage.
    Damaged,
}

/// A position in the log: physical offset and log offset (block index ×
/// block size + offset in the block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pos {
    physical: u64,
    logical: u64,
}

/// Outcome of looking at one fragment position.
enum Step {
    /// A whole record is in the buffer.
    Record,
    /// Keep going.
    Continue,
    /// The log stops here; see [`Reader::stop`].
    Stop {
        at: Pos,
        what: &'static str,
        kind: StopKind,
        /// Where to look for later records: `None` = nothing to look at.
        scan_from: Option<(u64, usize)>,
    },
}

impl<S: LogSource> Reader<S> {
    /// A reader over `source`, accepting fragments of log `log_number`.
    pub fn new(source: S, log_number: u64) -> Self {
        Reader {
            tail: source.tail(),
            source,
            log32: header_log_number(log_number),
            block: 0,
            pos: 0,
            done: false,
            error: None,
            torn_tail: None,
            dropped: false,
            point_in_time: false,
            salvage: false,
            skipped: Vec::new(),
            last_record_offset: 0,
        }
    }

    /// Salvage mode, for `Db::repair`: damage followed by a valid record of
    /// this log is skipped (recorded in [`skipped`](Self::skipped)) and
    /// reading resumes at that record; the log ends at damage nothing valid
    /// follows, without an error. Never used to open a database: it reads
    /// records after a hole.
    pub fn salvage(mut self, on: bool) -> Self {
        self.salvage = on;
        self
    }

    /// Salvage mode: the damaged places skipped so far, as (offset of the
    /// damaged record, what was wrong).
    pub fn skipped(&self) -> &[(u64, String)] {
        &self.skipped
    }

    /// Point-in-time mode: every damaged record ends the log (no
    /// `Corruption` error); [`dropped_records`](Self::dropped_records)
    /// reports whether valid records followed it.
    pub fn point_in_time(mut self, on: bool) -> Self {
        self.point_in_time = on;
        self
    }

    /// The source's name (file path or PM region).
    pub fn source_name(&self) -> &str {
        self.source.name()
    }

    /// The source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// After the end: the offset where valid data ended if the log ended at
    /// a torn (damaged) tail rather than cleanly.
    pub fn torn_tail(&self) -> Option<u64> {
        self.torn_tail
    }

    /// In point-in-time mode: true if valid records followed the damaged
    /// record that ended the log (they were not returned).
    pub fn dropped_records(&self) -> bool {
        self.dropped
    }

    /// Offset of the first fragment of the record returned last.
    pub fn last_record_offset(&self) -> u64 {
        self.last_record_offset
    }

    /// The next record, or `None` at the end of the log.
    pub fn next_record(&mut self) -> Result<Option<Vec<u8>>> {
        let mut buf = Vec::new();
        Ok(if self.read_record(&mut buf)? {
            Some(buf)
        } else {
            None
        })
    }

    /// Reads the next record into `buf` (cleared first); `false` at the end
    /// of the log. After an error, every call returns it again.
    pub fn read_record(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        buf.clear();
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.done {
            return Ok(false);
        }
        // The FIRST fragment while inside a fragmented record.
        let mut start: Option<Pos> = None;
        loop {
            let step = match self.step(buf, &mut start) {
                Ok(step) => step,
                Err(e) => {
                    // The position may be inside a record: do not resume.
                    buf.clear();
                    self.error = Some(e.clone());
                    return Err(e);
                }
            };
            match step {
                Step::Record => return Ok(true),
                Step::Continue => {}
                Step::Stop {
                    at,
                    what,
                    kind,
                    scan_from,
                } => {
                    buf.clear();
                    if self.salvage {
                        if let Some((block, pos, next_at)) = match scan_from {
                            Some((b, p)) => self.find_record_start(b, p)?,
                            None => None,
                        } {
                            let record = start.unwrap_or(at).physical;
                            self.skipped.push((
                                record,
                                format!("{what} (resumed at the record at {next_at})"),
                            ));
                            self.block = block;
                            self.pos = pos;
                            start = None;
                            continue;
                        }
                    }
                    return self.stop(start, at, what, kind, scan_from);
                }
            }
        }
    }

    fn here(&self, phys: u64) -> Pos {
        Pos {
            physical: phys + self.pos as u64,
            logical: self.block * BLOCK_SIZE as u64 + self.pos as u64,
        }
    }

    /// Looks at the fragment at the current position.
    fn step(&mut self, buf: &mut Vec<u8>, start: &mut Option<Pos>) -> Result<Step> {
        let count = self.source.block_count();
        if self.block >= count {
            let at = match count.checked_sub(1) {
                // Just past the last byte of the input.
                Some(last) => {
                    let (data, phys) = self.source.block(last)?;
                    Pos {
                        physical: phys + data.len() as u64,
                        logical: last * BLOCK_SIZE as u64 + data.len() as u64,
                    }
                }
                None => Pos {
                    physical: 0,
                    logical: 0,
                },
            };
            return Ok(Step::Stop {
                at,
                what: "end of the log",
                kind: StopKind::EndOfInput,
                scan_from: None,
            });
        }
        let (data, phys) = self.source.block(self.block)?;
        let rem = data.len().saturating_sub(self.pos);
        let at = self.here(phys);
        if rem < HEADER_SIZE {
            let tail = &data[self.pos.min(data.len())..];
            if data.len() == BLOCK_SIZE || tail.is_empty() {
                // Block padding (or the block is used up): next block.
                self.block += 1;
                self.pos = 0;
                return Ok(Step::Continue);
            }
            // A short last block ending in a partial header: zeros are the
            // padding of a block the writer had started to fill.
            let zero = tail.iter().all(|&b| b == 0);
            return Ok(Step::Stop {
                at,
                what: "truncated fragment header",
                kind: if zero {
                    StopKind::EndOfInput
                } else {
                    StopKind::Incomplete
                },
                scan_from: None,
            });
        }
        let h = Header::decode(&data[self.pos..]);
        if h.is_zero() {
            return Ok(Step::Stop {
                at,
                what: "zero-filled header",
                kind: StopKind::ZeroHeader,
                scan_from: Some((self.block + 1, 0)),
            });
        }
        let body = self.pos + HEADER_SIZE;
        let Some(payload) = data.get(body..body + h.length) else {
            let last_short_block = self.block + 1 == count && data.len() < BLOCK_SIZE;
            let fits_a_block = body + h.length <= BLOCK_SIZE;
            let kind =
                if last_short_block && fits_a_block && !self.length_is_damaged(&h, &data[body..]) {
                    StopKind::Incomplete
                } else {
                    StopKind::Damaged
                };
            return Ok(Step::Stop {
                at,
                what: if kind == StopKind::Incomplete {
                    "fragment cut short by the end of the log"
                } else {
                    "fragment length overruns the block"
                },
                kind,
                scan_from: Some((self.block + 1, 0)),
            });
        };
        if !h.verify(payload) {
            // If only the payload is damaged, the length is right and the
            // next fragment starts right after this one: look there first,
            // so damage early in the last block is not taken for a torn tail.
            return Ok(Step::Stop {
                at,
                what: "checksum mismatch",
                kind: StopKind::Damaged,
                scan_from: Some((self.block, body + h.length)),
            });
        }
        if h.log32 != self.log32 {
            // A recycled tail: the log ends here, nothing to scan.
            return Ok(Step::Stop {
                at,
                what: "fragment of another log",
                kind: StopKind::OtherLog,
                scan_from: None,
            });
        }
        let Some(ty) = RecordType::from_u8(h.ty) else {
            return Ok(Step::Stop {
                at,
                what: "unknown fragment type",
                kind: StopKind::Damaged,
                scan_from: Some((self.block, body + h.length)),
            });
        };
        if ty.starts_record() && start.is_some() {
            // The pending record never got its LAST fragment, and this
            // valid fragment starts a new one (the scan finds it).
            return Ok(Step::Stop {
                at,
                what: "record without its LAST fragment",
                kind: StopKind::Damaged,
                scan_from: Some((self.block, self.pos)),
            });
        }
        if !ty.starts_record() && start.is_none() {
            return Ok(Step::Stop {
                at,
                what: "MIDDLE or LAST fragment without a FIRST",
                kind: StopKind::Damaged,
                scan_from: Some((self.block, self.pos + HEADER_SIZE + h.length)),
            });
        }
        buf.extend_from_slice(payload);
        self.pos = body + h.length;
        match ty {
            RecordType::Full => {
                self.last_record_offset = at.physical;
                Ok(Step::Record)
            }
            RecordType::First => {
                *start = Some(at);
                Ok(Step::Continue)
            }
            RecordType::Middle => Ok(Step::Continue),
            RecordType::Last => {
                self.last_record_offset = start.take().unwrap_or(at).physical;
                Ok(Step::Record)
            }
        }
    }

    /// A header whose length runs past the end of the input: true if its
    /// checksum verifies a shorter payload `rest[..n]` that ends where a
    /// complete fragment would — at the end of the input, or right before
    /// another valid fragment of this log — i.e. the length field, not the
    /// end of the file, is what is wrong.
    fn length_is_damaged(&self, h: &Header, rest: &[u8]) -> bool {
        let want = unmask_crc(h.masked_crc);
        let mut crc = type_log_crc(h.ty, h.log32);
        for n in 0..=rest.len() {
            if n > 0 {
                crc = crate::coding::crc32c_append(crc, &rest[n - 1..n]);
            }
            if crc == want && (n == rest.len() || self.valid_fragment_at(&rest[n..])) {
                return true;
            }
        }
        false
    }

    /// True if `b` starts with a whole fragment of this log that verifies.
    fn valid_fragment_at(&self, b: &[u8]) -> bool {
        if b.len() < HEADER_SIZE {
            return false;
        }
        let h = Header::decode(b);
        !h.is_zero()
            && h.log32 == self.log32
            && b.get(HEADER_SIZE..HEADER_SIZE + h.length)
                .is_some_and(|p| h.verify(p))
    }

    /// Ends the log at a damaged or ending fragment, applying the torn-tail
    /// rule. `start` is the pending record's first fragment, if any: then the
    /// damaged record is that one, and the stop is never an ordinary end.
    fn stop(
        &mut self,
        start: Option<Pos>,
        at: Pos,
        what: &'static str,
        kind: StopKind,
        scan_from: Option<(u64, usize)>,
    ) -> Result<bool> {
        let record = start.unwrap_or(at);
        let pending = start.is_some();
        // An ordinary end of the log, and damage a crash can leave.
        let (ends, incomplete) = match kind {
            StopKind::EndOfInput => (!pending, pending),
            StopKind::ZeroHeader | StopKind::OtherLog => (!pending, false),
            StopKind::Incomplete => (false, true),
            StopKind::Damaged => (false, false),
        };
        let later = match scan_from {
            Some((block, pos)) if !ends || kind == StopKind::ZeroHeader => self
                .find_record_start(block, pos)?
                .map(|(_, _, physical)| physical),
            _ => None,
        };
        self.done = true;
        let detail = if record.physical == at.physical {
            String::new()
        } else {
            format!(" (in its fragment at {})", at.physical)
        };
        if self.point_in_time || self.salvage {
            if !ends || later.is_some() {
                self.torn_tail = Some(record.physical);
                self.dropped = later.is_some();
            }
            return Ok(false);
        }
        let corrupt = |why: String| {
            Error::corruption(
                self.source.name(),
                record.physical,
                format!("log record: {what}{detail}, {why}"),
            )
        };
        let verdict = if let Some(next_at) = later {
            Err(corrupt(format!("followed by a valid record at {next_at}")))
        } else {
            match self.tail {
                Tail::Truncated => {
                    if kind == StopKind::ZeroHeader {
                        Err(corrupt(
                            "zero bytes are never written into a log file".to_string(),
                        ))
                    } else if ends {
                        Ok(None)
                    } else if incomplete {
                        Ok(Some(record.physical))
                    } else {
                        Err(corrupt(
                            "a complete record that does not verify (a crash can only cut a file short)"
                                .to_string(),
                        ))
                    }
                }
                Tail::Unordered { sealed_end } => match sealed_end {
                    Some(end) if record.logical < end => Err(corrupt(format!(
                        "before the end of the log sealed when it was closed (log offset {end})"
                    ))),
                    _ if ends => Ok(None),
                    _ => Ok(Some(record.physical)),
                },
            }
        };
        match verdict {
            Ok(torn) => {
                self.torn_tail = torn;
                Ok(false)
            }
            Err(e) => {
                self.error = Some(e.clone());
                Err(e)
            }
        }
    }

    /// The first valid fragment of this log that starts a record — its
    /// block, position in the block and physical offset — found by
    /// following valid fragments from `(block, pos)` (a fragment boundary)
    /// and from every later block start.
    fn find_record_start(
        &self,
        mut block: u64,
        mut pos: usize,
    ) -> Result<Option<(u64, usize, u64)>> {
        let count = self.source.block_count();
        while block < count {
            let (data, phys) = self.source.block(block)?;
            while data.len().saturating_sub(pos) >= HEADER_SIZE {
                let h = Header::decode(&data[pos..]);
                let body = pos + HEADER_SIZE;
                let Some(payload) = data.get(body..body + h.length) else {
                    break;
                };
                if h.is_zero() || h.log32 != self.log32 || !h.verify(payload) {
                    break;
                }
                match RecordType::from_u8(h.ty) {
                    Some(t) if t.starts_record() => {
                        return Ok(Some((block, pos, phys + pos as u64)))
                    }
                    Some(_) => pos = body + h.length,
                    None => break,
                }
            }
            block += 1;
            pos = 0;
        }
        Ok(None)
    }
}
