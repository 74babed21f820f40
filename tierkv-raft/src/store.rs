//! openraft's `RaftLogStorage` and `RaftStateMachine` on a [`Kv`] store.
//!
//! One store holds a node's log, its vote, its committed and purged log
//! ids, and its state machine (docs/format/raft.md has the layout):
//!
//! ```text
//!   key                      value (JSON unless noted)
//!   'L' be64(index)          Entry<TypeConfig>          the log, in index order
//!   "M:vote"                 Vote
//!   "M:committed"            Option<LogId>
//!   "M:purged"               LogId                      last purged log id
//!   "S:applied"              AppliedState               last applied + membership
//!   "S:snapshot-meta"        SnapshotMeta               the current snapshot ...
//!   "S:snapshot-data"        snapshot bytes (binary)    ... and its data
//!   'D' user-key             user value (raw bytes)     the state machine's data
//! ```
//!
//! Invariants, each kept by writing one atomic batch:
//! 1. The log is contiguous: `truncate` deletes every entry from an index
//!    to the end, `purge` every entry up to an index together with
//!    `M:purged`, so no crash leaves a gap.
//! 2. `S:applied` moves with the data it describes: `apply` writes the
//!    entries' effects and the new applied state in one batch;
//!    `install_snapshot` replaces all of `D` and `S:applied` in one batch.
//! 3. Durable before return: the vote, log appends (the flush callback is
//!    called after the synced write), truncate, purge and committed are
//!    written with `sync`. On a PM design every write is persisted anyway.
//!    State-machine writes are not synced: they follow the log in the same
//!    WAL, so a crash loses at most a suffix of applies, which openraft
//!    re-applies from the (synced) log.
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
    /// The current snapshot's data.
    pub const SNAPSHOT_DATA: &[u8] = b"S:snapshot-data";
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

/// Runs a blocking store call: on tokio's multi-threaded runtime the
/// worker hands its other tasks away first (a synced write blocks for an
/// fdatasync), elsewhere it just runs.
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
    blocking(|| kv.write(ops, sync)).map_err(|e| io_err(subject, ErrorVerb::Write, e))
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

/// Opens the log store and the state machine of one node over `kv`.
pub fn open(kv: Arc<dyn Kv>) -> Result<(LogStore, StateMachine), StorageError<NodeId>> {
    let sm = StateMachine::new(Arc::clone(&kv))?;
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
        let last = blocking(|| self.kv.scan(&lo, keys::LOG_END, true, 1))
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
        blocking(|| self.kv.scan(&lo, hi, false, usize::MAX))
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
    applied: AppliedState,
    /// Orders the writes of the current snapshot: openraft builds
    /// snapshots in a task of their own, beside `install_snapshot`.
    snapshot_lock: Arc<std::sync::Mutex<()>>,
}

impl StateMachine {
    fn new(kv: Arc<dyn Kv>) -> Result<StateMachine, StorageError<NodeId>> {
        let applied =
            get_json(&*kv, ErrorSubject::StateMachine, keys::APPLIED)?.unwrap_or_default();
        Ok(StateMachine {
            kv,
            applied,
            snapshot_lock: Arc::default(),
        })
    }

    /// The store (the server reads `D` keys through it after
    /// `ensure_linearizable`).
    pub fn kv(&self) -> Arc<dyn Kv> {
        Arc::clone(&self.kv)
    }
}

impl StateMachine {
    fn apply_entries<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>>,
    {
        let mut applied = self.applied.clone();
        let mut ops = Vec::new();
        let mut responses = Vec::new();
        // Values written earlier in this batch (reads must see them).
        let mut pending: std::collections::HashMap<Vec<u8>, Option<Vec<u8>>> = Default::default();
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
                        None => blocking(|| self.kv.get(&key)).map_err(|err| {
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
                    match &next {
                        Some(v) => ops.push(Op::Put(key.clone(), v.clone())),
                        None => ops.push(Op::Delete(key.clone())),
                    }
                    pending.insert(key, next);
                    responses.push(Response {
                        prev: prev.map(|p| String::from_utf8_lossy(&p).into_owned()),
                    });
                }
            }
        }
        if applied.last_applied == self.applied.last_applied {
            return Ok(responses);
        }
        ops.push(Op::Put(
            keys::APPLIED.to_vec(),
            encode(ErrorSubject::StateMachine, &applied)?,
        ));
        write(&*self.kv, ErrorSubject::StateMachine, ops, false)?;
        self.applied = applied;
        Ok(responses)
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
    let crc = crc32c::crc32c(&out);
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
    if crc32c::crc32c(body) != u32::from_le_bytes(c) {
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
            snapshot_lock: Arc::clone(&self.snapshot_lock),
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
        let data = snapshot.into_inner();
        let pairs =
            snapshot_decode(&data).map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
        // Replace the whole state in one batch: delete every D key, put the
        // snapshot's, and the applied state and current snapshot with them.
        let old = blocking(|| {
            self.kv
                .scan(&[keys::DATA], keys::DATA_END, false, usize::MAX)
        })
        .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
        let mut ops: Vec<Op> = old.into_iter().map(|(k, _)| Op::Delete(k)).collect();
        for (k, v) in pairs {
            ops.push(Op::Put(keys::data(&k), v));
        }
        let applied = AppliedState {
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
        };
        ops.push(Op::Put(
            keys::APPLIED.to_vec(),
            encode(subject.clone(), &applied)?,
        ));
        ops.push(Op::Put(
            keys::SNAPSHOT_META.to_vec(),
            encode(subject.clone(), meta)?,
        ));
        ops.push(Op::Put(keys::SNAPSHOT_DATA.to_vec(), data));
        let _order = self.snapshot_lock.lock().unwrap_or_else(|p| p.into_inner());
        write(&*self.kv, subject, ops, true)?;
        self.applied = applied;
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        current_snapshot(&*self.kv)
    }
}

fn current_snapshot(kv: &dyn Kv) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
    let subject = ErrorSubject::Snapshot(None);
    let mut data = None;
    let values = blocking(|| {
        kv.read_at_snapshot(
            &[keys::SNAPSHOT_META, keys::SNAPSHOT_DATA],
            b"",
            b"",
            &mut |_, _| Ok(()),
        )
    })
    .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
    let mut it = values.into_iter();
    let (meta, d) = (it.next().flatten(), it.next().flatten());
    let meta: SnapshotMeta<NodeId, openraft::BasicNode> = match meta {
        Some(m) => decode(subject.clone(), keys::SNAPSHOT_META, &m)?,
        None => return Ok(None),
    };
    if let Some(d) = d {
        data = Some(d);
    }
    let data = data.ok_or_else(|| {
        io_err(
            subject,
            ErrorVerb::Read,
            format!(
                "{} present without {}",
                show_key(keys::SNAPSHOT_META),
                show_key(keys::SNAPSHOT_DATA)
            ),
        )
    })?;
    Ok(Some(Snapshot {
        meta,
        snapshot: Box::new(Cursor::new(data)),
    }))
}

/// Builds a snapshot from one consistent read of the store: the applied
/// state and every `D` pair at the same point in time.
pub struct SnapshotBuilder {
    kv: Arc<dyn Kv>,
    snapshot_lock: Arc<std::sync::Mutex<()>>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let subject = ErrorSubject::Snapshot(None);
        let mut out = SNAPSHOT_MAGIC.to_vec();
        let values = blocking(|| {
            self.kv.read_at_snapshot(
                &[keys::APPLIED],
                &[keys::DATA],
                keys::DATA_END,
                &mut |k, v| {
                    snapshot_encode_pair(&mut out, &k[1..], v);
                    Ok(())
                },
            )
        })
        .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
        let applied: AppliedState = match values.into_iter().next().flatten() {
            Some(v) => decode(subject.clone(), keys::APPLIED, &v)?,
            None => AppliedState::default(),
        };
        let data = snapshot_finish(out);
        let snapshot_id = match applied.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id, l.index, crc32c::crc32c(&data)),
            None => format!("empty-{}", crc32c::crc32c(&data)),
        };
        let meta = SnapshotMeta {
            last_log_id: applied.last_applied,
            last_membership: applied.membership,
            snapshot_id,
        };
        let subject = ErrorSubject::Snapshot(Some(meta.signature()));
        let ops = vec![
            Op::Put(
                keys::SNAPSHOT_META.to_vec(),
                encode(subject.clone(), &meta)?,
            ),
            Op::Put(keys::SNAPSHOT_DATA.to_vec(), data.clone()),
        ];
        // A snapshot installed while this one was built is newer: keep it
        // as the current one (this one is still returned to openraft).
        let _order = self.snapshot_lock.lock().unwrap_or_else(|p| p.into_inner());
        let stored: Option<SnapshotMeta<NodeId, openraft::BasicNode>> =
            get_json(&*self.kv, subject.clone(), keys::SNAPSHOT_META)?;
        let newer_installed = matches!(&stored, Some(m) if m.last_log_id > meta.last_log_id);
        if !newer_installed {
            write(&*self.kv, subject, ops, true)?;
        }
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}
