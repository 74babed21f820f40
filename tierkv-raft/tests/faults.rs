//! Faults as processes: a 3-node cluster of `tierkv-raft serve` processes
//! on loopback, clients appending unique tokens, and the leader killed
//! with SIGKILL again and again. After every kill a new leader must take
//! over and the old node restart and catch up (from the log, or from a
//! snapshot when the leader purged what it lacks). At the end every node
//! holds the same state, and in it:
//! - every acknowledged write, exactly once (each write appends a unique
//!   token, so a lost or duplicated apply is visible);
//! - no write the client was told definitely failed (never proposed);
//! - writes whose outcome was unknown (timeout, leader lost after
//!   proposing) at most once.
//!
//! Run over `classic` and, at the same time, `triangle`.
//! `TIERKV_RAFT_KILLS` (default 20, per store) and
//! `TIERKV_RAFT_FAULT_STORES` (default `classic`, up to 4 stores) scale it.
//!
//! Also a membership change removing a voter: the rest keep committing,
//! the removed node receives nothing more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tierkv_raft::client::{call, Client, Cluster, Outcome};
use tierkv_raft::Request;

/// A node's `/metrics`.
async fn metrics(addr: &str) -> Result<Value, String> {
    call(addr, hyper::Method::GET, "/metrics", None).await
}

const CLIENTS: usize = 4;

#[derive(Default)]
struct Ledger {
    acked: Vec<String>,
    failed: Vec<String>,
    unknown: Vec<String>,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn leader_kills_lose_or_duplicate_no_acknowledged_write() {
    let kills: usize = env_or("TIERKV_RAFT_KILLS", 20);
    let stores = std::env::var("TIERKV_RAFT_FAULT_STORES").unwrap_or_else(|_| "classic".into());
    run_stores(&stores, kills, 0);
}

/// The same over `triangle` (the PM WAL; its engine refuses a write batch
/// larger than a memtable, 1 MiB here, while the snapshots the restarted
/// nodes install are larger: the store installs them in bounded batches).
/// It runs beside the `classic` one, on ports of its own.
#[test]
fn leader_kills_triangle() {
    run_stores("triangle", env_or("TIERKV_RAFT_KILLS", 20), 4);
}

/// The base port of cluster `slot` of this test process (the nodes get
/// `base + 1..=3`): the tests run at once, so each has its own slots, the
/// default kill test 0..=3 (one a store), the triangle one 4, the
/// membership one 5. Every port stays below Linux's ephemeral range
/// (32768 and up), where a client's outgoing connection could hold it.
fn base_port(slot: u16) -> u16 {
    assert!(slot < 8, "port slot {slot}");
    20000 + (std::process::id() % 150) as u16 * 80 + slot * 10
}

/// Runs the kill test over each store of the comma-separated `stores`,
/// one after the other, in port slots from `first_slot`.
fn run_stores(stores: &str, kills: usize, first_slot: u16) {
    let stores: Vec<&str> = stores.split(',').filter(|s| !s.is_empty()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    for (i, store) in stores.iter().enumerate() {
        rt.block_on(run(store, kills, first_slot + i as u16));
    }
}

async fn run(store: &str, kills: usize, slot: u16) {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let pm = tempfile::tempdir_in("/dev/shm").expect("shm tempdir");
    let needs_pm = tierkv::Preset::from_name(store).is_some_and(|p| p.needs_pm());
    let base_port = base_port(slot);
    // Small snapshot interval and log tail, so a node that was down a while
    // catches up from a snapshot.
    let extra: Vec<String> = [
        "--snapshot-logs",
        "300",
        "--keep-logs",
        "50",
        "--memtable-size",
        "1048576",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_tierkv-raft"));
    let mut cluster = Cluster::start(
        exe,
        3,
        base_port,
        store,
        tmp.path(),
        needs_pm.then(|| pm.path()),
        &extra,
    )
    .expect("start cluster");
    if let Err(e) = cluster.form(Duration::from_secs(30)).await {
        fail(&mut cluster, &format!("form the cluster: {e}")).await;
    }
    let members = cluster.members();

    let stop = Arc::new(AtomicBool::new(false));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (stop, ledger, members) = (Arc::clone(&stop), Arc::clone(&ledger), members.clone());
        clients.push(tokio::spawn(async move {
            let mut client = Client::new(&members);
            client.timeout = Duration::from_secs(2);
            client.patience = Duration::from_secs(5);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let token = format!("c{c}.{n}");
                n += 1;
                let req = Request::Append {
                    key: format!("k{c}"),
                    value: format!("{token};"),
                };
                let outcome = client.write(&req).await;
                let mut l = ledger.lock().expect("ledger");
                match outcome {
                    Outcome::Ok(_) => l.acked.push(token),
                    Outcome::Failed(_) => l.failed.push(token),
                    Outcome::Unknown(_) => l.unknown.push(token),
                }
            }
        }));
    }

    let mut from_snapshot = 0;
    for k in 0..kills {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let leader = cluster
            .wait_leader(Duration::from_secs(20))
            .await
            .expect("leader");
        cluster.kill(leader);
        let new_leader = match cluster.wait_leader(Duration::from_secs(20)).await {
            Ok(l) => l,
            Err(e) => fail(&mut cluster, &format!("kill {k}: no new leader: {e}")).await,
        };
        assert_ne!(new_leader, leader);
        // Every third kill, keep the old leader down while writes go on, so
        // the new leader snapshots and purges past it.
        if k % 3 == 2 {
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        let purged = metrics(&cluster.nodes[new_leader].addr)
            .await
            .ok()
            .and_then(|m| m.get("purged").and_then(Value::as_u64));
        cluster.spawn(leader).expect("restart");
        let m = match cluster.wait_up(leader, Duration::from_secs(30)).await {
            Ok(m) => m,
            Err(e) => {
                fail(
                    &mut cluster,
                    &format!("kill {k}: restarted node not up: {e}"),
                )
                .await
            }
        };
        let own_last = m.get("last_log_index").and_then(Value::as_u64).unwrap_or(0);
        if purged.is_some_and(|p| p > own_last) {
            from_snapshot += 1;
        }
        if let Err(e) = cluster.wait_caught_up(Duration::from_secs(30)).await {
            fail(
                &mut cluster,
                &format!("kill {k}: restarted node does not catch up: {e}"),
            )
            .await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("client task");
    }
    if let Err(e) = cluster.wait_caught_up(Duration::from_secs(30)).await {
        fail(
            &mut cluster,
            &format!("after the kills, the nodes do not catch up: {e}"),
        )
        .await;
    }

    // The final state, linearizable from the leader, and each node's own.
    let mut client = Client::new(&members);
    let state = client.read("/scan").await.expect("scan");
    for n in &cluster.nodes {
        let local = call(&n.addr, hyper::Method::GET, "/scan?local=1", None)
            .await
            .expect("local scan");
        assert_eq!(
            local, state,
            "node {} differs from the leader's state",
            n.id
        );
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    for item in state.get("items").and_then(Value::as_array).expect("items") {
        let v = item.get(1).and_then(Value::as_str).expect("value");
        for t in v.split(';').filter(|t| !t.is_empty()) {
            *seen.entry(t.to_string()).or_default() += 1;
        }
    }
    let l = ledger.lock().expect("ledger");
    let lost: Vec<_> = l.acked.iter().filter(|t| !seen.contains_key(*t)).collect();
    let dup: Vec<_> = seen.iter().filter(|(_, &c)| c > 1).collect();
    let failed_applied: Vec<_> = l.failed.iter().filter(|t| seen.contains_key(*t)).collect();
    let unknown_applied = l.unknown.iter().filter(|t| seen.contains_key(*t)).count();
    eprintln!(
        "faults[{store}]: {kills} leader kills in {:.1}s; {} writes acknowledged, {} definitely failed, {} unknown ({} of them applied); \
         {from_snapshot} restarts behind the leader's purge point (caught up from a snapshot); lost {}, duplicated {}, failed-but-applied {}",
        started.elapsed().as_secs_f64(),
        l.acked.len(),
        l.failed.len(),
        l.unknown.len(),
        unknown_applied,
        lost.len(),
        dup.len(),
        failed_applied.len()
    );
    assert!(
        l.acked.len() > 100,
        "too few writes acknowledged: {}",
        l.acked.len()
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert!(dup.is_empty(), "writes applied more than once: {dup:?}");
    assert!(
        failed_applied.is_empty(),
        "writes told failed were applied: {failed_applied:?}"
    );
    cluster.stop();
}

/// A membership change that removes a voter: the two left keep
/// committing, and the removed node receives nothing after the change.
#[test]
fn removed_voter_stops_receiving_and_the_rest_keep_committing() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base_port = base_port(5);
        let exe = std::path::Path::new(env!("CARGO_BIN_EXE_tierkv-raft"));
        let mut cluster = Cluster::start(exe, 3, base_port, "classic", tmp.path(), None, &[])
            .expect("start cluster");
        if let Err(e) = cluster.form(Duration::from_secs(30)).await {
            fail(&mut cluster, &format!("form the cluster: {e}")).await;
        }
        let members = cluster.members();
        let mut client = Client::new(&members);
        let acked = write_n(&mut client, 50, "a").await;
        assert_eq!(acked, 50);
        // Remove a follower (the leader stays, so no election muddles it).
        let leader = cluster
            .wait_leader(Duration::from_secs(10))
            .await
            .expect("leader");
        let removed = (leader + 1) % 3;
        let keep: Vec<u64> = (0..3)
            .filter(|&i| i != removed)
            .map(|i| cluster.nodes[i].id)
            .collect();
        let r = call(
            &cluster.nodes[leader].addr,
            hyper::Method::POST,
            "/change-membership",
            Some(serde_json::json!({"members": keep, "retain": false})),
        )
        .await
        .expect("change membership");
        assert_eq!(r.get("ok").and_then(Value::as_bool), Some(true), "{r}");
        let voters = |m: &Value| -> Vec<u64> {
            m.get("voters")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default()
        };
        let m = metrics(&cluster.nodes[leader].addr).await.expect("metrics");
        assert_eq!(voters(&m), keep, "{m}");
        assert_eq!(
            m.get("learners").and_then(Value::as_array).map(Vec::len),
            Some(0),
            "{m}"
        );
        // Let the last replication to the removed node settle.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let last = |m: &Value| m.get("last_log_index").and_then(Value::as_u64).unwrap_or(0);
        let before = metrics(&cluster.nodes[removed].addr)
            .await
            .expect("removed node's metrics");
        let acked = write_n(&mut client, 100, "b").await;
        assert_eq!(acked, 100, "the two voters left keep committing");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = metrics(&cluster.nodes[removed].addr)
            .await
            .expect("removed node's metrics");
        let leader_m = metrics(&cluster.nodes[leader].addr)
            .await
            .expect("leader metrics");
        eprintln!(
            "membership: removed node {} at log {} then {}; the leader at {}",
            cluster.nodes[removed].id,
            last(&before),
            last(&after),
            last(&leader_m)
        );
        assert_eq!(
            last(&after),
            last(&before),
            "the removed node still receives"
        );
        assert!(last(&leader_m) >= last(&after) + 100, "{leader_m}");
        assert_eq!(
            leader_m.get("state").and_then(Value::as_str),
            Some("Leader"),
            "the removed node disturbed the leader: {leader_m}"
        );
        cluster.stop();
    });
}

/// Appends `n` tokens `{tag}{i};` to key `k`; how many were acknowledged.
async fn write_n(client: &mut Client, n: usize, tag: &str) -> usize {
    let mut acked = 0;
    for i in 0..n {
        let r = Request::Append {
            key: "k".into(),
            value: format!("{tag}{i};"),
        };
        if matches!(client.write(&r).await, Outcome::Ok(_)) {
            acked += 1;
        }
    }
    acked
}

/// Prints every node's metrics and the end of its log, then panics.
async fn fail(cluster: &mut Cluster, msg: &str) -> ! {
    for (i, m) in cluster.metrics().await {
        eprintln!("node {} metrics: {m}", cluster.nodes[i].id);
    }
    for n in &cluster.nodes {
        let log = std::fs::read_to_string(n.dir.with_file_name(format!("node{}.log", n.id)))
            .unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        eprintln!(
            "node {} log (last lines, newest first):\n  {}",
            n.id,
            tail.join("\n  ")
        );
    }
    if let Ok(secs) =
        std::env::var("TIERKV_RAFT_HOLD_ON_FAIL").map(|s| s.parse::<u64>().unwrap_or(0))
    {
        eprintln!("holding the cluster {secs}s for inspection: {msg}");
        std::thread::sleep(Duration::from_secs(secs));
    }
    panic!("{msg}");
}
