//! A soak run (documented in benches/SOAK.md, not in CI): does agent-bridge hold its memory and descriptors
//! flat under hours' worth of traffic squeezed into minutes?
//!
//! The proxy is the `agent-bridge` binary in a process of its own ([`Proxy`]), serving a routes file as its
//! users run it, so that its RSS and descriptors are its own. This process holds the scripted agents
//! ([`upstream`]) and the clients. The proxy has two routes per pair of protocols: `/long/<pair>` to an agent
//! whose runs stream `SOAK_EVENTS` deltas `SOAK_INTERVAL_MS` apart, and `/short/<pair>` to one whose runs
//! stream a single delta at once. The default pairs cover every protocol once inbound and once outbound.
//!
//! 1. Short requests (`SOAK_REQUESTS`, default 100,000, twice): `SHORT_CONCURRENCY` clients at a time,
//!    each making one request after another across the pairs' short routes: one-delta runs, and every
//!    `REFUSAL_EVERY`th one a body that is not JSON, which the proxy must refuse with 400. The proxy's RSS
//!    and open descriptors are read after a first batch (the warm-up) and a settle, and again after a second
//!    batch as large and a settle: the RSS must come back within [`RSS_MARGIN`] of before, the descriptors
//!    to before (within [`FD_SLACK`]).
//! 2. Streams (`SOAK_STREAMS`, default 1,000, for `SOAK_MINUTES`, default 15): that many clients keep a
//!    run open at all times, spread over the pairs' long routes: each opens a run, reads it to its end and
//!    opens the next (about 5 s a run at the defaults, so the streams are replaced all the time). Every
//!    `SAMPLE_EVERY` one line: elapsed time, runs completed, errors, the proxy's RSS and open descriptors.
//!    After the warm-up ([`WARM_UP`], 5 minutes) both must stay flat: max / min ≤ [`FLAT`].
//!
//! The short requests come first so that the long phase's idle pooled connections, which the proxy's
//! upstream client keeps for 90 s after the last stream, do not expire in the middle of the short phase and
//! hide growth there. (The short phase's own few idle connections expire early in the long phase, where
//! they move the readings by far less than the 10 % allowed.)
//!
//! Each run here is a conversation of its own, and the proxy keeps some state per conversation by design,
//! bounded by its configuration. The soak configures those bounds so that they are reached within the
//! warm-ups, and what it then measures is everything else:
//! - the conversation store keeps a conversation for `store.idle_ttl` (24 h by default): the soak sets
//!   `idle_ttl = "1s"`, so the store holds the last seconds' conversations and its expiry is soaked too. It
//!   drops expired records when it saves one, so each reading of the short phase follows a settle and one
//!   small batch of requests;
//! - an A2A inbound keeps each task for a day, up to 10,000: the soak's A2A routes keep 1,000 (`[routes.quota]
//!   tasks`; the least recently used finished task makes room);
//! - a CMDC inbound keeps each session until its client deletes it (or for a day, up to 10,000, beyond which
//!   new sessions are refused): the soak's CMDC clients delete theirs after each run, as a tidy client does.
//!
//! Exits non-zero, saying why, when more than [`MAX_ERROR_RATE`] of the runs or requests of a phase failed,
//! or a flatness or no-growth check failed.
//!
//! Run: `cargo bench --bench soak`. Environment: `SOAK_STREAMS`, `SOAK_MINUTES`, `SOAK_REQUESTS`,
//! `SOAK_EVENTS` (default 100), `SOAK_INTERVAL_MS` (default 50), `SOAK_PAIRS` (default
//! `ag-ui>a2a,a2a>agentscope,agentscope>cmdc,cmdc>ag-kit,ag-kit>ag-ui`), `SOAK_PROXY_THREADS` (the proxy's
//! `--threads`; default: all cores). The open-file limit is raised as far as the hard limit allows; the
//! proxy inherits it.

#[path = "proxy_latency/load.rs"]
#[allow(dead_code)] // The per-step statistics and the memory step are proxy_latency's.
mod load;
#[path = "proxy_latency/protocols.rs"]
mod protocols;
#[path = "proxy_latency/rig.rs"]
#[allow(dead_code)] // `Pair::title` and serving the proxy in-process are proxy_latency's.
mod rig;
#[path = "proxy_latency/system.rs"]
#[allow(dead_code)] // CPU, allocation, memory and accept-queue readings are proxy_latency's.
mod system;
#[path = "proxy_latency/upstream.rs"]
#[allow(dead_code)] // Holding runs mid-stream is proxy_latency's memory step.
mod upstream;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use load::Target;
use protocols::{Peer, Protocol, Server};
use rig::{env_number, runtime, Pair, Route, RunningAgent};

const DEFAULT_PAIRS: &str = "ag-ui>a2a,a2a>agentscope,agentscope>cmdc,cmdc>ag-kit,ag-kit>ag-ui";

/// The conversation store's `idle_ttl` for the soak (see the header).
const STORE: &str = "[store]\nidle_ttl = \"1s\"\n";
/// The tasks an A2A inbound route keeps in the soak (see the header).
const A2A_TASKS: &str = "[routes.quota]\ntasks = 1000\n";

/// How often the long phase is sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// The start of the long phase not judged (capped at half the phase for short runs). Long enough for every
/// pooled upstream connection to have carried more than 32 runs: hyper's request queue of a connection
/// takes its second block of 32 slots (some 10 KiB) at the 33rd request and reuses its two blocks from then
/// on; at the defaults (1,000 runs of 5 s, as many connections) that is some 3 to 4 minutes in.
const WARM_UP: Duration = Duration::from_secs(5 * 60);
/// RSS and descriptors after the warm-up: max / min at most this.
const FLAT: f64 = 1.10;

/// Short requests in flight at once.
const SHORT_CONCURRENCY: usize = 50;
/// Every this many short requests of a pair, one is a malformed body.
const REFUSAL_EVERY: usize = 10;
/// Time for connections closed at the end of a phase to be gone, for the store's records to expire, and for
/// the allocator to give back what was freed (jemalloc returns unused pages over 10 s), before a reading.
const SETTLE: Duration = Duration::from_secs(15);
/// How far the proxy's RSS may end above its "before" reading: the larger of a fraction of it and a fixed
/// amount (pooled connections and the allocator's caches come and go).
const RSS_MARGIN: (f64, u64) = (0.05, 1 << 20);
/// How many more descriptors than before the proxy may end the short phase with: the pools keep idle
/// connections, and how many depends on how many requests happened to be in flight together, never on how
/// many were made: at most one per request in flight from each side (the clients' pool to the proxy, the
/// proxy's pool to the agents).
const FD_SLACK: u64 = 2 * SHORT_CONCURRENCY as u64;

/// The share of runs or requests of a phase that may fail.
const MAX_ERROR_RATE: f64 = 0.001;

/// Descriptors one long stream holds at most in either process: CMDC through the proxy (two connections
/// from its client, two to the agent), with room to spare.
const FDS_PER_STREAM: u64 = 8;
/// Descriptors for everything else, idle pooled connections first.
const FD_MARGIN: u64 = 4096;

struct Settings {
    pairs: Vec<Pair>,
    streams: usize,
    duration: Duration,
    requests: usize,
    events: usize,
    interval: Duration,
    proxy_threads: usize,
}

impl Settings {
    fn from_env() -> Result<Self, String> {
        let pairs = std::env::var("SOAK_PAIRS").unwrap_or_else(|_| DEFAULT_PAIRS.to_owned());
        let pairs = pairs
            .split(',')
            .map(|pair| Pair::parse(pair).map_err(|e| format!("SOAK_PAIRS: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let settings = Settings {
            pairs,
            streams: env_number("SOAK_STREAMS", 1_000)?,
            duration: Duration::from_secs(60 * env_number("SOAK_MINUTES", 15)? as u64),
            requests: env_number("SOAK_REQUESTS", 100_000)?,
            events: env_number("SOAK_EVENTS", 100)?,
            interval: Duration::from_millis(env_number("SOAK_INTERVAL_MS", 50)? as u64),
            proxy_threads: env_number("SOAK_PROXY_THREADS", cores)?.max(1),
        };
        if settings.events == 0 {
            return Err("SOAK_EVENTS: 0 deltas".into());
        }
        Ok(settings)
    }

    fn warm_up(&self) -> Duration {
        WARM_UP.min(self.duration / 2)
    }

    /// How long one long run may take before it counts as failed.
    fn run_limit(&self) -> Duration {
        self.interval * self.events as u32 + Duration::from_secs(60)
    }
}

/// One pair's two routes on the proxy.
#[derive(Clone, Copy)]
struct Lane {
    pair: Pair,
    long: Target,
    short: Target,
}

fn main() {
    let settings = match Settings::from_env() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("soak: {error}");
            std::process::exit(2);
        }
    };
    rig::now_ns();
    let want_files = FDS_PER_STREAM * settings.streams as u64 + FD_MARGIN;
    let open_files = system::raise_open_files(want_files);

    let upstream_rt = runtime(system::UPSTREAM, 1);
    let client_rt = runtime(system::CLIENTS, 1);

    let mut agents = Vec::new();
    let mut routes = Vec::new();
    for &pair in &settings.pairs {
        let protocol = pair.outbound;
        let long = upstream::Agent::new(protocol, settings.events, settings.interval);
        // A 1 ms interval: the single delta's phase within it is the only wait.
        let short = upstream::Agent::new(protocol, 1, Duration::from_millis(1));
        for (kind, agent) in [("long", long), ("short", short)] {
            let agent = RunningAgent::start(&upstream_rt, agent);
            routes.push(Route {
                path: route_path(kind, pair),
                pair,
                upstream: agent.addr,
                tables: if pair.inbound == Protocol::A2a {
                    A2A_TASKS
                } else {
                    ""
                },
            });
            agents.push(agent);
        }
    }
    let proxy = Proxy::start(&rig::proxy_toml(&routes, STORE), settings.proxy_threads);
    let proxy_addr = proxy.addr;
    let target = |route: &Route| Target {
        protocol: route.pair.inbound,
        server: Server {
            addr: proxy_addr,
            base: route.path,
        },
    };
    let lanes: Vec<Lane> = routes
        .chunks(2)
        .map(|long_and_short| Lane {
            pair: long_and_short[0].pair,
            long: target(&long_and_short[0]),
            short: target(&long_and_short[1]),
        })
        .collect();

    println!(
        "soak: pairs {}; {} short requests ({SHORT_CONCURRENCY} at a time, every {REFUSAL_EVERY}th \
         malformed), then {} streams for {:?} ({} deltas {:?} apart per run); proxy threads {}; \
         open-file limit {} (want {want_files})",
        lanes
            .iter()
            .map(|lane| lane.pair.id())
            .collect::<Vec<_>>()
            .join(", "),
        settings.requests,
        settings.streams,
        settings.duration,
        settings.events,
        settings.interval,
        settings.proxy_threads,
        open_files.map_or("unknown".to_owned(), |n| n.to_string()),
    );

    let mut failures = Vec::new();
    client_rt.block_on(async {
        failures.extend(short_phase(&lanes, settings.requests).await);
        failures.extend(long_phase(&lanes, &settings).await);
    });
    drop(proxy);

    println!();
    if failures.is_empty() {
        println!("soak: PASSED");
    } else {
        for failure in &failures {
            println!("soak: FAILED: {failure}");
        }
        std::process::exit(1);
    }
}

/// A route's path; leaked because the clients' [`Server`] takes a `'static` base (a few, once).
fn route_path(kind: &str, pair: Pair) -> &'static str {
    let path = format!("/{kind}/{}-{}", pair.inbound.name(), pair.outbound.name());
    Box::leak(path.into_boxed_str())
}

// ---------------------------------------------------------------------------------------------------------
// The proxy: the `agent-bridge` binary, in a process of its own

/// The proxy's process id, for [`Usage::now`].
static PROXY_PID: OnceLock<u32> = OnceLock::new();

/// `agent-bridge` serving a routes file, as its users run it; killed on drop.
struct Proxy {
    process: Child,
    addr: SocketAddr,
    /// The routes file, removed on drop.
    config: std::path::PathBuf,
}

impl Proxy {
    /// Starts the binary on `routes` with `threads` serving threads; waits up to 10 s for the address it
    /// logs once it listens. Its log is read and dropped, so that it never blocks on a full pipe.
    fn start(routes: &str, threads: usize) -> Proxy {
        let config =
            std::env::temp_dir().join(format!("agent-bridge-soak-{}.toml", std::process::id()));
        std::fs::write(&config, routes).expect("writing the soak's routes file");
        let mut process = Command::new(env!("CARGO_BIN_EXE_agent-bridge"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--threads",
                &threads.to_string(),
                "--config",
            ])
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting agent-bridge");
        let stderr = process.stderr.take().expect("its standard error");
        let (found, address) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some((_, rest)) = line.split_once("listening on http://") {
                    let addr = rest.split_whitespace().next().and_then(|a| a.parse().ok());
                    let _ = found.send(addr);
                }
            }
        });
        let addr = address
            .recv_timeout(Duration::from_secs(10))
            .ok()
            .flatten()
            .expect("agent-bridge logs the address it listens on within 10 s");
        let _ = PROXY_PID.set(process.id());
        Proxy {
            process,
            addr,
            config,
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        let _ = std::fs::remove_file(&self.config);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Counting outcomes

/// Runs or requests of one phase: how many ended, how many of them failed, and the first failure.
#[derive(Default)]
struct Tally {
    ended: AtomicUsize,
    failed: AtomicUsize,
    first_failure: Mutex<Option<String>>,
}

impl Tally {
    fn record(&self, outcome: Result<(), String>) {
        self.ended.fetch_add(1, Ordering::Relaxed);
        if let Err(error) = outcome {
            self.failed.fetch_add(1, Ordering::Relaxed);
            let mut first = self.first_failure.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert(error);
        }
    }

    fn ended(&self) -> usize {
        self.ended.load(Ordering::Relaxed)
    }

    fn failed(&self) -> usize {
        self.failed.load(Ordering::Relaxed)
    }

    /// A failure message if more than [`MAX_ERROR_RATE`] failed.
    fn check(&self, what: &str) -> Option<String> {
        let (ended, failed) = (self.ended(), self.failed());
        let first = self.first_failure.lock().unwrap_or_else(|e| e.into_inner());
        (failed as f64 > MAX_ERROR_RATE * ended as f64).then(|| {
            format!(
                "{what}: {failed} of {ended} failed (more than {}%); first: {}",
                MAX_ERROR_RATE * 100.0,
                first.as_deref().unwrap_or("-")
            )
        })
    }
}

/// A distinct number for every run, for its ids.
fn next_run() -> usize {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    RUNS.fetch_add(1, Ordering::Relaxed)
}

// ---------------------------------------------------------------------------------------------------------
// What the process holds

/// The proxy's process at one moment.
#[derive(Clone, Copy)]
struct Usage {
    rss: u64,
    fds: u64,
}

impl Usage {
    fn now() -> Usage {
        let pid = PROXY_PID.get().copied().unwrap_or(0);
        Usage {
            rss: system::process_rss(pid).unwrap_or(0),
            fds: open_descriptors(pid),
        }
    }
}

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RSS {:7.1} MiB  fds {:5}",
            mib(self.rss as i64),
            self.fds
        )
    }
}

fn mib(bytes: i64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// Descriptors process `pid` has open (0 where `/proc` does not tell).
fn open_descriptors(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |entries| entries.count() as u64)
}

// ---------------------------------------------------------------------------------------------------------
// Short requests

/// `requests` short requests, then whether the proxy's heap and the descriptors came back; the failures.
async fn short_phase(lanes: &[Lane], requests: usize) -> Vec<String> {
    println!();
    println!("Short requests: a warm-up of {requests}, then {requests} more");
    // What a batch of this size leaves behind for good (pools and tables at their size, the A2A task
    // registry full, the allocator's caches) is there before the first reading; the second batch, the
    // same again, must then add nothing.
    short_requests(lanes, requests).await;
    let before = settled_usage(lanes).await;
    println!("  before          {before}");
    let began = Instant::now();
    let tally = short_requests(lanes, requests).await;
    let wall = began.elapsed();
    println!("  right after     {}", Usage::now());
    let settled = settled_usage(lanes).await;
    println!("  after           {settled}");
    println!(
        "  {} requests in {:.0} s ({:.0}/s), {} failed; RSS {:+.1} MiB, fds {:+}",
        tally.ended(),
        wall.as_secs_f64(),
        tally.ended() as f64 / wall.as_secs_f64(),
        tally.failed(),
        mib(settled.rss as i64 - before.rss as i64),
        settled.fds as i64 - before.fds as i64,
    );
    let mut failures: Vec<String> = tally.check("short requests").into_iter().collect();
    let rss_margin = RSS_MARGIN.1.max((RSS_MARGIN.0 * before.rss as f64) as u64);
    if settled.rss > before.rss + rss_margin {
        failures.push(format!(
            "short requests: the proxy's RSS grew from {:.1} to {:.1} MiB (more than {:.1} MiB)",
            mib(before.rss as i64),
            mib(settled.rss as i64),
            mib(rss_margin as i64),
        ));
    }
    if settled.fds > before.fds + FD_SLACK {
        failures.push(format!(
            "short requests: open descriptors grew from {} to {}",
            before.fds, settled.fds
        ));
    }
    failures
}

/// The process after a [`SETTLE`] and one request per client: the store saves, and so drops the records
/// expired meanwhile.
async fn settled_usage(lanes: &[Lane]) -> Usage {
    tokio::time::sleep(SETTLE).await;
    short_requests(lanes, SHORT_CONCURRENCY).await;
    Usage::now()
}

/// Makes `count` short requests, [`SHORT_CONCURRENCY`] at a time.
async fn short_requests(lanes: &[Lane], count: usize) -> Arc<Tally> {
    let tally = Arc::new(Tally::default());
    let next = Arc::new(AtomicUsize::new(0));
    let mut clients = JoinSet::new();
    for _ in 0..SHORT_CONCURRENCY {
        let (lanes, tally, next) = (lanes.to_vec(), Arc::clone(&tally), Arc::clone(&next));
        clients.spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= count {
                    break;
                }
                tally.record(short_request(&lanes, k).await);
            }
        });
    }
    while clients.join_next().await.is_some() {}
    tally
}

/// Request `k`: round-robin over the pairs; each pair's every [`REFUSAL_EVERY`]th is malformed.
async fn short_request(lanes: &[Lane], k: usize) -> Result<(), String> {
    let lane = lanes[k % lanes.len()];
    let limit = Duration::from_secs(30);
    let request = async {
        if (k / lanes.len()) % REFUSAL_EVERY == REFUSAL_EVERY - 1 {
            lane.short.protocol.send_malformed(lane.short.server).await
        } else {
            load::run(lane.short, next_run(), 1).await
        }
    };
    let outcome = tokio::time::timeout(limit, request).await;
    let outcome = outcome.unwrap_or_else(|_| Err(format!("no answer within {limit:?}")));
    outcome.map_err(|error| format!("{}: {error}", lane.pair.id()))
}

// ---------------------------------------------------------------------------------------------------------
// Long streams

/// One sample of the long phase.
struct Sample {
    at: Duration,
    runs: usize,
    failed: usize,
    usage: Usage,
}

/// Keeps `settings.streams` runs open for `settings.duration`, sampling; the failures.
async fn long_phase(lanes: &[Lane], settings: &Settings) -> Vec<String> {
    println!();
    println!(
        "Streams: {} open at all times for {:?}; warm-up {:?}; a sample every {SAMPLE_EVERY:?}",
        settings.streams,
        settings.duration,
        settings.warm_up()
    );
    println!("  {:>5}  {:>8}  {:>6}  usage", "at s", "runs", "failed");
    let began = Instant::now();
    let until = began + settings.duration;
    let tally = Arc::new(Tally::default());
    let mut clients = JoinSet::new();
    for n in 0..settings.streams {
        let lane = lanes[n % lanes.len()];
        let tally = Arc::clone(&tally);
        let (events, limit) = (settings.events, settings.run_limit());
        clients.spawn(async move {
            while Instant::now() < until {
                tally.record(long_run(lane, events, limit).await);
            }
        });
    }
    let mut samples = Vec::new();
    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                let sample = Sample {
                    at: began.elapsed(),
                    runs: tally.ended(),
                    failed: tally.failed(),
                    usage: Usage::now(),
                };
                println!(
                    "  {:>5.0}  {:>8}  {:>6}  {}",
                    sample.at.as_secs_f64(),
                    sample.runs,
                    sample.failed,
                    sample.usage
                );
                samples.push(sample);
            }
            ended = clients.join_next() => if ended.is_none() { break },
        }
    }
    println!(
        "  {} runs ended ({} failed) in {:.0} s",
        tally.ended(),
        tally.failed(),
        began.elapsed().as_secs_f64()
    );
    let mut failures: Vec<String> = tally.check("streams").into_iter().collect();
    // Judged: the samples after the warm-up while every client was still streaming.
    let judged: Vec<Usage> = samples
        .iter()
        .filter(|s| s.at >= settings.warm_up() && s.at <= settings.duration)
        .map(|s| s.usage)
        .collect();
    if judged.len() < 2 {
        failures.push("streams: fewer than two samples after the warm-up".into());
        return failures;
    }
    println!("  after the warm-up ({} samples):", judged.len());
    let rss: Vec<i64> = judged.iter().map(|u| u.rss as i64).collect();
    let fds: Vec<i64> = judged.iter().map(|u| u.fds as i64).collect();
    failures.extend(flat("RSS", &rss, |b| format!("{:.1} MiB", mib(b))));
    failures.extend(flat("fds", &fds, |n| n.to_string()));
    failures
}

/// One run through a long route, read to its end within `limit`.
async fn long_run(lane: Lane, events: usize, limit: Duration) -> Result<(), String> {
    let outcome = tokio::time::timeout(limit, load::run(lane.long, next_run(), events)).await;
    let outcome = outcome.unwrap_or_else(|_| Err(format!("run not over within {limit:?}")));
    outcome.map_err(|error| format!("{}: {error}", lane.pair.id()))
}

/// Prints the min and max of `values` and whether max / min ≤ [`FLAT`]; a failure message if not.
fn flat(what: &str, values: &[i64], show: impl Fn(i64) -> String) -> Option<String> {
    let min = values.iter().copied().min().unwrap_or(0);
    let max = values.iter().copied().max().unwrap_or(0);
    let ratio = max as f64 / min.max(1) as f64;
    let verdict = if ratio <= FLAT { "flat" } else { "NOT FLAT" };
    println!(
        "    {what:<10} min {:>10}  max {:>10}  max/min {ratio:.3}  {verdict} (≤ {FLAT})",
        show(min),
        show(max),
    );
    (ratio > FLAT).then(|| {
        format!(
            "streams: {what} not flat after the warm-up: {} to {} (max/min {ratio:.3} > {FLAT})",
            show(min),
            show(max)
        )
    })
}
