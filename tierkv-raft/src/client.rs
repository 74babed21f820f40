//! A client of the replicated KV service that follows the leader, and a
//! cluster of node processes on loopback (for the cluster script, the
//! fault test and the bench).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::http::{HttpConn, HttpError};
use crate::{NodeId, Request};

/// What became of a write, as the client can know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Committed and applied; the key's previous value.
    Ok(Option<String>),
    /// Definitely not applied: no node accepted it (never proposed).
    Failed(String),
    /// May or may not be applied (sent, then the answer was lost, timed
    /// out, or the leader changed after proposing it).
    Unknown(String),
}

/// A leader-following client over a fixed list of nodes.
pub struct Client {
    nodes: Vec<(NodeId, HttpConn)>,
    leader: usize,
    /// Per-request timeout.
    pub timeout: Duration,
    /// How long a write keeps looking for a leader before it gives up
    /// (only over attempts that were definitely not proposed).
    pub patience: Duration,
}

impl Client {
    /// A client of the nodes `(id, addr)`.
    pub fn new(nodes: &[(NodeId, String)]) -> Client {
        Client {
            nodes: nodes
                .iter()
                .map(|(id, a)| (*id, HttpConn::new(a.clone())))
                .collect(),
            leader: 0,
            timeout: Duration::from_secs(3),
            patience: Duration::from_secs(10),
        }
    }

    fn follow(&mut self, body: &Value) {
        let hinted = body.get("leader_id").and_then(Value::as_u64);
        match hinted.and_then(|id| self.nodes.iter().position(|(n, _)| *n == id)) {
            Some(i) if i != self.leader => self.leader = i,
            _ => self.leader = (self.leader + 1) % self.nodes.len(),
        }
    }

    /// Sends a write to the leader (found by following hints).
    pub async fn write(&mut self, req: &Request) -> Outcome {
        let body = match serde_json::to_vec(req) {
            Ok(b) => b,
            Err(e) => return Outcome::Failed(format!("encode: {e}")),
        };
        let deadline = Instant::now() + self.patience;
        let mut last = String::new();
        let mut backoff = Duration::from_millis(5);
        while Instant::now() < deadline {
            let conn = &mut self.nodes[self.leader].1;
            match conn
                .request(
                    hyper::Method::POST,
                    "/write",
                    Some(body.clone()),
                    self.timeout,
                )
                .await
            {
                Ok((200, b)) => {
                    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                    return Outcome::Ok(v.get("prev").and_then(Value::as_str).map(str::to_string));
                }
                Ok((status, b)) => {
                    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                    let definite = v.get("definite").and_then(Value::as_bool).unwrap_or(false);
                    last = format!("HTTP {status}: {}", String::from_utf8_lossy(&b));
                    if !definite {
                        return Outcome::Unknown(last);
                    }
                    self.follow(&v);
                }
                Err(e @ HttpError::Connect(_)) => {
                    last = e.to_string();
                    self.leader = (self.leader + 1) % self.nodes.len();
                }
                Err(e) => return Outcome::Unknown(e.to_string()),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(200));
        }
        Outcome::Failed(format!("no leader accepted it: {last}"))
    }

    /// A GET on the leader (`/get?…`, `/scan?…`), following hints; the
    /// JSON answer.
    pub async fn read(&mut self, path_and_query: &str) -> Result<Value, String> {
        let deadline = Instant::now() + self.patience;
        let mut last = String::new();
        while Instant::now() < deadline {
            let conn = &mut self.nodes[self.leader].1;
            match conn
                .request(hyper::Method::GET, path_and_query, None, self.timeout)
                .await
            {
                Ok((200, b)) => return serde_json::from_slice(&b).map_err(|e| e.to_string()),
                Ok((status, b)) => {
                    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                    last = format!("HTTP {status}: {}", String::from_utf8_lossy(&b));
                    self.follow(&v);
                }
                Err(e) => {
                    last = e.to_string();
                    self.leader = (self.leader + 1) % self.nodes.len();
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(format!("read {path_and_query}: {last}"))
    }
}

/// One request to one node: the JSON answer of a 200, else an error.
pub async fn call(
    addr: &str,
    method: hyper::Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value, String> {
    let mut c = HttpConn::new(addr);
    let body = body.map(|b| b.to_string().into_bytes());
    match c.request(method, path, body, Duration::from_secs(30)).await {
        Ok((200, b)) => serde_json::from_slice(&b).map_err(|e| e.to_string()),
        Ok((s, b)) => Err(format!(
            "{addr}{path}: HTTP {s}: {}",
            String::from_utf8_lossy(&b)
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// A node process of a [`Cluster`].
pub struct NodeProc {
    /// Its id.
    pub id: NodeId,
    /// Its address.
    pub addr: String,
    /// Its data directory.
    pub dir: PathBuf,
    child: Option<Child>,
}

/// A cluster of node processes on 127.0.0.1 (`exe serve …` each); the
/// processes are killed when it is dropped.
pub struct Cluster {
    exe: PathBuf,
    /// The nodes.
    pub nodes: Vec<NodeProc>,
    store: String,
    pm_base: Option<PathBuf>,
    extra: Vec<String>,
    log_dir: PathBuf,
}

impl Cluster {
    /// Starts `n` nodes (ids 1..=n, ports `base_port + id`) of store
    /// `store` under `base` (PM directories under `pm_base` for a PM
    /// design); `extra` are more `serve` flags. Does not form the cluster:
    /// see [`Cluster::form`].
    pub fn start(
        exe: &Path,
        n: u64,
        base_port: u16,
        store: &str,
        base: &Path,
        pm_base: Option<&Path>,
        extra: &[String],
    ) -> Result<Cluster, String> {
        let mut c = Cluster {
            exe: exe.to_path_buf(),
            nodes: Vec::new(),
            store: store.to_string(),
            pm_base: pm_base.map(Path::to_path_buf),
            extra: extra.to_vec(),
            log_dir: base.to_path_buf(),
        };
        for id in 1..=n {
            c.nodes.push(NodeProc {
                id,
                addr: format!("127.0.0.1:{}", base_port as u64 + id),
                dir: base.join(format!("node{id}")),
                child: None,
            });
        }
        for i in 0..c.nodes.len() {
            c.spawn(i)?;
        }
        Ok(c)
    }

    /// `(id, addr)` of every node.
    pub fn members(&self) -> Vec<(NodeId, String)> {
        self.nodes.iter().map(|n| (n.id, n.addr.clone())).collect()
    }

    /// (Re)starts node `i`'s process on its directory.
    pub fn spawn(&mut self, i: usize) -> Result<(), String> {
        let node = &self.nodes[i];
        let mut cmd = Command::new(&self.exe);
        cmd.arg("serve")
            .args([
                "--id",
                &node.id.to_string(),
                "--addr",
                &node.addr,
                "--store",
                &self.store,
            ])
            .arg("--dir")
            .arg(&node.dir)
            // A node dies with this process, even when it is killed.
            .args(["--parent-pid", &std::process::id().to_string()]);
        if let Some(pm) = &self.pm_base {
            cmd.arg("--pm-dir").arg(pm.join(format!("node{}", node.id)));
        }
        cmd.args(&self.extra);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_dir.join(format!("node{}.log", node.id)))
            .map_err(|e| format!("node log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| format!("node log: {e}"))?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2));
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.exe.display()))?;
        self.nodes[i].child = Some(child);
        Ok(())
    }

    /// SIGKILLs node `i` and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether node `i`'s process is running.
    pub fn is_running(&mut self, i: usize) -> bool {
        match &mut self.nodes[i].child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Waits until node `i` answers `/metrics`.
    pub async fn wait_up(&mut self, i: usize, timeout: Duration) -> Result<Value, String> {
        let deadline = Instant::now() + timeout;
        loop {
            match call(&self.nodes[i].addr, hyper::Method::GET, "/metrics", None).await {
                Ok(m) => return Ok(m),
                Err(e) => {
                    if !self.is_running(i) {
                        return Err(format!(
                            "node {} exited (see node{}.log): {e}",
                            self.nodes[i].id, self.nodes[i].id
                        ));
                    }
                    if Instant::now() > deadline {
                        return Err(format!(
                            "node {} not up after {timeout:?}: {e}",
                            self.nodes[i].id
                        ));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Forms the cluster the way an operator does: initialize node 1
    /// alone, add the others as learners, then promote them all to voters.
    pub async fn form(&mut self, timeout: Duration) -> Result<(), String> {
        for i in 0..self.nodes.len() {
            self.wait_up(i, timeout).await?;
        }
        let first = self.nodes[0].addr.clone();
        call(
            &first,
            hyper::Method::POST,
            "/init",
            Some(serde_json::json!({})),
        )
        .await?;
        self.wait_leader(timeout).await?;
        for n in &self.nodes[1..] {
            call(
                &first,
                hyper::Method::POST,
                "/add-learner",
                Some(serde_json::json!({"id": n.id, "addr": n.addr})),
            )
            .await?;
        }
        let ids: Vec<NodeId> = self.nodes.iter().map(|n| n.id).collect();
        call(
            &first,
            hyper::Method::POST,
            "/change-membership",
            Some(serde_json::json!({"members": ids})),
        )
        .await?;
        Ok(())
    }

    /// The metrics of every running node that answers.
    pub async fn metrics(&mut self) -> Vec<(usize, Value)> {
        let mut out = Vec::new();
        for i in 0..self.nodes.len() {
            if !self.is_running(i) {
                continue;
            }
            if let Ok(m) = call(&self.nodes[i].addr, hyper::Method::GET, "/metrics", None).await {
                out.push((i, m));
            }
        }
        out
    }

    /// Waits until a running node is leader, as seen by itself; its index.
    pub async fn wait_leader(&mut self, timeout: Duration) -> Result<usize, String> {
        let deadline = Instant::now() + timeout;
        loop {
            for (i, m) in self.metrics().await {
                if m.get("state").and_then(Value::as_str) == Some("Leader") {
                    return Ok(i);
                }
            }
            if Instant::now() > deadline {
                return Err(format!("no leader after {timeout:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every running node has applied up to at least the
    /// leader's last log index (taken when called).
    pub async fn wait_caught_up(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let leader = self.wait_leader(timeout).await?;
        let target = call(
            &self.nodes[leader].addr,
            hyper::Method::GET,
            "/metrics",
            None,
        )
        .await?
        .get("last_log_index")
        .and_then(Value::as_u64)
        .unwrap_or(0);
        loop {
            let ms = self.metrics().await;
            let running = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].child.is_some())
                .count();
            let done = ms
                .iter()
                .filter(|(_, m)| {
                    m.get("last_applied").and_then(Value::as_u64).unwrap_or(0) >= target
                })
                .count();
            if done == running && ms.len() == running {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "nodes not caught up to {target} after {timeout:?}: {ms:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills every node.
    pub fn stop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}
