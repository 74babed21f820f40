//! The full-file bloom filter over *user keys*.
//!
//! # Layout
//!
//! ```text
//! filter = bits: [u8; m / 8] ‖ k: u8          (an empty filter = no filter)
//! ```
//!
//! With `n` distinct user keys and `bits_per_key` = b, `m = max(64, n·b)`
//! rounded up to a multiple of 8, and `k = round(b · ln 2)` clamped to
//! `1..=30` probes. A key's probes come from one 64-bit xxh3 hash `h` by
//! double hashing: `h_0 = h`, `h_{i+1} = h_i + δ` (wrapping) with
//! `δ = rotl(h, 31) | 1`, and probe `i` sets bit `⌊h_i · m / 2^64⌋`
//! (a multiply-shift range reduction instead of a modulo). Bit `j` is bit
//! `j % 8` of byte `j / 8`.
//!
//! Worked example: one key, b = 10 → m = 64 bits (8 bytes), k = 7; the
//! filter is 9 bytes: the 8 bytes with (up to) 7 bits set, then `07`.
//!
//! At 10 bits per key the false-positive rate is ≈ 0.8 %; there are no
//! false negatives.
//!
//! # Invariants
//!
//! 1. A filter is either empty (the table has no filter: every key may be
//!    present) or has at least one byte of bits and `1 <= k <= 30`.
//!
//! # Concurrency
//!
//! [`BloomFilter`] is immutable and shared; [`BloomBuilder`] is owned by the
//! one thread building a table.

use xxhash_rust::xxh3::xxh3_64;

/// Most probes a filter may use.
pub const MAX_PROBES: u32 = 30;

/// The hash every filter probe is derived from.
#[inline]
pub fn bloom_hash(user_key: &[u8]) -> u64 {
    xxh3_64(user_key)
}

/// Probes for `bits_per_key`: `round(b · ln 2)` clamped to `1..=30`.
pub fn probes_for(bits_per_key: usize) -> u32 {
    let k = (bits_per_key as f64 * std::f64::consts::LN_2).round();
    (k as u32).clamp(1, MAX_PROBES)
}

#[inline]
fn bit_index(h: u64, nbits: u64) -> u64 {
    ((u128::from(h) * u128::from(nbits)) >> 64) as u64
}

#[inline]
fn delta(h: u64) -> u64 {
    h.rotate_left(31) | 1
}

/// Collects key hashes while a table is built, then lays out the filter.
#[derive(Debug, Clone)]
pub struct BloomBuilder {
    bits_per_key: usize,
    hashes: Vec<u64>,
}

impl BloomBuilder {
    /// A builder for `bits_per_key` bits per key (0: no filter).
    pub fn new(bits_per_key: usize) -> Self {
        BloomBuilder {
            bits_per_key,
            hashes: Vec::new(),
        }
    }

    /// Adds a user key. Consecutive duplicates (versions of one key) are
    /// stored once.
    #[inline]
    pub fn add_key(&mut self, user_key: &[u8]) {
        if self.bits_per_key == 0 {
            return;
        }
        let h = bloom_hash(user_key);
        if self.hashes.last() != Some(&h) {
            self.hashes.push(h);
        }
    }

    /// Bits per key (0: this builder makes no filter).
    pub fn bits_per_key(&self) -> usize {
        self.bits_per_key
    }

    /// Hashes stored so far.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// True if no key was added.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Lays out the filter (see the module docs) and forgets the keys.
    /// Empty when `bits_per_key` is 0.
    pub fn finish(&mut self) -> Vec<u8> {
        if self.bits_per_key == 0 {
            return Vec::new();
        }
        let k = probes_for(self.bits_per_key);
        let nbits = (self.hashes.len() as u64)
            .saturating_mul(self.bits_per_key as u64)
            .max(64);
        let nbytes = nbits.div_ceil(8) as usize;
        let nbits = nbytes as u64 * 8;
        let mut out = vec![0u8; nbytes + 1];
        for &h0 in &self.hashes {
            let d = delta(h0);
            let mut h = h0;
            for _ in 0..k {
                let bit = bit_index(h, nbits);
                out[(bit / 8) as usize] |= 1 << (bit % 8);
                h = h.wrapping_add(d);
            }
        }
        out[nbytes] = k as u8;
        self.hashes.clear();
        out
    }
}

/// A filter read back from a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BloomFilter {
    /// Bits followed by the probe count; empty = no filter.
    data: Vec<u8>,
    nbits: u64,
    k: u32,
}

impl BloomFilter {
    /// Wraps filter bytes; `None` if they break invariant 1 (the caller
    /// reports corruption with the location).
    pub fn new(data: Vec<u8>) -> Option<BloomFilter> {
        if data.is_empty() {
            return Some(BloomFilter {
                data,
                nbits: 0,
                k: 0,
            });
        }
        let k = u32::from(*data.last()?);
        if data.len() < 2 || !(1..=MAX_PROBES).contains(&k) {
            return None;
        }
        let nbits = (data.len() as u64 - 1) * 8;
        Some(BloomFilter { data, nbits, k })
    }

    /// True if the table has no filter (every key may be present).
    pub fn is_empty(&self) -> bool {
        self.nbits == 0
    }

    /// Size of the filter in bytes.
    pub fn size_bytes(&self) -> usize {
        self.data.len()
    }

    /// False only if `user_key` is certainly not in the table.
    #[inline]
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.may_contain_hash(bloom_hash(user_key))
    }

    /// [`BloomFilter::may_contain`] for a precomputed [`bloom_hash`].
    #[inline]
    pub fn may_contain_hash(&self, h0: u64) -> bool {
        if self.nbits == 0 {
            return true;
        }
        let d = delta(h0);
        let mut h = h0;
        for _ in 0..self.k {
            let bit = bit_index(h, self.nbits);
            // bit < nbits = 8 * (len - 1), so the index is in bounds.
            let byte = self.data.get((bit / 8) as usize).copied().unwrap_or(0xff);
            if byte & (1 << (bit % 8)) == 0 {
                return false;
            }
            h = h.wrapping_add(d);
        }
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(i: u64) -> Vec<u8> {
        format!("user-key-{i:010}").into_bytes()
    }

    #[test]
    fn probes() {
        assert_eq!(probes_for(0), 1);
        assert_eq!(probes_for(1), 1);
        assert_eq!(probes_for(10), 7);
        assert_eq!(probes_for(64), 30);
    }

    #[test]
    fn no_false_negatives_and_about_one_percent_false_positives() {
        for n in [1u64, 10, 100, 1000, 10_000, 50_000] {
            let mut b = BloomBuilder::new(10);
            for i in 0..n {
                b.add_key(&key(i));
            }
            let f = BloomFilter::new(b.finish()).unwrap();
            for i in 0..n {
                assert!(f.may_contain(&key(i)), "false negative n={n} i={i}");
            }
            let probes = 20_000u64;
            let fp = (0..probes)
                .filter(|i| f.may_contain(&key(1_000_000_000 + i)))
                .count();
            let rate = fp as f64 / probes as f64;
            if n >= 1000 {
                assert!(rate < 0.0125, "n={n} fp rate {rate}");
            } else {
                assert!(rate < 0.03, "n={n} fp rate {rate}");
            }
        }
    }

    #[test]
    fn empty_and_disabled() {
        let mut b = BloomBuilder::new(10);
        let f = BloomFilter::new(b.finish()).unwrap();
        assert!(!f.may_contain(b"x"));
        let mut b = BloomBuilder::new(0);
        b.add_key(b"x");
        let data = b.finish();
        assert!(data.is_empty());
        let f = BloomFilter::new(data).unwrap();
        assert!(f.may_contain(b"anything"));
    }

    #[test]
    fn rejects_bad_probe_count() {
        assert!(BloomFilter::new(vec![0xff]).is_none());
        assert!(BloomFilter::new(vec![0xff, 0]).is_none());
        assert!(BloomFilter::new(vec![0xff, 31]).is_none());
        assert!(BloomFilter::new(vec![0xff, 30]).is_some());
    }
}
