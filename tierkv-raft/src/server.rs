//! The replicated KV service: one node's HTTP/JSON API (axum) over its
//! Raft instance and store.
//!
//! | route | what |
//! |---|---|
//! | `POST /write` `{"op":"put"/"delete"/"append","key","value"}` | a replicated write (leader only) |
//! | `GET /get?key=K[&local=1]` | a read, linearizable through openraft's read index unless `local` |
//! | `GET /scan?from=&to=&limit=[&local=1]` | an ordered range read, likewise |
//! | `POST /init` `{"members":[[id,"addr"],…]}` or `{}` | initialize the cluster (this node alone for `{}`) |
//! | `POST /add-learner` `{"id","addr"}` | add a learner (waits until it caught up) |
//! | `POST /change-membership` `{"members":[ids],"retain":false}` | promote / remove voters |
//! | `GET /metrics` | openraft's metrics |
//! | `POST /raft/{append,vote,snapshot}` | the Raft RPCs between nodes |
//!
//! A write or read refused because this node is not the leader answers
//! HTTP 421 with `"definite": true` (nothing was proposed) and the leader
//! it knows of; a write that failed after it was proposed answers 503 with
//! `"definite": false` (it may still commit).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::BasicNode;
use serde::Deserialize;
use serde_json::json;

use crate::kv::Kv;
use crate::{store, NodeId, Raft, Request, TypeConfig};

/// What a handler shares.
#[derive(Clone)]
pub struct App {
    /// This node's id.
    pub id: NodeId,
    /// Its Raft instance.
    pub raft: Raft,
    /// Its store (reads of the state machine).
    pub kv: Arc<dyn Kv>,
}

/// The router of a node.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/write", post(write))
        .route("/get", get(read))
        .route("/scan", get(scan))
        .route("/init", post(init))
        .route("/add-learner", post(add_learner))
        .route("/change-membership", post(change_membership))
        .route("/metrics", get(metrics))
        .route("/raft/append", post(raft_append))
        .route("/raft/vote", post(raft_vote))
        .route("/raft/snapshot", post(raft_snapshot))
        .with_state(app)
}

fn leader_hint(app: &App) -> (Option<NodeId>, Option<String>) {
    let m = app.raft.metrics();
    let m = m.borrow();
    let leader = m.current_leader;
    let addr = leader.and_then(|l| {
        m.membership_config
            .membership()
            .get_node(&l)
            .map(|n| n.addr.clone())
    });
    (leader, addr)
}

fn is_leader(app: &App) -> bool {
    app.raft.metrics().borrow().current_leader == Some(app.id)
}

fn not_leader(app: &App) -> HttpResponse {
    let (leader_id, leader_addr) = leader_hint(app);
    (
        StatusCode::MISDIRECTED_REQUEST,
        Json(json!({"error": "not the leader", "definite": true, "leader_id": leader_id, "leader_addr": leader_addr})),
    )
        .into_response()
}

fn failed(status: StatusCode, definite: bool, msg: String) -> HttpResponse {
    (status, Json(json!({"error": msg, "definite": definite}))).into_response()
}

async fn write(State(app): State<App>, Json(req): Json<Request>) -> HttpResponse {
    if !is_leader(&app) {
        return not_leader(&app);
    }
    match app.raft.client_write(req).await {
        Ok(r) => Json(json!({"ok": true, "prev": r.data.prev, "log_index": r.log_id.index}))
            .into_response(),
        Err(e) => {
            let (leader_id, leader_addr) = leader_hint(&app);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": e.to_string(), "definite": false, "leader_id": leader_id, "leader_addr": leader_addr})),
            )
                .into_response()
        }
    }
}

/// Waits for openraft's read index unless the read is `local`; `Err` is
/// the response to send.
async fn linearize(app: &App, params: &HashMap<String, String>) -> Result<(), HttpResponse> {
    if params.get("local").is_some_and(|v| v == "1" || v == "true") {
        return Ok(());
    }
    if !is_leader(app) {
        return Err(not_leader(app));
    }
    app.raft
        .ensure_linearizable()
        .await
        .map(|_| ())
        .map_err(|e| failed(StatusCode::SERVICE_UNAVAILABLE, true, e.to_string()))
}

async fn read(
    State(app): State<App>,
    Query(params): Query<HashMap<String, String>>,
) -> HttpResponse {
    let Some(key) = params.get("key") else {
        return failed(StatusCode::BAD_REQUEST, true, "missing ?key=".into());
    };
    if let Err(r) = linearize(&app, &params).await {
        return r;
    }
    match store::read_data(&*app.kv, key.as_bytes()) {
        Ok(v) => {
            Json(json!({"key": key, "value": v.map(|v| String::from_utf8_lossy(&v).into_owned())}))
                .into_response()
        }
        Err(e) => failed(StatusCode::INTERNAL_SERVER_ERROR, true, e),
    }
}

async fn scan(
    State(app): State<App>,
    Query(params): Query<HashMap<String, String>>,
) -> HttpResponse {
    if let Err(r) = linearize(&app, &params).await {
        return r;
    }
    let from = params.get("from").map(String::as_str).unwrap_or("");
    let to = params.get("to").map(String::as_bytes);
    let limit = params
        .get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(usize::MAX);
    match store::scan_data(&*app.kv, from.as_bytes(), to, limit) {
        Ok(pairs) => {
            let items: Vec<(String, String)> = pairs
                .into_iter()
                .map(|(k, v)| {
                    (
                        String::from_utf8_lossy(&k).into_owned(),
                        String::from_utf8_lossy(&v).into_owned(),
                    )
                })
                .collect();
            Json(json!({"items": items})).into_response()
        }
        Err(e) => failed(StatusCode::INTERNAL_SERVER_ERROR, true, e),
    }
}

#[derive(Deserialize)]
struct InitBody {
    #[serde(default)]
    members: Vec<(NodeId, String)>,
}

async fn init(State(app): State<App>, Json(body): Json<InitBody>) -> HttpResponse {
    let mut members: BTreeMap<NodeId, BasicNode> = body
        .members
        .into_iter()
        .map(|(id, addr)| (id, BasicNode { addr }))
        .collect();
    if members.is_empty() {
        let addr = app
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&app.id)
            .map(|n| n.addr.clone());
        let Some(addr) = addr.or_else(|| SELF_ADDR.get().cloned()) else {
            return failed(
                StatusCode::INTERNAL_SERVER_ERROR,
                true,
                "own address unknown".into(),
            );
        };
        members.insert(app.id, BasicNode { addr });
    }
    match app.raft.initialize(members).await {
        Ok(()) => Json(json!({"ok": true})).into_response(),
        Err(e) => failed(StatusCode::CONFLICT, true, e.to_string()),
    }
}

/// This process's own listen address (for `/init` with no members).
pub static SELF_ADDR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

#[derive(Deserialize)]
struct AddLearner {
    id: NodeId,
    addr: String,
}

async fn add_learner(State(app): State<App>, Json(b): Json<AddLearner>) -> HttpResponse {
    if !is_leader(&app) {
        return not_leader(&app);
    }
    match app
        .raft
        .add_learner(b.id, BasicNode { addr: b.addr }, true)
        .await
    {
        Ok(r) => Json(json!({"ok": true, "log_index": r.log_id.index})).into_response(),
        Err(e) => failed(StatusCode::SERVICE_UNAVAILABLE, false, e.to_string()),
    }
}

#[derive(Deserialize)]
struct ChangeMembership {
    members: BTreeSet<NodeId>,
    #[serde(default)]
    retain: bool,
}

async fn change_membership(
    State(app): State<App>,
    Json(b): Json<ChangeMembership>,
) -> HttpResponse {
    if !is_leader(&app) {
        return not_leader(&app);
    }
    match app.raft.change_membership(b.members, b.retain).await {
        Ok(r) => Json(json!({"ok": true, "log_index": r.log_id.index})).into_response(),
        Err(e) => failed(StatusCode::SERVICE_UNAVAILABLE, false, e.to_string()),
    }
}

async fn metrics(State(app): State<App>) -> HttpResponse {
    use store::TIMES as T;
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    let m = app.raft.metrics().borrow().clone();
    Json(json!({
        "id": m.id,
        "state": format!("{:?}", m.state),
        "fatal": m.running_state.as_ref().err().map(|e| e.to_string()),
        "current_term": m.current_term,
        "current_leader": m.current_leader,
        "last_log_index": m.last_log_index,
        "last_applied": m.last_applied.map(|l| l.index),
        "snapshot": m.snapshot.map(|l| l.index),
        "purged": m.purged.map(|l| l.index),
        "voters": m.membership_config.membership().voter_ids().collect::<Vec<_>>(),
        "learners": m.membership_config.membership().learner_ids().collect::<Vec<_>>(),
        "store": app.kv.name(),
        "store_times": {
            "appends": load(&T.appends),
            "appended_entries": load(&T.appended_entries),
            "append_ns": load(&T.append_ns),
            "committed_saves": load(&T.committed_saves),
            "committed_ns": load(&T.committed_ns),
            "applies": load(&T.applies),
            "apply_ns": load(&T.apply_ns),
        },
    }))
    .into_response()
}

async fn raft_append(
    State(app): State<App>,
    Json(rpc): Json<AppendEntriesRequest<TypeConfig>>,
) -> HttpResponse {
    let r: Result<_, RaftError<NodeId>> = app.raft.append_entries(rpc).await;
    Json(r).into_response()
}

async fn raft_vote(State(app): State<App>, Json(rpc): Json<VoteRequest<NodeId>>) -> HttpResponse {
    let r: Result<_, RaftError<NodeId>> = app.raft.vote(rpc).await;
    Json(r).into_response()
}

async fn raft_snapshot(
    State(app): State<App>,
    Json(rpc): Json<InstallSnapshotRequest<TypeConfig>>,
) -> HttpResponse {
    let r: Result<_, RaftError<NodeId, InstallSnapshotError>> =
        app.raft.install_snapshot(rpc).await;
    Json(r).into_response()
}

/// How to run one node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The node's id.
    pub id: NodeId,
    /// Where it listens (`127.0.0.1:21001`); also its address in the
    /// membership.
    pub addr: String,
    /// Its store.
    pub kv: crate::kv::KvConfig,
    /// Build a snapshot after this many applied entries since the last.
    pub snapshot_logs: u64,
    /// Entries kept in the log behind a snapshot (a peer that lags more
    /// catches up from the snapshot).
    pub keep_logs: u64,
    /// Raft heartbeat interval (ms); elections time out after 6-12×.
    pub heartbeat_ms: u64,
}

impl NodeConfig {
    /// openraft's configuration for this node.
    pub fn raft_config(&self) -> Result<openraft::Config, String> {
        openraft::Config {
            cluster_name: "tierkv-raft".into(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.heartbeat_ms * 6,
            election_timeout_max: self.heartbeat_ms * 12,
            install_snapshot_timeout: 2000,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_logs),
            max_in_snapshot_log_to_keep: self.keep_logs,
            purge_batch_size: 256,
            ..Default::default()
        }
        .validate()
        .map_err(|e| format!("raft config: {e}"))
    }
}

/// Opens the store, starts Raft and serves until the process is stopped
/// (SIGINT/SIGTERM shut Raft down first).
pub async fn run_node(cfg: NodeConfig) -> Result<(), String> {
    let _ = SELF_ADDR.set(cfg.addr.clone());
    let kv = cfg.kv.open()?;
    let (log_store, sm) = store::open_with(
        Arc::clone(&kv),
        store::StoreOptions::for_memtable(cfg.kv.memtable_size_bytes),
    )
    .map_err(|e| format!("open the raft store: {e}"))?;
    let raft = Raft::new(
        cfg.id,
        Arc::new(cfg.raft_config()?),
        crate::network::Network,
        log_store,
        sm,
    )
    .await
    .map_err(|e| format!("start raft: {e}"))?;
    let app = App {
        id: cfg.id,
        raft: raft.clone(),
        kv,
    };
    let listener = tokio::net::TcpListener::bind(&cfg.addr)
        .await
        .map_err(|e| format!("bind {}: {e}", cfg.addr))?;
    eprintln!(
        "tierkv-raft node {} on {} (store {})",
        cfg.id,
        cfg.addr,
        app.kv.name()
    );
    axum::serve(listener, router(app))
        .with_graceful_shutdown(stop_signal())
        .await
        .map_err(|e| format!("serve: {e}"))?;
    let _ = raft.shutdown().await;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
