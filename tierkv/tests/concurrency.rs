//! Several writers and readers at once, with snapshots, while flushes and
//! compactions run: batches are atomic, snapshots are stable, and the final
//! state is exactly what the writers wrote.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use tierkv::storage::mem::MemFs;
use tierkv::{Db, Options, ReadOptions, WriteBatch, WriteOptions};

const WRITERS: u32 = 4;
const ROUNDS: u32 = 1500;

fn pair_keys(w: u32, slot: u32) -> (Vec<u8>, Vec<u8>) {
    (
        format!("a-{w}-{slot:03}").into_bytes(),
        format!("b-{w}-{slot:03}").into_bytes(),
    )
}

fn db() -> Db {
    let o = Options {
        background_threads: 3,
        ..churn_options(Arc::new(MemFs::new()))
    };
    Db::open(PathBuf::from("/db"), o).expect("open")
}

#[test]
fn writers_and_readers_with_snapshots_during_background_work() {
    let db = Arc::new(db());
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let db = Arc::clone(&db);
        writers.push(thread::spawn(move || {
            for round in 0..ROUNDS {
                // Each batch writes the same value to a pair of keys.
                let slot = round % 50;
                let (a, b) = pair_keys(w, slot);
                let v = format!("{w}:{round}:").repeat(20).into_bytes();
                let mut batch = WriteBatch::new();
                batch.put(&a, &v).put(&b, &v);
                db.write(
                    batch,
                    &WriteOptions {
                        sync: round % 100 == 0,
                    },
                )
                .expect("write");
                if round % 7 == 0 {
                    db.delete(format!("c-{w}-{round}").as_bytes())
                        .expect("delete");
                }
            }
        }));
    }
    let mut readers = Vec::new();
    for r in 0..3u32 {
        let db = Arc::clone(&db);
        let stop = Arc::clone(&stop);
        readers.push(thread::spawn(move || {
            let mut checks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let snap = db.snapshot();
                let opts = ReadOptions {
                    snapshot: Some(snap.clone()),
                    ..Default::default()
                };
                // Atomic batches: both keys of a pair agree at a snapshot.
                let w = r % WRITERS;
                for slot in (0..50).step_by(7) {
                    let (a, b) = pair_keys(w, slot);
                    let va = db.get_with(&a, &opts).expect("get a");
                    let vb = db.get_with(&b, &opts).expect("get b");
                    assert_eq!(va, vb, "batch torn at snapshot {}", snap.seqno());
                    // Stable: the same read again at the same snapshot.
                    assert_eq!(db.get_with(&a, &opts).expect("get a again"), va);
                }
                // A scan at the snapshot sees the pairs agree too.
                let mut it = db
                    .iter(ReadOptions {
                        snapshot: Some(snap.clone()),
                        lower_bound: Some(b"a-".to_vec()),
                        upper_bound: Some(b"a-~".to_vec()),
                        ..Default::default()
                    })
                    .expect("iter");
                it.seek_to_first();
                while it.valid() {
                    let b_key = [b"b", &it.key()[1..]].concat();
                    let vb = db.get_with(&b_key, &opts).expect("get pair");
                    assert_eq!(vb.as_deref(), Some(it.value()), "scan/get disagree");
                    it.next();
                }
                it.status().expect("scan");
                checks += 1;
            }
            checks
        }));
    }
    for h in writers {
        h.join().expect("writer");
    }
    stop.store(true, Ordering::Relaxed);
    for h in readers {
        assert!(h.join().expect("reader") > 0);
    }
    // Final state: the last round's value of every pair.
    db.flush().expect("flush");
    for w in 0..WRITERS {
        for slot in 0..50 {
            let last_round = (0..ROUNDS).filter(|r| r % 50 == slot).max().expect("round");
            let v = format!("{w}:{last_round}:").repeat(20).into_bytes();
            let (a, b) = pair_keys(w, slot);
            assert_eq!(db.get(&a).expect("get"), Some(v.clone()));
            assert_eq!(db.get(&b).expect("get"), Some(v));
        }
    }
    let s = db.stats();
    assert!(!s.flushes.is_empty(), "flushes ran");
    assert!(!s.compactions.is_empty(), "compactions ran");
}

/// The soak: writers and readers with snapshots and iterators against each
/// other for `TIERKV_SOAK_SECS` seconds (default 2) per design of
/// `TIERKV_SOAK_DESIGNS` (comma-separated; default `classic,triangle`), on
/// a real directory (and a PM tier under /dev/shm for the PM designs),
/// while flushes and compactions run. Checks: batches atomic at every
/// snapshot, a snapshot's reads stable, snapshots never go back in time
/// (what a writer wrote is seen at its newest round or a later one), scans
/// in order and consistent with gets, and at the end the exact final state,
/// also after a reopen. The campaign at scale (`scripts/campaigns.sh`)
/// runs 600 s per design.
#[test]
fn soak_readers_and_writers() {
    let secs: u64 = std::env::var("TIERKV_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let designs =
        std::env::var("TIERKV_SOAK_DESIGNS").unwrap_or_else(|_| "classic,triangle".into());
    for name in designs.split(',').filter(|n| !n.is_empty()) {
        let design = tierkv::Preset::from_name(name).unwrap_or_else(|| panic!("no design {name}"));
        soak(design, std::time::Duration::from_secs(secs));
    }
}

fn round_of(v: &[u8]) -> u64 {
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.split(':').nth(1))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("malformed value {:?}", String::from_utf8_lossy(v)))
}

fn soak(design: tierkv::Preset, duration: std::time::Duration) {
    use std::sync::atomic::AtomicU64;
    const SLOTS: u32 = 64;
    let tmp = tempfile::tempdir().expect("tempdir");
    let pm_tmp = design
        .needs_pm()
        .then(|| tempfile::tempdir_in("/dev/shm").expect("shm tempdir"));
    let options = || {
        let mut o = Options {
            design,
            memtable_size_bytes: 128 << 10,
            sst_size_bytes: 128 << 10,
            l1_size_bytes: 512 << 10,
            l0_compaction_trigger: 2,
            block_size_bytes: 1024,
            background_threads: 3,
            ..Options::default()
        };
        if let Some(p) = &pm_tmp {
            o.pm_dir = Some(p.path().to_path_buf());
            o.pm_size_bytes = 32 << 20;
            o.l1_size_bytes = 4 << 20;
            o.pm_container_limit_bytes = 2 << 20;
        }
        o
    };
    let dir = tmp.path().join("db");
    let db = Arc::new(Db::open(&dir, options()).expect("open"));
    let stop = Arc::new(AtomicBool::new(false));
    let batches = Arc::new(AtomicU64::new(0));
    let deadline = std::time::Instant::now() + duration;
    let mut writers = Vec::new();
    for w in 0..3u32 {
        let (db, stop, batches) = (Arc::clone(&db), Arc::clone(&stop), Arc::clone(&batches));
        writers.push(thread::spawn(move || {
            // The last round written to each slot.
            let mut last = vec![None::<u64>; SLOTS as usize];
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let slot = (round * 7 + u64::from(w)) % u64::from(SLOTS);
                let (a, b) = pair_keys(w, slot as u32);
                let mut batch = WriteBatch::new();
                if round % 13 == 12 {
                    batch.delete(&a).delete(&b);
                    last[slot as usize] = None;
                } else {
                    let v = format!("{w}:{round}:").repeat(1 + (round % 30) as usize);
                    batch.put(&a, v.as_bytes()).put(&b, v.as_bytes());
                    last[slot as usize] = Some(round);
                }
                db.write(
                    batch,
                    &WriteOptions {
                        sync: round.is_multiple_of(50),
                    },
                )
                .expect("write");
                batches.fetch_add(1, Ordering::Relaxed);
                round += 1;
            }
            last
        }));
    }
    let mut readers = Vec::new();
    for r in 0..3u32 {
        let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
        readers.push(thread::spawn(move || {
            let (mut reads, mut scans) = (0u64, 0u64);
            // Per writer and slot: the newest round a snapshot showed.
            let mut seen = vec![vec![0u64; SLOTS as usize]; 3];
            while !stop.load(Ordering::Relaxed) {
                let snap = db.snapshot();
                let opts = ReadOptions {
                    snapshot: Some(snap.clone()),
                    ..Default::default()
                };
                for w in 0..3u32 {
                    for slot in (r..SLOTS).step_by(5) {
                        let (a, b) = pair_keys(w, slot);
                        let va = db.get_with(&a, &opts).expect("get a");
                        let vb = db.get_with(&b, &opts).expect("get b");
                        assert_eq!(va, vb, "batch torn at snapshot {}", snap.seqno());
                        assert_eq!(db.get_with(&a, &opts).expect("again"), va, "unstable");
                        if let Some(v) = va {
                            let round = round_of(&v);
                            let s = &mut seen[w as usize][slot as usize];
                            assert!(round >= *s, "a later snapshot went back in time");
                            *s = round;
                        }
                        reads += 2;
                    }
                }
                // A scan of one writer's pairs, forward or backward.
                let w = (scans % 3) as u32;
                let mut it = db
                    .iter(ReadOptions {
                        snapshot: Some(snap.clone()),
                        lower_bound: Some(format!("a-{w}-").into_bytes()),
                        upper_bound: Some(format!("a-{w}.").into_bytes()),
                        ..Default::default()
                    })
                    .expect("iter");
                let reverse = scans % 2 == 1;
                if reverse {
                    it.seek_to_last();
                } else {
                    it.seek_to_first();
                }
                let mut prev: Option<Vec<u8>> = None;
                while it.valid() {
                    let k = it.key().to_vec();
                    if let Some(p) = &prev {
                        assert!(if reverse { &k < p } else { &k > p }, "scan out of order");
                    }
                    let b_key = [b"b", &k[1..]].concat();
                    let vb = db.get_with(&b_key, &opts).expect("get pair");
                    assert_eq!(vb.as_deref(), Some(it.value()), "scan and get disagree");
                    prev = Some(k);
                    if reverse {
                        it.prev();
                    } else {
                        it.next();
                    }
                }
                it.status().expect("scan");
                scans += 1;
            }
            (reads, scans)
        }));
    }
    while std::time::Instant::now() < deadline {
        thread::sleep(std::time::Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let lasts: Vec<Vec<Option<u64>>> = writers
        .into_iter()
        .map(|h| h.join().expect("writer"))
        .collect();
    let (mut reads, mut scans) = (0, 0);
    for h in readers {
        let (r, s) = h.join().expect("reader");
        assert!(s > 0, "a reader never finished a scan");
        reads += r;
        scans += s;
    }
    let check = |db: &Db, what: &str| {
        for (w, last) in lasts.iter().enumerate() {
            for (slot, round) in last.iter().enumerate() {
                let (a, b) = pair_keys(w as u32, slot as u32);
                let want = round.map(|r| {
                    format!("{w}:{r}:")
                        .repeat(1 + (r % 30) as usize)
                        .into_bytes()
                });
                assert_eq!(db.get(&a).expect("get"), want, "{what}: final state");
                assert_eq!(db.get(&b).expect("get"), want, "{what}: final state");
            }
        }
    };
    check(&db, "before reopen");
    let db = Arc::try_unwrap(db).unwrap_or_else(|_| panic!("readers still hold the db"));
    let s = db.stats();
    db.close().expect("close");
    let db = Db::open(&dir, options()).expect("reopen");
    check(&db, "after reopen");
    eprintln!(
        "SUMMARY soak {design}: {} s, {} batches by 3 writers, {reads} snapshot reads and {scans} iterator scans by 3 readers, {} flushes, {} compactions; every check passed",
        duration.as_secs(),
        batches.load(Ordering::Relaxed),
        s.flushes.len(),
        s.compactions.len()
    );
}

/// A file system that names the thread of every SST removal.
/// A file system that records each SST removal: the removing thread's
/// name and the file's.
struct RemovalWitness {
    inner: MemFs,
    removals: std::sync::Mutex<Vec<(String, String)>>,
}

impl RemovalWitness {
    fn new() -> Arc<RemovalWitness> {
        Arc::new(RemovalWitness {
            inner: MemFs::new(),
            removals: std::sync::Mutex::new(Vec::new()),
        })
    }

    fn take_removals(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.removals.lock().expect("removals"))
    }
}

/// Small tables and an eager L0 trigger: compactions replace tables often.
fn churn_options(fs: Arc<dyn tierkv::storage::FileSystem>) -> Options {
    Options {
        fs,
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 256 << 10,
        l0_compaction_trigger: 2,
        block_size_bytes: 1024,
        background_threads: 2,
        ..Options::default()
    }
}

impl tierkv::storage::FileSystem for RemovalWitness {
    fn create(
        &self,
        path: &std::path::Path,
        hint: tierkv::storage::WriteHint,
    ) -> tierkv::Result<Box<dyn tierkv::storage::WritableFile>> {
        self.inner.create(path, hint)
    }
    fn open(
        &self,
        path: &std::path::Path,
    ) -> tierkv::Result<Arc<dyn tierkv::storage::RandomAccessFile>> {
        self.inner.open(path)
    }
    fn read_all(&self, path: &std::path::Path) -> tierkv::Result<Vec<u8>> {
        self.inner.read_all(path)
    }
    fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> tierkv::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &std::path::Path) -> tierkv::Result<()> {
        if path.extension().is_some_and(|e| e == "sst") {
            let thread = thread::current().name().unwrap_or("?").to_string();
            let file = path.file_name().unwrap_or_default();
            let file = file.to_string_lossy().into_owned();
            self.removals.lock().expect("removals").push((thread, file));
        }
        self.inner.remove(path)
    }
    fn exists(&self, path: &std::path::Path) -> bool {
        self.inner.exists(path)
    }
    fn list(&self, dir: &std::path::Path) -> tierkv::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &std::path::Path) -> tierkv::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &std::path::Path) -> tierkv::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn file_size(&self, path: &std::path::Path) -> tierkv::Result<u64> {
        self.inner.file_size(path)
    }
    fn lock(&self, path: &std::path::Path) -> tierkv::Result<Box<dyn tierkv::storage::FileLock>> {
        self.inner.lock(path)
    }
    fn free_space(&self, dir: &std::path::Path) -> tierkv::Result<u64> {
        self.inner.free_space(dir)
    }
}

/// No flush or compaction thread unlinks the SST files compactions made
/// obsolete: the unlinks take tens of milliseconds per file on a real disk
/// (ext4 with `discard` waits for the discard), and neither a flush the
/// memtables wait for (stalls of 0.4-0.8 s at `medium` when the flush
/// thread took them) nor the next merge (2.3 s of a 23 s `rangetab` fill)
/// may queue behind them. The deleter thread (`tierkv-rm`) does.
#[test]
fn obsolete_files_are_unlinked_by_the_deleter_thread() {
    let fs = RemovalWitness::new();
    let db = Db::open(PathBuf::from("/db"), churn_options(fs.clone())).expect("open");
    let value = vec![7u8; 1000];
    for round in 0..4u32 {
        for i in 0..2000u32 {
            let k = format!("k{:06}", (i * 7919 + round) % 5000);
            db.put(k.as_bytes(), &value).expect("put");
        }
        // Idle time for both threads: the flush thread's idle loop used to
        // take the obsolete list.
        thread::sleep(std::time::Duration::from_millis(300));
    }
    db.close().expect("close");
    {
        let removals = fs.removals.lock().expect("removals");
        assert!(!removals.is_empty(), "no compaction removed a table");
        assert!(
            removals.iter().all(|(t, _)| t == "tierkv-rm"),
            "a thread other than the deleter removed SST files: {removals:?}"
        );
    }
    // `close` returned after every queued unlink: the next open finds no
    // unreferenced table on disk to remove.
    let list = || {
        let mut l = tierkv::storage::FileSystem::list(&fs.inner, std::path::Path::new("/db"))
            .expect("list");
        l.retain(|n| n.ends_with(".sst"));
        l.sort();
        l
    };
    let before = list();
    reopen_and_close(&fs);
    // (The reopen may add a table: the log's replay.)
    let after = list();
    let gone: Vec<_> = before.iter().filter(|n| !after.contains(n)).collect();
    assert!(gone.is_empty(), "close left unreferenced tables: {gone:?}");
}

/// Opens the database in `fs` with default options and closes it.
fn reopen_and_close(fs: &Arc<RemovalWitness>) {
    let o = Options {
        fs: fs.clone(),
        ..Options::default()
    };
    Db::open(PathBuf::from("/db"), o)
        .expect("reopen")
        .close()
        .expect("close");
}

/// An open replays the manifest's whole history, whose edits deleted every
/// table a compaction ever replaced. It removes the files of those tables
/// still on disk (a crash between an edit and its unlinks leaves them), and
/// attempts nothing for the rest: before, a reopen tried one unlink per
/// table the database had ever deleted (some 500 in this test).
#[test]
fn reopen_removes_leftover_tables_only() {
    let fs = RemovalWitness::new();
    let db = Db::open(PathBuf::from("/db"), churn_options(fs.clone())).expect("open");
    let value = vec![7u8; 1000];
    for i in 0..6000u32 {
        let k = format!("k{:06}", (i * 7919) % 5000);
        db.put(k.as_bytes(), &value).expect("put");
    }
    db.close().expect("close");
    let deleted = fs.take_removals();
    assert!(deleted.len() >= 10, "too little history: {deleted:?}");
    // A table a recorded edit deleted whose file a crash left behind.
    let leftover = deleted[0].1.clone();
    {
        use tierkv::storage::FileSystem;
        let path = std::path::Path::new("/db").join(&leftover);
        let mut f = fs.inner.create(&path, Default::default()).expect("create");
        f.append(b"a table a crash left behind").expect("append");
        f.sync().expect("sync");
    }
    reopen_and_close(&fs);
    let at_open: Vec<String> = fs
        .take_removals()
        .into_iter()
        .filter(|(thread, _)| thread != "tierkv-rm")
        .map(|(_, file)| file)
        .collect();
    assert_eq!(at_open, vec![leftover], "the open removed other tables");
}
