//! A small load tool: what the proxy adds to an AG-UI stream, as ratios against a direct connection to the same
//! upstream measured in the same run (so a busy machine distorts both sides alike).
//!
//! In one process, on three tokio runtimes with their own threads so the load does not starve the proxy:
//! - `upstream`: a scripted AG-UI agent (hyper, 127.0.0.1:0). Each run streams `RUN_STARTED`,
//!   `TEXT_MESSAGE_START`, then `EVENTS` × `TEXT_MESSAGE_CONTENT` one `INTERVAL` apart (each run at its own
//!   phase, so streams started together do not tick together), each delta stamped with its send time
//!   (`t=<ns>`, taken when hyper pulls the frame), then `TEXT_MESSAGE_END`, `RUN_FINISHED`.
//! - `proxy`: agent-bridge itself ([`Server`]), one route AG-UI inbound → AG-UI outbound to that upstream.
//! - `clients`: for 1, 100 and 1,000 concurrent streams, first DIRECT (client → upstream), then THROUGH the
//!   proxy (client → proxy → upstream). Each stream is one fresh HTTP/1.1 connection and one run.
//!
//! Measured per step: time to first event (request start → first SSE event received), per-event latency
//! (receive time − send stamp) p50/p99, and throughput (events received / wall time of the step). The table
//! gives proxy/direct ratios and the added µs. A second table shows where the CPU went during each step
//! (cores busy per runtime and in other processes on the machine, from `/proc`; the proxy's CPU time per
//! event) and how many connections the kernel dropped at a full accept queue (Linux only).
//!
//! Run: `cargo bench --bench proxy_latency`. Environment:
//! - `BENCH_QUICK=1`: 20 events per stream instead of 100 (a smoke run);
//! - `BENCH_EVENTS=N`, `BENCH_INTERVAL_MS=N` (default 50: 20 events/s per stream, 20,000/s at 1,000
//!   streams, which a 2-core machine running all three parts sustains; 10 or 20 show where it saturates),
//!   `BENCH_LEVELS=1,100,1000`,
//!   `BENCH_PROXY_THREADS=N` (default: all cores), `BENCH_TIMEOUT_S=N` (global limit, default 600).
//!
//! The 1,000-stream step holds about 4 descriptors per stream (client, proxy inbound, proxy → upstream,
//! upstream). The tool raises its soft `RLIMIT_NOFILE` up to the hard limit; if that is still too low for a
//! step, the step is skipped with a message naming the `ulimit -n` it needs and the tool exits non-zero.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::Sleep;

use agent_bridge::config::Config;
use agent_bridge::server::Server;
use agent_bridge::sse::SseDecoder;

/// Descriptors held per concurrent stream through the proxy, and a margin for everything else.
const FDS_PER_PROXIED_STREAM: u64 = 4;
const FDS_PER_DIRECT_STREAM: u64 = 2;
const FD_MARGIN: u64 = 256;

// ---------------------------------------------------------------------------------------------------------
// Settings

struct Settings {
    events: usize,
    interval: Duration,
    levels: Vec<usize>,
    proxy_threads: usize,
    global_timeout: Duration,
    quick: bool,
}

impl Settings {
    fn from_env() -> Result<Self, String> {
        let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let levels = match std::env::var("BENCH_LEVELS") {
            Ok(text) => text
                .split(',')
                .map(|n| {
                    n.trim()
                        .parse::<usize>()
                        .map_err(|e| format!("BENCH_LEVELS: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Err(_) => vec![1, 100, 1000],
        };
        if levels.contains(&0) {
            return Err("BENCH_LEVELS: 0 streams".into());
        }
        let settings = Self {
            events: env_number("BENCH_EVENTS", if quick { 20 } else { 100 })?,
            interval: Duration::from_millis(env_number("BENCH_INTERVAL_MS", 50)? as u64),
            levels,
            proxy_threads: env_number("BENCH_PROXY_THREADS", cores)?.max(1),
            global_timeout: Duration::from_secs(env_number("BENCH_TIMEOUT_S", 600)? as u64),
            quick,
        };
        if settings.events == 0 {
            return Err("BENCH_EVENTS: 0 events".into());
        }
        Ok(settings)
    }

    /// How long one step may take: the paced stream plus generous room for connecting and queueing.
    fn step_timeout(&self) -> Duration {
        self.interval * self.events as u32 + Duration::from_secs(60)
    }
}

fn env_number(name: &str, default: usize) -> Result<usize, String> {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|e| format!("{name}={text}: {e}")),
        Err(_) => Ok(default),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Clock: one monotonic base for the whole process, so send stamps and receive times compare directly.

fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

// ---------------------------------------------------------------------------------------------------------
// The scripted AG-UI upstream

/// One run's SSE stream, paced: the head at once, a stamped content event every `interval`, the tail at once.
struct ScriptedRun {
    events: usize,
    interval: Duration,
    /// Frames sent so far.
    sent: usize,
    /// When the first content event is due; content event i is due `i` intervals later.
    first: tokio::time::Instant,
    sleep: Pin<Box<Sleep>>,
}

impl ScriptedRun {
    /// Runs started together would tick together, and then every stream's event would arrive in the same
    /// burst, direct or not: each run gets its own phase within the interval (spread by the golden ratio).
    fn new(events: usize, interval: Duration) -> Self {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let phase = interval.mul_f64((run as f64 * 0.618_033_988_749_895).fract());
        let first = tokio::time::Instant::now() + phase;
        Self {
            events,
            interval,
            sent: 0,
            first,
            sleep: Box::pin(tokio::time::sleep_until(first)),
        }
    }
}

impl http_body::Body for ScriptedRun {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        let content_end = 2 + this.events;
        let data = match this.sent {
            0 => r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#.to_owned(),
            1 => r#"{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}"#.to_owned(),
            n if n < content_end => {
                if this.sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                // Absolute deadlines: a late tick does not push the rest of the script back. Content event
                // n - 2 goes out now; the next one is due n - 1 intervals after the first.
                let next = this.first + this.interval * (n - 1) as u32;
                this.sleep.as_mut().reset(next);
                format!(
                    r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"t={} "}}"#,
                    now_ns()
                )
            }
            n if n == content_end => r#"{"type":"TEXT_MESSAGE_END","messageId":"m1"}"#.to_owned(),
            n if n == content_end + 1 => {
                r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r"}"#.to_owned()
            }
            _ => return Poll::Ready(None),
        };
        this.sent += 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(format!(
            "data: {data}\n\n"
        ))))))
    }
}

async fn upstream_service(
    request: Request<Incoming>,
    events: usize,
    interval: Duration,
) -> Result<Response<ScriptedRun>, Infallible> {
    // A real agent reads the whole RunAgentInput before it answers.
    let _ = request.into_body().collect().await;
    let mut response = Response::new(ScriptedRun::new(events, interval));
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    Ok(response)
}

async fn run_upstream(
    listener: TcpListener,
    events: usize,
    interval: Duration,
    mut shutdown: oneshot::Receiver<()>,
) {
    let graceful = GracefulShutdown::new();
    let http = hyper::server::conn::http1::Builder::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of descriptors, most likely: back off instead of spinning.
                    eprintln!("upstream: accept failed: {error}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = service_fn(move |request| upstream_service(request, events, interval));
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
}

/// A listener with a backlog large enough for 1,000 connections arriving at once.
fn listen_local() -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    socket.listen(4096)
}

// ---------------------------------------------------------------------------------------------------------
// The load clients

/// What one client stream saw.
struct StreamStats {
    first_event_ns: u64,
    latencies_ns: Vec<u64>,
    events: usize,
}

fn run_request(thread: usize) -> Bytes {
    Bytes::from(format!(
        r#"{{"threadId":"bench-{thread}","runId":"run-{thread}","messages":[{{"id":"u1","role":"user","content":"Tell me a story."}}],"tools":[],"context":[],"state":{{}},"forwardedProps":{{}}}}"#
    ))
}

/// The send stamp of a content event, if `data` is one.
fn stamp(data: &str) -> Option<u64> {
    let at = data.find("\"delta\":\"t=")? + "\"delta\":\"t=".len();
    let digits = &data[at..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

async fn one_stream(
    addr: SocketAddr,
    path: &'static str,
    thread: usize,
    expected_content: usize,
) -> Result<StreamStats, String> {
    let started = now_ns();
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = Request::post(path)
        .header(http::header::HOST, addr.to_string())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "text/event-stream")
        .body(Full::new(run_request(thread)))
        .map_err(|e| format!("request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    if response.status() != StatusCode::OK {
        return Err(format!("status {}", response.status()));
    }
    let mut body = response.into_body();
    let mut framer = SseDecoder::new(1 << 20);
    let mut stats = StreamStats {
        first_event_ns: 0,
        latencies_ns: Vec::with_capacity(expected_content),
        events: 0,
    };
    let mut finished = false;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading the stream: {e}"))?;
        let Some(chunk) = frame.data_ref() else {
            continue;
        };
        let received = now_ns();
        framer.push(chunk);
        while let Some(event) = framer.next_event().map_err(|e| format!("SSE: {e}"))? {
            if stats.events == 0 {
                stats.first_event_ns = received.saturating_sub(started);
            }
            stats.events += 1;
            if let Some(sent) = stamp(&event.data) {
                stats.latencies_ns.push(received.saturating_sub(sent));
            } else if event.data.contains("\"RUN_FINISHED\"") {
                finished = true;
            } else if event.data.contains("\"RUN_ERROR\"") {
                return Err(format!("RUN_ERROR: {}", event.data));
            }
        }
    }
    if !finished || stats.latencies_ns.len() != expected_content {
        return Err(format!(
            "incomplete run: {} of {expected_content} content events, finished: {finished}",
            stats.latencies_ns.len()
        ));
    }
    Ok(stats)
}

/// One step: `streams` concurrent runs against `addr`, all started at once.
struct StepResult {
    streams: usize,
    ok: usize,
    errors: Vec<String>,
    first_event_ns: Vec<u64>,
    latencies_ns: Vec<u64>,
    events: usize,
    wall: Duration,
    /// CPU time each runtime's threads used during the step ([`RUNTIMES`] order), where the OS tells.
    cpu: Option<[Duration; 3]>,
    /// Connections the kernel dropped because a listener's accept queue was full (Linux `ListenOverflows`);
    /// each costs its client a SYN retransmission, about 1 s.
    listen_overflows: Option<u64>,
    /// CPU time other processes on the machine used during the step: the contention measured.
    others_cpu: Option<Duration>,
}

async fn step(
    addr: SocketAddr,
    path: &'static str,
    streams: usize,
    events: usize,
    timeout: Duration,
) -> StepResult {
    let cpu_before = runtime_cpu();
    let others_before = others_cpu();
    let overflows_before = listen_overflows();
    let begin = Instant::now();
    let mut tasks = JoinSet::new();
    for thread in 0..streams {
        tasks.spawn(one_stream(addr, path, thread, events));
    }
    let mut result = StepResult {
        streams,
        ok: 0,
        errors: Vec::new(),
        first_event_ns: Vec::with_capacity(streams),
        latencies_ns: Vec::with_capacity(streams * events),
        events: 0,
        wall: Duration::ZERO,
        cpu: None,
        listen_overflows: None,
        others_cpu: None,
    };
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, tasks.join_next()).await {
            Ok(Some(Ok(Ok(stats)))) => {
                result.ok += 1;
                result.first_event_ns.push(stats.first_event_ns);
                result.latencies_ns.extend(stats.latencies_ns);
                result.events += stats.events;
            }
            Ok(Some(Ok(Err(error)))) => result.errors.push(error),
            Ok(Some(Err(join_error))) => result.errors.push(format!("task: {join_error}")),
            Ok(None) => break,
            Err(_) => {
                result.errors.push(format!(
                    "step timed out after {timeout:?} with {} streams unfinished",
                    tasks.len()
                ));
                tasks.abort_all();
                break;
            }
        }
    }
    result.wall = begin.elapsed();
    result.others_cpu = others_before
        .zip(others_cpu())
        .map(|(before, after)| after.saturating_sub(before));
    result.cpu = cpu_before
        .zip(runtime_cpu())
        .map(|(before, after)| std::array::from_fn(|i| after[i].saturating_sub(before[i])));
    result.listen_overflows = overflows_before
        .zip(listen_overflows())
        .map(|(before, after)| after.saturating_sub(before));
    result.first_event_ns.sort_unstable();
    result.latencies_ns.sort_unstable();
    result
}

// ---------------------------------------------------------------------------------------------------------
// CPU accounting: which runtime burned the cores during a step.

/// The runtimes' thread names, as the OS shows them.
const RUNTIMES: [&str; 3] = ["upstream", "proxy", "clients"];

/// CPU time used so far by each runtime's threads, from `/proc/self/task/*/schedstat` (ns on CPU).
#[cfg(target_os = "linux")]
fn runtime_cpu() -> Option<[Duration; 3]> {
    let mut totals = [Duration::ZERO; 3];
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let Ok(name) = std::fs::read_to_string(path.join("comm")) else {
            continue; // the thread ended meanwhile
        };
        let Some(group) = RUNTIMES.iter().position(|r| name.trim_end() == *r) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(path.join("schedstat")) else {
            continue;
        };
        let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
        totals[group] += Duration::from_nanos(ns);
    }
    Some(totals)
}

#[cfg(not(target_os = "linux"))]
fn runtime_cpu() -> Option<[Duration; 3]> {
    None
}

/// CPU time used so far by every other process on the machine: all busy time (`/proc/stat`) minus this
/// process's (`/proc/self/stat`), both in clock ticks.
#[cfg(target_os = "linux")]
fn others_cpu() -> Option<Duration> {
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let times: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice, already counted in user/nice]
    let busy: u64 = times.iter().take(8).sum::<u64>() - times.get(3)? - times.get(4)?;
    let own = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = own.rsplit_once(')')?.1.split_whitespace().collect();
    let own: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let ticks = busy.saturating_sub(own);
    Some(Duration::from_nanos(
        ticks * 1_000_000_000 / ticks_per_second,
    ))
}

#[cfg(not(target_os = "linux"))]
fn others_cpu() -> Option<Duration> {
    None
}

/// The kernel's count of connections dropped at a full accept queue (`TcpExt: ListenOverflows`).
#[cfg(target_os = "linux")]
fn listen_overflows() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/netstat").ok()?;
    let mut lines = text.lines().filter(|line| line.starts_with("TcpExt:"));
    let (names, values) = (lines.next()?, lines.next()?);
    let index = names
        .split_whitespace()
        .position(|name| name == "ListenOverflows")?;
    values.split_whitespace().nth(index)?.parse().ok()
}

#[cfg(not(target_os = "linux"))]
fn listen_overflows() -> Option<u64> {
    None
}

// ---------------------------------------------------------------------------------------------------------
// Descriptors

/// Raises the soft open-file limit toward `want` (up to the hard limit); returns the soft limit in force.
#[cfg(unix)]
#[allow(clippy::unnecessary_cast)] // `rlim_t` is not `u64` on every Unix.
fn raise_open_files(want: u64) -> Option<u64> {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by pointer.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        let want = want as libc::rlim_t;
        if limit.rlim_cur < want {
            let raised = libc::rlimit {
                rlim_cur: want.min(limit.rlim_max),
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit.rlim_cur = raised.rlim_cur;
            }
        }
        Some(limit.rlim_cur as u64)
    }
}

#[cfg(not(unix))]
fn raise_open_files(_want: u64) -> Option<u64> {
    None
}

// ---------------------------------------------------------------------------------------------------------
// Report

fn percentile(sorted: &[u64], p: usize) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[(sorted.len() - 1) * p / 100])
}

fn micros(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

struct Row {
    metric: &'static str,
    direct: Option<f64>,
    proxy: Option<f64>,
    unit: &'static str,
}

fn rows(direct: &StepResult, proxy: &StepResult) -> Vec<Row> {
    let latency = |metric, sorted: fn(&StepResult) -> &[u64], p| Row {
        metric,
        direct: percentile(sorted(direct), p).map(micros),
        proxy: percentile(sorted(proxy), p).map(micros),
        unit: "µs",
    };
    let first_event: fn(&StepResult) -> &[u64] = |r| &r.first_event_ns;
    let event: fn(&StepResult) -> &[u64] = |r| &r.latencies_ns;
    let rate = |r: &StepResult| Some(r.events as f64 / r.wall.as_secs_f64());
    vec![
        latency("time to first event p50", first_event, 50),
        latency("time to first event p99", first_event, 99),
        latency("event latency p50", event, 50),
        latency("event latency p99", event, 99),
        Row {
            metric: "throughput",
            direct: rate(direct),
            proxy: rate(proxy),
            unit: "events/s",
        },
    ]
}

fn table(results: &[(StepResult, StepResult)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| Streams | Metric | Direct | Through proxy | Proxy / direct | Proxy − direct |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|");
    for (direct, proxy) in results {
        for row in rows(direct, proxy) {
            let (ratio, added) = match (row.direct, row.proxy) {
                (Some(d), Some(p)) if d > 0.0 => (
                    format!("{:.2}×", p / d),
                    // Rounded first, so a tiny difference never shows as "-0".
                    format!("{:+} {}", (p - d).round() as i64, row.unit),
                ),
                _ => ("–".to_owned(), "–".to_owned()),
            };
            let show =
                |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.0} {}", row.unit));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {ratio} | {added} |",
                direct.streams,
                row.metric,
                show(row.direct),
                show(row.proxy),
            );
        }
    }
    out
}

/// Cores busy per runtime during the step: CPU time / wall time.
fn cores(r: &StepResult) -> Option<[f64; 3]> {
    let wall = r.wall.as_secs_f64();
    r.cpu.map(|cpu| cpu.map(|d| d.as_secs_f64() / wall))
}

/// Where the CPU went: cores busy per runtime, and the proxy's CPU time per event it delivered.
fn cpu_table(results: &[(StepResult, StepResult)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| Streams | Path | Cores busy: upstream | proxy | clients | other processes | Proxy CPU per event | \
         Accept-queue drops |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|---:|");
    for (direct, proxy) in results {
        for (label, r) in [("direct", direct), ("through proxy", proxy)] {
            let Some(busy) = cores(r) else { continue };
            let per_event = match (label, r.cpu) {
                ("through proxy", Some(cpu)) if r.events > 0 => {
                    format!(
                        "{:.1} µs",
                        micros(cpu[1].as_nanos() as u64) / r.events as f64
                    )
                }
                _ => "–".to_owned(),
            };
            let drops = r.listen_overflows.map_or("–".to_owned(), |n| n.to_string());
            let others = others_cores(r).map_or("–".to_owned(), |n| format!("{n:.2}"));
            let _ = writeln!(
                out,
                "| {} | {label} | {:.2} | {:.2} | {:.2} | {others} | {per_event} | {drops} |",
                r.streams, busy[0], busy[1], busy[2]
            );
        }
    }
    out
}

/// Cores other processes kept busy during the step.
fn others_cores(r: &StepResult) -> Option<f64> {
    r.others_cpu
        .map(|cpu| cpu.as_secs_f64() / r.wall.as_secs_f64())
}

fn describe(label: &str, r: &StepResult) {
    let busy = cores(r).map_or(String::new(), |[upstream, proxy, clients]| {
        let others = others_cores(r).map_or(String::new(), |n| format!(", other processes {n:.2}"));
        format!(
            " (cores busy: upstream {upstream:.2}, proxy {proxy:.2}, clients {clients:.2}{others})"
        )
    });
    let overflows = match r.listen_overflows {
        Some(n) if n > 0 => format!(", {n} connections dropped at a full accept queue"),
        _ => String::new(),
    };
    eprintln!(
        "  {label:>7}: {}/{} streams ok, {} events in {:.2}s{busy}{overflows}{}",
        r.ok,
        r.streams,
        r.events,
        r.wall.as_secs_f64(),
        r.errors
            .first()
            .map_or(String::new(), |e| format!(", first error: {e}")),
    );
}

// ---------------------------------------------------------------------------------------------------------

fn runtime(name: &str, threads: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo bench -- --list` style arguments are ignored.
    let settings = match Settings::from_env() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("proxy_latency: {error}");
            std::process::exit(2);
        }
    };
    now_ns();

    // Whatever happens, the tool ends.
    let global = settings.global_timeout;
    std::thread::spawn(move || {
        std::thread::sleep(global);
        eprintln!("proxy_latency: global timeout of {global:?} reached; aborting");
        std::process::exit(3);
    });

    let max_level = settings.levels.iter().copied().max().unwrap_or(1) as u64;
    let open_files = raise_open_files(FDS_PER_PROXIED_STREAM * max_level + FD_MARGIN);

    let upstream_rt = runtime(RUNTIMES[0], 1);
    let proxy_rt = runtime(RUNTIMES[1], settings.proxy_threads);
    let client_rt = runtime(RUNTIMES[2], 1);

    // The upstream.
    let listener = upstream_rt
        .block_on(async { listen_local() })
        .expect("binding the upstream");
    let upstream_addr = listener.local_addr().expect("upstream address");
    let (stop_upstream, upstream_stopped) = oneshot::channel();
    let upstream = upstream_rt.spawn(run_upstream(
        listener,
        settings.events,
        settings.interval,
        upstream_stopped,
    ));

    // The proxy, configured as a user would.
    let config = format!(
        r#"
listen = "127.0.0.1:0"

[[routes]]
name = "bench"
path = "/bench"
inbound = "ag-ui"
outbound = "ag-ui"
upstream = "http://{upstream_addr}/run"
timeout = "300s"
"#
    );
    let config = Config::parse(&config, "proxy_latency.toml").expect("a valid bench config");
    let server = proxy_rt
        .block_on(Server::bind(&config))
        .expect("binding the proxy")
        .with_shutdown_grace(Duration::from_secs(2));
    let proxy_addr = server.local_addr();
    let (stop_proxy, proxy_stopped) = oneshot::channel::<()>();
    let proxy = proxy_rt.spawn(server.run(async {
        let _ = proxy_stopped.await;
    }));

    eprintln!(
        "proxy_latency{}: {} content events per stream, {:?} apart; levels {:?}; threads: upstream 1, proxy {}, \
         clients 1; open-file limit {}",
        if settings.quick { " (quick)" } else { "" },
        settings.events,
        settings.interval,
        settings.levels,
        settings.proxy_threads,
        open_files.map_or("unknown".to_owned(), |n| n.to_string()),
    );

    // Warm-up, not reported: code paths, allocator, the proxy's connection pool.
    client_rt.block_on(async {
        let (events, timeout) = (settings.events, settings.step_timeout());
        let _ = step(upstream_addr, "/run", 10, events, timeout).await;
        let _ = step(proxy_addr, "/bench", 10, events, timeout).await;
    });

    let mut results = Vec::new();
    let mut failed = Vec::new();
    for &streams in &settings.levels {
        let need = FDS_PER_PROXIED_STREAM * streams as u64 + FD_MARGIN;
        if let Some(limit) = open_files.filter(|&limit| limit < need) {
            let direct_need = FDS_PER_DIRECT_STREAM * streams as u64 + FD_MARGIN;
            let message = format!(
                "{streams} streams skipped: they need about {need} open files (direct alone {direct_need}) \
                 but the limit is {limit}; run `ulimit -n {need}` (or raise the hard limit) and rerun"
            );
            eprintln!("proxy_latency: {message}");
            failed.push(message);
            continue;
        }
        eprintln!("{streams} concurrent streams:");
        let timeout = settings.step_timeout();
        let (direct, proxied) = client_rt.block_on(async {
            let direct = step(upstream_addr, "/run", streams, settings.events, timeout).await;
            describe("direct", &direct);
            tokio::time::sleep(Duration::from_millis(300)).await;
            let proxied = step(proxy_addr, "/bench", streams, settings.events, timeout).await;
            describe("proxy", &proxied);
            tokio::time::sleep(Duration::from_millis(300)).await;
            (direct, proxied)
        });
        for (label, r) in [("direct", &direct), ("through the proxy", &proxied)] {
            if !r.errors.is_empty() {
                failed.push(format!(
                    "{streams} streams {label}: {} of {} failed; first: {}",
                    r.errors.len(),
                    r.streams,
                    r.errors[0]
                ));
            }
        }
        results.push((direct, proxied));
    }

    println!();
    println!(
        "AG-UI → agent-bridge → AG-UI vs direct; {} content events per stream, one every {:?}; \
         each stream its own HTTP/1.1 connection.",
        settings.events, settings.interval
    );
    println!();
    print!("{}", table(&results));
    if results.iter().any(|(direct, _)| direct.cpu.is_some()) {
        println!();
        print!("{}", cpu_table(&results));
    }

    // Clean shutdown: the proxy first (it holds connections to the upstream), then the upstream.
    let _ = stop_proxy.send(());
    let _ = proxy_rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), proxy).await });
    let _ = stop_upstream.send(());
    let _ = upstream_rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), upstream).await });
    client_rt.shutdown_timeout(Duration::from_secs(1));
    proxy_rt.shutdown_timeout(Duration::from_secs(1));
    upstream_rt.shutdown_timeout(Duration::from_secs(1));

    if !failed.is_empty() {
        eprintln!();
        for message in &failed {
            eprintln!("proxy_latency: FAILED: {message}");
        }
        std::process::exit(1);
    }
}
