//! Scripted upstreams: an in-process HTTP/1.1 server that answers each request with the next scripted
//! [`Reply`] (or the one a handler picks for it, [`Upstream::answer_with`]), records what it received, and
//! notices when the client leaves before a reply ended; and [`Silent`], an upstream that accepts connections
//! and never answers.
//!
//! ```ignore
//! let upstream = Reply::sse()
//!     .event(json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}))
//!     .delay(20)
//!     .frame("data: {\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"r\"}\n\n")
//!     .serve()
//!     .await;
//! ```

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::within;

type Body = BoxBody<Bytes, io::Error>;

/// One scripted answer: a status, headers, and body steps played in order.
#[derive(Clone, Debug)]
pub struct Reply {
    status: StatusCode,
    headers: Vec<(&'static str, String)>,
    steps: Vec<Step>,
}

#[derive(Clone, Debug)]
enum Step {
    /// Bytes written as they are (one body chunk).
    Frame(Bytes),
    Delay(Duration),
    /// Wait for [`Upstream::release`].
    Gate,
    /// Keep the response open until the client leaves.
    Hang,
    /// Cut the connection without ending the body.
    Abort,
}

impl Reply {
    /// `200 OK`, `Content-Type: text/event-stream`; add frames.
    pub fn sse() -> Reply {
        Reply {
            status: StatusCode::OK,
            headers: vec![("content-type", "text/event-stream".to_owned())],
            steps: Vec::new(),
        }
    }

    /// A plain-text answer with this status; add a body with [`Reply::body`].
    pub fn status(status: u16) -> Reply {
        Reply {
            status: StatusCode::from_u16(status).expect("a valid status code"),
            headers: vec![("content-type", "text/plain".to_owned())],
            steps: Vec::new(),
        }
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Reply {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name, value.to_owned()));
        self
    }

    pub fn body(self, text: &str) -> Reply {
        self.frame(text)
    }

    /// Raw bytes, written as one chunk exactly as given (framing quirks included).
    pub fn frame(mut self, raw: &str) -> Reply {
        self.steps
            .push(Step::Frame(Bytes::copy_from_slice(raw.as_bytes())));
        self
    }

    /// One SSE event `data: <json>\n\n`.
    pub fn event(self, event: Value) -> Reply {
        self.frame(&format!("data: {event}\n\n"))
    }

    /// One SSE event per item.
    pub fn events(self, events: impl IntoIterator<Item = Value>) -> Reply {
        events.into_iter().fold(self, Reply::event)
    }

    pub fn delay(mut self, millis: u64) -> Reply {
        self.steps.push(Step::Delay(Duration::from_millis(millis)));
        self
    }

    /// Waits here until the test calls [`Upstream::release`].
    pub fn gate(mut self) -> Reply {
        self.steps.push(Step::Gate);
        self
    }

    /// Ends the script with a response that never ends (until the client goes away).
    pub fn hang(mut self) -> Reply {
        self.steps.push(Step::Hang);
        self
    }

    /// Ends the script by cutting the connection in the middle of the body.
    pub fn close_mid_stream(mut self) -> Reply {
        self.steps.push(Step::Abort);
        self
    }

    /// Serves this reply to every request.
    pub async fn serve(self) -> Upstream {
        Upstream::serve([self]).await
    }
}

/// One request the upstream received.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
    /// The body as JSON (`Value::String` of the text when it is not JSON).
    pub body: Value,
}

impl Received {
    /// A header's value as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// A running scripted upstream. Dropping it stops it.
pub struct Upstream {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

/// Picks the reply to a request, given the request and how many came before it.
type Handler = dyn Fn(&Received, usize) -> Reply + Send + Sync;

struct State {
    handler: Box<Handler>,
    received: Mutex<Vec<Received>>,
    connections: AtomicUsize,
    /// Replies whose body is still being played: neither ended nor left by their client.
    playing: AtomicUsize,
    released: watch::Sender<bool>,
    /// How many replies lost their client before they ended.
    abandoned: watch::Sender<usize>,
}

impl Upstream {
    /// Answers the n-th request with the n-th reply; the last reply answers every request after it.
    pub async fn serve(replies: impl IntoIterator<Item = Reply>) -> Upstream {
        let replies: Vec<Reply> = replies.into_iter().collect();
        assert!(!replies.is_empty(), "a scripted upstream needs a reply");
        Self::answer_with(move |_, index| replies[index.min(replies.len() - 1)].clone()).await
    }

    /// Answers each request with `handler(request, how many requests came before it)`: for upstreams whose
    /// answer depends on what is asked (a JSON-RPC method, a path).
    pub async fn answer_with(
        handler: impl Fn(&Received, usize) -> Reply + Send + Sync + 'static,
    ) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the upstream");
        let addr = listener.local_addr().expect("upstream address");
        let state = Arc::new(State {
            handler: Box::new(handler),
            received: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
            playing: AtomicUsize::new(0),
            released: watch::channel(false).0,
            abandoned: watch::channel(0).0,
        });
        let task = tokio::spawn(accept(listener, Arc::clone(&state)));
        Upstream { addr, state, task }
    }

    /// The URL to configure as the route's `upstream`.
    pub fn url(&self) -> String {
        format!("http://{}/agent", self.addr)
    }

    /// A URL on 127.0.0.1 where nothing listens (connections are refused). Its port stays bound, never
    /// listening, for the rest of the test binary: a port merely found free could be taken by a server
    /// another test starts meanwhile, and the connection would not be refused.
    pub async fn refused_url() -> String {
        static HELD: Mutex<Vec<tokio::net::TcpSocket>> = Mutex::new(Vec::new());
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind("127.0.0.1:0".parse().expect("an address"))
            .expect("bind");
        let addr = socket.local_addr().expect("address");
        HELD.lock().unwrap().push(socket);
        format!("http://{addr}/agent")
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().expect("lock").clone()
    }

    /// The one request received; fails unless exactly one arrived.
    pub fn only_request(&self) -> Received {
        let received = self.received();
        assert_eq!(
            received.len(),
            1,
            "expected exactly one upstream request, got {received:#?}"
        );
        received.into_iter().next().expect("one request")
    }

    /// The first request received that `matches`, waiting for it up to [`super::WAIT`].
    pub async fn wait_for(&self, what: &str, matches: impl Fn(&Received) -> bool) -> Received {
        within(&format!("the upstream to receive {what}"), async {
            loop {
                if let Some(found) = self.received().into_iter().find(|r| matches(r)) {
                    return found;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
    }

    /// How many TCP connections were accepted.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// How many replies are still being played: neither ended nor left by their client.
    pub fn replies_in_flight(&self) -> usize {
        self.state.playing.load(Ordering::SeqCst)
    }

    /// Lets every reply waiting at a [`Reply::gate`] go on.
    pub fn release(&self) {
        self.state.released.send_replace(true);
    }

    /// Whether a client left before its reply ended, waiting up to `limit` for it.
    pub async fn client_left_within(&self, limit: Duration) -> bool {
        let mut abandoned = self.state.abandoned.subscribe();
        let left = tokio::time::timeout(limit, abandoned.wait_for(|n| *n > 0)).await;
        left.is_ok()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, state: Arc<State>) {
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        state.connections.fetch_add(1, Ordering::SeqCst);
        let state = Arc::clone(&state);
        let service = service_fn(move |request| {
            let state = Arc::clone(&state);
            async move { Ok::<_, Infallible>(answer(request, &state).await) }
        });
        // Aborted with the accept task, so no connection outlives the upstream.
        connections.spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(request: Request<Incoming>, state: &Arc<State>) -> http::Response<Body> {
    let (head, body) = request.into_parts();
    let bytes = within("the upstream request body", body.collect())
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    let request = Received {
        method: head.method,
        path: head.uri.path().to_owned(),
        headers: head.headers,
        body,
    };
    let index = {
        let mut received = state.received.lock().expect("lock");
        received.push(request.clone());
        received.len() - 1
    };
    let reply = (state.handler)(&request, index);
    let mut response = http::Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        response = response.header(*name, value);
    }
    let (frames, body) = mpsc::channel::<Result<Frame<Bytes>, io::Error>>(1);
    state.playing.fetch_add(1, Ordering::SeqCst);
    tokio::spawn(play(reply.steps, frames, Arc::clone(state)));
    let body = futures_util::stream::unfold(body, |mut body| async move {
        body.recv().await.map(|frame| (frame, body))
    });
    response
        .body(BodyExt::boxed(StreamBody::new(body)))
        .expect("the scripted status and headers are valid")
}

/// Plays the steps of a reply into its body; counts the reply as abandoned if the client leaves first.
async fn play(
    steps: Vec<Step>,
    frames: mpsc::Sender<Result<Frame<Bytes>, io::Error>>,
    state: Arc<State>,
) {
    /// Takes the reply out of [`State::playing`] however playing it ends.
    struct Played(Arc<State>);
    impl Drop for Played {
        fn drop(&mut self) {
            self.0.playing.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _played = Played(Arc::clone(&state));
    let abandoned = || state.abandoned.send_modify(|n| *n += 1);
    let mut released = state.released.subscribe();
    for step in steps {
        match step {
            Step::Frame(bytes) => {
                if frames.send(Ok(Frame::data(bytes))).await.is_err() {
                    return abandoned();
                }
            }
            Step::Delay(delay) => {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = frames.closed() => return abandoned(),
                }
            }
            Step::Gate => {
                tokio::select! {
                    _ = released.wait_for(|open| *open) => {}
                    () = frames.closed() => return abandoned(),
                }
            }
            Step::Hang => {
                frames.closed().await;
                return abandoned();
            }
            Step::Abort => {
                let _ = frames
                    .send(Err(io::Error::other("scripted: connection cut")))
                    .await;
                return;
            }
        }
    }
}

/// An upstream that accepts connections and never answers: it reads what it is sent and counts the
/// connections its client has not closed yet. Dropping it stops it.
pub struct Silent {
    addr: SocketAddr,
    open: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Silent {
    pub async fn serve() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the silent upstream");
        let addr = listener.local_addr().expect("silent upstream address");
        let open = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(listen_silently(listener, Arc::clone(&open)));
        Silent { addr, open, task }
    }

    /// The URL to configure as the route's `upstream`.
    pub fn url(&self) -> String {
        format!("http://{}/agent", self.addr)
    }

    /// How many accepted connections are still open.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn listen_silently(listener: TcpListener, open: Arc<AtomicUsize>) {
    use tokio::io::AsyncReadExt;
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((mut stream, _)) = listener.accept().await {
        open.fetch_add(1, Ordering::SeqCst);
        let open = Arc::clone(&open);
        // Aborted with the accept task, so no connection outlives the upstream.
        connections.spawn(async move {
            let mut sink = [0; 4096];
            while matches!(stream.read(&mut sink).await, Ok(read) if read > 0) {}
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}
