//! `Options::background_nice`: the engine's background threads run at the
//! niceness asked for, and the foreground threads keep theirs. Alone in its
//! test binary, so that the only `tierkv-bg-*` threads are this database's.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tierkv::storage::mem::MemFs;
use tierkv::{Db, Options};

/// (thread name, niceness) of every thread of this process.
fn threads() -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let p = e.expect("task").path();
        let Ok(stat) = std::fs::read_to_string(p.join("stat")) else {
            continue; // the thread ended meanwhile
        };
        // pid (comm) state ... : fields after the ')' start at 3; nice is 19.
        let (comm, rest) = stat.split_at(stat.rfind(')').expect("comm"));
        let name = comm[comm.find('(').expect("comm") + 1..].to_string();
        let nice: i64 = rest[1..]
            .split_whitespace()
            .nth(16)
            .expect("nice field")
            .parse()
            .expect("nice");
        out.push((name, nice));
    }
    out
}

fn open(nice: i32, dir: &Path) -> Db {
    let o = Options {
        fs: Arc::new(MemFs::new()),
        background_nice: nice,
        ..Options::default()
    };
    Db::open(dir, o).expect("open")
}

#[test]
fn background_threads_run_at_the_niceness_asked_for() {
    let base = threads()
        .into_iter()
        .find(|(n, _)| !n.starts_with("tierkv-bg"))
        .map(|(_, nice)| nice)
        .expect("a foreground thread");
    let db = open(7, &PathBuf::from("/db"));
    db.put(b"k", b"v").expect("put");
    // A thread lowers its own priority as it starts, which may be just
    // after `open` returns: give it a few seconds.
    let want = (base + 7).min(19);
    let t0 = std::time::Instant::now();
    let bg = loop {
        let bg: Vec<_> = threads()
            .into_iter()
            .filter(|(n, _)| n.starts_with("tierkv-bg"))
            .collect();
        if (!bg.is_empty() && bg.iter().all(|(_, nice)| *nice == want))
            || t0.elapsed() > std::time::Duration::from_secs(10)
        {
            break bg;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert!(!bg.is_empty(), "no background thread found");
    for (name, nice) in &bg {
        assert_eq!(*nice, want, "{name}");
    }
    // This (foreground) thread is untouched.
    let me = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
    let nice: i64 = me[me.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(16)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(nice, base);
    drop(db);
}
