//! The proxy, in-process, on a real socket.

use std::fmt::Display;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use agent_bridge::config::Config;
use agent_bridge::gauges::Gauges;
use agent_bridge::server::Server;
use agent_bridge::workers::Workers;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::within;

/// A running proxy. Dropping it shuts it down.
pub struct Proxy {
    addr: SocketAddr,
    gauges: Arc<Gauges>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    /// The serving threads, when it serves on threads of its own as `agent-bridge` does; dropped last.
    _workers: Option<Workers>,
}

impl Proxy {
    /// Serves `routes` (routes.toml text, or a [`super::Route`] or [`super::Routes`]; `listen` is set to
    /// `127.0.0.1:0`).
    pub async fn start(routes: impl Display) -> Proxy {
        Self::start_with_grace(routes, Duration::from_secs(5)).await
    }

    /// Serves `routes`, letting open streams run for `grace` after a shutdown.
    pub async fn start_with_grace(routes: impl Display, grace: Duration) -> Proxy {
        Self::serve(routes, grace, None).await
    }

    /// Serves `routes` as `agent-bridge` does: on `threads` threads of its own, not the test's runtime.
    pub async fn start_on_threads(routes: impl Display, grace: Duration, threads: usize) -> Proxy {
        let threads = NonZeroUsize::new(threads).expect("at least one thread");
        Self::serve(routes, grace, Some(threads)).await
    }

    async fn serve(routes: impl Display, grace: Duration, threads: Option<NonZeroUsize>) -> Proxy {
        let text = format!("listen = \"127.0.0.1:0\"\n{routes}");
        let config = Config::parse(&text, "test.toml")
            .unwrap_or_else(|error| panic!("the test's routes do not parse: {error}"));
        let server = Server::bind(&config)
            .await
            .unwrap_or_else(|error| panic!("the proxy did not start: {error}"))
            .with_shutdown_grace(grace);
        let addr = server.local_addr();
        let gauges = server.gauges();
        let workers =
            threads.map(|threads| Workers::start(threads, "proxy").expect("the serving threads"));
        let serving = match &workers {
            Some(workers) => server.start_on(workers).expect("serving on the threads"),
            None => server.start(),
        };
        let (shutdown, signal) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            // A dropped sender shuts down too.
            let _ = signal.await;
            serving.stop().await;
        });
        Proxy {
            addr,
            gauges,
            shutdown: Some(shutdown),
            task: Some(task),
            _workers: workers,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's live counts of open connections and runs in flight.
    pub fn gauges(&self) -> &Gauges {
        &self.gauges
    }

    /// The URL of `path` on the proxy.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Triggers the graceful shutdown and returns at once.
    pub fn shutdown(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Waits until the server has stopped (bounded by [`super::WAIT`]).
    pub async fn stopped(&mut self) {
        if let Some(task) = self.task.take() {
            within("the proxy to stop", task)
                .await
                .expect("the proxy's server task panicked");
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
