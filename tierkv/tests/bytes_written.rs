//! Bytes written, truthfully: the stats' bytes per tier and cause (WAL,
//! flush, compaction, MANIFEST, PM relinks and allocator metadata) add up
//! exactly to what the storage layer saw written — every byte appended to
//! a file of each kind and every byte stored into the PM region — for the
//! SSD baseline and both PM container designs, through flushes, side
//! compactions and leveled compactions.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use tierkv::storage::mem::MemFs;
use tierkv::storage::sim::SimRegion;
use tierkv::storage::{
    FileLock, FileSystem, Persistence, PmRegion, RandomAccessFile, WritableFile, WriteHint,
};
use tierkv::{Db, Options, Preset, Result};

/// Bytes appended, by kind of file (`sst`, `log`, `manifest`, `other`).
#[derive(Clone, Default)]
struct Appended(Arc<Mutex<HashMap<&'static str, u64>>>);

impl Appended {
    fn kind(path: &Path) -> &'static str {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".sst") {
            "sst"
        } else if name.ends_with(".log") {
            "log"
        } else if name.starts_with("MANIFEST") {
            "manifest"
        } else {
            "other"
        }
    }
    fn get(&self, kind: &str) -> u64 {
        self.0.lock().get(kind).copied().unwrap_or(0)
    }
}

struct CountingFs {
    inner: MemFs,
    appended: Appended,
}

struct CountingFile {
    inner: Box<dyn WritableFile>,
    kind: &'static str,
    appended: Appended,
}

impl WritableFile for CountingFile {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        *self.appended.0.lock().entry(self.kind).or_insert(0) += data.len() as u64;
        self.inner.append(data)
    }
    fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }
    fn sync(&mut self) -> Result<()> {
        self.inner.sync()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

impl FileSystem for CountingFs {
    fn create(&self, path: &Path, hint: WriteHint) -> Result<Box<dyn WritableFile>> {
        Ok(Box::new(CountingFile {
            inner: self.inner.create(path, hint)?,
            kind: Appended::kind(path),
            appended: self.appended.clone(),
        }))
    }
    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        self.inner.open(path)
    }
    fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        self.inner.read_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.inner.remove(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.inner.sync_dir(dir)
    }
    fn file_size(&self, path: &Path) -> Result<u64> {
        self.inner.file_size(path)
    }
    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        self.inner.lock(path)
    }
    fn free_space(&self, dir: &Path) -> Result<u64> {
        self.inner.free_space(dir)
    }
}

/// A simulated region counting every byte stored into it.
struct CountingRegion {
    inner: SimRegion,
    stored: AtomicU64,
}

impl PmRegion for CountingRegion {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.stored.fetch_add(data.len() as u64, Ordering::Relaxed);
        self.inner.write(offset, data)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(offset, buf)
    }
    fn slice(&self, offset: u64, len: usize) -> Result<&[u8]> {
        self.inner.slice(offset, len)
    }
    fn persist(&self, offset: u64, len: usize) -> Result<()> {
        self.inner.persist(offset, len)
    }
    fn fence(&self) {
        self.inner.fence()
    }
    fn persistence(&self) -> Persistence {
        self.inner.persistence()
    }
    fn store_u64(&self, offset: u64, value: u64) -> Result<()> {
        self.stored.fetch_add(8, Ordering::Relaxed);
        self.inner.store_u64(offset, value)
    }
    fn load_u64(&self, offset: u64) -> Result<u64> {
        self.inner.load_u64(offset)
    }
}

/// Writes ~8 memtables of overwrites, then compacts everything, and
/// compares the stats with the device counts once the engine is idle.
fn check(design: Preset) {
    check_with(design, |_| {});
}

fn check_with(design: Preset, tweak: impl FnOnce(&mut Options)) -> tierkv::stats::Stats {
    let appended = Appended::default();
    let fs = CountingFs {
        inner: MemFs::new(),
        appended: appended.clone(),
    };
    let region = Arc::new(CountingRegion {
        inner: SimRegion::new(8 << 20),
        stored: AtomicU64::new(0),
    });
    let mut o = Options {
        design,
        fs: Arc::new(fs),
        memtable_size_bytes: 128 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 256 << 10,
        ..Options::default()
    };
    if design.needs_pm() {
        let r: Arc<dyn PmRegion> = region.clone();
        o.pm_region = Some(r);
        o.pm_size_bytes = 8 << 20;
        o.pm_container_limit_bytes = 512 << 10;
    }
    tweak(&mut o);
    let db = Db::open("/db", o).unwrap();
    for round in 0..4u32 {
        for i in 0..1200u32 {
            let k = format!("key{:05}", (i * 7919 + round) % 3000);
            db.put(k.as_bytes(), &[round as u8; 200]).unwrap();
        }
    }
    db.compact_range(None, None).unwrap();

    // Wait until neither the stats nor the devices move any more.
    let sample = || {
        let s = db.stats();
        let devices = (
            appended.get("sst"),
            appended.get("log"),
            appended.get("manifest"),
            region.stored.load(Ordering::Relaxed),
        );
        (s, devices)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (stats, devices) = loop {
        let (a, da) = sample();
        std::thread::sleep(Duration::from_millis(300));
        let (b, db_) = sample();
        if da == db_ && a.written == b.written {
            break (b, db_);
        }
        assert!(
            Instant::now() < deadline,
            "{design}: the engine never went idle"
        );
    };
    let w = &stats.written;
    let (sst, log, manifest, pm) = devices;
    assert!(
        sst > 0 || design == Preset::Tlsm,
        "{design}: some tables reached SSD"
    );
    assert_eq!(
        w.flush_ssd + w.compaction_ssd.iter().sum::<u64>(),
        sst,
        "{design}: SST bytes: flush {} + compaction {:?}",
        w.flush_ssd,
        w.compaction_ssd
    );
    assert_eq!(w.wal_ssd, log, "{design}: SSD WAL bytes");
    assert_eq!(w.manifest, manifest, "{design}: MANIFEST bytes");
    assert_eq!(
        w.pm_total(),
        if design.needs_pm() { pm } else { 0 },
        "{design}: PM bytes: {w:?}"
    );
    if design == Preset::Tlsm {
        assert!(w.flush_pm > 0 && w.wal_pm > 0 && w.pm_metadata > 0, "{w:?}");
    } else if design.needs_pm() {
        assert!(w.flush_pm > 0 && w.wal_pm > 0 && w.pm_metadata > 0, "{w:?}");
        let sides = stats
            .compactions
            .iter()
            .filter(|c| c.kind == "right-angle" || c.kind == "column")
            .count();
        assert!(sides > 0, "{design}: no side ran: {:?}", stats.compactions);
    }
    db.close().unwrap();
    stats
}

#[test]
fn classic_bytes_match_the_devices() {
    check(Preset::Classic);
}

#[test]
fn triangle_bytes_match_the_devices() {
    check(Preset::Triangle);
}

#[test]
fn matrix_bytes_match_the_devices() {
    check(Preset::Matrix);
}

/// TLSM: byte-addressable compaction between PM levels stores only nodes,
/// headers and directories — relinked bytes — and copies no key or value
/// (compaction PM data bytes stay 0); PS copies, and says so.
#[test]
fn tlsm_bytes_match_the_devices_and_links_copy_nothing() {
    use tierkv::options::TlsmVariant;
    for variant in [TlsmVariant::Full, TlsmVariant::PsBac, TlsmVariant::Ps] {
        let s = check_with(Preset::Tlsm, |o| o.tlsm.variant = variant);
        let w = &s.written;
        let kinds: Vec<&str> = s.compactions.iter().map(|c| c.kind.as_str()).collect();
        if variant == TlsmVariant::Ps {
            assert!(kinds.contains(&"tlsm-copy"), "{kinds:?}");
            assert!(w.compaction_pm > 0, "{variant:?}: {w:?}");
        } else {
            assert!(kinds.contains(&"tlsm-link"), "{kinds:?}");
            assert_eq!(
                w.compaction_pm, 0,
                "{variant:?}: byte-addressable compaction copied data: {w:?}"
            );
            assert!(w.pm_relinked > 0, "{variant:?}: {w:?}");
        }
    }
}
