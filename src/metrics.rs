//! The proxy's Prometheus metrics, which the admin listener's `GET /metrics` serves. They know no protocol:
//! the hub reports how each run went once it ended ([`RunReport`]), and the server's [`Gauges`] are read at
//! each scrape. Labels are a route, its pair, an outcome, an event's kind, an error's source and code, never a
//! tenant's, a conversation's or a task's id (there is no bound on how many of those there are).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::error::{Error, Source};
use crate::gauges::Gauges;
use crate::model::EventCounts;

/// The content type of what [`Metrics::encode`] writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PairLabels {
    route: String,
    pair: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    route: String,
    pair: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    route: String,
    pair: String,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    pair: String,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    route: String,
    pair: String,
    source: &'static str,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DowngradeLabels {
    route: String,
    what: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

type Seconds = Family<PairLabels, Histogram, fn() -> Histogram>;

/// How one run went, as the hub reports it when the run ended.
pub struct RunReport<'a> {
    /// `completed`, `paused`, `failed` or `cancelled`.
    pub outcome: &'static str,
    /// What the run failed with.
    pub error: Option<&'a Error>,
    pub duration: Duration,
    /// From the run's start to the agent's first event; `None` when it sent none.
    pub first_event: Option<Duration>,
    /// The interrupt answers the run carried to the agent.
    pub answers: usize,
    /// The events the agent's side emitted, and those handed to the client.
    pub events_in: &'a EventCounts,
    pub events_out: &'a EventCounts,
    /// What the run's pair could not carry, and how often ([`crate::translate::Losses`]).
    pub downgrades: &'a [(&'static str, u64)],
}

/// Every metric of the proxy, registered once.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    open_runs: Family<PairLabels, Gauge>,
    runs: Family<RunLabels, Counter>,
    durations: Seconds,
    first_events: Seconds,
    first_bytes: Seconds,
    events_in: Family<EventLabels, Counter>,
    events_out: Family<EventLabels, Counter>,
    answers: Family<PairLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    downgrades: Family<DowngradeLabels, Counter>,
    reloads: Family<OutcomeLabels, Counter>,
    connections: Gauge,
    runs_in_flight: Gauge,
    gauges: Arc<Gauges>,
}

/// Seconds from 10 ms to about 80 s.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

/// Seconds from 1 ms to about 65 s: an upstream on the same network answers within milliseconds.
fn short_seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Metrics {
    /// The metrics, with `gauges` read at each scrape.
    pub fn new(gauges: Arc<Gauges>) -> Arc<Self> {
        let mut metrics = Self {
            registry: Registry::with_prefix("agent_bridge"),
            requests: Family::default(),
            open_runs: Family::default(),
            runs: Family::default(),
            durations: Family::new_with_constructor(seconds),
            first_events: Family::new_with_constructor(seconds),
            first_bytes: Family::new_with_constructor(short_seconds),
            events_in: Family::default(),
            events_out: Family::default(),
            answers: Family::default(),
            errors: Family::default(),
            downgrades: Family::default(),
            reloads: Family::default(),
            connections: Gauge::default(),
            runs_in_flight: Gauge::default(),
            gauges,
        };
        let registry = &mut metrics.registry;
        registry.register(
            "requests",
            "Requests a route answered, by HTTP status (a stream counts when its head is sent)",
            metrics.requests.clone(),
        );
        registry.register(
            "open_runs",
            "Runs of a route under way (its open streams, and runs that outlive their client)",
            metrics.open_runs.clone(),
        );
        registry.register(
            "runs",
            "Runs ended, by outcome: completed, paused, failed, cancelled",
            metrics.runs.clone(),
        );
        registry.register(
            "run_duration_seconds",
            "From a run's request to its last event",
            metrics.durations.clone(),
        );
        registry.register(
            "time_to_first_event_seconds",
            "From a run's request to the agent's first event",
            metrics.first_events.clone(),
        );
        registry.register(
            "upstream_first_byte_seconds",
            "From sending a request to the route's upstream to the head of its answer, per request",
            metrics.first_bytes.clone(),
        );
        registry.register(
            "events_in",
            "Canonical events the agents' side emitted, by type",
            metrics.events_in.clone(),
        );
        registry.register(
            "events_out",
            "Canonical events handed to clients, by type",
            metrics.events_out.clone(),
        );
        registry.register(
            "answers",
            "Runs that carried answers to interrupts (approvals, questions) to their agent",
            metrics.answers.clone(),
        );
        registry.register(
            "errors",
            "Failed runs, by the error's source (client, upstream, config, internal) and code",
            metrics.errors.clone(),
        );
        registry.register(
            "downgrades",
            "What a route's pair could not carry: canonical events its clients were not shown, by type, and runs \
             whose client tools its agent could not be offered (client_tools)",
            metrics.downgrades.clone(),
        );
        registry.register(
            "config_reloads",
            "Reloads of the routes file, by outcome: applied, or failed (the running routes stayed)",
            metrics.reloads.clone(),
        );
        registry.register(
            "open_connections",
            "Client connections open",
            metrics.connections.clone(),
        );
        registry.register(
            "runs_in_flight",
            "Runs started and not ended yet",
            metrics.runs_in_flight.clone(),
        );
        Arc::new(metrics)
    }

    /// Counts a request route `route` answered with status `code`.
    pub fn answered(&self, route: &str, pair: &str, code: u16) {
        let labels = RequestLabels {
            route: route.to_owned(),
            pair: pair.to_owned(),
            code,
        };
        self.requests.get_or_create(&labels).inc();
    }

    /// Where the requests to route `route`'s upstream time the head of their answer.
    pub fn upstream_first_byte(&self, route: &str, pair: &str) -> FirstByte {
        let labels = PairLabels {
            route: route.to_owned(),
            pair: pair.to_owned(),
        };
        FirstByte(self.first_bytes.get_or_create(&labels).clone())
    }

    /// Counts a run of route `route` as under way until the returned guard drops.
    pub fn run_opened(&self, route: &str, pair: &str) -> OpenRun {
        let labels = PairLabels {
            route: route.to_owned(),
            pair: pair.to_owned(),
        };
        let gauge = self.open_runs.get_or_create(&labels).clone();
        gauge.inc();
        OpenRun(gauge)
    }

    /// Counts a run of route `route` (pair `pair`, `inbound->outbound`) that ended as `report` says.
    pub fn run_ended(&self, route: &str, pair: &str, report: &RunReport<'_>) {
        let labels = PairLabels {
            route: route.to_owned(),
            pair: pair.to_owned(),
        };
        let run = RunLabels {
            route: labels.route.clone(),
            pair: labels.pair.clone(),
            outcome: report.outcome,
        };
        self.runs.get_or_create(&run).inc();
        let seconds = report.duration.as_secs_f64();
        self.durations.get_or_create(&labels).observe(seconds);
        if let Some(first) = report.first_event {
            let seconds = first.as_secs_f64();
            self.first_events.get_or_create(&labels).observe(seconds);
        }
        if report.answers > 0 {
            self.answers.get_or_create(&labels).inc();
        }
        for (family, counts) in [
            (&self.events_in, report.events_in),
            (&self.events_out, report.events_out),
        ] {
            for (kind, count) in counts.counted() {
                let labels = EventLabels {
                    route: labels.route.clone(),
                    pair: labels.pair.clone(),
                    r#type: kind,
                };
                family.get_or_create(&labels).inc_by(count);
            }
        }
        for &(what, count) in report.downgrades {
            let labels = DowngradeLabels {
                route: labels.route.clone(),
                what,
            };
            self.downgrades.get_or_create(&labels).inc_by(count);
        }
        if let Some(error) = report.error {
            let labels = ErrorLabels {
                route: labels.route,
                pair: labels.pair,
                source: source_name(error.source()),
                code: error.code_label(),
            };
            self.errors.get_or_create(&labels).inc();
        }
    }

    /// Counts a reload of the routes file: `applied`, or `failed`.
    pub fn reloaded(&self, outcome: &'static str) {
        self.reloads.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// Every metric, in the OpenMetrics text format ([`CONTENT_TYPE`]), which Prometheus scrapes.
    pub fn encode(&self) -> String {
        self.connections
            .set(i64::try_from(self.gauges.open_connections()).unwrap_or(i64::MAX));
        self.runs_in_flight
            .set(i64::try_from(self.gauges.runs_in_flight()).unwrap_or(i64::MAX));
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// The histogram of one route's upstream time to first byte ([`Metrics::upstream_first_byte`]).
#[derive(Clone, Debug)]
pub struct FirstByte(Histogram);

impl FirstByte {
    pub fn observe(&self, waited: Duration) {
        self.0.observe(waited.as_secs_f64());
    }
}

/// A run counted as under way ([`Metrics::run_opened`]) until dropped.
pub struct OpenRun(Gauge);

impl Drop for OpenRun {
    fn drop(&mut self) {
        self.0.dec();
    }
}

fn source_name(source: Source) -> &'static str {
    match source {
        Source::Client => "client",
        Source::Upstream => "upstream",
        Source::Config => "config",
        Source::Internal => "internal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Event;

    #[test]
    fn a_run_is_counted_by_outcome_its_events_by_type_and_a_failure_by_source_and_code() {
        let metrics = Metrics::new(Arc::new(Gauges::default()));
        let mut events = EventCounts::default();
        for event in [
            Event::RunStarted,
            Event::RunStarted,
            Event::StateSnapshot(Default::default()),
        ] {
            events.count(&event);
        }
        let failed = Error::upstream_timeout("too slow");
        let report = |outcome, error, answers| RunReport {
            outcome,
            error,
            duration: Duration::from_millis(30),
            first_event: Some(Duration::from_millis(5)),
            answers,
            events_in: &events,
            events_out: &events,
            downgrades: &[("tool_call_start", 2)],
        };
        metrics.run_ended("chat", "ag-ui->a2a", &report("completed", None, 1));
        metrics.run_ended("chat", "ag-ui->a2a", &report("completed", None, 0));
        metrics.run_ended("chat", "ag-ui->a2a", &report("failed", Some(&failed), 0));
        let agents_own = Error::upstream_agent("E_QUOTA_7731", "the agent's own failure");
        metrics.run_ended(
            "chat",
            "ag-ui->a2a",
            &report("failed", Some(&agents_own), 0),
        );
        metrics.answered("chat", "ag-ui->a2a", 200);
        metrics.answered("chat", "ag-ui->a2a", 401);
        metrics
            .upstream_first_byte("chat", "ag-ui->a2a")
            .observe(Duration::from_millis(3));
        let open = metrics.run_opened("chat", "ag-ui->a2a");
        let still_open = metrics.encode();
        drop(open);

        let text = metrics.encode();
        for line in [
            r#"agent_bridge_runs_total{route="chat",pair="ag-ui->a2a",outcome="completed"} 2"#,
            r#"agent_bridge_runs_total{route="chat",pair="ag-ui->a2a",outcome="failed"} 2"#,
            r#"agent_bridge_errors_total{route="chat",pair="ag-ui->a2a",source="upstream",code="AGENT_ERROR"} 1"#,
            r#"agent_bridge_events_out_total{route="chat",pair="ag-ui->a2a",type="run_started"} 8"#,
            r#"agent_bridge_events_in_total{route="chat",pair="ag-ui->a2a",type="state_snapshot"} 4"#,
            r#"agent_bridge_answers_total{route="chat",pair="ag-ui->a2a"} 1"#,
            r#"agent_bridge_errors_total{route="chat",pair="ag-ui->a2a",source="upstream",code="UPSTREAM_TIMEOUT"} 1"#,
            r#"agent_bridge_run_duration_seconds_count{route="chat",pair="ag-ui->a2a"} 4"#,
            r#"agent_bridge_time_to_first_event_seconds_count{route="chat",pair="ag-ui->a2a"} 4"#,
            r#"agent_bridge_requests_total{route="chat",pair="ag-ui->a2a",code="401"} 1"#,
            r#"agent_bridge_open_runs{route="chat",pair="ag-ui->a2a"} 0"#,
            r#"agent_bridge_downgrades_total{route="chat",what="tool_call_start"} 8"#,
            r#"agent_bridge_upstream_first_byte_seconds_bucket{le="0.004",route="chat",pair="ag-ui->a2a"} 1"#,
            "agent_bridge_open_connections 0",
            "agent_bridge_runs_in_flight 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        let open = r#"agent_bridge_open_runs{route="chat",pair="ag-ui->a2a"} 1"#;
        assert!(still_open.contains(open), "{still_open}");
        assert!(!text.contains("text_delta"), "kinds never seen: no line");
        assert!(
            !text.contains("E_QUOTA"),
            "an agent's own codes are no label"
        );
    }
}
