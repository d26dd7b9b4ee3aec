//! Connections to upstreams, each driven by the task that reads its answer.
//!
//! hyper-util's pooled client drives every connection on a task of its own and hands an answer's body over
//! one chunk at a time, through a channel its task refills only when it next runs: every event of a stream
//! then costs two task turns, the connection's and the reader's. Here whoever reads the body drives the
//! connection too ([`UpstreamBody`]), so a read from the socket and the events it carries are handled in one
//! turn. An idle connection waits in its thread's pool, undriven, until a request takes it; it is checked
//! then, and one the agent closed meanwhile is dropped.
//!
//! Connections speak HTTP/1.1 only: an agent's stream needs its own connection anyway, and sharing an
//! HTTP/2 connection between streams would need the task of its own this module removes.

use std::cell::RefCell;
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
use hyper::client::conn::http1;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

/// How many bytes one read from an upstream connection takes at most.
const READ_BUFFER: usize = 4096;
/// How many idle connections to one origin each thread keeps for reuse. Each holds about 25 KiB of buffers;
/// a burst of a thousand streams would otherwise leave a thousand of them behind, and a CMDC session leaves
/// one behind for as long as it streams (its prompt's, while its events hold another).
const IDLE_PER_ORIGIN: usize = 64;
/// How long an idle connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

type Connection = http1::Connection<MaybeHttpsStream<TokioIo<TcpStream>>, Full<Bytes>>;
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
}

/// A connection and the means to send on it.
struct Driven {
    key: PoolKey,
    sender: Sender,
    connection: Connection,
    opened_by: ThreadId,
}

struct Idle {
    driven: Driven,
    since: Instant,
}

impl Driven {
    /// Back to the pool of the thread that opened it, for the next request.
    fn release(self) {
        if self.opened_by != thread::current().id() {
            return;
        }
        IDLE.with_borrow_mut(|idle| {
            let connections = idle.entry(self.key.clone()).or_default();
            // Oldest first: those past their time go, and the oldest makes room.
            let expired = connections
                .iter()
                .take_while(|idle| idle.since.elapsed() >= IDLE_TIMEOUT)
                .count();
            connections.drain(..expired);
            if connections.len() == IDLE_PER_ORIGIN {
                connections.pop_front();
            }
            connections.push_back(Idle {
                driven: self,
                since: Instant::now(),
            });
        });
    }

    /// Lets the connection read what the agent sent (a close, say) without waiting for the socket.
    fn still_open(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(&mut self.connection).poll(&mut cx).is_pending() && self.sender.is_ready()
    }
}

impl Idle {
    fn usable(&mut self) -> bool {
        self.since.elapsed() < IDLE_TIMEOUT && self.driven.still_open()
    }
}

/// The most recently used idle connection to `key` that is still usable.
fn take_idle(key: &PoolKey) -> Option<Driven> {
    IDLE.with_borrow_mut(|idle| {
        let connections = idle.get_mut(key)?;
        while let Some(mut candidate) = connections.pop_back() {
            if candidate.usable() {
                return Some(candidate.driven);
            }
        }
        None
    })
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
    /// the head of the answer. A request an idle connection could not take (the agent had closed it) goes on
    /// a new connection; one it took is never sent twice.
    pub(super) async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<UpstreamBody>, SendError> {
        let uri = request.uri().clone();
        let key = PoolKey {
            pool: self.pool,
            origin: origin(&uri),
        };
        let request = origin_form(request);
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

    async fn connect(&self, key: PoolKey, uri: Uri) -> Result<Driven, SendError> {
        let mut connector = self.connector.clone();
        poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(SendError::Connect)?;
        let io = connector.call(uri).await.map_err(SendError::Connect)?;
        let (sender, connection) = http1::Builder::new()
            .read_buf_exact_size(Some(READ_BUFFER))
            .handshake(io)
            .await?;
        Ok(Driven {
            key,
            sender,
            connection,
            opened_by: thread::current().id(),
        })
    }
}

/// Sends `request` on `driven`, driving the connection until the answer's head arrived.
async fn exchange(
    mut driven: Driven,
    request: Request<Full<Bytes>>,
) -> Result<Response<UpstreamBody>, hyper::client::conn::TrySendError<Request<Full<Bytes>>>> {
    let mut answer = std::pin::pin!(driven.sender.try_send_request(request));
    let mut connection = Some(driven.connection);
    let head = poll_fn(|cx| loop {
        if let Poll::Ready(head) = answer.as_mut().poll(cx) {
            return Poll::Ready(head);
        }
        let Some(open) = connection.as_mut() else {
            return Poll::Pending;
        };
        if Pin::new(open).poll(cx).is_pending() {
            return Poll::Pending;
        }
        // The connection ended: the answer now says how.
        connection = None;
    })
    .await?;
    let driven = connection.map(|connection| Driven {
        connection,
        ..driven
    });
    Ok(head.map(|incoming| UpstreamBody { incoming, driven }))
}

/// The body of an upstream's answer. Reading it drives its connection, which goes back to the pool once the
/// body ended; dropping it earlier closes the connection, which tells the agent the reader went away.
pub struct UpstreamBody {
    incoming: Incoming,
    driven: Option<Driven>,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("incoming", &self.incoming)
            .field("driven", &self.driven.is_some())
            .finish()
    }
}

impl UpstreamBody {
    fn poll_incoming(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.incoming).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => {
                if let Some(driven) = self.driven.take() {
                    driven.release();
                }
            }
            Poll::Ready(Some(Err(_))) => self.driven = None,
            _ => {}
        }
        polled
    }

    /// Lets the connection read from its socket and hand the body what arrived. False when there is no
    /// connection to drive (it ended, and the body heard how).
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(driven) = &mut self.driven else {
            return false;
        };
        if Pin::new(&mut driven.connection).poll(cx).is_ready() {
            self.driven = None;
        }
        true
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        // Polling the body first tells the connection it may read on.
        match this.poll_incoming(cx) {
            Poll::Pending if this.drive(cx) => this.poll_incoming(cx),
            polled => polled,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

/// `scheme://authority` of an absolute URI.
fn origin(uri: &Uri) -> String {
    format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map_or("", |authority| authority.as_str())
    )
}

/// The request as HTTP/1.1 sends it to an origin server: its path and query, and the host in `Host`.
fn origin_form(mut request: Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    if let Some(authority) = request.uri().authority() {
        let host = authority
            .as_str()
            .rsplit_once('@')
            .map_or(authority.as_str(), |(_, host)| host);
        if let Ok(host) = HeaderValue::from_str(host) {
            request.headers_mut().entry(HOST).or_insert(host);
        }
    }
    let path = request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    *request.uri_mut() = Uri::from(path);
    request
}
