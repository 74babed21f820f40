//! Keys, values and request distributions, shared by every engine so that
//! all configurations of a run see exactly the same requests.
//!
//! # Key format (db_bench)
//!
//! A key number `v` becomes `key_size` bytes: the low `min(key_size, 8)`
//! bytes of `v` in big-endian order, then ASCII `'0'` padding. With the
//! default 16-byte keys:
//!
//! ```text
//!  v = 0x0102_0304_0506_0708, key_size = 16
//!  01 02 03 04 05 06 07 08 | 30 30 30 30 30 30 30 30
//!  `-- v big-endian ------'   `-- '0' padding ------'
//! ```
//!
//! so numeric order is byte order and `fillseq` writes in key order, exactly
//! as RocksDB's `db_bench` (`GenerateKeyFromInt`) does.
//!
//! # Distributions
//!
//! - uniform: every key number in `[0, n)` equally likely (db_bench's
//!   `rand % num`).
//! - zipfian: YCSB's generator (Gray et al., θ = 0.99). Item 0 is the hottest.
//! - scrambled zipfian (YCSB's default "zipfian" request distribution): a
//!   zipfian draw over 10¹⁰ items, hashed with FNV-1a-64 and reduced modulo
//!   `n`, so the hot keys are spread over the key space.
//! - latest (YCSB): zipfian over recency — the most recently inserted key is
//!   the hottest; the generator grows with the insert counter.
//! - hotspot (NV-Cache's Fig. 6 "skewed insert"): 1% of the keys get 99% of
//!   the requests. The hot keys are every 100th key number (so they are
//!   spread over the key space); a request is for a hot key, uniform among
//!   them, with probability 0.99, else for a uniform key of the whole space.
//!
//! # Concurrency
//!
//! Generators are per thread (`&mut self`); only [`InsertCounter`] is shared.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

/// YCSB's zipfian constant.
pub const ZIPFIAN_THETA: f64 = 0.99;
/// Items of YCSB's scrambled zipfian generator.
const SCRAMBLED_ITEMS: u64 = 10_000_000_000;
/// ζ(10¹⁰, 0.99), precomputed by YCSB (`ScrambledZipfianGenerator.ZETAN`).
const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// Writes the db_bench key of number `v` into `out` (cleared first).
pub fn format_key(v: u64, key_size: usize, out: &mut Vec<u8>) {
    out.clear();
    let fill = key_size.min(8);
    for i in 0..fill {
        out.push((v >> ((fill - i - 1) * 8)) as u8);
    }
    out.resize(key_size, b'0');
}

/// YCSB's FNV-1a 64-bit hash of the 8 little-endian bytes of `v`, made
/// non-negative as Java's `Math.abs` does.
pub fn fnv_hash64(v: u64) -> u64 {
    const OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 1_099_511_628_211;
    let mut h = OFFSET;
    let mut x = v;
    for _ in 0..8 {
        h ^= x & 0xff;
        h = h.wrapping_mul(PRIME);
        x >>= 8;
    }
    (h as i64).unsigned_abs()
}

/// The request distribution of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// YCSB's scrambled zipfian (θ = 0.99).
    Zipfian,
    /// YCSB's "latest": zipfian over recency.
    Latest,
    /// 1% of the keys get 99% of the requests (NV-Cache's skewed updates).
    HotSpot,
}

/// Share of the key space that is hot under [`Distribution::HotSpot`].
pub const HOT_KEY_FRACTION: f64 = 0.01;
/// Share of the requests that go to the hot keys.
pub const HOT_OP_FRACTION: f64 = 0.99;

impl Distribution {
    /// Parses `uniform`, `zipfian` or `latest`.
    pub fn parse(s: &str) -> Option<Distribution> {
        match s {
            "uniform" => Some(Distribution::Uniform),
            "zipfian" => Some(Distribution::Zipfian),
            "latest" => Some(Distribution::Latest),
            "hotspot" => Some(Distribution::HotSpot),
            _ => None,
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Zipfian => "zipfian",
            Distribution::Latest => "latest",
            Distribution::HotSpot => "hotspot",
        }
    }
}

fn zeta(from: u64, to: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in from..to {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// YCSB's zipfian generator over `[0, items)`; item 0 is the most popular.
///
/// Invariant: `zetan` = ζ(`items`, θ); growing `items` extends the sum
/// incrementally, as YCSB does for the "latest" distribution.
#[derive(Debug, Clone)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zeta2: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    /// A generator over `items` items (at least 1); computes ζ in O(items).
    pub fn new(items: u64) -> Zipfian {
        let items = items.max(1);
        let zetan = zeta(0, items, ZIPFIAN_THETA, 0.0);
        Zipfian::with_zetan(items, ZIPFIAN_THETA, zetan)
    }

    fn with_zetan(items: u64, theta: f64, zetan: f64) -> Zipfian {
        let zeta2 = zeta(0, 2, theta, 0.0);
        let mut z = Zipfian {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta2,
            zetan,
            eta: 0.0,
        };
        z.eta = z.compute_eta();
        z
    }

    fn compute_eta(&self) -> f64 {
        (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
    }

    /// Number of items.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// Grows the item count (never shrinks), extending ζ incrementally.
    pub fn grow_to(&mut self, items: u64) {
        if items > self.items {
            self.zetan = zeta(self.items, items, self.theta, self.zetan);
            self.items = items;
            self.eta = self.compute_eta();
        }
    }

    /// Draws an item in `[0, items)`.
    pub fn next(&self, rng: &mut impl RngCore) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.items - 1);
        }
        let v = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        v.min(self.items - 1)
    }
}

/// Counts inserted keys; shared by the threads of a YCSB run so that
/// inserts get fresh key numbers and "latest" reads follow them.
#[derive(Debug, Default)]
pub struct InsertCounter(AtomicU64);

impl InsertCounter {
    /// A counter whose next key number is `next`.
    pub fn new(next: u64) -> InsertCounter {
        InsertCounter(AtomicU64::new(next))
    }
    /// Takes the next key number to insert.
    pub fn take(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
    /// Number of key numbers handed out so far.
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A per-thread key chooser for one distribution.
#[derive(Debug, Clone)]
pub enum KeyChooser {
    /// Uniform over `[0, n)`.
    Uniform {
        /// Key count.
        n: u64,
    },
    /// Scrambled zipfian over `[0, n)`.
    Zipfian {
        /// Key count.
        n: u64,
        /// The 10¹⁰-item generator.
        gen: Zipfian,
    },
    /// Latest: zipfian over recency, following an insert counter.
    Latest {
        /// Zipfian over the current key count.
        gen: Zipfian,
    },
    /// 1% hot keys (every 100th) get 99% of the draws.
    HotSpot {
        /// Key count.
        n: u64,
        /// Hot keys.
        hot: u64,
    },
}

impl KeyChooser {
    /// A chooser over `n` keys (at least 1).
    pub fn new(dist: Distribution, n: u64) -> KeyChooser {
        let n = n.max(1);
        match dist {
            Distribution::Uniform => KeyChooser::Uniform { n },
            Distribution::Zipfian => KeyChooser::Zipfian {
                n,
                gen: Zipfian::with_zetan(SCRAMBLED_ITEMS, ZIPFIAN_THETA, SCRAMBLED_ZETAN),
            },
            Distribution::Latest => KeyChooser::Latest {
                gen: Zipfian::new(n),
            },
            Distribution::HotSpot => KeyChooser::HotSpot {
                n,
                hot: ((n as f64 * HOT_KEY_FRACTION) as u64).max(1),
            },
        }
    }

    /// Draws a key number. `inserted` is the number of keys inserted so far
    /// (only "latest" uses it; it must be at least 1).
    pub fn next(&mut self, rng: &mut impl RngCore, inserted: u64) -> u64 {
        match self {
            KeyChooser::Uniform { n } => rng.gen_range(0..*n),
            KeyChooser::Zipfian { n, gen } => fnv_hash64(gen.next(rng)) % *n,
            KeyChooser::Latest { gen } => {
                let count = inserted.max(1);
                gen.grow_to(count);
                let back = gen.next(rng).min(count - 1);
                count - 1 - back
            }
            KeyChooser::HotSpot { n, hot } => {
                if rng.gen_bool(HOT_OP_FRACTION) {
                    // Spread the hot keys over the key space.
                    rng.gen_range(0..*hot) * (*n / *hot)
                } else {
                    rng.gen_range(0..*n)
                }
            }
        }
    }
}

/// A source of value bytes: a random buffer read at a rolling offset, as
/// db_bench's `RandomGenerator` (values are incompressible here; the runs
/// use no compression).
pub struct ValueGen {
    data: Vec<u8>,
    pos: usize,
}

impl ValueGen {
    /// A generator for values of up to `max_len` bytes.
    pub fn new(seed: u64, max_len: usize) -> ValueGen {
        let len = (1 << 20).max(2 * max_len);
        let mut data = vec![0u8; len];
        SmallRng::seed_from_u64(seed ^ 0x5eed_7a1e).fill_bytes(&mut data);
        ValueGen { data, pos: 0 }
    }

    /// The next value of `len` bytes (`len` ≤ the `max_len` given at creation).
    pub fn next(&mut self, len: usize) -> &[u8] {
        debug_assert!(len * 2 <= self.data.len());
        if self.pos + len > self.data.len() {
            self.pos = 0;
        }
        let v = &self.data[self.pos..self.pos + len];
        self.pos += len;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn db_bench_key_format() {
        let mut k = Vec::new();
        format_key(0x0102_0304_0506_0708, 16, &mut k);
        assert_eq!(
            k,
            [1, 2, 3, 4, 5, 6, 7, 8, b'0', b'0', b'0', b'0', b'0', b'0', b'0', b'0']
        );
        format_key(5, 16, &mut k);
        assert_eq!(k.len(), 16);
        assert_eq!(&k[..8], &5u64.to_be_bytes());
        // Short keys keep the low bytes.
        format_key(0x0102, 4, &mut k);
        assert_eq!(k, [0, 0, 1, 2]);
        // Numeric order is byte order (fillseq writes in key order).
        let mut prev = Vec::new();
        for v in [0u64, 1, 255, 256, 65_535, 1 << 40] {
            format_key(v, 16, &mut k);
            assert!(k > prev);
            prev = k.clone();
        }
    }

    #[test]
    fn fnv_matches_ycsb() {
        // Eight rounds of xor-then-multiply over the bytes of 0.
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for _ in 0..8 {
            h = h.wrapping_mul(1_099_511_628_211);
        }
        assert_eq!(fnv_hash64(0), (h as i64).unsigned_abs());
        // Non-negative, and no collisions on a small range (hashed inserts).
        let mut seen = std::collections::HashSet::new();
        for v in 0..100_000u64 {
            let h = fnv_hash64(v);
            assert!(h < (1 << 63));
            assert!(seen.insert(h));
        }
    }

    #[test]
    fn hotspot_sends_99_percent_to_1_percent_of_keys() {
        let mut rng = SmallRng::seed_from_u64(3);
        let n = 100_000;
        let mut c = KeyChooser::new(Distribution::HotSpot, n);
        let mut hot = 0;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..100_000 {
            let k = c.next(&mut rng, n);
            assert!(k < n);
            if k.is_multiple_of(100) {
                hot += 1;
            }
            seen.insert(k);
        }
        // 99% hot draws, plus the 1% of cold draws that land on hot keys.
        assert!((98_800..99_200).contains(&hot), "{hot}");
        assert!(seen.iter().filter(|k| *k % 100 == 0).count() <= 1000);
        assert_eq!(Distribution::parse("hotspot"), Some(Distribution::HotSpot));
    }

    #[test]
    fn uniform_covers_range() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut c = KeyChooser::new(Distribution::Uniform, 10);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[c.next(&mut rng, 0) as usize] += 1;
        }
        assert!(seen.iter().all(|&s| (800..1200).contains(&s)), "{seen:?}");
    }

    #[test]
    fn zipfian_is_skewed_towards_item_zero() {
        let mut rng = SmallRng::seed_from_u64(2);
        let z = Zipfian::new(1000);
        let mut counts = vec![0u32; 1000];
        let draws = 200_000;
        for _ in 0..draws {
            counts[z.next(&mut rng) as usize] += 1;
        }
        // P(0) = 1 / ζ(1000, 0.99) ≈ 0.134.
        let p0 = counts[0] as f64 / draws as f64;
        let expect = 1.0 / zeta(0, 1000, ZIPFIAN_THETA, 0.0);
        assert!((p0 - expect).abs() < 0.01, "p0 {p0} expect {expect}");
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500]);
    }

    #[test]
    fn zipfian_grows_incrementally() {
        let mut a = Zipfian::new(100);
        a.grow_to(1000);
        let b = Zipfian::new(1000);
        assert!((a.zetan - b.zetan).abs() < 1e-9);
        assert!((a.eta - b.eta).abs() < 1e-9);
    }

    #[test]
    fn scrambled_zipfian_spreads_hot_keys() {
        let mut rng = SmallRng::seed_from_u64(3);
        let n = 10_000;
        let mut c = KeyChooser::new(Distribution::Zipfian, n);
        let mut counts: HashMap<u64, u32> = HashMap::new();
        let draws = 100_000;
        for _ in 0..draws {
            let k = c.next(&mut rng, 0);
            assert!(k < n);
            *counts.entry(k).or_default() += 1;
        }
        let mut by_freq: Vec<(u64, u32)> = counts.into_iter().collect();
        by_freq.sort_by_key(|e| std::cmp::Reverse(e.1));
        // Skewed: the hottest 1% of keys take a large share of requests.
        let top: u32 = by_freq.iter().take(100).map(|e| e.1).sum();
        // (Uniform would give 1%; YCSB's scrambled zipfian gives ≈ 20%.)
        assert!(top as f64 / draws as f64 > 0.15, "top 1% share {top}");
        // Scrambled: the hottest keys are not the lowest key numbers.
        let hottest: Vec<u64> = by_freq.iter().take(10).map(|e| e.0).collect();
        assert!(hottest.iter().any(|&k| k > n / 10), "{hottest:?}");
    }

    #[test]
    fn latest_favours_recent_inserts() {
        let mut rng = SmallRng::seed_from_u64(4);
        let mut c = KeyChooser::new(Distribution::Latest, 1000);
        let mut recent = 0;
        for _ in 0..10_000 {
            let k = c.next(&mut rng, 1000);
            assert!(k < 1000);
            if k >= 990 {
                recent += 1;
            }
        }
        // P(newest 1%) = ζ(10) / ζ(1000) ≈ 0.39 for θ = 0.99.
        assert!(recent > 3300, "recent {recent}");
        // It follows the insert counter as it grows.
        let mut newest = 0;
        for _ in 0..1000 {
            newest = newest.max(c.next(&mut rng, 5000));
        }
        assert_eq!(newest, 4999);
    }

    #[test]
    fn values_have_the_requested_length() {
        let mut g = ValueGen::new(7, 4096);
        for _ in 0..1000 {
            assert_eq!(g.next(4096).len(), 4096);
        }
    }
}
