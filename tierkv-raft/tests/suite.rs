//! openraft's own storage test suite (`Suite::test_all`) over tierkv, for
//! `classic` (SSD WAL, synced writes) and PM designs (the PM WAL, the
//! region under /dev/shm); the store's handling of corrupt values; and
//! snapshots many memtables large, installed in bounded batches, with a
//! crash after every batch of an install.

use std::sync::Arc;

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::RaftSnapshotBuilder;
use openraft::{RaftLogReader, StorageError};
use tierkv_raft::kv::{Backend, Kv, KvConfig, Op};
use tierkv_raft::store::{self, LogStore, StateMachine, StoreOptions};
use tierkv_raft::{NodeId, Request, TypeConfig};

/// Builds a fresh store per test case; the temp dirs live in the guard.
struct Builder {
    backend: Backend,
}

type Guard = (tempfile::TempDir, Option<tempfile::TempDir>);

fn open_kv(backend: &Backend) -> (Guard, Arc<dyn Kv>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let pm = match backend {
        Backend::Tierkv(p) if p.needs_pm() => {
            Some(tempfile::tempdir_in("/dev/shm").expect("shm tempdir"))
        }
        _ => None,
    };
    let mut cfg = KvConfig::new(backend.clone(), dir.path().join("db"));
    cfg.pm_dir = pm.as_ref().map(|p| p.path().to_path_buf());
    cfg.pm_size_bytes = 16 << 20;
    cfg.memtable_size_bytes = 1 << 20;
    let kv = cfg.open().expect("open store");
    ((dir, pm), kv)
}

impl StoreBuilder<TypeConfig, LogStore, StateMachine, Guard> for Builder {
    async fn build(&self) -> Result<(Guard, LogStore, StateMachine), StorageError<NodeId>> {
        let (guard, kv) = open_kv(&self.backend);
        let (log, sm) = store::open(kv)?;
        Ok((guard, log, sm))
    }
}

fn suite(backend: Backend) {
    Suite::test_all(Builder { backend }).expect("openraft storage suite");
}

#[test]
fn openraft_suite_classic() {
    suite(Backend::Tierkv(tierkv::Preset::Classic));
}

#[test]
fn openraft_suite_triangle() {
    suite(Backend::Tierkv(tierkv::Preset::Triangle));
}

#[test]
fn openraft_suite_matrix_rangetab() {
    for p in [tierkv::Preset::Matrix, tierkv::Preset::RangeTab] {
        suite(Backend::Tierkv(p));
    }
}

#[test]
fn openraft_suite_more_designs() {
    for p in [
        tierkv::Preset::Vlsm,
        tierkv::Preset::Tlsm,
        tierkv::Preset::NvCache,
    ] {
        suite(Backend::Tierkv(p));
    }
}

#[cfg(feature = "rocksdb")]
#[test]
fn openraft_suite_rocksdb() {
    suite(Backend::Rocksdb);
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A corrupt stored value is an error naming the key, never a panic or a
/// wrong answer: a log entry, the vote, the applied state and a snapshot.
#[test]
fn corrupt_values_are_errors_naming_the_key() {
    rt().block_on(async {
        let (_g, kv) = open_kv(&Backend::Tierkv(tierkv::Preset::Classic));
        kv.write(
            vec![
                Op::Put(store::keys::log(7).to_vec(), b"{not json".to_vec()),
                Op::Put(store::keys::VOTE.to_vec(), b"\xff\xfe".to_vec()),
            ],
            true,
        )
        .expect("write");
        let (mut log, _sm) = store::open(Arc::clone(&kv)).expect("open");
        let e = log
            .try_get_log_entries(0..10)
            .await
            .expect_err("corrupt entry");
        assert!(e.to_string().contains("log entry 7"), "{e}");
        let e = log.get_log_state().await.expect_err("corrupt last entry");
        assert!(e.to_string().contains("log entry 7"), "{e}");
        let e = log.read_vote().await.expect_err("corrupt vote");
        assert!(e.to_string().contains("M:vote"), "{e}");

        // An entry stored under the wrong index is caught too.
        let entry: openraft::Entry<TypeConfig> = openraft::Entry {
            log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 0), 3),
            payload: openraft::EntryPayload::Blank,
        };
        kv.write(
            vec![
                Op::Delete(store::keys::log(7).to_vec()),
                Op::Put(
                    store::keys::log(4).to_vec(),
                    serde_json::to_vec(&entry).expect("json"),
                ),
            ],
            true,
        )
        .expect("write");
        let e = log
            .try_get_log_entries(0..10)
            .await
            .expect_err("misplaced entry");
        assert!(e.to_string().contains("log entry 4"), "{e}");

        kv.write(
            vec![Op::Put(store::keys::APPLIED.to_vec(), b"[1,2".to_vec())],
            true,
        )
        .expect("write");
        let e = store::open(Arc::clone(&kv))
            .err()
            .expect("corrupt applied state");
        assert!(e.to_string().contains("S:applied"), "{e}");

        kv.write(
            vec![
                Op::Delete(store::keys::APPLIED.to_vec()),
                Op::Put(store::keys::SNAPSHOT_META.to_vec(), b"{}".to_vec()),
            ],
            true,
        )
        .expect("write");
        let (_l, mut sm) = store::open(Arc::clone(&kv)).expect("open");
        let e = sm
            .get_current_snapshot()
            .await
            .expect_err("corrupt snapshot meta");
        assert!(e.to_string().contains("S:snapshot-meta"), "{e}");
    });
}

/// A damaged or missing chunk of the current snapshot is an error naming
/// the chunk set or the chunk, never wrong data.
#[test]
fn corrupt_snapshot_chunk_is_an_error() {
    rt().block_on(async {
        let node = Node::new(16 << 10, 1 << 20);
        let (kv, _log, mut sm) = node.open(None);
        let keys: Vec<String> = (0..64).map(|i| format!("k{i:04}")).collect();
        apply_puts(&mut sm, 1, &keys, "v", 512).await;
        sm.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .expect("build");
        let chunks = kv.scan(b"C", b"D", false, usize::MAX).expect("scan chunks");
        assert!(chunks.len() > 4, "{} chunks", chunks.len());
        let (k, mut v) = chunks[2].clone();
        v[0] ^= 1;
        kv.write(vec![Op::Put(k.clone(), v)], true).expect("write");
        let e = sm.get_current_snapshot().await.expect_err("damaged chunk");
        assert!(e.to_string().contains("S:snapshot-chunks"), "{e}");
        kv.write(vec![Op::Delete(k)], true).expect("write");
        let e = sm.get_current_snapshot().await.expect_err("missing chunk");
        assert!(e.to_string().contains("lacks chunk 2"), "{e}");
    });
}

/// Snapshot data that fails its checksum or is cut short is refused by
/// `install_snapshot`, and the state is left as it was.
#[test]
fn corrupt_snapshot_is_refused() {
    assert!(store::snapshot_decode(b"").is_err());
    assert!(store::snapshot_decode(b"TKRS1\n\x05\x00\x00\x00ab\x00\x00\x00\x00").is_err());
    let mut ok = b"TKRS1\n".to_vec();
    let crc = crc32c_of(&ok);
    ok.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(store::snapshot_decode(&ok).expect("empty snapshot"), vec![]);
    let mut bad = ok.clone();
    bad[0] ^= 1;
    assert!(store::snapshot_decode(&bad).is_err());
}

/// A triangle store (PM WAL in /dev/shm) whose directories outlive its
/// openings, for reopen tests.
struct Node {
    cfg: KvConfig,
    opts: StoreOptions,
    _guard: Guard,
}

/// Memtables of the snapshot tests: a snapshot of several times this
/// cannot be one batch on a PM design.
const SMALL_MEMTABLE_BYTES: usize = 128 << 10;

impl Node {
    fn new(batch_bytes: usize, memtable_bytes: usize) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let pm = tempfile::tempdir_in("/dev/shm").expect("shm tempdir");
        let mut cfg = KvConfig::new(
            Backend::Tierkv(tierkv::Preset::Triangle),
            dir.path().join("db"),
        );
        cfg.pm_dir = Some(pm.path().to_path_buf());
        cfg.pm_size_bytes = 16 << 20;
        cfg.memtable_size_bytes = memtable_bytes;
        let opts = StoreOptions {
            batch_bytes,
            ..StoreOptions::default()
        };
        Node {
            cfg,
            opts,
            _guard: (dir, Some(pm)),
        }
    }

    /// A copy of this node's (closed) directories: the same store.
    fn copy(&self) -> Node {
        let node = Node::new(self.opts.batch_bytes, self.cfg.memtable_size_bytes);
        copy_dir(&self.cfg.dir, &node.cfg.dir);
        if let (Some(from), Some(to)) = (&self.cfg.pm_dir, &node.cfg.pm_dir) {
            std::fs::remove_dir_all(to).expect("rm pm dir");
            copy_dir(from, to);
        }
        node
    }

    fn open(&self, hook: Option<usize>) -> (Arc<dyn Kv>, LogStore, StateMachine) {
        let kv = self.cfg.open().expect("open store");
        let opts = StoreOptions {
            install_stop_after_batches: hook,
            ..self.opts.clone()
        };
        let (log, sm) = store::open_with(Arc::clone(&kv), opts).expect("open raft store");
        (kv, log, sm)
    }
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("dir entry");
        let dest = to.join(e.file_name());
        if e.file_type().expect("file type").is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).expect("copy");
        }
    }
}

fn put_entry(index: u64, key: String, value: String) -> openraft::Entry<TypeConfig> {
    openraft::Entry {
        log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 0), index),
        payload: openraft::EntryPayload::Normal(Request::Put { key, value }),
    }
}

/// Applies puts of `keys` (values of `value_bytes`), 16 entries an apply,
/// from log index `first`; returns the next index.
async fn apply_puts(
    sm: &mut StateMachine,
    first: u64,
    keys: &[String],
    tag: &str,
    value_bytes: usize,
) -> u64 {
    let mut index = first;
    for group in keys.chunks(16) {
        let entries: Vec<_> = group
            .iter()
            .map(|k| {
                let mut v = format!("{tag}:{k}:");
                while v.len() < value_bytes {
                    v.push((b'a' + (v.len() % 26) as u8) as char);
                }
                index += 1;
                put_entry(index - 1, k.clone(), v)
            })
            .collect();
        sm.apply(entries).await.expect("apply");
    }
    index
}

/// What a store serves: the applied log id and every user pair.
type Served = (Option<openraft::LogId<NodeId>>, tierkv_raft::kv::Pairs);

async fn served(kv: &dyn Kv, sm: &mut StateMachine) -> Served {
    let (applied, _) = sm.applied_state().await.expect("applied state");
    let pairs = store::scan_data(kv, b"", None, usize::MAX).expect("scan");
    (applied, pairs)
}

/// The generations of the chunk keys in the store.
fn chunk_gens(kv: &dyn Kv) -> Vec<u64> {
    let mut gens: Vec<u64> = kv
        .scan(b"C", b"D", false, usize::MAX)
        .expect("scan chunks")
        .iter()
        .filter_map(|(k, _)| store::keys::chunk_id(k).map(|(g, _)| g))
        .collect();
    gens.dedup();
    gens
}

/// A leader's state: 1 KiB values under `k0000..`, applied and
/// snapshotted; returns the snapshot and the pairs it holds.
fn source_snapshot(
    rt: &tokio::runtime::Runtime,
    n_keys: usize,
    batch_bytes: usize,
    memtable_bytes: usize,
) -> (openraft::storage::Snapshot<TypeConfig>, Served) {
    rt.block_on(async {
        let node = Node::new(batch_bytes, memtable_bytes);
        let (kv, _log, mut sm) = node.open(None);
        let keys: Vec<String> = (0..n_keys).map(|i| format!("k{i:04}")).collect();
        apply_puts(&mut sm, 1, &keys, "new", 1024).await;
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .expect("build snapshot");
        // The built snapshot is the current one, read back from its chunks.
        let cur = sm
            .get_current_snapshot()
            .await
            .expect("current snapshot")
            .expect("some snapshot");
        assert_eq!(cur.meta, snap.meta);
        assert_eq!(cur.snapshot.get_ref(), snap.snapshot.get_ref());
        assert_eq!(chunk_gens(&*kv).len(), 1);
        let s = served(&*kv, &mut sm).await;
        (snap, s)
    })
}

/// A follower's older state: some of the snapshot's keys with other
/// values, keys the snapshot lacks, and a snapshot of its own.
async fn old_state(sm: &mut StateMachine) {
    let keys: Vec<String> = (100..300)
        .map(|i| format!("k{i:04}"))
        .chain((0..100).map(|i| format!("z{i:04}")))
        .collect();
    apply_puts(sm, 1, &keys, "old", 200).await;
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("build the old snapshot");
}

/// A snapshot eight memtables large is built and installed on triangle
/// (whose engine refuses a batch larger than a memtable), replaces the old
/// state exactly (keys it lacks deleted) and survives a reopen.
#[test]
fn snapshot_many_memtables_large_installs_on_triangle() {
    let rt = rt();
    let batch_bytes = 32 << 10;
    let memtable_bytes = SMALL_MEMTABLE_BYTES;
    let (snap, want) = source_snapshot(&rt, 1024, batch_bytes, memtable_bytes);
    let len = snap.snapshot.get_ref().len();
    assert!(len > 8 * SMALL_MEMTABLE_BYTES, "snapshot of {len} bytes");
    rt.block_on(async {
        let node = Node::new(batch_bytes, memtable_bytes);
        {
            let (kv, _log, mut sm) = node.open(None);
            old_state(&mut sm).await;
            sm.install_snapshot(&snap.meta, Box::new((*snap.snapshot).clone()))
                .await
                .expect("install");
            assert_eq!(served(&*kv, &mut sm).await, want);
            assert_eq!(want.0, snap.meta.last_log_id);
            let cur = sm
                .get_current_snapshot()
                .await
                .expect("current")
                .expect("some");
            assert_eq!(cur.meta, snap.meta);
            assert_eq!(
                chunk_gens(&*kv).len(),
                1,
                "the old snapshot's chunks deleted"
            );
        }
        let (kv, _log, mut sm) = node.open(None);
        assert_eq!(served(&*kv, &mut sm).await, want);
        let cur = sm
            .get_current_snapshot()
            .await
            .expect("current")
            .expect("some");
        assert_eq!(cur.snapshot.get_ref(), snap.snapshot.get_ref());
        // And it builds a snapshot of the same pairs again.
        let again = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .expect("build after install");
        assert_eq!(again.snapshot.get_ref(), snap.snapshot.get_ref());
    });
}

/// An install stopped after every possible number of batches (as if the
/// process died there), then reopened, serves either the old state or the
/// new one, never a mix: before its marker the old state and its snapshot
/// stay; after it the install is finished on open.
#[test]
fn install_stopped_after_any_batch_reopens_old_or_new() {
    let rt = rt();
    let batch_bytes = 16 << 10;
    // Memtables larger than the snapshot here: this test is about where
    // an install stops, not about its size, and it installs 44 times.
    let memtable_bytes = 1 << 20;
    let (snap, want_new) = source_snapshot(&rt, 256, batch_bytes, memtable_bytes);
    let old = Node::new(batch_bytes, memtable_bytes);
    let (want_old, old_meta) = rt.block_on(async {
        let (kv, _log, mut sm) = old.open(None);
        old_state(&mut sm).await;
        let meta = sm
            .get_current_snapshot()
            .await
            .expect("cur")
            .expect("some")
            .meta;
        (served(&*kv, &mut sm).await, meta)
    });
    let (mut olds, mut news, mut mixed) = (0, 0, 0);
    let mut k = 0;
    loop {
        let done = rt.block_on(async {
            let node = old.copy();
            let done = {
                let (kv, _log, mut sm) = node.open(Some(k));
                let r = sm
                    .install_snapshot(&snap.meta, Box::new((*snap.snapshot).clone()))
                    .await;
                if r.is_err() {
                    let marker = kv.get(store::keys::INSTALLING).expect("get");
                    let pairs = store::scan_data(&*kv, b"", None, usize::MAX).expect("scan");
                    if marker.is_some() {
                        // The half-installed state is not served.
                        sm.applied_state()
                            .await
                            .expect_err("refused after a failed install");
                        if pairs != want_old.1 && pairs != want_new.1 {
                            mixed += 1;
                        }
                    } else {
                        // Before the marker, or after the batch that
                        // removed it (deleting the old chunks failed).
                        assert!(
                            pairs == want_old.1 || pairs == want_new.1,
                            "k={k}: a mix of states without the marker"
                        );
                    }
                }
                r.is_ok()
            };
            let (kv, _log, mut sm) = node.open(None);
            let got = served(&*kv, &mut sm).await;
            let cur = sm.get_current_snapshot().await.expect("cur").expect("some");
            if got == want_old {
                assert!(
                    news == 0,
                    "k={k}: old state after a later k gave the new one"
                );
                assert_eq!(&cur.meta, &old_meta, "k={k}");
                olds += 1;
            } else {
                assert_eq!(got, want_new, "k={k}: neither the old state nor the new");
                assert_eq!(cur.meta, snap.meta, "k={k}");
                assert_eq!(cur.snapshot.get_ref(), snap.snapshot.get_ref(), "k={k}");
                news += 1;
            }
            assert_eq!(kv.get(store::keys::INSTALLING).expect("get"), None);
            assert_eq!(chunk_gens(&*kv).len(), 1, "k={k}: garbage chunks left");
            done
        });
        if done {
            break;
        }
        k += 1;
        assert!(k < 1000, "the install never finished");
    }
    eprintln!("install of {k} batches: {olds} stops left the old state, {news} the new ({mixed} of them half applied before the reopen)");
    assert!(
        olds > 1 && news > 1 && mixed > 0,
        "olds {olds} news {news} mixed {mixed}"
    );
}

fn crc32c_of(b: &[u8]) -> u32 {
    // CRC-32C (Castagnoli), bitwise: the test does not depend on the crate.
    let mut crc = !0u32;
    for &x in b {
        crc ^= x as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// One `apply` of many entries over few keys, with batches of a few
/// entries each: every entry sees the writes before it — those still
/// pending in this call and those an earlier batch of it wrote — and the
/// store ends with the final value of each key.
#[test]
fn one_apply_over_many_batches_sees_its_own_writes() {
    let rt = rt();
    rt.block_on(async {
        let node = Node::new(64, SMALL_MEMTABLE_BYTES);
        let (kv, _log, mut sm) = node.open(None);
        let mut model: std::collections::BTreeMap<String, String> = Default::default();
        let (mut entries, mut want) = (Vec::new(), Vec::new());
        for i in 0..600u64 {
            let key = format!("k{}", i % 7);
            let value = format!("{i},");
            let req = match i % 5 {
                0 => Request::Put {
                    key: key.clone(),
                    value: value.clone(),
                },
                1 => Request::Delete { key: key.clone() },
                _ => Request::Append {
                    key: key.clone(),
                    value: value.clone(),
                },
            };
            let prev = match &req {
                Request::Put { .. } => model.insert(key, value),
                Request::Delete { .. } => model.remove(&key),
                Request::Append { .. } => {
                    let v = model.entry(key).or_default();
                    let prev = (!v.is_empty()).then(|| v.clone());
                    v.push_str(&value);
                    prev
                }
            };
            want.push(prev);
            entries.push(openraft::Entry {
                log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 0), i + 1),
                payload: openraft::EntryPayload::Normal(req),
            });
        }
        let responses = sm.apply(entries).await.expect("apply");
        let got: Vec<Option<String>> = responses.into_iter().map(|r| r.prev).collect();
        assert_eq!(got, want);
        let (applied, pairs) = served(&*kv, &mut sm).await;
        assert_eq!(applied.map(|l| l.index), Some(600));
        let pairs: Vec<(String, String)> = pairs
            .into_iter()
            .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
            .collect();
        assert_eq!(pairs, model.into_iter().collect::<Vec<_>>());
    });
}
