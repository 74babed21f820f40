//! Drives a workload on an engine and measures it, closed loop or open loop.
//!
//! - **Closed loop** (db_bench): each of `threads` threads issues its next
//!   request when the previous one returns; latency = service time.
//! - **Open loop** (vLSM's methodology, [`crate::open_loop`]): a generator
//!   thread issues requests on a fixed schedule (`rate` per second) into a
//!   queue; `threads` workers execute them; latency is measured from each
//!   request's *scheduled* time, so time spent queued behind a stall counts
//!   (no coordinated omission).
//!
//! Latencies go into HdrHistograms in nanoseconds (3 significant digits, up
//! to one hour), one for all requests and one each for reads and writes.
//! Completions are also counted per second since the start (the timeline).
//!
//! Concurrency: workers are scoped threads sharing `&dyn Engine`; each keeps
//! its own [`Tally`], merged at the end. The driving thread only watches an
//! atomic progress counter (progress bar, `--report_interval_seconds`).

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::ProgressBar;

use crate::engines::Engine;
use crate::error::{Error, Result};
use crate::open_loop::{wait_until, OpQueue, Schedule};
use crate::workload::{Class, Executor, Kind, Op, Outcome, Workload};

/// Nice value of open-loop client threads (generator and workers), so that
/// they run as soon as a request is due instead of waiting behind the
/// engine's background threads for a scheduler slice.
pub const CLIENT_NICE: i32 = -10;

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Client threads (closed loop) or workers (open loop).
    pub threads: usize,
    /// Open loop at this many requests per second; `None` = closed loop.
    pub rate: Option<f64>,
    /// Print throughput every this many seconds to stderr (0 = never).
    pub report_interval_s: u64,
    /// readwhilewriting's writer at this many puts per second (`None`: as
    /// fast as it can).
    pub writer_rate: Option<f64>,
}

/// Latency histogram in nanoseconds.
pub type Hist = Histogram<u64>;

/// A new latency histogram (1 ns … 1 h, 3 significant digits).
pub fn new_hist() -> Hist {
    // 1 ns .. 1 hour at 3 significant digits is a valid configuration, so
    // this cannot fail; fall back to an auto-resizing histogram regardless.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
        .or_else(|_| Histogram::new(3))
        .unwrap_or_else(|_| unreachable_hist())
}

#[allow(clippy::panic)]
fn unreachable_hist() -> Hist {
    panic!("hdrhistogram rejected a constant, valid configuration")
}

/// Per-thread measurements, merged into a [`Measured`].
#[derive(Debug)]
pub struct Tally {
    /// Counted requests.
    pub ops: u64,
    /// db_bench bytes.
    pub bytes: u64,
    /// Key + value bytes written (background writer included).
    pub written: u64,
    /// Reads issued and found.
    pub reads: u64,
    /// Reads that found their key.
    pub found: u64,
    /// All counted requests.
    pub all: Hist,
    /// Reads.
    pub read: Hist,
    /// Writes.
    pub write: Hist,
    /// Completions per second since the start.
    pub timeline: Vec<u64>,
    /// `(start, end)` in ns since the start of every write slower than
    /// [`crate::metrics::SLOW_WRITE_NS`] (start = scheduled start in an
    /// open loop).
    pub slow_writes: Vec<(u64, u64)>,
    /// Every read slower than [`crate::metrics::SLOW_WRITE_NS`]: the
    /// thread's kernel id and `(start, end)` as `slow_writes`, to lay
    /// beside a scheduler trace (`--slow_ops_file`).
    pub slow_reads: Vec<(u32, u64, u64)>,
    /// The kernel id of the thread this tally counts for.
    tid: u32,
}

impl Default for Tally {
    fn default() -> Self {
        Tally::new()
    }
}

impl Tally {
    /// An empty tally.
    pub fn new() -> Tally {
        Tally {
            ops: 0,
            bytes: 0,
            written: 0,
            reads: 0,
            found: 0,
            all: new_hist(),
            read: new_hist(),
            write: new_hist(),
            timeline: Vec::new(),
            slow_writes: Vec::new(),
            slow_reads: Vec::new(),
            tid: crate::sys::thread_id(),
        }
    }

    /// Records one completed request; `counted` = false for the background
    /// writer of readwhilewriting (its latency is kept, not its count).
    fn record(
        &mut self,
        start: Instant,
        done: Instant,
        latency: Duration,
        out: &Outcome,
        counted: bool,
    ) {
        let ns = latency.as_nanos().min(u64::MAX as u128) as u64;
        self.written += out.written;
        match out.class {
            Some(Class::Read) => {
                self.read.saturating_record(ns.max(1));
                self.reads += 1;
                self.found += u64::from(out.found);
                if ns > crate::metrics::SLOW_WRITE_NS {
                    let end = done.saturating_duration_since(start).as_nanos() as u64;
                    self.slow_reads
                        .push((self.tid, end.saturating_sub(ns), end));
                }
            }
            Some(Class::Write) => {
                self.write.saturating_record(ns.max(1));
                if ns > crate::metrics::SLOW_WRITE_NS {
                    let end = done.saturating_duration_since(start).as_nanos() as u64;
                    self.slow_writes.push((end.saturating_sub(ns), end));
                }
            }
            None => {}
        }
        if counted {
            self.ops += 1;
            self.bytes += out.bytes;
            self.all.saturating_record(ns.max(1));
            let sec = done.saturating_duration_since(start).as_secs() as usize;
            if self.timeline.len() <= sec {
                self.timeline.resize(sec + 1, 0);
            }
            self.timeline[sec] += 1;
        }
    }

    fn merge(&mut self, o: Tally) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.written += o.written;
        self.reads += o.reads;
        self.found += o.found;
        let _ = self.all.add(&o.all);
        let _ = self.read.add(&o.read);
        let _ = self.write.add(&o.write);
        if self.timeline.len() < o.timeline.len() {
            self.timeline.resize(o.timeline.len(), 0);
        }
        for (a, b) in self.timeline.iter_mut().zip(o.timeline) {
            *a += b;
        }
        self.slow_writes.extend(o.slow_writes);
        self.slow_reads.extend(o.slow_reads);
    }
}

/// The measurements of one benchmark run.
#[derive(Debug)]
pub struct Measured {
    /// Everything counted.
    pub tally: Tally,
    /// Wall seconds from start to the last completion.
    pub seconds: f64,
    /// Sum over threads of their busy seconds (db_bench's micros/op basis).
    pub thread_seconds: f64,
    /// True if run open loop.
    pub open_loop: bool,
    /// The open-loop rate.
    pub rate: Option<f64>,
    /// CPU seconds of the open-loop generator thread (0 in a closed loop).
    pub generator_cpu_seconds: f64,
    /// `CLOCK_MONOTONIC` nanoseconds of the timeline's time zero (what
    /// `perf record -k CLOCK_MONOTONIC` stamps its samples with).
    pub origin_monotonic_ns: u64,
}

struct Shared {
    done: AtomicU64,
    running: AtomicUsize,
    abort: AtomicBool,
    readers_done: AtomicBool,
}

/// Runs `w` on `engine`.
pub fn run(
    engine: &dyn Engine,
    w: &Workload,
    opts: &RunOptions,
    pb: &ProgressBar,
) -> Result<Measured> {
    let threads = opts.threads.max(1);
    if opts.rate.is_some() && w.kind == Kind::ReadSeq {
        return Err(Error::Usage(
            "readseq runs closed loop only (drop --rate)".into(),
        ));
    }
    let shared = Shared {
        done: AtomicU64::new(0),
        running: AtomicUsize::new(threads),
        abort: AtomicBool::new(false),
        readers_done: AtomicBool::new(false),
    };
    let total = w.total_ops(threads);
    pb.set_length(total);
    // The open loop's op stream is made before the clock starts: a
    // "latest" chooser sums ζ over every key (12–13 ms at 1 M keys), which
    // the first requests would otherwise wait for.
    let mut open_stream = opts.rate.map(|_| w.stream(0, 1));
    let start = Instant::now();
    let sched = opts
        .rate
        .map(|r| Schedule::new(start + Duration::from_millis(5), r));
    // Time zero of the timeline: the first scheduled request in an open loop.
    let origin = sched.as_ref().map_or(start, |s| s.start);
    let origin_monotonic_ns = {
        let (mono, now) = (crate::sys::monotonic_ns(), Instant::now());
        let ahead = origin.saturating_duration_since(now).as_nanos() as u64;
        let behind = now.saturating_duration_since(origin).as_nanos() as u64;
        (mono + ahead).saturating_sub(behind)
    };
    let queue = OpQueue::new();
    let (results, bg, generator_cpu_seconds) = std::thread::scope(|s| {
        let (shared, queue) = (&shared, &queue);
        let bg = w.background_writer.then(|| {
            s.spawn(move || background_writer(engine, w, shared, origin, opts.writer_rate))
        });
        let generator = sched
            .as_ref()
            .zip(open_stream.take())
            .map(|(sched, mut gen)| {
                s.spawn(move || {
                    crate::sys::raise_thread_priority(CLIENT_NICE);
                    sched.generate(total, queue, &shared.abort, || gen.next_op());
                    crate::sys::thread_cpu_seconds()
                })
            });
        let handles: Vec<_> = (0..threads)
            .map(|t| match sched {
                None => s.spawn(move || closed_worker(engine, w, t, threads, shared, origin)),
                Some(_) => s.spawn(move || open_worker(engine, w, t, queue, shared, origin)),
            })
            .collect();
        watch(shared, pb, opts.report_interval_s, start);
        let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        shared.readers_done.store(true, Ordering::Release);
        let bg = bg.map(|h| h.join());
        let gen_cpu = generator.map_or(0.0, |h| h.join().unwrap_or(0.0));
        (results, bg, gen_cpu)
    });
    let mut tally = Tally::new();
    let mut thread_seconds = 0.0;
    let mut last_done = origin;
    for r in results {
        let (t, secs, end) = r.map_err(|_| Error::Other("worker thread panicked".into()))??;
        tally.merge(t);
        thread_seconds += secs;
        last_done = last_done.max(end);
    }
    if let Some(bg) = bg {
        let t = bg.map_err(|_| Error::Other("writer thread panicked".into()))??;
        tally.merge(t);
    }
    pb.set_position(tally.ops);
    let seconds = last_done
        .saturating_duration_since(origin)
        .as_secs_f64()
        .max(1e-9);
    Ok(Measured {
        tally,
        seconds,
        thread_seconds,
        open_loop: opts.rate.is_some(),
        rate: opts.rate,
        generator_cpu_seconds,
        origin_monotonic_ns,
    })
}

type WorkerResult = Result<(Tally, f64, Instant)>;

/// Watches progress until every worker has finished.
fn watch(shared: &Shared, pb: &ProgressBar, interval_s: u64, start: Instant) {
    let mut next_report = interval_s;
    let mut last_ops = 0u64;
    while shared.running.load(Ordering::Acquire) > 0 {
        std::thread::sleep(Duration::from_millis(50));
        let done = shared.done.load(Ordering::Relaxed);
        pb.set_position(done);
        let el = start.elapsed().as_secs();
        if interval_s > 0 && el >= next_report {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "{:>6} s: {:>10.0} ops/sec in the last {} s, {} ops",
                el,
                (done - last_ops) as f64 / interval_s as f64,
                interval_s,
                done
            );
            last_ops = done;
            next_report += interval_s;
        }
    }
}

struct Finish<'a>(&'a Shared);
impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

fn closed_worker(
    engine: &dyn Engine,
    w: &Workload,
    t: usize,
    threads: usize,
    shared: &Shared,
    start: Instant,
) -> WorkerResult {
    let _finish = Finish(shared);
    let mut tally = Tally::new();
    let mut exec = Executor::new(engine, w, t);
    let n = w.ops_for_thread(t, threads);
    if w.kind == Kind::ReadSeq {
        return read_seq(engine, n, shared, start, Instant::now(), tally);
    }
    // Made before the first op's clock starts (a "latest" chooser sums ζ
    // over every key: until 2026-11-28 YCSB-D's first read "took" the
    // 12–13 ms of it in every engine).
    let mut stream = w.stream(t, threads);
    let t0 = Instant::now();
    let mut now = t0;
    for i in 0..n {
        if i % 256 == 0 && shared.abort.load(Ordering::Relaxed) {
            break;
        }
        let op = stream.next_op();
        let out = match exec.execute(op) {
            Ok(o) => o,
            Err(e) => {
                shared.abort.store(true, Ordering::Relaxed);
                return Err(e);
            }
        };
        let end = Instant::now();
        tally.record(start, end, end - now, &out, true);
        now = end;
        shared.done.fetch_add(1, Ordering::Relaxed);
    }
    Ok((tally, t0.elapsed().as_secs_f64(), Instant::now()))
}

fn read_seq(
    engine: &dyn Engine,
    n: u64,
    shared: &Shared,
    start: Instant,
    t0: Instant,
    mut tally: Tally,
) -> WorkerResult {
    let mut last = Instant::now();
    let r = engine.scan(&[], n as usize, &mut |k, v| {
        let now = Instant::now();
        let out = Outcome {
            class: Some(Class::Read),
            bytes: (k.len() + v.len()) as u64,
            written: 0,
            found: true,
        };
        tally.record(start, now, now - last, &out, true);
        last = now;
        shared.done.fetch_add(1, Ordering::Relaxed);
    });
    if let Err(e) = r {
        shared.abort.store(true, Ordering::Relaxed);
        return Err(e);
    }
    Ok((tally, t0.elapsed().as_secs_f64(), Instant::now()))
}

fn open_worker(
    engine: &dyn Engine,
    w: &Workload,
    t: usize,
    queue: &OpQueue,
    shared: &Shared,
    start: Instant,
) -> WorkerResult {
    let _finish = Finish(shared);
    let mut tally = Tally::new();
    let mut exec = Executor::new(engine, w, t);
    crate::sys::set_timer_slack_ns(1);
    crate::sys::raise_thread_priority(CLIENT_NICE);
    let t0 = Instant::now();
    while let Some((at, op)) = queue.pop() {
        // Queued up to LOOKAHEAD early: start on schedule, never before.
        wait_until(at);
        let out = match exec.execute(op) {
            Ok(o) => o,
            Err(e) => {
                shared.abort.store(true, Ordering::Relaxed);
                queue.close();
                return Err(e);
            }
        };
        let end = Instant::now();
        tally.record(start, end, end.saturating_duration_since(at), &out, true);
        shared.done.fetch_add(1, Ordering::Relaxed);
    }
    Ok((tally, t0.elapsed().as_secs_f64(), Instant::now()))
}

/// readwhilewriting's writer: uniform puts until the readers finish, as
/// fast as it can or at `rate` puts per second (each put on its schedule;
/// one behind schedule starts at once, no catching up in a burst).
fn background_writer(
    engine: &dyn Engine,
    w: &Workload,
    shared: &Shared,
    start: Instant,
    rate: Option<f64>,
) -> Result<Tally> {
    let mut tally = Tally::new();
    let mut exec = Executor::new(engine, w, usize::MAX / 2);
    let mut rng_stream = w.stream(usize::MAX / 4, 1);
    let interval = rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let mut next = Instant::now();
    while !shared.readers_done.load(Ordering::Acquire) && !shared.abort.load(Ordering::Relaxed) {
        let k = match rng_stream.next_op() {
            Op::Get(k) | Op::Put(k) | Op::Scan(k, _) | Op::ReadModifyWrite(k) | Op::Insert(k) => k,
        };
        if let Some(interval) = interval {
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
            next = next.max(now) + interval;
        }
        let t = Instant::now();
        let out = exec.execute(Op::Put(k))?;
        let end = Instant::now();
        tally.record(start, end, end - t, &out, false);
    }
    Ok(tally)
}
