//! Traces, after OpenTelemetry: a span for each run (`invoke_agent <route>`), with a child span for each
//! request to the upstream and each read and write of the conversation store. An incoming W3C
//! `traceparent` is the run's parent, and each upstream request carries the trace on; without `[telemetry]`
//! the spans are not recorded, yet the `traceparent` a client sent still reaches the upstream.
//!
//! The spans go as OTLP/HTTP protobuf to `{otlp_endpoint}/v1/traces`, batched, through the proxy's own
//! hyper client ([`Export`]): no second HTTP stack. It knows no protocol: the run's attributes come from
//! the hub, the upstream's ids from each outbound ([`crate::store::UpstreamState::IDS`]).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::Either;
use http::HeaderMap;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry::context::FutureExt;
use opentelemetry::global::{self, BoxedTracer};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HeaderExtractor, HeaderInjector, HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tokio::runtime::Handle;

use crate::config::TelemetryConfig;
use crate::error::{Error, Result};
use crate::store::UpstreamId;

/// How long one export may take, its answer read.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of a collector's answer is read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How long the spans still batched at shutdown may take to go.
const FLUSH_AT_SHUTDOWN: Duration = Duration::from_secs(5);

/// Whether spans are recorded and exported (`[telemetry] otlp_endpoint` is set). Without, no span is made
/// at all, and a client's trace is passed on as it came; a request without one costs nothing more.
static RECORDING: AtomicBool = AtomicBool::new(false);

fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

/// The tracer every span starts from: the provider [`init`] installed.
fn tracer() -> &'static BoxedTracer {
    static TRACER: OnceLock<BoxedTracer> = OnceLock::new();
    TRACER.get_or_init(|| global::tracer("agent-bridge"))
}

/// The exporting half, while `[telemetry] otlp_endpoint` is set: flush it with [`Telemetry::shutdown`].
pub struct Telemetry {
    provider: SdkTracerProvider,
}

/// Installs the W3C trace context propagator, and when `config` names a collector, the exporter (its HTTP
/// requests run on `runtime`). Call it before the first request.
pub fn init(config: &TelemetryConfig, runtime: Handle) -> Result<Option<Telemetry>> {
    global::set_text_map_propagator(TraceContextPropagator::new());
    let Some(endpoint) = &config.otlp_endpoint else {
        return Ok(None);
    };
    if endpoint.query().is_some() {
        return Err(Error::config(
            "[telemetry] otlp_endpoint: the collector's base URL takes no query (spans go to its /v1/traces)",
        ));
    }
    let url = format!("{}/v1/traces", endpoint.to_string().trim_end_matches('/'));
    let exporter = SpanExporter::builder()
        .with_http()
        .with_http_client(Export::new(runtime))
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| Error::config(format!("[telemetry] otlp_endpoint: {e}")))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name("agent-bridge")
                .build(),
        )
        .build();
    global::set_tracer_provider(provider.clone());
    RECORDING.store(true, Ordering::Relaxed);
    Ok(Some(Telemetry { provider }))
}

impl Telemetry {
    /// Sends the spans still batched (bounded), and stops exporting.
    pub async fn shutdown(self) {
        // The export it waits for runs on this runtime: the wait must not block it.
        let flushed = tokio::task::spawn_blocking(move || {
            self.provider.shutdown_with_timeout(FLUSH_AT_SHUTDOWN)
        })
        .await;
        if let Ok(Err(error)) = flushed {
            tracing::warn!("the last spans were not all exported: {error}");
        }
    }
}

/// The trace an incoming request belongs to (its `traceparent`); `None` without one.
pub fn incoming(headers: &HeaderMap) -> Option<Context> {
    headers.contains_key("traceparent").then(|| {
        global::get_text_map_propagator(|propagator| propagator.extract(&HeaderExtractor(headers)))
    })
}

/// Whether spans are made or a client's trace is carried on: otherwise what runs under `context` needs
/// none of it.
fn traced(context: &Context) -> bool {
    recording() || context.span().span_context().is_valid()
}

/// The upstream's ids a run's span names, as the outbound learns them and as the record keeps them, each
/// set once at the end (a span's attributes are appended, never replaced).
#[derive(Default)]
struct RunIds(Mutex<Vec<(&'static str, String)>>);

impl RunIds {
    /// Names `attribute` `value`, cut as the log line cuts it (an agent chose it).
    fn set(&self, attribute: &'static str, value: &str) {
        let value = crate::logging::clipped(value).to_string();
        let mut ids = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match ids.iter_mut().find(|(name, _)| *name == attribute) {
            Some(id) => id.1 = value,
            None => ids.push((attribute, value)),
        }
    }
}

/// A run of `route`, under the trace that was current when it was asked for.
pub struct RunSpan(Context);

impl RunSpan {
    /// Starts the span of a run of `route` (pair `inbound->outbound`) in conversation `conversation`.
    pub fn start(parent: &Context, route: &str, pair: &str, conversation: &str) -> Self {
        if !recording() {
            return Self(parent.clone());
        }
        let agent = pair.rsplit("->").next().unwrap_or(pair);
        let span = tracer()
            .span_builder(format!("invoke_agent {route}"))
            // The proxy invokes an agent elsewhere: a client of it, as GenAI's conventions have it.
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.provider.name", agent.to_owned()),
                KeyValue::new("gen_ai.agent.name", route.to_owned()),
                // A client chose it: cut as the log line cuts it.
                KeyValue::new(
                    "gen_ai.conversation.id",
                    crate::logging::clipped(conversation).to_string(),
                ),
                KeyValue::new("agent_bridge.route", route.to_owned()),
                KeyValue::new("agent_bridge.pair", pair.to_owned()),
            ])
            .start_with_context(tracer(), parent);
        Self(parent.with_span(span).with_value(RunIds::default()))
    }

    /// Runs `future` inside the span: the upstream's and the store's spans are its children. Not an `async
    /// fn`, which would hold `future` twice (as it was handed over, and as it runs).
    pub fn within<F: Future>(&self, future: F) -> impl Future<Output = F::Output> {
        match traced(&self.0) {
            true => Either::Left(future.with_context(self.0.clone())),
            false => Either::Right(future),
        }
    }

    /// Ends the span with how the run went, and the ids the upstream gave the conversation.
    pub fn end(self, outcome: &'static str, error: Option<&Error>, upstream: &[UpstreamId]) {
        if !recording() {
            return;
        }
        let span = self.0.span();
        span.set_attribute(KeyValue::new("agent_bridge.outcome", outcome));
        if let Some(ids) = self.0.get::<RunIds>() {
            for id in upstream {
                ids.set(id.attribute, &id.value);
            }
            let ids = std::mem::take(&mut *ids.0.lock().unwrap_or_else(PoisonError::into_inner));
            for (attribute, value) in ids {
                span.set_attribute(KeyValue::new(attribute, value));
            }
        }
        if let Some(error) = error {
            failed(&span, error);
        }
        span.end();
    }
}

/// Marks `span` failed with `error`'s code: never its message, which may quote what an upstream answered.
fn failed(span: &opentelemetry::trace::SpanRef<'_>, error: &Error) {
    span.set_attribute(KeyValue::new("error.type", error.code_label()));
    span.set_status(Status::error(error.code_label()));
}

/// Names the current run's upstream `attribute` (an id the outbound learned while reading the agent's
/// answer, which the record may not keep: an A2A task that ended).
pub fn annotate(attribute: &'static str, value: &str) {
    if !recording() {
        return;
    }
    if let Some(ids) = Context::current().get::<RunIds>() {
        ids.set(attribute, value);
    }
}

/// Runs `future` (a read or write of the conversation store) in a span `name` under the current one.
pub async fn store_span<F: Future>(name: &'static str, future: F) -> F::Output {
    if !recording() {
        return future.await;
    }
    let span = tracer()
        .span_builder(name)
        .with_kind(SpanKind::Internal)
        .start(tracer());
    let context = Context::current_with_span(span);
    let output = future.with_context(context.clone()).await;
    context.span().end();
    output
}

/// A request to an upstream, as a client span under the current one; its `traceparent` goes along.
pub struct RequestSpan(Context);

impl RequestSpan {
    /// Starts the span of `request` (`url` as logs show it: no query, no user info), and writes its trace
    /// context into the request's headers.
    pub fn start<B>(request: &mut http::Request<B>, url: &str) -> Self {
        let current = Context::current();
        if !traced(&current) {
            return Self(current);
        }
        let context = match recording() {
            true => {
                let uri = request.uri();
                let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
                    Some("https") => 443,
                    _ => 80,
                });
                let span = tracer()
                    .span_builder(request.method().as_str().to_owned())
                    .with_kind(SpanKind::Client)
                    .with_attributes([
                        KeyValue::new("http.request.method", request.method().as_str().to_owned()),
                        KeyValue::new("url.full", url.to_owned()),
                        KeyValue::new("server.address", uri.host().unwrap_or_default().to_owned()),
                        KeyValue::new("server.port", i64::from(port)),
                    ])
                    .start_with_context(tracer(), &current);
                current.with_span(span)
            }
            // The client's trace, carried on as it came.
            false => current,
        };
        global::get_text_map_propagator(|propagator| {
            propagator.inject_context(&context, &mut HeaderInjector(request.headers_mut()))
        });
        Self(context)
    }

    /// Ends the span at the head of the answer, with its status (4xx and 5xx are failures), or the failure
    /// to get one.
    pub fn end(self, answered: std::result::Result<u16, &Error>) {
        if !recording() {
            return;
        }
        let span = self.0.span();
        match answered {
            Ok(status) => {
                span.set_attribute(KeyValue::new(
                    "http.response.status_code",
                    i64::from(status),
                ));
                if status >= 400 {
                    span.set_attribute(KeyValue::new("error.type", status.to_string()));
                    span.set_status(Status::error(String::new()));
                }
            }
            Err(error) => failed(&span, error),
        }
        span.end();
    }
}

/// The exporter's HTTP client: hyper-util, its requests run on the given runtime (the batch exporter sends
/// from a thread of its own, which has none).
#[derive(Debug, Clone)]
struct Export {
    runtime: Handle,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Export {
    fn new(runtime: Handle) -> Self {
        let connector = crate::upstream::connector(HttpConnector::new(), EXPORT_TIMEOUT);
        Self {
            runtime,
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for Export {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> std::result::Result<http::Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let exported = async move {
            let response = client.request(request.map(Full::new)).await?;
            let (head, body) = response.into_parts();
            let body = Limited::new(body, MAX_ANSWER_BYTES).collect().await?;
            Ok::<_, HttpError>(http::Response::from_parts(head, body.to_bytes()))
        };
        // Made on the runtime: a timer needs one.
        let timed = async move { tokio::time::timeout(EXPORT_TIMEOUT, exported).await };
        match self.runtime.spawn(timed).await? {
            Ok(answer) => answer,
            Err(_) => Err("the OTLP collector did not answer in time".into()),
        }
    }
}
