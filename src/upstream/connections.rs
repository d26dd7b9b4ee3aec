//! Connections to upstreams, each driven by the task that reads its answer.
//!
//! hyper-util's pooled client drives every connection on a task of its own and hands an answer's body over
//! one chunk at a time, through a channel its task refills only when it next runs: every event of a stream
//! then costs two task turns, the connection's and the reader's. Here whoever reads the body drives the
//! connection too ([`UpstreamBody`]), so a read from the socket and the events it carries are handled in one
//! turn; the wakes the two ends of hyper's channel give each other are held back ([`crate::wake`]), as they
//! would only bring the turn round again. An idle connection waits in its thread's pool, undriven, until a
//! request takes it; it is checked then and every few seconds by its thread's sweeper, and one the agent
//! closed meanwhile is dropped.
//!
//! Connections speak HTTP/1.1 only: an agent's stream needs its own connection anyway, and sharing an
//! HTTP/2 connection between streams would need the task of its own this module removes.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HOST;
use http::uri::PathAndQuery;
use http::{HeaderValue, Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::{http1, TrySendError};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::runtime::{Handle, RuntimeFlavor};
use tower_service::Service;

use crate::wake::NotingWaker;

/// How many bytes one read from an upstream connection takes at most.
const READ_BUFFER: usize = 4096;
/// How many idle connections to one origin each thread keeps for reuse. Each holds about 25 KiB of buffers;
/// a burst of a thousand streams would otherwise leave a thousand of them behind, and a CMDC session leaves
/// one behind for as long as it streams (its prompt's, while its events hold another).
const IDLE_PER_ORIGIN: usize = 64;
/// How long an idle connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How often a thread lets go of the idle connections its agents closed (Node and uvicorn servers close
/// theirs after 5 s) or that timed out, whatever their pool: nothing reads an idle connection meanwhile.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

type Http1Connection = http1::Connection<MaybeHttpsStream<TokioIo<TcpStream>>, Full<Bytes>>;
type Sender = http1::SendRequest<Full<Bytes>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where a connection may be reused: one upstream's pool (its connector and headers) and one origin.
#[derive(Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    pool: u64,
    origin: String,
}

thread_local! {
    /// This thread's idle connections, oldest first. A connection is reused only by the thread that opened
    /// it: its socket is registered with that thread's runtime (src/workers.rs).
    static IDLE: RefCell<HashMap<PoolKey, VecDeque<Idle>>> = RefCell::new(HashMap::new());
    /// Whether this thread's sweeper runs.
    static SWEEPING: Cell<bool> = const { Cell::new(false) };
}

/// A connection to an agent and the means to send on it: in use while a body drives it, or idle in its
/// thread's pool.
struct PooledConnection {
    key: PoolKey,
    sender: Sender,
    /// Boxed: about 1.7 KiB, which every future holding an answer's body would otherwise hold, often twice.
    connection: Box<Http1Connection>,
    opened_by: ThreadId,
}

struct Idle {
    connection: PooledConnection,
    since: Instant,
}

impl PooledConnection {
    /// Back to the pool of the thread that opened it, for the next request.
    fn release(self) {
        if self.opened_by != thread::current().id() {
            return;
        }
        // A body dropped while its thread ends finds the pool gone: the connection closes.
        let pooled = IDLE.try_with(|idle| {
            let mut idle = idle.borrow_mut();
            let connections = idle.entry(self.key.clone()).or_default();
            if connections.len() == IDLE_PER_ORIGIN {
                connections.pop_front();
            }
            connections.push_back(Idle {
                connection: self,
                since: Instant::now(),
            });
        });
        if pooled.is_ok() {
            start_sweeping();
        }
    }

    /// Whether the connection can take a request now. It reads what the agent sent while it was idle (a
    /// close, say) without waiting for the socket.
    fn reusable(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(&mut self.connection).poll(&mut cx).is_pending() && self.sender.is_ready()
    }
}

impl Idle {
    fn usable(&mut self) -> bool {
        self.since.elapsed() < IDLE_TIMEOUT && self.connection.reusable()
    }
}

/// The most recently used idle connection to `key` that is still usable.
fn take_idle(key: &PoolKey) -> Option<PooledConnection> {
    IDLE.with_borrow_mut(|idle| {
        let connections = idle.get_mut(key)?;
        while let Some(mut candidate) = connections.pop_back() {
            if candidate.usable() {
                return Some(candidate.connection);
            }
        }
        None
    })
}

/// Starts this thread's sweeper, unless it runs: every [`SWEEP_EVERY`] it drops the idle connections that are
/// closed or too old, until none is left. Only on a single-threaded runtime, whose tasks stay on this
/// thread (the serving threads'); elsewhere a connection is checked when a request would take it.
fn start_sweeping() {
    let Ok(runtime) = Handle::try_current() else {
        return;
    };
    if SWEEPING.get() || runtime.runtime_flavor() != RuntimeFlavor::CurrentThread {
        return;
    }
    SWEEPING.set(true);
    runtime.spawn(async {
        // Also when the runtime drops the task at its end.
        let _stopped = Sweeping;
        loop {
            tokio::time::sleep(SWEEP_EVERY).await;
            if !sweep() {
                return;
            }
        }
    });
}

/// Drops the idle connections that are closed or too old; false when none is left.
fn sweep() -> bool {
    IDLE.with_borrow_mut(|idle| {
        idle.retain(|_, connections| {
            connections.retain_mut(Idle::usable);
            !connections.is_empty()
        });
        !idle.is_empty()
    })
}

struct Sweeping;

impl Drop for Sweeping {
    fn drop(&mut self) {
        SWEEPING.set(false);
    }
}

/// Opens connections to one upstream's origins and reuses them.
#[derive(Clone)]
pub(super) struct Connections {
    pool: u64,
    connector: HttpsConnector<HttpConnector>,
}

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum SendError {
    #[error("{0} is not an absolute URL")]
    NotAbsolute(Uri),
    #[error("connecting failed: {0}")]
    Connect(BoxError),
    #[error(transparent)]
    Http(#[from] hyper::Error),
}

impl Connections {
    pub(super) fn new(pool: u64, connector: HttpsConnector<HttpConnector>) -> Self {
        Self { pool, connector }
    }

    /// Sends `request` (its URI absolute) on an idle connection to its origin, or on a new one, and returns
    /// the head of the answer. A request that an idle connection turned out unable to take (closed before
    /// the request went out) goes on a new connection; one that went out is never sent twice, and fails if
    /// the agent closed the connection meanwhile.
    pub(super) async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<UpstreamBody>, SendError> {
        let uri = request.uri().clone();
        let (Some(origin), Some(host)) = (origin(&uri), host(&uri)) else {
            return Err(SendError::NotAbsolute(uri));
        };
        let key = PoolKey {
            pool: self.pool,
            origin,
        };
        let request = origin_form(request, host);
        let request = match take_idle(&key) {
            Some(idle) => match exchange(idle, request).await {
                Ok(answer) => return Ok(answer),
                Err(mut unsent) => match unsent.take_message() {
                    Some(request) => request,
                    None => return Err(unsent.into_error().into()),
                },
            },
            None => request,
        };
        let fresh = self.connect(key, uri).await?;
        exchange(fresh, request)
            .await
            .map_err(|e| e.into_error().into())
    }

    async fn connect(&self, key: PoolKey, uri: Uri) -> Result<PooledConnection, SendError> {
        let mut connector = self.connector.clone();
        poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(SendError::Connect)?;
        let io = connector.call(uri).await.map_err(SendError::Connect)?;
        let (sender, connection) = http1::Builder::new()
            .read_buf_exact_size(Some(READ_BUFFER))
            .handshake(io)
            .await?;
        Ok(PooledConnection {
            key,
            sender,
            connection: Box::new(connection),
            opened_by: thread::current().id(),
        })
    }
}

/// Sends `request` on `pooled`, driving the connection until the answer's head arrived.
async fn exchange(
    mut pooled: PooledConnection,
    request: Request<Full<Bytes>>,
) -> Result<Response<UpstreamBody>, TrySendError<Request<Full<Bytes>>>> {
    let mut answer = std::pin::pin!(pooled.sender.try_send_request(request));
    let mut connection = Some(pooled.connection);
    // Both ends in turn, so neither wakes the task for the other (see `UpstreamBody::wakes`).
    let mut wakes = NotingWaker::default();
    // The connection first: it writes the request and reads the head, which the answer then holds.
    let head = poll_fn(|cx| {
        wakes.poll_holding(cx, |cx| {
            if let Some(open) = connection.as_mut() {
                if let Poll::Ready(ended) = Pin::new(open).poll(cx) {
                    ended_early(ended);
                    // Dropped, it fails the answer if nothing did yet.
                    connection = None;
                }
            }
            answer.as_mut().poll(cx)
        })
    })
    .await?;
    let pooled = connection.map(|connection| PooledConnection {
        connection,
        ..pooled
    });
    Ok(head.map(|incoming| UpstreamBody {
        ends: Ends { incoming, pooled },
        wakes,
    }))
}

/// Notes why a connection ended while its answer was still due: the answer's own error says less.
fn ended_early(ended: hyper::Result<()>) {
    if let Err(error) = ended {
        tracing::debug!("an upstream connection ended: {error}");
    }
}

/// The body of an upstream's answer. Reading it drives its connection, which goes back to the pool once the
/// body ended; dropping it earlier closes the connection, which tells the agent the reader went away.
pub struct UpstreamBody {
    ends: Ends,
    /// The body and its connection are polled together, in one call: a wake one gives the other (hyper's
    /// channel between them) would only have the task polled once more for nothing.
    wakes: NotingWaker,
}

/// The two ends of hyper's channel: the body, and the connection that fills it while the body needs it.
struct Ends {
    incoming: Incoming,
    pooled: Option<PooledConnection>,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("incoming", &self.ends.incoming)
            .field("connected", &self.ends.pooled.is_some())
            .finish()
    }
}

impl Ends {
    fn poll_incoming(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.incoming).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.release(),
            Poll::Ready(Some(Err(_))) => self.pooled = None,
            _ => {}
        }
        polled
    }

    fn poll_both(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        // Polling the body first tells the connection it may read on.
        if let Poll::Ready(frame) = self.poll_incoming(cx) {
            return Poll::Ready(frame);
        }
        let Some(pooled) = &mut self.pooled else {
            return Poll::Pending;
        };
        // The connection reads what the socket has and hands the body the next frame of it, or waits for
        // the socket (woken through `cx`).
        if let Poll::Ready(ended) = Pin::new(&mut pooled.connection).poll(cx) {
            ended_early(ended);
            // Dropped, it ends the body if nothing did yet.
            self.pooled = None;
        }
        self.poll_incoming(cx)
    }

    fn release(&mut self) {
        if let Some(mut pooled) = self.pooled.take() {
            if pooled.reusable() {
                pooled.release();
            }
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let UpstreamBody { ends, wakes } = self.get_mut();
        wakes.poll_holding(cx, |cx| ends.poll_both(cx))
    }

    fn is_end_stream(&self) -> bool {
        self.ends.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.ends.incoming.size_hint()
    }
}

impl Drop for UpstreamBody {
    /// A body read to its end (whose reader stopped at its length, or had none to read) leaves its
    /// connection reusable; otherwise the connection closes with it.
    fn drop(&mut self) {
        if self.ends.incoming.is_end_stream() {
            self.ends.release();
        }
    }
}

/// `scheme://authority` of an absolute URI.
fn origin(uri: &Uri) -> Option<String> {
    Some(format!("{}://{}", uri.scheme_str()?, uri.authority()?))
}

/// What `Host` says for `uri`: its host, and its port unless the scheme's default (no user info).
fn host(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let default_port = match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    let host = match uri.port_u16() {
        Some(port) if port != default_port => format!("{host}:{port}"),
        _ => host.to_owned(),
    };
    HeaderValue::from_str(&host).ok()
}

/// The request as HTTP/1.1 sends it to an origin server: its path and query, and `host` in `Host`.
fn origin_form(mut request: Request<Full<Bytes>>, host: HeaderValue) -> Request<Full<Bytes>> {
    request.headers_mut().entry(HOST).or_insert(host);
    let path = request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    *request.uri_mut() = Uri::from(path);
    request
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::Notify;

    use super::*;

    fn host_of(uri: &str) -> String {
        let host = host(&uri.parse().unwrap()).unwrap();
        host.to_str().unwrap().to_owned()
    }

    #[test]
    fn host_names_a_port_only_when_it_is_not_the_schemes_own() {
        assert_eq!(host_of("https://agent.example:443/run"), "agent.example");
        assert_eq!(host_of("http://agent.example:80/run"), "agent.example");
        assert_eq!(host_of("http://agent.example:443/run"), "agent.example:443");
        assert_eq!(
            host_of("https://user:pw@agent.example:8443/"),
            "agent.example:8443"
        );
        assert_eq!(host_of("http://[::1]:9001/"), "[::1]:9001");
    }

    fn idle_connections() -> usize {
        IDLE.with_borrow(|idle| idle.values().map(VecDeque::len).sum())
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweeper_lets_go_of_a_connection_the_agent_closed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let close = Arc::new(Notify::new());
        let closing = Arc::clone(&close);
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = [0; 4096];
            let _ = stream.read(&mut buf).await;
            let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
            stream.write_all(answer.as_bytes()).await.unwrap();
            closing.notified().await;
        });
        let connections = Connections::new(
            u64::MAX,
            super::super::tls_or_plain().wrap_connector(HttpConnector::new()),
        );
        let request = Request::get(format!("http://{addr}/"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = connections.send(request).await.unwrap();
        answer.into_body().collect().await.unwrap();
        assert_eq!(idle_connections(), 1, "idle in the pool");

        close.notify_one();
        // The close reaches the socket (real time), then the sweeper's turn comes (paused time).
        std::thread::sleep(Duration::from_millis(100));
        tokio::time::sleep(SWEEP_EVERY * 2).await;
        assert_eq!(idle_connections(), 0, "swept");
    }
}
