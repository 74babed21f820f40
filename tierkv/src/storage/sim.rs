//! A simulated PM region for crash tests.
//!
//! It keeps a *volatile* image (what loads and stores see: the CPU caches
//! plus media) and a *durable* image (what survives power loss). Only
//! [`PmRegion::persist`] moves bytes from the volatile to the durable image,
//! a 64-byte cache line at a time. [`SimRegion::crash`] returns a new region
//! whose both images are the durable one.
//!
//! Real caches may also write back a dirty line *before* it is persisted.
//! [`SimRegion::crash_with_evictions`] models that: each aligned 8-byte word
//! that differs between the images reaches the durable image with
//! probability ½ (a seeded choice), so a structure that relies on anything
//! but explicit persists and 8-byte atomic commits fails the tests.
//!
//! A machine stops at a power loss; a test's process does not: its threads
//! go on after the cut ([`Power::cut`], or a spent persist budget), their
//! syncs and persists silently dropped, so the engine believes edits
//! durable that are not, frees pages a durable table still lists and
//! writes into them. No such store can reach the media of a real machine:
//! the words written after the cut are recorded and never evicted into the
//! durable image.
//!
//! [`SimRegion::set_persist_budget`] lets only the next `n` persists take
//! effect, so a test can crash at every persist point of an operation;
//! [`SimRegion::persist_count`] counts them.
//!
//! Concurrency: the volatile image is written through a raw pointer under
//! the [`PmRegion`] contract (disjoint ranges; nothing rewritten while read).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::{PmRegion, Power};
use crate::error::{Error, Result};

/// Cache-line size the simulator persists at.
pub const CACHE_LINE: u64 = 64;

/// The simulated region.
pub struct SimRegion {
    name: String,
    /// The volatile image, as 8-byte words so that link words are aligned
    /// for atomic access; `len` bytes of it are the region.
    volatile: Box<[UnsafeCell<u64>]>,
    len: usize,
    durable: Mutex<Vec<u8>>,
    budget: Mutex<Option<u64>>,
    persists: AtomicU64,
    power: Mutex<Power>,
    /// Byte ranges stored after the power went (module doc): never
    /// evicted. Held while such a store is made, and by an eviction scan,
    /// so that a scan sees each one whole and recorded, or not at all.
    after_cut: Mutex<Vec<(usize, usize)>>,
}

// SAFETY: the volatile image is only accessed through raw pointers derived
// from the `UnsafeCell`s; the PmRegion contract (invariant 4) guarantees that
// concurrent accesses touch disjoint ranges or are all reads.
unsafe impl Sync for SimRegion {}
// SAFETY: owns its buffers; no thread-bound state.
unsafe impl Send for SimRegion {}

impl SimRegion {
    /// A zeroed region of `len` bytes.
    pub fn new(len: usize) -> Self {
        Self::from_image(format!("sim:{len}"), vec![0; len])
    }

    fn from_image(name: String, image: Vec<u8>) -> Self {
        // Zeroed words (calloc'd: untouched pages cost nothing), then the
        // image's bytes in one copy: crash tests make a region per crash
        // point, and a word-by-word build was most of their time.
        let words = image.len().div_ceil(8);
        // SAFETY: all-zero bytes are a valid `UnsafeCell<u64>`.
        let volatile: Box<[UnsafeCell<u64>]> =
            unsafe { Box::<[UnsafeCell<u64>]>::new_zeroed_slice(words).assume_init() };
        // SAFETY: the words hold at least `image.len()` bytes; the buffers
        // are distinct allocations.
        unsafe {
            std::ptr::copy_nonoverlapping(
                image.as_ptr(),
                UnsafeCell::raw_get(volatile.as_ptr()).cast::<u8>(),
                image.len(),
            );
        }
        SimRegion {
            name,
            volatile,
            len: image.len(),
            durable: Mutex::new(image),
            budget: Mutex::new(None),
            persists: AtomicU64::new(0),
            power: Mutex::new(Power::new()),
            after_cut: Mutex::new(Vec::new()),
        }
    }

    fn base(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.volatile.as_ptr()).cast::<u8>()
    }

    fn check(&self, offset: u64, len: usize) -> Result<usize> {
        let start = usize::try_from(offset).map_err(|_| self.out_of_range(offset, len))?;
        match start.checked_add(len) {
            Some(end) if end <= self.len => Ok(start),
            _ => Err(self.out_of_range(offset, len)),
        }
    }

    fn out_of_range(&self, offset: u64, len: usize) -> Error {
        Error::InvalidArgument(format!(
            "{}: access of {len} bytes at {offset} beyond region of {} bytes",
            self.name, self.len
        ))
    }

    /// The region after a power loss: only persisted lines survive.
    pub fn crash(&self) -> SimRegion {
        let image = self.durable.lock().clone();
        Self::from_image(self.name.clone(), image)
    }

    /// Like [`crash`](Self::crash), but each unpersisted dirty 8-byte word
    /// stored before the power went also survives with probability ½,
    /// chosen by `seed`. Threads may still be storing (module doc).
    pub fn crash_with_evictions(&self, seed: u64) -> SimRegion {
        let after_cut = self.after_cut.lock();
        let mut late: Vec<(usize, usize)> = after_cut.clone();
        late.sort_unstable();
        let mut late = late.into_iter().peekable();
        let mut image = self.durable.lock().clone();
        let mut x = seed | 1;
        for (w, chunk) in image.chunks_mut(8).enumerate() {
            let start = w * 8;
            while late.peek().is_some_and(|&(_, end)| end <= start) {
                late.next();
            }
            if late
                .peek()
                .is_some_and(|&(from, _)| from < start + chunk.len())
            {
                continue;
            }
            // SAFETY: in bounds. A store racing this read was made before
            // the cut (later ones wait on `after_cut`): either value is
            // one the word held before the power went.
            let vol = unsafe { std::slice::from_raw_parts(self.base().add(start), chunk.len()) };
            if vol != chunk {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x & 1 == 1 {
                    chunk.copy_from_slice(vol);
                }
            }
        }
        drop(after_cut);
        Self::from_image(self.name.clone(), image)
    }

    /// True once the power is off or the persist budget spent: the
    /// process runs on, the machine it stands for does not.
    fn cut(&self) -> bool {
        !self.power.lock().is_on() || *self.budget.lock() == Some(0)
    }

    /// Runs the store of `at..at + len`, recorded as made after the cut
    /// if it is.
    fn store(&self, at: usize, len: usize, f: impl FnOnce()) {
        let _late = self.cut().then(|| {
            let mut late = self.after_cut.lock();
            late.push((at, at + len));
            late
        });
        f();
    }

    /// Lets only the next `n` persists take effect (`None`: all).
    pub fn set_persist_budget(&self, n: Option<u64>) {
        *self.budget.lock() = n;
    }

    /// Connects this region to a shared power switch.
    pub fn set_power(&self, power: Power) {
        *self.power.lock() = power;
    }

    /// Persist calls made so far.
    pub fn persist_count(&self) -> u64 {
        self.persists.load(Ordering::Relaxed)
    }

    /// Flips bits in both images (corruption tests).
    pub fn corrupt(&self, offset: u64, xor: u8) -> Result<()> {
        let at = self.check(offset, 1)?;
        // SAFETY: in bounds (checked); tests call this with writers quiesced.
        unsafe { *self.base().add(at) ^= xor };
        self.durable.lock()[at] ^= xor;
        Ok(())
    }
}

impl PmRegion for SimRegion {
    fn len(&self) -> u64 {
        self.len as u64
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let at = self.check(offset, data.len())?;
        self.store(at, data.len(), || {
            // SAFETY: `at..at+len` is in bounds (checked above) and, by the
            // PmRegion contract, not concurrently accessed by anyone else.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base().add(at), data.len()) }
        });
        Ok(())
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        buf.copy_from_slice(self.slice(offset, buf.len())?);
        Ok(())
    }

    fn slice(&self, offset: u64, len: usize) -> Result<&[u8]> {
        let at = self.check(offset, len)?;
        // SAFETY: in bounds (checked); the contract guarantees no writer
        // touches this range while the borrow lives.
        Ok(unsafe { std::slice::from_raw_parts(self.base().add(at), len) })
    }

    fn persist(&self, offset: u64, len: usize) -> Result<()> {
        self.check(offset, len)?;
        self.persists.fetch_add(1, Ordering::Relaxed);
        if !self.power.lock().is_on() {
            return Ok(());
        }
        {
            let mut b = self.budget.lock();
            match &mut *b {
                None => {}
                Some(0) => return Ok(()),
                Some(n) => *n -= 1,
            }
        }
        let first = offset / CACHE_LINE * CACHE_LINE;
        let end = (offset + len as u64)
            .div_ceil(CACHE_LINE)
            .saturating_mul(CACHE_LINE)
            .min(self.len());
        let (first, end) = (first as usize, end as usize);
        let mut durable = self.durable.lock();
        // SAFETY: `first..end` is within the region (clamped above).
        let src = unsafe { std::slice::from_raw_parts(self.base().add(first), end - first) };
        durable[first..end].copy_from_slice(src);
        Ok(())
    }

    fn fence(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    fn persistence(&self) -> super::Persistence {
        super::Persistence::Simulated
    }

    fn store_u64(&self, offset: u64, value: u64) -> Result<()> {
        let at = super::check_word(self, offset)?;
        self.store(at, 8, || {
            // SAFETY: `at` is in bounds and 8-aligned (checked), and the
            // image is an array of u64, so the address is 8-aligned; link
            // words are only ever accessed atomically (PmRegion contract 5).
            unsafe { std::sync::atomic::AtomicU64::from_ptr(self.base().add(at).cast()) }
                .store(value, Ordering::Release)
        });
        Ok(())
    }

    fn load_u64(&self, offset: u64) -> Result<u64> {
        let at = super::check_word(self, offset)?;
        // SAFETY: as in `store_u64`.
        Ok(
            unsafe { std::sync::atomic::AtomicU64::from_ptr(self.base().add(at).cast()) }
                .load(Ordering::Acquire),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_persisted_lines_survive() {
        let r = SimRegion::new(4096);
        r.write(0, b"persisted").unwrap();
        r.persist(0, 9).unwrap();
        r.write(128, b"lost").unwrap();
        let c = r.crash();
        assert_eq!(c.slice(0, 9).unwrap(), b"persisted");
        assert_eq!(c.slice(128, 4).unwrap(), &[0, 0, 0, 0]);
    }

    #[test]
    fn budget_stops_persists() {
        let r = SimRegion::new(4096);
        r.set_persist_budget(Some(1));
        r.write(0, b"a").unwrap();
        r.persist(0, 1).unwrap();
        r.write(64, b"b").unwrap();
        r.persist(64, 1).unwrap();
        let c = r.crash();
        assert_eq!(c.slice(0, 1).unwrap(), b"a");
        assert_eq!(c.slice(64, 1).unwrap(), &[0]);
        assert_eq!(r.persist_count(), 2);
    }

    #[test]
    fn stores_after_the_cut_never_reach_the_durable_image() {
        for budget in [false, true] {
            let r = SimRegion::new(4096);
            let power = Power::new();
            r.set_power(power.clone());
            r.write(0, &[1u8; 2048]).unwrap();
            if budget {
                r.set_persist_budget(Some(0));
            } else {
                power.cut();
            }
            r.write(2048, &[2u8; 2048]).unwrap();
            r.store_u64(8, 7).unwrap();
            let mut evicted = false;
            for seed in 0..8 {
                let c = r.crash_with_evictions(seed);
                assert!(c.slice(2048, 2048).unwrap().iter().all(|&b| b == 0));
                assert_ne!(c.load_u64(8).unwrap(), 7);
                evicted |= c.slice(16, 2032).unwrap().contains(&1);
            }
            assert!(evicted, "stores before the cut may still be evicted");
        }
    }

    #[test]
    fn out_of_range_is_an_error_not_a_panic() {
        let r = SimRegion::new(64);
        assert!(r.write(60, b"12345").is_err());
        assert!(r.slice(u64::MAX, 2).is_err());
    }
}
