//! tierkv with a design preset (`tierkv:<preset>`).
//!
//! The engine gets the run's [`EngineSetup`] field for field (memtable size
//! and count, SST size, L1 size, L0 triggers, delayed write rate, background
//! threads, block cache, bloom bits, direct I/O). PM presets get the PM
//! directory and size; the flattened designs (`matrix`, `triangle`,
//! `rangetab`) size L1 to the PM tier, as BENCH.md says. `classic` and
//! `vlsm` run on the SSD alone, or with every file in the PM directory
//! under the knob `onpm=1` (the papers' LevelDB-NVM baseline).
//!
//! Every number comes from `Db::stats()` (DESIGN.md §5): bytes written per
//! tier and cause, SSD bytes read, each stall interval, each flush and
//! compaction, and the level shape per tier.

use std::time::Duration;

use ::tierkv::design::rangetab as tierkv_rt;
use ::tierkv::options::{TlsmPolicy, TlsmVariant};
use ::tierkv::{Db, NvAppend, NvRelink, Options, Preset, ReadOptions, WalPlacement};

use super::{
    CompactionEvent, Engine, EngineSetup, EngineStats, FlushEvent, LevelBytes, LevelShape,
    LevelTargets, StallInterval, StallStats,
};
use crate::error::{Error, Result};

/// A tierkv database under test.
pub struct TierkvEngine {
    db: Db,
}

fn terr(e: ::tierkv::Error) -> Error {
    Error::Engine(format!("tierkv: {e}"))
}

/// The tierkv options of a run for `preset`.
pub fn options_for(preset: Preset, setup: &EngineSetup) -> Options {
    let mut o = Options {
        design: preset,
        memtable_size_bytes: setup.memtable_size_bytes as usize,
        memtable_count_max: setup.memtable_count,
        sst_size_bytes: setup.sst_size_bytes,
        l1_size_bytes: setup.l1_size_bytes,
        level_size_multiplier: setup.level_multiplier,
        l0_compaction_trigger: setup.l0_triggers.0,
        l0_slowdown_trigger: setup.l0_triggers.1,
        l0_stop_trigger: setup.l0_triggers.2,
        delayed_write_rate_bytes_per_sec: setup.delayed_write_rate_bytes_per_sec,
        pending_compaction_bytes_soft: setup.pending_compaction_bytes_limits.0,
        pending_compaction_bytes_hard: setup.pending_compaction_bytes_limits.1,
        background_threads: setup.background_jobs,
        max_subcompactions: setup.subcompactions,
        block_cache_bytes: setup.block_cache_bytes as usize,
        bloom_bits_per_key: setup.bloom_bits as usize,
        use_direct_io_for_flush_and_compaction: setup.direct_io,
        bytes_per_sync: setup.bytes_per_sync,
        wal_bytes_per_sync: setup.wal_bytes_per_sync,
        write_pacing: setup.write_pacing,
        compression: setup.compression,
        ..Options::default()
    };
    if let Some(r) = setup.memtable_bloom_ratio {
        o.memtable_filter_ratio = r;
    }
    if preset.needs_pm() {
        o.pm_dir = Some(setup.pm_dir.clone());
        o.pm_size_bytes = setup.pm_size_bytes;
    }
    if matches!(preset, Preset::Matrix | Preset::Triangle | Preset::RangeTab) {
        o.l1_size_bytes = setup.pm_size_bytes.max(setup.sst_size_bytes);
    }
    o.regions = setup.regions;
    if preset == Preset::Vlsm {
        // vLSM's small SSTs (SST / 8: 8 MB at `medium`) with the run's
        // memtables (the same memory as the other configurations), each
        // flush cut into range-partitioned L0 SSTs; L1 = f × SST; an L0
        // queue of 4 memtables' worth of SSTs (RocksDB's L0 at its trigger).
        let sst = setup
            .vlsm_sst_size_bytes
            .unwrap_or((setup.sst_size_bytes / 8).max(256 << 10));
        o.sst_size_bytes = sst;
        if let Some(m) = setup.vlsm_memtable_size_bytes {
            o.memtable_size_bytes = m as usize;
        }
        o.vlsm_phi = setup.vlsm_phi;
        o.vlsm_growth_factor = setup.vlsm_growth_factor;
        o.l1_size_bytes = setup.vlsm_growth_factor * sst;
        o.vlsm_l0_max_ssts = (4 * o.memtable_size_bytes as u64)
            .div_ceil(sst)
            .clamp(4, 1000) as usize;
    }
    o
}

/// One knob of a configuration `<preset>/knob=value/...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    /// `mem=`: memtable bytes.
    Memtable(u64),
    /// `sst=`: SST bytes (vlsm: its small SST size).
    Sst(u64),
    /// `phi=`: vlsm's Φ.
    Phi(u64),
    /// `f=`: vlsm's growth factor f.
    GrowthFactor(u64),
    /// `l0=`: vlsm's L0 queue length in SSTs.
    L0MaxSsts(u64),
    /// `regions=`: regions.
    Regions(u64),
    /// `batch=`: vlsm's L0 SSTs per L0 → L1 compaction at most.
    L0Batch(u64),
    /// `l1=`: L1 target bytes (vlsm: default f × SST; PM designs: default
    /// the PM size; classic: `--max_bytes_for_level_base`) — the paper's
    /// Fig. 19 sweep runs `tierkv:triangle/l1=256m` beside the default.
    L1Size(u64),
    /// `hints=0|1`: the PM designs' cross-row hint search (default on).
    Hints(bool),
    /// `limit=`: the PM container's size limit, where sides start (default
    /// 60% of PM).
    ContainerLimit(u64),
    /// `k=`: the PM designs' collector (and side-merge) threads (default
    /// min(8, background threads)).
    Collectors(u64),
    /// `pace=0|1`: the pacing write controller off or on.
    Pacing(bool),
    /// `nice=`: the background threads' added niceness, 0..=19
    /// (`Options::background_nice`, default 0).
    Nice(u64),
    /// `idle=0|1`: the background threads under `SCHED_IDLE`
    /// (`Options::background_sched_idle`, default 0).
    SchedIdle(bool),
    /// `cidle=0|1`: the compaction threads only under `SCHED_IDLE`, the
    /// flush thread not (`Options::compaction_sched_idle`, default 0).
    CompactionSchedIdle(bool),
    /// `acp=0|1`: the compaction threads under `SCHED_IDLE` while they
    /// have room, at normal priority near a limit
    /// (`Options::adaptive_compaction_priority`, default 0).
    AdaptivePriority(bool),
    /// `sub=`: parts one merge may be cut into (`Options::max_subcompactions`,
    /// default the background threads; `sub=1`: none).
    Subcompactions(u64),
    /// `recycle=`: obsolete table files kept for new tables to be written
    /// over (`Options::recycle_table_files`, default 8; `recycle=0`: none).
    Recycle(u64),
    /// `mfilter=0|1`: the DRAM memtables' key filter off or on
    /// (`Options::memtable_filter_ratio`: 0, or its default 1/64).
    MemFilter(bool),
    /// `iotune=0|1`: the background write limiter tuned to foreground
    /// reads off or on (`Options::background_io_autotune`, default on).
    IoTune(bool),
    /// `rt=`: rangetab's number of RangeTabs (default: as many as the PM
    /// holds at two buffers of the capacity each).
    RangeTabs(u64),
    /// `cap=`: rangetab's buffer capacity (default: the memtable size) —
    /// the paper's Fig. 18 sweep at a fixed capacity × count.
    Capacity(u64),
    /// `prefix=p`: rangetab's boundaries from the paper's p-byte key
    /// prefixes (instead of an even split of the run's key range).
    Prefix(u64),
    /// `quantiles=1`: rangetab's boundaries from the first memtable's
    /// quantiles (the fallback) instead of an even split.
    Quantiles,
    /// `hash=0|1`: rangetab's hash index (default on).
    HashIndex(bool),
    /// `faithful=0|1`: rangetab's picker as the paper writes it (default
    /// off: the sound picker).
    Faithful(bool),
    /// `cache=`: nvcache's cache budget in PM (default: PM minus the
    /// memtable logs and reserves).
    NvCacheBytes(u64),
    /// `pmlv=`: nvcache's levels in PM, L0 included (default: what fits).
    NvPmLevels(u64),
    /// `seg=`: nvcache's segment size.
    NvSegment(u64),
    /// `tbl=`: nvcache's list-compaction output size (default the SST size).
    NvTable(u64),
    /// `relink=0|1`: nvcache rewrites the links of moved nodes (1, the
    /// paper's, default) or writes offset arrays only (0).
    NvRelink(bool),
    /// `entry=0|1`: nvcache publishes appends entry by entry (1, the paper's
    /// transaction per insert) or per group (0, default).
    NvPerEntry(bool),
    /// `copy=`: nvcache copies nodes out of segments less live than this
    /// percentage (default 50; 0 = never, the paper's).
    NvCopyOut(u64),
    /// `paper=1`: nvcache with the paper's readings throughout (entry by
    /// entry appends, one unbounded output per list compaction, no
    /// copy-out; relinking stays on).
    NvPaper,
    /// `vsst=0|1`: cut L1 output into vLSM's overlap-aware vSSTs (any
    /// design; on by default for `vlsm` only): `tierkv:triangle/vsst=1` is
    /// the TriangleKV + vLSM combination.
    Vsst(bool),
    /// `policy=lru|leveled|none`: tlsm's tiering policy (§IV-D).
    TlsmPolicy(TlsmPolicy),
    /// `thr=`: tlsm's deepest PM level under `policy=leveled`.
    TlsmThreshold(u64),
    /// `variant=ps|ps_bac|full`: tlsm's ablation variant (Fig. 5a/b).
    TlsmVariant(TlsmVariant),
    /// `lrucap=`: the PM tlsm's lists may fill before `lru` evicts (0 =
    /// the whole PM tier).
    TlsmLruCapacity(u64),
    /// `check=0|1`: tlsm opens the lists it writes by the full walk
    /// (`TlsmOptions::check_outputs`; default 0).
    TlsmCheckOutputs(bool),
    /// `wal=ssd|pm`: where the WAL lives (default: PM when the design has
    /// a PM tier) — the TLSM paper's WAL is on disk.
    Wal(WalPlacement),
    /// `onpm=1`: an SSD-only design with every file (tables, WAL,
    /// MANIFEST) in the PM directory: the papers' "LevelDB-NVM" baseline
    /// (`tierkv:classic/onpm=1`).
    OnPm,
}

/// The knobs whose value is a word, parsed apart from the sizes.
fn word_knob(name: &str, value: &str, part: &str, spec: &str) -> Option<Result<Knob>> {
    let bad = |what: &str| Err(Error::Usage(format!("knob `{part}` of `{spec}`: {what}")));
    Some(match name {
        "policy" => TlsmPolicy::from_name(value)
            .map(Knob::TlsmPolicy)
            .map_or_else(|| bad("policy is lru, leveled or none"), Ok),
        "variant" => TlsmVariant::from_name(value)
            .map(Knob::TlsmVariant)
            .map_or_else(|| bad("variant is ps, ps_bac or full"), Ok),
        "wal" => match value {
            "ssd" => Ok(Knob::Wal(WalPlacement::Ssd)),
            "pm" => Ok(Knob::Wal(WalPlacement::Pm)),
            _ => bad("wal is ssd or pm"),
        },
        _ => return None,
    })
}

/// True if configuration `spec` keeps every file of an SSD-only design in
/// the PM directory (`onpm=1`).
pub fn all_on_pm(spec: &str) -> bool {
    parse_knobs(spec).is_ok_and(|k| k.contains(&Knob::OnPm))
}

/// Parses the knobs after the preset: `vlsm/mem=8m/phi=16` → `[Memtable(8 MiB),
/// Phi(16)]`. Sizes take an optional `k`, `m` or `g` suffix (binary).
pub fn parse_knobs(spec: &str) -> Result<Vec<Knob>> {
    let mut out = Vec::new();
    for part in spec.split('/').skip(1) {
        let (name, value) = part
            .split_once('=')
            .ok_or_else(|| Error::Usage(format!("knob `{part}` of `{spec}` is not name=value")))?;
        let v = value.to_ascii_lowercase();
        if let Some(k) = word_knob(name, &v, part, spec) {
            out.push(k?);
            continue;
        }
        let (digits, mult) = match v.as_bytes().last() {
            Some(b'k') => (&v[..v.len() - 1], 1u64 << 10),
            Some(b'm') => (&v[..v.len() - 1], 1 << 20),
            Some(b'g') => (&v[..v.len() - 1], 1 << 30),
            _ => (v.as_str(), 1),
        };
        let n: u64 = digits
            .parse()
            .ok()
            .and_then(|n: u64| n.checked_mul(mult))
            .ok_or_else(|| Error::Usage(format!("knob `{part}` of `{spec}`: bad number")))?;
        out.push(match name {
            "mem" => Knob::Memtable(n),
            "sst" => Knob::Sst(n),
            "phi" => Knob::Phi(n),
            "f" => Knob::GrowthFactor(n),
            "l0" => Knob::L0MaxSsts(n),
            "regions" => Knob::Regions(n),
            "batch" => Knob::L0Batch(n),
            "l1" => Knob::L1Size(n),
            "hints" if n <= 1 => Knob::Hints(n == 1),
            "rt" if (2..=tierkv_rt::MAX_RANGETABS as u64).contains(&n) => Knob::RangeTabs(n),
            "cap" => Knob::Capacity(n),
            "prefix" if (1..=8).contains(&n) => Knob::Prefix(n),
            "quantiles" if n == 1 => Knob::Quantiles,
            "hash" if n <= 1 => Knob::HashIndex(n == 1),
            "faithful" if n <= 1 => Knob::Faithful(n == 1),
            "rt" | "prefix" | "quantiles" | "hash" | "faithful" => {
                return Err(Error::Usage(format!(
                    "knob `{part}` of `{spec}`: rt is 2..{}, prefix 1..8, quantiles 1, hash and faithful 0 or 1",
                    tierkv_rt::MAX_RANGETABS
                )))
            }
            "limit" => Knob::ContainerLimit(n),
            "k" if n >= 1 => Knob::Collectors(n),
            "sub" if (1..=64).contains(&n) => Knob::Subcompactions(n),
            "recycle" => Knob::Recycle(n),
            "sub" => {
                return Err(Error::Usage(format!(
                    "knob `{part}` of `{spec}`: sub is 1..=64"
                )))
            }
            "pace" if n <= 1 => Knob::Pacing(n == 1),
            "iotune" if n <= 1 => Knob::IoTune(n == 1),
            "mfilter" if n <= 1 => Knob::MemFilter(n == 1),
            "nice" if n <= 19 => Knob::Nice(n),
            "idle" if n <= 1 => Knob::SchedIdle(n == 1),
            "cidle" if n <= 1 => Knob::CompactionSchedIdle(n == 1),
            "acp" if n <= 1 => Knob::AdaptivePriority(n == 1),
            "nice" => {
                return Err(Error::Usage(format!(
                    "knob `{part}` of `{spec}`: nice is 0..=19"
                )))
            }
            "vsst" if n <= 1 => Knob::Vsst(n == 1),
            "check" if n <= 1 => Knob::TlsmCheckOutputs(n == 1),
            "thr" if n >= 1 => Knob::TlsmThreshold(n),
            "lrucap" => Knob::TlsmLruCapacity(n),
            "onpm" if n == 1 => Knob::OnPm,
            "thr" | "onpm" => {
                return Err(Error::Usage(format!(
                    "knob `{part}` of `{spec}`: thr is at least 1, onpm is 1"
                )))
            }
            "pace" | "idle" | "cidle" | "acp" | "vsst" | "iotune" | "mfilter" | "check" => {
                return Err(Error::Usage(format!(
                    "knob `{part}` of `{spec}`: {name} is 0 or 1"
                )))
            }
            "cache" => Knob::NvCacheBytes(n),
            "pmlv" => Knob::NvPmLevels(n),
            "seg" => Knob::NvSegment(n),
            "tbl" => Knob::NvTable(n),
            "relink" if n <= 1 => Knob::NvRelink(n == 1),
            "entry" if n <= 1 => Knob::NvPerEntry(n == 1),
            "copy" if n <= 100 => Knob::NvCopyOut(n),
            "paper" if n == 1 => Knob::NvPaper,
            "relink" | "entry" | "paper" => {
                return Err(Error::Usage(format!(
                    "knob `{part}` of `{spec}`: {name} is 0 or 1"
                )))
            }
            "copy" => {
                return Err(Error::Usage(format!(
                    "knob `{part}` of `{spec}`: copy is a percentage, 0..=100"
                )))
            }
            "k" => {
                return Err(Error::Usage(format!(
                    "knob `{part}` of `{spec}`: k is at least 1"
                )))
            }
            "hints" => {
                return Err(Error::Usage(format!(
                    "knob `{part}` of `{spec}`: hints is 0 or 1"
                )))
            }
            _ => {
                return Err(Error::Usage(format!(
                    "unknown knob `{name}` in `{spec}`; knobs: mem, sst, phi, f, l0, batch, l1, regions, hints, limit, k, sub, pace, nice, idle, iotune, mfilter, rt, cap, prefix, quantiles, hash, faithful, cache, pmlv, seg, tbl, relink, entry, copy, paper, vsst, policy, thr, variant, lrucap, check, wal, onpm"
                )))
            }
        });
    }
    Ok(out)
}

/// The options of configuration `spec` (`<preset>[/knob=value]*`): the
/// knobs change the setup first, `l0=` the options last.
pub fn options_for_spec(preset: Preset, spec: &str, setup: &EngineSetup) -> Result<Options> {
    let knobs = parse_knobs(spec)?;
    let mut s = setup.clone();
    for k in &knobs {
        match *k {
            Knob::Memtable(n) if preset == Preset::Vlsm => s.vlsm_memtable_size_bytes = Some(n),
            Knob::Memtable(n) => s.memtable_size_bytes = n,
            Knob::Sst(n) if preset == Preset::Vlsm => s.vlsm_sst_size_bytes = Some(n),
            Knob::Sst(n) => s.sst_size_bytes = n,
            Knob::Phi(n) => s.vlsm_phi = n,
            Knob::GrowthFactor(n) => s.vlsm_growth_factor = n,
            Knob::Regions(n) => s.regions = n as usize,
            Knob::L0MaxSsts(_)
            | Knob::L0Batch(_)
            | Knob::L1Size(_)
            | Knob::Hints(_)
            | Knob::ContainerLimit(_)
            | Knob::Collectors(_)
            | Knob::Subcompactions(_)
            | Knob::Recycle(_)
            | Knob::Pacing(_)
            | Knob::Nice(_)
            | Knob::SchedIdle(_)
            | Knob::CompactionSchedIdle(_)
            | Knob::AdaptivePriority(_)
            | Knob::IoTune(_)
            | Knob::MemFilter(_)
            | Knob::RangeTabs(_)
            | Knob::Capacity(_)
            | Knob::Prefix(_)
            | Knob::Quantiles
            | Knob::HashIndex(_)
            | Knob::Faithful(_)
            | Knob::NvCacheBytes(_)
            | Knob::NvPmLevels(_)
            | Knob::NvSegment(_)
            | Knob::NvTable(_)
            | Knob::NvRelink(_)
            | Knob::NvPerEntry(_)
            | Knob::NvCopyOut(_)
            | Knob::NvPaper
            | Knob::Vsst(_)
            | Knob::TlsmPolicy(_)
            | Knob::TlsmThreshold(_)
            | Knob::TlsmVariant(_)
            | Knob::TlsmLruCapacity(_)
            | Knob::TlsmCheckOutputs(_)
            | Knob::Wal(_)
            | Knob::OnPm => {}
        }
    }
    let mut o = options_for(preset, &s);
    for k in &knobs {
        match *k {
            Knob::L0MaxSsts(n) => o.vlsm_l0_max_ssts = n as usize,
            Knob::L0Batch(n) => o.vlsm_l0_batch_ssts = n as usize,
            Knob::L1Size(n) if preset == Preset::Vlsm => o.vlsm_l1_size_bytes = Some(n),
            Knob::L1Size(n) => o.l1_size_bytes = n,
            Knob::Hints(on) => o.pm_hints = on,
            Knob::ContainerLimit(n) => o.pm_container_limit_bytes = n,
            Knob::Collectors(n) => o.pm_collector_threads = n as usize,
            Knob::Subcompactions(n) => o.max_subcompactions = n as usize,
            Knob::Recycle(n) => o.recycle_table_files = n as usize,
            Knob::Pacing(on) => o.write_pacing = on,
            Knob::Nice(n) => o.background_nice = n as i32,
            Knob::SchedIdle(on) => o.background_sched_idle = on,
            Knob::CompactionSchedIdle(on) => o.compaction_sched_idle = on,
            Knob::AdaptivePriority(on) => o.adaptive_compaction_priority = on,
            Knob::IoTune(on) => o.background_io_autotune = on,
            Knob::MemFilter(on) => {
                o.memtable_filter_ratio = if on {
                    Options::default().memtable_filter_ratio
                } else {
                    0.0
                }
            }
            Knob::RangeTabs(n) => o.rangetab_count = n as usize,
            Knob::Capacity(n) => o.rangetab_capacity_bytes = n,
            Knob::Prefix(n) => o.rangetab_prefix_bytes = n as usize,
            Knob::HashIndex(on) => o.rangetab_hash_index = on,
            Knob::Faithful(on) => o.rangetab_faithful_picker = on,
            Knob::NvCacheBytes(n) => o.nvcache_cache_bytes = n,
            Knob::NvPmLevels(n) => o.nvcache_pm_levels = n as usize,
            Knob::NvSegment(n) => o.nvcache_segment_bytes = n,
            Knob::NvTable(n) => o.nvcache_table_bytes = n,
            Knob::NvRelink(on) => {
                o.nvcache_relink = if on {
                    NvRelink::Links
                } else {
                    NvRelink::ArrayOnly
                }
            }
            Knob::NvPerEntry(on) => {
                o.nvcache_append = if on {
                    NvAppend::PerEntry
                } else {
                    NvAppend::Group
                }
            }
            Knob::NvCopyOut(n) => o.nvcache_copy_out_percent = n as u32,
            Knob::NvPaper => {
                o.nvcache_append = NvAppend::PerEntry;
                o.nvcache_table_bytes = u64::MAX;
                o.nvcache_copy_out_percent = 0;
            }
            Knob::Vsst(on) => o.vsst = Some(on),
            Knob::TlsmPolicy(p) => o.tlsm.policy = p,
            Knob::TlsmThreshold(n) => o.tlsm.level_threshold = n as usize,
            Knob::TlsmVariant(v) => o.tlsm.variant = v,
            Knob::TlsmLruCapacity(n) => o.tlsm.lru_capacity_bytes = n,
            Knob::TlsmCheckOutputs(on) => o.tlsm.check_outputs = on,
            Knob::Wal(w) => o.wal = Some(w),
            Knob::OnPm if preset.needs_pm() => {
                return Err(Error::Usage(format!(
                    "knob `onpm=1` of `{spec}`: design `{preset}` has a PM tier already; onpm puts an SSD-only design's files on the PM directory"
                )))
            }
            _ => {}
        }
    }
    let split = !knobs
        .iter()
        .any(|k| matches!(k, Knob::Prefix(_) | Knob::Quantiles));
    if preset == Preset::RangeTab && split && s.key_count > 0 {
        even_boundaries(&mut o, s.key_count, s.key_size)?;
    }
    Ok(o)
}

/// Splits the key numbers `[0, key_count)` evenly into the RangeTabs'
/// boundaries (as many RangeTabs as the options give on the PM tier).
pub fn even_boundaries(o: &mut Options, key_count: u64, key_size: usize) -> Result<()> {
    let g = tierkv_rt::Geometry::for_region(o, o.pm_size_bytes)
        .map_err(|e| Error::Refused(format!("tierkv:rangetab: {e}")))?;
    let n = u128::from(g.count);
    let mut bounds: Vec<Vec<u8>> = Vec::with_capacity(g.count as usize);
    for i in 1..n {
        let v = (u128::from(key_count) * i / n) as u64;
        let mut k = Vec::with_capacity(key_size);
        crate::keys::format_key(v, key_size, &mut k);
        if bounds.last().is_some_and(|b| *b >= k) {
            // Fewer key numbers than RangeTabs: the key space cannot be
            // split that finely; leave the boundaries to the fallback.
            return Ok(());
        }
        bounds.push(k);
    }
    o.rangetab_count = g.count as usize;
    o.rangetab_capacity_bytes = g.capacity_bytes;
    o.rangetab_boundaries = bounds;
    Ok(())
}

impl TierkvEngine {
    /// Opens a fresh database of design `preset` in `setup.ssd_dir`.
    ///
    /// Errors: `Error::Refused` for anything `Db::open` rejects (a design
    /// not available yet is `InvalidOptions` there).
    pub fn open(preset: &str, setup: &EngineSetup) -> Result<TierkvEngine> {
        let p = Preset::from_name(super::preset_name(preset))
            .ok_or_else(|| Error::Refused(format!("unknown tierkv preset `{preset}`")))?;
        let opts = options_for_spec(p, preset, setup)?;
        let dir = if all_on_pm(preset) {
            &setup.pm_dir
        } else {
            &setup.ssd_dir
        };
        let db = Db::open(dir, opts).map_err(|e| match e {
            ::tierkv::Error::InvalidOptions(m) => Error::Refused(format!("tierkv:{preset}: {m}")),
            other => Error::Refused(format!("tierkv:{preset}: open failed: {other}")),
        })?;
        Ok(TierkvEngine { db })
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The properties that are all 0 once background work is done.
const BACKGROUND_FIGURES: [&str; 4] = [
    "tierkv.num-running-flushes",
    "tierkv.num-running-compactions",
    "tierkv.mem-table-flush-pending",
    "tierkv.compaction-pending",
];

impl Engine for TierkvEngine {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.put(key, value).map_err(terr)
    }

    fn get(&self, key: &[u8], value: &mut Vec<u8>) -> Result<bool> {
        match self.db.get(key).map_err(terr)? {
            Some(v) => {
                *value = v;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.db.delete(key).map_err(terr)
    }

    fn scan(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let mut it = self.db.iter(ReadOptions::default()).map_err(terr)?;
        it.seek(start);
        let mut seen = 0;
        while seen < n && it.valid() {
            visit(it.key(), it.value());
            seen += 1;
            it.next();
        }
        it.status().map_err(terr)?;
        Ok(seen)
    }

    fn flush(&self) -> Result<()> {
        self.db.flush().map_err(terr)
    }

    fn background_idle(&self) -> Result<bool> {
        Ok(BACKGROUND_FIGURES
            .iter()
            .all(|name| self.db.property(name).as_deref() == Some("0")))
    }

    fn stats(&self) -> Result<EngineStats> {
        Ok(engine_stats(&self.db.stats()))
    }

    fn report(&self) -> Option<String> {
        // The design's own figures are its "** Design **" section.
        self.db.property("tierkv.stats")
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.close().map_err(terr)
    }
}

fn level_shapes(levels: &[::tierkv::stats::LevelShape]) -> Vec<LevelShape> {
    levels
        .iter()
        .map(|l| LevelShape {
            level: l.level,
            tier: l.tier.name().to_string(),
            files: l.tables as u64,
            bytes: l.bytes,
        })
        .collect()
}

/// The bench's view of a tierkv stats snapshot.
fn engine_stats(s: &::tierkv::stats::Stats) -> EngineStats {
    let intervals: Vec<StallInterval> = s
        .stalls
        .iter()
        .map(|i| StallInterval {
            start_s: secs(i.start),
            seconds: secs(i.duration),
            cause: i.cause.name(),
        })
        .collect();
    EngineStats {
        uptime_s: secs(s.uptime),
        ssd_written_bytes: s.written.ssd_total(),
        ssd_read_bytes: s.ssd_bytes_read,
        pm_written_bytes: s.written.pm_written(),
        pm_relinked_bytes: s.written.pm_relinked,
        wal_bytes: s.written.wal_ssd + s.written.wal_pm,
        stall: StallStats {
            seconds: intervals.iter().fold(0.0, |a, i| a + i.seconds),
            count: intervals.len() as u64,
            max_seconds: intervals.iter().map(|i| i.seconds).fold(0.0, f64::max),
            intervals: Some(intervals),
            paced_writes: s.paced_writes,
            paced_seconds: secs(s.paced_time),
            cause_counts: Vec::new(),
        },
        flushes: s
            .flushes
            .iter()
            .map(|f| FlushEvent {
                start_s: secs(f.start),
                duration_s: secs(f.duration),
                bytes: f.output_bytes,
            })
            .collect(),
        compactions: s
            .compactions
            .iter()
            .map(|c| CompactionEvent {
                start_s: secs(c.start),
                duration_s: secs(c.duration),
                kind: c.kind.clone(),
                input_bytes: c.input_bytes.iter().map(|x| x.1).sum(),
                inputs: c
                    .input_bytes
                    .iter()
                    .map(|&(level, bytes)| LevelBytes { level, bytes })
                    .collect(),
                output_level: c.output_level,
                output_bytes: c.output_bytes,
            })
            .collect(),
        levels: level_shapes(&s.levels),
        regions: if s.regions.len() > 1 {
            s.regions.iter().map(|r| level_shapes(r)).collect()
        } else {
            Vec::new()
        },
        targets: s.level_targets.as_ref().map(|t| LevelTargets {
            l0_files: t.l0_tables.map(|n| n as u64),
            bytes: t.bytes.clone(),
        }),
        pending_compaction_bytes: None,
        // The design's figures that are numbers (`Design::stats`).
        design_counters: s
            .design
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.parse::<f64>().ok()?)))
            .collect(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn options_follow_the_setup() {
        let mut s = EngineSetup::defaults("/tmp/x".into(), "/dev/shm/y".into());
        s.memtable_size_bytes = 4 << 20;
        s.sst_size_bytes = 4 << 20;
        s.pm_size_bytes = 16 << 20;
        let o = options_for(Preset::Classic, &s);
        assert_eq!(o.memtable_size_bytes, 4 << 20);
        assert!(o.pm_dir.is_none());
        assert!(o.validate().is_ok());
        let o = options_for(Preset::Triangle, &s);
        assert_eq!(
            o.pm_dir.as_deref(),
            Some(std::path::Path::new("/dev/shm/y"))
        );
        assert_eq!(o.l1_size_bytes, 16 << 20);
        assert_eq!(o.compression, ::tierkv::Compression::None);
        s.compression = ::tierkv::Compression::Zstd;
        let o = options_for(Preset::Vlsm, &s);
        assert_eq!(o.compression_for_level(0), ::tierkv::Compression::Zstd);
        assert_eq!(o.compression_for_level(6), ::tierkv::Compression::Zstd);
    }

    #[test]
    fn l1_and_hints_knobs() {
        let s = EngineSetup::defaults("/tmp/x".into(), "/dev/shm/y".into());
        let o = options_for_spec(Preset::Triangle, "triangle/l1=256m/hints=0", &s).unwrap();
        assert_eq!(o.l1_size_bytes, 256 << 20);
        assert!(!o.pm_hints);
        let o = options_for_spec(Preset::Classic, "classic/l1=400m", &s).unwrap();
        assert_eq!(o.l1_size_bytes, 400 << 20);
        let o = options_for_spec(Preset::Vlsm, "vlsm/l1=64m", &s).unwrap();
        assert_eq!(o.vlsm_l1_size_bytes, Some(64 << 20));
        assert!(parse_knobs("triangle/hints=2").is_err());
        let o = options_for_spec(Preset::Matrix, "matrix/limit=96m", &s).unwrap();
        assert_eq!(o.pm_container_limit_bytes, 96 << 20);
        let o = options_for_spec(Preset::Triangle, "triangle/k=3", &s).unwrap();
        assert_eq!(o.pm_collector_threads, 3);
        assert!(parse_knobs("triangle/k=0").is_err());
        let o = options_for_spec(Preset::Triangle, "triangle/vsst=1", &s).unwrap();
        assert!(o.vsst_enabled());
        assert!(parse_knobs("triangle/vsst=2").is_err());
    }

    #[test]
    fn tlsm_wal_and_onpm_knobs() {
        let s = EngineSetup::defaults("/tmp/x".into(), "/dev/shm/y".into());
        let spec = "tlsm/policy=leveled/thr=2/variant=PS_BAC/lrucap=8m/wal=ssd";
        let o = options_for_spec(Preset::Tlsm, spec, &s).unwrap();
        assert_eq!(o.tlsm.policy, TlsmPolicy::Leveled);
        assert_eq!(o.tlsm.level_threshold, 2);
        assert_eq!(o.tlsm.variant, TlsmVariant::PsBac);
        assert_eq!(o.tlsm.lru_capacity_bytes, 8 << 20);
        assert_eq!(o.wal_placement(), WalPlacement::Ssd);
        if let Err(e) = o.validate() {
            panic!("{e}");
        }
        for bad in [
            "tlsm/policy=tiered",
            "tlsm/variant=pb",
            "tlsm/wal=nvm",
            "tlsm/thr=0",
            "classic/onpm=2",
        ] {
            assert!(parse_knobs(bad).is_err(), "{bad}");
        }
        assert!(all_on_pm("classic/onpm=1"));
        assert!(!all_on_pm("classic"));
        let o = options_for_spec(Preset::Classic, "classic/onpm=1", &s).unwrap();
        assert!(o.pm_dir.is_none());
        assert!(options_for_spec(Preset::Triangle, "triangle/onpm=1", &s).is_err());
    }

    #[test]
    fn rangetab_knobs_and_even_boundaries() {
        let mut s = EngineSetup::defaults("/tmp/x".into(), "/dev/shm/y".into());
        s.pm_size_bytes = 640 << 20;
        s.memtable_size_bytes = 4 << 20;
        s.sst_size_bytes = 4 << 20;
        s.key_count = 1 << 20;
        let o = options_for_spec(Preset::RangeTab, "rangetab/cap=4m/rt=64", &s).unwrap();
        assert_eq!(o.rangetab_count, 64);
        assert_eq!(o.rangetab_capacity_bytes, 4 << 20);
        assert_eq!(o.rangetab_boundaries.len(), 63);
        let mut k = Vec::new();
        crate::keys::format_key(1 << 14, 16, &mut k);
        assert_eq!(o.rangetab_boundaries[0], k);
        assert!(o.validate().is_ok());
        // The default: as many RangeTabs of a memtable as the PM holds.
        let o = options_for_spec(Preset::RangeTab, "rangetab", &s).unwrap();
        assert!(o.rangetab_count > 60, "{}", o.rangetab_count);
        let o = options_for_spec(Preset::RangeTab, "rangetab/prefix=4", &s).unwrap();
        assert!(o.rangetab_boundaries.is_empty() && o.rangetab_prefix_bytes == 4);
        let o = options_for_spec(Preset::RangeTab, "rangetab/quantiles=1/hash=0", &s).unwrap();
        assert!(o.rangetab_boundaries.is_empty() && !o.rangetab_hash_index);
        assert!(parse_knobs("rangetab/rt=1").is_err());
    }

    #[test]
    fn nvcache_knobs() {
        let mut s = EngineSetup::defaults("/tmp/x".into(), "/dev/shm/y".into());
        s.pm_size_bytes = 64 << 20;
        let o = options_for(Preset::NvCache, &s);
        assert_eq!(o.pm_size_bytes, 64 << 20);
        assert_eq!(
            o.l1_size_bytes, s.l1_size_bytes,
            "NV-Cache's L1 is not the PM size"
        );
        let o = options_for_spec(
            Preset::NvCache,
            "nvcache/cache=32m/pmlv=3/seg=128k/tbl=2m/relink=0/entry=1/copy=30",
            &s,
        )
        .unwrap();
        assert_eq!(o.nvcache_cache_bytes, 32 << 20);
        assert_eq!(o.nvcache_pm_levels, 3);
        assert_eq!(o.nvcache_segment_bytes, 128 << 10);
        assert_eq!(o.nvcache_table_bytes, 2 << 20);
        assert_eq!(o.nvcache_relink, NvRelink::ArrayOnly);
        assert_eq!(o.nvcache_append, NvAppend::PerEntry);
        assert_eq!(o.nvcache_copy_out_percent, 30);
        let o = options_for_spec(Preset::NvCache, "nvcache/paper=1", &s).unwrap();
        assert_eq!(o.nvcache_table_bytes, u64::MAX);
        assert_eq!(o.nvcache_copy_out_percent, 0);
        assert!(parse_knobs("nvcache/copy=101").is_err());
        assert!(parse_knobs("nvcache/relink=2").is_err());
    }
}
