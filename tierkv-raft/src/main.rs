//! `tierkv-raft`: a node of the replicated KV service (`serve`), a local
//! 3-node cluster in one command (`cluster`), and the replicated-write
//! bench (`bench`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tierkv_raft::client::Cluster;
use tierkv_raft::kv::{Backend, KvConfig};
use tierkv_raft::server::{run_node, NodeConfig};

mod bench;

#[derive(Parser)]
#[command(
    name = "tierkv-raft",
    about = "tierkv under openraft: a replicated KV service"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Flags shared by every node.
#[derive(clap::Args, Clone, Debug)]
struct NodeFlags {
    /// The store: a tierkv design (classic, triangle, matrix, vlsm,
    /// rangetab, nvcache, tlsm) or rocksdb (with the `rocksdb` feature).
    #[arg(long, default_value = "classic")]
    store: String,
    /// PM tier size of a PM design.
    #[arg(long, default_value_t = 64 << 20)]
    pm_size: u64,
    /// Memtable size.
    #[arg(long, default_value_t = 16 << 20)]
    memtable_size: usize,
    /// Snapshot after this many applied entries.
    #[arg(long, default_value_t = 5000)]
    snapshot_logs: u64,
    /// Log entries kept behind a snapshot.
    #[arg(long, default_value_t = 1000)]
    keep_logs: u64,
    /// Raft heartbeat interval in ms (elections: 6-12×).
    #[arg(long, default_value_t = 50)]
    heartbeat_ms: u64,
}

impl NodeFlags {
    fn args(&self) -> Vec<String> {
        vec![
            "--pm-size".into(),
            self.pm_size.to_string(),
            "--memtable-size".into(),
            self.memtable_size.to_string(),
            "--snapshot-logs".into(),
            self.snapshot_logs.to_string(),
            "--keep-logs".into(),
            self.keep_logs.to_string(),
            "--heartbeat-ms".into(),
            self.heartbeat_ms.to_string(),
        ]
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one node.
    Serve {
        /// This node's id.
        #[arg(long)]
        id: u64,
        /// Listen address, also the node's address in the membership.
        #[arg(long)]
        addr: String,
        /// Data directory.
        #[arg(long)]
        dir: PathBuf,
        /// PM directory (PM designs), e.g. under /dev/shm.
        #[arg(long)]
        pm_dir: Option<PathBuf>,
        /// Exit when this process is no longer the node's parent (set by
        /// `cluster`, the bench and the tests: a node must not outlive the
        /// process that started it, even when that one is killed).
        #[arg(long)]
        parent_pid: Option<u32>,
        #[command(flatten)]
        node: NodeFlags,
    },
    /// Start a 3-node cluster on 127.0.0.1 (ports base+1..base+3), form it
    /// (init, add learners, promote) and keep it running until Ctrl-C.
    Cluster {
        /// Nodes.
        #[arg(long, default_value_t = 3)]
        nodes: u64,
        /// Base port: node i listens on base + i.
        #[arg(long, default_value_t = 21000)]
        base_port: u16,
        /// Directory for the nodes' data and logs.
        #[arg(long, default_value = "/tmp/tierkv-raft-cluster")]
        dir: PathBuf,
        /// Base PM directory for a PM design.
        #[arg(long, default_value = "/dev/shm/tierkv-raft-cluster")]
        pm_dir: PathBuf,
        #[command(flatten)]
        node: NodeFlags,
    },
    /// Replicated write throughput and commit latency of a 3-node cluster
    /// per store, side by side.
    Bench(bench::BenchArgs),
}

/// Exits the process once `pid` is no longer its parent (the parent died
/// and the node was re-parented), checked every 200 ms from a thread of
/// its own. The exit is a crash as far as the store is concerned: nothing
/// acknowledged depends on a clean close.
fn exit_with_parent(pid: u32) -> Result<(), String> {
    let watch = move || loop {
        if std::os::unix::process::parent_id() != pid {
            eprintln!("tierkv-raft: parent process {pid} is gone; exiting");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(watch)
        .map(drop)
        .map_err(|e| format!("parent watch thread: {e}"))
}

fn main() {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tierkv-raft: tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let res = rt.block_on(async move {
        match cli.cmd {
            Cmd::Serve { id, addr, dir, pm_dir, parent_pid, node } => {
                if let Some(pid) = parent_pid {
                    exit_with_parent(pid)?;
                }
                let mut kv = KvConfig::new(Backend::parse(&node.store)?, dir);
                kv.pm_dir = pm_dir;
                kv.pm_size_bytes = node.pm_size;
                kv.memtable_size_bytes = node.memtable_size;
                run_node(NodeConfig {
                    id,
                    addr,
                    kv,
                    snapshot_logs: node.snapshot_logs,
                    keep_logs: node.keep_logs,
                    heartbeat_ms: node.heartbeat_ms,
                })
                .await
            }
            Cmd::Cluster { nodes, base_port, dir, pm_dir, node } => {
                let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let pm = match Backend::parse(&node.store)? {
                    Backend::Tierkv(p) if p.needs_pm() => Some(pm_dir.as_path()),
                    _ => None,
                };
                let mut c = Cluster::start(&exe, nodes, base_port, &node.store, &dir, pm, &node.args())?;
                c.form(Duration::from_secs(30)).await?;
                println!("cluster of {nodes} nodes ({}) up; data and logs in {}", node.store, dir.display());
                for n in &c.nodes {
                    println!("  node {} http://{}", n.id, n.addr);
                }
                let a = &c.nodes[0].addr;
                println!("try:\n  curl -s -XPOST {a}/write -H 'content-type: application/json' -d '{{\"op\":\"put\",\"key\":\"k\",\"value\":\"v\"}}'");
                println!("  curl -s '{a}/get?key=k'\n  curl -s {a}/metrics\nCtrl-C stops the cluster.");
                tierkv_raft::server::stop_signal().await;
                c.stop();
                Ok(())
            }
            Cmd::Bench(args) => bench::run(args).await,
        }
    });
    if let Err(e) = res {
        eprintln!("tierkv-raft: {e}");
        std::process::exit(1);
    }
}
