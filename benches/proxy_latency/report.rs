//! The tables: per pair, each level direct against through the relay, the HTTP relay and the proxy, where
//! the CPU went, and memory; at the end, one line per pair against issue 7's targets.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::load::{Level, MemoryResult, StepResult};

/// Issue 7's targets: added per-event latency p50 and p99 (µs), and proxy memory per open stream (KiB).
const TARGET_P50_US: f64 = 50.0;
const TARGET_P99_US: f64 = 500.0;
const TARGET_KIB: f64 = 32.0;

fn percentile(sorted: &[u64], p: usize) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[(sorted.len() - 1) * p / 100])
}

fn micros(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn rate(r: &StepResult) -> f64 {
    r.events as f64 / r.wall.as_secs_f64()
}

/// Added per-event latency (µs) at percentile `p` of `sorted`'s samples: through `path` (the proxy or a
/// relay) minus direct.
fn added_latency(
    direct: &StepResult,
    path: &StepResult,
    sorted: fn(&StepResult) -> &[u64],
    p: usize,
) -> Option<f64> {
    let (d, x) = percentile(sorted(direct), p).zip(percentile(sorted(path), p))?;
    Some(micros(x) - micros(d))
}

fn all_deltas(r: &StepResult) -> &[u64] {
    &r.latencies_ns
}

fn first_events(r: &StepResult) -> &[u64] {
    &r.first_event_ns
}

fn steady_deltas(r: &StepResult) -> &[u64] {
    &r.steady_latencies_ns
}

struct Row {
    metric: &'static str,
    direct: Option<f64>,
    relay: Option<f64>,
    http_relay: Option<f64>,
    nginx: Option<f64>,
    proxy: Option<f64>,
    unit: &'static str,
}

fn rows(level: &Level) -> Vec<Row> {
    let latency = |metric, sorted: fn(&StepResult) -> &[u64], p| Row {
        metric,
        direct: percentile(sorted(&level.direct), p).map(micros),
        relay: percentile(sorted(&level.relay), p).map(micros),
        http_relay: percentile(sorted(&level.http_relay), p).map(micros),
        nginx: level
            .nginx
            .as_ref()
            .and_then(|r| percentile(sorted(r), p))
            .map(micros),
        proxy: percentile(sorted(level.proxy()), p).map(micros),
        unit: "µs",
    };
    vec![
        latency("time to first event p50", first_events, 50),
        latency("time to first event p99", first_events, 99),
        latency("event latency p50", all_deltas, 50),
        latency("event latency p99", all_deltas, 99),
        latency("event latency p99, all streams open", steady_deltas, 99),
        Row {
            metric: "throughput",
            direct: Some(rate(&level.direct)),
            relay: Some(rate(&level.relay)),
            http_relay: Some(rate(&level.http_relay)),
            nginx: level.nginx.as_ref().map(rate),
            proxy: Some(rate(level.proxy())),
            unit: "deltas/s",
        },
    ]
}

pub fn table(results: &[Level]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| Streams | Metric | Direct | Relay | HTTP relay | nginx | Through proxy | Proxy / direct | \
         Proxy − direct | Relay − direct | HTTP relay − direct | nginx − direct |"
    );
    let _ = writeln!(
        out,
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for level in results {
        for row in rows(level) {
            let ratio = match (row.direct, row.proxy) {
                (Some(d), Some(p)) if d > 0.0 => format!("{:.2}×", p / d),
                _ => "–".to_owned(),
            };
            // Rounded first, so a tiny difference never shows as "-0".
            let added = |path: Option<f64>| match (row.direct, path) {
                (Some(d), Some(p)) => format!("{:+} {}", (p - d).round() as i64, row.unit),
                _ => "–".to_owned(),
            };
            let show =
                |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.0} {}", row.unit));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {ratio} | {} | {} | {} | {} |",
                level.direct.streams,
                row.metric,
                show(row.direct),
                show(row.relay),
                show(row.http_relay),
                show(row.nginx),
                show(row.proxy),
                added(row.proxy),
                added(row.relay),
                added(row.http_relay),
                added(row.nginx),
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

/// Cores other processes kept busy during a step of `wall` seconds.
fn others_cores(others: Option<std::time::Duration>, wall: std::time::Duration) -> Option<f64> {
    others.map(|cpu| cpu.as_secs_f64() / wall.as_secs_f64())
}

/// The proxy threads' CPU time per delta delivered (µs): the proxy's, or a relay's on the same threads.
fn proxy_cpu_per_delta(r: &StepResult) -> Option<f64> {
    let cpu = r.cpu?;
    (r.events > 0).then(|| micros(cpu[crate::system::PROXY].as_nanos() as u64) / r.events as f64)
}

/// How often the proxy's threads went to sleep (and so had to be woken) per delta delivered.
fn proxy_sleeps_per_delta(r: &StepResult) -> Option<f64> {
    let sleeps = r.sleeps?;
    (r.events > 0).then(|| sleeps[crate::system::PROXY] as f64 / r.events as f64)
}

fn proxy_allocations_per_delta(r: &StepResult) -> Option<f64> {
    (r.events > 0).then(|| r.allocations[crate::system::PROXY] as f64 / r.events as f64)
}

/// Where the CPU went: cores busy per runtime, the proxy threads' CPU time, sleeps and allocations per
/// delta (the relays', in their rows).
pub fn cpu_table(results: &[Level]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| Streams | Path | Cores busy: upstream | proxy | clients | other processes | Proxy CPU per delta | \
         Proxy thread sleeps per delta | Proxy allocations per delta | Accept-queue drops |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for level in results {
        for (label, r) in level.labelled() {
            let Some(busy) = cores(r) else { continue };
            let through = label != "direct";
            let per_delta = proxy_cpu_per_delta(r)
                .filter(|_| through)
                .map_or("–".to_owned(), |us| format!("{us:.1} µs"));
            let sleeps = proxy_sleeps_per_delta(r)
                .filter(|_| through)
                .map_or("–".to_owned(), |n| format!("{n:.2}"));
            let allocations = proxy_allocations_per_delta(r)
                .filter(|_| through)
                .map_or("–".to_owned(), |n| format!("{n:.1}"));
            let drops = r.listen_overflows.map_or("–".to_owned(), |n| n.to_string());
            let others =
                others_cores(r.others_cpu, r.wall).map_or("–".to_owned(), |n| format!("{n:.2}"));
            let _ = writeln!(
                out,
                "| {} | {label} | {:.2} | {:.2} | {:.2} | {others} | {per_delta} | {sleeps} | {allocations} | {drops} |",
                r.streams, busy[0], busy[1], busy[2]
            );
        }
    }
    out
}

/// Issue 20's target for a store against the first one (memory) at the same level: CPU per delta within
/// this ratio, added p50 within this many µs.
const STORE_TARGET_CPU_RATIO: f64 = 1.3;
const STORE_TARGET_P50_US: f64 = 20.0;

/// Each store's figures at each level, with several stores: the median over the rounds of each figure,
/// each store's step against the first store's step of the same round.
fn store_figures(results: &[Level]) -> Vec<Value> {
    let mut figures = Vec::new();
    for level in results {
        let rounds: Vec<_> = level.store_rounds().collect();
        if rounds[0].len() < 2 {
            continue;
        }
        for (at, (store, _)) in rounds[0].iter().enumerate() {
            let each_round: Vec<Value> = rounds
                .iter()
                .map(|round| store_figures_of_one_round(&level.direct, &round[0].1, &round[at].1))
                .collect();
            let middle = |key: &str| median(each_round.iter().filter_map(|f| f[key].as_f64()));
            figures.push(json!({
                "streams": level.direct.streams,
                "store": store,
                "rounds": rounds.len(),
                "p50": middle("p50"),
                "p50_vs_first": middle("p50_vs_first"),
                "first_event": middle("first_event"),
                "cpu": middle("cpu"),
                "cpu_ratio": middle("cpu_ratio"),
                "sleeps": middle("sleeps"),
                "allocations": middle("allocations"),
            }));
        }
    }
    figures
}

fn store_figures_of_one_round(direct: &StepResult, first: &StepResult, r: &StepResult) -> Value {
    json!({
        "p50": added_latency(direct, r, all_deltas, 50),
        "p50_vs_first": added_latency(first, r, all_deltas, 50),
        "first_event": added_latency(direct, r, first_events, 50),
        "cpu": proxy_cpu_per_delta(r),
        "cpu_ratio": proxy_cpu_per_delta(r).zip(proxy_cpu_per_delta(first)).map(|(x, f)| x / f),
        "sleeps": proxy_sleeps_per_delta(r),
        "allocations": proxy_allocations_per_delta(r),
    })
}

/// The middle value (the mean of the middle two of an even count), or none of none.
fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() {
        0 => None,
        n if n % 2 == 1 => Some(values[middle]),
        _ => Some((values[middle - 1] + values[middle]) / 2.0),
    }
}

fn store_verdict(figure: &Value) -> &'static str {
    let within = |key: &str, limit: f64| figure[key].as_f64().is_none_or(|v| v <= limit);
    match (
        within("cpu_ratio", STORE_TARGET_CPU_RATIO),
        within("p50_vs_first", STORE_TARGET_P50_US),
    ) {
        (true, true) => "met",
        (false, true) => "CPU",
        (true, false) => "p50",
        (false, false) => "CPU, p50",
    }
}

/// The stores side by side (with more than one in `BENCH_STORE`), each level's medians against its first
/// store; `pair` leads each row when given (the summary across pairs).
fn store_rows(out: &mut String, pair: Option<&str>, figures: &[Value]) {
    for f in figures {
        let show = |key: &str, unit: &str, digits: usize| {
            f[key]
                .as_f64()
                .map_or("–".to_owned(), |v| format!("{v:.digits$}{unit}"))
        };
        let signed = |key: &str| {
            f[key]
                .as_f64()
                .map_or("–".to_owned(), |v| format!("{v:+.0} µs"))
        };
        let _ = writeln!(
            out,
            "| {}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            pair.map_or(String::new(), |pair| format!("{pair} | ")),
            f["streams"],
            f["store"].as_str().unwrap_or("?"),
            f["rounds"],
            signed("p50"),
            signed("p50_vs_first"),
            signed("first_event"),
            show("cpu", " µs", 1),
            show("cpu_ratio", "×", 2),
            show("sleeps", "", 2),
            show("allocations", "", 1),
            store_verdict(f),
        );
    }
}

const STORE_HEADER: &str = "Streams | Store | Rounds (medians shown) | Added latency p50 | − first store's | Time to first event added, p50 | \
     Proxy CPU per delta | ÷ first store's | Proxy thread sleeps per delta | Proxy allocations per delta | \
     Within 1.3× CPU and +20 µs p50 |";

/// One pair's stores side by side, or nothing with one store.
pub fn store_table(results: &[Level]) -> String {
    let figures = store_figures(results);
    let mut out = String::new();
    if !figures.is_empty() {
        let _ = writeln!(out, "| {STORE_HEADER}");
        let _ = writeln!(
            out,
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
        );
        store_rows(&mut out, None, &figures);
    }
    out
}

pub fn memory_line(m: &MemoryResult) -> String {
    let kib = |bytes: f64| format!("{:.1} KiB", bytes / 1024.0);
    let per_stream =
        |growth: Option<i64>| growth.map_or("–".to_owned(), |b| kib(b as f64 / m.streams as f64));
    format!(
        "Memory, {} streams held open mid-run: RSS growth per stream direct {}, through the HTTP relay {}, \
         through the proxy {}; the HTTP relay's share {} RSS, {} live heap; the proxy's share {} RSS, {} live \
         heap (other processes {} cores)",
        m.streams,
        per_stream(m.direct_rss),
        per_stream(m.http_relayed_rss),
        per_stream(m.proxied_rss),
        m.http_relay_rss_per_stream().map_or("–".to_owned(), kib),
        kib(m.http_relay_heap_per_stream()),
        m.proxy_rss_per_stream().map_or("–".to_owned(), kib),
        kib(m.proxy_heap_per_stream()),
        others_cores(m.others_cpu, m.wall).map_or("–".to_owned(), |n| format!("{n:.2}")),
    )
}

pub fn describe(label: &str, r: &StepResult) {
    let busy = cores(r).map_or(String::new(), |[upstream, proxy, clients]| {
        let others = others_cores(r.others_cpu, r.wall)
            .map_or(String::new(), |n| format!(", other processes {n:.2}"));
        format!(
            " (cores busy: upstream {upstream:.2}, proxy {proxy:.2}, clients {clients:.2}{others})"
        )
    });
    let overflows = match r.listen_overflows {
        Some(n) if n > 0 => format!(", {n} connections dropped at a full accept queue"),
        _ => String::new(),
    };
    eprintln!(
        "  {label:>7}: {}/{} streams ok, {} deltas in {:.2}s{busy}{overflows}{}",
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
// The summary across pairs: each pair's process prints one line, the parent gathers them.

const SUMMARY: &str = "SUMMARY ";

/// The pair's summary line, from its largest level and its memory step.
pub fn summary_line(
    pair: &str,
    results: &[Level],
    memory: Option<&MemoryResult>,
    failed: usize,
) -> String {
    let largest = results.iter().max_by_key(|level| level.direct.streams);
    let others = results
        .iter()
        .flat_map(|level| level.labelled().into_iter().map(|(_, r)| r))
        .filter_map(|r| others_cores(r.others_cpu, r.wall))
        .chain(memory.and_then(|m| others_cores(m.others_cpu, m.wall)))
        .fold(None, |max: Option<f64>, n| {
            Some(max.map_or(n, |m| m.max(n)))
        });
    let summary = json!({
        "pair": pair,
        "streams": largest.map(|l| l.direct.streams),
        "p50": largest.and_then(|l| added_latency(&l.direct, l.proxy(), all_deltas, 50)),
        "p99": largest.and_then(|l| added_latency(&l.direct, l.proxy(), all_deltas, 99)),
        "p99_steady": largest.and_then(|l| added_latency(&l.direct, l.proxy(), steady_deltas, 99)),
        "relay_p50": largest.and_then(|l| added_latency(&l.direct, &l.relay, all_deltas, 50)),
        "relay_p99": largest.and_then(|l| added_latency(&l.direct, &l.relay, all_deltas, 99)),
        "http_relay_p50": largest.and_then(|l| added_latency(&l.direct, &l.http_relay, all_deltas, 50)),
        "http_relay_p99": largest.and_then(|l| added_latency(&l.direct, &l.http_relay, all_deltas, 99)),
        "throughput": largest.map(|l| rate(l.proxy()) / rate(&l.direct)),
        "cpu": largest.and_then(|l| proxy_cpu_per_delta(l.proxy())),
        "relay_cpu": largest.and_then(|l| proxy_cpu_per_delta(&l.relay)),
        "http_relay_cpu": largest.and_then(|l| proxy_cpu_per_delta(&l.http_relay)),
        "sleeps": largest.and_then(|l| proxy_sleeps_per_delta(l.proxy())),
        "allocations": largest.and_then(|l| proxy_allocations_per_delta(l.proxy())),
        "rss_kib": memory.and_then(MemoryResult::proxy_rss_per_stream).map(|b| b / 1024.0),
        "heap_kib": memory.map(|m| m.proxy_heap_per_stream() / 1024.0),
        "http_relay_rss_kib": memory.and_then(MemoryResult::http_relay_rss_per_stream).map(|b| b / 1024.0),
        "http_relay_heap_kib": memory.map(|m| m.http_relay_heap_per_stream() / 1024.0),
        "passthrough": largest.map(passthrough_figures),
        "others": others,
        "failed": failed,
        "stores": store_figures(results),
    });
    format!("{SUMMARY}{summary}")
}

/// The proxy and nginx side by side at one level, each against direct: what issue 22 measures.
fn passthrough_figures(level: &Level) -> Value {
    let against_direct = |r: &StepResult| {
        json!({
            "throughput": rate(r) / rate(&level.direct),
            "cpu": proxy_cpu_per_delta(r),
            "p50": added_latency(&level.direct, r, all_deltas, 50),
            "first_event_p50": added_latency(&level.direct, r, first_events, 50),
            "memory_peak_kib": r.memory_peak.map(|bytes| bytes as f64 / 1024.0),
        })
    };
    json!({
        "proxy": against_direct(level.proxy()),
        "nginx": level.nginx.as_ref().map(against_direct),
        "http_relay": against_direct(&level.http_relay),
    })
}

/// Every pair through the proxy next to nginx and the HTTP relay at the largest level: throughput and
/// added latency against direct, CPU per delta; the proxy's figures as multiples of nginx's.
pub fn passthrough_table(summaries: &[Value]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| Pair | Streams | Throughput / direct: proxy | nginx | HTTP relay | CPU per delta: proxy | nginx | \
         HTTP relay | proxy ÷ nginx | Added p50: proxy | nginx | Added time to first event p50: proxy | nginx | \
         Peak memory growth: proxy (live heap) | nginx (RSS) | HTTP relay (live heap) |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for s in summaries {
        let figures = &s["passthrough"];
        let show = |path: &str, key: &str, unit: &str, digits: usize| {
            figures[path][key]
                .as_f64()
                .map_or("–".to_owned(), |v| format!("{v:.digits$}{unit}"))
        };
        let cpu_ratio = figures["proxy"]["cpu"]
            .as_f64()
            .zip(figures["nginx"]["cpu"].as_f64())
            .map_or("–".to_owned(), |(p, n)| format!("{:.2}×", p / n));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {cpu_ratio} | {} | {} | {} | {} | {} | {} | {} |",
            s["pair"].as_str().unwrap_or("?"),
            s["streams"],
            show("proxy", "throughput", "×", 2),
            show("nginx", "throughput", "×", 2),
            show("http_relay", "throughput", "×", 2),
            show("proxy", "cpu", " µs", 1),
            show("nginx", "cpu", " µs", 1),
            show("http_relay", "cpu", " µs", 1),
            show("proxy", "p50", " µs", 0),
            show("nginx", "p50", " µs", 0),
            show("proxy", "first_event_p50", " µs", 0),
            show("nginx", "first_event_p50", " µs", 0),
            show("proxy", "memory_peak_kib", " KiB", 0),
            show("nginx", "memory_peak_kib", " KiB", 0),
            show("http_relay", "memory_peak_kib", " KiB", 0),
        );
    }
    out
}

/// The summary in a line of a pair's output, if it is one.
pub fn parse_summary(line: &str) -> Option<Value> {
    serde_json::from_str(line.strip_prefix(SUMMARY)?).ok()
}

pub fn summary_table(summaries: &[Value]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| Pair | Streams | Added latency p50 | p99 | p99, all streams open | Relay adds p50 | p99 | \
         HTTP relay adds p50 | p99 | Throughput proxy / direct | Proxy RSS per open stream | \
         Proxy heap per open stream | HTTP relay RSS per open stream | HTTP relay heap per open stream | \
         Proxy CPU per delta | Relay CPU per delta | HTTP relay CPU per delta | Proxy thread sleeps per delta | \
         Proxy allocations per delta | Others' cores (max) | Targets |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for s in summaries {
        let number = |key: &str| s[key].as_f64();
        let show = |key: &str, unit: &str, digits: usize| {
            number(key).map_or("–".to_owned(), |v| format!("{v:.digits$}{unit}"))
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s["pair"].as_str().unwrap_or("?"),
            s["streams"],
            show("p50", " µs", 0),
            show("p99", " µs", 0),
            show("p99_steady", " µs", 0),
            show("relay_p50", " µs", 0),
            show("relay_p99", " µs", 0),
            show("http_relay_p50", " µs", 0),
            show("http_relay_p99", " µs", 0),
            show("throughput", "×", 2),
            show("rss_kib", " KiB", 1),
            show("heap_kib", " KiB", 1),
            show("http_relay_rss_kib", " KiB", 1),
            show("http_relay_heap_kib", " KiB", 1),
            show("cpu", " µs", 1),
            show("relay_cpu", " µs", 1),
            show("http_relay_cpu", " µs", 1),
            show("sleeps", "", 2),
            show("allocations", "", 1),
            show("others", "", 2),
            verdict(s),
        );
    }
    out
}

/// Every pair's stores side by side, or nothing with one store.
pub fn summary_store_table(summaries: &[Value]) -> String {
    let mut out = String::new();
    for s in summaries {
        let Some(figures) = s["stores"].as_array().filter(|f| !f.is_empty()) else {
            continue;
        };
        if out.is_empty() {
            let _ = writeln!(out, "| Pair | {STORE_HEADER}");
            let _ = writeln!(
                out,
                "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
            );
        }
        store_rows(&mut out, s["pair"].as_str(), figures);
    }
    out
}

/// Which of issue 7's targets the pair misses ("met" when none; "failed" when streams failed).
fn verdict(s: &Value) -> String {
    if s["failed"].as_u64().unwrap_or(0) > 0 {
        return "FAILED streams".to_owned();
    }
    let misses: Vec<&str> = [
        ("p50", TARGET_P50_US, "p50 > 50 µs"),
        ("p99", TARGET_P99_US, "p99 > 500 µs"),
        ("rss_kib", TARGET_KIB, "RSS > 32 KiB"),
    ]
    .into_iter()
    .filter(|(key, target, _)| s[*key].as_f64().is_some_and(|v| v > *target))
    .map(|(_, _, miss)| miss)
    .collect();
    match misses.is_empty() {
        true => "met".to_owned(),
        false => misses.join(", "),
    }
}
