//! Workloads: db_bench's benchmarks and YCSB's load and workloads A–F, as
//! streams of [`Op`]s over key numbers, and their execution on an engine.
//!
//! | name | operations | keys |
//! |---|---|---|
//! | `fillseq` | put | 0, 1, … num−1 (per thread, as db_bench) |
//! | `fillrandom`, `overwrite` | put | uniform in [0, num) |
//! | `readrandom` | get | uniform |
//! | `seekrandom` | seek + `seek_nexts` next | uniform |
//! | `readseq` | one iterator, `reads` entries | key order |
//! | `readwhilewriting` | get, plus one writer thread putting uniform keys | uniform |
//! | `overwrite-hotspot` | put | hotspot: 1% of the keys get 99% (NV-Cache Fig. 6) |
//! | `ycsb-load` | insert | 0 … num−1 split among threads, key numbers hashed |
//! | `ycsb-a` | 50% read, 50% update | zipfian |
//! | `ycsb-b` | 95% read, 5% update | zipfian |
//! | `ycsb-c` | 100% read | zipfian |
//! | `ycsb-d` | 95% read, 5% insert | latest |
//! | `ycsb-e` | 95% scan (1–100 entries, uniform), 5% insert | zipfian |
//! | `ycsb-f` | 50% read, 50% read-modify-write | zipfian |
//!
//! db_bench benchmarks run `num` writes or `reads` reads *per thread*, like
//! db_bench; YCSB phases split their operation count among the threads,
//! like YCSB. YCSB keys are the db_bench format of the FNV-64 hash of the
//! key number (YCSB's `insertorder=hashed`); a record is one value of
//! `value_size` bytes (1000 by default: YCSB's 10 fields × 100 B), and an
//! update rewrites the whole record. `--distribution` overrides the request
//! distribution of any random workload.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::engines::Engine;
use crate::error::{Error, Result};
use crate::keys::{fnv_hash64, format_key, Distribution, InsertCounter, KeyChooser, ValueGen};

/// One request, on key numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Write the key.
    Put(u64),
    /// Read the key.
    Get(u64),
    /// Seek to the key and read this many entries.
    Scan(u64, usize),
    /// Read the key, then write it.
    ReadModifyWrite(u64),
    /// Write a new key (YCSB insert).
    Insert(u64),
}

/// Whether a request counts as a read or a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Gets and scans.
    Read,
    /// Puts, inserts and read-modify-writes.
    Write,
}

/// The shape of a workload.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// Sequential puts (fillseq; ycsb-load with hashed keys).
    Sequential,
    /// A random mix, with the proportions of each operation.
    Mix {
        /// Share of gets.
        read: f64,
        /// Share of updates (puts of existing keys).
        update: f64,
        /// Share of inserts (new keys).
        insert: f64,
        /// Share of scans.
        scan: f64,
        /// Share of read-modify-writes.
        rmw: f64,
    },
    /// One iterator over the whole database (readseq).
    ReadSeq,
}

/// A workload, ready to run.
#[derive(Debug)]
pub struct Workload {
    /// The benchmark name (`fillrandom`, `ycsb-a`, …).
    pub name: String,
    /// Its shape.
    pub kind: Kind,
    /// Key numbers live in `[0, num)` (plus YCSB inserts beyond).
    pub num: u64,
    /// Total operations of a YCSB phase, or per thread for db_bench.
    pub ops: u64,
    /// True if `ops` is per thread (db_bench), false if total (YCSB).
    pub ops_per_thread: bool,
    /// Key size in bytes.
    pub key_size: usize,
    /// Value size in bytes.
    pub value_size: usize,
    /// Request distribution of random operations.
    pub distribution: Distribution,
    /// YCSB keys: hash key numbers before formatting them.
    pub hashed_keys: bool,
    /// Entries per seek (`seekrandom`: 1 + `seek_nexts`).
    pub seek_len: usize,
    /// Run one extra writer thread while the workload runs (readwhilewriting).
    pub background_writer: bool,
    /// Hands out key numbers for inserts (starts at `num`).
    pub inserts: InsertCounter,
    /// Seed of the request streams (the same for every configuration).
    pub seed: u64,
}

/// Parameters shared by every workload of a run.
#[derive(Debug, Clone)]
pub struct WorkloadParams {
    /// db_bench `--num`: keys of a fill (and the key space).
    pub num: u64,
    /// db_bench `--reads`: reads per thread (default `num`); YCSB: total ops.
    pub reads: u64,
    /// Key size.
    pub key_size: usize,
    /// Value size.
    pub value_size: usize,
    /// Overrides the request distribution of random workloads.
    pub distribution: Option<Distribution>,
    /// db_bench `--seek_nexts`.
    pub seek_nexts: usize,
    /// Seed.
    pub seed: u64,
}

/// Every benchmark name [`Workload::new`] accepts.
pub const BENCHMARKS: [&str; 15] = [
    "fillseq",
    "fillrandom",
    "overwrite",
    "overwrite-hotspot",
    "readrandom",
    "readseq",
    "seekrandom",
    "readwhilewriting",
    "ycsb-load",
    "ycsb-a",
    "ycsb-b",
    "ycsb-c",
    "ycsb-d",
    "ycsb-e",
    "ycsb-f",
];

/// True for benchmark names that write the data set (used for space checks
/// and to pick the write-heavy plots).
pub fn is_fill(name: &str) -> bool {
    matches!(
        name,
        "fillseq" | "fillrandom" | "overwrite" | "overwrite-hotspot" | "ycsb-load"
    )
}

impl Workload {
    /// The workload called `name`.
    pub fn new(name: &str, p: &WorkloadParams) -> Result<Workload> {
        let mix = |read, update, insert, scan, rmw| Kind::Mix {
            read,
            update,
            insert,
            scan,
            rmw,
        };
        let ycsb = name.starts_with("ycsb-");
        let (kind, ops, default_dist) = match name {
            "fillseq" => (Kind::Sequential, p.num, Distribution::Uniform),
            "fillrandom" | "overwrite" => (mix(0., 1., 0., 0., 0.), p.num, Distribution::Uniform),
            "overwrite-hotspot" => (mix(0., 1., 0., 0., 0.), p.num, Distribution::HotSpot),
            "readrandom" | "readwhilewriting" => {
                (mix(1., 0., 0., 0., 0.), p.reads, Distribution::Uniform)
            }
            "seekrandom" => (mix(0., 0., 0., 1., 0.), p.reads, Distribution::Uniform),
            "readseq" => (Kind::ReadSeq, p.reads, Distribution::Uniform),
            "ycsb-load" => (Kind::Sequential, p.num, Distribution::Uniform),
            "ycsb-a" => (mix(0.5, 0.5, 0., 0., 0.), p.reads, Distribution::Zipfian),
            "ycsb-b" => (mix(0.95, 0.05, 0., 0., 0.), p.reads, Distribution::Zipfian),
            "ycsb-c" => (mix(1., 0., 0., 0., 0.), p.reads, Distribution::Zipfian),
            "ycsb-d" => (mix(0.95, 0., 0.05, 0., 0.), p.reads, Distribution::Latest),
            "ycsb-e" => (mix(0., 0., 0.05, 0.95, 0.), p.reads, Distribution::Zipfian),
            "ycsb-f" => (mix(0.5, 0., 0., 0., 0.5), p.reads, Distribution::Zipfian),
            _ => {
                return Err(Error::Usage(format!(
                    "unknown benchmark `{name}`; benchmarks: {}",
                    BENCHMARKS.join(", ")
                )))
            }
        };
        if p.key_size == 0 || p.value_size == 0 {
            return Err(Error::Usage(
                "key_size and value_size must be positive".into(),
            ));
        }
        Ok(Workload {
            name: name.to_string(),
            kind,
            num: p.num.max(1),
            ops,
            ops_per_thread: !ycsb,
            key_size: p.key_size,
            value_size: p.value_size,
            distribution: p.distribution.unwrap_or(default_dist),
            hashed_keys: ycsb,
            seek_len: if ycsb { 100 } else { 1 + p.seek_nexts },
            background_writer: name == "readwhilewriting",
            inserts: InsertCounter::new(p.num.max(1)),
            // Each benchmark draws its own stream (readrandom must not replay
            // fillrandom's keys), the same one for every configuration.
            seed: p.seed
                ^ name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
                }),
        })
    }

    /// Operations thread `t` of `threads` runs in a closed loop.
    pub fn ops_for_thread(&self, t: usize, threads: usize) -> u64 {
        if self.ops_per_thread {
            self.ops
        } else {
            split(self.ops, t, threads).1 - split(self.ops, t, threads).0
        }
    }

    /// Total operations over `threads` threads.
    pub fn total_ops(&self, threads: usize) -> u64 {
        if self.ops_per_thread {
            self.ops * threads as u64
        } else {
            self.ops
        }
    }

    /// The op stream of part `part` of `parts` (a closed-loop thread, or
    /// the single generator of an open loop with `parts` = 1).
    pub fn stream(&self, part: usize, parts: usize) -> OpStream<'_> {
        let (lo, hi) = if self.ops_per_thread {
            (0, self.num)
        } else {
            split(self.num, part, parts)
        };
        OpStream {
            w: self,
            rng: SmallRng::seed_from_u64(self.seed.wrapping_add(0x9e37_79b9 * (part as u64 + 1))),
            chooser: KeyChooser::new(self.distribution, self.num),
            seq: lo,
            seq_lo: lo,
            seq_hi: hi.max(lo + 1),
        }
    }

    /// Writes the key of key number `v` into `out`.
    pub fn key(&self, v: u64, out: &mut Vec<u8>) {
        let v = if self.hashed_keys { fnv_hash64(v) } else { v };
        format_key(v, self.key_size, out);
    }
}

/// Bounds of part `i` of `n` of `[0, total)`.
fn split(total: u64, i: usize, n: usize) -> (u64, u64) {
    let n = n.max(1) as u64;
    let i = i as u64;
    (total * i / n, total * (i + 1) / n)
}

/// A stream of requests (one per closed-loop thread, or the open-loop
/// generator's).
pub struct OpStream<'a> {
    w: &'a Workload,
    rng: SmallRng,
    chooser: KeyChooser,
    seq: u64,
    seq_lo: u64,
    seq_hi: u64,
}

impl OpStream<'_> {
    /// The next request.
    pub fn next_op(&mut self) -> Op {
        match &self.w.kind {
            Kind::Sequential | Kind::ReadSeq => {
                let v = self.seq;
                self.seq += 1;
                if self.seq >= self.seq_hi {
                    self.seq = self.seq_lo;
                }
                if self.w.hashed_keys {
                    Op::Insert(v)
                } else {
                    Op::Put(v)
                }
            }
            Kind::Mix {
                read,
                update,
                insert,
                scan,
                rmw: _,
            } => {
                let x: f64 = if *read == 1.0 || *update == 1.0 || *scan == 1.0 {
                    0.0
                } else {
                    self.rng.gen()
                };
                let which = if *read == 1.0 || x < *read {
                    0
                } else if *update == 1.0 || x < read + update {
                    1
                } else if x < read + update + insert {
                    2
                } else if *scan == 1.0 || x < read + update + insert + scan {
                    3
                } else {
                    4
                };
                if which == 2 {
                    return Op::Insert(self.w.inserts.take());
                }
                let k = self.chooser.next(&mut self.rng, self.w.inserts.count());
                match which {
                    0 => Op::Get(k),
                    1 => Op::Put(k),
                    3 => {
                        let len = if self.w.hashed_keys {
                            self.rng.gen_range(1..=self.w.seek_len)
                        } else {
                            self.w.seek_len
                        };
                        Op::Scan(k, len)
                    }
                    _ => Op::ReadModifyWrite(k),
                }
            }
        }
    }
}

/// What one executed request did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Outcome {
    /// Read or write.
    pub class: Option<Class>,
    /// Bytes for db_bench's MB/s (key + value written, or read when found).
    pub bytes: u64,
    /// Key + value bytes written (user bytes).
    pub written: u64,
    /// For reads: whether the key was found.
    pub found: bool,
}

/// Executes requests of one workload on one engine (one per thread).
pub struct Executor<'a> {
    engine: &'a dyn Engine,
    w: &'a Workload,
    key: Vec<u8>,
    value: Vec<u8>,
    values: ValueGen,
}

impl<'a> Executor<'a> {
    /// An executor for thread `t`.
    pub fn new(engine: &'a dyn Engine, w: &'a Workload, t: usize) -> Executor<'a> {
        Executor {
            engine,
            w,
            key: Vec::with_capacity(w.key_size),
            value: Vec::with_capacity(w.value_size),
            values: ValueGen::new(w.seed.wrapping_add(t as u64), w.value_size),
        }
    }

    /// Runs one request.
    pub fn execute(&mut self, op: Op) -> Result<Outcome> {
        let kv = (self.w.key_size + self.w.value_size) as u64;
        match op {
            Op::Put(v) | Op::Insert(v) => {
                self.w.key(v, &mut self.key);
                let val = self.values.next(self.w.value_size);
                self.engine.put(&self.key, val)?;
                Ok(Outcome {
                    class: Some(Class::Write),
                    bytes: kv,
                    written: kv,
                    found: false,
                })
            }
            Op::Get(v) => {
                self.w.key(v, &mut self.key);
                let found = self.engine.get(&self.key, &mut self.value)?;
                let bytes = if found {
                    (self.key.len() + self.value.len()) as u64
                } else {
                    0
                };
                Ok(Outcome {
                    class: Some(Class::Read),
                    bytes,
                    written: 0,
                    found,
                })
            }
            Op::Scan(v, n) => {
                self.w.key(v, &mut self.key);
                let mut bytes = 0u64;
                let seen = self.engine.scan(&self.key, n, &mut |k, val| {
                    bytes += (k.len() + val.len()) as u64;
                })?;
                Ok(Outcome {
                    class: Some(Class::Read),
                    bytes,
                    written: 0,
                    found: seen > 0,
                })
            }
            Op::ReadModifyWrite(v) => {
                self.w.key(v, &mut self.key);
                let found = self.engine.get(&self.key, &mut self.value)?;
                let val = self.values.next(self.w.value_size);
                self.engine.put(&self.key, val)?;
                Ok(Outcome {
                    class: Some(Class::Write),
                    bytes: kv,
                    written: kv,
                    found,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> WorkloadParams {
        WorkloadParams {
            num: 1000,
            reads: 400,
            key_size: 16,
            value_size: 100,
            distribution: None,
            seek_nexts: 0,
            seed: 1,
        }
    }

    #[test]
    fn fillseq_writes_in_key_order() {
        let w = Workload::new("fillseq", &params()).unwrap_or_else(|e| panic!("{e}"));
        let mut s = w.stream(0, 1);
        let mut prev = Vec::new();
        for i in 0..1000 {
            assert_eq!(s.next_op(), Op::Put(i));
            let mut k = Vec::new();
            w.key(i, &mut k);
            assert!(k > prev);
            prev = k;
        }
        assert_eq!(w.total_ops(2), 2000);
    }

    #[test]
    fn ycsb_load_splits_and_hashes() {
        let w = Workload::new("ycsb-load", &params()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            w.ops_for_thread(0, 3) + w.ops_for_thread(1, 3) + w.ops_for_thread(2, 3),
            1000
        );
        let mut s = w.stream(1, 2);
        assert_eq!(s.next_op(), Op::Insert(500));
        let (mut a, mut b) = (Vec::new(), Vec::new());
        w.key(1, &mut a);
        w.key(2, &mut b);
        assert_eq!(a.len(), 16);
        assert_ne!(&a[..7], &b[..7]);
    }

    #[test]
    fn ycsb_mixes_have_their_proportions() {
        let count = |name: &str| {
            let w = Workload::new(name, &params()).unwrap_or_else(|e| panic!("{e}"));
            let mut s = w.stream(0, 1);
            let mut c = [0u32; 5];
            for _ in 0..10_000 {
                match s.next_op() {
                    Op::Get(k) => {
                        assert!(k < 1000 + 10_000);
                        c[0] += 1
                    }
                    Op::Put(_) => c[1] += 1,
                    Op::Insert(_) => c[2] += 1,
                    Op::Scan(_, n) => {
                        assert!((1..=100).contains(&n));
                        c[3] += 1
                    }
                    Op::ReadModifyWrite(_) => c[4] += 1,
                }
            }
            c
        };
        let a = count("ycsb-a");
        assert!(
            (4700..5300).contains(&a[0]) && a[0] + a[1] == 10_000,
            "{a:?}"
        );
        let d = count("ycsb-d");
        assert!((300..700).contains(&d[2]) && d[0] + d[2] == 10_000, "{d:?}");
        let e = count("ycsb-e");
        assert!((9300..9700).contains(&e[3]), "{e:?}");
        let f = count("ycsb-f");
        assert!((4700..5300).contains(&f[4]), "{f:?}");
        assert_eq!(count("ycsb-c")[0], 10_000);
        assert!(Workload::new("nope", &params()).is_err());
    }

    #[test]
    fn benchmarks_draw_different_keys() {
        let keys = |name: &str| -> Vec<u64> {
            let w = Workload::new(name, &params()).unwrap_or_else(|e| panic!("{e}"));
            let mut s = w.stream(0, 1);
            (0..50)
                .map(|_| match s.next_op() {
                    Op::Put(k) | Op::Get(k) => k,
                    _ => u64::MAX,
                })
                .collect()
        };
        assert_ne!(keys("fillrandom"), keys("readrandom"));
    }

    #[test]
    fn same_seed_same_requests() {
        let w = Workload::new("fillrandom", &params()).unwrap_or_else(|e| panic!("{e}"));
        let a: Vec<Op> = {
            let mut s = w.stream(0, 1);
            (0..100).map(|_| s.next_op()).collect()
        };
        let b: Vec<Op> = {
            let mut s = w.stream(0, 1);
            (0..100).map(|_| s.next_op()).collect()
        };
        assert_eq!(a, b);
    }
}
