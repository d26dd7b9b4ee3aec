//! What the fuzz targets that talk HTTP share: a fresh route of one inbound protocol in front of the built-in
//! echo agent, served by hyper over an in-memory connection the way the server serves a socket, on a runtime
//! that is gone after each input.
//!
//! The runtime's clock is paused and jumps ahead whenever every task waits for a timer, so heartbeats,
//! idle timeouts and run timeouts cost no real time, and an input the proxy never answers fails the target
//! after [`PATIENCE`] of that clock instead of hanging it.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agent_bridge::config::Config;
use agent_bridge::connection::{LocalAddr, PeerAddr};
use agent_bridge::route::Route;
use agent_bridge::store::MemoryStore;
use agent_bridge::translate::Runs;
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// Longer than any timeout a route has by default (`ws_idle` is the longest, 300 s).
pub const PATIENCE: Duration = Duration::from_secs(600);

/// One route per inbound protocol, each mounted at `/<its name>`.
const ROUTES: &str = r#"
[store]
backend = "memory"

[[routes]]
name = "ag-ui"
path = "/ag-ui"
inbound = "ag-ui"
outbound = "echo"

[[routes]]
name = "a2a"
path = "/a2a"
inbound = "a2a"
outbound = "echo"

[[routes]]
name = "agentscope"
path = "/agentscope"
inbound = "agentscope"
outbound = "echo"

[[routes]]
name = "ag-kit"
path = "/ag-kit"
inbound = "ag-kit"
outbound = "echo"

[[routes]]
name = "cmdc"
path = "/cmdc"
inbound = "cmdc"
outbound = "echo"
"#;

const PROXY: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8080);
const CLIENT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 40000);

/// Runs `test` on a fresh runtime (see the module documentation); panics if it does not end in [`PATIENCE`].
pub fn run<F: Future>(test: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    // The timer is made inside the runtime: its clock is the paused one.
    runtime
        .block_on(async { tokio::time::timeout(PATIENCE, test).await })
        .expect("the proxy answers in time")
}

/// A connection to a new route named `name` (one of [`ROUTES`]): nothing an earlier input did is in it.
pub async fn connect(name: &str) -> SendRequest<Full<Bytes>> {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    let config =
        CONFIG.get_or_init(|| Config::parse(ROUTES, "fuzz.toml").expect("the fuzz routes parse"));
    let route_config = config
        .routes
        .iter()
        .find(|route| route.name == name)
        .expect("a route of that name");
    let store = Arc::new(MemoryStore::new(Duration::from_secs(3600)));
    let route = Arc::new(
        Route::from_config(route_config, store, PROXY, &Runs::unowned()).expect("the route builds"),
    );
    let service = service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(LocalAddr(PROXY));
        request.extensions_mut().insert(PeerAddr(CLIENT));
        let route = Arc::clone(&route);
        async move { Ok::<_, Infallible>(route.handle(request).await) }
    });
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let serving = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(server_io), service)
        .with_upgrades();
    tokio::spawn(serving);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(client_io))
        .await
        .expect("the HTTP/1.1 handshake");
    tokio::spawn(connection.with_upgrades());
    sender
}

/// A POST with a JSON body, as a client of any of the protocols sends it.
pub fn post_json(path: &str, body: impl Into<Bytes>) -> Request<Full<Bytes>> {
    Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, "proxy.test")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(body.into()))
        .expect("a valid request")
}

/// Sends `request` once the connection is free.
pub async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Response<Incoming> {
    sender
        .ready()
        .await
        .expect("the connection takes another request");
    sender.send_request(request).await.expect("an answer")
}

/// Sends `request` and reads the whole answer.
pub async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> (StatusCode, Bytes) {
    let response = send(sender, request).await;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the whole body")
        .to_bytes();
    (status, body)
}

/// The CMDC session every CMDC input works in.
pub const SESSION: &str = "fuzz";

/// Creates [`SESSION`] on the CMDC route behind `sender`.
pub async fn create_session(sender: &mut SendRequest<Full<Bytes>>) {
    let create = format!(r#"{{"sessionId":"{SESSION}","model":"echo"}}"#);
    let (status, body) = exchange(sender, post_json("/cmdc/v1/sessions", create)).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the session is created: {body:?}"
    );
}
