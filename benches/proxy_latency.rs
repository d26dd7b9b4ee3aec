//! A small load tool: what the proxy adds to a stream, for every pair of protocols (inbound × outbound), as
//! differences and ratios against a direct connection to the same upstream measured in the same run (so a
//! busy machine distorts both sides alike).
//!
//! Each pair X → Y runs in a process of its own (so its memory readings start clean), on threads of three
//! kinds so the load does not starve the proxy:
//! - `upstream`: a scripted agent of protocol Y on 127.0.0.1:0 ([`upstream`]): each run streams `EVENTS`
//!   text deltas one `INTERVAL` apart, each delta's text its send stamp `@<ns>;`.
//! - `proxy`: agent-bridge itself ([`Server`]), one route X inbound → Y outbound to that agent, served as
//!   `agent-bridge` serves: on threads with a single-threaded runtime each ([`Workers`]).
//! - `clients`: for 1, 100 and 1,000 concurrent streams, first DIRECT (a Y client → the Y agent), then
//!   through a bare RELAY on the proxy's threads (a Y client → a byte-copying TCP relay → the Y agent,
//!   [`relay`]: what one more hop costs any proxy here), then through an HTTP RELAY on the same threads (a
//!   Y client → hyper's server and hyper-util's pooled client, passing requests and streams through
//!   untouched → the Y agent: what being a hyper proxy in the usual way costs, translation aside), then
//!   through NGINX as a pass-through proxy (Debian's `nginx`, `proxy_buffering off`, one worker; [`nginx`];
//!   skipped with a note where it is not installed: the floor a production proxy sets), then
//!   THROUGH the proxy (an X client → proxy → the Y agent). Each stream opens its own HTTP/1.1
//!   connection(s) and makes one run. What each protocol's client sends and agent answers is one table,
//!   [`protocols`]; the stamps are read from the raw bytes, whatever the frames.
//!
//! Measured per step: time to first event (request start → first bytes of the stream), per-delta latency
//! (receive time − send stamp) p50/p99, the p99 of the deltas sent once every stream had its first one (the
//! step without its start-up burst), and throughput (deltas received / wall time of the step). The table
//! gives proxy/direct ratios and the µs the proxy and the relays add. A second table shows where the CPU
//! went (cores busy per runtime and in other processes on the machine, from `/proc`; the proxy's CPU time
//! and allocations per delta) and how many connections the kernel dropped at a full accept queue (Linux
//! only).
//!
//! Memory per open stream, before the levels: `BENCH_MEMORY_STREAMS` direct streams are opened and held by
//! the agent after their first delta, then as many through the HTTP relay on top, then as many through the
//! proxy on top; the proxy's share is the RSS growth of its batch minus that of the direct one (clients and
//! agent are in both), per stream, and the live heap bytes the proxy's threads added (a counting allocator,
//! [`system::Counting`]); the HTTP relay's likewise.
//!
//! At the end, one line per pair: added latency p50/p99 (the proxy's and the relays') and throughput ratio
//! at the largest level, memory per open stream, against issue 7's targets (≤ 50 µs p50, ≤ 500 µs p99,
//! ≤ 32 KiB per stream).
//!
//! Issue 22's load shapes are named workloads (`BENCH_WORKLOAD`): `light` (10 streams, 1,000 deltas/s each),
//! `busy` (100 streams, 1,000 deltas/s each), `unpaced` (20 streams of 2,000 deltas, the agent writing as
//! fast as it is read) and `start` (200 streams starting together: the time to their first event). Each
//! runs the proxy on one thread with a core of its own (nginx, one process, pinned to the same core), the
//! agent and the clients on the other cores, and ends with a table of the proxy next to nginx and the HTTP
//! relay, with how far each one's memory grew during the step at its peak (the proxy's and the relay's
//! live heap on their threads, nginx's RSS: sampled every 10 ms).
//!
//! Run: `cargo bench --bench proxy_latency`. Environment:
//! - `BENCH_WORKLOAD=light|busy|unpaced|start` (the variables below but `BENCH_QUICK` still override its
//!   settings);
//! - `BENCH_PAIRS=ag-ui>a2a,cmdc>ag-kit` (protocols `ag-ui`, `a2a`, `agentscope`, `ag-kit`, `cmdc`), or
//!   `all` (the default: 25 pairs);
//! - `BENCH_QUICK=1`: 20 deltas per stream instead of 100 and 100 memory streams (a smoke run);
//! - `BENCH_EVENTS=N`, `BENCH_INTERVAL_MS=N` (default 50: 20 deltas/s per stream, 20,000/s at 1,000
//!   streams), `BENCH_LEVELS=1,100,1000`, `BENCH_MEMORY_STREAMS=N` (default 1,000; 0 skips the step),
//!   `BENCH_PROXY_THREADS=N` (default: all cores; with fewer, the proxy's threads are pinned to the last
//!   cores and everything else to the rest), `BENCH_TIMEOUT_S=N` (limit per pair, default 600),
//!   `BENCH_STORE=memory,redb,redis` (the proxy's `[store]`, one or more, default memory: [`store`]; with
//!   more than one, each level runs through a proxy on each, and a table puts them side by side),
//!   `BENCH_STORE_ROUNDS=N` (with more than one store: each level runs N rounds, default 5, and the table
//!   shows the median over the rounds of each store against the first one. In a round the stores' steps run
//!   at once, each proxy on threads of its own (`proxy`, `proxy-2`, `proxy-3`) whose CPU, sleeps and
//!   allocations are counted apart, started in another order each round; the agent gives each run a phase
//!   of its own, so their deltas do not share wake-ups. One step of a light level is a few milliseconds of
//!   the proxy's CPU, and a VM's wake-ups cost more in some seconds than in others, so steps measured one
//!   after the other differ by more than the stores do. The other tables show the first round's first
//!   store, a step that ran beside the other stores' (at 100 or 1,000 streams, with three times the load
//!   on the agent's and the clients' threads: measure one store for those tables), and in the rows of the
//!   stores' steps, the cores the upstream, the clients and other processes kept busy, and the
//!   accept-queue drops, are the round's, all stores together; with `BENCH_PROXY_THREADS`, every store's
//!   proxy gets that many threads, plus the one it was bound on, all on the proxy's cores).
//!
//! The tool raises its soft `RLIMIT_NOFILE` up to the hard limit (a CMDC stream through the proxy holds 8
//! descriptors, twice as many as the others). If that is still too low for a level, the level is skipped
//! with a message naming the `ulimit -n` it needs and the tool exits non-zero; the memory step, which holds
//! three batches at once, holds as many streams as the limit allows and says so.

#[path = "proxy_latency/load.rs"]
mod load;
#[path = "proxy_latency/nginx.rs"]
mod nginx;
#[path = "proxy_latency/protocols.rs"]
mod protocols;
#[path = "proxy_latency/relay.rs"]
mod relay;
#[path = "proxy_latency/report.rs"]
mod report;
#[path = "proxy_latency/rig.rs"]
mod rig;
#[path = "proxy_latency/store.rs"]
mod store;
#[path = "proxy_latency/system.rs"]
mod system;
#[path = "proxy_latency/upstream.rs"]
mod upstream;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use agent_bridge::config::Config;
use agent_bridge::server::Serving;
use agent_bridge::workers::Workers;

use load::{Level, ProxiedBy, Target};
use protocols::Protocol;
use rig::{env_number, now_ns, runtime, Pair, Route, RunningAgent};

#[global_allocator]
static ALLOCATOR: system::Counting = system::Counting;

/// Descriptors one stream holds at most, both ends of each connection counted: CMDC through the proxy or a
/// relay (two connections from its client, two to the agent).
const FDS_PER_STREAM: u64 = 8;
/// The memory step holds three batches at once: direct (a CMDC stream's 4), through the HTTP relay and
/// through the proxy (8 each).
const FDS_PER_MEMORY_STREAM: u64 = 20;
/// Descriptors for everything else.
const FD_MARGIN: u64 = 256;

/// Set by the parent for each pair's process: the pair it runs.
const PAIR_VAR: &str = "PROXY_LATENCY_PAIR";

/// The route's path on the proxy.
const ROUTE_PATH: &str = "/bench";

/// Where the steps of the direct path and the relays read the proxy's figures (the relays run on the first
/// store's proxy threads; direct, they stay idle).
const ON_PROXY_THREADS: ProxiedBy = ProxiedBy::Threads(system::PROXY);

// ---------------------------------------------------------------------------------------------------------
// Settings

/// A named load shape (`BENCH_WORKLOAD`), issue 22's: its streams, deltas per stream and pacing. Each runs
/// the proxy on one thread pinned to a core of its own, the agent and the clients on the others.
struct Workload {
    name: &'static str,
    streams: usize,
    events: usize,
    interval_ms: usize,
}

const WORKLOADS: [Workload; 4] = [
    // What a chat user sees at light load: CPU per delta next to nginx's.
    Workload {
        name: "light",
        streams: 10,
        events: 2000,
        interval_ms: 1,
    },
    // 100,000 deltas/s: throughput and added latency under load.
    Workload {
        name: "busy",
        streams: 100,
        events: 2000,
        interval_ms: 1,
    },
    // An agent that writes as fast as it is read: many deltas per read.
    Workload {
        name: "unpaced",
        streams: 20,
        events: 2000,
        interval_ms: 0,
    },
    // 200 streams starting together: the time to their first event.
    Workload {
        name: "start",
        streams: 200,
        events: 20,
        interval_ms: 1,
    },
];

struct Settings {
    /// The named load shape, if one was asked for.
    workload: Option<&'static str>,
    pairs: Vec<Pair>,
    events: usize,
    interval: Duration,
    levels: Vec<usize>,
    memory_streams: usize,
    store_rounds: usize,
    proxy_threads: usize,
    timeout: Duration,
    quick: bool,
}

impl Settings {
    fn from_env() -> Result<Self, String> {
        let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let workload = match std::env::var("BENCH_WORKLOAD") {
            Ok(name) => Some(WORKLOADS.iter().find(|w| w.name == name).ok_or_else(|| {
                let names: Vec<_> = WORKLOADS.iter().map(|w| w.name).collect();
                format!("BENCH_WORKLOAD: `{name}` is none of {names:?}")
            })?),
            Err(_) => None,
        };
        let levels = match std::env::var("BENCH_LEVELS") {
            Ok(text) => text
                .split(',')
                .map(|n| {
                    n.trim()
                        .parse::<usize>()
                        .map_err(|e| format!("BENCH_LEVELS: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Err(_) => workload.map_or(vec![1, 100, 1000], |w| vec![w.streams]),
        };
        if levels.contains(&0) {
            return Err("BENCH_LEVELS: 0 streams".into());
        }
        let pairs = match std::env::var("BENCH_PAIRS").as_deref() {
            Ok("all") | Err(_) => Protocol::ALL
                .into_iter()
                .flat_map(|inbound| Protocol::ALL.map(|outbound| Pair { inbound, outbound }))
                .collect(),
            Ok(list) => list
                .split(',')
                .map(|pair| Pair::parse(pair).map_err(|e| format!("BENCH_PAIRS: {e}")))
                .collect::<Result<_, _>>()?,
        };
        let settings = Self {
            workload: workload.map(|w| w.name),
            pairs,
            events: env_number(
                "BENCH_EVENTS",
                workload.map_or(if quick { 20 } else { 100 }, |w| w.events),
            )?,
            interval: Duration::from_millis(env_number(
                "BENCH_INTERVAL_MS",
                workload.map_or(50, |w| w.interval_ms),
            )? as u64),
            levels,
            memory_streams: env_number(
                "BENCH_MEMORY_STREAMS",
                match (workload, quick) {
                    (Some(_), _) => 0,
                    (None, true) => 100,
                    (None, false) => 1000,
                },
            )?,
            store_rounds: env_number("BENCH_STORE_ROUNDS", 5)?.max(1),
            proxy_threads: env_number("BENCH_PROXY_THREADS", workload.map_or(cores, |_| 1))?.max(1),
            timeout: Duration::from_secs(env_number("BENCH_TIMEOUT_S", 600)? as u64),
            quick,
        };
        if settings.events == 0 {
            return Err("BENCH_EVENTS: 0 deltas".into());
        }
        Ok(settings)
    }

    /// How long one step may take: the paced stream plus generous room for connecting and queueing.
    fn step_timeout(&self) -> Duration {
        self.interval * self.events as u32 + Duration::from_secs(60)
    }

    /// Descriptors the largest step holds, with `stores` proxies' steps at once.
    fn most_files(&self, stores: usize) -> u64 {
        let levels = self.levels.iter().copied().max().unwrap_or(1) as u64;
        (FDS_PER_STREAM * levels * stores as u64)
            .max(FDS_PER_MEMORY_STREAM * self.memory_streams as u64)
            + FD_MARGIN
    }
}

// ---------------------------------------------------------------------------------------------------------
// The parent: one process per pair, then the summary

fn main() {
    let settings = match Settings::from_env() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("proxy_latency: {error}");
            std::process::exit(2);
        }
    };
    match std::env::var(PAIR_VAR) {
        Ok(pair) => match Pair::parse(&pair) {
            Ok(pair) => std::process::exit(run_pair(&settings, pair)),
            Err(error) => {
                eprintln!("proxy_latency: {error}");
                std::process::exit(2);
            }
        },
        Err(_) => run_all(&settings),
    }
}

fn run_all(settings: &Settings) {
    let began = Instant::now();
    let mut summaries = Vec::new();
    let mut failed = Vec::new();
    for &pair in &settings.pairs {
        match run_pair_process(pair) {
            Ok(Some(summary)) => summaries.push(summary),
            Ok(None) => failed.push(format!("{}: no summary", pair.title())),
            Err(error) => failed.push(format!("{}: {error}", pair.title())),
        }
    }
    println!();
    println!(
        "Summary{}: {} deltas per stream, one every {:?}; latency and throughput at the largest level; \
         {} pairs in {:.0} s.",
        if settings.quick { " (quick)" } else { "" },
        settings.events,
        settings.interval,
        settings.pairs.len(),
        began.elapsed().as_secs_f64(),
    );
    println!();
    print!("{}", report::summary_table(&summaries));
    println!();
    println!(
        "Through the proxy next to nginx{}, at the largest level:",
        settings
            .workload
            .map_or(String::new(), |w| format!(" (workload `{w}`)"))
    );
    println!();
    print!("{}", report::passthrough_table(&summaries));
    let stores = report::summary_store_table(&summaries);
    if !stores.is_empty() {
        println!();
        println!(
            "The stores side by side at every level: each round runs every store's step at once, each step \
             against that round's first store; the medians of the rounds:"
        );
        println!();
        print!("{stores}");
    }
    if !failed.is_empty() {
        eprintln!();
        for message in &failed {
            eprintln!("proxy_latency: FAILED: {message}");
        }
        std::process::exit(1);
    }
}

/// Runs one pair in a process of its own (this program again, told the pair): its report passes through,
/// its summary line is kept.
fn run_pair_process(pair: Pair) -> Result<Option<serde_json::Value>, String> {
    let program = std::env::current_exe().map_err(|e| format!("this program: {e}"))?;
    let mut child = Command::new(program)
        .args(std::env::args_os().skip(1))
        .env(PAIR_VAR, pair.id())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting its process: {e}"))?;
    let mut summary = None;
    let stdout = child.stdout.take().expect("a piped stdout");
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading its report: {e}"))?;
        match report::parse_summary(&line) {
            Some(found) => summary = Some(found),
            None => println!("{line}"),
        }
    }
    let status = child.wait().map_err(|e| format!("waiting for it: {e}"))?;
    match status.success() {
        // A pair whose streams failed still has its summary, marked so.
        true => Ok(summary),
        false if summary.is_some() => Ok(summary),
        false => Err(format!("its process ended with {status}")),
    }
}

// ---------------------------------------------------------------------------------------------------------
// One pair

/// Measures one pair; the process's exit code.
fn run_pair(settings: &Settings, pair: Pair) -> i32 {
    // Whatever happens, the pair ends.
    let limit = settings.timeout;
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!(
            "proxy_latency: {} reached its limit of {limit:?}; aborting",
            pair.title()
        );
        std::process::exit(3);
    });
    now_ns();
    let stores = match store::BenchStore::all_from_env() {
        Ok(stores) => stores,
        Err(error) => {
            eprintln!("proxy_latency: {error}");
            return 2;
        }
    };
    let open_files = system::raise_open_files(settings.most_files(stores.len()));
    // Before any runtime starts, so that every thread lands where it belongs.
    let placement = system::place(settings.proxy_threads);

    let upstream_rt = runtime(system::UPSTREAM, 1);
    let client_rt = runtime(system::CLIENTS, 1);

    let agent = upstream::Agent::new(pair.outbound, settings.events, settings.interval);
    let upstream = RunningAgent::start(&upstream_rt, agent.clone());
    let upstream_addr = upstream.addr;

    let route = Route {
        path: ROUTE_PATH,
        pair,
        upstream: upstream_addr,
        tables: "",
    };
    let proxies: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(at, store)| {
            let config = rig::proxy_config(std::slice::from_ref(&route), &store.toml);
            let group = system::PROXY_GROUPS[at];
            StoreProxy::start(
                store.name,
                &config,
                group,
                settings.proxy_threads,
                pair.inbound,
            )
        })
        .collect();
    let proxy_workers = &proxies[0].workers;
    let relay_listener = client_rt
        .block_on(async { upstream::listen_local()?.into_std() })
        .expect("binding the relay");
    let relay_addr = relay_listener.local_addr().expect("relay address");
    let http_relay_listener = client_rt
        .block_on(async { upstream::listen_local()?.into_std() })
        .expect("binding the HTTP relay");
    let http_relay_addr = http_relay_listener
        .local_addr()
        .expect("HTTP relay address");
    let mut stop_relays = Vec::new();
    let mut stoppable = || {
        let (stop, stopped) = oneshot::channel();
        stop_relays.push(stop);
        stopped
    };
    proxy_workers
        .serve_each(relay_listener, |listener| {
            relay::serve(listener, upstream_addr, stoppable())
        })
        .expect("serving the relay on the proxy's threads");
    proxy_workers
        .serve_each(http_relay_listener, |listener| {
            relay::serve_http(listener, upstream_addr, stoppable())
        })
        .expect("serving the HTTP relay on the proxy's threads");

    let direct = Target {
        protocol: pair.outbound,
        server: protocols::Server {
            addr: upstream_addr,
            base: "",
        },
    };
    let relayed = Target {
        protocol: pair.outbound,
        server: protocols::Server {
            addr: relay_addr,
            base: "",
        },
    };
    let http_relayed = Target {
        protocol: pair.outbound,
        server: protocols::Server {
            addr: http_relay_addr,
            base: "",
        },
    };
    let nginx = match nginx::Nginx::start(upstream_addr) {
        Ok(nginx) => {
            if let Some(placement) = placement {
                if let Err(error) = system::pin(nginx.pid(), &placement.proxy) {
                    eprintln!("proxy_latency: nginx not pinned: {error}");
                }
            }
            Some(nginx)
        }
        Err(error) => {
            eprintln!("proxy_latency: the nginx path is skipped: {error}");
            None
        }
    };
    let through_nginx = nginx.as_ref().map(|nginx| Target {
        protocol: pair.outbound,
        server: protocols::Server {
            addr: nginx.addr,
            base: "",
        },
    });
    let proxied = proxies[0].target;
    let store_rounds = match proxies.len() {
        1 => 1,
        _ => settings.store_rounds,
    };
    eprintln!(
        "{}{}: {} deltas per stream, {:?} apart; levels {:?}; stores {} ({} rounds); {} memory streams; \
         threads: upstream 1, proxy {}, clients 1{}; open-file limit {}",
        pair.title(),
        if settings.quick { " (quick)" } else { "" },
        settings.events,
        settings.interval,
        settings.levels,
        stores.iter().map(|store| store.name).collect::<Vec<_>>().join(", "),
        store_rounds,
        settings.memory_streams,
        settings.proxy_threads,
        placement.map_or(String::new(), |p| format!(
            " (proxy and nginx on cores {:?}, the rest on {:?})",
            p.proxy, p.others
        )),
        open_files.map_or("unknown".to_owned(), |n| n.to_string()),
    );

    let mut failed = Vec::new();
    // The stores' steps run at once: as many streams through each.
    let enough_files = |streams: usize, failed: &mut Vec<String>| {
        let need = FDS_PER_STREAM * (streams * proxies.len()) as u64 + FD_MARGIN;
        let limit = open_files.filter(|&limit| limit < need);
        if let Some(limit) = limit {
            let message = format!(
                "{streams} streams skipped: they need about {need} open files but the limit is {limit}; \
                 run `ulimit -n {need}` (or raise the hard limit) and rerun"
            );
            eprintln!("proxy_latency: {message}");
            failed.push(message);
        }
        limit.is_none()
    };
    let timeout = settings.step_timeout();

    // Warm-up, not reported: code paths, allocator, the proxy's connection pool.
    client_rt.block_on(async {
        let through = proxies.iter().map(|proxy| proxy.target);
        let paths = [direct, relayed, http_relayed]
            .into_iter()
            .chain(through_nginx);
        for target in paths.chain(through) {
            let _ = load::step(target, 10, settings.events, timeout, ON_PROXY_THREADS).await;
        }
    });

    // As many memory streams as asked for, or as the open-file limit allows: the measure is per stream.
    let memory_streams = open_files.map_or(settings.memory_streams, |limit| {
        let fit = limit.saturating_sub(FD_MARGIN) / FDS_PER_MEMORY_STREAM;
        settings.memory_streams.min(fit as usize)
    });
    if memory_streams < settings.memory_streams {
        eprintln!(
            "proxy_latency: the memory step holds {memory_streams} streams, not {}: the open-file limit is \
             {}",
            settings.memory_streams,
            open_files.unwrap_or_default()
        );
    }
    let memory = (memory_streams > 0).then(|| {
        let m = client_rt.block_on(load::memory_step(
            [direct, http_relayed, proxied],
            &agent,
            memory_streams,
            timeout,
        ));
        if let Some(error) = m.errors.first() {
            failed.push(format!(
                "memory step: {} errors; first: {error}",
                m.errors.len()
            ));
        }
        eprintln!("  {}", report::memory_line(&m));
        m
    });

    let mut results = Vec::new();
    for &streams in &settings.levels {
        if !enough_files(streams, &mut failed) {
            continue;
        }
        eprintln!("{streams} concurrent streams:");
        let level = client_rt.block_on(async {
            let step = |label: String, target, proxy| async move {
                let result = load::step(target, streams, settings.events, timeout, proxy).await;
                report::describe(&label, &result);
                tokio::time::sleep(Duration::from_millis(300)).await;
                result
            };
            let direct = step("direct".into(), direct, ON_PROXY_THREADS).await;
            let relay = step("relay".into(), relayed, ON_PROXY_THREADS).await;
            let http_relay = step("HTTP relay".into(), http_relayed, ON_PROXY_THREADS).await;
            let nginx = match (through_nginx, &nginx) {
                (Some(target), Some(nginx)) => {
                    Some(step("nginx".into(), target, ProxiedBy::Process(nginx.pid())).await)
                }
                _ => None,
            };
            let mut proxied = Vec::new();
            let proxies = &proxies;
            for round in 1..=store_rounds {
                // The stores' streams run at once, so that the machine's moods fall on each alike (the agent
                // gives each run its own phase: their deltas do not share wake-ups). Each round starts them
                // in another order (the first in `BENCH_STORE`'s), as the order can cost one more than
                // another.
                let order = (0..proxies.len()).map(|at| (at + round - 1) % proxies.len());
                let steps = order.map(|at| async move {
                    let proxy = &proxies[at];
                    let result = load::step(
                        proxy.target,
                        streams,
                        settings.events,
                        timeout,
                        ProxiedBy::Threads(proxy.group),
                    )
                    .await;
                    (at, result)
                });
                let mut round_results = futures_util::future::join_all(steps).await;
                round_results.sort_by_key(|(at, _)| *at);
                for (at, result) in round_results {
                    let store = proxies[at].store;
                    let label = match store_rounds {
                        1 => store.to_string(),
                        _ => format!("{store} ({round})"),
                    };
                    report::describe(&label, &result);
                    proxied.push((store, result));
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Level {
                direct,
                relay,
                http_relay,
                nginx,
                proxied,
            }
        });
        for (label, r) in level.labelled() {
            if let Some(error) = r.errors.first() {
                failed.push(format!(
                    "{streams} streams {label}: {} of {} failed; first: {error}",
                    r.errors.len(),
                    r.streams,
                ));
            }
        }
        results.push(level);
    }

    println!();
    println!(
        "{} through agent-bridge vs a {} client straight to the {} agent; {} deltas per stream, one every \
         {:?}; each stream its own HTTP/1.1 connection(s).",
        pair.title(),
        pair.outbound.name(),
        pair.outbound.name(),
        settings.events,
        settings.interval
    );
    println!();
    print!("{}", report::table(&results));
    if results.iter().any(|level| level.direct.cpu.is_some()) {
        println!();
        print!("{}", report::cpu_table(&results));
    }
    let stores_side_by_side = report::store_table(&results);
    if !stores_side_by_side.is_empty() {
        println!();
        print!("{stores_side_by_side}");
    }
    if let Some(memory) = &memory {
        println!();
        println!("{}", report::memory_line(memory));
    }
    println!(
        "{}",
        report::summary_line(&pair.id(), &results, memory.as_ref(), failed.len())
    );

    // Clean shutdown: the proxy and the relay first (they hold connections to the upstream), then the
    // upstream.
    for stop in stop_relays {
        let _ = stop.send(());
    }
    for proxy in proxies {
        let _ = client_rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), proxy.serving.stop()).await
        });
    }
    drop(nginx);
    upstream_rt.block_on(upstream.stop());
    client_rt.shutdown_timeout(Duration::from_secs(1));
    upstream_rt.shutdown_timeout(Duration::from_secs(1));

    for message in &failed {
        eprintln!("proxy_latency: {}: FAILED: {message}", pair.title());
    }
    i32::from(!failed.is_empty())
}

/// agent-bridge on one store, serving on threads of its own (runtime group `group`; the relays share the
/// first store's). It is bound as `agent-bridge` binds: what binding spawns (a Redis connection's driver)
/// runs on a runtime of its own, as on `agent-bridge`'s main thread, whose thread is counted as the
/// proxy's too.
struct StoreProxy {
    store: &'static str,
    group: usize,
    target: Target,
    serving: Serving,
    workers: Workers,
    _binding: tokio::runtime::Runtime,
}

impl StoreProxy {
    fn start(
        store: &'static str,
        config: &Config,
        group: usize,
        threads: usize,
        inbound: Protocol,
    ) -> Self {
        let workers = rig::proxy_workers(group, threads);
        let binding = runtime(group, 1);
        let (serving, addr) = rig::serve_proxy(&binding, config, &workers);
        let target = Target {
            protocol: inbound,
            server: protocols::Server {
                addr,
                base: ROUTE_PATH,
            },
        };
        Self {
            store,
            group,
            target,
            serving,
            workers,
            _binding: binding,
        }
    }
}
