//! `Options::background_nice`, `Options::background_sched_idle` and
//! `Options::compaction_sched_idle`: the engine's background threads run
//! at the niceness and under the policy asked for (the flush thread keeps
//! its own under the last), and the foreground threads keep theirs. Alone in its test
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
    let db = Db::open(&PathBuf::from("/db"), o).expect("open");
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
    check_each(
        |o| {
            o.background_threads = 3;
            o.compaction_sched_idle = true;
        },
        |name| match name {
            "tierkv-bg-0" => base,
            _ => Priority {
                policy: libc::SCHED_IDLE as i64,
                ..base
            },
        },
    );
    // This (foreground) thread is untouched.
    assert_eq!(me(), base);
}
