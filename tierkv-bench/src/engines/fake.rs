//! An in-memory engine (an ordered map behind a lock) for tests and dry runs
//! of the harness. It can inject one write stall: after N writes, the next
//! write holds the map's write lock for a fixed time, so every thread waits
//! — what a RocksDB write stop looks like from outside. It can also fail
//! every write after N, as an engine stopped by a background error does.
//!
//! [`NullEngine`] does nothing at all: a run on it measures what the
//! client (generator, queue, workers, histograms) costs per request.
//!
//! Concurrency: one `RwLock` over the map; reads share it, writes take it.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use super::{Engine, EngineStats, StallInterval, StallStats};
use crate::error::{Error, Result};

/// The fake engine.
pub struct FakeEngine {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
    opened: Instant,
    writes: AtomicU64,
    written_bytes: AtomicU64,
    /// `(after_writes, stall_ms)`.
    stall: Option<(u64, u64)>,
    stalls: Mutex<Vec<StallInterval>>,
    /// Writes fail after this many.
    fail_after: Option<u64>,
}

impl FakeEngine {
    /// A new empty engine; `stall` = `(after_writes, ms)` injects one stall.
    pub fn new(stall: Option<(u64, u64)>) -> FakeEngine {
        FakeEngine {
            map: RwLock::new(BTreeMap::new()),
            opened: Instant::now(),
            writes: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
            stall,
            stalls: Mutex::new(Vec::new()),
            fail_after: None,
        }
    }

    /// The same engine, failing every write after `n` (`None`: never).
    pub fn failing_after(mut self, n: Option<u64>) -> FakeEngine {
        self.fail_after = n;
        self
    }

    fn poisoned() -> Error {
        Error::Engine("fake engine lock poisoned".into())
    }

    fn write(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let n = self.writes.fetch_add(1, Ordering::Relaxed);
        if self.fail_after.is_some_and(|f| n >= f) {
            return Err(Error::Engine(format!(
                "fake engine: writes fail after {n} (injected)"
            )));
        }
        let mut map = self.map.write().map_err(|_| Self::poisoned())?;
        if let Some((after, ms)) = self.stall {
            if n == after {
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(ms));
                let iv = StallInterval {
                    start_s: t.duration_since(self.opened).as_secs_f64(),
                    seconds: t.elapsed().as_secs_f64(),
                    cause: "injected",
                };
                self.stalls.lock().map_err(|_| Self::poisoned())?.push(iv);
            }
        }
        self.written_bytes.fetch_add(
            (key.len() + value.map_or(0, |v| v.len())) as u64,
            Ordering::Relaxed,
        );
        match value {
            Some(v) => {
                map.insert(key.to_vec(), v.to_vec());
            }
            None => {
                map.remove(key);
            }
        }
        Ok(())
    }
}

impl Engine for FakeEngine {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(key, Some(value))
    }

    fn get(&self, key: &[u8], value: &mut Vec<u8>) -> Result<bool> {
        let map = self.map.read().map_err(|_| Self::poisoned())?;
        match map.get(key) {
            Some(v) => {
                value.clear();
                value.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.write(key, None)
    }

    fn scan(&self, start: &[u8], n: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let map = self.map.read().map_err(|_| Self::poisoned())?;
        let mut seen = 0;
        for (k, v) in map
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .take(n)
        {
            visit(k, v);
            seen += 1;
        }
        Ok(seen)
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn stats(&self) -> Result<EngineStats> {
        let intervals = self.stalls.lock().map_err(|_| Self::poisoned())?.clone();
        Ok(EngineStats {
            uptime_s: self.opened.elapsed().as_secs_f64(),
            stall: StallStats {
                seconds: intervals.iter().fold(0.0, |a, i| a + i.seconds),
                count: intervals.len() as u64,
                max_seconds: intervals.iter().map(|i| i.seconds).fold(0.0, f64::max),
                intervals: Some(intervals),
                ..StallStats::default()
            },
            ..EngineStats::default()
        })
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// An engine that accepts every request and keeps nothing: reads find
/// nothing, scans visit nothing. What is left of a run's CPU time is the
/// client's own.
pub struct NullEngine {
    opened: Instant,
}

impl NullEngine {
    /// A new null engine.
    pub fn new() -> NullEngine {
        NullEngine {
            opened: Instant::now(),
        }
    }
}

impl Default for NullEngine {
    fn default() -> Self {
        NullEngine::new()
    }
}

impl Engine for NullEngine {
    fn put(&self, _key: &[u8], _value: &[u8]) -> Result<()> {
        Ok(())
    }

    fn get(&self, _key: &[u8], _value: &mut Vec<u8>) -> Result<bool> {
        Ok(false)
    }

    fn delete(&self, _key: &[u8]) -> Result<()> {
        Ok(())
    }

    fn scan(
        &self,
        _start: &[u8],
        _n: usize,
        _visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        Ok(0)
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn stats(&self) -> Result<EngineStats> {
        Ok(EngineStats {
            uptime_s: self.opened.elapsed().as_secs_f64(),
            ..EngineStats::default()
        })
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}
