//! `tierkv-raft bench`: replicated write throughput and commit latency of a
//! 3-node cluster per store, side by side, on one machine. For each store
//! it starts three `serve` processes on loopback, forms the cluster, runs
//! closed-loop clients that put random keys on the leader for a warm-up and
//! a measured window, and reports ops/s and the commit latency each client
//! saw (send to acknowledgement: Raft replication to a quorum, the store's
//! durable append on each node, apply), with where the leader's store time
//! went (the synced append per call, the committed-id save, apply).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tierkv_raft::client::{call, Client, Cluster, Outcome};
use tierkv_raft::kv::Backend;
use tierkv_raft::Request;

/// Bench flags.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Stores to compare, in this order: tierkv designs (classic,
    /// triangle, ...) and rocksdb.
    #[arg(long, default_value = "classic,triangle,rocksdb")]
    stores: String,
    /// Concurrent closed-loop clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Measured seconds per store.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Warm-up seconds per store (not measured).
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Distinct keys.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Base port (node i of the k-th store listens on base + 10k + i).
    #[arg(long, default_value_t = 24000)]
    base_port: u16,
    /// Data directory (a subdirectory per store; removed first).
    #[arg(long, default_value = "/tmp/tierkv-raft-bench")]
    dir: PathBuf,
    /// PM base directory for PM designs.
    #[arg(long, default_value = "/dev/shm/tierkv-raft-bench")]
    pm_dir: PathBuf,
    /// Each node snapshots its state after this many applied entries
    /// (`serve --snapshot-logs`).
    #[arg(long, default_value_t = 5000)]
    snapshot_logs: u64,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

fn counter(m: &Value, k: &str) -> u64 {
    m.get("store_times")
        .and_then(|t| t.get(k))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// Runs the bench.
pub async fn run(a: BenchArgs) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let mut results = Vec::new();
    println!(
        "| store | clients | ops/s | commit P50 ms | P99 ms | P99.9 ms | leader append: calls/s, entries/call, ms/call | committed save ms | apply ms/call |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (k, store) in a.stores.split(',').filter(|s| !s.is_empty()).enumerate() {
        let backend = Backend::parse(store)?;
        let name = store.strip_prefix("tierkv:").unwrap_or(store);
        let dir = a.dir.join(format!("{k}-{name}"));
        let pm = a.pm_dir.join(format!("{k}-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&pm);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let needs_pm = matches!(backend, Backend::Tierkv(p) if p.needs_pm());
        let extra: Vec<String> = vec![
            "--pm-size".into(),
            (256u64 << 20).to_string(),
            "--memtable-size".into(),
            (64usize << 20).to_string(),
            "--snapshot-logs".into(),
            a.snapshot_logs.to_string(),
        ];
        let base = a.base_port + 10 * k as u16;
        let mut cluster = Cluster::start(
            &exe,
            3,
            base,
            name,
            &dir,
            needs_pm.then_some(pm.as_path()),
            &extra,
        )?;
        cluster.form(Duration::from_secs(30)).await?;
        let leader = cluster.wait_leader(Duration::from_secs(10)).await?;
        let leader_addr = cluster.nodes[leader].addr.clone();
        let members = cluster.members();

        let stop = Arc::new(AtomicBool::new(false));
        let measuring = Arc::new(AtomicBool::new(false));
        let lat = Arc::new(Mutex::new(Vec::<u64>::new()));
        let errors = Arc::new(Mutex::new(0u64));
        let mut tasks = Vec::new();
        for c in 0..a.clients {
            let (stop, measuring, lat, errors, members) = (
                Arc::clone(&stop),
                Arc::clone(&measuring),
                Arc::clone(&lat),
                Arc::clone(&errors),
                members.clone(),
            );
            let (value_size, keys) = (a.value_size, a.keys);
            tasks.push(tokio::spawn(async move {
                let mut client = Client::new(&members);
                let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (c as u64 + 1);
                let value: String = "v".repeat(value_size);
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let req = Request::Put {
                        key: format!("key{:012}", x % keys),
                        value: value.clone(),
                    };
                    let t = Instant::now();
                    let o = client.write(&req).await;
                    let us = t.elapsed().as_micros() as u64;
                    if measuring.load(Ordering::Relaxed) {
                        match o {
                            Outcome::Ok(_) => mine.push(us),
                            _ => *errors.lock().unwrap_or_else(|p| p.into_inner()) += 1,
                        }
                    }
                }
                lat.lock().unwrap_or_else(|p| p.into_inner()).extend(mine);
            }));
        }
        tokio::time::sleep(Duration::from_secs(a.warmup)).await;
        let m0 = call(&leader_addr, hyper::Method::GET, "/metrics", None).await?;
        measuring.store(true, Ordering::Relaxed);
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(a.seconds)).await;
        measuring.store(false, Ordering::Relaxed);
        let elapsed = t0.elapsed().as_secs_f64();
        let m1 = call(&leader_addr, hyper::Method::GET, "/metrics", None).await?;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            let _ = t.await;
        }
        cluster.stop();
        let mut l = lat.lock().unwrap_or_else(|p| p.into_inner()).clone();
        l.sort_unstable();
        let ops = l.len() as f64 / elapsed;
        let d = |k: &str| counter(&m1, k).saturating_sub(counter(&m0, k));
        let appends = d("appends").max(1);
        let r = json!({
            "store": store,
            "clients": a.clients,
            "value_size": a.value_size,
            "snapshot_logs": a.snapshot_logs,
            "seconds": elapsed,
            "ops_per_sec": ops,
            "commit_ms_p50": percentile(&l, 0.50),
            "commit_ms_p99": percentile(&l, 0.99),
            "commit_ms_p999": percentile(&l, 0.999),
            "errors": *errors.lock().unwrap_or_else(|p| p.into_inner()),
            "leader_appends_per_sec": d("appends") as f64 / elapsed,
            "leader_entries_per_append": d("appended_entries") as f64 / appends as f64,
            "leader_append_ms": d("append_ns") as f64 / appends as f64 / 1e6,
            "leader_committed_save_ms": d("committed_ns") as f64 / d("committed_saves").max(1) as f64 / 1e6,
            "leader_committed_saves_per_sec": d("committed_saves") as f64 / elapsed,
            "leader_apply_ms": d("apply_ns") as f64 / d("applies").max(1) as f64 / 1e6,
        });
        println!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.0}, {:.1}, {:.3} | {:.3} | {:.3} |",
            store,
            a.clients,
            ops,
            percentile(&l, 0.50),
            percentile(&l, 0.99),
            percentile(&l, 0.999),
            r["leader_appends_per_sec"].as_f64().unwrap_or(0.0),
            r["leader_entries_per_append"].as_f64().unwrap_or(0.0),
            r["leader_append_ms"].as_f64().unwrap_or(0.0),
            r["leader_committed_save_ms"].as_f64().unwrap_or(0.0),
            r["leader_apply_ms"].as_f64().unwrap_or(0.0),
        );
        results.push(r);
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&pm);
    }
    if let Some(p) = &a.json {
        let s = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
        std::fs::write(p, s).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}
