//! tierkv-raft: tierkv as the storage of an [openraft] cluster.
//!
//! - [`store`]: openraft's `RaftLogStorage` and `RaftStateMachine` on a
//!   [`kv::Kv`] store — tierkv (any design; a PM design keeps its WAL in
//!   PM) or, with the `rocksdb` feature, RocksDB. Layout in
//!   docs/format/raft.md.
//! - [`server`]: a replicated KV service over HTTP/JSON (axum): put, get,
//!   delete, append, scan, linearizable reads through openraft's read
//!   index, membership changes.
//! - [`client`]: a small HTTP client that follows the leader, used by the
//!   tests and the bench.

#![warn(missing_docs)]
#![warn(clippy::unwrap_used)]

pub mod client;
pub mod http;
pub mod kv;
pub mod network;
pub mod server;
pub mod store;

use std::io::Cursor;

use serde::{Deserialize, Serialize};

/// A node's id in the cluster.
pub type NodeId = u64;

/// A write to the replicated map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Set `key` to `value`.
    Put {
        /// The key.
        key: String,
        /// The new value.
        value: String,
    },
    /// Remove `key`.
    Delete {
        /// The key.
        key: String,
    },
    /// Append `value` to the value of `key` (an absent key is empty): a
    /// write applied twice is visible, which the fault tests rely on.
    Append {
        /// The key.
        key: String,
        /// What to append.
        value: String,
    },
}

impl Request {
    /// The key the request writes.
    pub fn key(&self) -> &[u8] {
        match self {
            Request::Put { key, .. } | Request::Delete { key } | Request::Append { key, .. } => {
                key.as_bytes()
            }
        }
    }
}

/// What a write returns: the key's previous value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The value before the write, if any.
    pub prev: Option<String>,
}

openraft::declare_raft_types!(
    /// The openraft types of tierkv-raft.
    pub TypeConfig:
        D = Request,
        R = Response,
);

/// The Raft instance of a node.
pub type Raft = openraft::Raft<TypeConfig>;
