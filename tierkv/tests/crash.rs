//! Kill a child process mid-workload (SIGKILL), reopen, and check that every
//! acknowledged write survived — on a real directory, with the WAL on SSD
//! and with the WAL in a PM region under /dev/shm. A process crash keeps
//! what the OS was handed, so unsynced writes must survive it too (every
//! write reaches the OS before it is acknowledged, as in RocksDB).
//!
//! The child is this test binary run again with `TIERKV_CRASH_CHILD` set: it
//! writes batches (synced unless `TIERKV_CRASH_SYNC=0`) and prints `ack <i>`
//! after each acknowledgement.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tierkv::{Db, Options, WriteBatch, WriteOptions};

fn key(i: u64) -> Vec<u8> {
    format!("key{:08}", (i * 7919) % 1_000_003).into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("value-{i}-")
        .repeat(1 + (i % 40) as usize)
        .into_bytes()
}

fn options(pm_dir: Option<&Path>) -> Options {
    let mut o = Options {
        memtable_size_bytes: 256 << 10,
        sst_size_bytes: 256 << 10,
        l1_size_bytes: 1 << 20,
        l0_compaction_trigger: 2,
        ..Options::default()
    };
    if let Some(p) = pm_dir {
        o.pm_dir = Some(p.to_path_buf());
        o.pm_size_bytes = 16 << 20;
    }
    o
}

/// The child: write batches from `start` until killed.
fn child(dir: &Path, pm_dir: Option<&Path>, start: u64, sync: bool) {
    let db = Db::open(dir, options(pm_dir)).expect("child open");
    let mut i = start;
    loop {
        let mut b = WriteBatch::new();
        b.put(&key(i), &value(i));
        db.write(b, &WriteOptions { sync }).expect("child write");
        println!("ack {i}");
        i += 1;
    }
}

fn run_cycles(pm: bool, sync: bool) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    let pm_tmp = pm.then(|| tempfile::tempdir_in("/dev/shm").expect("shm tempdir"));
    let pm_dir: Option<PathBuf> = pm_tmp.as_ref().map(|t| t.path().to_path_buf());
    let mut next = 0u64;
    for cycle in 0..3 {
        let mut c = Command::new(std::env::current_exe().expect("exe"))
            .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env("TIERKV_CRASH_CHILD", "1")
            .env("TIERKV_CRASH_DIR", &dir)
            .env(
                "TIERKV_CRASH_PM_DIR",
                pm_dir.as_deref().unwrap_or(Path::new("")),
            )
            .env("TIERKV_CRASH_START", next.to_string())
            .env("TIERKV_CRASH_SYNC", if sync { "1" } else { "0" })
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let out = BufReader::new(c.stdout.take().expect("stdout"));
        let mut last_ack: Option<u64> = None;
        let target = 1500 + cycle * 700;
        for line in out.lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line
                .strip_prefix("ack ")
                .and_then(|n| n.parse::<u64>().ok())
            {
                last_ack = Some(n);
                if n >= next + target {
                    break;
                }
            }
        }
        c.kill().expect("kill");
        let _ = c.wait();
        let last = last_ack.expect("the child acknowledged writes");
        let db = Db::open(&dir, options(pm_dir.as_deref())).expect("reopen after kill");
        for i in 0..=last {
            assert_eq!(
                db.get(&key(i)).expect("get"),
                Some(value(i)),
                "cycle {cycle}: acknowledged write {i} lost (last ack {last})"
            );
        }
        next = db
            .get(&key(last + 1))
            .expect("get")
            .map_or(last + 1, |_| last + 2);
        db.close().expect("close");
    }
}

#[test]
fn child_entry() {
    if std::env::var_os("TIERKV_CRASH_CHILD").is_none() {
        return; // only meaningful as the child of the tests below
    }
    let dir = PathBuf::from(std::env::var_os("TIERKV_CRASH_DIR").expect("dir"));
    let pm = std::env::var_os("TIERKV_CRASH_PM_DIR")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let start: u64 = std::env::var("TIERKV_CRASH_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let sync = std::env::var("TIERKV_CRASH_SYNC").map_or(true, |s| s != "0");
    child(&dir, pm.as_deref(), start, sync);
}

#[test]
fn kill_during_writes_with_ssd_wal() {
    run_cycles(false, true);
}

#[test]
fn kill_during_unsynced_writes_with_ssd_wal() {
    run_cycles(false, false);
}

#[test]
fn kill_during_writes_with_pm_wal() {
    run_cycles(true, true);
}
