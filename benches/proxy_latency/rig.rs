//! What every load tool here sets up the same way: the clock of the send stamps, numbers from the
//! environment, pairs of protocols, runtimes whose threads the counting allocator tells apart, the scripted
//! agents, and agent-bridge itself served as `agent-bridge` serves, with one route per pair.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use agent_bridge::config::Config;
use agent_bridge::server::{Server, Serving};
use agent_bridge::workers::Workers;

use crate::protocols::{Peer, Protocol};
use crate::system;
use crate::upstream::{self, Agent};

/// Nanoseconds on one monotonic clock for the whole process, so send stamps and receive times compare
/// directly.
pub fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The number in the environment variable `name`, or `default` when it is not set.
pub fn env_number(name: &str, default: usize) -> Result<usize, String> {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|e| format!("{name}={text}: {e}")),
        Err(_) => Ok(default),
    }
}

/// A client of protocol `inbound` through the proxy to an agent of protocol `outbound`.
#[derive(Clone, Copy)]
pub struct Pair {
    pub inbound: Protocol,
    pub outbound: Protocol,
}

impl Pair {
    /// Reads `inbound>outbound`, e.g. `ag-ui>a2a`.
    pub fn parse(text: &str) -> Result<Pair, String> {
        let (inbound, outbound) = text
            .split_once('>')
            .ok_or_else(|| format!("`{text}` is not `inbound>outbound`"))?;
        let protocol = |name: &str| {
            Protocol::from_name(name.trim()).ok_or_else(|| format!("unknown protocol `{name}`"))
        };
        Ok(Pair {
            inbound: protocol(inbound)?,
            outbound: protocol(outbound)?,
        })
    }

    pub fn id(self) -> String {
        format!("{}>{}", self.inbound.name(), self.outbound.name())
    }

    pub fn title(self) -> String {
        format!("{} → {}", self.inbound.name(), self.outbound.name())
    }
}

/// A multi-threaded runtime whose threads are named and counted as runtime `group` of
/// [`system::RUNTIMES`].
pub fn runtime(group: usize, threads: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(system::RUNTIMES[group])
        .on_thread_start(move || system::tag_thread(group))
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

// ---------------------------------------------------------------------------------------------------------
// The scripted agents

/// A scripted agent serving on 127.0.0.1 until [`RunningAgent::stop`].
pub struct RunningAgent {
    pub addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl RunningAgent {
    /// Serves `agent` on `runtime`.
    pub fn start(runtime: &Runtime, agent: Arc<Agent>) -> RunningAgent {
        let listener = runtime
            .block_on(async { upstream::listen_local() })
            .expect("binding the upstream");
        let addr = listener.local_addr().expect("upstream address");
        let (stop, stopped) = oneshot::channel();
        let task = runtime.spawn(upstream::serve(listener, agent, stopped));
        RunningAgent { addr, stop, task }
    }

    /// Stops accepting and waits (a while) for its open runs to end.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}

// ---------------------------------------------------------------------------------------------------------
// The proxy

/// One route of the proxy: `pair` at `path`, to the agent at `upstream`.
pub struct Route {
    pub path: &'static str,
    pub pair: Pair,
    pub upstream: SocketAddr,
    /// TOML for the route's tables beyond `[routes.translate]` (e.g. `[routes.quota]`), or nothing.
    pub tables: &'static str,
}

/// The routes, configured as a user would; `extra` is TOML for the top of the file (before the routes).
pub fn proxy_config(routes: &[Route], extra: &str) -> Config {
    Config::parse(&proxy_toml(routes, extra), "bench.toml").expect("a valid bench config")
}

/// [`proxy_config`]'s routes file.
pub fn proxy_toml(routes: &[Route], extra: &str) -> String {
    let mut config = format!("listen = \"127.0.0.1:0\"\n{extra}\n");
    for route in routes {
        config += &format!(
            "[[routes]]\nname = \"{name}\"\npath = \"{path}\"\ninbound = \"{inbound}\"\n\
             outbound = \"{outbound}\"\nupstream = \"{upstream}\"\ntimeout = \"300s\"\n\
             [routes.translate]\n{translate}{tables}\n",
            name = route.path.trim_start_matches('/'),
            path = route.path,
            inbound = route.pair.inbound.name(),
            outbound = route.pair.outbound.name(),
            upstream = route.pair.outbound.upstream_url(route.upstream),
            translate = route.pair.outbound.outbound_translate(),
            tables = route.tables,
        );
    }
    config
}

/// The threads a proxy serves on, as `agent-bridge` serves: each with a single-threaded runtime, named and
/// counted as runtime `group` of [`system::RUNTIMES`].
pub fn proxy_workers(group: usize, threads: usize) -> Workers {
    let threads = NonZeroUsize::new(threads).expect("at least one thread");
    Workers::start_with(threads, system::RUNTIMES[group], move || {
        system::tag_thread(group)
    })
    .expect("the proxy's threads")
}

/// agent-bridge with `config`, serving on `workers`; binding runs on `runtime`.
pub fn serve_proxy(runtime: &Runtime, config: &Config, workers: &Workers) -> (Serving, SocketAddr) {
    let server = runtime
        .block_on(Server::bind(config))
        .expect("binding the proxy")
        .with_shutdown_grace(Duration::from_secs(2));
    let addr = server.local_addr();
    let serving = server
        .start_on(workers)
        .expect("serving on the proxy's threads");
    (serving, addr)
}
