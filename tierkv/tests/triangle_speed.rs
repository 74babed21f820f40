//! A quick speed sanity check of the PM container designs against
//! `classic` — not a benchmark (tierkv-bench is), and no timed assertion.
//!
//! `cargo test --release -p tierkv --test triangle_speed -- --ignored --nocapture`
//! (`TIERKV_SPEED_MB` sets the data volume, default 512).

use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tierkv::{Db, Options, Preset};

/// db_bench's key format: the number big-endian, padded to 16 bytes.
fn key(i: u64) -> Vec<u8> {
    let mut k = i.to_be_bytes().to_vec();
    k.resize(16, b'0');
    k
}

fn run(preset: Preset, hints: bool, mb: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let pm = tempfile::tempdir_in("/dev/shm").expect("shm");
    let pm_size = (mb << 20) / 4;
    let mem = 16u64 << 20;
    let mut o = Options {
        design: preset,
        memtable_size_bytes: mem as usize,
        sst_size_bytes: mem,
        l1_size_bytes: 64 << 20,
        pm_hints: hints,
        ..Options::default()
    };
    if preset.needs_pm() {
        o.pm_dir = Some(pm.path().to_path_buf());
        o.pm_size_bytes = pm_size;
        o.l1_size_bytes = pm_size;
    }
    let db = Arc::new(Db::open(dir.path(), o).expect("open"));
    let n = (mb << 20) / 4096;
    let value = vec![0x5au8; 4096];
    let mut rng = SmallRng::seed_from_u64(1);
    let t = Instant::now();
    for _ in 0..n {
        db.put(&key(rng.gen_range(0..n)), &value).expect("put");
    }
    let fill = t.elapsed();
    let st = db.stats();
    let t = Instant::now();
    let reads = 20_000;
    for _ in 0..reads {
        db.get(&key(rng.gen_range(0..n))).expect("get");
    }
    let read = t.elapsed();
    let l0 = db
        .property("tierkv.num-files-at-level0")
        .unwrap_or_default();
    let sides: Vec<_> = st
        .compactions
        .iter()
        .filter(|c| c.kind == "right-angle" || c.kind == "column" || c.kind == "l0-l1")
        .collect();
    let side_secs: f64 =
        sides.iter().map(|c| c.duration.as_secs_f64()).sum::<f64>() / sides.len().max(1) as f64;
    eprintln!(
        "{preset:<9} hints={hints:<5} fill {:>7.0} ops/s  stall {:>5.1}%  ssd WA {:.2}  L0→L1 jobs {} (avg {:.2}s)  read {:>7.0} ops/s  L0 rows {l0}",
        n as f64 / fill.as_secs_f64(),
        100.0 * st.stall_total().as_secs_f64() / fill.as_secs_f64(),
        st.ssd_write_amp(),
        sides.len(),
        side_secs,
        reads as f64 / read.as_secs_f64(),
    );
    let mut causes = std::collections::BTreeMap::new();
    for s in &st.stalls {
        *causes.entry(s.cause.name()).or_insert(0.0) += s.duration.as_secs_f64();
    }
    let mut kinds = std::collections::BTreeMap::new();
    for c in &st.compactions {
        let e = kinds.entry(c.kind.clone()).or_insert((0, 0u64, 0.0));
        e.0 += 1;
        e.1 += c.output_bytes >> 20;
        e.2 += c.duration.as_secs_f64();
    }
    eprintln!(
        "    stalls {causes:?}\n    jobs (n, MB out, s) {kinds:?}\n    written {:?}\n    flushes {} avg {:.3}s; user MB {}",
        st.written,
        st.flushes.len(),
        st.flushes.iter().map(|f| f.duration.as_secs_f64()).sum::<f64>() / st.flushes.len().max(1) as f64,
        st.user_bytes >> 20
    );
    eprintln!(
        "    levels {}",
        db.property("tierkv.levels")
            .unwrap_or_default()
            .replace('\n', "; ")
    );
}

#[test]
#[ignore]
fn speed_sanity() {
    let mb: u64 = std::env::var("TIERKV_SPEED_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512);
    run(Preset::Classic, true, mb);
    run(Preset::Matrix, true, mb);
    run(Preset::Triangle, true, mb);
    run(Preset::Triangle, false, mb);
}

/// L0 point reads with and without cross-row hints: a container of many
/// rows (no compaction), gets of keys that live in the container.
#[test]
#[ignore]
fn l0_reads_with_and_without_hints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pm = tempfile::tempdir_in("/dev/shm").expect("shm");
    let rows = 40u64;
    let per_row = 20_000u64;
    let options = |hints: bool| Options {
        design: Preset::Triangle,
        memtable_size_bytes: 4 << 20,
        pm_dir: Some(pm.path().to_path_buf()),
        pm_size_bytes: 512 << 20,
        pm_container_limit_bytes: 1 << 40,
        pm_hints: hints,
        ..Options::default()
    };
    {
        let db = Db::open(dir.path(), options(true)).expect("open");
        let mut rng = SmallRng::seed_from_u64(3);
        for _ in 0..rows {
            for _ in 0..per_row {
                db.put(&key(rng.gen_range(0..1_000_000_000)), b"v")
                    .expect("put");
            }
            db.flush().expect("flush");
        }
        eprintln!(
            "rows in L0: {}",
            db.property("tierkv.num-files-at-level0")
                .unwrap_or_default()
        );
    }
    for hints in [true, false, true, false] {
        let db = Db::open(dir.path(), options(hints)).expect("open");
        let mut rng = SmallRng::seed_from_u64(3);
        let keys: Vec<Vec<u8>> = (0..rows * per_row)
            .map(|_| key(rng.gen_range(0..1_000_000_000)))
            .collect();
        let mut pick = SmallRng::seed_from_u64(9);
        // Warm up (resolve the view), then time.
        for k in keys.iter().take(1000) {
            db.get(k).expect("get");
        }
        let n = 200_000;
        let t = Instant::now();
        let mut found = 0;
        for _ in 0..n {
            let k = &keys[pick.gen_range(0..keys.len())];
            found += usize::from(db.get(k).expect("get").is_some());
        }
        let el = t.elapsed();
        eprintln!(
            "hints={hints:<5} {:>9.0} gets/s ({found} found)",
            n as f64 / el.as_secs_f64()
        );
    }
}
