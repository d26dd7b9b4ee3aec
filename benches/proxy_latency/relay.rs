//! The floors of any proxy, run on the proxy's threads so that what agent-bridge adds beyond forwarding reads
//! apart from what forwarding itself costs on this machine:
//! - [`serve`]: a relay that copies bytes both ways between each client connection and a connection of its
//!   own to the agent, understanding nothing: the cost of one more loopback hop and the threads that carry
//!   it;
//! - [`serve_http`]: an HTTP relay built as hyper proxies usually are (a hyper server connection per client,
//!   hyper-util's pooled client to the agent with agent-bridge's read buffer), passing each request and its
//!   streamed answer through untouched: the cost of being a hyper proxy at all, translation aside.
//!   agent-bridge's own client drives each agent connection in the task that reads it instead
//!   (src/upstream/connections.rs), so it can cost less than this floor.

use std::net::SocketAddr;

use http::{Request, Uri};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::upstream::next_connection;

/// As agent-bridge's client to its agents (src/upstream/connections.rs).
const READ_BUFFER: usize = 4096;
const IDLE_CONNECTIONS: usize = 64;

/// Relays every connection accepted on `listener` to `upstream` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    upstream: SocketAddr,
    mut shutdown: oneshot::Receiver<()>,
) {
    while let Some(mut client) = next_connection(&listener, &mut shutdown, "relay").await {
        tokio::spawn(async move {
            let Ok(mut agent) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = agent.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut agent).await;
        });
    }
}

/// Serves every connection accepted on `listener` as HTTP/1.1, sending each request on to `upstream` and
/// streaming its answer back, until `shutdown`. Each thread has its own pool, as agent-bridge's threads do.
pub async fn serve_http(
    listener: TcpListener,
    upstream: SocketAddr,
    mut shutdown: oneshot::Receiver<()>,
) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let agent: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new())
        .http1_read_buf_exact_size(READ_BUFFER)
        .pool_max_idle_per_host(IDLE_CONNECTIONS)
        .build(connector);
    let server = http1::Builder::new();
    while let Some(stream) = next_connection(&listener, &mut shutdown, "http relay").await {
        let agent = agent.clone();
        let service = service_fn(move |mut request: Request<Incoming>| {
            let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
            let uri = format!("http://{upstream}{path}").parse::<Uri>();
            let agent = agent.clone();
            // Boxed, as agent-bridge's: the connection then holds a pointer, not the future, once the
            // answer has started.
            Box::pin(async move {
                *request.uri_mut() = uri?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(agent.request(request).await?)
            })
        });
        tokio::spawn(server.serve_connection(TokioIo::new(stream), service));
    }
}
