//! openraft's `RaftLogStorage` and `RaftStateMachine` on a [`Kv`] store.
//!
//! One store holds a node's log, its vote, its committed and purged log
//! ids, and its state machine (docs/format/raft.md has the layout):
//!
//! ```text
//!   key                      value (JSON unless noted)
//!   'C' be64(gen) be32(i)    snapshot data, chunk i     the bytes of snapshot generation `gen`
//!   'D' user-key             user value (raw bytes)     the state machine's data
//!   'L' be64(index)          Entry<TypeConfig>          the log, in index order
//!   "M:vote"                 Vote
//!   "M:committed"            Option<LogId>
//!   "M:purged"               LogId                      last purged log id
//!   "S:applied"              AppliedState               last applied + membership
//!   "S:installing"           Installing                 a snapshot install under way
//!   "S:snapshot-chunks"      ChunkSet                   the current snapshot's chunks ...
//!   "S:snapshot-meta"        SnapshotMeta               ... and its metadata
//! ```
//!
//! Invariants:
//! 1. The log is contiguous: `truncate` deletes every entry from an index
//!    to the end, `purge` every entry up to an index together with
//!    `M:purged`, each in one atomic batch, so no crash leaves a gap.
//! 2. `S:applied` moves with the data it describes: each batch `apply`
//!    writes holds the effects of a run of entries (one final value per
//!    key) and the applied state as of the run's last entry. While
//!    `S:installing` exists the `D` range may be a mix of two states and
//!    is never served as applied (below).
//! 3. Durable before return: the vote, log appends (the flush callback is
//!    called after the synced write), truncate, purge, committed and
//!    every batch of a snapshot's build or install are written with
//!    `sync`. On a PM design every write is persisted anyway. `apply`'s
//!    writes are not synced: they follow the log in the same WAL, so a
//!    crash loses at most a suffix of applies, which openraft re-applies
//!    from the (synced) log.
//! 4. No batch of a snapshot's build or install, nor of `apply`, is
//!    larger than [`StoreOptions::batch_bytes`] (a single pair larger than
//!    that goes alone), so the snapshot's size is bounded by the store,
//!    not by a memtable: a PM design refuses a batch larger than
//!    `memtable_size_bytes`. (`append`'s batch is bounded by openraft's
//!    `max_payload_entries`.)
//! 5. `S:snapshot-chunks` and `S:snapshot-meta` change together in one
//!    batch and name chunks that were all written (synced) before it; a
//!    chunk generation that neither they nor `S:installing` name is
//!    garbage, deleted after the switch and again on open.
//!
//! Snapshot install, in bounded batches (`install_snapshot`):
//! 1. the data's chunks under a fresh generation (invisible until named);
//! 2. `S:installing` = {the snapshot's meta, its chunk set}, synced: from
//!    here the whole snapshot is durable in the store;
//! 3. deletes of the `D` keys the snapshot lacks, puts of its pairs;
//! 4. one batch: `S:applied`, `S:snapshot-meta`, `S:snapshot-chunks`, and
//!    the delete of `S:installing`;
//! 5. deletes of the previous generation's chunks.
//!
//! A crash before step 2 leaves the old state, applied, plus garbage
//! chunks. A crash after it leaves a marker; opening the store then
//! *finishes* the install from the marker's chunks (steps 3–5 again; they
//! are idempotent) before openraft reads the applied state. Finishing is
//! chosen over rolling back: the old `D` state may be half deleted and
//! cannot be restored, and reporting nothing applied instead would not be
//! repaired by openraft, which re-applies from the log on start and finds
//! the entries before the snapshot purged; wiping the log too would make a
//! voter forget entries it acknowledged. Finishing needs nothing from the
//! leader and keeps every acknowledged entry.
//!
//! If a batch fails in `install_snapshot` after step 2, the state machine
//! refuses every later call (openraft stops on the storage error anyway)
//! until the store is reopened and the install finished.
//!
//! Concurrency: `build_snapshot` runs in a task of its own beside the
//! state machine's calls. One mutex (`SnapState`) orders building,
//! installing and reading the current snapshot: a build reads the applied
//! state and the `D` range under it, so it never sees a half-installed
//! state.
//!
//! A stored value that does not decode is a `StorageError` naming the key;
//! nothing here panics on stored data.

// openraft's trait methods return its `StorageError` (224 bytes); the
// helpers here return it too rather than box and unbox it on every call.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    AnyError, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader,
    RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::kv::{Kv, Op};
use crate::{NodeId, Request, Response, TypeConfig};

/// The key layout (docs/format/raft.md).
pub mod keys {
    /// Prefix of log entries: `'L'` + the index, 8 bytes big-endian.
    pub const LOG: u8 = b'L';
    /// The first key after the log.
    pub const LOG_END: &[u8] = b"M";
    /// The vote.
    pub const VOTE: &[u8] = b"M:vote";
    /// The committed log id.
    pub const COMMITTED: &[u8] = b"M:committed";
    /// The last purged log id.
    pub const PURGED: &[u8] = b"M:purged";
    /// The state machine's last applied log id and membership.
    pub const APPLIED: &[u8] = b"S:applied";
    /// The current snapshot's metadata.
    pub const SNAPSHOT_META: &[u8] = b"S:snapshot-meta";
    /// The current snapshot's chunk set (which generation, how many
    /// chunks, how many bytes).
    pub const SNAPSHOT_CHUNKS: &[u8] = b"S:snapshot-chunks";
    /// A snapshot install under way: its metadata and chunk set.
    pub const INSTALLING: &[u8] = b"S:installing";
    /// Prefix of snapshot data chunks: `'C'` + generation (8 bytes
    /// big-endian) + chunk number (4 bytes big-endian).
    pub const CHUNK: u8 = b'C';
    /// The first key after the chunks.
    pub const CHUNK_END: &[u8] = b"D";
    /// Prefix of the state machine's data.
    pub const DATA: u8 = b'D';
    /// The first key after the data.
    pub const DATA_END: &[u8] = b"E";

    /// The key of log entry `index`.
    pub fn log(index: u64) -> [u8; 9] {
        let mut k = [0u8; 9];
        k[0] = LOG;
        k[1..].copy_from_slice(&index.to_be_bytes());
        k
    }

    /// The index of a log key, if `key` is one.
    pub fn log_index(key: &[u8]) -> Option<u64> {
        if key.len() != 9 || key[0] != LOG {
            return None;
        }
        let mut b = [0u8; 8];
        b.copy_from_slice(&key[1..]);
        Some(u64::from_be_bytes(b))
    }

    /// The key of chunk `i` of snapshot generation `gen`.
    pub fn chunk(gen: u64, i: u32) -> [u8; 13] {
        let mut k = [0u8; 13];
        k[0] = CHUNK;
        k[1..9].copy_from_slice(&gen.to_be_bytes());
        k[9..].copy_from_slice(&i.to_be_bytes());
        k
    }

    /// The generation and chunk number of a chunk key, if `key` is one.
    pub fn chunk_id(key: &[u8]) -> Option<(u64, u32)> {
        if key.len() != 13 || key[0] != CHUNK {
            return None;
        }
        let mut g = [0u8; 8];
        g.copy_from_slice(&key[1..9]);
        let mut i = [0u8; 4];
        i.copy_from_slice(&key[9..]);
        Some((u64::from_be_bytes(g), u32::from_be_bytes(i)))
    }

    /// The key of user key `user`.
    pub fn data(user: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(user.len() + 1);
        k.push(DATA);
        k.extend_from_slice(user);
        k
    }
}

/// The last applied log id and membership, stored under `S:applied`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct AppliedState {
    /// The last applied log id.
    pub last_applied: Option<LogId<NodeId>>,
    /// The membership as of `last_applied`.
    pub membership: StoredMembership<NodeId, openraft::BasicNode>,
}

/// Printable form of a key for error messages.
pub fn show_key(key: &[u8]) -> String {
    if let Some(i) = keys::log_index(key) {
        return format!("log entry {i} (key L{i:016x})");
    }
    if let Some((g, i)) = keys::chunk_id(key) {
        return format!("snapshot chunk {i} of generation {g} (key C{g:016x}{i:08x})");
    }
    let mut s = String::new();
    for &b in key {
        if b.is_ascii_graphic() {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}

fn io_err(subject: ErrorSubject<NodeId>, verb: ErrorVerb, msg: String) -> StorageError<NodeId> {
    StorageIOError::new(subject, verb, AnyError::error(msg)).into()
}

/// Decodes a stored JSON value; a bad one is an error naming the key.
fn decode<T: DeserializeOwned>(
    subject: ErrorSubject<NodeId>,
    key: &[u8],
    value: &[u8],
) -> Result<T, StorageError<NodeId>> {
    serde_json::from_slice(value).map_err(|e| {
        io_err(
            subject,
            ErrorVerb::Read,
            format!("corrupt value under key {}: {e}", show_key(key)),
        )
    })
}

fn encode<T: Serialize>(
    subject: ErrorSubject<NodeId>,
    v: &T,
) -> Result<Vec<u8>, StorageError<NodeId>> {
    serde_json::to_vec(v).map_err(|e| io_err(subject, ErrorVerb::Write, format!("encode: {e}")))
}

/// Runs a long store call (a scan of the log, building or installing a
/// snapshot): on tokio's multi-threaded runtime the worker hands its other
/// tasks away first, elsewhere it just runs.
///
/// Not for the calls every client write makes — the log append, the
/// replication's and `apply`'s reads, `apply`'s write, the vote — nor
/// for the log's other bounded reads, which run on the worker itself: the
/// hand-off (another thread takes over the worker's core, per call) cost
/// more than they do. Measured with `tierkv-raft bench` (3 nodes, 10 s,
/// two runs, the stores in both orders), hand-off → inline, ops/s at 1
/// and at 16 clients: `triangle` (PM WAL) 1,743 / 1,638 → 2,446 / 2,228
/// and 6,320 / 7,524 → 8,279 / 8,727, the leader's append 0.023 →
/// 0.005 ms; the stores whose synced write waits on an fdatasync
/// (~0.25 ms) gained too, as the node's other worker runs its other tasks
/// meanwhile — `classic` 722 / 750 → 857 / 804 and 2,515 / 2,871 →
/// 3,260 / 3,114, RocksDB 594 / 540 → 750 / 726 and 2,417 / 2,790 →
/// 2,755 / 2,894. Then the log's range reads (each replication reads the
/// entries it sends) inline too: `triangle` 2,208 / 2,215 → 2,896 / 2,900
/// at 1 client, commit P99 0.75 / 0.78 → 0.58 / 0.57 ms.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

fn get_json<T: DeserializeOwned>(
    kv: &dyn Kv,
    subject: ErrorSubject<NodeId>,
    key: &[u8],
) -> Result<Option<T>, StorageError<NodeId>> {
    match kv.get(key) {
        Ok(Some(v)) => Ok(Some(decode(subject, key, &v)?)),
        Ok(None) => Ok(None),
        Err(e) => Err(io_err(
            subject,
            ErrorVerb::Read,
            format!("get {}: {e}", show_key(key)),
        )),
    }
}

fn write(
    kv: &dyn Kv,
    subject: ErrorSubject<NodeId>,
    ops: Vec<Op>,
    sync: bool,
) -> Result<(), StorageError<NodeId>> {
    // On the worker: see `blocking`.
    kv.write(ops, sync)
        .map_err(|e| io_err(subject, ErrorVerb::Write, e))
}

/// Time spent in the store, for the bench's "where does a commit's time
/// go": one set per process (a node process has one store).
#[derive(Debug, Default)]
pub struct StoreTimes {
    /// `append` calls (each one synced write of a batch of entries).
    pub appends: std::sync::atomic::AtomicU64,
    /// Entries appended.
    pub appended_entries: std::sync::atomic::AtomicU64,
    /// Nanoseconds inside `append`'s synced write.
    pub append_ns: std::sync::atomic::AtomicU64,
    /// Synced writes of the committed id.
    pub committed_saves: std::sync::atomic::AtomicU64,
    /// Nanoseconds inside those.
    pub committed_ns: std::sync::atomic::AtomicU64,
    /// `apply` calls.
    pub applies: std::sync::atomic::AtomicU64,
    /// Nanoseconds inside `apply`.
    pub apply_ns: std::sync::atomic::AtomicU64,
}

/// This process's store timings.
pub static TIMES: StoreTimes = StoreTimes {
    appends: std::sync::atomic::AtomicU64::new(0),
    appended_entries: std::sync::atomic::AtomicU64::new(0),
    append_ns: std::sync::atomic::AtomicU64::new(0),
    committed_saves: std::sync::atomic::AtomicU64::new(0),
    committed_ns: std::sync::atomic::AtomicU64::new(0),
    applies: std::sync::atomic::AtomicU64::new(0),
    apply_ns: std::sync::atomic::AtomicU64::new(0),
};

fn add(counter: &std::sync::atomic::AtomicU64, v: u64) {
    counter.fetch_add(v, std::sync::atomic::Ordering::Relaxed);
}

/// How the store writes snapshots.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Upper bound of one write batch of a snapshot's build or install,
    /// counted as keys + values + 16 bytes per op (a single pair larger
    /// than it goes alone). Keep it well under the memtable: a PM design
    /// refuses a batch larger than `memtable_size_bytes`. Snapshot data
    /// is stored in chunks of a quarter of it.
    pub batch_bytes: usize,
    /// Test hook: the install of a snapshot (and finishing one on open)
    /// fails instead of writing its batch number `k + 1`, as if the
    /// process died there; the `k` batches before it stay written.
    #[doc(hidden)]
    pub install_stop_after_batches: Option<usize>,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            batch_bytes: 256 << 10,
            install_stop_after_batches: None,
        }
    }
}

impl StoreOptions {
    /// Options for a store with memtables of `memtable_size_bytes`:
    /// batches of a quarter memtable, at most 256 KiB.
    pub fn for_memtable(memtable_size_bytes: usize) -> StoreOptions {
        StoreOptions {
            batch_bytes: (memtable_size_bytes / 4).clamp(1, 256 << 10),
            ..StoreOptions::default()
        }
    }

    fn chunk_bytes(&self) -> usize {
        (self.batch_bytes / 4).max(1)
    }
}

/// Opens the log store and the state machine of one node over `kv`, with
/// the default [`StoreOptions`].
pub fn open(kv: Arc<dyn Kv>) -> Result<(LogStore, StateMachine), StorageError<NodeId>> {
    open_with(kv, StoreOptions::default())
}

/// Opens the log store and the state machine of one node over `kv`. A
/// snapshot install a crash interrupted is finished first (module doc).
pub fn open_with(
    kv: Arc<dyn Kv>,
    opts: StoreOptions,
) -> Result<(LogStore, StateMachine), StorageError<NodeId>> {
    let sm = StateMachine::new(Arc::clone(&kv), opts)?;
    Ok((LogStore { kv }, sm))
}

/// The Raft log, vote and committed id on a [`Kv`]; also its own
/// `LogReader` (a clone shares the store).
#[derive(Clone)]
pub struct LogStore {
    kv: Arc<dyn Kv>,
}

impl LogStore {
    fn read_range(
        &self,
        lower: u64,
        upper: Option<u64>,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        if upper.is_some_and(|u| u <= lower) {
            return Ok(Vec::new());
        }
        let pairs = self.scan_log(lower, upper)?;
        let mut out = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            let entry: Entry<TypeConfig> = decode(ErrorSubject::Logs, &k, &v)?;
            if keys::log_index(&k) != Some(entry.log_id.index) {
                return Err(io_err(
                    ErrorSubject::Logs,
                    ErrorVerb::Read,
                    format!(
                        "corrupt value under key {}: holds entry {}",
                        show_key(&k),
                        entry.log_id
                    ),
                ));
            }
            out.push(entry);
        }
        Ok(out)
    }

    fn last_entry(&self) -> Result<Option<Entry<TypeConfig>>, StorageError<NodeId>> {
        let lo = keys::log(0);
        let last = self
            .kv
            .scan(&lo, keys::LOG_END, true, 1)
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        match last.into_iter().next() {
            Some((k, v)) => Ok(Some(decode(ErrorSubject::Logs, &k, &v)?)),
            None => Ok(None),
        }
    }

    /// Keys of the log entries in `[lower, upper)`.
    fn log_keys(
        &self,
        lower: u64,
        upper: Option<u64>,
    ) -> Result<Vec<Vec<u8>>, StorageError<NodeId>> {
        let pairs = self.scan_log(lower, upper)?;
        Ok(pairs.into_iter().map(|(k, _)| k).collect())
    }

    /// The stored (key, value) pairs of the log entries in `[lower,
    /// upper)` (`None`: to the end of the log), in index order.
    fn scan_log(
        &self,
        lower: u64,
        upper: Option<u64>,
    ) -> Result<crate::kv::Pairs, StorageError<NodeId>> {
        let lo = keys::log(lower);
        let hi_key = upper.map(keys::log);
        let hi: &[u8] = hi_key.as_ref().map_or(keys::LOG_END, |k| &k[..]);
        // On the worker (see `blocking`): openraft bounds every range it
        // asks for (`max_payload_entries` to replicate, `purge_batch_size`
        // to purge; a truncate's is the unacknowledged suffix).
        self.kv
            .scan(&lo, hi, false, usize::MAX)
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let lower = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => match i.checked_add(1) {
                Some(i) => i,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => 0,
        };
        let upper = match range.end_bound() {
            Bound::Included(&i) => i.checked_add(1),
            Bound::Excluded(&i) => Some(i),
            Bound::Unbounded => None,
        };
        self.read_range(lower, upper)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let purged: Option<LogId<NodeId>> = get_json(&*self.kv, ErrorSubject::Logs, keys::PURGED)?;
        let last = self.last_entry()?.map(|e| e.log_id);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last.or(purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let v = encode(ErrorSubject::Vote, vote)?;
        write(
            &*self.kv,
            ErrorSubject::Vote,
            vec![Op::Put(keys::VOTE.to_vec(), v)],
            true,
        )
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        get_json(&*self.kv, ErrorSubject::Vote, keys::VOTE)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        let v = encode(ErrorSubject::Store, &committed)?;
        write(
            &*self.kv,
            ErrorSubject::Store,
            vec![Op::Put(keys::COMMITTED.to_vec(), v)],
            true,
        )
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(
            get_json::<Option<LogId<NodeId>>>(&*self.kv, ErrorSubject::Store, keys::COMMITTED)?
                .flatten(),
        )
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut ops = Vec::new();
        for e in entries {
            let v = encode(ErrorSubject::Log(e.log_id), &e)?;
            ops.push(Op::Put(keys::log(e.log_id.index).to_vec(), v));
        }
        let n = ops.len() as u64;
        let t = std::time::Instant::now();
        let res = write(&*self.kv, ErrorSubject::Logs, ops, true);
        add(&TIMES.appends, 1);
        add(&TIMES.appended_entries, n);
        add(&TIMES.append_ns, t.elapsed().as_nanos() as u64);
        match &res {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        res
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let ops = self
            .log_keys(log_id.index, None)?
            .into_iter()
            .map(Op::Delete)
            .collect();
        write(&*self.kv, ErrorSubject::Logs, ops, true)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let upper = log_id.index.checked_add(1);
        let mut ops: Vec<Op> = self
            .log_keys(0, upper)?
            .into_iter()
            .map(Op::Delete)
            .collect();
        ops.push(Op::Put(
            keys::PURGED.to_vec(),
            encode(ErrorSubject::Logs, &log_id)?,
        ));
        write(&*self.kv, ErrorSubject::Logs, ops, true)
    }
}

/// The replicated map: `D` keys, the applied state and the current
/// snapshot, on the same [`Kv`] as the log.
pub struct StateMachine {
    kv: Arc<dyn Kv>,
    opts: StoreOptions,
    applied: AppliedState,
    shared: Arc<Shared>,
}

/// What the state machine shares with its snapshot builders.
struct Shared {
    /// Orders building, installing and reading the current snapshot.
    snap: std::sync::Mutex<SnapState>,
    /// Set when an install failed after its marker was written: the `D`
    /// range may be a mix of two states until the store is reopened.
    broken: std::sync::OnceLock<String>,
}

/// What the snapshot mutex guards.
struct SnapState {
    /// The next chunk generation to write (above every one in the store).
    next_gen: u64,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, SnapState> {
        self.snap.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check(&self, subject: ErrorSubject<NodeId>) -> Result<(), StorageError<NodeId>> {
        match self.broken.get() {
            Some(e) => Err(io_err(
                subject,
                ErrorVerb::Read,
                format!("a snapshot install failed half way ({e}); reopen the store to finish it"),
            )),
            None => Ok(()),
        }
    }
}

impl StateMachine {
    fn new(kv: Arc<dyn Kv>, opts: StoreOptions) -> Result<StateMachine, StorageError<NodeId>> {
        let subject = ErrorSubject::StateMachine;
        let installing: Option<Installing> = get_json(&*kv, subject.clone(), keys::INSTALLING)?;
        let current: Option<ChunkSet> = get_json(&*kv, subject.clone(), keys::SNAPSHOT_CHUNKS)?;
        let last = blocking(|| kv.scan(&[keys::CHUNK], keys::CHUNK_END, true, 1))
            .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
        let top = [
            last.first()
                .and_then(|(k, _)| keys::chunk_id(k))
                .map(|(g, _)| g),
            current.map(|c| c.gen),
            installing.as_ref().map(|i| i.chunks.gen),
        ];
        let mut st = SnapState {
            next_gen: top.into_iter().flatten().max().unwrap_or(0) + 1,
        };
        let mut keep = current.map(|c| c.gen);
        if let Some(inst) = installing {
            // A crash interrupted an install after its marker: finish it.
            let subject = ErrorSubject::Snapshot(Some(inst.meta.signature()));
            let data = read_chunks(&*kv, subject.clone(), &inst.chunks)?;
            let pairs =
                snapshot_decode(&data).map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
            let mut b = Batches::new(&*kv, subject, &opts, opts.install_stop_after_batches);
            finish_install(&mut b, &inst, pairs)?;
            keep = Some(inst.chunks.gen);
        }
        gc_chunks(&*kv, &opts, keep)?;
        let applied = get_json(&*kv, subject, keys::APPLIED)?.unwrap_or_default();
        st.next_gen = st.next_gen.max(keep.unwrap_or(0) + 1);
        Ok(StateMachine {
            kv,
            opts,
            applied,
            shared: Arc::new(Shared {
                snap: std::sync::Mutex::new(st),
                broken: std::sync::OnceLock::new(),
            }),
        })
    }

    /// The store (the server reads `D` keys through it after
    /// `ensure_linearizable`).
    pub fn kv(&self) -> Arc<dyn Kv> {
        Arc::clone(&self.kv)
    }
}

impl StateMachine {
    /// Applies `entries` in batches of at most `batch_bytes` (a single
    /// value larger than that goes alone): each batch holds the final
    /// value of every key its entries write (an `Append` rewrites the
    /// whole value, so a key appended to many times is written once, not
    /// once per entry) and `S:applied` as of its last entry, so the
    /// applied state still moves with the data it describes.
    fn apply_entries<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>>,
    {
        self.shared.check(ErrorSubject::StateMachine)?;
        let mut applied = self.applied.clone();
        let mut responses = Vec::new();
        // Values written since the last batch (reads must see them; those
        // of earlier batches are in the store), their keys in first-write
        // order, and the bytes their ops take.
        let mut pending: std::collections::HashMap<Vec<u8>, Option<Vec<u8>>> = Default::default();
        let mut dirty: Vec<Vec<u8>> = Vec::new();
        let mut dirty_bytes = 0usize;
        for e in entries {
            applied.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => responses.push(Response::default()),
                EntryPayload::Membership(m) => {
                    applied.membership = StoredMembership::new(Some(e.log_id), m);
                    responses.push(Response::default());
                }
                EntryPayload::Normal(req) => {
                    let key = keys::data(req.key());
                    let prev = match pending.get(&key) {
                        Some(v) => v.clone(),
                        // On the worker: see `blocking`.
                        None => self.kv.get(&key).map_err(|err| {
                            io_err(
                                ErrorSubject::Apply(e.log_id),
                                ErrorVerb::Read,
                                format!("get {}: {err}", show_key(&key)),
                            )
                        })?,
                    };
                    let next = match &req {
                        Request::Put { value, .. } => Some(value.as_bytes().to_vec()),
                        Request::Delete { .. } => None,
                        Request::Append { value, .. } => {
                            let mut v = prev.clone().unwrap_or_default();
                            v.extend_from_slice(value.as_bytes());
                            Some(v)
                        }
                    };
                    let size =
                        |v: &Option<Vec<u8>>| 16 + key.len() + v.as_ref().map_or(0, Vec::len);
                    dirty_bytes += size(&next);
                    match pending.get_mut(&key) {
                        Some(old) => {
                            dirty_bytes -= size(old);
                            *old = next;
                        }
                        None => {
                            dirty.push(key.clone());
                            pending.insert(key, next);
                        }
                    }
                    responses.push(Response {
                        prev: prev.map(|p| String::from_utf8_lossy(&p).into_owned()),
                    });
                }
            }
            if dirty_bytes >= self.opts.batch_bytes {
                self.write_applied(&mut dirty, &mut pending, &applied)?;
                dirty_bytes = 0;
            }
        }
        if applied.last_applied != self.applied.last_applied {
            self.write_applied(&mut dirty, &mut pending, &applied)?;
        }
        Ok(responses)
    }

    /// Writes the `pending` values of the `dirty` keys (moved out: reads
    /// find them in the store from then on) and `applied` in one batch.
    fn write_applied(
        &mut self,
        dirty: &mut Vec<Vec<u8>>,
        pending: &mut std::collections::HashMap<Vec<u8>, Option<Vec<u8>>>,
        applied: &AppliedState,
    ) -> Result<(), StorageError<NodeId>> {
        let mut ops = Vec::with_capacity(dirty.len() + 1);
        for key in dirty.drain(..) {
            match pending.remove(&key) {
                Some(Some(v)) => ops.push(Op::Put(key, v)),
                Some(None) => ops.push(Op::Delete(key)),
                None => debug_assert!(false, "a dirty key has no pending value"),
            }
        }
        ops.push(Op::Put(
            keys::APPLIED.to_vec(),
            encode(ErrorSubject::StateMachine, applied)?,
        ));
        write(&*self.kv, ErrorSubject::StateMachine, ops, false)?;
        self.applied = applied.clone();
        Ok(())
    }
}

/// Reads the user value of `key` from a node's store.
pub fn read_data(kv: &dyn Kv, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    kv.get(&keys::data(key))
}

/// Scans user keys `[from, to)` (to = None: to the end) of a node's store.
pub fn scan_data(
    kv: &dyn Kv,
    from: &[u8],
    to: Option<&[u8]>,
    limit: usize,
) -> Result<crate::kv::Pairs, String> {
    let lo = keys::data(from);
    let hi = match to {
        Some(t) => keys::data(t),
        None => keys::DATA_END.to_vec(),
    };
    let pairs = kv.scan(&lo, &hi, false, limit)?;
    Ok(pairs
        .into_iter()
        .map(|(k, v)| (k[1..].to_vec(), v))
        .collect())
}

/// Snapshot data: magic `TKRS1\n`, then per pair `u32 klen, key, u32 vlen,
/// value` (little-endian lengths; user keys without the `D` prefix), then
/// the CRC-32C of everything before it.
const SNAPSHOT_MAGIC: &[u8] = b"TKRS1\n";

fn snapshot_encode_pair(out: &mut Vec<u8>, k: &[u8], v: &[u8]) {
    out.extend_from_slice(&(k.len() as u32).to_le_bytes());
    out.extend_from_slice(k);
    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    out.extend_from_slice(v);
}

fn snapshot_finish(mut out: Vec<u8>) -> Vec<u8> {
    let crc = tierkv::coding::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes snapshot data into user pairs; a bad snapshot is an error
/// naming the offset.
pub fn snapshot_decode(data: &[u8]) -> Result<crate::kv::Pairs, String> {
    if data.len() < SNAPSHOT_MAGIC.len() + 4 || !data.starts_with(SNAPSHOT_MAGIC) {
        return Err(format!(
            "snapshot of {} bytes has no TKRS1 header",
            data.len()
        ));
    }
    let (body, crc) = data.split_at(data.len() - 4);
    let mut c = [0u8; 4];
    c.copy_from_slice(crc);
    if tierkv::coding::crc32c(body) != u32::from_le_bytes(c) {
        return Err(format!(
            "snapshot of {} bytes fails its checksum",
            data.len()
        ));
    }
    let mut pos = SNAPSHOT_MAGIC.len();
    let mut out = Vec::new();
    let take = |pos: &mut usize| -> Result<Vec<u8>, String> {
        let at = *pos;
        let len_bytes = body
            .get(at..at + 4)
            .ok_or_else(|| format!("snapshot truncated at offset {at}"))?;
        let mut l = [0u8; 4];
        l.copy_from_slice(len_bytes);
        let len = u32::from_le_bytes(l) as usize;
        let bytes = body
            .get(at + 4..at + 4 + len)
            .ok_or_else(|| format!("snapshot length {len} at offset {at} runs past its end"))?;
        *pos = at + 4 + len;
        Ok(bytes.to_vec())
    };
    while pos < body.len() {
        let k = take(&mut pos)?;
        let v = take(&mut pos)?;
        out.push((k, v));
    }
    Ok(out)
}

/// Where a snapshot's data is stored: `chunks` chunks under generation
/// `gen`, `len_bytes` bytes in all, with this CRC-32C (the data's own
/// trailing checksum covers it again).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChunkSet {
    /// The chunks' generation (the `gen` of their keys).
    pub gen: u64,
    /// How many chunks, numbered from 0.
    pub chunks: u32,
    /// The data's length.
    pub len_bytes: u64,
    /// CRC-32C of the data.
    pub crc32c: u32,
}

/// The marker of an install under way, stored under `S:installing`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Installing {
    /// The snapshot being installed.
    pub meta: SnapshotMeta<NodeId, openraft::BasicNode>,
    /// Its data, all written before the marker.
    pub chunks: ChunkSet,
}

/// Bytes an op adds to a batch, about as tierkv encodes it.
fn op_bytes(op: &Op) -> usize {
    16 + match op {
        Op::Put(k, v) => k.len() + v.len(),
        Op::Delete(k) => k.len(),
    }
}

/// Writes ops in synced batches of at most `batch_bytes` each.
struct Batches<'a> {
    kv: &'a dyn Kv,
    subject: ErrorSubject<NodeId>,
    bound_bytes: usize,
    ops: Vec<Op>,
    bytes: usize,
    /// Batches written so far.
    written: usize,
    /// The test hook: fail instead of writing batch `k + 1`.
    stop_after: Option<usize>,
}

impl<'a> Batches<'a> {
    fn new(
        kv: &'a dyn Kv,
        subject: ErrorSubject<NodeId>,
        opts: &StoreOptions,
        stop_after: Option<usize>,
    ) -> Batches<'a> {
        Batches {
            kv,
            subject,
            bound_bytes: opts.batch_bytes,
            ops: Vec::new(),
            bytes: 0,
            written: 0,
            stop_after,
        }
    }

    /// Adds `op`, writing the ops before it first if it would not fit.
    fn push(&mut self, op: Op) -> Result<(), StorageError<NodeId>> {
        let n = op_bytes(&op);
        if !self.ops.is_empty() && self.bytes + n > self.bound_bytes {
            self.flush()?;
        }
        self.bytes += n;
        self.ops.push(op);
        Ok(())
    }

    /// Writes the pending ops, if any, as one synced batch.
    fn flush(&mut self) -> Result<(), StorageError<NodeId>> {
        if self.ops.is_empty() {
            return Ok(());
        }
        if let Some(k) = self.stop_after.filter(|&k| self.written >= k) {
            return Err(io_err(
                self.subject.clone(),
                ErrorVerb::Write,
                format!("test hook: stopped after {k} batches"),
            ));
        }
        let ops = std::mem::take(&mut self.ops);
        self.bytes = 0;
        write(self.kv, self.subject.clone(), ops, true)?;
        self.written += 1;
        Ok(())
    }

    /// Writes what is pending, then `ops` as one batch of their own.
    fn write_alone(&mut self, ops: Vec<Op>) -> Result<(), StorageError<NodeId>> {
        self.flush()?;
        debug_assert!(self.ops.is_empty());
        self.ops = ops;
        self.flush()
    }
}

/// Writes `data` as chunks of generation `gen`, in batches; returns the
/// chunk set (nothing names it yet).
fn write_chunks(
    b: &mut Batches<'_>,
    opts: &StoreOptions,
    gen: u64,
    data: &[u8],
) -> Result<ChunkSet, StorageError<NodeId>> {
    let mut chunks = 0u32;
    for piece in data.chunks(opts.chunk_bytes()) {
        b.push(Op::Put(keys::chunk(gen, chunks).to_vec(), piece.to_vec()))?;
        chunks += 1;
    }
    b.flush()?;
    Ok(ChunkSet {
        gen,
        chunks,
        len_bytes: data.len() as u64,
        crc32c: tierkv::coding::crc32c(data),
    })
}

/// Reads and checks the data of a chunk set.
fn read_chunks(
    kv: &dyn Kv,
    subject: ErrorSubject<NodeId>,
    set: &ChunkSet,
) -> Result<Vec<u8>, StorageError<NodeId>> {
    let lo = keys::chunk(set.gen, 0);
    let hi = keys::chunk(set.gen.saturating_add(1), 0);
    let pairs = blocking(|| kv.scan(&lo, &hi, false, usize::MAX))
        .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
    let bad = |what: String| io_err(subject.clone(), ErrorVerb::Read, what);
    let mut data = Vec::with_capacity(set.len_bytes.min(1 << 30) as usize);
    for (n, (k, v)) in pairs.iter().enumerate() {
        if keys::chunk_id(k) != Some((set.gen, n as u32)) {
            return Err(bad(format!(
                "snapshot generation {} lacks chunk {n} (next is {})",
                set.gen,
                show_key(k)
            )));
        }
        data.extend_from_slice(v);
    }
    if pairs.len() as u64 != u64::from(set.chunks)
        || data.len() as u64 != set.len_bytes
        || tierkv::coding::crc32c(&data) != set.crc32c
    {
        return Err(bad(format!(
            "snapshot generation {} has {} chunks of {} bytes in all, not the {} chunks, {} bytes \
             and checksum {:08x} that {} names",
            set.gen,
            pairs.len(),
            data.len(),
            set.chunks,
            set.len_bytes,
            set.crc32c,
            show_key(keys::SNAPSHOT_CHUNKS),
        )));
    }
    Ok(data)
}

/// Deletes the chunks of `set`, in batches.
fn delete_chunks(b: &mut Batches<'_>, set: &ChunkSet) -> Result<(), StorageError<NodeId>> {
    for i in 0..set.chunks {
        b.push(Op::Delete(keys::chunk(set.gen, i).to_vec()))?;
    }
    b.flush()
}

/// Deletes every chunk whose generation is not `keep` (left by a crash
/// during a build, an install or the deletes after one).
fn gc_chunks(
    kv: &dyn Kv,
    opts: &StoreOptions,
    keep: Option<u64>,
) -> Result<(), StorageError<NodeId>> {
    let subject = ErrorSubject::Snapshot(None);
    let mut b = Batches::new(kv, subject.clone(), opts, None);
    let mut from = vec![keys::CHUNK];
    loop {
        let page = blocking(|| kv.scan(&from, keys::CHUNK_END, false, 16))
            .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
        let Some((last, _)) = page.last() else { break };
        from = last.clone();
        from.push(0);
        for (k, _) in page {
            match keys::chunk_id(&k) {
                Some((g, _)) if Some(g) == keep => {
                    // Skip the kept generation's chunks without reading them.
                    from = keys::chunk(g.saturating_add(1), 0).to_vec();
                    break;
                }
                _ => b.push(Op::Delete(k))?,
            }
        }
    }
    b.flush()
}

/// Steps 3 and 4 of an install (module doc): makes the `D` range the
/// snapshot's `pairs`, then in one batch the applied state, the current
/// snapshot and the marker's delete; then deletes the previous snapshot's
/// chunks. Idempotent: opening the store after a crash runs it again.
fn finish_install(
    b: &mut Batches<'_>,
    inst: &Installing,
    mut pairs: crate::kv::Pairs,
) -> Result<AppliedState, StorageError<NodeId>> {
    let kv = b.kv;
    let subject = b.subject.clone();
    if !pairs.windows(2).all(|w| w[0].0 < w[1].0) {
        // The builder writes key order; be safe with any other sender
        // (the last value of a key wins, as a batch would have it).
        pairs.reverse();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|later, earlier| later.0 == earlier.0);
    }
    let previous: Option<ChunkSet> = get_json(kv, subject.clone(), keys::SNAPSHOT_CHUNKS)?;
    // Delete the D keys the snapshot lacks, a page of keys at a time.
    let mut from = vec![keys::DATA];
    loop {
        let page = blocking(|| kv.scan(&from, keys::DATA_END, false, 512))
            .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
        let Some((last, _)) = page.last() else { break };
        from = last.clone();
        from.push(0);
        for (k, _) in page {
            let user = &k[1..];
            if pairs.binary_search_by(|(p, _)| p[..].cmp(user)).is_err() {
                b.push(Op::Delete(k))?;
            }
        }
    }
    for (k, v) in pairs {
        b.push(Op::Put(keys::data(&k), v))?;
    }
    let applied = AppliedState {
        last_applied: inst.meta.last_log_id,
        membership: inst.meta.last_membership.clone(),
    };
    b.write_alone(vec![
        Op::Put(keys::APPLIED.to_vec(), encode(subject.clone(), &applied)?),
        Op::Put(
            keys::SNAPSHOT_META.to_vec(),
            encode(subject.clone(), &inst.meta)?,
        ),
        Op::Put(
            keys::SNAPSHOT_CHUNKS.to_vec(),
            encode(subject.clone(), &inst.chunks)?,
        ),
        Op::Delete(keys::INSTALLING.to_vec()),
    ])?;
    if let Some(p) = previous.filter(|p| p.gen != inst.chunks.gen) {
        delete_chunks(b, &p)?;
    }
    Ok(applied)
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (
            Option<LogId<NodeId>>,
            StoredMembership<NodeId, openraft::BasicNode>,
        ),
        StorageError<NodeId>,
    > {
        self.shared.check(ErrorSubject::StateMachine)?;
        Ok((self.applied.last_applied, self.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let t = std::time::Instant::now();
        let r = self.apply_entries(entries);
        add(&TIMES.applies, 1);
        add(&TIMES.apply_ns, t.elapsed().as_nanos() as u64);
        r
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            kv: Arc::clone(&self.kv),
            opts: self.opts.clone(),
            shared: Arc::clone(&self.shared),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let subject = ErrorSubject::Snapshot(Some(meta.signature()));
        self.shared.check(subject.clone())?;
        let data = snapshot.into_inner();
        let pairs =
            snapshot_decode(&data).map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
        let (kv, opts, shared) = (&*self.kv, &self.opts, &*self.shared);
        let applied = blocking(|| {
            let mut st = shared.lock();
            let mut b = Batches::new(kv, subject.clone(), opts, opts.install_stop_after_batches);
            // Step 1: the data, under a generation nothing names yet.
            let gen = st.next_gen;
            st.next_gen += 1;
            let chunks = write_chunks(&mut b, opts, gen, &data)?;
            // Step 2: the marker; from here a crash is finished on open.
            let inst = Installing {
                meta: meta.clone(),
                chunks,
            };
            b.write_alone(vec![Op::Put(
                keys::INSTALLING.to_vec(),
                encode(subject.clone(), &inst)?,
            )])?;
            // Steps 3 to 5.
            finish_install(&mut b, &inst, pairs).inspect_err(|e| {
                let _ = shared.broken.set(e.to_string());
            })
        })?;
        self.applied = applied;
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        self.shared.check(ErrorSubject::Snapshot(None))?;
        let shared = &*self.shared;
        blocking(|| {
            let _st = shared.lock();
            current_snapshot(&*self.kv)
        })
    }
}

/// The current snapshot (callers hold the snapshot mutex).
fn current_snapshot(kv: &dyn Kv) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
    let subject = ErrorSubject::Snapshot(None);
    let values = kv
        .read_at_snapshot(
            &[keys::SNAPSHOT_META, keys::SNAPSHOT_CHUNKS],
            b"",
            b"",
            &mut |_, _| Ok(()),
        )
        .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
    let mut it = values.into_iter();
    let (meta, set) = (it.next().flatten(), it.next().flatten());
    let meta: SnapshotMeta<NodeId, openraft::BasicNode> = match meta {
        Some(m) => decode(subject.clone(), keys::SNAPSHOT_META, &m)?,
        None => return Ok(None),
    };
    let set: ChunkSet = match set {
        Some(s) => decode(subject.clone(), keys::SNAPSHOT_CHUNKS, &s)?,
        None => {
            return Err(io_err(
                subject,
                ErrorVerb::Read,
                format!(
                    "{} present without {}",
                    show_key(keys::SNAPSHOT_META),
                    show_key(keys::SNAPSHOT_CHUNKS)
                ),
            ))
        }
    };
    let data = read_chunks(kv, ErrorSubject::Snapshot(Some(meta.signature())), &set)?;
    Ok(Some(Snapshot {
        meta,
        snapshot: Box::new(Cursor::new(data)),
    }))
}

/// Builds a snapshot from one consistent read of the store: the applied
/// state and every `D` pair at the same point in time.
pub struct SnapshotBuilder {
    kv: Arc<dyn Kv>,
    opts: StoreOptions,
    shared: Arc<Shared>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let subject = ErrorSubject::Snapshot(None);
        self.shared.check(subject.clone())?;
        let (kv, opts, shared) = (&*self.kv, &self.opts, &*self.shared);
        blocking(|| {
            // Under the mutex: no install is half done while we read.
            let mut st = shared.lock();
            let mut out = SNAPSHOT_MAGIC.to_vec();
            let values = kv
                .read_at_snapshot(
                    &[keys::APPLIED],
                    &[keys::DATA],
                    keys::DATA_END,
                    &mut |k, v| {
                        snapshot_encode_pair(&mut out, &k[1..], v);
                        Ok(())
                    },
                )
                .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
            let applied: AppliedState = match values.into_iter().next().flatten() {
                Some(v) => decode(subject.clone(), keys::APPLIED, &v)?,
                None => AppliedState::default(),
            };
            let data = snapshot_finish(out);
            let snapshot_id = match applied.last_applied {
                Some(l) => format!(
                    "{}-{}-{}",
                    l.leader_id,
                    l.index,
                    tierkv::coding::crc32c(&data)
                ),
                None => format!("empty-{}", tierkv::coding::crc32c(&data)),
            };
            let meta = SnapshotMeta {
                last_log_id: applied.last_applied,
                last_membership: applied.membership,
                snapshot_id,
            };
            let subject = ErrorSubject::Snapshot(Some(meta.signature()));
            // A snapshot installed since openraft asked for this one may be
            // newer: keep it as the current one (this one is still returned
            // to openraft).
            let stored: Option<SnapshotMeta<NodeId, openraft::BasicNode>> =
                get_json(kv, subject.clone(), keys::SNAPSHOT_META)?;
            let newer_installed = matches!(&stored, Some(m) if m.last_log_id > meta.last_log_id);
            if !newer_installed {
                let previous: Option<ChunkSet> =
                    get_json(kv, subject.clone(), keys::SNAPSHOT_CHUNKS)?;
                let mut b = Batches::new(kv, subject.clone(), opts, None);
                let gen = st.next_gen;
                st.next_gen += 1;
                let chunks = write_chunks(&mut b, opts, gen, &data)?;
                b.write_alone(vec![
                    Op::Put(
                        keys::SNAPSHOT_META.to_vec(),
                        encode(subject.clone(), &meta)?,
                    ),
                    Op::Put(
                        keys::SNAPSHOT_CHUNKS.to_vec(),
                        encode(subject.clone(), &chunks)?,
                    ),
                ])?;
                if let Some(p) = previous {
                    delete_chunks(&mut b, &p)?;
                }
            }
            Ok(Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(data)),
            })
        })
    }
}
