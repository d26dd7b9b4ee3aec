//! The proxy's Prometheus metrics, which the admin listener's `GET /metrics` serves ([`crate::admin`]). They
//! know no protocol: a route records how each of its runs ended, and the server's [`Gauges`] are read at
//! each scrape. Labels are a route, its pair, an outcome, an error's source and code, never a tenant's, a
//! conversation's or a task's id (there is no bound on how many of those there are).

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
struct ErrorLabels {
    route: String,
    pair: String,
    source: &'static str,
    code: String,
}

type Durations = Family<PairLabels, Histogram, fn() -> Histogram>;

/// Every metric of the proxy, registered once.
pub struct Metrics {
    registry: Registry,
    runs: Family<RunLabels, Counter>,
    durations: Durations,
    events: Family<PairLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    connections: Gauge,
    runs_in_flight: Gauge,
    gauges: Arc<Gauges>,
}

/// Run durations from 10 ms to about 80 s.
fn durations() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

impl Metrics {
    /// The metrics, with `gauges` read at each scrape.
    pub fn new(gauges: Arc<Gauges>) -> Arc<Self> {
        let mut metrics = Self {
            registry: Registry::with_prefix("agent_bridge"),
            runs: Family::default(),
            durations: Family::new_with_constructor(durations),
            events: Family::default(),
            errors: Family::default(),
            connections: Gauge::default(),
            runs_in_flight: Gauge::default(),
            gauges,
        };
        let registry = &mut metrics.registry;
        registry.register(
            "runs",
            "Runs ended, by route, pair and outcome (completed, paused, failed, cancelled)",
            metrics.runs.clone(),
        );
        registry.register(
            "run_duration_seconds",
            "How long runs took, from the request to their last event",
            metrics.durations.clone(),
        );
        registry.register(
            "events_out",
            "Canonical events handed to clients",
            metrics.events.clone(),
        );
        registry.register(
            "errors",
            "Runs that failed, by where the error came from (client, upstream, config, internal) and its code",
            metrics.errors.clone(),
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

    /// A run of route `route` (pair `pair`, `inbound->outbound`) ended with `outcome` (and `error`, when it
    /// failed), after `duration`, with `events` handed to its client.
    pub fn run_ended(
        &self,
        route: &str,
        pair: &str,
        outcome: &'static str,
        error: Option<&Error>,
        duration: Duration,
        events: u64,
    ) {
        let labels = PairLabels {
            route: route.to_owned(),
            pair: pair.to_owned(),
        };
        let run = RunLabels {
            route: labels.route.clone(),
            pair: labels.pair.clone(),
            outcome,
        };
        self.runs.get_or_create(&run).inc();
        self.durations
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
        self.events.get_or_create(&labels).inc_by(events);
        if let Some(error) = error {
            let labels = ErrorLabels {
                route: labels.route,
                pair: labels.pair,
                source: source_name(error.source()),
                code: error.code().to_owned(),
            };
            self.errors.get_or_create(&labels).inc();
        }
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

    #[test]
    fn a_run_is_counted_by_outcome_and_a_failure_by_source_and_code() {
        let metrics = Metrics::new(Arc::new(Gauges::default()));
        let ended = |outcome, error, millis, events| {
            let duration = Duration::from_millis(millis);
            metrics.run_ended("chat", "ag-ui->a2a", outcome, error, duration, events);
        };
        ended("completed", None, 30, 7);
        ended("completed", None, 50, 5);
        ended(
            "failed",
            Some(&Error::upstream_timeout("too slow")),
            2000,
            1,
        );

        let text = metrics.encode();
        for line in [
            r#"agent_bridge_runs_total{route="chat",pair="ag-ui->a2a",outcome="completed"} 2"#,
            r#"agent_bridge_runs_total{route="chat",pair="ag-ui->a2a",outcome="failed"} 1"#,
            r#"agent_bridge_events_out_total{route="chat",pair="ag-ui->a2a"} 13"#,
            r#"agent_bridge_errors_total{route="chat",pair="ag-ui->a2a",source="upstream",code="UPSTREAM_TIMEOUT"} 1"#,
            r#"agent_bridge_run_duration_seconds_count{route="chat",pair="ag-ui->a2a"} 3"#,
            "agent_bridge_open_connections 0",
            "agent_bridge_runs_in_flight 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
