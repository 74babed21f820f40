//! openraft's own storage test suite (`Suite::test_all`) over tierkv, for
//! `classic` (SSD WAL, synced writes) and PM designs (the PM WAL, the
//! region under /dev/shm), and the store's handling of corrupt values.

use std::sync::Arc;

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{RaftLogReader, StorageError};
use tierkv_raft::kv::{Backend, Kv, KvConfig, Op};
use tierkv_raft::store::{self, LogStore, StateMachine};
use tierkv_raft::{NodeId, TypeConfig};

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
