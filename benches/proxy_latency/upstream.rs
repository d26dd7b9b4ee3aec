//! The scripted agent: one protocol's upstream on 127.0.0.1:0 (hyper, HTTP/1.1). Every run streams the
//! protocol's head, then `events` text deltas one `interval` apart (each run at its own phase, so streams
//! started together do not tick together), each delta's text its send stamp `@<ns>;` taken when hyper pulls
//! the frame, then the tail.
//!
//! As a CMDC gateway it scripts the minimum the proxy's CMDC outbound and a CMDC client use: `POST
//! /v1/sessions` (201), `GET …/events` (the run's SSE, closed after `agent_end`), `POST …/prompt` (202,
//! starts the run on the subscribed stream); any other session call (an abort) is accepted and ignored.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{oneshot, watch, Notify};
use tokio::time::Instant;

use crate::protocols::{Peer, Protocol, Script};
use crate::rig::now_ns;

type Body = UnsyncBoxBody<Bytes, Infallible>;
type Gate = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The agent's state, shared by every run it serves.
pub struct Agent {
    protocol: Protocol,
    events: usize,
    interval: Duration,
    /// While not 0, runs that start stream this many deltas and stop after the first until
    /// [`Agent::release`] (the memory step: streams that stay open mid-run).
    held_events: AtomicUsize,
    released: watch::Sender<bool>,
    /// CMDC: sessions created whose run has not started, each signalled by its prompt.
    sessions: Mutex<HashMap<String, Arc<Notify>>>,
    next_session: AtomicU64,
}

impl Agent {
    pub fn new(protocol: Protocol, events: usize, interval: Duration) -> Arc<Agent> {
        Arc::new(Agent {
            protocol,
            events,
            interval,
            held_events: AtomicUsize::new(0),
            released: watch::channel(false).0,
            sessions: Mutex::default(),
            next_session: AtomicU64::new(0),
        })
    }

    /// Runs started from now on stream `events` deltas and pause after the first.
    pub fn hold(&self, events: usize) {
        self.held_events.store(events, Ordering::SeqCst);
    }

    /// Lets the held runs go on; later runs are not held.
    pub fn release(&self) {
        self.held_events.store(0, Ordering::SeqCst);
        self.released.send_replace(true);
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn answer(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> Result<Response<Body>, Infallible> {
        let (method, path) = (request.method().clone(), request.uri().path().to_owned());
        // A real agent reads the whole request before it answers.
        let body = request.into_body().collect().await.map(|b| b.to_bytes());
        let body: Value = body
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Ok(match self.protocol {
            Protocol::Cmdc => self.gateway(&method, &path, &body),
            protocol => self.stream(protocol.script(&body), None),
        })
    }

    /// The CMDC gateway's calls, by method and the end of the path.
    fn gateway(&self, method: &Method, path: &str, body: &Value) -> Response<Body> {
        let (session, call) = match path.rsplit_once('/') {
            Some((rest, call)) => (rest.rsplit('/').next().unwrap_or_default(), call),
            None => ("", path),
        };
        match (method, call) {
            (&Method::POST, "sessions") => {
                let id = format!("s{}", self.next_session.fetch_add(1, Ordering::Relaxed));
                self.sessions().insert(id.clone(), Arc::default());
                json_response(
                    StatusCode::CREATED,
                    json!({"sessionId": id, "status": "created"}),
                )
            }
            (&Method::GET, "events") => match self.sessions().get(session).cloned() {
                // The run starts on this stream once its prompt arrives.
                Some(prompted) => {
                    let gate = Box::pin(async move { prompted.notified().await });
                    self.stream(self.protocol.script(body), Some(gate))
                }
                None => json_response(StatusCode::NOT_FOUND, json!({"error": "not_found"})),
            },
            (&Method::POST, "prompt") => match self.sessions().remove(session) {
                Some(prompted) => {
                    // Stored as a permit if the subscription has not started waiting yet.
                    prompted.notify_one();
                    json_response(
                        StatusCode::ACCEPTED,
                        json!({"requestId": "r", "sessionId": session, "queued": false}),
                    )
                }
                None => json_response(StatusCode::NOT_FOUND, json!({"error": "not_found"})),
            },
            // A session's delete (`…/sessions/<id>`), as the gateway answers it.
            (&Method::DELETE, id) => json_response(
                StatusCode::OK,
                json!({"sessionId": id, "status": "deleted"}),
            ),
            _ => json_response(StatusCode::ACCEPTED, json!({})),
        }
    }

    /// A run's paced stream, started at once or when `start` resolves.
    fn stream(&self, script: Script, start: Option<Gate>) -> Response<Body> {
        let (events, hold) = match self.held_events.load(Ordering::SeqCst) {
            0 => (self.events, None),
            held => (held, Some(self.released.subscribe())),
        };
        let run = PacedRun {
            script,
            events,
            interval: self.interval,
            start,
            hold,
            first: None,
            ready: VecDeque::new(),
            sent: 0,
            tail_sent: false,
        };
        let frames = futures_util::stream::unfold(run, PacedRun::next_frame);
        let mut response = Response::new(BodyExt::boxed_unsync(StreamBody::new(frames)));
        let headers = response.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(self.protocol.stream_type()),
        );
        headers.insert(
            http::header::CACHE_CONTROL,
            http::HeaderValue::from_static("no-cache"),
        );
        response
    }
}

fn json_response(status: StatusCode, body: Value) -> Response<Body> {
    let mut response = Response::new(BodyExt::boxed_unsync(Full::new(Bytes::from(
        body.to_string(),
    ))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// One run's frames: the head at once, a stamped delta every `interval`, the tail at once.
struct PacedRun {
    script: Script,
    events: usize,
    interval: Duration,
    /// What the run waits for before its head (a CMDC prompt).
    start: Option<Gate>,
    /// Set for a held run: after its first delta it waits until this turns `true`.
    hold: Option<watch::Receiver<bool>>,
    /// When the first delta is due; delta i is due `i` intervals later (absolute deadlines: a late tick
    /// does not push the rest of the script back).
    first: Option<Instant>,
    ready: VecDeque<Bytes>,
    /// Deltas sent so far.
    sent: usize,
    tail_sent: bool,
}

impl PacedRun {
    async fn next_frame(mut self) -> Option<(Result<Frame<Bytes>, Infallible>, PacedRun)> {
        let first = match self.first {
            Some(first) => first,
            None => self.begin().await,
        };
        loop {
            if let Some(bytes) = self.ready.pop_front() {
                return Some((Ok(Frame::data(bytes)), self));
            }
            if self.sent < self.events {
                if let (1, Some(hold)) = (self.sent, self.hold.as_mut()) {
                    let _ = hold.wait_for(|released| *released).await;
                }
                // An unpaced agent (interval zero) writes as fast as its client reads.
                if !self.interval.is_zero() {
                    tokio::time::sleep_until(first + self.interval * self.sent as u32).await;
                }
                let frame = self.script.delta(self.sent, &format!("@{};", now_ns()));
                self.sent += 1;
                return Some((Ok(Frame::data(frame)), self));
            }
            if self.tail_sent {
                return None;
            }
            self.tail_sent = true;
            self.ready.extend(self.script.tail());
        }
    }

    /// Waits for the run's start, queues its head, and sets its phase. Runs started together would tick
    /// together, and then every stream's delta would arrive in the same burst, direct or not: each run gets
    /// its own phase within the interval (spread by the golden ratio).
    async fn begin(&mut self) -> Instant {
        if let Some(start) = self.start.take() {
            start.await;
        }
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let phase = self
            .interval
            .mul_f64((run as f64 * 0.618_033_988_749_895).fract());
        let first = Instant::now() + phase;
        self.first = Some(first);
        self.ready.extend(self.script.head());
        first
    }
}

/// Serves `agent` on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, agent: Arc<Agent>, mut shutdown: oneshot::Receiver<()>) {
    let graceful = GracefulShutdown::new();
    let http = hyper::server::conn::http1::Builder::new();
    while let Some(stream) = next_connection(&listener, &mut shutdown, "upstream").await {
        let agent = Arc::clone(&agent);
        let service = service_fn(move |request| Arc::clone(&agent).answer(request));
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
}

/// The next connection accepted on `listener` (`TCP_NODELAY` set), or `None` once `shutdown` fires.
pub async fn next_connection(
    listener: &TcpListener,
    shutdown: &mut oneshot::Receiver<()>,
    who: &str,
) -> Option<TcpStream> {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    return Some(stream);
                }
                Err(error) => {
                    // Out of descriptors, most likely: back off instead of spinning.
                    eprintln!("{who}: accept failed: {error}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            _ = &mut *shutdown => return None,
        }
    }
}

/// A listener with a backlog large enough for 1,000 connections arriving at once.
pub fn listen_local() -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    socket.listen(4096)
}
