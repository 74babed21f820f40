//! The ordered key-value store under the Raft log and state machine: a
//! trait with a tierkv and a RocksDB implementation, so the bench compares
//! two clusters that differ only in the store.
//!
//! Concurrency contract: every method takes `&self` and may be called from
//! many threads; [`Kv::write`] applies its batch atomically; a
//! [`Kv::read_at_snapshot`] sees one consistent point in time.
//!
//! Errors are the store's own error text (`String`): the callers in
//! [`crate::store`] wrap them into openraft's `StorageError` with what was
//! being read or written.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Key-value pairs in key order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// What [`Kv::read_at_snapshot`] gives each pair to.
pub type Visit<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> Result<(), String>;

/// One write of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Set `key` to `value`.
    Put(Vec<u8>, Vec<u8>),
    /// Remove `key`.
    Delete(Vec<u8>),
}

/// An ordered, durable key-value store.
pub trait Kv: Send + Sync + 'static {
    /// A short name for reports (`tierkv:classic`, `rocksdb`).
    fn name(&self) -> String;
    /// The value of `key`, if any.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String>;
    /// Applies `ops` atomically; with `sync`, durable before it returns.
    fn write(&self, ops: Vec<Op>, sync: bool) -> Result<(), String>;
    /// Up to `limit` pairs with `lower <= key < upper`, in key order, or in
    /// reverse order with `reverse`.
    fn scan(
        &self,
        lower: &[u8],
        upper: &[u8],
        reverse: bool,
        limit: usize,
    ) -> Result<Pairs, String>;
    /// Reads `points` and every pair of `[lower, upper)` (given to `visit`
    /// in key order) at one consistent snapshot.
    fn read_at_snapshot(
        &self,
        points: &[&[u8]],
        lower: &[u8],
        upper: &[u8],
        visit: Visit<'_>,
    ) -> Result<Vec<Option<Vec<u8>>>, String>;
}

/// Which store backs a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// tierkv with this design (a preset name: classic, triangle, ...).
    Tierkv(tierkv::Preset),
    /// RocksDB (the `rocksdb` crate against librocksdb-dev), only with the
    /// `rocksdb` feature.
    Rocksdb,
}

impl Backend {
    /// Parses `rocksdb` or a tierkv preset name (optionally `tierkv:NAME`).
    pub fn parse(s: &str) -> Result<Backend, String> {
        if s == "rocksdb" {
            return Ok(Backend::Rocksdb);
        }
        let name = s.strip_prefix("tierkv:").unwrap_or(s);
        tierkv::Preset::from_name(name)
            .map(Backend::Tierkv)
            .ok_or_else(|| format!("unknown store {s:?}: rocksdb or a tierkv design (classic, triangle, matrix, vlsm, rangetab, nvcache, tlsm)"))
    }
}

/// Where and how to open a store.
#[derive(Debug, Clone)]
pub struct KvConfig {
    /// The store.
    pub backend: Backend,
    /// The database directory.
    pub dir: PathBuf,
    /// The PM directory of a tierkv PM design (e.g. under /dev/shm).
    pub pm_dir: Option<PathBuf>,
    /// The PM tier's size for a PM design.
    pub pm_size_bytes: u64,
    /// Memtable size (tierkv `memtable_size_bytes`, RocksDB
    /// `write_buffer_size`).
    pub memtable_size_bytes: usize,
}

impl KvConfig {
    /// A configuration with small defaults suited to tests and the
    /// cluster script: 64 MiB PM, 16 MiB memtables.
    pub fn new(backend: Backend, dir: impl AsRef<Path>) -> KvConfig {
        KvConfig {
            backend,
            dir: dir.as_ref().to_path_buf(),
            pm_dir: None,
            pm_size_bytes: 64 << 20,
            memtable_size_bytes: 16 << 20,
        }
    }

    /// The tierkv `Options` this configuration opens with.
    pub fn tierkv_options(&self, design: tierkv::Preset) -> tierkv::Options {
        let mut o = tierkv::Options {
            design,
            memtable_size_bytes: self.memtable_size_bytes,
            ..tierkv::Options::default()
        };
        if design.needs_pm() {
            o.pm_dir = self.pm_dir.clone();
            o.pm_size_bytes = self.pm_size_bytes;
            o.l1_size_bytes = o.l1_size_bytes.max(self.pm_size_bytes);
        }
        o
    }

    /// Opens the store.
    pub fn open(&self) -> Result<Arc<dyn Kv>, String> {
        match &self.backend {
            Backend::Tierkv(design) => {
                if design.needs_pm() && self.pm_dir.is_none() {
                    return Err(format!(
                        "design {} needs a PM directory (--pm-dir)",
                        design.name()
                    ));
                }
                let db = tierkv::Db::open(&self.dir, self.tierkv_options(*design))
                    .map_err(|e| format!("open tierkv {}: {e}", self.dir.display()))?;
                Ok(Arc::new(TierkvKv {
                    db,
                    design: *design,
                }))
            }
            #[cfg(feature = "rocksdb")]
            Backend::Rocksdb => Ok(Arc::new(rocks::RocksKv::open(
                &self.dir,
                self.memtable_size_bytes,
            )?)),
            #[cfg(not(feature = "rocksdb"))]
            Backend::Rocksdb => {
                Err("this tierkv-raft was built without the `rocksdb` feature".to_string())
            }
        }
    }
}

/// tierkv as a [`Kv`].
pub struct TierkvKv {
    db: tierkv::Db,
    design: tierkv::Preset,
}

impl TierkvKv {
    /// Wraps an open database.
    pub fn new(db: tierkv::Db, design: tierkv::Preset) -> TierkvKv {
        TierkvKv { db, design }
    }
}

impl Kv for TierkvKv {
    fn name(&self) -> String {
        format!("tierkv:{}", self.design.name())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        self.db.get(key).map_err(|e| e.to_string())
    }

    fn write(&self, ops: Vec<Op>, sync: bool) -> Result<(), String> {
        let mut batch = tierkv::WriteBatch::new();
        for op in &ops {
            match op {
                Op::Put(k, v) => batch.put(k, v),
                Op::Delete(k) => batch.delete(k),
            };
        }
        self.db
            .write(batch, &tierkv::WriteOptions { sync })
            .map_err(|e| e.to_string())
    }

    fn scan(
        &self,
        lower: &[u8],
        upper: &[u8],
        reverse: bool,
        limit: usize,
    ) -> Result<Pairs, String> {
        let range = self.db.range(lower..upper);
        let mut out = Vec::new();
        if reverse {
            for kv in range.rev().take(limit) {
                out.push(kv.map_err(|e| e.to_string())?);
            }
        } else {
            for kv in range.take(limit) {
                out.push(kv.map_err(|e| e.to_string())?);
            }
        }
        Ok(out)
    }

    fn read_at_snapshot(
        &self,
        points: &[&[u8]],
        lower: &[u8],
        upper: &[u8],
        visit: Visit<'_>,
    ) -> Result<Vec<Option<Vec<u8>>>, String> {
        let snapshot = self.db.snapshot();
        let opts = tierkv::ReadOptions {
            snapshot: Some(snapshot.clone()),
            ..Default::default()
        };
        let mut values = Vec::with_capacity(points.len());
        for p in points {
            values.push(self.db.get_with(p, &opts).map_err(|e| e.to_string())?);
        }
        for kv in self.db.range(lower..upper).at(&snapshot) {
            let (k, v) = kv.map_err(|e| e.to_string())?;
            visit(&k, &v)?;
        }
        Ok(values)
    }
}

#[cfg(feature = "rocksdb")]
mod rocks {
    //! RocksDB as a [`Kv`]: the bench's baseline. Writes the caller asks
    //! to be synced (the log, the vote, ...) use `WriteOptions::set_sync`.

    use super::{Kv, Op, Pairs, Visit};
    use std::path::Path;

    pub struct RocksKv {
        db: rocksdb::DB,
    }

    impl RocksKv {
        pub fn open(dir: &Path, memtable_size_bytes: usize) -> Result<RocksKv, String> {
            let mut o = rocksdb::Options::default();
            o.create_if_missing(true);
            o.set_write_buffer_size(memtable_size_bytes);
            let db = rocksdb::DB::open(&o, dir)
                .map_err(|e| format!("open rocksdb {}: {e}", dir.display()))?;
            Ok(RocksKv { db })
        }
    }

    impl Kv for RocksKv {
        fn name(&self) -> String {
            "rocksdb".to_string()
        }

        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
            self.db.get(key).map_err(|e| e.to_string())
        }

        fn write(&self, ops: Vec<Op>, sync: bool) -> Result<(), String> {
            let mut batch = rocksdb::WriteBatch::default();
            for op in ops {
                match op {
                    Op::Put(k, v) => batch.put(k, v),
                    Op::Delete(k) => batch.delete(k),
                }
            }
            let mut wo = rocksdb::WriteOptions::default();
            wo.set_sync(sync);
            self.db.write_opt(batch, &wo).map_err(|e| e.to_string())
        }

        fn scan(
            &self,
            lower: &[u8],
            upper: &[u8],
            reverse: bool,
            limit: usize,
        ) -> Result<Pairs, String> {
            let mut ro = rocksdb::ReadOptions::default();
            ro.set_iterate_lower_bound(lower.to_vec());
            ro.set_iterate_upper_bound(upper.to_vec());
            let mode = if reverse {
                rocksdb::IteratorMode::End
            } else {
                rocksdb::IteratorMode::Start
            };
            let mut out = Vec::new();
            for kv in self.db.iterator_opt(mode, ro).take(limit) {
                let (k, v) = kv.map_err(|e| e.to_string())?;
                out.push((k.to_vec(), v.to_vec()));
            }
            Ok(out)
        }

        fn read_at_snapshot(
            &self,
            points: &[&[u8]],
            lower: &[u8],
            upper: &[u8],
            visit: Visit<'_>,
        ) -> Result<Vec<Option<Vec<u8>>>, String> {
            let snapshot = self.db.snapshot();
            let mut values = Vec::with_capacity(points.len());
            for p in points {
                values.push(snapshot.get(p).map_err(|e| e.to_string())?);
            }
            let mut ro = rocksdb::ReadOptions::default();
            ro.set_iterate_lower_bound(lower.to_vec());
            ro.set_iterate_upper_bound(upper.to_vec());
            for kv in snapshot.iterator_opt(rocksdb::IteratorMode::Start, ro) {
                let (k, v) = kv.map_err(|e| e.to_string())?;
                visit(&k, &v)?;
            }
            Ok(values)
        }
    }
}
