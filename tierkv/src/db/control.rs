//! The write controller: how the write path's leader turns the design's
//! verdict ([`WriteControl`]) into delays and stops, and the meter of
//! admitted writes that pickers see as load.
//!
//! * **Delay** (RocksDB's `WriteController::GetDelay`): writes pass through
//!   a token bucket at the delayed write rate. The rate is recalculated
//!   once per change of the verdict's inputs (RocksDB's
//!   `RecalculateWriteStallConditions` / `SetupDelay`): while writes stay
//!   delayed it falls ×0.6 near a stop, ×0.8 while the debt does not
//!   shrink, and rises ×1.25 (up to the configured rate) as it is paid;
//!   leaving the delay condition rewards ×1.4. The rate is kept between
//!   episodes and never drops below 16 KiB/s.
//! * **Stop**: the leader waits for background work (condition variable,
//!   re-checked every 100 ms). One stop is recorded as one stall interval
//!   however many waits it takes ([`StopEpisode`]).
//! * **Pacing** ([`Pacer`], `Options::write_pacing`): before room runs
//!   out, writers are slowed to the rate background work frees it, with
//!   short per-write delays, so that a stop (a wait for a whole flush or
//!   compaction, often hundreds of milliseconds) does not happen at all.
//!
//! # The pacing law
//!
//! The pacer watches two resources, each as *headroom* `H` in user bytes
//! the write path may still admit before a stop: the memtables (budget
//! minus what they hold, converted to user bytes with the mutable
//! memtable's ratio), and the design's bounded resource
//! ([`Design::headroom`](crate::design::Design::headroom): free PM for the
//! PM containers, L0 files for `classic` and `vlsm`). Every
//! [`SAMPLE_EVERY`] (on the next write after it) it reads each `H` and the
//! user bytes admitted `A`, and estimates the resource's *drain rate*
//!
//! ```text
//!   D ← D + α·((ΔA + ΔH)/Δt − D),   α = 1 − exp(−Δt / DRAIN_TAU)
//! ```
//!
//! (writes consume `H` at the rate they are admitted, so `ΔA + ΔH` is what
//! background work freed), and with the same average the share `u` of the
//! time the work that frees it was busy (for the memtables a flush running
//! or waiting, for the design's resource a compaction running, read at
//! each sample). What that work frees per second while it runs, its
//! *capacity*, is `C = D / max(u, MIN_BUSY)`. The pacer then allows each
//! resource
//!
//! ```text
//!   R = C + (H − reserve) / HORIZON           if H ≥ reserve
//!   R = S · (H − zero) / (reserve − zero)     if zero ≤ H < reserve (the brake)
//!   R = 0                                     if H < zero
//!   S = min(C, BRAKE_SHARE · (reserve − zero) / SAMPLE_EVERY)
//!   reserve = step + RESERVE · capacity,  R never below MIN_RATE
//!   zero = step + min(MIN_RATE · FLOOR_SECONDS, (reserve − step) / 2)
//! ```
//!
//! and paces writes at the smallest `R` through a token bucket. Far from a
//! stop `R` is far above any write rate and costs nothing; as `H` falls
//! toward the reserve, `R` falls toward `D`, so writers settle at the drain
//! rate with `H` near the reserve instead of running into the stop; below
//! the reserve the brake takes `R` down to nothing at one step above the
//! stop, so that a drain that pauses (background work frees room in bursts:
//! a whole memtable at a flush's end, a whole key range at a side's, L0
//! files at an L0 → L1 merge's) slows writers to a trickle instead of
//! letting them run into the stop at nearly the estimated rate. The
//! brake's zero sits [`FLOOR_SECONDS`] of the floor rate above the step:
//! the brake spends the reserve over a few hundred milliseconds whatever
//! the drain does, and with its zero at the step a drain later than that
//! (a flush sharing the disk and both cores with a 1.7 GB L0 → L1 merge)
//! met writers at the floor with no room left, and they stopped for the
//! rest of it (`classic` at `medium`: 0.26–0.56 s memtable-full stops in
//! most fills, tierkv's own accounting; test
//! `a_late_flush_slows_writers_to_the_floor_without_a_stop`); now they go
//! on at the floor, a 4 KiB write every 3.9 ms, for up to that long. (The first
//! version continued the upper line below the reserve, `D + (H −
//! reserve) / HORIZON`, which at `H = 0` still allowed `D − 2·reserve`
//! per second: at `medium` every `triangle` fill ran into 43–47 PM-full
//! stops and `classic`'s into 13 memtable-full stops.)
//!
//! Why `C` and not `D`: while background work keeps up, what it frees is
//! what the writers consumed, so `D` is the writers' own rate, and a law
//! on `D` let the rate grow only by `(H − reserve) / HORIZON` per second
//! (a few MB/s with 4 MiB memtables): at `leveldb10` every design's fill
//! spent 9–15 s of its 11–17 s in pauses while its compactions ran 3–5 s,
//! 2.5–3.7× below the same engine unpaced. Divided by the busy share, the
//! measured drain is what the work could free; a writer the work outruns
//! keeps it busy, `u` → 1 and `C` → `D`, so the law is the old one where
//! it must hold back. `MIN_BUSY` = 0.25 bounds the estimate at 4× the
//! measured drain (a work that ran in a quarter of the time may not keep
//! its rate once it runs all the time: flushes share the cores with
//! compactions). The brake's slope `S` is bounded so that one sampling
//! interval spends at most `BRAKE_SHARE` = 1/4 of what is left above the
//! step: with `C` in the hundreds of MB/s a 10 ms interval took the whole
//! reserve at once, and `classic`'s medium fill met 3 memtable stops of
//! 0.1–0.3 s.
//!
//! At the start nothing is measured, and an average started at "drains
//! nothing" (`D = 0`) or "always busy" (`u = 1`) learns over `DRAIN_TAU`
//! what the work can do: until 2026-11-28 every fill's first second or two
//! ran far below it (16 K ops/s in the first second of every `leveldb10`
//! fill against 70–120 K later; the main job's 64 MB `tiny` fill at 8.9 K
//! ops/s with `triangle`, 55 K unpaced). So the averages start from zero
//! with their weight `w = 1 − exp(−t / DRAIN_TAU)` divided out (`D / w`,
//! `u / w`): the first estimates are the means since the first reading.
//! And before the first flush the memtables' drain is unknown, not zero:
//! until flushes have freed [`KNOWN_AFTER`] = 10% of the memtable budget
//! the pacer does not slow writers above the memtables' reserve and
//! brakes below it at the bounded slope alone. The design's resource is
//! estimated from its first reading on: left unknown until its work had
//! freed a tenth of it (tried, `leveldb10` 1 KB fills, four runs), the
//! fills had 26 writes over 100 ms against 9: what writers put in
//! unpaced before the first compaction was debt the rest of the fill paid
//! in stops.
//!
//! The constants: [`DRAIN_TAU`] = 1 s averages over the bursts in which
//! background work frees room (a flush frees a whole memtable at its end,
//! a PM side a whole key range) while following changes of the drain rate
//! within a second or two; [`HORIZON`] = 0.5 s spends the headroom above
//! the reserve over half a second (a shorter horizon waits longer before
//! slowing down and then brakes harder; a longer one slows writers while
//! room is still plentiful); the reserve is the largest step one event
//! takes at once (`Headroom::step_bytes`: a memtable switch reserving a
//! whole row of PM, a flush adding an L0 file) plus [`RESERVE`] = 10% of
//! the resource, which keeps the equilibrium away from the stop so that a
//! drain slower than estimated costs a slower write rate, not a stop. The token bucket lets a writer
//! run up to [`CREDIT`] ahead and sleeps only once it owes at least
//! [`MIN_PAUSE`]: a pause is the write's own cost at the paced rate plus
//! at most that much accumulated debt (tens of microseconds for a 4 KiB
//! write at hundreds of MB/s), and the sleeps' overshoot is not lost. The designs' own
//! triggers (RocksDB's L0 and pending-bytes triggers for `classic`, PM full
//! for the containers, the memtable limit for all) stay as the backstop.
//!
//! Concurrency: [`WriteController`] and [`Pacer`] live in the engine's
//! `state` mutex; [`RateMeter`] is lock-free.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::design::{Headroom, WriteControl};
use crate::stats::{StallCause, StatsRecorder};

use super::{Inner, State};

/// The delayed-write token bucket and the verdict cache. Guarded by the
/// engine's `state` mutex.
pub(super) struct WriteController {
    /// When the next delayed write may go.
    pub(super) delay_next: Option<Instant>,
    /// The delayed write rate. It persists across delay episodes, as
    /// RocksDB's `WriteController::delayed_write_rate` does.
    pub(super) rate_bytes_per_sec: f64,
    /// Debt at the last recalculation.
    last_debt: u64,
    /// The last recalculation's verdict was `Delay` (RocksDB's
    /// `NeedsDelay()`): only then is the rate adjusted (a stop that turns
    /// into a delay keeps the rate, as in RocksDB with one column family).
    delaying: bool,
    /// Verdict for (version-set generation, imm count, design epoch).
    cache: Option<((u64, usize, u64), WriteControl)>,
}

/// The slowest delayed write rate.
const MIN_RATE_BYTES_PER_SEC: f64 = 16384.0;

impl WriteController {
    /// A controller starting at `rate_bytes_per_sec`.
    pub(super) fn new(rate_bytes_per_sec: u64) -> WriteController {
        WriteController {
            delay_next: None,
            rate_bytes_per_sec: rate_bytes_per_sec as f64,
            last_debt: 0,
            delaying: false,
            cache: None,
        }
    }

    /// Adjusts the delayed write rate for a new verdict (module doc).
    /// `max` is the configured rate; `near_stop` is asked only while
    /// writes stay delayed.
    fn recalculate(
        &mut self,
        control: WriteControl,
        debt: u64,
        max: f64,
        near_stop: impl FnOnce() -> bool,
    ) {
        let rate = self.rate_bytes_per_sec;
        match control {
            WriteControl::Delay(_) => {
                if self.delaying && max > MIN_RATE_BYTES_PER_SEC {
                    self.rate_bytes_per_sec = if near_stop() {
                        (rate * 0.6).max(MIN_RATE_BYTES_PER_SEC)
                    } else if self.last_debt > 0 && self.last_debt <= debt {
                        (rate * 0.8).max(MIN_RATE_BYTES_PER_SEC)
                    } else if self.last_debt > debt {
                        (rate * 1.25).min(max)
                    } else {
                        rate
                    };
                }
                self.delaying = true;
            }
            WriteControl::Stop(_) => {
                self.delaying = false;
                self.delay_next = None;
            }
            WriteControl::Proceed => {
                if self.delaying {
                    self.rate_bytes_per_sec = (rate * 1.4).min(max);
                }
                self.delaying = false;
                self.delay_next = None;
            }
        }
        self.last_debt = debt;
    }

    /// Reserves the token-bucket slot of a delayed write of `bytes`;
    /// returns how long to sleep first.
    pub(super) fn delay_for(&mut self, bytes: usize, now: Instant) -> Duration {
        let next = self.delay_next.unwrap_or(now).max(now);
        let wait = Duration::from_secs_f64(bytes as f64 / self.rate_bytes_per_sec);
        self.delay_next = Some(next + wait);
        next - now
    }
}

/// How often the pacer samples the headroom (at most).
pub(super) const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// Time constant of the drain-rate average, seconds.
pub(super) const DRAIN_TAU: f64 = 1.0;
/// Headroom above the reserve is spent over this many seconds.
pub(super) const HORIZON: f64 = 0.5;
/// The reserve, as a fraction of the resource's capacity.
pub(super) const RESERVE: f64 = 0.1;
/// The pacer never asks for less than this (user bytes per second).
pub(super) const MIN_RATE: f64 = 1048576.0;
/// The brake reaches [`MIN_RATE`] this long before the stop: it keeps
/// `MIN_RATE × FLOOR_SECONDS` (at most half the reserve above the step)
/// for writers to trickle at the floor while a late drain finishes.
pub(super) const FLOOR_SECONDS: f64 = 1.0;
/// How far a writer may run ahead of the token bucket.
pub(super) const CREDIT: Duration = Duration::from_millis(1);
/// Writers sleep only once they owe at least this long.
pub(super) const MIN_PAUSE: Duration = Duration::from_micros(200);
/// The smallest share of time the draining work is taken to be busy: the
/// drain capacity is at most this many times the measured drain.
pub(super) const MIN_BUSY: f64 = 0.25;
/// Below the reserve, one sampling interval may take at most this share
/// of the headroom left above the step.
pub(super) const BRAKE_SHARE: f64 = 0.25;
/// The memtables' drain capacity is known once flushes have freed this
/// share of their budget; before that the pacer only brakes below the
/// reserve.
pub(super) const KNOWN_AFTER: f64 = 0.1;

/// Compaction threads go to normal priority once the pacer allows less
/// than this many times the rate writes are admitted at
/// (`Options::adaptive_compaction_priority`)...
pub(super) const URGENT_MARGIN: f64 = 2.0;
/// ...and back under `SCHED_IDLE` once it allows more than this many
/// times (the gap keeps a rate near one threshold from switching them
/// every sample).
pub(super) const RELAXED_MARGIN: f64 = 3.0;

/// With no write for this long, nothing presses compaction: its threads
/// go back under `SCHED_IDLE` (`Options::adaptive_compaction_priority`;
/// the write path, which decides otherwise, is not there to).
pub(super) const QUIET: Duration = Duration::from_secs(1);

/// Whether background work must compete for the CPU on equal terms
/// (`Options::adaptive_compaction_priority`): writes are delayed or
/// stopped, or the pacer's allowance (`allowed`, user bytes per second;
/// infinite: nothing near a limit) is within [`URGENT_MARGIN`] of the
/// rate writes are admitted at (`admitted`, over the last second; taken
/// as at least [`MIN_RATE`]), staying so until it is past
/// [`RELAXED_MARGIN`]. Compaction under `SCHED_IDLE` runs only on cores
/// the foreground leaves idle; when the foreground keeps them busy it
/// falls behind, the pacer's allowance falls toward the writes, and this
/// gives it its fair share back before the writers feel it.
pub(super) fn background_urgent(was: bool, allowed: f64, admitted: f64, held: bool) -> bool {
    if held {
        return true;
    }
    let margin = allowed / admitted.max(MIN_RATE);
    margin < if was { RELAXED_MARGIN } else { URGENT_MARGIN }
}

/// One resource the pacer watches.
#[derive(Debug, Clone, Copy)]
struct Gauge {
    /// Headroom (user bytes), admitted user bytes, time and whether the
    /// draining work was busy, at the last sample.
    last: Option<(f64, u64, Instant, bool)>,
    /// Average drain rate, user bytes per second, started at zero.
    drain: f64,
    /// Average share of the time the draining work was busy (same average).
    busy: f64,
    /// How much the averages have seen, `1 − exp(−elapsed / DRAIN_TAU)`:
    /// over it they are the means since the first reading while they are
    /// younger than [`DRAIN_TAU`], instead of leaning toward their zero
    /// start.
    weight: f64,
    /// User bytes the work has freed so far, counted until the capacity is
    /// known ([`KNOWN_AFTER`]).
    freed: f64,
    /// The work has freed enough for its capacity to be estimated.
    known: bool,
}

impl Gauge {
    /// A gauge whose capacity is unknown until its work has freed
    /// [`KNOWN_AFTER`] of the resource, then estimated from the means since
    /// the first reading (the memtables: their first flush comes within a
    /// memtable's worth of writes).
    fn unknown_until_drained() -> Gauge {
        Gauge {
            last: None,
            drain: 0.0,
            busy: 0.0,
            weight: 0.0,
            freed: 0.0,
            known: false,
        }
    }

    /// A gauge whose capacity is estimated from its first reading on, as
    /// the means since then (the design's resource: its work may start
    /// seconds after the first writes, and what writers put in unpaced
    /// meanwhile was debt the rest of a fill paid in stops).
    fn measured_from_start() -> Gauge {
        Gauge {
            known: true,
            ..Gauge::unknown_until_drained()
        }
    }

    /// Takes a reading (`busy`: whether the work that frees this resource
    /// is running or queued now); returns the rate this resource allows.
    fn read(&mut self, h: Headroom, admitted: u64, now: Instant, busy: bool) -> f64 {
        let free = h.free_bytes as f64;
        if let Some((last_free, last_admitted, t, was_busy)) = self.last {
            let dt = now.saturating_duration_since(t).as_secs_f64();
            if dt > 0.0 {
                let freed = admitted.saturating_sub(last_admitted) as f64 + (free - last_free);
                let alpha = 1.0 - (-dt / DRAIN_TAU).exp();
                self.drain += alpha * ((freed / dt).max(0.0) - self.drain);
                // The interval's busy share, from its two ends.
                let share = (u8::from(was_busy) + u8::from(busy)) as f64 / 2.0;
                self.busy += alpha * (share - self.busy);
                self.weight += alpha * (1.0 - self.weight);
                if !self.known {
                    self.freed += freed.max(0.0);
                    self.known = self.freed >= KNOWN_AFTER * h.capacity_bytes as f64;
                }
            }
        }
        self.last = Some((free, admitted, now, busy));
        let step = h.step_bytes as f64;
        let reserve = step + RESERVE * h.capacity_bytes as f64;
        let capacity = self.capacity();
        let rate = if free >= reserve {
            // Unknown: nothing says the work cannot keep up.
            capacity.map_or(f64::INFINITY, |c| c + (free - reserve) / HORIZON)
        } else {
            // The brake: the drain capacity scaled down to the floor as
            // the headroom falls from the reserve to its zero, one step
            // and the floor's own room above the stop, and never so steep
            // that one interval between samples overshoots it.
            let zero = step + (MIN_RATE * FLOOR_SECONDS).min(0.5 * (reserve - step));
            let bound = BRAKE_SHARE * (reserve - zero) / SAMPLE_EVERY.as_secs_f64();
            let slope = capacity.map_or(bound, |c| c.min(bound));
            slope * (free - zero).max(0.0) / (reserve - zero).max(1.0)
        };
        rate.max(MIN_RATE)
    }

    /// What the draining work frees per second while it runs: the
    /// measured drain over the share of the time it was busy; `None`
    /// until it has freed [`KNOWN_AFTER`] of the resource.
    fn capacity(&self) -> Option<f64> {
        if !self.known {
            return None;
        }
        let w = self.weight.max(f64::MIN_POSITIVE);
        Some((self.drain / w) / (self.busy / w).max(MIN_BUSY))
    }
}

/// The pacing controller (module doc). Guarded by the `state` mutex.
#[derive(Debug)]
pub(super) struct Pacer {
    /// The memtables and the design's resource.
    gauges: [Gauge; 2],
    /// The paced rate, user bytes per second (infinite: nothing to pace).
    rate_bytes_per_sec: f64,
    /// When the token bucket lets the next write go.
    next: Option<Instant>,
    last_sample: Option<Instant>,
}

impl Pacer {
    pub(super) fn new() -> Pacer {
        Pacer {
            gauges: [Gauge::unknown_until_drained(), Gauge::measured_from_start()],
            rate_bytes_per_sec: f64::INFINITY,
            next: None,
            last_sample: None,
        }
    }

    /// When the last sample was taken (`None`: never).
    pub(super) fn last_sample(&self) -> Option<Instant> {
        self.last_sample
    }

    /// True if a sample is due.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.last_sample
            .is_none_or(|t| now.saturating_duration_since(t) >= SAMPLE_EVERY)
    }

    /// Takes a reading of the memtables' and the design's headroom (`None`:
    /// no such resource) with `admitted` user bytes so far, and whether the
    /// work that frees each is busy (a flush running or waiting; a
    /// compaction running).
    pub(super) fn sample(
        &mut self,
        now: Instant,
        admitted: u64,
        readings: [Option<Headroom>; 2],
        busy: [bool; 2],
    ) {
        self.last_sample = Some(now);
        let mut rate = f64::INFINITY;
        for ((g, r), b) in self.gauges.iter_mut().zip(readings).zip(busy) {
            match r {
                Some(h) => rate = rate.min(g.read(h, admitted, now, b)),
                None => g.last = None,
            }
        }
        self.rate_bytes_per_sec = rate;
    }

    /// The paced rate now, user bytes per second (infinite: nothing to
    /// pace).
    pub(super) fn rate(&self) -> f64 {
        self.rate_bytes_per_sec
    }

    /// Charges a write of `bytes` to the token bucket; returns how long
    /// the writer must pause first (zero unless it owes [`MIN_PAUSE`]).
    pub(super) fn pause_for(&mut self, bytes: usize, now: Instant) -> Duration {
        if !self.rate_bytes_per_sec.is_finite() {
            self.next = None;
            return Duration::ZERO;
        }
        let earliest = now.checked_sub(CREDIT).unwrap_or(now);
        let start = self.next.map_or(now, |n| n.max(earliest));
        let end = start + Duration::from_secs_f64(bytes as f64 / self.rate_bytes_per_sec);
        self.next = Some(end);
        let owed = end.saturating_duration_since(now);
        if owed >= MIN_PAUSE {
            owed
        } else {
            Duration::ZERO
        }
    }
}

/// A writer's stop: its waits for one cause, recorded as one stall interval
/// when the cause changes or the writer goes on (also on an error return),
/// however many condition-variable waits it took.
pub(super) struct StopEpisode<'a> {
    pub(super) stats: &'a StatsRecorder,
    pub(super) current: Option<(Instant, StallCause)>,
}

impl StopEpisode<'_> {
    /// The writer is about to wait for `cause`.
    pub(super) fn waiting(&mut self, cause: StallCause) {
        if self.current.is_some_and(|(_, c)| c == cause) {
            return;
        }
        self.end();
        self.current = Some((Instant::now(), cause));
    }

    /// The wait is over.
    pub(super) fn end(&mut self) {
        if let Some((start, cause)) = self.current.take() {
            self.stats.record_stall(start, cause);
        }
    }
}

impl Drop for StopEpisode<'_> {
    fn drop(&mut self) {
        self.end();
    }
}

/// Counts bytes per 100 ms slot over the last minute: the admitted write
/// rate over the last second and its one-second peak (the pickers' load
/// figures, `PickContext`). Lock-free: writers add with one atomic, readers
/// sum slots; a slot is reused after a minute (its stale count is cleared
/// by the first writer of the new period).
pub(super) struct RateMeter {
    start: Instant,
    /// Per slot: the slot number it counts for, and the bytes.
    slots: Vec<(AtomicU64, AtomicU64)>,
}

/// Slot length.
const SLOT: Duration = Duration::from_millis(100);
/// Slots kept: one minute.
const SLOTS: usize = 600;

impl RateMeter {
    pub(super) fn new() -> RateMeter {
        RateMeter {
            start: Instant::now(),
            slots: (0..SLOTS)
                .map(|_| (AtomicU64::new(u64::MAX), AtomicU64::new(0)))
                .collect(),
        }
    }

    fn slot_now(&self) -> u64 {
        (self.start.elapsed().as_nanos() / SLOT.as_nanos()) as u64
    }

    /// Counts `bytes` admitted now.
    pub(super) fn add(&self, bytes: u64) {
        self.add_at(self.slot_now(), bytes);
    }

    fn add_at(&self, n: u64, bytes: u64) {
        let (tag, count) = &self.slots[(n % SLOTS as u64) as usize];
        if tag.load(Ordering::Acquire) != n {
            // First write of this slot's new period: restart its count.
            if tag.swap(n, Ordering::AcqRel) != n {
                count.store(0, Ordering::Release);
            }
        }
        count.fetch_add(bytes, Ordering::Relaxed);
    }

    fn bytes_in(&self, slot: u64) -> u64 {
        let (tag, count) = &self.slots[(slot % SLOTS as u64) as usize];
        if tag.load(Ordering::Acquire) == slot {
            count.load(Ordering::Relaxed)
        } else {
            0
        }
    }

    /// Bytes per second over the last full second.
    pub(super) fn recent(&self) -> f64 {
        let now = self.slot_now();
        let per_sec = (Duration::from_secs(1).as_nanos() / SLOT.as_nanos()) as u64;
        (now.saturating_sub(per_sec)..now)
            .map(|s| self.bytes_in(s))
            .sum::<u64>() as f64
    }

    /// Bytes per second over the last full second, and the highest
    /// one-second rate over the last minute.
    pub(super) fn rates(&self) -> (f64, f64) {
        self.rates_at(self.slot_now())
    }

    fn rates_at(&self, now: u64) -> (f64, f64) {
        let per_sec = (Duration::from_secs(1).as_nanos() / SLOT.as_nanos()) as u64;
        let window = |end: u64| -> f64 {
            (end.saturating_sub(per_sec)..end)
                .map(|s| self.bytes_in(s))
                .sum::<u64>() as f64
        };
        let recent = window(now);
        let mut peak = recent;
        let oldest = now.saturating_sub(SLOTS as u64 - per_sec);
        let mut end = now;
        while end > oldest + per_sec {
            end -= per_sec;
            peak = peak.max(window(end));
        }
        (recent, peak)
    }
}

impl State {
    /// Whether the design's last verdict delays or stops writes.
    pub(super) fn writes_held(&self) -> bool {
        self.control
            .cache
            .is_some_and(|(_, c)| c != WriteControl::Proceed)
    }

    /// Region `i`'s immutable memtables the design must keep room for
    /// (`Design::write_control`): all but one whose flush has built its
    /// output (which then holds its room) and awaits its edit.
    pub(super) fn waiting_imms(&self, i: usize) -> usize {
        let n = self.mem.regions[i].imms.len();
        n - usize::from(self.flush_built == Some(i) && n > 0)
    }
}

impl Inner {
    /// The strictest region's verdict and the total debt. REQUIRES: `state`
    /// locked.
    fn regions_verdict(&self, st: &State) -> (WriteControl, u64) {
        let rank = |c: &WriteControl| match c {
            WriteControl::Proceed => 0,
            WriteControl::Delay(_) => 1,
            WriteControl::Stop(_) => 2,
        };
        let mut verdict = WriteControl::Proceed;
        let mut debt = 0u64;
        for (i, v) in self.versions.current_all().iter().enumerate() {
            let c = self.design.write_control(v, st.waiting_imms(i));
            if rank(&c) > rank(&verdict) {
                verdict = c;
            }
            debt = debt.saturating_add(self.design.debt(v));
        }
        (verdict, debt)
    }

    /// Samples the pacer when due: the memtables' headroom and the
    /// design's (the tightest region's). REQUIRES: `state` locked.
    pub(super) fn sample_pacer(&self, st: &mut State, now: Instant) {
        if !st.pacer.due(now) {
            return;
        }
        let mem = st.mem.headroom(&self.opts);
        let design = self
            .versions
            .current_all()
            .iter()
            .enumerate()
            .filter_map(|(i, v)| self.design.headroom(v, st.waiting_imms(i)))
            .min_by_key(|h| h.free_bytes);
        let admitted = self.stats.user_bytes.load(Ordering::Relaxed);
        let busy = [
            st.flushing || st.mem.imm_count() > 0,
            st.compactions_running > 0 || st.manual_running,
        ];
        st.pacer.sample(now, admitted, [Some(mem), design], busy);
        if let Some(cpu) = &self.compaction_cpu {
            let urgent = background_urgent(
                !cpu.is_idle(),
                st.pacer.rate(),
                self.admitted.recent(),
                st.writes_held(),
            );
            cpu.set_idle(!urgent);
        }
    }

    /// Puts the compaction threads back under `SCHED_IDLE` once no write
    /// has sampled the pacer for [`QUIET`] and none is delayed or stopped
    /// (writers waiting in a stop sample nothing, and compaction is what
    /// frees them): reads after a fill then find the cores the compaction
    /// paying its debt would otherwise share. Called by the flush thread
    /// between jobs (at least every 200 ms). REQUIRES: `state` locked.
    ///
    /// "Delayed or stopped" is the verdict for the current versions,
    /// computed here without touching the write controller, not the one
    /// the last write cached ([`State::writes_held`]): with no write since,
    /// nothing recomputes that one, so a burst whose last write was delayed
    /// could keep compaction at normal priority until the next write.
    pub(super) fn relax_compaction_cpu(&self, st: &State, now: Instant) {
        if let Some(cpu) = &self.compaction_cpu {
            let quiet = st
                .pacer
                .last_sample()
                .is_none_or(|t| now.saturating_duration_since(t) >= QUIET);
            if quiet && self.regions_verdict(st).0 == WriteControl::Proceed {
                cpu.set_idle(true);
            }
        }
    }

    /// The design's verdict for the current versions and memtable backlog,
    /// computed once per change of either (or of the design's epoch), not
    /// once per write; the delayed write rate follows each new verdict.
    /// REQUIRES: `state` locked.
    pub(super) fn write_control(&self, st: &mut State) -> WriteControl {
        let key = (
            self.versions.generation(),
            st.mem
                .imm_count()
                .saturating_sub(usize::from(st.flush_built.is_some())),
            self.design.write_control_epoch(),
        );
        if let Some((k, c)) = st.control.cache {
            if k == key {
                return c;
            }
        }
        let (c, debt) = self.regions_verdict(st);
        let max = self.opts.delayed_write_rate_bytes_per_sec as f64;
        st.control.recalculate(c, debt, max, || {
            self.versions
                .current_all()
                .iter()
                .any(|v| self.design.near_stop(v))
        });
        st.control.cache = Some((key, c));
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_one_interval_however_many_waits_it_takes() {
        let stats = StatsRecorder::new();
        {
            let mut stop = StopEpisode {
                stats: &stats,
                current: None,
            };
            stop.end(); // nothing to record yet
            for _ in 0..3 {
                stop.waiting(StallCause::PmFull);
                std::thread::sleep(Duration::from_millis(2));
            }
            stop.waiting(StallCause::MemtableFull);
            stop.waiting(StallCause::MemtableFull);
        } // the writer goes on
        let stalls = stats.snapshot(Vec::new()).stalls;
        let causes: Vec<StallCause> = stalls.iter().map(|s| s.cause).collect();
        assert_eq!(causes, [StallCause::PmFull, StallCause::MemtableFull]);
        assert!(stalls[0].duration >= Duration::from_millis(6));
    }

    #[test]
    fn the_delayed_rate_follows_the_debt() {
        let delay = WriteControl::Delay(StallCause::L0Slowdown);
        let mut c = WriteController::new(1 << 20);
        c.recalculate(delay, 10, (1 << 20) as f64, || false);
        assert_eq!(
            c.rate_bytes_per_sec,
            (1 << 20) as f64,
            "first delay keeps the rate"
        );
        c.recalculate(delay, 12, (1 << 20) as f64, || false);
        assert_eq!(c.rate_bytes_per_sec, (1 << 20) as f64 * 0.8, "debt grew");
        c.recalculate(delay, 12, (1 << 20) as f64, || true);
        assert_eq!(
            c.rate_bytes_per_sec,
            (1 << 20) as f64 * 0.8 * 0.6,
            "near a stop"
        );
        c.recalculate(delay, 5, (1 << 20) as f64, || false);
        assert_eq!(
            c.rate_bytes_per_sec,
            (1 << 20) as f64 * 0.8 * 0.6 * 1.25,
            "paid"
        );
        c.recalculate(WriteControl::Proceed, 0, (1 << 20) as f64, || false);
        assert_eq!(
            c.rate_bytes_per_sec,
            (1 << 20) as f64 * 0.8 * 0.6 * 1.25 * 1.4
        );
        let t = Instant::now();
        assert_eq!(c.delay_for(0, t), Duration::ZERO);
        assert!(c.delay_for(1 << 20, t) == Duration::ZERO && c.delay_for(1, t) > Duration::ZERO);
    }

    #[test]
    fn the_pacer_settles_at_the_drain_rate_above_the_reserve() {
        // A resource of 100 MB freed at 50 MB/s by background work, filled
        // by a writer that wants 200 MB/s but goes at the paced rate.
        let mut p = Pacer::new();
        let cap: f64 = 100e6;
        let mut free: f64 = cap;
        let mut admitted = 0u64;
        let t0 = Instant::now();
        let dt = 0.01;
        let mut rates = Vec::new();
        for i in 0..1000 {
            let now = t0 + Duration::from_secs_f64(i as f64 * dt);
            let h = Headroom {
                free_bytes: free.max(0.0) as u64,
                capacity_bytes: cap as u64,
                step_bytes: 0,
            };
            p.sample(now, admitted, [None, Some(h)], [true; 2]);
            let w = p.rate().min(200e6) * dt;
            admitted += w as u64;
            free = (free - w + 50e6 * dt).min(cap);
            rates.push(p.rate());
            assert!(free > 0.0, "the pacer let the resource run out at step {i}");
        }
        // After ten seconds: writes at the drain rate, headroom near the
        // reserve.
        let last = rates[rates.len() - 1];
        assert!((last - 50e6).abs() < 5e6, "rate {last}");
        assert!((free - RESERVE * cap).abs() < 0.05 * cap, "free {free}");
        // Far from the stop the pacer does not slow anyone.
        let mut q = Pacer::new();
        q.sample(
            t0,
            0,
            [
                Some(Headroom {
                    free_bytes: 1 << 40,
                    capacity_bytes: 1 << 40,
                    step_bytes: 0,
                }),
                None,
            ],
            [true; 2],
        );
        assert_eq!(q.pause_for(4096, t0), Duration::ZERO);
    }

    #[test]
    fn a_bursty_drain_never_lets_the_writer_into_the_stop() {
        // A resource of 400 MB whose background work frees room in bursts
        // (150 MB at the end of each 0.6 s job: 250 MB/s on average, as
        // a flush or a PM side frees it), and whose consumer takes a step
        // of 30 MB at once every 60 MB admitted (a memtable switch
        // reserving a row). The writer wants 600 MB/s. With the upper line
        // continued below the reserve (the first law), which at no
        // headroom still allows the drain rate less twice the reserve per
        // second, the headroom ran out; with the brake it never does.
        let mut p = Pacer::new();
        let cap: f64 = 400e6;
        let step: f64 = 30e6;
        let mut free: f64 = cap;
        let mut admitted = 0u64;
        let mut since_step = 0.0;
        let t0 = Instant::now();
        let dt = 0.01;
        let mut lowest = cap;
        let mut written = 0.0;
        for i in 0..3000 {
            let now = t0 + Duration::from_secs_f64(i as f64 * dt);
            let h = Headroom {
                free_bytes: free.max(0.0) as u64,
                capacity_bytes: cap as u64,
                step_bytes: step as u64,
            };
            p.sample(now, admitted, [None, Some(h)], [true; 2]);
            let w = p.rate().min(600e6) * dt;
            admitted += w as u64;
            written += w;
            free -= w;
            since_step += w;
            if since_step >= 60e6 {
                since_step -= 60e6;
                free -= step;
            }
            if i % 60 == 59 {
                free = (free + 150e6).min(cap);
            }
            lowest = lowest.min(free);
        }
        assert!(lowest >= 0.0, "the headroom ran out: {lowest}");
        // And the writer still goes at most of the drain rate (30 s).
        let rate = written / 30.0;
        assert!(rate > 0.6 * 250e6, "rate {rate}");
    }

    /// The memtables' reading with `used` of their `cap` bytes taken.
    fn memtables_headroom(cap: f64, used: f64) -> Headroom {
        Headroom {
            free_bytes: (cap - used).max(0.0) as u64,
            capacity_bytes: cap as u64,
            step_bytes: 0,
        }
    }

    /// Memtables of `cap` bytes in all, switched at `mem` bytes and each
    /// flushed in `flush_secs`, filled for `ms` milliseconds by a writer
    /// that wants `wants(ms)` bytes per second and goes at the paced rate;
    /// sampled every 10 ms, the flush reported busy only if `busy_known`
    /// (else always). Returns the bytes written in each millisecond and
    /// the lowest headroom.
    fn memtables_sim(
        cap: f64,
        mem: f64,
        flush_secs: f64,
        ms: usize,
        busy_known: bool,
        wants: impl Fn(usize) -> f64,
    ) -> (Vec<f64>, f64) {
        let t0 = Instant::now();
        let flush_rate = mem / flush_secs;
        let mut p = Pacer::new();
        let (mut held, mut flushing, mut admitted) = (0.0f64, 0.0f64, 0u64);
        let mut written = Vec::with_capacity(ms);
        let mut lowest = cap;
        let dt = 0.001;
        for i in 0..ms {
            let now = t0 + Duration::from_secs_f64(i as f64 * dt);
            if i % 10 == 0 {
                let h = memtables_headroom(cap, held + flushing);
                let busy = !busy_known || flushing > 0.0;
                p.sample(now, admitted, [Some(h), None], [busy, false]);
            }
            let w = p.rate().min(wants(i)) * dt;
            admitted += w as u64;
            written.push(w);
            held += w;
            if held >= mem && flushing == 0.0 {
                flushing = held;
                held = 0.0;
            }
            flushing = (flushing - flush_rate * dt).max(0.0);
            lowest = lowest.min(cap - held - flushing);
        }
        (written, lowest)
    }

    /// 4 MiB memtables flushed in 10 ms each (400 MiB/s); the writer goes
    /// at 40 MB/s for a second, then wants 400 MB/s. While it is the
    /// slower, the flush thread is idle most of the time and the drain
    /// measured is the writer's own rate; over the busy share it is the
    /// flushes', and the paced rate leaves the writer's old pace behind
    /// within a second.
    #[test]
    fn an_idle_drain_is_no_limit() {
        let run = |busy_known: bool| -> f64 {
            let wants = |i: usize| if i < 1000 { 40e6 } else { 400e6 };
            let (written, _) = memtables_sim(
                8.0 * 1048576.0,
                4.0 * 1048576.0,
                0.010,
                3000,
                busy_known,
                wants,
            );
            // The rate once the writer speeds up.
            written[1000..].iter().sum::<f64>() / 2.0
        };
        let old = run(false);
        let new = run(true);
        assert!(new > 2.0 * old, "with the busy share {new}, without {old}");
    }

    /// A fresh database: 16 MiB of memtables, 8 MiB flushed in 50 ms
    /// (160 MiB/s), a writer that wants 100 MB/s. Before the first flush
    /// ends nothing has been freed; a drain taken as zero paced the writer
    /// at what the headroom alone allows, far below what the flushes keep
    /// up with.
    #[test]
    fn a_cold_start_is_not_paced_before_the_first_drain() {
        let (written, lowest) =
            memtables_sim(16.0 * 1048576.0, 8.0 * 1048576.0, 0.050, 1000, true, |_| {
                100e6
            });
        let written: f64 = written.iter().sum();
        assert!(lowest > 0.0, "the memtables ran out");
        assert!(written > 0.9 * 100e6, "the first second wrote {written}");
    }

    /// `medium`'s memtables (two of 64 MiB), each flushed in 0.16 s, but
    /// one flush, sharing the disk and cores with a long merge, takes
    /// 0.8 s; the writer wants 300 MB/s. The brake spends the reserve over
    /// a few hundred milliseconds whatever the flush does: it must leave
    /// the floor rate room to go on for the rest of a late flush, so that
    /// writers trickle at the floor instead of stopping (a `classic` fill
    /// stopped 0.47 s on a full memtable this way).
    #[test]
    fn a_late_flush_slows_writers_to_the_floor_without_a_stop() {
        let t0 = Instant::now();
        let (cap, mem) = (128.0 * 1048576.0, 64.0 * 1048576.0);
        let mut p = Pacer::new();
        let (mut held, mut flushing, mut admitted) = (0.0f64, 0.0f64, 0u64);
        // A flush frees its whole memtable at its end.
        let (mut flushes, mut flush_ends) = (0, 0usize);
        let mut lowest = cap;
        let dt = 0.001;
        for i in 0..6000 {
            let now = t0 + Duration::from_secs_f64(i as f64 * dt);
            if i % 10 == 0 {
                let h = memtables_headroom(cap, held + flushing);
                p.sample(now, admitted, [Some(h), None], [flushing > 0.0, false]);
            }
            let w = p.rate().min(300e6) * dt;
            admitted += w as u64;
            held += w;
            if flushing > 0.0 && i >= flush_ends {
                flushing = 0.0;
            }
            if held >= mem && flushing == 0.0 {
                flushes += 1;
                let ms = if flushes == 8 { 800 } else { 160 };
                (flushing, held, flush_ends) = (held, 0.0, i + ms);
            }
            lowest = lowest.min(cap - held - flushing);
        }
        assert!(flushes > 8, "the late flush came: {flushes}");
        assert!(lowest > 0.0, "the memtables ran out: {lowest}");
    }

    /// A small PM tier (16 MiB) freed 8 MiB at a time by a job of 20 ms
    /// (400 MiB/s while it runs, idle most of the time), a writer that
    /// wants 200 MB/s for two seconds. Averages started at "drains nothing,
    /// always busy" held it to a fraction of that while they learned.
    #[test]
    fn a_short_fill_is_not_held_to_the_priors() {
        let t0 = Instant::now();
        let cap: f64 = 16.0 * 1048576.0;
        let mut p = Pacer::new();
        let (mut free, mut admitted, mut written) = (cap, 0u64, 0.0f64);
        let mut job_ends: Option<usize> = None;
        let dt = 0.001;
        for i in 0..2000 {
            let now = t0 + Duration::from_secs_f64(i as f64 * dt);
            if i % 10 == 0 {
                let h = Headroom {
                    free_bytes: free.max(0.0) as u64,
                    capacity_bytes: cap as u64,
                    step_bytes: 0,
                };
                p.sample(now, admitted, [None, Some(h)], [false, job_ends.is_some()]);
            }
            let w = p.rate().min(200e6) * dt;
            admitted += w as u64;
            written += w;
            free -= w;
            assert!(free > 0.0, "the resource ran out at {i} ms");
            if job_ends == Some(i) {
                free += cap / 2.0;
                job_ends = None;
            }
            if job_ends.is_none() && free < cap / 2.0 {
                job_ends = Some(i + 20);
            }
        }
        assert!(written > 0.7 * 400e6, "two seconds wrote {written}");
    }

    #[test]
    fn paced_writes_pause_in_short_steps_and_keep_their_credit() {
        let mut p = Pacer::new();
        let t0 = Instant::now();
        let h = Headroom {
            free_bytes: 0,
            capacity_bytes: 10 << 20,
            step_bytes: 1 << 20,
        };
        p.sample(t0, 0, [Some(h), None], [true; 2]);
        assert_eq!(p.rate(), MIN_RATE);
        // 1 MiB/s: a 100-byte write owes ~95 µs, under MIN_PAUSE; the
        // debt accumulates until it is worth a sleep, never above a few.
        let mut paused = Duration::ZERO;
        let mut n = 0;
        for _ in 0..100 {
            let d = p.pause_for(100, t0);
            if !d.is_zero() {
                assert!(d >= MIN_PAUSE && d < Duration::from_millis(11));
                n += 1;
            }
            paused = paused.max(d);
        }
        assert!(n > 0 && paused > Duration::ZERO);
        assert_eq!(p.pause_for(0, t0 + Duration::from_secs(60)), Duration::ZERO);
    }

    #[test]
    fn compaction_competes_for_the_cpu_near_a_limit_and_yields_far_from_it() {
        let mib = 1048576.0;
        // Nothing near a limit: yield.
        assert!(!background_urgent(false, f64::INFINITY, 100.0 * mib, false));
        // A delay or a stop: compete, whatever the allowance.
        assert!(background_urgent(false, f64::INFINITY, 0.0, true));
        // The allowance within 2x of the writes: compete...
        assert!(background_urgent(false, 190.0 * mib, 100.0 * mib, false));
        assert!(!background_urgent(false, 210.0 * mib, 100.0 * mib, false));
        // ...until it is past 3x (no switching back and forth near 2x).
        assert!(background_urgent(true, 250.0 * mib, 100.0 * mib, false));
        assert!(!background_urgent(true, 310.0 * mib, 100.0 * mib, false));
        // No writes: the floor rate is the yardstick, not zero.
        assert!(background_urgent(false, MIN_RATE, 0.0, false));
        assert!(!background_urgent(false, 4.0 * MIN_RATE, 0.0, false));
    }

    #[test]
    fn the_rate_meter_sees_the_last_second_and_its_peak() {
        let m = RateMeter::new();
        assert_eq!(m.rates_at(0), (0.0, 0.0));
        // 1500 bytes in slot 5, 300 in slot 40 (seconds 0 and 4).
        m.add_at(5, 1000);
        m.add_at(5, 500);
        m.add_at(40, 300);
        assert_eq!(m.rates_at(6), (1500.0, 1500.0));
        assert_eq!(m.rates_at(41), (300.0, 1500.0));
        // A minute later slot 5's count is stale (slot 40's is not), then
        // its place is reused.
        assert_eq!(m.rates_at(6 + SLOTS as u64), (0.0, 300.0));
        m.add_at(5 + SLOTS as u64, 7);
        assert_eq!(m.rates_at(6 + SLOTS as u64).0, 7.0);
    }
}
