//! Options: everything a user can set, validated at [`crate::Db::open`].
//!
//! Defaults follow RocksDB's (64 MB memtables, 2 of them, 64 MB SSTs, L1 of
//! 256 MB growing ×10, L0 triggers 4/20/36, 2 background jobs), so the
//! `classic` design is a like-for-like stand-in for RocksDB.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::sst::Compression;
use crate::storage::posix::PosixFs;
pub use crate::storage::PmBackend;
use crate::storage::{FileSystem, PmRegion};

/// The design presets of DESIGN.md §4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Preset {
    /// RocksDB-style leveled LSM on SSD (the baseline).
    Classic,
    /// MatrixKV: L0 in a PM matrix container, column compaction.
    Matrix,
    /// TriangleKV: L0 in a PM triangle container, right-angle side compaction.
    Triangle,
    /// RangeKV: L0 as key-range RangeTabs in PM.
    RangeTab,
    /// NV-Cache: upper levels as NVTables in PM.
    NvCache,
    /// TLSM: persistent skip lists on the PM levels.
    Tlsm,
    /// vLSM: small SSTs, FIFO L0, overlap-aware vSSTs on SSD.
    Vlsm,
}

impl Preset {
    /// Every preset, in DESIGN.md order.
    pub const ALL: [Preset; 7] = [
        Preset::Classic,
        Preset::Matrix,
        Preset::Triangle,
        Preset::RangeTab,
        Preset::NvCache,
        Preset::Tlsm,
        Preset::Vlsm,
    ];

    /// The preset's name as used in configs (`tierkv:<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Preset::Classic => "classic",
            Preset::Matrix => "matrix",
            Preset::Triangle => "triangle",
            Preset::RangeTab => "rangetab",
            Preset::NvCache => "nvcache",
            Preset::Tlsm => "tlsm",
            Preset::Vlsm => "vlsm",
        }
    }

    /// Parses a preset name.
    pub fn from_name(s: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.name() == s)
    }

    /// True if the design keeps tables in the PM tier (and so needs one).
    pub fn needs_pm(self) -> bool {
        !matches!(self, Preset::Classic | Preset::Vlsm)
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the write-ahead log lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalPlacement {
    /// In the PM region: every write is persisted before it is acknowledged.
    Pm,
    /// In a file on the SSD directory: durable on `sync=true` writes.
    Ssd,
}

/// How recovery treats damage inside an SSD WAL (the PM WAL and the
/// MANIFEST are synced record by record, so only their tail can tear).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalRecovery {
    /// A damaged record followed by nothing valid is a torn tail (dropped);
    /// one followed by valid records of the log is body corruption and the
    /// open fails with `Error::Corruption` naming the file and offset.
    /// Right when the disk writes back in order, and it never hides damage.
    TornTail,
    /// The log ends at its first damaged record, whatever follows (RocksDB's
    /// `kPointInTimeRecovery`): what a power loss can leave when a file
    /// system writes the unsynced pages of a log back out of order — a hole
    /// with records after it. Those records were never synced (a sync
    /// write syncs every earlier log first), so dropping them keeps the
    /// recovered state a prefix of the writes.
    PointInTime,
}

/// NV-Cache: how a list compaction treats the KV lists of the nodes it
/// moves (design/nvcache/mod.rs, "Readings").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvRelink {
    /// The paper's: every moved node's `next`/`prev` words are rewritten to
    /// the output's list order (16 bytes and a persist per node, reported
    /// as PM relinked bytes).
    Links,
    /// Only the outputs' offset arrays are written: nothing reads the links
    /// of a completed NVTable.
    ArrayOnly,
}

/// NV-Cache: how the write path publishes the nodes of a committed group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvAppend {
    /// Pre-linked nodes, one persist of the group, one 8-byte publish.
    Group,
    /// The paper's transaction per insert: each node persisted and
    /// published on its own (two persists per entry).
    PerEntry,
}

/// Every option of the engine. Build with `Options::default()` and change fields.
#[derive(Clone)]
pub struct Options {
    /// The design preset.
    pub design: Preset,
    /// Create the database if the directory has none.
    pub create_if_missing: bool,
    /// Refuse to open an existing database.
    pub error_if_exists: bool,

    /// Directory of the PM tier (e.g. under /dev/shm, or a DAX mount); `None`
    /// runs on SSD alone.
    pub pm_dir: Option<PathBuf>,
    /// Size of the PM region in bytes.
    pub pm_size_bytes: u64,
    /// How the PM region is mapped.
    pub pm_backend: PmBackend,
    /// Where the WAL lives; `None` = on PM when a PM tier exists, else SSD.
    pub wal: Option<WalPlacement>,
    /// How recovery treats a damaged record inside an SSD WAL. In either
    /// mode, WALs after one that ended damaged are not replayed (they hold
    /// no synced write, and replaying them would leave a hole).
    pub wal_recovery: WalRecovery,

    /// Bytes a memtable holds before it becomes immutable (`write_buffer_size`).
    /// A design with a PM tier flushes memtables into PM whole and sizes
    /// its PM for this much: there a memtable switches before a write that
    /// would grow it past this size, and a write batch larger than it is
    /// refused (`Error::InvalidArgument`).
    pub memtable_size_bytes: usize,
    /// Memtables in DRAM at most, mutable one included (`max_write_buffer_number`).
    pub memtable_count_max: usize,
    /// Share of `memtable_size_bytes` given to each DRAM memtable's key
    /// filter, a bloom filter over its user keys that lets a point read
    /// skip a memtable without the key (RocksDB's
    /// `memtable_prefix_bloom_size_ratio` with whole-key filtering, which
    /// RocksDB leaves off). 0 = no filter; at most 0.25. Default 1/64: 1 MiB
    /// for a 64 MiB memtable, at least 13 bits per key (module doc of
    /// `memtable`).
    pub memtable_filter_ratio: f64,
    /// Target SST size (`target_file_size_base`).
    pub sst_size_bytes: u64,
    /// Target size of L1 (`max_bytes_for_level_base`; `vlsm` ignores it:
    /// its L1 is `vlsm_growth_factor` × `sst_size_bytes`).
    pub l1_size_bytes: u64,
    /// Growth factor between levels below L1 (`max_bytes_for_level_multiplier`).
    pub level_size_multiplier: u64,
    /// Number of levels, L0 included.
    pub level_count: usize,
    /// L0 files that trigger an L0→L1 compaction (the three L0 triggers
    /// are RocksDB's; `vlsm` uses `vlsm_l0_max_ssts` instead).
    pub l0_compaction_trigger: usize,
    /// L0 files at which writes are slowed down.
    pub l0_slowdown_trigger: usize,
    /// L0 files at which writes stop.
    pub l0_stop_trigger: usize,
    /// Estimated pending compaction bytes at which writes slow down.
    pub pending_compaction_bytes_soft: u64,
    /// Estimated pending compaction bytes at which writes stop.
    pub pending_compaction_bytes_hard: u64,
    /// Write rate allowed while slowed down (`delayed_write_rate`).
    pub delayed_write_rate_bytes_per_sec: u64,
    /// Pace writers to the rate background work frees room (memtables, the
    /// design's flush target or L0), with short per-write delays, before
    /// room runs out (db/control.rs). Off: writers run at full speed until
    /// the design stops them (the designs' triggers stay the backstop
    /// either way).
    pub write_pacing: bool,
    /// Background threads for flushes and compactions (`max_background_jobs`).
    pub background_threads: usize,
    /// Threads one merge may use (RocksDB's `max_subcompactions`): into
    /// the SSD levels, and `tlsm`'s merges between PM levels (link or
    /// copy) too. A merge whose inputs hold at least two
    /// output tables' worth of bytes is cut by key into up to this many
    /// parts of about equal bytes, merged side by side, their outputs
    /// listed in one edit. 0 (the default) = `background_threads`: with
    /// one flush thread and one compaction thread, the second core that
    /// the flush thread leaves idle between flushes does merge work
    /// (RocksDB's default is 1). 1: every merge on its own thread only.
    pub max_subcompactions: usize,
    /// Niceness added to the background threads (and the threads they
    /// start: subcompactions, collectors, side merges), 0..=19; 0 (the
    /// default, as RocksDB's) leaves them at the process's priority.
    /// RocksDB's `Env::LowerThreadPoolCPUPriority`: background work then
    /// gets the cores foreground threads leave idle first. On the 2-core
    /// development machine (Linux 6.18) it did not measurably shorten the
    /// waits of a woken writer for a core (`perf sched timehist` of a
    /// `medium` fill: 2.3-2.7 s of scheduling delay after paced pauses at
    /// 0 and at 10 alike), hence off by default. Linux only; elsewhere
    /// ignored.
    pub background_nice: i32,
    /// Run the background threads (and the threads they start) under
    /// Linux's `SCHED_IDLE` policy: RocksDB's `CpuPriority::kIdle`
    /// (`Env::LowerThreadPoolCPUPriority`). A foreground thread woken
    /// while every core runs background work then preempts it at once
    /// instead of waiting for the scheduler's next tick (4 ms at
    /// `HZ=250`): in a `medium` `triangle` fill on 2 cores the writer's
    /// waits for a core longer than 3 ms after a paced pause fell from 273
    /// to 16 (`perf sched timehist`). The price is RocksDB's: background
    /// work runs only on cores the foreground leaves idle, so foreground
    /// threads that keep every core busy (many readers) starve compaction
    /// and writers are paced down to what it still drains. Off by default,
    /// as in RocksDB. Linux only; elsewhere ignored.
    pub background_sched_idle: bool,
    /// Run only the compaction threads (and the subcompaction threads they
    /// start) under `SCHED_IDLE`, the flush thread at its normal priority:
    /// RocksDB's `LowerThreadPoolCPUPriority(Env::LOW, CpuPriority::kIdle)`,
    /// which lowers the compaction pool and leaves the flush pool alone.
    /// A flush then no longer shares the cores with a long L0 → L1 merge
    /// while writers fill the next memtable (a `classic` `medium` fill
    /// stopped 0.47–0.56 s on a full memtable while its 64 MiB flush ran
    /// beside a 1.7 GB merge on both cores). Needs two or more background
    /// threads (one thread both flushes and compacts: refused at open).
    /// Off by default. Linux only; elsewhere ignored.
    pub compaction_sched_idle: bool,
    /// Run the compaction threads (and the threads they start for a job)
    /// under `SCHED_IDLE` while background work has room to spare, and at
    /// normal priority while it has not: the write path, every 10 ms
    /// while writes come, compares the rate the pacer allows with the
    /// rate writes were admitted at over the last second and switches the
    /// threads ([`crate::sched`]) to normal priority when the allowance is
    /// under 2× the writes (or writes are delayed or stopped), back under
    /// `SCHED_IDLE` when it is over 3× or no write has come for a second.
    /// A woken writer or reader then
    /// preempts compaction at once instead of waiting for the scheduler's
    /// next tick, while compaction still gets its fair share of the CPU
    /// whenever writers would otherwise run into the pacer (unlike
    /// `compaction_sched_idle`, which can starve it). Needs two or more
    /// background threads, excludes `background_sched_idle` and
    /// `compaction_sched_idle`, and needs the right to leave `SCHED_IDLE`
    /// (`CAP_SYS_NICE` or `RLIMIT_NICE` ≥ 20: systemd's `LimitNICE=`):
    /// refused at open otherwise. Off by default. Linux only; elsewhere
    /// ignored.
    pub adaptive_compaction_priority: bool,
    /// Limit compaction's writes into the SSD levels while foreground
    /// reads queue behind them, tuned to those reads' latency
    /// ([`crate::storage::limiter`]: halved per 100 ms window with a read
    /// over 1 ms, never below 8 MiB/s, lifted after fast windows). On by
    /// default: a point read that misses the page cache waits behind
    /// compaction writes otherwise (README "Reads"). Flushes are never
    /// limited.
    pub background_io_autotune: bool,
    /// Block cache budget in bytes: the blocks' buffers, charged by their
    /// capacity. Up to 1/32 more is kept in buffers of evicted blocks for
    /// the next misses to read into ([`crate::sst::cache`]).
    pub block_cache_bytes: usize,
    /// Uncompressed data block size.
    pub block_size_bytes: usize,
    /// Bloom filter bits per key (0 disables filters).
    pub bloom_bits_per_key: usize,
    /// Write flush and compaction output with O_DIRECT.
    pub use_direct_io_for_flush_and_compaction: bool,
    /// Start the write-back of flush and compaction output every this many
    /// bytes (RocksDB's `bytes_per_sync`; Linux `sync_file_range`), so that
    /// the `fdatasync` that ends each table finds little left to write and
    /// the device is kept busy while the merge runs; 0: the kernel writes
    /// back when it sees fit. Buffered I/O only. Default 1 MiB, ours: the
    /// value RocksDB's tuning guide recommends (its own default is 0;
    /// Pebble's is 512 KiB). Without it each table's whole length is
    /// written back at its closing `fdatasync`, which a merge waits for:
    /// 4 KiB fills at the RangeKV paper's setup ran 1.2x faster with it
    /// under `rangetab` and 1.4-1.5x under `classic` (README, "The paper's
    /// figures"; RocksDB unchanged). The bench passes its own flag
    /// (db_bench's, default 0) to every engine alike.
    pub bytes_per_sync: u64,
    /// The same for a WAL on the SSD tier (RocksDB's `wal_bytes_per_sync`):
    /// start the write-back of every this many appended bytes, so that a
    /// synced write or a WAL switch finds little left to write. 0 (the
    /// default): never. A WAL on PM persists per record and ignores it.
    pub wal_bytes_per_sync: u64,
    /// Obsolete SST files kept to be written over by new tables, as
    /// RocksDB's `recycle_log_file_num` keeps WAL files (0: every obsolete
    /// table is unlinked). Default 8, ours. Writing a table over an old
    /// file costs the kernel less than a new file (no new page-cache pages,
    /// blocks or inode): `triangle`'s `medium` fill ran faster in three of
    /// three alternated pairs (+5-19%) with 5-13% less CPU a put;
    /// `classic`'s within the noise (README, "Recycled table files"). Kept
    /// files hold at most this many tables' bytes of disk, only while the
    /// device has 64 times a file's size free; `close` removes them, as
    /// does the next open after a crash. A file another name links (a
    /// checkpoint's hard link) is never kept (version/recycle.rs).
    pub recycle_table_files: usize,
    /// Verify block checksums on every read (always on for metadata).
    pub verify_checksums: bool,
    /// Compression of the data blocks of SSTs written to every level
    /// (RocksDB's `compression`): `None` (the default, as the benchmarks
    /// measure), `Lz4` or `Zstd` (docs/format/sst.md). A block is kept
    /// compressed only if that saves 1/8 of it. Tables written before a
    /// change keep their blocks; every table is readable whatever the
    /// setting.
    pub compression: Compression,
    /// Per-level compression (RocksDB's `compression_per_level`): entry
    /// `i` for SSTs written to level `i`, levels beyond the list take its
    /// last entry; empty (the default) = `compression` everywhere. At most
    /// `level_count` entries. E.g. `[None, None, Lz4]`: L0 and L1 plain,
    /// L2 and below LZ4 (RocksDB's usual advice: no compression where data
    /// is rewritten soon).
    pub compression_per_level: Vec<Compression>,

    /// PM container designs (`triangle`, `matrix`): search the rows of the
    /// container with cross-row hints (forward pointers). Off = binary
    /// search every row (to measure what the hints give).
    pub pm_hints: bool,
    /// PM container designs: threads that gather a compaction's victims
    /// from the rows (0 = min(8, `background_threads`)).
    pub pm_collector_threads: usize,
    /// PM container designs: container bytes at which L0→L1 compaction
    /// starts (0 = 60% of the PM left after two WALs and two flushed rows:
    /// the paper's 60% of PM at its scale, and room for flushes above the
    /// limit on a small PM tier).
    pub pm_container_limit_bytes: u64,
    /// Cut L1 compaction output into overlap-aware vSSTs (vLSM §4.2): a
    /// table of L1 closes at `sst_size_bytes / vlsm_growth_factor` when it
    /// overlaps more than `vlsm_growth_factor` × its size of L2, and grows up
    /// to `sst_size_bytes` while it does not. Any design's L1 output honours
    /// it (e.g. `classic` or `triangle` + vSSTs). `None`: the design's
    /// default (on for `vlsm`, off for the others).
    pub vsst: Option<bool>,
    /// vLSM's growth factor f: L1 = f × `sst_size_bytes`, L(n+1) = f × Ln
    /// below L2, and the overlap bound of vSSTs (in any design).
    pub vlsm_growth_factor: u64,
    /// vLSM's growth factor Φ between L1 and L2 (the paper's default, 32),
    /// larger than f so that small SSTs do not add levels.
    pub vlsm_phi: u64,
    /// vLSM: L0 is a FIFO queue of at most this many SSTs; when it is full,
    /// flushes wait for the oldest L0 SST to be compacted into L1. The
    /// paper only says "a predefined max number of SSTs, similar to
    /// RocksDB"; the default 32 holds 256 MB of 8 MB SSTs — RocksDB's L0 at
    /// its compaction trigger (4 memtables of 64 MB), i.e. 4 flushes of
    /// range-partitioned SSTs, so a point read meets about 4 of them.
    pub vlsm_l0_max_ssts: usize,
    /// vLSM: an L0 → L1 compaction takes the oldest L0 SST and, up to this
    /// many SSTs in all, the newer L0 SSTs that lie inside the key range of
    /// the L1 tables it rewrites anyway (and under which no older L0 SST is
    /// left behind). 1 (the default) is the paper's single-SST compaction;
    /// more trades a wider L0 → L1 step (at most this many SSTs plus the
    /// same L1 tables — still one key range, never all of L0) for fewer
    /// rewrites of L1 per flushed byte.
    pub vlsm_l0_batch_ssts: usize,
    /// vLSM: L1's target size; `None` (the default) is the paper's
    /// f × `sst_size_bytes`. L2 is Φ × this.
    pub vlsm_l1_size_bytes: Option<u64>,
    /// TLSM (`tlsm`): tiering policy, ablation variant, persist order and
    /// sizes of the persistent skip lists ([`TlsmOptions`]).
    pub tlsm: TlsmOptions,

    /// RangeKV (`rangetab`): number of RangeTabs N. 0 (the default): as
    /// many as the PM left after the WALs holds at two buffers of
    /// `rangetab_capacity_bytes` each (at least 2), or one more than the
    /// boundaries given. Fixed when the database is created.
    pub rangetab_count: usize,
    /// RangeKV: capacity of one RangeTab buffer in bytes; each RangeTab
    /// has two (the double buffer), so N × 2 × capacity of PM. 0 (the
    /// default): the memtable size (the paper's 64 MB = 64 MB), shrunk if
    /// the PM tier cannot hold two RangeTabs of it. Fixed at creation.
    pub rangetab_capacity_bytes: u64,
    /// RangeKV: N − 1 strictly increasing user keys splitting the key
    /// space into the RangeTabs' ranges (RangeTab i holds
    /// `[boundaries[i-1], boundaries[i])`), as `region_boundaries` does.
    /// Empty: `rangetab_prefix_bytes` if set, else the quantiles of the
    /// first flushed memtable (a fallback: a sequential load puts every
    /// later key in the last RangeTab). Persisted at creation.
    pub rangetab_boundaries: Vec<Vec<u8>>,
    /// RangeKV, the paper's key-prefix mapping (§III-B, Fig. 7): with
    /// p > 0 and no explicit boundaries, the boundaries split the space of
    /// p-byte key prefixes evenly (the paper: p = 4). 0 (the default):
    /// off. Faithful, but keys whose first p bytes agree all land in one
    /// RangeTab (db_bench's big-endian numbers below 2^32 share four zero
    /// bytes), so the explicit boundaries are the sound choice.
    pub rangetab_prefix_bytes: usize,
    /// RangeKV threshold β (paper: 0.9): a buffer fuller than this is
    /// sealed and merged first (selection step 1).
    pub rangetab_beta: f64,
    /// RangeKV threshold α: average fill at which step 2 merges the
    /// RangeTab with the most bytes per overlapped L1 table. The paper
    /// gives no value; 0.75 (between μ and β) is ours.
    pub rangetab_alpha: f64,
    /// RangeKV threshold μ (paper: ≥ 0.6): under low load, average fill at
    /// which step 3 merges adjacent RangeTabs filled between μ and α.
    pub rangetab_mu: f64,
    /// RangeKV γ (paper: 2): a step-3 merge takes at most γ × capacity.
    pub rangetab_gamma: f64,
    /// RangeKV "low load": the admitted write rate of the last second is
    /// below this fraction of its peak over the last minute (0.1).
    pub rangetab_low_load_fraction: f64,
    /// RangeKV: the paper's selection as written — only sealed buffers
    /// are merged, step 1 only those past β — instead of the sound
    /// default (every sealed buffer in step 1; steps 2–3 seal the write
    /// buffer they take). The faithful picker can leave a buffer sealed
    /// below α unmerged while its sibling fills (design/rangetab/picker.rs).
    pub rangetab_faithful_picker: bool,
    /// RangeKV: point reads probe each chunk's hash index (DRAM, built
    /// at flush or on first read after a restart); off = binary search
    /// over the chunk's offset array only.
    pub rangetab_hash_index: bool,

    /// NV-Cache: PM bytes the cached levels may occupy (allocated pages:
    /// offset arrays and every segment a table's nodes live in); the
    /// lowest cached level evicts to SSD above it. 0 (the default, ours):
    /// the PM tier minus `memtable_count_max` memtable logs and the write
    /// path's and compactions' reserves.
    pub nvcache_cache_bytes: u64,
    /// NV-Cache: levels kept in PM, L0 included (at most `level_count` -
    /// 1). 0 (the default, ours): down to the deepest level whose
    /// cumulative target fits the cache — L0 alone when L1's target does
    /// not fit beside L0's trigger (design/nvcache, "Options and
    /// defaults").
    pub nvcache_pm_levels: usize,
    /// NV-Cache: bytes of a segment, the unit NVTable nodes are appended
    /// to and PM is freed in (a multiple of 4 KiB, 16 KiB..=64 MiB). 0 (the
    /// default, ours): `memtable_size_bytes` / 16, between 16 KiB and 1 MiB.
    pub nvcache_segment_bytes: u64,
    /// NV-Cache: node bytes at which a list compaction cuts its output
    /// NVTables. 0 (the default): `sst_size_bytes`; `u64::MAX`: one
    /// unbounded output per compaction, as in the paper.
    pub nvcache_table_bytes: u64,
    /// NV-Cache: relink every moved node (the paper, the default) or write
    /// only the offset arrays.
    pub nvcache_relink: NvRelink,
    /// NV-Cache: publish a committed group at once (the default) or entry
    /// by entry (the paper's transaction per insert).
    pub nvcache_append: NvAppend,
    /// NV-Cache: a list compaction copies the nodes it keeps out of
    /// segments whose live bytes fall under this percentage of their
    /// capacity, so that those segments can be freed (ours; default 50,
    /// 0 = never, as in the paper), 0..=100.
    pub nvcache_copy_out_percent: u32,

    /// Split the key space into this many independent LSMs (vLSM's
    /// *regions*; the paper runs 4 to 256), 1..=256. They share one WAL and
    /// one seqno space (batches spanning regions stay atomic, snapshots are
    /// consistent), one MANIFEST, the memtable budget (the mutable
    /// memtables of all regions together switch at `memtable_size_bytes`,
    /// largest first, so with N evenly written regions a memtable — and an
    /// L0 table — holds about 2 × `memtable_size_bytes` / N), the background
    /// threads and the block cache. Each has its own levels, compactions and
    /// write-control verdict (the strictest region's applies to writes).
    /// Fixed when the database is created (db/region.rs).
    pub regions: usize,
    /// With `regions` = N > 1: N − 1 strictly increasing user keys that
    /// split the key space into ranges (region r holds
    /// `[boundaries[r-1], boundaries[r])`), so that scans stay in the
    /// regions their bounds overlap. Empty: keys are routed by a hash,
    /// which spreads any key distribution evenly but makes every scan
    /// merge the streams of all N regions.
    pub region_boundaries: Vec<Vec<u8>>,

    /// The file system of the SSD tier (posix by default; tests pass a
    /// crashable or error-injecting one).
    pub fs: Arc<dyn FileSystem>,
    /// A PM region to use instead of mapping `pm_dir` (tests pass the
    /// simulator). When set, `pm_dir` may be `None` and `pm_size_bytes` is
    /// the region's size.
    pub pm_region: Option<Arc<dyn PmRegion>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            design: Preset::Classic,
            create_if_missing: true,
            error_if_exists: false,
            pm_dir: None,
            pm_size_bytes: 0,
            pm_backend: PmBackend::Auto,
            wal: None,
            wal_recovery: WalRecovery::TornTail,
            memtable_size_bytes: 64 << 20,
            memtable_count_max: 2,
            memtable_filter_ratio: 1.0 / 64.0,
            sst_size_bytes: 64 << 20,
            l1_size_bytes: 256 << 20,
            level_size_multiplier: 10,
            level_count: 7,
            l0_compaction_trigger: 4,
            l0_slowdown_trigger: 20,
            l0_stop_trigger: 36,
            pending_compaction_bytes_soft: 64 << 30,
            pending_compaction_bytes_hard: 256 << 30,
            delayed_write_rate_bytes_per_sec: 16 << 20,
            write_pacing: true,
            background_threads: 2,
            max_subcompactions: 0,
            background_nice: 0,
            background_sched_idle: false,
            compaction_sched_idle: false,
            adaptive_compaction_priority: false,
            background_io_autotune: true,
            block_cache_bytes: 8 << 20,
            block_size_bytes: 4096,
            bloom_bits_per_key: 10,
            use_direct_io_for_flush_and_compaction: false,
            bytes_per_sync: 1 << 20,
            wal_bytes_per_sync: 0,
            recycle_table_files: 8,
            verify_checksums: true,
            compression: Compression::None,
            compression_per_level: Vec::new(),
            pm_hints: true,
            pm_collector_threads: 0,
            pm_container_limit_bytes: 0,
            vsst: None,
            vlsm_growth_factor: 8,
            vlsm_phi: 32,
            vlsm_l0_max_ssts: 32,
            vlsm_l0_batch_ssts: 1,
            vlsm_l1_size_bytes: None,
            tlsm: TlsmOptions::default(),
            rangetab_count: 0,
            rangetab_capacity_bytes: 0,
            rangetab_boundaries: Vec::new(),
            rangetab_prefix_bytes: 0,
            rangetab_beta: 0.9,
            rangetab_alpha: 0.75,
            rangetab_mu: 0.6,
            rangetab_gamma: 2.0,
            rangetab_low_load_fraction: 0.1,
            rangetab_faithful_picker: false,
            rangetab_hash_index: true,
            nvcache_cache_bytes: 0,
            nvcache_pm_levels: 0,
            nvcache_segment_bytes: 0,
            nvcache_table_bytes: 0,
            nvcache_relink: NvRelink::Links,
            nvcache_append: NvAppend::Group,
            nvcache_copy_out_percent: 50,
            regions: 1,
            region_boundaries: Vec::new(),
            fs: Arc::new(PosixFs::new()),
            pm_region: None,
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("design", &self.design)
            .field("pm_dir", &self.pm_dir)
            .field("pm_size_bytes", &self.pm_size_bytes)
            .field("pm_backend", &self.pm_backend)
            .field("wal", &self.wal)
            .field("wal_recovery", &self.wal_recovery)
            .field("memtable_size_bytes", &self.memtable_size_bytes)
            .field("memtable_count_max", &self.memtable_count_max)
            .field("memtable_filter_ratio", &self.memtable_filter_ratio)
            .field("sst_size_bytes", &self.sst_size_bytes)
            .field("l1_size_bytes", &self.l1_size_bytes)
            .field("level_size_multiplier", &self.level_size_multiplier)
            .field("level_count", &self.level_count)
            .field("l0_compaction_trigger", &self.l0_compaction_trigger)
            .field("l0_slowdown_trigger", &self.l0_slowdown_trigger)
            .field("l0_stop_trigger", &self.l0_stop_trigger)
            .field("background_threads", &self.background_threads)
            .field("max_subcompactions", &self.max_subcompactions)
            .field("background_nice", &self.background_nice)
            .field("background_sched_idle", &self.background_sched_idle)
            .field("compaction_sched_idle", &self.compaction_sched_idle)
            .field(
                "adaptive_compaction_priority",
                &self.adaptive_compaction_priority,
            )
            .field("background_io_autotune", &self.background_io_autotune)
            .field("recycle_table_files", &self.recycle_table_files)
            .field("vsst", &self.vsst)
            .field("vlsm_growth_factor", &self.vlsm_growth_factor)
            .field("vlsm_phi", &self.vlsm_phi)
            .field("vlsm_l0_max_ssts", &self.vlsm_l0_max_ssts)
            .field("vlsm_l0_batch_ssts", &self.vlsm_l0_batch_ssts)
            .field("vlsm_l1_size_bytes", &self.vlsm_l1_size_bytes)
            .field("tlsm", &self.tlsm)
            .field("rangetab_count", &self.rangetab_count)
            .field("rangetab_capacity_bytes", &self.rangetab_capacity_bytes)
            .field("rangetab_boundaries", &self.rangetab_boundaries.len())
            .field("rangetab_prefix_bytes", &self.rangetab_prefix_bytes)
            .field(
                "rangetab_thresholds",
                &(
                    self.rangetab_beta,
                    self.rangetab_alpha,
                    self.rangetab_mu,
                    self.rangetab_gamma,
                ),
            )
            .field("rangetab_hash_index", &self.rangetab_hash_index)
            .field("nvcache_cache_bytes", &self.nvcache_cache_bytes)
            .field("nvcache_pm_levels", &self.nvcache_pm_levels)
            .field("nvcache_segment_bytes", &self.nvcache_segment_bytes)
            .field("nvcache_table_bytes", &self.nvcache_table_bytes)
            .field("nvcache_relink", &self.nvcache_relink)
            .field("nvcache_append", &self.nvcache_append)
            .field("nvcache_copy_out_percent", &self.nvcache_copy_out_percent)
            .field("regions", &self.regions)
            .field("region_boundaries", &self.region_boundaries.len())
            .field("block_cache_bytes", &self.block_cache_bytes)
            .field("compression", &self.compression)
            .field("compression_per_level", &self.compression_per_level)
            .field("pm_hints", &self.pm_hints)
            .field("pm_collector_threads", &self.pm_collector_threads)
            .field("pm_container_limit_bytes", &self.pm_container_limit_bytes)
            .field(
                "pm_region",
                &self.pm_region.as_ref().map(|r| r.name().to_string()),
            )
            .finish_non_exhaustive()
    }
}

impl Options {
    /// The defaults of a preset: `Options::default()` (RocksDB's numbers)
    /// with `design` set, and for `vlsm` the paper's sizes.
    ///
    /// `vlsm` (vLSM §6.2–6.3): 8 MB SSTs — Table 1 finds 8 MB the best
    /// balance of throughput, tail latency and CPU (2 and 4 MB cost 5× and
    /// 15% throughput) — with RocksDB's two 64 MB memtables: "vLSM uses the
    /// same amount of memory for the in-memory component as the base
    /// RocksDB configuration", and the abstract's "at the same memory
    /// budget". A flush is cut into range-partitioned 8 MB L0 SSTs
    /// (design/vlsm.rs), so each single-SST L0 → L1 compaction meets about
    /// 1/8 of L1 (set `memtable_size_bytes` = `sst_size_bytes` for the
    /// literal one-SST-per-memtable reading, whose L0 SSTs each meet all of
    /// L1). f = 8 and Φ = 32 are the paper's evaluation settings.
    pub fn for_design(design: Preset) -> Options {
        let mut o = Options {
            design,
            ..Options::default()
        };
        if design == Preset::Vlsm {
            o.sst_size_bytes = 8 << 20;
            o.l1_size_bytes = o.vlsm_growth_factor * o.sst_size_bytes;
        }
        if design == Preset::Tlsm {
            // TLSM extends LevelDB 1.20: L0 triggers 4 / 8 / 12.
            o.l0_compaction_trigger = 4;
            o.l0_slowdown_trigger = 8;
            o.l0_stop_trigger = 12;
        }
        o
    }

    /// Whether L1 output is cut into overlap-aware vSSTs (`vsst`, or the
    /// design's default: on for `vlsm`).
    pub fn vsst_enabled(&self) -> bool {
        self.vsst.unwrap_or(self.design == Preset::Vlsm)
    }

    /// True if a PM tier is configured (a directory or an injected region).
    pub fn has_pm(&self) -> bool {
        self.pm_region.is_some() || self.pm_dir.is_some()
    }

    /// The codec of SSTs written to `level` (`compression_per_level`, else
    /// `compression`).
    pub fn compression_for_level(&self, level: usize) -> Compression {
        match self.compression_per_level.as_slice() {
            [] => self.compression,
            l => l[level.min(l.len() - 1)],
        }
    }

    /// Bytes of each DRAM memtable's key filter (`memtable_filter_ratio`).
    pub fn memtable_filter_bytes(&self) -> usize {
        (self.memtable_size_bytes as f64 * self.memtable_filter_ratio) as usize
    }

    /// The parts one merge may be cut into (`max_subcompactions`; 0 =
    /// `background_threads`).
    pub fn subcompactions(&self) -> usize {
        match self.max_subcompactions {
            0 => self.background_threads,
            n => n,
        }
        .max(1)
    }

    /// Where the WAL goes once defaults are applied.
    pub fn wal_placement(&self) -> WalPlacement {
        self.wal.unwrap_or(if self.has_pm() {
            WalPlacement::Pm
        } else {
            WalPlacement::Ssd
        })
    }

    /// Checks every option; the error names the offending one.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidOptions(m));
        if self.design.needs_pm() && !self.has_pm() {
            return bad(format!(
                "design `{}` keeps L0 in persistent memory and needs a PM tier: set `pm_dir` and `pm_size_bytes`",
                self.design
            ));
        }
        if self.pm_dir.is_some() && self.pm_region.is_none() && self.pm_size_bytes < (4 << 20) {
            return bad(format!(
                "`pm_size_bytes` = {} is too small: the PM tier needs at least 4 MiB",
                self.pm_size_bytes
            ));
        }
        if self.wal == Some(WalPlacement::Pm) && !self.has_pm() {
            return bad("`wal` = Pm needs a PM tier: set `pm_dir`".into());
        }
        if self.memtable_size_bytes < (64 << 10) || self.memtable_size_bytes > (4 << 30) {
            return bad(format!(
                "`memtable_size_bytes` = {} must be between 64 KiB and 4 GiB",
                self.memtable_size_bytes
            ));
        }
        if self.memtable_count_max < 2 {
            return bad(format!(
                "`memtable_count_max` = {} must be at least 2 (one mutable, one flushing)",
                self.memtable_count_max
            ));
        }
        if self.sst_size_bytes < (64 << 10) {
            return bad(format!(
                "`sst_size_bytes` = {} must be at least 64 KiB",
                self.sst_size_bytes
            ));
        }
        if self.l1_size_bytes < self.sst_size_bytes {
            return bad(format!(
                "`l1_size_bytes` = {} must be at least `sst_size_bytes` = {}",
                self.l1_size_bytes, self.sst_size_bytes
            ));
        }
        if self.level_size_multiplier < 2 {
            return bad(format!(
                "`level_size_multiplier` = {} must be at least 2",
                self.level_size_multiplier
            ));
        }
        if !(2..=12).contains(&self.level_count) {
            return bad(format!(
                "`level_count` = {} must be between 2 and 12",
                self.level_count
            ));
        }
        if self.l0_compaction_trigger == 0
            || self.l0_slowdown_trigger < self.l0_compaction_trigger
            || self.l0_stop_trigger < self.l0_slowdown_trigger
        {
            return bad(format!(
                "L0 triggers must satisfy 0 < `l0_compaction_trigger` ({}) <= `l0_slowdown_trigger` ({}) <= `l0_stop_trigger` ({})",
                self.l0_compaction_trigger, self.l0_slowdown_trigger, self.l0_stop_trigger
            ));
        }
        if self.pending_compaction_bytes_hard < self.pending_compaction_bytes_soft {
            return bad(format!(
                "`pending_compaction_bytes_hard` = {} must be at least `pending_compaction_bytes_soft` = {}",
                self.pending_compaction_bytes_hard, self.pending_compaction_bytes_soft
            ));
        }
        if self.delayed_write_rate_bytes_per_sec == 0 {
            return bad("`delayed_write_rate_bytes_per_sec` must be positive".into());
        }
        if !(1..=64).contains(&self.background_threads) {
            return bad(format!(
                "`background_threads` = {} must be between 1 and 64",
                self.background_threads
            ));
        }
        if !(0.0..=0.25).contains(&self.memtable_filter_ratio) {
            return bad(format!(
                "`memtable_filter_ratio` = {} must be between 0 and 0.25",
                self.memtable_filter_ratio
            ));
        }
        if self.max_subcompactions > 64 {
            return bad(format!(
                "`max_subcompactions` = {} must be at most 64 (0: `background_threads`)",
                self.max_subcompactions
            ));
        }
        if !(0..=19).contains(&self.background_nice) {
            return bad(format!(
                "`background_nice` = {} must be between 0 and 19",
                self.background_nice
            ));
        }
        if self.compaction_sched_idle && self.background_threads < 2 {
            return bad(format!(
                "`compaction_sched_idle` needs `background_threads` ≥ 2 (it is {}): one \
                 background thread both flushes and compacts, and a flush under SCHED_IDLE \
                 would wait for idle cores",
                self.background_threads
            ));
        }
        if self.adaptive_compaction_priority {
            if self.background_threads < 2 {
                return bad(format!(
                    "`adaptive_compaction_priority` needs `background_threads` ≥ 2 (it is \
                     {}): one background thread both flushes and compacts",
                    self.background_threads
                ));
            }
            if self.background_sched_idle || self.compaction_sched_idle {
                return bad(
                    "`adaptive_compaction_priority` excludes `background_sched_idle` and \
                     `compaction_sched_idle` (it switches the compaction threads itself)"
                        .to_string(),
                );
            }
            if !crate::sched::can_leave_idle() {
                return bad(
                    "`adaptive_compaction_priority` needs the right to move a thread out of \
                     SCHED_IDLE (CAP_SYS_NICE, or RLIMIT_NICE of at least 20: systemd's \
                     `LimitNICE=`), which this process lacks"
                        .to_string(),
                );
            }
        }
        if !(256..=(4 << 20)).contains(&self.block_size_bytes) {
            return bad(format!(
                "`block_size_bytes` = {} must be between 256 B and 4 MiB",
                self.block_size_bytes
            ));
        }
        if !(2..=64).contains(&self.vlsm_growth_factor) {
            return bad(format!(
                "`vlsm_growth_factor` = {} must be between 2 and 64",
                self.vlsm_growth_factor
            ));
        }
        if !(2..=1024).contains(&self.vlsm_phi) {
            return bad(format!(
                "`vlsm_phi` = {} must be between 2 and 1024",
                self.vlsm_phi
            ));
        }
        if !(1..=1000).contains(&self.vlsm_l0_batch_ssts) {
            return bad(format!(
                "`vlsm_l0_batch_ssts` = {} must be between 1 and 1000",
                self.vlsm_l0_batch_ssts
            ));
        }
        if self
            .vlsm_l1_size_bytes
            .is_some_and(|b| b < self.sst_size_bytes)
        {
            return bad(format!(
                "`vlsm_l1_size_bytes` = {:?} must be at least `sst_size_bytes` = {}",
                self.vlsm_l1_size_bytes, self.sst_size_bytes
            ));
        }
        if !(1..=1000).contains(&self.vlsm_l0_max_ssts) {
            return bad(format!(
                "`vlsm_l0_max_ssts` = {} must be between 1 and 1000",
                self.vlsm_l0_max_ssts
            ));
        }
        if !(1..=256).contains(&self.regions) {
            return bad(format!(
                "`regions` = {} must be between 1 and 256",
                self.regions
            ));
        }
        if !self.region_boundaries.is_empty() {
            if self.region_boundaries.len() != self.regions - 1 {
                return bad(format!(
                    "`region_boundaries` has {} keys but `regions` = {} needs {} (or none, for hash routing)",
                    self.region_boundaries.len(),
                    self.regions,
                    self.regions - 1
                ));
            }
            if self.region_boundaries.windows(2).any(|w| w[0] >= w[1]) {
                return bad(
                    "`region_boundaries` must be strictly increasing (sorted, no duplicates)"
                        .into(),
                );
            }
            if self
                .region_boundaries
                .iter()
                .any(|b| b.len() > crate::key::MAX_KEY_LEN)
            {
                return bad(
                    "`region_boundaries`: a key is longer than the maximum key length".into(),
                );
            }
        }
        self.validate_rangetab()?;
        if self.bloom_bits_per_key > 64 {
            return bad(format!(
                "`bloom_bits_per_key` = {} must be at most 64",
                self.bloom_bits_per_key
            ));
        }
        if !self.compression.is_available() {
            return bad(format!(
                "`compression` = {}: this build of tierkv lacks the cargo feature `{}`",
                self.compression, self.compression
            ));
        }
        if self.compression_per_level.len() > self.level_count {
            return bad(format!(
                "`compression_per_level` has {} entries but `level_count` = {}",
                self.compression_per_level.len(),
                self.level_count
            ));
        }
        if let Some((level, c)) = self
            .compression_per_level
            .iter()
            .enumerate()
            .find(|(_, c)| !c.is_available())
        {
            return bad(format!(
                "`compression_per_level[{level}]` = {c}: this build of tierkv lacks the cargo feature `{c}`"
            ));
        }
        self.tlsm.validate(self)?;
        if self.design == Preset::NvCache {
            if self.regions > 1 {
                return bad(format!(
                    "`regions` = {}: design `nvcache` keeps one log (its NVTable) per memtable and supports only 1 region",
                    self.regions
                ));
            }
            if self.wal == Some(WalPlacement::Ssd) {
                return bad(
                    "`wal` = Ssd: design `nvcache` writes no WAL (the NVTable in PM is the log); leave `wal` unset or Pm"
                        .into(),
                );
            }
        }
        if self.nvcache_segment_bytes != 0
            && (!self.nvcache_segment_bytes.is_multiple_of(4096)
                || !((16 << 10)..=(64 << 20)).contains(&self.nvcache_segment_bytes))
        {
            return bad(format!(
                "`nvcache_segment_bytes` = {} must be a multiple of 4 KiB between 16 KiB and 64 MiB (or 0)",
                self.nvcache_segment_bytes
            ));
        }
        if self.nvcache_pm_levels >= self.level_count {
            return bad(format!(
                "`nvcache_pm_levels` = {} must leave at least one SSD level below (`level_count` = {})",
                self.nvcache_pm_levels, self.level_count
            ));
        }
        if self.nvcache_table_bytes != 0 && self.nvcache_table_bytes < (64 << 10) {
            return bad(format!(
                "`nvcache_table_bytes` = {} must be at least 64 KiB (or 0)",
                self.nvcache_table_bytes
            ));
        }
        if self.nvcache_copy_out_percent > 100 {
            return bad(format!(
                "`nvcache_copy_out_percent` = {} must be at most 100",
                self.nvcache_copy_out_percent
            ));
        }
        if self.pm_collector_threads > 64 {
            return bad(format!(
                "`pm_collector_threads` = {} must be at most 64",
                self.pm_collector_threads
            ));
        }
        Ok(())
    }

    /// The `rangetab_*` options (and `regions`, which `rangetab` refuses).
    fn validate_rangetab(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidOptions(m));
        let (b, a, m, g) = (
            self.rangetab_beta,
            self.rangetab_alpha,
            self.rangetab_mu,
            self.rangetab_gamma,
        );
        if !(b > 0.0 && b < 1.0) {
            return bad(format!("`rangetab_beta` = {b} must be in (0, 1)"));
        }
        if !(a > 0.0 && a < b) {
            return bad(format!(
                "`rangetab_alpha` = {a} must be in (0, `rangetab_beta` = {b})"
            ));
        }
        if !(m > 0.0 && m < a) {
            return bad(format!(
                "`rangetab_mu` = {m} must be in (0, `rangetab_alpha` = {a})"
            ));
        }
        if !(1.0..=64.0).contains(&g) {
            return bad(format!("`rangetab_gamma` = {g} must be between 1 and 64"));
        }
        let f = self.rangetab_low_load_fraction;
        if !(0.0..=1.0).contains(&f) {
            return bad(format!(
                "`rangetab_low_load_fraction` = {f} must be between 0 and 1"
            ));
        }
        if self.rangetab_count > crate::design::rangetab::MAX_RANGETABS {
            return bad(format!(
                "`rangetab_count` = {} must be at most {}",
                self.rangetab_count,
                crate::design::rangetab::MAX_RANGETABS
            ));
        }
        if self.rangetab_capacity_bytes != 0
            && !(crate::design::rangetab::MIN_CAPACITY_BYTES..=(4 << 30))
                .contains(&self.rangetab_capacity_bytes)
        {
            return bad(format!(
                "`rangetab_capacity_bytes` = {} must be 0 (automatic) or between {} and 4 GiB",
                self.rangetab_capacity_bytes,
                crate::design::rangetab::MIN_CAPACITY_BYTES
            ));
        }
        let bounds = &self.rangetab_boundaries;
        if !bounds.is_empty() {
            if self.rangetab_count != 0 && bounds.len() + 1 != self.rangetab_count {
                return bad(format!(
                    "`rangetab_boundaries` has {} keys but `rangetab_count` = {} needs {}",
                    bounds.len(),
                    self.rangetab_count,
                    self.rangetab_count - 1
                ));
            }
            if bounds.len() + 1 > crate::design::rangetab::MAX_RANGETABS {
                return bad(format!(
                    "`rangetab_boundaries` has {} keys: at most {} RangeTabs",
                    bounds.len(),
                    crate::design::rangetab::MAX_RANGETABS
                ));
            }
            if bounds.windows(2).any(|w| w[0] >= w[1]) || bounds.iter().any(|k| k.is_empty()) {
                return bad(
                    "`rangetab_boundaries` must be non-empty keys, strictly increasing".into(),
                );
            }
            if bounds.iter().any(|k| k.len() > crate::key::MAX_KEY_LEN) {
                return bad(
                    "`rangetab_boundaries`: a key is longer than the maximum key length".into(),
                );
            }
            if self.rangetab_prefix_bytes != 0 {
                return bad(
                    "set `rangetab_boundaries` or `rangetab_prefix_bytes`, not both".into(),
                );
            }
        }
        if self.rangetab_prefix_bytes > 8 {
            return bad(format!(
                "`rangetab_prefix_bytes` = {} must be at most 8",
                self.rangetab_prefix_bytes
            ));
        }
        if self.design == Preset::RangeTab {
            if self.regions != 1 {
                return bad(format!(
                    "`regions` = {}: design `rangetab` keeps one set of RangeTabs for the whole \
                     key space (its RangeTabs already partition it by key range); set `regions` = 1",
                    self.regions
                ));
            }
            if self.background_threads < 2 {
                return bad(format!(
                    "design `rangetab` needs `background_threads` >= 2 (a flush may wait for a \
                     merge to empty a buffer), got {}",
                    self.background_threads
                ));
            }
        }
        Ok(())
    }
}

/// TLSM's tiering policy (§IV-D): where the levels' data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsmPolicy {
    /// Levels up to `TlsmOptions::level_threshold` are persistent skip
    /// lists in PM, deeper levels SSTs on SSD.
    Leveled,
    /// Everything is a skip list in PM until PM holds
    /// `TlsmOptions::lru_capacity_bytes`; then the longest-resident lists
    /// (chosen by the PM they alone hold) are written to SSD as SSTs.
    Lru,
    /// Everything in PM (the paper's "no tiering", Full-NVM).
    None,
}

impl TlsmPolicy {
    /// `leveled`, `lru` or `none`.
    pub fn name(self) -> &'static str {
        match self {
            TlsmPolicy::Leveled => "leveled",
            TlsmPolicy::Lru => "lru",
            TlsmPolicy::None => "none",
        }
    }

    /// Parses a policy name.
    pub fn from_name(s: &str) -> Option<TlsmPolicy> {
        [TlsmPolicy::Leveled, TlsmPolicy::Lru, TlsmPolicy::None]
            .into_iter()
            .find(|p| p.name() == s)
    }
}

/// TLSM's ablation variants (§V-C1, Fig. 5a/b).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsmVariant {
    /// PS: persistent skip lists whose nodes hold their key and value;
    /// compaction copies them into new nodes.
    Ps,
    /// PS+BAC: nodes hold their key and value; compaction links new nodes
    /// to the entries inside the input nodes (byte-addressable compaction).
    PsBac,
    /// PS+BAC+PB, the full design: a flush copies the memtable into one
    /// persistent buffer; nodes point into buffers; compaction links.
    Full,
}

impl TlsmVariant {
    /// `ps`, `ps_bac` or `full`.
    pub fn name(self) -> &'static str {
        match self {
            TlsmVariant::Ps => "ps",
            TlsmVariant::PsBac => "ps_bac",
            TlsmVariant::Full => "full",
        }
    }

    /// Parses a variant name.
    pub fn from_name(s: &str) -> Option<TlsmVariant> {
        [TlsmVariant::Ps, TlsmVariant::PsBac, TlsmVariant::Full]
            .into_iter()
            .find(|p| p.name() == s)
    }
}

/// The order in which a TLSM flush makes its pieces durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsmPersistOrder {
    /// Buffer first, then the node pages once, then the sentinel (the
    /// spec's fix): a null-terminated list never points at bytes that are
    /// not durable.
    Sound,
    /// Algorithm 1 as printed: every node persisted and linked one by one,
    /// the null node, and only then the buffer copy. A crash in between
    /// leaves a null-terminated list over a buffer that is not durable;
    /// this engine still recovers (the MANIFEST, not the null node, commits
    /// a flush), but a recovery that trusted the null node (Algorithm 3)
    /// would adopt garbage.
    Faithful,
}

impl TlsmPersistOrder {
    /// `sound` or `faithful`.
    pub fn name(self) -> &'static str {
        match self {
            TlsmPersistOrder::Sound => "sound",
            TlsmPersistOrder::Faithful => "faithful",
        }
    }

    /// Parses a persist-order name.
    pub fn from_name(s: &str) -> Option<TlsmPersistOrder> {
        [TlsmPersistOrder::Sound, TlsmPersistOrder::Faithful]
            .into_iter()
            .find(|p| p.name() == s)
    }
}

/// The options of the `tlsm` design (design/tlsm/), validated at open.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsmOptions {
    /// Tiering policy (default `Lru`, the paper's recommendation).
    pub policy: TlsmPolicy,
    /// `Leveled`: the deepest level kept in PM (the paper evaluates 1, 2
    /// and 3, and finds 3 best). Below `level_count` (checked under
    /// `Leveled` only).
    pub level_threshold: usize,
    /// Ablation variant (default `Full`).
    pub variant: TlsmVariant,
    /// Flush persist order (default `Sound`).
    pub persist_order: TlsmPersistOrder,
    /// Compaction: nodes linked per persist of the output's linked count
    /// (default 1, as the paper: a node is durable before the list counts
    /// it). 1..=65536.
    pub persist_every: usize,
    /// The PM the skip lists may fill before `Lru` evicts (and `None`
    /// copies live entries forward): 0 = the whole PM tier. Eviction
    /// starts at 95% of it and goes down to 85%.
    pub lru_capacity_bytes: u64,
    /// Copy the live entries of lists forward into a fresh buffer once a
    /// buffer's live share falls below this (0 = off, the default). Under
    /// `None`, a PM tier at 95% of its capacity copies forward buffers
    /// below 90% live whatever this says.
    pub copy_forward_live_ratio: f64,
    /// Open every list a flush or compaction writes by the full walk that
    /// opens a list at recovery (every node, link and entry key read back
    /// and checked, the filter built from what was read) instead of taking
    /// the reader its builder recorded (default `false`, as RocksDB's
    /// `paranoid_file_checks`; with it a `tlsm10` fill runs at 0.8-0.9x).
    /// After a restart every list is walked, with every check, before its
    /// first use either way.
    pub check_outputs: bool,
}

impl Default for TlsmOptions {
    fn default() -> Self {
        TlsmOptions {
            policy: TlsmPolicy::Lru,
            level_threshold: 3,
            variant: TlsmVariant::Full,
            persist_order: TlsmPersistOrder::Sound,
            persist_every: 1,
            lru_capacity_bytes: 0,
            copy_forward_live_ratio: 0.0,
            check_outputs: false,
        }
    }
}

impl TlsmOptions {
    /// Checks the TLSM options (only when `tlsm` is the design); the error
    /// names the option.
    fn validate(&self, o: &Options) -> Result<()> {
        if o.design != Preset::Tlsm {
            return Ok(());
        }
        let bad = |m: String| Err(Error::InvalidOptions(m));
        if self.policy == TlsmPolicy::Leveled && self.level_threshold >= o.level_count {
            return bad(format!(
                "`tlsm.level_threshold` = {} must be below `level_count` = {}",
                self.level_threshold, o.level_count
            ));
        }
        if !(1..=65536).contains(&self.persist_every) {
            return bad(format!(
                "`tlsm.persist_every` = {} must be between 1 and 65536",
                self.persist_every
            ));
        }
        if !(0.0..1.0).contains(&self.copy_forward_live_ratio) {
            return bad(format!(
                "`tlsm.copy_forward_live_ratio` = {} must be in [0, 1)",
                self.copy_forward_live_ratio
            ));
        }
        let pm = match &o.pm_region {
            Some(r) => r.len(),
            None => o.pm_size_bytes,
        };
        if self.lru_capacity_bytes > pm {
            return bad(format!(
                "`tlsm.lru_capacity_bytes` = {} exceeds the PM tier (`pm_size_bytes` = {pm})",
                self.lru_capacity_bytes
            ));
        }
        if o.background_threads < 2 {
            return bad(format!(
                "design `tlsm` needs `background_threads` >= 2 (a flush may wait for a \
                 compaction or an eviction to free PM), got {}",
                o.background_threads
            ));
        }
        Ok(())
    }
}
