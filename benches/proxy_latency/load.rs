//! The load: concurrent client streams of one protocol against one server (the scripted agent directly, the
//! relay, or the proxy), and what they saw; and the memory step, streams held open mid-run.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::protocols::{Peer, Protocol, Server};
use crate::rig::now_ns;
use crate::system;
use crate::upstream::Agent;

/// Who the streams talk to, in which protocol.
#[derive(Clone, Copy)]
pub struct Target {
    pub protocol: Protocol,
    pub server: Server,
}

/// Finds the `@<ns>;` stamps in a byte stream cut anywhere. Each stamp is reported once, in order: a
/// protocol that repeats the whole text at the end (AgentScope's completed message, say) repeats stamps
/// already seen, and those are never newer than the last one.
#[derive(Default)]
pub struct StampScanner {
    /// The start of a stamp cut off at the end of the last chunk.
    partial: Vec<u8>,
    last: u64,
}

/// Longer than any stamp (`@` and 20 digits): a longer run of digits is no stamp.
const MAX_STAMP: usize = 21;

impl StampScanner {
    pub fn scan(&mut self, chunk: &[u8], mut found: impl FnMut(u64)) {
        let joined;
        let mut rest = if self.partial.is_empty() {
            chunk
        } else {
            joined = [std::mem::take(&mut self.partial).as_slice(), chunk].concat();
            &joined
        };
        while let Some(at) = memchr::memchr(b'@', rest) {
            let after = &rest[at + 1..];
            let digits = after.iter().take_while(|b| b.is_ascii_digit()).count();
            if digits == after.len() {
                if digits < MAX_STAMP {
                    self.partial = rest[at..].to_vec();
                }
                return;
            }
            if after[digits] == b';' {
                let stamp = std::str::from_utf8(&after[..digits])
                    .ok()
                    .and_then(|d| d.parse().ok());
                if let Some(stamp) = stamp.filter(|&stamp| stamp > self.last) {
                    self.last = stamp;
                    found(stamp);
                }
            }
            rest = &after[digits..];
        }
    }
}

/// What one client stream saw.
struct StreamStats {
    first_event_ns: u64,
    /// When its first delta arrived (the clock of the stamps).
    first_delta_at_ns: u64,
    /// Each delta's send stamp and latency.
    deltas: Vec<(u64, u64)>,
}

/// How much of a failed stream's end is shown.
const TAIL: usize = 300;

/// One run, read to its end; `opened` is told when its first delta arrived.
async fn one_stream(
    target: Target,
    n: usize,
    expected: usize,
    mut opened: Option<mpsc::UnboundedSender<()>>,
) -> Result<StreamStats, String> {
    let started = now_ns();
    let mut run = target.protocol.open(target.server, n).await?;
    let mut scanner = StampScanner::default();
    let mut stats = StreamStats {
        first_event_ns: 0,
        first_delta_at_ns: 0,
        deltas: Vec::with_capacity(expected),
    };
    let mut tail = Vec::new();
    while let Some(frame) = run.body.frame().await {
        let frame = frame.map_err(|e| format!("reading the stream: {e}"))?;
        let Some(chunk) = frame.data_ref() else {
            continue;
        };
        let received = now_ns();
        if stats.first_event_ns == 0 {
            stats.first_event_ns = received.saturating_sub(started);
        }
        scanner.scan(chunk, |sent| {
            stats.deltas.push((sent, received.saturating_sub(sent)))
        });
        if !stats.deltas.is_empty() && stats.first_delta_at_ns == 0 {
            stats.first_delta_at_ns = received;
            if let Some(opened) = opened.take() {
                let _ = opened.send(());
            }
        }
        tail.extend_from_slice(chunk);
        tail.drain(..tail.len().saturating_sub(TAIL));
    }
    if stats.deltas.len() != expected {
        return Err(format!(
            "incomplete run: {} of {expected} deltas; the stream ended with: {}",
            stats.deltas.len(),
            String::from_utf8_lossy(&tail)
        ));
    }
    run.finish().await?;
    Ok(stats)
}

/// One run of `events` deltas (run `n`: its ids), read to its end.
#[allow(dead_code)] // benches/soak.rs's
pub async fn run(target: Target, n: usize, events: usize) -> Result<(), String> {
    one_stream(target, n, events, None).await.map(drop)
}

/// One level of concurrency: the same load straight to the agent, through the bare relay, through the HTTP
/// relay, through nginx, through the proxy (once per store, in `BENCH_STORE`'s order, round after round).
pub struct Level {
    pub direct: StepResult,
    pub relay: StepResult,
    pub http_relay: StepResult,
    /// Through nginx, where it is installed.
    pub nginx: Option<StepResult>,
    /// Through the proxy: one step per store in `BENCH_STORE`'s order, and with several stores that order
    /// again for each further round.
    pub proxied: Vec<(&'static str, StepResult)>,
}

impl Level {
    /// Through the proxy on the first store.
    pub fn proxy(&self) -> &StepResult {
        &self.proxied[0].1
    }

    /// The proxy's steps round by round, each round one step per store.
    pub fn store_rounds(&self) -> std::slice::Chunks<'_, (&'static str, StepResult)> {
        let first = self.proxied[0].0;
        let stores = self.proxied[1..]
            .iter()
            .position(|(store, _)| *store == first)
            .map_or(self.proxied.len(), |at| at + 1);
        self.proxied.chunks(stores)
    }

    pub fn labelled(&self) -> Vec<(String, &StepResult)> {
        let stores = self.store_rounds().next().map_or(1, <[_]>::len);
        let rounds = self.proxied.len() / stores;
        let through = |at: usize, store: &str| match (stores, rounds) {
            (1, 1) => "through the proxy".to_owned(),
            (_, 1) => format!("through the proxy, {store}"),
            _ => format!("through the proxy, {store} ({})", at / stores + 1),
        };
        [
            ("direct".to_owned(), &self.direct),
            ("relay".to_owned(), &self.relay),
            ("HTTP relay".to_owned(), &self.http_relay),
        ]
        .into_iter()
        .chain(self.nginx.iter().map(|r| ("nginx".to_owned(), r)))
        .chain(
            self.proxied
                .iter()
                .enumerate()
                .map(|(at, (store, r))| (through(at, store), r)),
        )
        .collect()
    }
}

/// One step: `streams` concurrent runs, all started at once.
pub struct StepResult {
    pub streams: usize,
    pub ok: usize,
    pub errors: Vec<String>,
    pub first_event_ns: Vec<u64>,
    pub latencies_ns: Vec<u64>,
    /// The latencies of the deltas sent once every stream had its first delta: the step without its
    /// start-up burst (all its streams connecting and starting runs at once).
    pub steady_latencies_ns: Vec<u64>,
    /// Deltas received.
    pub events: usize,
    pub wall: Duration,
    /// CPU time each runtime's threads used during the step, where the OS tells: the upstream's, the
    /// proxy's under test, the clients' ([`system::reported`]).
    pub cpu: Option<[Duration; 3]>,
    /// How often each runtime's threads went to sleep during the step (the same three).
    pub sleeps: Option<[u64; 3]>,
    /// Allocations each runtime made during the step (the same three).
    pub allocations: [u64; 3],
    /// Connections the kernel dropped because a listener's accept queue was full (Linux `ListenOverflows`);
    /// each costs its client a SYN retransmission, about 1 s.
    pub listen_overflows: Option<u64>,
    /// CPU time other processes on the machine used during the step: the contention measured.
    pub others_cpu: Option<Duration>,
    /// The most the proxy's memory grew during the step, in bytes: the live heap of the proxy's threads, or
    /// the RSS of the process that proxies ([`ProxiedBy::Process`]: nginx), sampled every 10 ms.
    pub memory_peak: Option<i64>,
}

/// Where a step reads the proxy's CPU and memory: the threads of runtime group `n` of
/// [`system::RUNTIMES`] (agent-bridge, the relays), or another program's process (nginx).
#[derive(Clone, Copy)]
pub enum ProxiedBy {
    Threads(usize),
    Process(u32),
}

/// One step: `streams` concurrent runs of `events` deltas against `target`, the proxy's figures read where
/// `proxy` says.
pub async fn step(
    target: Target,
    streams: usize,
    events: usize,
    timeout: Duration,
    proxy: ProxiedBy,
) -> StepResult {
    let (group, process) = match proxy {
        ProxiedBy::Threads(group) => (group, None),
        ProxiedBy::Process(pid) => (system::PROXY, Some(pid)),
    };
    let proxy_process_cpu = || process.and_then(system::process_cpu);
    let process_before = proxy_process_cpu();
    let cpu_before = system::runtime_cpu();
    let sleeps_before = system::runtime_sleeps();
    let others_before = system::others_cpu();
    let overflows_before = system::listen_overflows();
    let allocations_before = system::allocations();
    let memory = move || match process {
        Some(pid) => system::process_rss(pid).map(|bytes| bytes as i64),
        None => Some(system::live_bytes()[group]),
    };
    let memory_before = memory();
    let memory_peak = Arc::new(AtomicI64::new(i64::MIN));
    // Dropped, and so stopped, when the step ends, however it ends.
    let mut sampler = JoinSet::new();
    sampler.spawn({
        let peak = Arc::clone(&memory_peak);
        async move {
            let mut every = tokio::time::interval(Duration::from_millis(10));
            // A busy clients' thread skips samples rather than taking several back to back.
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                every.tick().await;
                if let Some(now) = memory() {
                    peak.fetch_max(now, Ordering::Relaxed);
                }
            }
        }
    });
    let begin = Instant::now();
    let mut tasks = JoinSet::new();
    for n in 0..streams {
        tasks.spawn(one_stream(target, n, events, None));
    }
    let mut result = StepResult {
        streams,
        ok: 0,
        errors: Vec::new(),
        first_event_ns: Vec::with_capacity(streams),
        latencies_ns: Vec::new(),
        steady_latencies_ns: Vec::new(),
        events: 0,
        wall: Duration::ZERO,
        cpu: None,
        sleeps: None,
        allocations: [0; 3],
        listen_overflows: None,
        others_cpu: None,
        memory_peak: None,
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let mut deltas = Vec::with_capacity(streams * events);
    let mut all_open_at_ns = 0;
    while let Some(outcome) = join_next(&mut tasks, deadline, &mut result.errors).await {
        result.ok += 1;
        result.first_event_ns.push(outcome.first_event_ns);
        result.events += outcome.deltas.len();
        all_open_at_ns = all_open_at_ns.max(outcome.first_delta_at_ns);
        deltas.extend(outcome.deltas);
    }
    result.latencies_ns = deltas.iter().map(|&(_, latency)| latency).collect();
    result.steady_latencies_ns = deltas
        .iter()
        .filter(|&&(sent, _)| sent > all_open_at_ns)
        .map(|&(_, latency)| latency)
        .collect();
    result.wall = begin.elapsed();
    sampler.abort_all();
    result.memory_peak =
        memory_before.map(|before| memory_peak.load(Ordering::Relaxed).max(before) - before);
    result.others_cpu = since(others_before, system::others_cpu());
    result.cpu = cpu_before
        .zip(system::runtime_cpu())
        .map(|(before, after)| {
            let used = std::array::from_fn(|i| after[i].saturating_sub(before[i]));
            system::reported(used, group)
        });
    if let (Some(cpu), Some(used)) = (&mut result.cpu, since(process_before, proxy_process_cpu())) {
        // Counted as the proxy's, not as other processes' too.
        cpu[system::PROXY] = used;
        result.others_cpu = result.others_cpu.map(|others| others.saturating_sub(used));
    }
    result.sleeps = sleeps_before
        .zip(system::runtime_sleeps())
        .map(|(before, after)| {
            system::reported(
                std::array::from_fn(|i| after[i].saturating_sub(before[i])),
                group,
            )
        });
    let allocations = system::allocations();
    result.allocations = system::reported(
        std::array::from_fn(|i| allocations[i] - allocations_before[i]),
        group,
    );
    result.listen_overflows = overflows_before
        .zip(system::listen_overflows())
        .map(|(before, after)| after.saturating_sub(before));
    result.first_event_ns.sort_unstable();
    result.latencies_ns.sort_unstable();
    result.steady_latencies_ns.sort_unstable();
    result
}

fn since(before: Option<Duration>, after: Option<Duration>) -> Option<Duration> {
    before
        .zip(after)
        .map(|(before, after)| after.saturating_sub(before))
}

/// The next stream that ended well; failures go to `errors`. `None` once all ended, or at the deadline
/// (the rest are abandoned, and counted as an error).
async fn join_next(
    tasks: &mut JoinSet<Result<StreamStats, String>>,
    deadline: tokio::time::Instant,
    errors: &mut Vec<String>,
) -> Option<StreamStats> {
    loop {
        match tokio::time::timeout_at(deadline, tasks.join_next()).await {
            Ok(Some(Ok(Ok(stats)))) => return Some(stats),
            Ok(Some(Ok(Err(error)))) => errors.push(error),
            Ok(Some(Err(join_error))) => errors.push(format!("task: {join_error}")),
            Ok(None) => return None,
            Err(_) => {
                errors.push(format!("timed out with {} streams unfinished", tasks.len()));
                tasks.abort_all();
                return None;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Memory per open stream

/// The process's memory at one moment.
#[derive(Clone, Copy)]
struct Snapshot {
    rss: Option<u64>,
    heap: [i64; system::RUNTIMES.len()],
}

impl Snapshot {
    fn now() -> Snapshot {
        Snapshot {
            rss: system::rss_bytes(),
            heap: system::live_bytes(),
        }
    }
}

/// What holding `streams` runs open mid-run cost.
pub struct MemoryResult {
    pub streams: usize,
    /// RSS growth (bytes) while opening the direct streams, then the HTTP-relayed ones on top, then the
    /// proxied ones on top.
    pub direct_rss: Option<i64>,
    pub http_relayed_rss: Option<i64>,
    pub proxied_rss: Option<i64>,
    /// Live heap bytes the proxy's threads added while the HTTP-relayed streams opened (the HTTP relay's),
    /// then while the proxied ones did (the proxy's).
    pub http_relay_heap: i64,
    pub proxy_heap: i64,
    pub errors: Vec<String>,
    pub others_cpu: Option<Duration>,
    pub wall: Duration,
}

impl MemoryResult {
    /// What the proxy adds per open stream, in RSS: the proxied streams' growth minus the direct ones'
    /// (clients and agent are in both).
    pub fn proxy_rss_per_stream(&self) -> Option<f64> {
        self.rss_beyond_direct(self.proxied_rss)
    }

    /// What the HTTP relay adds per open stream, in RSS, likewise.
    pub fn http_relay_rss_per_stream(&self) -> Option<f64> {
        self.rss_beyond_direct(self.http_relayed_rss)
    }

    fn rss_beyond_direct(&self, growth: Option<i64>) -> Option<f64> {
        let (direct, growth) = self.direct_rss.zip(growth)?;
        Some((growth - direct) as f64 / self.streams as f64)
    }

    pub fn proxy_heap_per_stream(&self) -> f64 {
        self.proxy_heap as f64 / self.streams as f64
    }

    pub fn http_relay_heap_per_stream(&self) -> f64 {
        self.http_relay_heap as f64 / self.streams as f64
    }
}

/// Opens `streams` direct runs, then as many through the HTTP relay and as many through the proxy, all held
/// by the agent after their first delta, measuring the process after each batch; then lets them all
/// finish. Each batch opens on top of the ones before, so none reuses memory another freed.
pub async fn memory_step(
    [direct, http_relayed, proxied]: [Target; 3],
    agent: &Agent,
    streams: usize,
    timeout: Duration,
) -> MemoryResult {
    // One delta before the pause (the stream is open mid-run), one after.
    const EVENTS: usize = 2;
    let others_before = system::others_cpu();
    let begin = Instant::now();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut tasks = JoinSet::new();
    let mut errors = Vec::new();
    agent.hold(EVENTS);
    let mut snapshots = vec![Snapshot::now()];
    for target in [direct, http_relayed, proxied] {
        open_held(target, streams, EVENTS, &mut tasks, deadline, &mut errors).await;
        snapshots.push(Snapshot::now());
    }
    agent.release();
    while join_next(&mut tasks, deadline, &mut errors).await.is_some() {}
    let batch = |n: usize| (snapshots[n], snapshots[n + 1]);
    let rss = |(from, to): (Snapshot, Snapshot)| Some(to.rss? as i64 - from.rss? as i64);
    let proxy_heap =
        |(from, to): (Snapshot, Snapshot)| to.heap[system::PROXY] - from.heap[system::PROXY];
    MemoryResult {
        streams,
        direct_rss: rss(batch(0)),
        http_relayed_rss: rss(batch(1)),
        proxied_rss: rss(batch(2)),
        http_relay_heap: proxy_heap(batch(1)),
        proxy_heap: proxy_heap(batch(2)),
        errors,
        others_cpu: since(others_before, system::others_cpu()),
        wall: begin.elapsed(),
    }
}

/// Starts `streams` runs into `tasks` and waits until each has its first delta (or failed).
async fn open_held(
    target: Target,
    streams: usize,
    events: usize,
    tasks: &mut JoinSet<Result<StreamStats, String>>,
    deadline: tokio::time::Instant,
    errors: &mut Vec<String>,
) {
    let (opened, mut arrivals) = mpsc::unbounded_channel();
    for n in 0..streams {
        tasks.spawn(one_stream(target, n, events, Some(opened.clone())));
    }
    drop(opened);
    let mut open = 0;
    // Every sender is dropped once its stream opened or ended: then `recv` ends.
    while let Ok(arrival) = tokio::time::timeout_at(deadline, arrivals.recv()).await {
        match arrival {
            Some(()) => open += 1,
            None => break,
        }
    }
    if open < streams {
        errors.push(format!("only {open} of {streams} streams opened"));
    }
}
