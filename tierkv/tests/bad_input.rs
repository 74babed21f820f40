//! Bad input from callers and the environment: invalid options, a directory
//! that is not a database, a locked database, a full disk during flush and
//! during compaction. Each gets a clear error and loses nothing.

use std::path::PathBuf;
use std::sync::Arc;

use tierkv::storage::fault::{FaultFs, FaultRule, Op};
use tierkv::storage::mem::MemFs;
use tierkv::storage::{FileSystem, WriteHint};
use tierkv::{Db, Error, Options, Preset, WriteBatch, WriteOptions};

fn dir() -> PathBuf {
    PathBuf::from("/db")
}

fn small(fs: Arc<dyn FileSystem>) -> Options {
    Options {
        fs,
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 256 << 10,
        l0_compaction_trigger: 2,
        block_size_bytes: 1024,
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    format!("v{i}").repeat(40).into_bytes()
}

fn invalid(o: Options, option: &str) {
    match Db::open(dir(), o) {
        Err(Error::InvalidOptions(m)) => {
            assert!(m.contains(option), "message `{m}` must name `{option}`")
        }
        Err(e) => panic!("expected InvalidOptions naming {option}, got {e}"),
        Ok(_) => panic!("options with a bad `{option}` were accepted"),
    }
}

#[test]
fn invalid_options_are_refused_naming_the_option() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let base = || small(Arc::clone(&fs));
    invalid(
        Options {
            memtable_size_bytes: 10,
            ..base()
        },
        "memtable_size_bytes",
    );
    invalid(
        Options {
            memtable_count_max: 1,
            ..base()
        },
        "memtable_count_max",
    );
    for ratio in [-0.1, 0.5, f64::NAN] {
        invalid(
            Options {
                memtable_filter_ratio: ratio,
                ..base()
            },
            "memtable_filter_ratio",
        );
    }
    invalid(
        Options {
            sst_size_bytes: 1,
            ..base()
        },
        "sst_size_bytes",
    );
    invalid(
        Options {
            l1_size_bytes: 1,
            ..base()
        },
        "l1_size_bytes",
    );
    invalid(
        Options {
            level_size_multiplier: 1,
            ..base()
        },
        "level_size_multiplier",
    );
    invalid(
        Options {
            level_count: 1,
            ..base()
        },
        "level_count",
    );
    invalid(
        Options {
            l0_stop_trigger: 1,
            ..base()
        },
        "l0_stop_trigger",
    );
    invalid(
        Options {
            background_threads: 0,
            ..base()
        },
        "background_threads",
    );
    invalid(
        Options {
            background_nice: 20,
            ..base()
        },
        "background_nice",
    );
    invalid(
        Options {
            compaction_sched_idle: true,
            background_threads: 1,
            ..base()
        },
        "compaction_sched_idle",
    );
    invalid(
        Options {
            adaptive_compaction_priority: true,
            background_threads: 1,
            ..base()
        },
        "adaptive_compaction_priority",
    );
    invalid(
        Options {
            adaptive_compaction_priority: true,
            compaction_sched_idle: true,
            ..base()
        },
        "adaptive_compaction_priority",
    );
    invalid(
        Options {
            block_size_bytes: 3,
            ..base()
        },
        "block_size_bytes",
    );
    invalid(
        Options {
            bloom_bits_per_key: 1000,
            ..base()
        },
        "bloom_bits_per_key",
    );
    invalid(
        Options {
            wal: Some(tierkv::WalPlacement::Pm),
            ..base()
        },
        "pm_dir",
    );
    invalid(
        Options {
            pm_dir: Some("/dev/shm/x".into()),
            pm_size_bytes: 1,
            ..base()
        },
        "pm_size_bytes",
    );
    // A design that keeps L0 in PM, without PM, says so.
    invalid(
        Options {
            design: Preset::Triangle,
            ..base()
        },
        "pm_dir",
    );
}

#[test]
fn a_directory_that_is_not_a_database_is_refused() {
    let fs = MemFs::new();
    fs.create_dir_all(&dir()).expect("mkdir");
    let mut f = fs
        .create(&dir().join("notes.txt"), WriteHint::default())
        .expect("create");
    f.append(b"hello").expect("append");
    f.sync().expect("sync");
    match Db::open(dir(), small(Arc::new(fs.clone()))) {
        Err(Error::NotADatabase(m)) => assert!(m.contains("notes.txt"), "{m}"),
        Err(e) => panic!("expected NotADatabase, got {e}"),
        Ok(_) => panic!("opened a directory that is not a database"),
    }
    // The foreign file is untouched.
    assert_eq!(
        fs.read_all(&dir().join("notes.txt")).expect("read"),
        b"hello"
    );
    // create_if_missing = false on an empty directory.
    let empty = MemFs::new();
    let o = Options {
        create_if_missing: false,
        ..small(Arc::new(empty))
    };
    assert!(matches!(Db::open(dir(), o), Err(Error::NotADatabase(_))));
}

#[test]
fn a_locked_database_is_refused_until_closed() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let db = Db::open(dir(), small(Arc::clone(&fs))).expect("open");
    db.put(b"k", b"v").expect("put");
    match Db::open(dir(), small(Arc::clone(&fs))) {
        Err(Error::Locked(_)) => {}
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("a second opener got in"),
    }
    db.close().expect("close");
    let db = Db::open(dir(), small(fs)).expect("reopen after close");
    assert_eq!(db.get(b"k").expect("get"), Some(b"v".to_vec()));
}

#[test]
fn a_second_process_is_locked_out_of_a_real_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let o = || Options {
        ..Options::default()
    };
    let db = Db::open(tmp.path(), o()).expect("open");
    assert!(matches!(Db::open(tmp.path(), o()), Err(Error::Locked(_))));
    drop(db);
    Db::open(tmp.path(), o()).expect("reopen");
}

#[test]
fn invalid_keys_and_values_are_refused() {
    let db = Db::open(dir(), small(Arc::new(MemFs::new()))).expect("open");
    let big_key = vec![b'k'; 70 << 10];
    assert!(matches!(
        db.put(&big_key, b"v"),
        Err(Error::InvalidArgument(_))
    ));
    // The database is unharmed.
    db.put(b"k", b"v").expect("put");
    assert_eq!(db.get(b"k").expect("get"), Some(b"v".to_vec()));
}

/// Writes until a write fails (or `limit` writes); returns how many were
/// acknowledged.
fn write_until_error(db: &Db, start: u32, limit: u32) -> (u32, Option<Error>) {
    for i in start..start + limit {
        let mut b = WriteBatch::new();
        b.put(&key(i), &value(i));
        if let Err(e) = db.write(b, &WriteOptions { sync: true }) {
            return (i, Some(e));
        }
    }
    (start + limit, None)
}

#[test]
fn no_space_during_flush_fails_writes_and_loses_nothing() {
    let mem = MemFs::new();
    let faulty = FaultFs::new(Arc::new(mem.clone()));
    let db = Db::open(dir(), small(Arc::new(faulty.clone()))).expect("open");
    let (n, e) = write_until_error(&db, 0, 200);
    assert!(e.is_none());
    // Every SST append now fails with ENOSPC: the next flush fails.
    faulty.add_rule(
        FaultRule::new(Op::Append)
            .path_suffix(".sst")
            .always()
            .no_space(),
    );
    let (acked, e) = write_until_error(&db, n, 20_000);
    let e = e.expect("writes must eventually fail when flushes cannot write");
    assert!(
        matches!(e, Error::Background(ref m) if m.contains("No space") || m.contains("space")),
        "unexpected error: {e}"
    );
    // Reads still work.
    assert_eq!(db.get(&key(0)).expect("get"), Some(value(0)));
    drop(db);
    faulty.clear_rules();
    let db = Db::open(dir(), small(Arc::new(faulty))).expect("reopen");
    for i in 0..acked {
        assert_eq!(
            db.get(&key(i)).expect("get"),
            Some(value(i)),
            "acknowledged key {i} lost"
        );
    }
}

#[test]
fn no_space_during_compaction_fails_it_and_loses_nothing() {
    let mem = MemFs::new();
    let faulty = FaultFs::new(Arc::new(mem.clone()));
    let o = || Options {
        l0_compaction_trigger: 100, // no automatic compaction
        l0_slowdown_trigger: 200,
        l0_stop_trigger: 300,
        ..small(Arc::new(faulty.clone()))
    };
    let db = Db::open(dir(), o()).expect("open");
    let mut acked = 0;
    for _ in 0..4 {
        let (n, e) = write_until_error(&db, acked, 300);
        assert!(e.is_none());
        acked = n;
        db.flush().expect("flush");
    }
    faulty.set_capacity_bytes(Some(faulty.used_bytes() + (32 << 10)));
    let e = db
        .compact_range(None, None)
        .expect_err("compaction must fail");
    assert!(e.is_no_space(), "expected ENOSPC, got {e}");
    for i in 0..acked {
        assert_eq!(db.get(&key(i)).expect("get"), Some(value(i)));
    }
    drop(db);
    faulty.set_capacity_bytes(None);
    let db = Db::open(dir(), o()).expect("reopen");
    for i in 0..acked {
        assert_eq!(
            db.get(&key(i)).expect("get"),
            Some(value(i)),
            "key {i} lost"
        );
    }
    db.compact_range(None, None).expect("compaction with space");
    for i in 0..acked {
        assert_eq!(
            db.get(&key(i)).expect("get"),
            Some(value(i)),
            "key {i} lost"
        );
    }
}

#[test]
fn no_space_in_background_compaction_stops_writes_and_loses_nothing() {
    let mem = MemFs::new();
    let faulty = FaultFs::new(Arc::new(mem.clone()));
    let db = Db::open(dir(), small(Arc::new(faulty.clone()))).expect("open");
    // Flushes write L0 files; compactions write into L1 and below. Fail
    // only outputs once several exist, by capacity.
    let (n, _) = write_until_error(&db, 0, 500);
    faulty.set_capacity_bytes(Some(faulty.used_bytes() + (256 << 10)));
    let (acked, e) = write_until_error(&db, n, 50_000);
    assert!(e.is_some(), "a full disk must fail writes eventually");
    drop(db);
    faulty.set_capacity_bytes(None);
    let db = Db::open(dir(), small(Arc::new(faulty))).expect("reopen");
    for i in 0..acked {
        assert_eq!(
            db.get(&key(i)).expect("get"),
            Some(value(i)),
            "acknowledged key {i} lost"
        );
    }
}
