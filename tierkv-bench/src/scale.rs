//! The scales of BENCH.md: every size shrunk by the same factor so that the
//! papers' experiments fit a small machine.
//!
//! | scale | dataset | PM tier | memtable / SST | classic L1 |
//! |---|---|---|---|---|
//! | tiny | 64 MiB (16 Ki × 4 KiB) | 16 MiB | 4 MiB | 16 MiB |
//! | small | 1 GiB (256 Ki keys) | 100 MiB | 16 MiB | 64 MiB |
//! | medium | 4 GiB (1 Mi keys) | 400 MiB | 64 MiB | 256 MiB |
//! | paper10 | 8 GiB (2 Mi keys) | 800 MiB | 64 MiB | 256 MiB |
//! | leveldb10 | 512 MiB (128 Ki keys) | 64 MiB | 4 MiB | 10 MiB |
//! | vlsm-paper | 8 GiB (2 Mi keys) | 800 MiB | 32 MiB | 128 MiB, ×8 |
//! | tlsm10 | 1 GiB (100 B values: 10.7 Mi keys) | 1,600 MiB | 400 KiB / 200 KiB | 1 MiB |
//!
//! Other value sizes keep the dataset size and change the key count.
//!
//! `tlsm10` is the TLSM paper's setup divided by ten so that the level count
//! is kept (the spec's "At 1/10"): LevelDB 1.20's 4 MB write buffer, 2 MB
//! files and 10 MB L1 (×10) become 400 KiB, 200 KiB and 1 MiB; its 8–12 GB
//! loads 1 GiB (L1–L4, L4 not yet full, as the paper's 8 GB: 10 MB, 100 MB,
//! 1 GB, 10 GB); its 16 GB of emulated NVM 1,600 MiB (the paper's ≤ 12 GB
//! fit in it under `policy=none`; ours do not: 1 GiB of 100 B values with
//! their keys and nodes outgrow the tier, and `none` stops with "PM tier
//! full" — README "TLSM"), LRU's 8 GB capacity is the knob `lrucap=800m`; LevelDB's L0 triggers 4/8/12; 100 B values by default
//! (YCSB records stay 1000 B, the paper's 1 KB).
//!
//! `leveldb10` is the LevelDB-based papers' setup divided by ten (NV-Cache:
//! 5 GB loads, YCSB 5 M records and operations): LevelDB's 4 MiB memtables
//! and SSTs, 10 MiB L1, L0 triggers 4/8/12 (`l0_triggers`), a 64 MiB PM
//! tier, and 500 K YCSB operations.
//!
//! # `vlsm-paper`: the vLSM paper's main experiment, halved
//!
//! The vLSM paper (§5) loads 350 M × 200 B = 70 GB into 4 regions, so one
//! LSM holds 17.5 GB. RocksDB: 64 MB memtables and SSTs, L0 compacted at 4
//! files (256 MB), L1 = 256 MB, growth factor f = 8, at most 5 levels.
//! vLSM: 8 MB SSTs, L1 = f × SST = 64 MB, Φ = 32, then f:
//!
//! ```text
//!                 L0          L1       L2              L3           data / L3 target
//! RocksDB      4 × 64 MB   256 MB   × 8 = 2 GB     × 8 = 16 GB     (17.5 − 2.25) / 16 = 0.95
//! vLSM          queue      64 MB   × 32 = 2 GB     × 8 = 16 GB
//! ```
//!
//! Both put the data in L1–L3, the last level nearly full (memtable → L0 →
//! L1 → L2 → L3: the paper's "five levels, compaction chain length four").
//! `vlsm-paper` divides every size by two (8 GiB of data in one LSM; 2 Mi
//! keys of 4 KiB, 8 Mi YCSB records of 1000 B):
//!
//! ```text
//!                 memtable / SST   L0           L1        L2          L3          data / L3 target
//! RocksDB-like    32 MiB           4 × 32 MiB   128 MiB   ×8 = 1 GiB  ×8 = 8 GiB  (8 − 1.125) / 8 = 0.86
//! vlsm            4 MiB SSTs       32 SSTs      32 MiB    ×32 = 1 GiB ×8 = 8 GiB
//! ```
//!
//! `classic` and both RocksDB configurations get the RocksDB column
//! (`--max_bytes_for_level_multiplier` 8 at this scale, 10 elsewhere as in
//! RocksDB's default); `vlsm` gets SST = memtable / 8 = 4 MiB, f = 8, Φ = 32
//! (the bench's defaults), so L1 = 32 MiB and L2 = 1 GiB exactly as the
//! RocksDB-like L2. The same number of levels holds for 4–8 GiB of data:
//! with 4 GiB, L3 is 43% full instead of 86%. The PM tier is 10% of the data,
//! as at the other scales. Quartering instead (4 GiB, 16 MiB memtables,
//! 2 MiB vLSM SSTs) keeps the shape too, but the paper's Table 1 finds 2 MB
//! SSTs costly (CPU per op ×2.4 of 8 MB), so the halved sizes are the
//! default; `--num` and the size flags give the other.

const MIB: u64 = 1 << 20;

/// One of the BENCH.md scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// 64 MiB: tests and CI smoke runs.
    Tiny,
    /// 1 GiB: quick checks.
    Small,
    /// 4 GiB: the default comparison.
    Medium,
    /// 8 GiB: the papers' setup divided by ten.
    Paper10,
    /// 512 MiB with LevelDB's options: the LevelDB-based papers ÷ 10.
    Leveldb10,
    /// 8 GiB with the vLSM paper's level shape halved (module doc).
    VlsmPaper,
    /// 1 GiB of 100 B values with LevelDB's shape ÷ 10: the TLSM paper's
    /// setup (module doc).
    Tlsm10,
}

impl Scale {
    /// Every scale, smallest first.
    pub const ALL: [Scale; 7] = [
        Scale::Tiny,
        Scale::Small,
        Scale::Medium,
        Scale::Paper10,
        Scale::Leveldb10,
        Scale::VlsmPaper,
        Scale::Tlsm10,
    ];

    /// Parses a scale name.
    pub fn parse(s: &str) -> Option<Scale> {
        Scale::ALL.into_iter().find(|x| x.name() == s)
    }

    /// The name used on the command line and in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scale::Tiny => "tiny",
            Scale::Small => "small",
            Scale::Medium => "medium",
            Scale::Paper10 => "paper10",
            Scale::Leveldb10 => "leveldb10",
            Scale::VlsmPaper => "vlsm-paper",
            Scale::Tlsm10 => "tlsm10",
        }
    }

    /// Bytes of values in the dataset.
    pub fn dataset_bytes(self) -> u64 {
        match self {
            Scale::Tiny => 64 * MIB,
            Scale::Small | Scale::Tlsm10 => 1024 * MIB,
            Scale::Medium => 4096 * MIB,
            Scale::Paper10 | Scale::VlsmPaper => 8192 * MIB,
            Scale::Leveldb10 => 512 * MIB,
        }
    }

    /// Size of the PM tier (10% of the dataset).
    pub fn pm_size_bytes(self) -> u64 {
        match self {
            Scale::Tiny => 16 * MIB,
            Scale::Small => 100 * MIB,
            Scale::Medium => 400 * MIB,
            Scale::Paper10 | Scale::VlsmPaper => 800 * MIB,
            Scale::Leveldb10 => 64 * MIB,
            Scale::Tlsm10 => 1600 * MIB,
        }
    }

    /// Memtable size.
    pub fn memtable_size_bytes(self) -> u64 {
        match self {
            Scale::Tiny | Scale::Leveldb10 => 4 * MIB,
            Scale::Small => 16 * MIB,
            Scale::Medium | Scale::Paper10 => 64 * MIB,
            Scale::VlsmPaper => 32 * MIB,
            Scale::Tlsm10 => 400 * 1024,
        }
    }

    /// SST target size: the memtable size, but LevelDB's half of it (2 MB
    /// files, 4 MB write buffer) at `tlsm10`.
    pub fn sst_size_bytes(self) -> u64 {
        match self {
            Scale::Tlsm10 => self.memtable_size_bytes() / 2,
            _ => self.memtable_size_bytes(),
        }
    }

    /// Value size of the non-YCSB benchmarks unless `--value_size` says:
    /// 4 KiB, or the TLSM paper's 100 B at `tlsm10`.
    pub fn value_size(self) -> usize {
        match self {
            Scale::Tlsm10 => 100,
            _ => 4096,
        }
    }

    /// L1 target size of the classic design (and of RocksDB).
    pub fn l1_size_bytes(self) -> u64 {
        match self {
            Scale::Tiny => 16 * MIB,
            Scale::Small => 64 * MIB,
            Scale::Medium | Scale::Paper10 => 256 * MIB,
            Scale::Leveldb10 => 10 * MIB,
            Scale::VlsmPaper => 128 * MIB,
            Scale::Tlsm10 => MIB,
        }
    }

    /// Growth factor between levels below L1 of the classic design and of
    /// RocksDB: RocksDB's default 10, and the vLSM paper's f = 8 at
    /// `vlsm-paper`.
    pub fn level_multiplier(self) -> u64 {
        match self {
            Scale::VlsmPaper => 8,
            _ => 10,
        }
    }

    /// L0 compaction, slowdown and stop triggers: RocksDB's 4/20/36, or
    /// LevelDB's 4/8/12 at `leveldb10` and `tlsm10`.
    pub fn l0_triggers(self) -> (usize, usize, usize) {
        match self {
            Scale::Leveldb10 | Scale::Tlsm10 => (4, 8, 12),
            _ => (4, 20, 36),
        }
    }

    /// Key count for values of `value_size` bytes: dataset / value size.
    pub fn key_count(self, value_size: usize) -> u64 {
        (self.dataset_bytes() / value_size.max(1) as u64).max(1)
    }

    /// Operations of a YCSB run phase: the key count at 4 KiB values
    /// (1 Mi at `medium`, as BENCH.md's "1 M operations").
    pub fn ycsb_ops(self) -> u64 {
        match self {
            // NV-Cache's 5 M operations ÷ 10 (the TLSM paper gives no
            // count: the same at `tlsm10`).
            Scale::Leveldb10 | Scale::Tlsm10 => 500_000,
            _ => self.key_count(4096),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_counts_match_bench_md() {
        assert_eq!(Scale::Tiny.key_count(4096), 16 * 1024);
        assert_eq!(Scale::Small.key_count(4096), 256 * 1024);
        assert_eq!(Scale::Medium.key_count(4096), 1024 * 1024);
        assert_eq!(Scale::Paper10.key_count(4096), 2 * 1024 * 1024);
        // Other value sizes keep the dataset.
        assert_eq!(Scale::Tiny.key_count(256), 256 * 1024);
        // The TLSM paper's 8 GB of 100 B values ÷ 10 (and its 4 MB / 2 MB
        // / 10 MB LevelDB sizes ÷ 10).
        assert_eq!(
            Scale::Tlsm10.key_count(Scale::Tlsm10.value_size()),
            10_737_418
        );
        assert_eq!(Scale::Tlsm10.sst_size_bytes(), 200 * 1024);
        for s in Scale::ALL {
            assert_eq!(Scale::parse(s.name()), Some(s));
            assert!(s.memtable_size_bytes() <= s.l1_size_bytes());
        }
    }

    /// The arithmetic of the module doc: at `vlsm-paper`, vLSM's L2 (Φ ×
    /// f × SST) equals the RocksDB-like L2, and both hold the dataset in
    /// L1–L3 with L3 the last, as the paper's 17.5 GB per region does.
    #[test]
    fn vlsm_paper_keeps_the_papers_levels() {
        let levels = |data: u64, l1: u64, growth: &[u64]| -> usize {
            // Levels below L0 needed to hold `data`: L1, then × growth.
            let (mut cap, mut t, mut n) = (l1, l1, 1);
            for g in growth.iter().cycle() {
                if cap >= data {
                    break;
                }
                t *= g;
                cap += t;
                n += 1;
            }
            n
        };
        const GB: u64 = 1 << 30;
        let paper = 17 * GB + GB / 2;
        let (f, phi) = (8, 32);
        assert_eq!(levels(paper, 256 * MIB, &[f]), 3);
        assert_eq!(levels(paper, 8 * MIB * f, &[phi, f, f, f]), 3);
        let s = Scale::VlsmPaper;
        let data = s.dataset_bytes();
        let vlsm_sst = s.memtable_size_bytes() / 8;
        assert_eq!(vlsm_sst, 4 * MIB);
        assert_eq!(vlsm_sst * f * phi, s.l1_size_bytes() * s.level_multiplier());
        for d in [data / 2, data] {
            assert_eq!(levels(d, s.l1_size_bytes(), &[s.level_multiplier()]), 3);
            assert_eq!(levels(d, vlsm_sst * f, &[phi, f, f, f]), 3);
        }
    }
}
