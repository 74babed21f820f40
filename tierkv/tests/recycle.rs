//! Obsolete table files kept for new tables to be written over
//! (`Options::recycle_table_files`, version/recycle.rs), on the real file
//! system: new tables are written over kept files and every read stays
//! right; a checkpoint's hard-linked tables are never written over; kept
//! files are gone after `close`, and a crash's leftovers after the next
//! open.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tierkv::{Db, Options};

fn options() -> Options {
    Options {
        // Room for every obsolete table of a compaction: the checkpoint's
        // tables are among them.
        recycle_table_files: 256,
        memtable_size_bytes: 128 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 256 << 10,
        ..Options::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{:06}", (i * 7919) % 3000).into_bytes()
}

fn value(round: u64, i: u64) -> Vec<u8> {
    format!("round {round} entry {i} ").repeat(8).into_bytes()
}

/// Writes round `round` of overwrites into `db` and `model`.
fn write_round(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, round: u64) {
    for i in 0..3000 {
        let (k, v) = (key(i), value(round, i));
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "key {k:?}");
    }
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.prefix(b"").map(|kv| kv.unwrap()).collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert!(all == want, "a scan differs from the model");
}

/// The names in `dir` ending in `suffix`.
fn files(dir: &Path, suffix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect()
}

fn kept_files(dir: &Path) -> Vec<String> {
    files(dir, ".recycle")
}

fn counter(db: &Db, name: &str) -> u64 {
    let p = db.property("tierkv.recycled-tables").unwrap();
    p.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap()
}

#[test]
fn new_tables_are_written_over_kept_files_and_reads_stay_right() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    Db::open(&dir, options()).unwrap().close().unwrap();
    // A crash's leftover: removed at open.
    std::fs::write(dir.join("000999.recycle"), b"old table bytes").unwrap();

    let db = Db::open(&dir, options()).unwrap();
    assert!(
        kept_files(&dir).is_empty(),
        "the leftover is removed at open"
    );
    let mut model = BTreeMap::new();
    for round in 0..3 {
        write_round(&db, &mut model, round);
    }
    db.compact_range(None, None).unwrap();

    // A checkpoint shares the live tables by hard links; the compactions
    // that follow make them obsolete here, and they must not be written
    // over.
    let copy_dir = tmp.path().join("copy");
    db.checkpoint(&copy_dir).unwrap();
    let copy_model = model.clone();

    for round in 3..8 {
        write_round(&db, &mut model, round);
    }
    db.compact_range(None, None).unwrap();
    assert!(
        counter(&db, "reused") > 0,
        "no table was written over a kept file"
    );
    check(&db, &model);
    // Every table the checkpoint shared is obsolete here by now: the
    // database let go of its name instead of keeping the file (which
    // would still be linked, under a kept name or a new table's).
    for name in files(&copy_dir, ".sst") {
        let links = std::fs::metadata(copy_dir.join(&name)).unwrap().nlink();
        assert_eq!(links, 1, "the checkpoint's {name} is still linked");
    }
    db.close().unwrap();
    assert!(kept_files(&dir).is_empty(), "close removes the kept files");

    let db = Db::open(&dir, options()).unwrap();
    check(&db, &model);
    db.close().unwrap();
    let copy = Db::open(&copy_dir, options()).unwrap();
    check(&copy, &copy_model);
    copy.close().unwrap();
}

#[test]
fn no_file_is_kept_when_recycling_is_off() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        recycle_table_files: 0,
        ..options()
    };
    let db = Db::open(tmp.path(), opts).unwrap();
    let mut model = BTreeMap::new();
    for round in 0..4 {
        write_round(&db, &mut model, round);
    }
    db.compact_range(None, None).unwrap();
    assert_eq!(counter(&db, "reused"), 0);
    assert!(kept_files(tmp.path()).is_empty());
    check(&db, &model);
    db.close().unwrap();
}
