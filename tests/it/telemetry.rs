//! Traces as an operator's collector receives them: a small OTLP/HTTP receiver decodes what the proxy
//! exports with the OpenTelemetry protobuf types, for a run from an AG-UI client to an A2A agent that
//! continues the client's `traceparent`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, Span};
use prost::Message;
use serde_json::json;

use crate::support::a2a::{calls, sunny_then_rain};
use crate::support::ag_ui::{self, input, user};
use crate::support::binary::{serve_command, AgentBridge, TempConfig};
use crate::support::{send, within, Route, Routes};

/// An OTLP/HTTP receiver on 127.0.0.1: every span it was sent, with its service's name. Stops on drop.
struct Collector {
    url: String,
    spans: Arc<Mutex<Vec<(String, Span)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the collector");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let spans: Arc<Mutex<Vec<(String, Span)>>> = Arc::default();
        let kept = Arc::clone(&spans);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = Arc::clone(&kept);
                let service = service_fn(move |request: Request<Incoming>| {
                    let kept = Arc::clone(&kept);
                    async move { Ok::<_, hyper::Error>(receive(request, &kept).await) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        Collector { url, spans, task }
    }

    /// The spans received once one is named `name` (bounded by [`within`]).
    async fn spans_once(&self, name: &str) -> Vec<(String, Span)> {
        within(&format!("a span named {name}"), async {
            loop {
                let spans = self.spans.lock().unwrap().clone();
                if spans.iter().any(|(_, span)| span.name == name) {
                    return spans;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }
}

/// Takes one export: `POST /v1/traces`, protobuf.
async fn receive(
    request: Request<Incoming>,
    spans: &Mutex<Vec<(String, Span)>>,
) -> Response<Full<Bytes>> {
    let right = request.method() == Method::POST
        && request.uri().path() == "/v1/traces"
        && request.headers()["content-type"] == "application/x-protobuf";
    let body = request
        .into_body()
        .collect()
        .await
        .map(|body| body.to_bytes());
    let Some(export) = body
        .ok()
        .filter(|_| right)
        .and_then(|body| ExportTraceServiceRequest::decode(body).ok())
    else {
        let mut refused = Response::new(Full::new(Bytes::new()));
        *refused.status_mut() = StatusCode::BAD_REQUEST;
        return refused;
    };
    let mut spans = spans.lock().unwrap();
    for resource in export.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|resource| &resource.attributes)
            .find(|attribute| attribute.key == "service.name")
            .and_then(|attribute| text(attribute.value.as_ref()?.value.as_ref()?))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            spans.extend(scope.spans.into_iter().map(|span| (service.clone(), span)));
        }
    }
    let mut answer = Response::new(Full::new(Bytes::new()));
    answer.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/x-protobuf"),
    );
    answer
}

fn text(value: &AnyValue) -> Option<String> {
    match value {
        AnyValue::StringValue(text) => Some(text.clone()),
        AnyValue::IntValue(number) => Some(number.to_string()),
        _ => None,
    }
}

/// The span's attribute `key`, as text.
fn attribute(span: &Span, key: &str) -> String {
    span.attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .and_then(|attribute| text(attribute.value.as_ref()?.value.as_ref()?))
        .unwrap_or_else(|| panic!("{key} on {}: {:?}", span.name, span.attributes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Asks `/weather` in `thread` with a client's `traceparent`; the answer is the agent's.
async fn ask_with_traceparent(proxy: &AgentBridge, thread: &str) {
    let body = input(thread, "r1", json!([user("u1", "weather?")]));
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{}/weather", proxy.address))
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"))
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a valid request");
    let response = within("the run", send(request)).await;
    let events = within("its stream", response.sse().rest()).await;
    assert_eq!(ag_ui::text_of(&events), "Sunny.");
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN_ID: &str = "00f067aa0ba902b7";

#[tokio::test]
async fn a_runs_spans_continue_the_clients_trace_through_to_an_a2a_agent() {
    let collector = Collector::start().await;
    let agent = sunny_then_rain("task-1", "task-2").await;
    let mut telemetry = toml::Table::new();
    telemetry.insert("otlp_endpoint".into(), collector.url.clone().into());
    let routes = Routes::default()
        .set("telemetry", toml::Value::Table(telemetry))
        .route(Route::new("weather", "/weather", "ag-ui", "a2a").upstream(&agent.url()));
    let config = TempConfig::new("telemetry", &routes.to_string());
    let mut command = serve_command(&config.0);
    // The batch goes out within 100 ms rather than the default 5 s.
    command.env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let proxy = AgentBridge::start(command);

    ask_with_traceparent(&proxy, "thread-7").await;

    let spans = collector.spans_once("invoke_agent weather").await;
    let (service, run) = spans
        .iter()
        .find(|(_, span)| span.name == "invoke_agent weather")
        .expect("the run's span");
    assert_eq!(service, "agent-bridge");
    assert_eq!(hex(&run.trace_id), TRACE_ID, "the client's trace goes on");
    assert_eq!(hex(&run.parent_span_id), CLIENT_SPAN_ID);
    assert_eq!(run.kind, SpanKind::Client as i32);
    assert_eq!(attribute(run, "gen_ai.provider.name"), "a2a");
    assert_eq!(attribute(run, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(attribute(run, "gen_ai.conversation.id"), "thread-7");
    assert_eq!(attribute(run, "agent_bridge.route"), "weather");
    assert_eq!(attribute(run, "agent_bridge.pair"), "ag-ui->a2a");
    assert_eq!(attribute(run, "agent_bridge.outcome"), "completed");
    assert_eq!(attribute(run, "a2a.task.id"), "task-1");
    assert_eq!(attribute(run, "a2a.context.id"), "ctx-up-1");

    let children: Vec<&Span> = spans
        .iter()
        .map(|(_, span)| span)
        .filter(|span| span.parent_span_id == run.span_id)
        .collect();
    let request = children
        .iter()
        .find(|span| span.kind == SpanKind::Client as i32)
        .unwrap_or_else(|| panic!("the upstream request's span among {children:#?}"));
    assert_eq!(request.name, "POST");
    assert_eq!(attribute(request, "http.response.status_code"), "200");
    assert_eq!(attribute(request, "url.full"), agent.url());
    assert_eq!(attribute(request, "server.address"), "127.0.0.1");
    let task_ids = run
        .attributes
        .iter()
        .filter(|a| a.key == "a2a.task.id")
        .count();
    assert_eq!(task_ids, 1, "each attribute once: {:?}", run.attributes);
    let names: Vec<&str> = children.iter().map(|span| span.name.as_str()).collect();
    assert!(
        names.contains(&"store load") && names.contains(&"store save"),
        "{names:?}"
    );

    // The agent was sent the trace, with the request's span as its parent.
    let sent = calls(&agent, "message/stream");
    assert_eq!(
        sent[0].header("traceparent"),
        format!("00-{TRACE_ID}-{}-01", hex(&request.span_id))
    );
}

#[tokio::test]
async fn without_telemetry_a_clients_traceparent_still_reaches_the_agent() {
    let agent = sunny_then_rain("task-1", "task-2").await;
    let routes = Routes::default()
        .route(Route::new("weather", "/weather", "ag-ui", "a2a").upstream(&agent.url()));
    let config = TempConfig::new("telemetry-off", &routes.to_string());
    let proxy = AgentBridge::start(serve_command(&config.0));

    ask_with_traceparent(&proxy, "thread-8").await;

    let sent = calls(&agent, "message/stream");
    assert_eq!(
        sent[0].header("traceparent"),
        format!("00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"),
        "the client's own, as it came: no span of the proxy's"
    );
}
