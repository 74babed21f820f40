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
//!
//! Other value sizes keep the dataset size and change the key count.
//!
//! `leveldb10` is the LevelDB-based papers' setup divided by ten (NV-Cache:
//! 5 GB loads, YCSB 5 M records and operations): LevelDB's 4 MiB memtables
//! and SSTs, 10 MiB L1, L0 triggers 4/8/12 (`l0_triggers`), a 64 MiB PM
//! tier, and 500 K YCSB operations.

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
}

impl Scale {
    /// Every scale, smallest first.
    pub const ALL: [Scale; 5] = [
        Scale::Tiny,
        Scale::Small,
        Scale::Medium,
        Scale::Paper10,
        Scale::Leveldb10,
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
        }
    }

    /// Bytes of values in the dataset.
    pub fn dataset_bytes(self) -> u64 {
        match self {
            Scale::Tiny => 64 * MIB,
            Scale::Small => 1024 * MIB,
            Scale::Medium => 4096 * MIB,
            Scale::Paper10 => 8192 * MIB,
            Scale::Leveldb10 => 512 * MIB,
        }
    }

    /// Size of the PM tier (10% of the dataset).
    pub fn pm_size_bytes(self) -> u64 {
        match self {
            Scale::Tiny => 16 * MIB,
            Scale::Small => 100 * MIB,
            Scale::Medium => 400 * MIB,
            Scale::Paper10 => 800 * MIB,
            Scale::Leveldb10 => 64 * MIB,
        }
    }

    /// Memtable size, also the SST target size.
    pub fn memtable_size_bytes(self) -> u64 {
        match self {
            Scale::Tiny | Scale::Leveldb10 => 4 * MIB,
            Scale::Small => 16 * MIB,
            Scale::Medium | Scale::Paper10 => 64 * MIB,
        }
    }

    /// L1 target size of the classic design (and of RocksDB).
    pub fn l1_size_bytes(self) -> u64 {
        match self {
            Scale::Tiny => 16 * MIB,
            Scale::Small => 64 * MIB,
            Scale::Medium | Scale::Paper10 => 256 * MIB,
            Scale::Leveldb10 => 10 * MIB,
        }
    }

    /// L0 compaction, slowdown and stop triggers: RocksDB's 4/20/36, or
    /// LevelDB's 4/8/12 at `leveldb10`.
    pub fn l0_triggers(self) -> (usize, usize, usize) {
        match self {
            Scale::Leveldb10 => (4, 8, 12),
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
            // The paper's 5 M operations ÷ 10.
            Scale::Leveldb10 => 500_000,
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
        for s in Scale::ALL {
            assert_eq!(Scale::parse(s.name()), Some(s));
            assert!(s.memtable_size_bytes() <= s.l1_size_bytes());
        }
    }
}
