//! `Options::background_nice`, `Options::background_sched_idle`,
//! `Options::compaction_sched_idle` and
//! `Options::adaptive_compaction_priority`: the engine's background
//! threads run at the niceness and under the policy asked for (the flush
//! thread keeps its own under the last two), and the foreground threads
//! keep theirs. Alone in its test
//! binary, one test, so that the only `tierkv-bg-*` threads are those of
//! the one database open.

#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tierkv::storage::mem::MemFs;
use tierkv::{Db, Options};

/// A thread's niceness and scheduling policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Priority {
    nice: i64,
    policy: i64,
}

/// Reads a `/proc/.../stat`: the thread's name and priority.
fn parse_stat(stat: &str) -> (String, Priority) {
    // pid (comm) state ...: the fields after the ')' start at 3; nice is
    // 19, policy 41.
    let close = stat.rfind(')').expect("comm");
    let name = stat[stat.find('(').expect("comm") + 1..close].to_string();
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> i64 { fields[n - 3].parse().expect("a number") };
    (
        name,
        Priority {
            nice: field(19),
            policy: field(41),
        },
    )
}

/// (thread name, priority) of every thread of this process.
fn threads() -> Vec<(String, Priority)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let p = e.expect("task").path();
        let Ok(stat) = std::fs::read_to_string(p.join("stat")) else {
            continue; // the thread ended meanwhile
        };
        out.push(parse_stat(&stat));
    }
    out
}

fn me() -> Priority {
    parse_stat(&std::fs::read_to_string("/proc/thread-self/stat").expect("stat")).1
}

/// Opens a database with `tune` applied and checks that every background
/// thread gets to `want` (a thread sets its own priority as it starts,
/// which may be just after `open` returns: it is given a few seconds).
fn check(tune: impl FnOnce(&mut Options), want: Priority) {
    check_each(tune, |_| want)
}

/// [`check`] with the priority each background thread should get, by its
/// name (`tierkv-bg-0` is the flush thread).
fn check_each(tune: impl FnOnce(&mut Options), want: impl Fn(&str) -> Priority) {
    let mut o = Options {
        fs: Arc::new(MemFs::new()),
        ..Options::default()
    };
    tune(&mut o);
    let db = Db::open(PathBuf::from("/db"), o).expect("open");
    db.put(b"k", b"v").expect("put");
    db.flush().expect("flush");
    let t0 = Instant::now();
    let bg = loop {
        let bg: Vec<_> = threads()
            .into_iter()
            .filter(|(n, _)| n.starts_with("tierkv-bg"))
            .collect();
        if (!bg.is_empty() && bg.iter().all(|(n, p)| *p == want(n)))
            || t0.elapsed() > Duration::from_secs(10)
        {
            break bg;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(!bg.is_empty(), "no background thread found");
    for (name, p) in &bg {
        assert_eq!(*p, want(name), "{name}");
    }
    drop(db);
    // Closing joined them.
    assert!(threads().iter().all(|(n, _)| !n.starts_with("tierkv-bg")));
}

#[test]
fn background_threads_run_at_the_priority_asked_for() {
    let base = me();
    assert_eq!(base.policy, libc::SCHED_OTHER as i64);
    check(
        |o| o.background_nice = 7,
        Priority {
            nice: (base.nice + 7).min(19),
            ..base
        },
    );
    check(
        |o| o.background_sched_idle = true,
        Priority {
            policy: libc::SCHED_IDLE as i64,
            ..base
        },
    );
    // The compaction threads only: the flush thread keeps its priority.
    let compaction_idle = |name: &str| match name {
        "tierkv-bg-0" => base,
        _ => Priority {
            policy: libc::SCHED_IDLE as i64,
            ..base
        },
    };
    check_each(
        |o| {
            o.background_threads = 3;
            o.compaction_sched_idle = true;
        },
        compaction_idle,
    );
    // Adaptive: the compaction threads start under SCHED_IDLE (nothing
    // presses them yet), the flush thread keeps its priority; writes that
    // outrun compaction bring them back to normal priority. Without the
    // right to leave SCHED_IDLE again the option is refused at open.
    if tierkv::sched::can_leave_idle() {
        pressure_switches_compaction_to_normal_priority();
        check_each(
            |o| {
                o.background_threads = 3;
                o.adaptive_compaction_priority = true;
            },
            compaction_idle,
        );
    } else {
        let o = Options {
            fs: Arc::new(MemFs::new()),
            adaptive_compaction_priority: true,
            ..Options::default()
        };
        match Db::open(PathBuf::from("/db"), o) {
            Err(tierkv::Error::InvalidOptions(m)) => {
                assert!(m.contains("adaptive_compaction_priority"), "{m}")
            }
            Err(e) => panic!("expected InvalidOptions, got {e}"),
            Ok(_) => panic!("adaptive_compaction_priority accepted without the right to use it"),
        }
    }
    // This (foreground) thread is untouched.
    assert_eq!(me(), base);
}

/// Writes far faster than tiny L0 triggers let compaction keep up with:
/// the pacer's allowance meets the write rate (or writes are delayed),
/// and the compaction threads leave `SCHED_IDLE` — seen in the stats and
/// in the threads' policy while the pressure lasts.
fn pressure_switches_compaction_to_normal_priority() {
    let o = Options {
        fs: Arc::new(MemFs::new()),
        adaptive_compaction_priority: true,
        memtable_size_bytes: 64 << 10,
        sst_size_bytes: 64 << 10,
        l1_size_bytes: 256 << 10,
        l0_compaction_trigger: 2,
        l0_slowdown_trigger: 3,
        l0_stop_trigger: 6,
        ..Options::default()
    };
    let db = Db::open(PathBuf::from("/db"), o).expect("open");
    let switches =
        |db: &Db| -> u64 { db.stats().compaction_priority.expect("adaptive priority").0 };
    assert_eq!(switches(&db), 0);
    let value = vec![7u8; 1000];
    let mut saw_normal = false;
    for i in 0u64..200_000 {
        let key = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_be_bytes();
        db.put(&key, &value).expect("put");
        if i % 1000 == 999 {
            saw_normal |= threads()
                .iter()
                .any(|(n, p)| n == "tierkv-bg-1" && p.policy == libc::SCHED_OTHER as i64);
            if saw_normal && switches(&db) >= 1 {
                break;
            }
        }
    }
    assert!(switches(&db) >= 1, "no switch under pressure");
    assert!(saw_normal, "the compaction thread never left SCHED_IDLE");
    let table = db.property("tierkv.stats").expect("stats");
    assert!(table.contains("compaction priority (adaptive)"), "{table}");
    // Writes stop: a second later nothing presses compaction, and the
    // flush thread puts it back under SCHED_IDLE (reads after a fill).
    let t0 = Instant::now();
    while !db.stats().compaction_priority.expect("adaptive").1 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "compaction stayed at normal priority with no writes"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let t0 = Instant::now();
    while !threads()
        .iter()
        .any(|(n, p)| n == "tierkv-bg-1" && p.policy == libc::SCHED_IDLE as i64)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "not back under SCHED_IDLE"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
