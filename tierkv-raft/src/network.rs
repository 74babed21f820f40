//! openraft's network over HTTP/JSON: `POST /raft/{append,vote,snapshot}`
//! on each peer's server, one kept-alive connection per peer.

use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::http::{HttpConn, HttpError};
use crate::{NodeId, TypeConfig};

/// Makes one [`PeerClient`] per peer.
#[derive(Debug, Clone, Default)]
pub struct Network;

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        PeerClient {
            target,
            conn: HttpConn::new(node.addr.clone()),
        }
    }
}

/// The connection from this node to one peer.
pub struct PeerClient {
    target: NodeId,
    conn: HttpConn,
}

impl PeerClient {
    async fn call<Req, Resp, E>(
        &mut self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body = serde_json::to_vec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let timeout = option.hard_ttl().max(Duration::from_millis(50));
        let (status, bytes) = match self
            .conn
            .request(hyper::Method::POST, path, Some(body), timeout)
            .await
        {
            Ok(r) => r,
            Err(e @ HttpError::Connect(_)) => {
                return Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        if status != 200 {
            let e = HttpError::Unknown(format!(
                "{path}: HTTP {status}: {}",
                String::from_utf8_lossy(&bytes)
            ));
            return Err(RPCError::Network(NetworkError::new(&e)));
        }
        let res: Result<Resp, RaftError<NodeId, E>> =
            serde_json::from_slice(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call("/raft/append", &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call("/raft/snapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call("/raft/vote", &rpc, &option).await
    }
}
