//! The client every outbound uses to reach its upstream: HTTP/1.1, TLS for https upstreams, a connect
//! timeout, the route's configured headers, and a pool of connections per thread, each driven by the task
//! that reads its answer (see [`connections`]).

mod connections;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderName, HeaderValue, Method, Request, Response, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::builderstates::WantsProtocols2;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::error::{Error, Result};
use crate::metrics::FirstByte;
use crate::telemetry::RequestSpan;
use connections::Connections;
pub use connections::UpstreamBody;

/// How much of an upstream's error body is read to explain the failure.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// How long reading that error body may take.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// One route's view of its upstream: where it is, and what to send with every request.
#[derive(Clone)]
pub struct Upstream {
    connections: Connections,
    uri: Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Where the time to each answer's head is observed (a route's agent; not a JWKS or a callback).
    first_byte: Option<FirstByte>,
}

/// The pool names handed out so far: each upstream's connections are its own.
static POOLS: AtomicU64 = AtomicU64::new(0);

impl Upstream {
    pub fn new(
        uri: Uri,
        headers: Vec<(HeaderName, HeaderValue)>,
        connect_timeout: Duration,
    ) -> Self {
        let connector = tls_or_plain().wrap_connector(tcp(HttpConnector::new(), connect_timeout));
        Self {
            connections: Connections::new(POOLS.fetch_add(1, Ordering::Relaxed), connector),
            uri,
            headers,
            first_byte: None,
        }
    }

    /// Observes the time from each request to the head of its answer in `first_byte`.
    pub fn timed(mut self, first_byte: FirstByte) -> Self {
        self.first_byte = Some(first_byte);
        self
    }

    /// The configured upstream URL.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// The URL of `path` under the upstream URL (`http://gw/base` + `/v1/x` = `http://gw/base/v1/x`).
    pub fn join(&self, path: &str) -> Result<Uri> {
        let base = self.uri.to_string();
        let uri = format!("{}{path}", base.trim_end_matches('/'));
        uri.parse().map_err(|e| {
            Error::config(format!(
                "upstream URL {} is not valid: {e}",
                redacted(&self.uri)
            ))
        })
    }

    /// POSTs a JSON body to the upstream URL and returns the response once its head arrived with a 2xx
    /// status. Failures to connect and non-2xx answers become upstream errors.
    pub async fn post_json(
        &self,
        body: Bytes,
        accept: &'static str,
    ) -> Result<Response<UpstreamBody>> {
        let response = self.post_json_any_status(body, accept).await?;
        check_status(response).await
    }

    /// POSTs a JSON body to the upstream URL like [`Self::post_json`], but returns the response whatever its
    /// status: for protocols whose error answers carry a body worth reading (an A2A server may answer a
    /// JSON-RPC error with HTTP 500). Only failures to connect are errors.
    pub async fn post_json_any_status(
        &self,
        body: Bytes,
        accept: &'static str,
    ) -> Result<Response<UpstreamBody>> {
        self.post_json_to(self.uri.clone(), body, accept).await
    }

    /// POSTs a JSON body to `uri` (a path under the upstream, for APIs with several endpoints) with the
    /// configured headers, and returns the response whatever its status. Only failures to connect are
    /// errors.
    pub async fn post_json_to(
        &self,
        uri: Uri,
        body: Bytes,
        accept: &'static str,
    ) -> Result<Response<UpstreamBody>> {
        let request = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, accept)
            .body(Full::new(body))
            .map_err(|e| Error::internal(format!("building the upstream request failed: {e}")))?;
        self.send(request, true).await
    }

    /// GETs `uri` (an agent card, ...) and returns the response once its head arrived with a 2xx status. The
    /// configured headers go along only when `uri` is on the upstream's own origin: they usually carry its
    /// credentials.
    pub async fn get(&self, uri: Uri, accept: &'static str) -> Result<Response<UpstreamBody>> {
        let same_origin =
            uri.scheme() == self.uri.scheme() && uri.authority() == self.uri.authority();
        let request = Request::builder()
            .method(Method::GET)
            .uri(uri)
            .header(ACCEPT, accept)
            .body(Full::new(Bytes::new()))
            .map_err(|e| Error::internal(format!("building the upstream request failed: {e}")))?;
        let response = self.send(request, same_origin).await?;
        check_status(response).await
    }

    /// Sends a request, with the configured headers when `with_headers`.
    async fn send(
        &self,
        mut request: Request<Full<Bytes>>,
        with_headers: bool,
    ) -> Result<Response<UpstreamBody>> {
        if with_headers {
            let headers = request.headers_mut();
            for (name, value) in &self.headers {
                headers.insert(name.clone(), value.clone());
            }
        }
        let uri = redacted(request.uri());
        let span = RequestSpan::start(&mut request, &uri);
        let sent = Instant::now();
        // Boxed: connecting and exchanging take several KiB, for which every caller's future would otherwise
        // keep room for as long as its answer streams.
        let response = Box::pin(self.connections.send(request)).await.map_err(|e| {
            Error::upstream_unreachable(format!("upstream {uri} unreachable: {}", error_chain(&e)))
        });
        span.end(response.as_ref().map(|answer| answer.status().as_u16()));
        // The agent's own answers only: not an agent card on another origin, say.
        if let (Some(first_byte), Ok(_), true) = (&self.first_byte, &response, with_headers) {
            first_byte.observe(sent.elapsed());
        }
        response
    }
}

/// A URL as errors and logs show it: without its query (which may carry a key expanded from `${VAR}`) and
/// without user info.
pub fn redacted(uri: &Uri) -> String {
    let scheme = uri
        .scheme_str()
        .map(|s| format!("{s}://"))
        .unwrap_or_default();
    let authority = uri.authority().map_or("", |a| a.as_str());
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}{host}{}", uri.path())
}

/// How every client of the proxy connects, whatever resolves its names: within `connect_timeout`, without
/// Nagle's delay, to http and https URLs (TLS by the web's roots, HTTP/1.1 or HTTP/2).
pub fn connector<R>(
    http: HttpConnector<R>,
    connect_timeout: Duration,
) -> HttpsConnector<HttpConnector<R>> {
    tls_or_plain()
        .enable_http2()
        .wrap_connector(tcp(http, connect_timeout))
}

/// TCP within `connect_timeout`, without Nagle's delay, for http and https URLs alike.
fn tcp<R>(mut http: HttpConnector<R>, connect_timeout: Duration) -> HttpConnector<R> {
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    http.enforce_http(false);
    http
}

/// TLS by the web's roots for https URLs, plain TCP for http ones, HTTP/1.1 offered (HTTP/2 is the caller's
/// to add).
fn tls_or_plain() -> hyper_rustls::HttpsConnectorBuilder<WantsProtocols2> {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
}

/// The response if its status is 2xx, else an error that carries the status and (the start of) the body.
pub async fn check_status(response: Response<UpstreamBody>) -> Result<Response<UpstreamBody>> {
    if response.status().is_success() {
        Ok(response)
    } else {
        // Boxed, like the sending: reading an error body would otherwise size every caller's future.
        Err(Box::pin(status_error(response)).await)
    }
}

/// Turns a non-2xx upstream answer into an error that carries its status and (the start of) its body.
async fn status_error(response: Response<UpstreamBody>) -> Error {
    let (status, body) = error_body(response).await;
    Error::upstream_status(status, &String::from_utf8_lossy(&body))
}

/// The status and the start of the body of an error answer, read within a size and a time bound (empty when
/// the body cannot be read in time).
pub async fn error_body(response: Response<UpstreamBody>) -> (u16, Bytes) {
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), ERROR_BODY_LIMIT).collect();
    let body = match tokio::time::timeout(ERROR_BODY_TIMEOUT, body).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        _ => Bytes::new(),
    };
    (status, body)
}

/// An error and its causes on one line: hyper-util's errors say little at the top level.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    use super::*;

    /// An HTTP server answering `body` to everything, and how many connections it accepted.
    async fn counting_server(body: &'static [u8]) -> (Uri, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}/", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let answer = service_fn(move |_| async move {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(body))))
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), answer));
            }
        });
        (uri.parse().unwrap(), accepted)
    }

    /// An upstream at `url`, with no headers of its own.
    fn upstream_at(url: &str) -> Upstream {
        Upstream::new(url.parse().unwrap(), Vec::new(), Duration::from_secs(5))
    }

    /// One whole request; its connection goes back to the calling thread's pool as its body ends.
    async fn fetch(upstream: &Upstream) {
        let response = upstream.get(upstream.uri().clone(), "*/*").await.unwrap();
        response.into_body().collect().await.unwrap();
    }

    /// A server that answers one request per connection with the target and the `Host` it was sent, then
    /// closes the connection, and how many connections it accepted.
    async fn one_answer_server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0; 1024];
                    while !head.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8(head).unwrap();
                    let target = head.split(' ').nth(1).unwrap_or_default();
                    let host = head
                        .lines()
                        .find_map(|line| line.strip_prefix("host: "))
                        .unwrap_or_default();
                    let body = serde_json::json!({ "target": target, "host": host }).to_string();
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        (addr, accepted)
    }

    #[tokio::test]
    async fn a_request_names_its_path_and_host_as_http_1_1_has_them() {
        let (addr, _) = one_answer_server().await;
        let upstream = upstream_at(&format!("http://user:pw@{addr}/base"));
        let card = upstream.join("/card?x=1").unwrap();
        let answer = upstream.get(card, "*/*").await.unwrap();
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        let seen: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(seen["target"], "/base/card?x=1");
        assert_eq!(seen["host"], addr.to_string());
    }

    #[tokio::test]
    async fn a_connection_the_agent_closed_while_idle_is_not_reused() {
        let (addr, accepted) = one_answer_server().await;
        let upstream = upstream_at(&format!("http://{addr}/"));
        for turn in 1..=3 {
            fetch(&upstream).await;
            assert_eq!(accepted.load(Ordering::SeqCst), turn);
            // The agent's close reaches the idle connection.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    #[tokio::test]
    async fn an_empty_answer_left_unread_leaves_its_connection_reusable() {
        let (uri, accepted) = counting_server(b"").await;
        let upstream = upstream_at(&uri.to_string());
        for _ in 0..3 {
            let answer = upstream.get(upstream.uri().clone(), "*/*").await.unwrap();
            drop(answer);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_stream_dropped_mid_way_closes_its_connection_to_the_agent() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (closed, seen_closed) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = [0; 4096];
            let _ = stream.read(&mut buf).await;
            let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\nfirst\n\r\n";
            stream.write_all(head.as_bytes()).await.unwrap();
            // The stream never ends: only the reader's leaving closes it.
            while !matches!(stream.read(&mut buf).await, Ok(0) | Err(_)) {}
            let _ = closed.send(());
        });
        let upstream = upstream_at(&format!("http://{addr}/"));
        let mut body = upstream
            .get(upstream.uri().clone(), "*/*")
            .await
            .unwrap()
            .into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "first\n");
        drop(body);
        tokio::time::timeout(Duration::from_secs(5), seen_closed)
            .await
            .expect("the agent sees the connection close within 5 s")
            .unwrap();
    }

    #[test]
    fn shown_urls_keep_no_query_and_no_user_info() {
        let uri: Uri = "https://user:pw@agent.example:8443/v1/run?api_key=secret&x=1"
            .parse()
            .unwrap();
        assert_eq!(redacted(&uri), "https://agent.example:8443/v1/run");
    }

    #[tokio::test]
    async fn an_unreachable_upstreams_error_names_it_without_its_query() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let uri: Uri = format!("http://{addr}/run?api_key=secret").parse().unwrap();
        let upstream = upstream_at(&uri.to_string());
        let error = upstream
            .post_json(Bytes::from_static(b"{}"), "*/*")
            .await
            .unwrap_err();
        assert!(
            error.message().contains(&format!("http://{addr}/run")),
            "{error:?}"
        );
        assert!(!error.message().contains("secret"), "{error:?}");
    }

    #[tokio::test]
    async fn a_connection_is_reused_by_the_thread_that_opened_it_and_no_other() {
        let (uri, accepted) = counting_server(b"{}").await;
        let upstream = upstream_at(&uri.to_string());

        fetch(&upstream).await;
        fetch(&upstream).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "reused on this thread");

        let other = upstream.clone();
        let (done, finished) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(fetch(&other));
            let _ = done.send(());
        });
        tokio::time::timeout(Duration::from_secs(10), finished)
            .await
            .expect("the other thread's request within 10 s")
            .unwrap();
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "another thread opens its own"
        );

        fetch(&upstream).await;
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "still reused on this thread"
        );
    }
}
