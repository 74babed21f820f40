//! Kill a child process mid-workload (SIGKILL), reopen, and check that every
//! acknowledged write survived and that nothing unwritten appeared — on a
//! real directory, for every design, with the WAL on SSD and in a PM region
//! under /dev/shm. A process crash keeps what the OS was handed, so
//! unsynced writes must survive it too (every write reaches the OS before
//! it is acknowledged, as in RocksDB).
//!
//! The child is this test binary run again with `TIERKV_CRASH_CHILD` set: it
//! writes batches of one to four keys, every third one synced, and prints
//! `ack <i>` after each acknowledgement. The parent kills it after a random
//! number of acknowledgements (seeded), reopens the database and checks
//! every batch acknowledged so far, the batch that may have been in flight
//! (all or nothing), and that the next batches are absent.
//!
//! `TIERKV_KILL_CYCLES` sets the kills per design (default 2; the campaign
//! at scale, `scripts/campaigns.sh`, runs 100), `TIERKV_KILL_DESIGN` keeps
//! one case.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::{Db, Options, Preset, ReadOptions, WalPlacement, WriteBatch, WriteOptions};

/// Keys of batch `i` (one to four, all distinct across batches).
fn batch_keys(i: u64) -> Vec<Vec<u8>> {
    let spread = (i.wrapping_mul(2_654_435_761)) % (1 << 32);
    (0..1 + i % 4)
        .map(|j| format!("{spread:08x}-{i}-{j}").into_bytes())
        .collect()
}

fn value(i: u64, j: usize) -> Vec<u8> {
    format!("value-{i}-{j}-")
        .repeat(1 + (i % 40) as usize)
        .into_bytes()
}

/// One kind of database under the test.
#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    preset: Preset,
    /// A PM tier (or just a PM WAL, for classic) under /dev/shm.
    pm: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "classic-ssd-wal",
        preset: Preset::Classic,
        pm: false,
    },
    Case {
        name: "classic-pm-wal",
        preset: Preset::Classic,
        pm: true,
    },
    Case {
        name: "vlsm",
        preset: Preset::Vlsm,
        pm: false,
    },
    Case {
        name: "triangle",
        preset: Preset::Triangle,
        pm: true,
    },
    Case {
        name: "matrix",
        preset: Preset::Matrix,
        pm: true,
    },
    Case {
        name: "rangetab",
        preset: Preset::RangeTab,
        pm: true,
    },
    Case {
        name: "tlsm",
        preset: Preset::Tlsm,
        pm: true,
    },
    Case {
        name: "nvcache",
        preset: Preset::NvCache,
        pm: true,
    },
];

fn case_named(name: &str) -> Case {
    *CASES
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case {name}"))
}

fn options(case: Case, pm_dir: Option<&Path>) -> Options {
    let mut o = Options {
        design: case.preset,
        memtable_size_bytes: 256 << 10,
        sst_size_bytes: 256 << 10,
        l1_size_bytes: 1 << 20,
        l0_compaction_trigger: 2,
        ..Options::default()
    };
    if let Some(p) = pm_dir {
        o.pm_dir = Some(p.to_path_buf());
        o.pm_size_bytes = 16 << 20;
        o.wal = Some(WalPlacement::Pm);
        if case.preset.needs_pm() {
            o.l1_size_bytes = 4 << 20;
            o.pm_container_limit_bytes = 4 << 20;
        }
    }
    o
}

/// The child: write batches from `start` until killed.
fn child(case: Case, dir: &Path, pm_dir: Option<&Path>, start: u64) {
    let db = Db::open(dir, options(case, pm_dir)).expect("child open");
    let mut i = start;
    loop {
        let mut b = WriteBatch::new();
        for (j, k) in batch_keys(i).iter().enumerate() {
            b.put(k, &value(i, j));
        }
        db.write(
            b,
            &WriteOptions {
                sync: i.is_multiple_of(3),
            },
        )
        .expect("child write");
        println!("ack {i}");
        i += 1;
    }
}

/// Everything in the database (one scan).
fn contents(db: &Db) -> HashMap<Vec<u8>, Vec<u8>> {
    let mut it = db.iter(ReadOptions::default()).expect("iter");
    it.seek_to_first();
    let mut m = HashMap::new();
    while it.valid() {
        m.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.status().expect("scan");
    m
}

/// Whether batch `i` is in `got`: true if whole, false if absent; panics on
/// a partial batch or a wrong value.
fn batch_state(got: &HashMap<Vec<u8>, Vec<u8>>, i: u64, what: &str) -> bool {
    let keys = batch_keys(i);
    let present = keys.iter().filter(|k| got.contains_key(*k)).count();
    assert!(
        present == 0 || present == keys.len(),
        "{what}: batch {i} is torn ({present} of {} keys)",
        keys.len()
    );
    for (j, k) in keys.iter().enumerate() {
        if let Some(v) = got.get(k) {
            assert_eq!(v, &value(i, j), "{what}: batch {i} key {j}: wrong value");
        }
    }
    present > 0
}

fn cycles() -> u64 {
    std::env::var("TIERKV_KILL_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2)
}

fn run_cycles(case: Case) {
    if std::env::var("TIERKV_KILL_DESIGN").is_ok_and(|d| d != case.name) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    let pm_tmp = case
        .pm
        .then(|| tempfile::tempdir_in("/dev/shm").expect("shm tempdir"));
    let pm_dir: Option<PathBuf> = pm_tmp.as_ref().map(|t| t.path().to_path_buf());
    let mut rng = SmallRng::seed_from_u64(0x6b11 ^ case.name.len() as u64);
    // Every batch acknowledged so far (and every batch in flight that a
    // reopen showed whole): all are checked after every kill.
    let mut acked: Vec<u64> = Vec::new();
    let mut next = 0u64;
    let n = cycles();
    for cycle in 0..n {
        let mut c = Command::new(std::env::current_exe().expect("exe"))
            .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env("TIERKV_CRASH_CHILD", "1")
            .env("TIERKV_CRASH_CASE", case.name)
            .env("TIERKV_CRASH_DIR", &dir)
            .env(
                "TIERKV_CRASH_PM_DIR",
                pm_dir.as_deref().unwrap_or(Path::new("")),
            )
            .env("TIERKV_CRASH_START", next.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let mut out = BufReader::new(c.stdout.take().expect("stdout")).lines();
        let mut last_ack: Option<u64> = None;
        let target = rng.gen_range(20..1500);
        let mut record = |line: std::io::Result<String>| -> bool {
            let Some(i) = line
                .ok()
                // The first one may follow the test harness's own output
                // on the same line.
                .and_then(|l| {
                    l.rsplit_once("ack ")
                        .and_then(|(_, n)| n.parse::<u64>().ok())
                })
            else {
                return false;
            };
            last_ack = Some(i);
            acked.push(i);
            i >= next + target
        };
        for line in out.by_ref() {
            if record(line) {
                break;
            }
        }
        c.kill().expect("kill");
        let _ = c.wait();
        // Acknowledgements the child printed before it died, still in the
        // pipe.
        for line in out {
            record(line);
        }
        let last = last_ack.expect("the child acknowledged writes");
        let what = format!("{}: cycle {cycle}", case.name);
        let db = Db::open(&dir, options(case, pm_dir.as_deref()))
            .unwrap_or_else(|e| panic!("{what}: reopen after kill: {e}"));
        let got = contents(&db);
        for &i in &acked {
            assert!(
                batch_state(&got, i, &what),
                "{what}: acknowledged batch {i} lost (last ack {last})"
            );
        }
        // The batch in flight may be there or not (whole); nothing else.
        if batch_state(&got, last + 1, &what) {
            acked.push(last + 1);
        }
        let expected: std::collections::HashSet<Vec<u8>> =
            acked.iter().flat_map(|&i| batch_keys(i)).collect();
        let extra: Vec<String> = got
            .keys()
            .filter(|k| !expected.contains(*k))
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        assert!(
            extra.is_empty(),
            "{what}: keys that were never written are there (last ack {last}): {extra:?}"
        );
        // Point reads agree with the scan.
        for &i in acked.iter().rev().take(200) {
            for (j, k) in batch_keys(i).iter().enumerate() {
                assert_eq!(db.get(k).expect("get"), Some(value(i, j)), "{what}: get");
            }
        }
        next = last + 2;
        db.close().expect("close");
    }
    eprintln!(
        "SUMMARY kill {}: {n} kill -9 of a child writing synced and unsynced batches, {} acknowledged batches all present after every reopen, no batch torn, none unwritten present",
        case.name,
        acked.len()
    );
}

#[test]
fn child_entry() {
    if std::env::var_os("TIERKV_CRASH_CHILD").is_none() {
        return; // only meaningful as the child of the tests below
    }
    let case = case_named(&std::env::var("TIERKV_CRASH_CASE").expect("case"));
    let dir = PathBuf::from(std::env::var_os("TIERKV_CRASH_DIR").expect("dir"));
    let pm = std::env::var_os("TIERKV_CRASH_PM_DIR")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let start: u64 = std::env::var("TIERKV_CRASH_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    child(case, &dir, pm.as_deref(), start);
}

#[test]
fn kill_classic_ssd_wal() {
    run_cycles(case_named("classic-ssd-wal"));
}

#[test]
fn kill_classic_pm_wal() {
    run_cycles(case_named("classic-pm-wal"));
}

#[test]
fn kill_vlsm() {
    run_cycles(case_named("vlsm"));
}

#[test]
fn kill_triangle() {
    run_cycles(case_named("triangle"));
}

#[test]
fn kill_matrix() {
    run_cycles(case_named("matrix"));
}

#[test]
fn kill_rangetab() {
    run_cycles(case_named("rangetab"));
}

#[test]
fn kill_tlsm() {
    run_cycles(case_named("tlsm"));
}

#[test]
fn kill_nvcache() {
    run_cycles(case_named("nvcache"));
}
