//! A minimal HTTP/1.1 JSON client on hyper's connection API: one kept-alive
//! connection per peer, reconnected after an error. No connection pool
//! and no TLS: the cluster talks over loopback or a private network.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

/// Why a request failed, as far as the caller can know.
#[derive(Debug, Clone)]
pub enum HttpError {
    /// No connection could be made: the request was never sent.
    Connect(String),
    /// The request may have reached the peer (sent, then the connection
    /// failed or the deadline passed): its outcome is unknown.
    Unknown(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Connect(m) => write!(f, "connect: {m}"),
            HttpError::Unknown(m) => write!(f, "outcome unknown: {m}"),
        }
    }
}

/// A connection to one `host:port`.
pub struct HttpConn {
    addr: String,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl HttpConn {
    /// A client for `addr` (`host:port`); connects on first use.
    pub fn new(addr: impl Into<String>) -> HttpConn {
        HttpConn {
            addr: addr.into(),
            sender: None,
        }
    }

    /// The peer's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    async fn connect(
        &mut self,
        timeout: Duration,
    ) -> Result<&mut SendRequest<Full<Bytes>>, HttpError> {
        if self.sender.as_ref().is_some_and(|s| s.is_closed()) {
            self.sender = None;
        }
        if self.sender.is_none() {
            let stream = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&self.addr))
                .await
                .map_err(|_| HttpError::Connect(format!("{}: timed out", self.addr)))?
                .map_err(|e| HttpError::Connect(format!("{}: {e}", self.addr)))?;
            let _ = stream.set_nodelay(true);
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| HttpError::Connect(format!("{}: {e}", self.addr)))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            self.sender = Some(sender);
        }
        self.sender
            .as_mut()
            .ok_or_else(|| HttpError::Connect("no connection".into()))
    }

    /// Sends `method path` with a JSON body (or none) and returns the status
    /// and body. The whole exchange is bounded by `timeout`.
    pub async fn request(
        &mut self,
        method: hyper::Method,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<(u16, Bytes), HttpError> {
        let addr = self.addr.clone();
        let sender = self.connect(timeout).await?;
        if sender.ready().await.is_err() {
            self.sender = None;
            return Err(HttpError::Connect(format!("{addr}: connection closed")));
        }
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, addr.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| HttpError::Connect(format!("bad request {path}: {e}")))?;
        let exchange = async {
            let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                self.sender = None;
                Err(HttpError::Unknown(format!("{addr}{path}: {e}")))
            }
            Err(_) => {
                self.sender = None;
                Err(HttpError::Unknown(format!(
                    "{addr}{path}: timed out after {timeout:?}"
                )))
            }
        }
    }
}

impl std::error::Error for HttpError {}
