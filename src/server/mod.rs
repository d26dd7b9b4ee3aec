//! The hyper server: accept loop, HTTP/1.1 and HTTP/2 connections, route dispatch by path, `GET /healthz`,
//! graceful shutdown. It knows no protocol: a route's inbound serves everything under its path.
//!
//! Every connection is bounded before any route is known: `max_connections` open at once, the request's
//! headers within `header_read_timeout`, and closed once quiet for `keepalive_idle`.

mod admin;
mod idle;
mod limits;
mod reload;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use opentelemetry::context::FutureExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

use crate::auth::TrustedProxies;
use crate::body::{error_response, json_response, Body};
use crate::config::{Config, ConnectionLimits};
use crate::connection::LocalAddr;
use crate::error::{Error, Result};
use crate::gauges::Gauges;
use crate::metrics::Metrics;
use crate::protocol::registry;
use crate::route::Route;
use crate::store::{self, Store};
use crate::translate::{Runs, RunsEnder};
use crate::workers::Workers;
pub use admin::{Admin, AdminState};
use idle::{Activity, Tracked};
use limits::AcceptFailures;
pub use reload::{Reload, Reloader};

/// How long running streams may go on after a shutdown signal.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// After the grace, how long the runs still going have to tell their clients they were ended.
const GOODBYE: Duration = Duration::from_secs(1);

/// How much of an answer hyper holds unsent for a client that has not taken it yet: it takes another write
/// only while it holds less (its default is about 400 KiB; per stream on HTTP/2). Past it, the answer's
/// stream is not polled, so the stream stops reading from its agent: a slow client holds this, one write
/// more, and the kernel's socket buffers, whatever the agent's speed. On HTTP/1.1 it also caps hyper's
/// read buffer, so it must hold the largest request head.
const MAX_UNSENT_BYTES: usize = 32 * 1024;

/// The largest HTTP/1.1 request head (request line and headers), in all, as nginx's default buffers allow:
/// beyond, it is answered 431 and the connection closes. HTTP/2 keeps hyper's own limit, 16 KiB.
const MAX_REQUEST_HEAD: usize = 32 * 1024;
const _: () = assert!(MAX_REQUEST_HEAD <= MAX_UNSENT_BYTES);

/// The routes serving: a reload swaps in new ones; a request in flight goes on with those it started on.
type LiveRoutes = Arc<ArcSwap<Routes>>;

pub struct Server {
    listener: TcpListener,
    routes: LiveRoutes,
    trusted_proxies: Arc<TrustedProxies>,
    reloader: Reloader,
    limits: ConnectionLimits,
    shutdown_grace: Duration,
    gauges: Arc<Gauges>,
    runs: RunsEnder,
    admin: AdminState,
    draining: watch::Sender<bool>,
}

impl Server {
    /// Builds every route and binds the listen address of the configuration.
    pub async fn bind(config: &Config) -> Result<Self> {
        let listener = listen(config.listen)
            .map_err(|e| Error::config(format!("cannot listen on {}: {e}", config.listen)))?;
        // Routes whose upstream calls back into the proxy need the address it really listens on.
        let local = listener.local_addr().unwrap_or(config.listen);
        let gauges = Arc::new(Gauges::default());
        let metrics = Metrics::new(Arc::clone(&gauges));
        let (runs, ender) = Runs::new(Arc::clone(&gauges), Arc::clone(&metrics));
        let store = store::open(&config.store).await?;
        let routes = Routes::from_config(config, Arc::clone(&store), local, &runs, None)?;
        let routes = Arc::new(ArcSwap::from_pointee(routes));
        let (draining, draining_seen) = watch::channel(false);
        Ok(Self {
            listener,
            routes: Arc::clone(&routes),
            trusted_proxies: Arc::new(TrustedProxies::new(config.trusted_proxies.clone())),
            reloader: Reloader {
                routes: Arc::clone(&routes),
                store: Arc::clone(&store),
                local,
                runs,
            },
            limits: config.connections,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            gauges,
            runs: ender,
            admin: AdminState {
                metrics,
                store,
                draining: draining_seen,
                routes,
            },
            draining,
        })
    }

    /// What the admin listener serves ([`Admin`]): the metrics, the store's readiness, the drain.
    pub fn admin_state(&self) -> AdminState {
        self.admin.clone()
    }

    /// What applies a reloaded routes file to the server ([`Reload`] watches the file).
    pub fn reloader(&self) -> Reloader {
        self.reloader.clone()
    }

    /// The server's live counts of connections and runs.
    pub fn gauges(&self) -> Arc<Gauges> {
        Arc::clone(&self.gauges)
    }

    /// How long running streams may go on after the shutdown signal.
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    pub fn local_addr(&self) -> SocketAddr {
        // A bound listener always has an address.
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Serves on the current runtime until `shutdown` resolves; then stops accepting and lets open
    /// connections finish within the grace period.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let serving = self.start();
        shutdown.await;
        serving.stop().await;
    }

    /// Starts accepting on the current runtime.
    pub fn start(self) -> Serving {
        let (listener, serving, connections) = self.serving();
        tokio::spawn(accept(listener, connections));
        serving
    }

    /// Starts accepting on every thread of `workers`: a connection is served on the thread that accepted it.
    pub fn start_on(self, workers: &Workers) -> Result<Serving> {
        let (listener, serving, connections) = self.serving();
        let listener = listener.into_std().map_err(cannot_share)?;
        workers
            .serve_each(listener, |listener| accept(listener, connections.clone()))
            .map_err(cannot_share)?;
        Ok(serving)
    }

    /// The listener, the handle that stops serving, and what the accept loops serve connections with.
    fn serving(self) -> (TcpListener, Serving, Connections) {
        let (stop, stopping) = watch::channel(());
        let serving = Serving {
            stop,
            grace: self.shutdown_grace,
            runs: self.runs,
            draining: self.draining,
        };
        let connections = Connections {
            routes: self.routes,
            trusted_proxies: self.trusted_proxies,
            http: Arc::new(Http::new(self.limits)),
            limits: self.limits,
            gauges: self.gauges,
            stopping,
        };
        (self.listener, serving, connections)
    }
}

fn cannot_share(error: std::io::Error) -> Error {
    Error::internal(format!(
        "cannot share the listening socket with the serving threads: {error}"
    ))
}

/// A server accepting connections. [`Serving::stop`] ends it gracefully; dropping it ends it too.
pub struct Serving {
    /// Changed to make the accept loops end and the connections close; closed once all of them are gone.
    stop: watch::Sender<()>,
    grace: Duration,
    runs: RunsEnder,
    /// Set as the stop begins (`/readyz` answers 503 from then on).
    draining: watch::Sender<bool>,
}

impl Serving {
    /// Stops accepting, and lets open connections finish within the grace period. Runs still going then are
    /// ended, so that each client is told so in its protocol before its stream closes.
    pub async fn stop(self) {
        tracing::info!(
            "shutting down; waiting up to {:?} for open streams",
            self.grace
        );
        self.draining.send_replace(true);
        self.stop.send_replace(());
        if tokio::time::timeout(self.grace, self.stop.closed())
            .await
            .is_ok()
        {
            return;
        }
        tracing::warn!(
            "open streams did not finish within {:?}; ending their runs",
            self.grace
        );
        self.runs.end_all();
        if tokio::time::timeout(GOODBYE, self.stop.closed())
            .await
            .is_err()
        {
            tracing::warn!("connections still open after their runs ended; closing them");
        }
    }
}

/// What every connection is served with, whichever thread accepted it.
#[derive(Clone)]
struct Connections {
    routes: LiveRoutes,
    /// `trusted_proxies`: server-wide, fixed until a restart.
    trusted_proxies: Arc<TrustedProxies>,
    http: Arc<Http>,
    limits: ConnectionLimits,
    /// Counts the open connections, across every serving thread.
    gauges: Arc<Gauges>,
    /// Changes when the server stops.
    stopping: watch::Receiver<()>,
}

/// Accepts connections and serves each on a task of its own, until the server stops.
async fn accept(listener: TcpListener, connections: Connections) {
    let mut stopping = connections.stopping.clone();
    let mut failures = AcceptFailures::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopping.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                let pause = failures.failed(&error);
                tokio::select! {
                    () = tokio::time::sleep(pause) => continue,
                    _ = stopping.changed() => return,
                }
            }
        };
        failures.accepted();
        let max = connections.limits.max_connections;
        let Some(slot) = connections.gauges.open_connection(max) else {
            tracing::debug!(%peer, "refused: max_connections are open");
            tokio::spawn(limits::refuse(stream));
            continue;
        };
        let connections = connections.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(error) = connections.serve(stream).await {
                tracing::debug!(%peer, "connection ended with an error: {error}");
            }
        });
    }
}

/// HTTP/2's connection preface: a client with prior knowledge opens with it.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The connection builders. hyper-util's `auto` builder is not used: it reads the first bytes to tell the
/// versions apart and hands them back in front of the socket, after which hyper's read buffer grows to
/// 16 KiB for every connection. Peeking leaves them in the socket, and the buffer stays at 8 KiB.
struct Http {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
}

impl Http {
    fn new(limits: ConnectionLimits) -> Self {
        let mut http1 = http1::Builder::new();
        // hyper also times the wait for a keep-alive connection's next request with this.
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_buf_size(MAX_UNSENT_BYTES)
            .max_header_size(MAX_REQUEST_HEAD);
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        // A peer that stopped answering (gone without a FIN) is found by its unanswered ping.
        http2
            .timer(TokioTimer::new())
            .keep_alive_interval(limits.keepalive_idle)
            .keep_alive_timeout(limits.keepalive_idle)
            .max_send_buf_size(MAX_UNSENT_BYTES);
        Self { http1, http2 }
    }
}

impl Connections {
    /// Serves one connection, HTTP/2 if it opens with the preface and HTTP/1.1 (with upgrades, for
    /// WebSockets) otherwise, until it closes; once the server stops, it closes after the request in flight.
    async fn serve(
        &self,
        stream: TcpStream,
    ) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().ok().map(LocalAddr);
        let peer = stream.peer_addr().ok();
        let (routes, trusted_proxies) =
            (Arc::clone(&self.routes), Arc::clone(&self.trusted_proxies));
        let service = service_fn(move |mut request: Request<Incoming>| {
            if let Some(local) = local {
                request.extensions_mut().insert(local);
            }
            if let Some(peer) = peer {
                trusted_proxies.resolve(&mut request, peer);
            }
            let routes = routes.load_full();
            // Boxed: hyper keeps room for the service's future for as long as the connection lives,
            // and a boxed one is freed as soon as the response (a stream, say) has started.
            Box::pin(
                async move { Ok::<_, std::convert::Infallible>(routes.dispatch(request).await) },
            )
        });
        let header_read_timeout = self.limits.header_read_timeout;
        let http2 = tokio::time::timeout(header_read_timeout, opens_with_h2_preface(&stream))
            .await
            .map_err(|_| "no request within header_read_timeout")??;
        let activity = Activity::new();
        let io = TokioIo::new(Tracked::new(stream, Arc::clone(&activity)));
        let end = Ending {
            stopping: self.stopping.clone(),
            activity: &activity,
            idle: self.limits.keepalive_idle,
        };
        if http2 {
            // Boxed: hyper's HTTP/2 connection is the larger, and unboxed every HTTP/1.1 connection's
            // task would keep room for it (1.6 KiB per connection, measured in the load tool).
            let connection = Box::pin(self.http.http2.serve_connection(io, service));
            end.drive(connection, |c| c.get_mut().as_mut().graceful_shutdown())
                .await?;
        } else {
            let connection = self
                .http
                .http1
                .serve_connection(io, service)
                .with_upgrades();
            end.drive(connection, |c| c.graceful_shutdown()).await?;
        }
        Ok(())
    }
}

/// Whether the connection's first bytes are HTTP/2's preface. They are peeked, not read: hyper then reads
/// the request from its first byte.
async fn opens_with_h2_preface(stream: &TcpStream) -> std::io::Result<bool> {
    let mut head = [0; H2_PREFACE.len()];
    loop {
        let peeked = stream.peek(&mut head).await?;
        if peeked == 0 || head[..peeked] != H2_PREFACE[..peeked] {
            return Ok(false);
        }
        if peeked == H2_PREFACE.len() {
            return Ok(true);
        }
        // The preface's first part only: a peek would see the same bytes at once until the rest arrives.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// What asks a connection to close before its client does.
struct Ending<'a> {
    /// Changes when the server stops (or its sender is gone).
    stopping: watch::Receiver<()>,
    activity: &'a Activity,
    /// `keepalive_idle`.
    idle: Duration,
}

impl Ending<'_> {
    /// Drives `connection` to its end; once the server stops or the connection has been quiet for
    /// `keepalive_idle`, asks it to close gracefully first (a response in flight still finishes).
    async fn drive<C, E>(
        mut self,
        connection: C,
        graceful_shutdown: impl FnOnce(Pin<&mut C>),
    ) -> std::result::Result<(), E>
    where
        C: Future<Output = std::result::Result<(), E>>,
    {
        let mut connection = pin!(connection);
        // In a fixed order (an unbiased select draws a random number at every poll, i.e. whenever the
        // connection moves), the connection last: a connection that stays busy never hides the others.
        tokio::select! {
            biased;
            _ = self.stopping.changed() => {}
            () = self.activity.quiet_for(self.idle) => {}
            result = connection.as_mut() => return result,
        }
        graceful_shutdown(connection.as_mut());
        connection.await
    }
}

/// How many connections may wait to be accepted. tokio's default (128) drops connections when a thousand
/// clients connect at once; the kernel caps it at `net.core.somaxconn` anyway.
const LISTEN_BACKLOG: u32 = 1024;

fn listen(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if address.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Builds every route without serving: what `agent-bridge check` reports.
pub async fn check(config: &Config) -> Result<()> {
    // The store is opened by `serve` only: checking a file neither creates nor locks its store.
    let store = Arc::new(store::MemoryStore::with_config(&config.store));
    Routes::from_config(config, store, config.listen, &Runs::unowned(), None).map(drop)
}

/// Installs the signal handlers at once, and resolves on SIGINT or SIGTERM (SIGHUP reloads: [`Reload`]).
#[cfg(unix)]
pub fn shutdown_signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{signal, Signal, SignalKind};

    /// Resolves when `signal` arrives; never, if its handler could not be installed.
    async fn received(signal: &mut Option<Signal>) {
        let arrived = match signal {
            Some(signal) => signal.recv().await.is_some(),
            None => false,
        };
        if !arrived {
            std::future::pending().await
        }
    }

    let [mut interrupt, mut terminate] =
        [SignalKind::interrupt(), SignalKind::terminate()].map(|kind| signal(kind).ok());
    async move {
        tokio::select! {
            () = received(&mut interrupt) => {}
            () = received(&mut terminate) => {}
        }
    }
}

/// Resolves on Ctrl-C.
#[cfg(not(unix))]
pub fn shutdown_signal() -> impl Future<Output = ()> {
    async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Every route, longest path first so the most specific mount point wins.
struct Routes {
    routes: Vec<Route>,
    /// Where each request a route answers is counted.
    metrics: Arc<Metrics>,
    /// `GET /routes`'s body: the routes as [`crate::routes_view`] shows them.
    view: bytes::Bytes,
}

impl Routes {
    /// The routes of `config`; those of the same name in `earlier` (the running ones, on a reload) pass
    /// their state on.
    fn from_config(
        config: &Config,
        store: Arc<dyn Store>,
        local: SocketAddr,
        runs: &Runs,
        earlier: Option<&Routes>,
    ) -> Result<Self> {
        let warnings = registry::check(config).map_err(|error| Error::config(error.to_string()))?;
        for warning in warnings {
            tracing::warn!("{warning}");
        }
        let earlier = |name: &str| earlier?.routes.iter().find(|route| route.name == name);
        let mut routes = config
            .routes
            .iter()
            .map(|route| {
                let store = Arc::clone(&store);
                match earlier(&route.name) {
                    Some(earlier) => Route::rebuild(route, store, local, runs, earlier),
                    None => Route::from_config(route, store, local, runs),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        routes.sort_by_key(|route| std::cmp::Reverse(route.mount.path.len()));
        for route in &routes {
            tracing::info!(route = %route.name, path = %route.mount.path, "route ready");
        }
        let view = serde_json::json!({ "routes": crate::routes_view::describe(config) });
        Ok(Self {
            routes,
            metrics: Arc::clone(runs.metrics()),
            view: serde_json::to_vec(&view).unwrap_or_default().into(),
        })
    }

    async fn dispatch(&self, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path();
        if path == "/healthz" && request.method() == Method::GET {
            return json_response(StatusCode::OK, br#"{"status":"ok"}"#.to_vec());
        }
        match self
            .routes
            .iter()
            .find(|route| route.subpath(path).is_some())
        {
            Some(route) => {
                // A run this request starts continues the client's trace.
                let response = match crate::telemetry::incoming(request.headers()) {
                    Some(trace) => route.handle(request).with_context(trace).await,
                    None => route.handle(request).await,
                };
                let status = response.status().as_u16();
                self.metrics.answered(&route.name, &route.pair, status);
                response
            }
            None if path == "/healthz" => error_response(
                &Error::method_not_allowed(format!(
                    "method {} is not allowed here; use GET",
                    request.method()
                )),
                "GET",
            ),
            None => error_response(&Error::not_found(format!("no route serves {path}")), "GET"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::sse::{SseBody, HEARTBEAT, MAX_GATHERED_BYTES};

    /// What the pipe between the connection and its client takes before the client reads.
    const PIPE: usize = 8 * 1024;

    #[tokio::test]
    async fn an_answer_its_client_does_not_read_is_polled_no_further_than_the_unsent_bound() {
        let frame = Bytes::from(format!("data: {}\n\n", "x".repeat(1000)));
        let polled = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&polled);
        let endless = futures_util::stream::repeat(frame.clone()).inspect(move |frame| {
            counter.fetch_add(frame.len(), Ordering::Relaxed);
        });
        let answer = std::sync::Mutex::new(Some(SseBody::new(endless, HEARTBEAT)));
        let service = service_fn(move |_: Request<Incoming>| {
            let body = answer.lock().unwrap().take().expect("one request");
            async move { Ok::<_, Infallible>(Response::new(body)) }
        });
        let (mut client, server) = tokio::io::duplex(PIPE);
        let http = Http::new(ConnectionLimits::default());
        let connection = tokio::spawn(http.http1.serve_connection(TokioIo::new(server), service));
        client
            .write_all(b"GET /stream HTTP/1.1\r\nhost: proxy\r\n\r\n")
            .await
            .unwrap();

        // Polled until the pipe and hyper's buffer are full, then no further (unchanged for 100 ms).
        let settled = async {
            let (mut last, mut unchanged) = (0, 0);
            while unchanged < 5 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let now = polled.load(Ordering::Relaxed);
                unchanged = if now == last { unchanged + 1 } else { 0 };
                last = now;
            }
            last
        };
        let polled = tokio::time::timeout(Duration::from_secs(10), settled)
            .await
            .expect("the answer stops being polled");

        let bound = PIPE + MAX_UNSENT_BYTES + MAX_GATHERED_BYTES + 2 * frame.len();
        assert!(polled >= PIPE, "{polled} bytes polled");
        assert!(polled <= bound, "{polled} bytes polled, more than {bound}");
        connection.abort();
    }
}
