//! The fault matrix (issue 19, "bounded under every load and fault"): every outbound against every way an
//! upstream fails — refused, silent, stalled after its head, a 5xx HTML page, frames that are not its protocol,
//! a frame past the event cap, a body that ends mid-run, a drip of one byte a second, and a client that leaves.
//!
//! Each case runs one turn through the proxy, from a client of an inbound picked per outbound, with a short
//! route `timeout` where the fault is slowness. The client must get its own protocol's error, with the fault's
//! code, exactly once, within the route's timeout and a margin (or, when it leaves, the proxy must close the
//! upstream request at once), and afterwards the proxy must be back where
//! it was: no reply still being played to it at the upstream (no connection the silent upstream still holds
//! open), no run in flight, no client connection open. All cases run at once, each with its own proxy and
//! upstream, so the matrix takes about one short route timeout.

use std::future::Future;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use crate::support;
use crate::support::{a2a, post_json, within_for, Proxy, Received, Reply, Route, Silent, Upstream};

/// The route's `timeout` (the whole upstream run) where the fault is an upstream that takes too long.
const TIMEOUT: Duration = Duration::from_secs(2);
/// The route's `timeout` where the fault is anything else: the proxy must see that fault itself, and tell it
/// (a timeout would be the wrong error), however slow a loaded machine is at moving an oversized frame.
const PATIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How late after the route's timeout the client's error may come (two shared cores, debug build).
const MARGIN: Duration = Duration::from_millis(1500);
/// How long the proxy may take to let go of everything once the client has its answer (or left): less than
/// [`TIMEOUT`], so a proxy that holds on until the route times out fails.
const SETTLE: Duration = Duration::from_secs(1);
const MIB: usize = 1024 * 1024;
const PATH: &str = "/agents/faulty";

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Nothing listens at the upstream's address.
    Refused,
    /// The upstream accepts the connection and never answers.
    Silent,
    /// The upstream sends its response head, then nothing.
    Stall,
    /// A 502 with an HTML page, as a load balancer in front of a dead agent answers.
    HtmlError,
    /// A healthy start, then a frame that is not JSON.
    Malformed,
    /// A healthy start, then one frame just past the outbound's event cap.
    Oversized,
    /// A healthy start, then the body ends cleanly before the run did.
    EofMidRun,
    /// A healthy start, then a frame one byte a second.
    Drip,
    /// A healthy start, then nothing; the client leaves after the agent's first word.
    ClientLeaves,
}

impl Fault {
    const ALL: [Fault; 9] = [
        Fault::Refused,
        Fault::Silent,
        Fault::Stall,
        Fault::HtmlError,
        Fault::Malformed,
        Fault::Oversized,
        Fault::EofMidRun,
        Fault::Drip,
        Fault::ClientLeaves,
    ];

    /// The code of the error the client is told (`None`: the client left).
    fn code(self) -> Option<&'static str> {
        Some(match self {
            Fault::Refused => "UPSTREAM_UNREACHABLE",
            Fault::Silent | Fault::Stall | Fault::Drip => "UPSTREAM_TIMEOUT",
            Fault::HtmlError => "UPSTREAM_HTTP_ERROR",
            Fault::Malformed | Fault::Oversized => "UPSTREAM_MALFORMED",
            Fault::EofMidRun => "UPSTREAM_EOF",
            Fault::ClientLeaves => return None,
        })
    }

    /// The route's `timeout` for this fault.
    fn route_timeout(self) -> Duration {
        match self {
            Fault::Silent | Fault::Stall | Fault::Drip | Fault::ClientLeaves => TIMEOUT,
            _ => PATIENT_TIMEOUT,
        }
    }

    /// The answer to the request that streams the run, after `opening` (a healthy run's first frames), from an
    /// upstream whose outbound accepts events up to `event_cap` bytes.
    fn reply(self, opening: &str, event_cap: usize) -> Reply {
        let started = Reply::sse().frame(opening);
        match self {
            Fault::Stall => Reply::sse().hang(),
            Fault::HtmlError => Reply::status(502)
                .header("content-type", "text/html")
                .body("<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"),
            // Named, for the CMDC gateway's framing; the other protocols ignore the name.
            Fault::Malformed => started
                .frame("event: message_delta\ndata: {\"delta\": <html>\n\n")
                .hang(),
            Fault::Oversized => started
                .frame(&format!(
                    "event: message_delta\ndata: {{\"delta\":\"{}",
                    "x".repeat(event_cap + 1)
                ))
                .hang(),
            Fault::EofMidRun => started,
            Fault::Drip => "event: message_delta\ndata: {\"delta\":\"Hello\"}\n\n"
                .chars()
                .fold(started, |reply, byte| {
                    reply.frame(&byte.to_string()).delay(1000)
                }),
            Fault::ClientLeaves => started.hang(),
            Fault::Refused | Fault::Silent => unreachable!("no reply: {self:?}"),
        }
    }
}

/// An outbound as the matrix drives it.
struct Outbound {
    name: &'static str,
    /// The inbound whose client runs the turn.
    client: Client,
    /// The largest event it accepts (its `MAX_EVENT_BYTES`): an oversized frame is just past it, as every
    /// byte costs time on a loaded machine.
    event_cap: usize,
    /// The route's `[routes.translate]` options.
    translate: &'static [(&'static str, &'static str)],
    /// A healthy run's first frames, answering `request`, ending with an event the client sees.
    opening: fn(&Received) -> String,
    /// The healthy answer to a request that does not stream the run (`None`: it does; the fault answers it).
    other: fn(&Received) -> Option<Reply>,
}

fn no_other_request(_: &Received) -> Option<Reply> {
    None
}

const AG_UI: Outbound = Outbound {
    name: "ag-ui",
    client: Client::A2a,
    event_cap: agent_bridge::sse::MAX_EVENT_BYTES,
    translate: &[],
    opening: |_| {
        sse(&[
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hello"}),
        ])
    },
    other: no_other_request,
};

const A2A: Outbound = Outbound {
    name: "a2a",
    client: Client::AgUi,
    event_cap: agent_bridge::sse::MAX_EVENT_BYTES,
    translate: &[],
    opening: |request| {
        let task = a2a::task("task-1", "ctx-1");
        let results = [
            task.submitted(),
            task.working(),
            task.chunk("a1", "Hello", false, false),
        ];
        sse(&results
            .map(|result| json!({"jsonrpc": "2.0", "id": request.body["id"], "result": result})))
    },
    // `tasks/get` after a cut stream, `tasks/cancel` after a client left: no such task.
    other: |request| {
        (a2a::rpc_method(request) != "message/stream").then(|| {
            let error = json!({"jsonrpc": "2.0", "id": request.body["id"],
                               "error": {"code": -32001, "message": "Task not found"}});
            Reply::status(200)
                .header("content-type", "application/json")
                .body(&error.to_string())
        })
    },
};

const AGENTSCOPE: Outbound = Outbound {
    name: "agentscope",
    client: Client::AgKit,
    event_cap: 16 * MIB,
    translate: &[],
    opening: |_| {
        let response = |n: u64, status: &str| {
            json!({"sequence_number": n, "object": "response", "status": status, "id": "response_1",
                   "session_id": "s1"})
        };
        sse(&[
            response(0, "created"),
            response(1, "in_progress"),
            json!({"sequence_number": 2, "object": "message", "status": "in_progress", "id": "msg_1",
                   "type": "message", "role": "assistant", "content": []}),
            json!({"sequence_number": 3, "object": "content", "status": "in_progress", "type": "text",
                   "index": 0, "delta": true, "msg_id": "msg_1", "text": "Hello"}),
        ])
    },
    other: no_other_request,
};

const AG_KIT: Outbound = Outbound {
    name: "ag-kit",
    client: Client::AgentScope,
    event_cap: agent_bridge::sse::MAX_EVENT_BYTES,
    translate: &[],
    // A v0 stream has no end marker to miss: it ends mid-run only inside a tool call (or an event).
    opening: |_| {
        sse(&[
            json!({"type": "text", "content": "Hello"}),
            json!({"type": "tool-call-start", "toolCallId": "c1", "toolCallName": "lookup"}),
        ])
    },
    other: no_other_request,
};

const CMDC: Outbound = Outbound {
    name: "cmdc",
    client: Client::AgUi,
    event_cap: agent_bridge::sse::MAX_EVENT_BYTES,
    translate: &[("model", "test-model")],
    opening: |_| {
        let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
        [
            event("agent_start", json!({})),
            event("message_start", json!({})),
            event("message_delta", json!({"delta": "Hello"})),
        ]
        .concat()
    },
    // The session and the prompt are taken; the run's events (`GET …/events`) are the fault.
    other: |request| {
        let json = |status: u16, body: Value| {
            Reply::status(status)
                .header("content-type", "application/json")
                .body(&body.to_string())
        };
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", path) if path.ends_with("/events") => None,
            ("POST", path) if path.ends_with("/v1/sessions") => {
                Some(json(201, json!({"sessionId": "s1", "status": "idle"})))
            }
            ("POST", path) if path.ends_with("/prompt") => Some(json(
                202,
                json!({"requestId": "q1", "sessionId": "s1", "queued": false}),
            )),
            _ => Some(json(202, json!({}))),
        }
    },
};

/// `data: <event>` frames.
fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|event| format!("data: {event}\n\n"))
        .collect()
}

/// The upstream of one case.
enum Agent {
    Nowhere(String),
    Silent(Silent),
    Scripted(Upstream),
}

impl Agent {
    async fn start(outbound: &Outbound, fault: Fault) -> Agent {
        match fault {
            Fault::Refused => Agent::Nowhere(Upstream::refused_url().await),
            Fault::Silent => Agent::Silent(Silent::serve().await),
            fault => {
                let (opening, other, cap) = (outbound.opening, outbound.other, outbound.event_cap);
                Agent::Scripted(
                    Upstream::answer_with(move |request, _| {
                        other(request).unwrap_or_else(|| fault.reply(&opening(request), cap))
                    })
                    .await,
                )
            }
        }
    }

    fn url(&self) -> String {
        match self {
            Agent::Nowhere(url) => url.clone(),
            Agent::Silent(silent) => silent.url(),
            Agent::Scripted(upstream) => upstream.url(),
        }
    }

    /// What the proxy still holds open at the upstream.
    fn held(&self) -> usize {
        match self {
            Agent::Nowhere(_) => 0,
            Agent::Silent(silent) => silent.open_connections(),
            Agent::Scripted(upstream) => upstream.replies_in_flight(),
        }
    }
}

/// The inbound client of a case.
#[derive(Clone, Copy, Debug)]
enum Client {
    AgUi,
    A2a,
    AgKit,
    AgentScope,
}

impl Client {
    fn inbound(self) -> &'static str {
        match self {
            Client::AgUi => "ag-ui",
            Client::A2a => "a2a",
            Client::AgKit => "ag-kit",
            Client::AgentScope => "agentscope",
        }
    }

    /// Where the turn is posted, under the route's path.
    fn url(self, proxy: &Proxy) -> String {
        let below = match self {
            Client::AgKit => "/send-message",
            Client::AgentScope => "/process",
            Client::AgUi | Client::A2a => "",
        };
        proxy.url(&format!("{PATH}{below}"))
    }

    fn turn(self) -> Value {
        match self {
            Client::AgUi => {
                support::ag_ui::input("t1", "r1", json!([support::ag_ui::user("u1", "Hi")]))
            }
            Client::A2a => json!({"jsonrpc": "2.0", "id": 1, "method": "message/stream",
                                  "params": {"message": a2a::message("Hi")}}),
            Client::AgKit => json!({"messages": [{"role": "user", "content": "Hi"}],
                                    "conversationId": "c1"}),
            Client::AgentScope => {
                support::agentscope::request("s1", json!([support::agentscope::user("u1", "Hi")]))
            }
        }
    }

    /// The codes of the errors the client was told, in its protocol: the error events of its stream, or the
    /// error answered instead of one.
    fn errors(self, answer: &Answer) -> Vec<String> {
        match answer {
            Answer::Refused(status, body) => vec![refusal_code(*status, body)],
            Answer::Streamed(frames) => frames
                .iter()
                .filter_map(|data| self.error_event_code(&serde_json::from_str(data).ok()?))
                .collect(),
        }
    }

    fn error_event_code(self, event: &Value) -> Option<String> {
        let text = |value: &Value| value.as_str().map(str::to_owned);
        match self {
            Client::AgUi => (event["type"] == "RUN_ERROR").then(|| text(&event["code"]))?,
            Client::AgKit => (event["type"] == "error").then(|| text(&event["code"]))?,
            Client::AgentScope => (event["object"] == "response" && event["status"] == "failed")
                .then(|| text(&event["error"]["code"]))?,
            // A failed task's final status says "<message> (<code>)".
            Client::A2a => {
                let status = &event["result"]["status"];
                if event["result"]["final"] != true || status["state"] != "failed" {
                    return event.get("error").map(|error| error.to_string());
                }
                let said = a2a::status_text(status);
                let code = said.rsplit_once('(')?.1.trim_end_matches(')');
                Some(code.to_owned())
            }
        }
    }
}

/// The code of an error answered before any stream: `{"error":{"code"}}` (AG-Kit), or what the body says.
fn refusal_code(status: u16, body: &Value) -> String {
    match body["error"]["code"].as_str() {
        Some(code) => code.to_owned(),
        None => format!("HTTP {status}: {body}"),
    }
}

/// What a client got back.
#[derive(Debug)]
enum Answer {
    /// The `data` of every frame of its stream, to its end.
    Streamed(Vec<String>),
    /// An error status and its JSON body, instead of a stream.
    Refused(u16, Value),
}

/// Posts the client's turn and reads the answer to its end.
async fn converse(client: Client, proxy: &Proxy) -> Answer {
    let response = post_json(&client.url(proxy), &client.turn()).await;
    let streamed = response.status == 200
        && response
            .header("content-type")
            .starts_with("text/event-stream");
    if !streamed {
        let status = response.status.as_u16();
        return Answer::Refused(status, response.json().await);
    }
    let mut stream = response.sse();
    let mut frames = Vec::new();
    while let Some(data) = stream.next_data().await {
        frames.push(data);
    }
    Answer::Streamed(frames)
}

/// Posts the client's turn, reads until the agent's first word ("Hello") and leaves.
async fn leave_after_the_first_word(client: Client, proxy: &Proxy) -> Result<(), String> {
    let response = post_json(&client.url(proxy), &client.turn()).await;
    let mut stream = response.sse();
    while let Some(data) = stream.next_data().await {
        if data.contains("Hello") {
            return Ok(());
        }
    }
    Err("the stream ended before the agent's first word".to_owned())
}

/// Runs one case; `Err` says what went wrong.
async fn case(outbound: &Outbound, fault: Fault) -> Result<(), String> {
    let agent = Agent::start(outbound, fault).await;
    let route = Route::new("faulty", PATH, outbound.client.inbound(), outbound.name)
        .upstream(&agent.url())
        .timeout(&format!("{}ms", fault.route_timeout().as_millis()))
        .translate_all(outbound.translate);
    let proxy = Proxy::start(route).await;
    let client = outbound.client;
    let began = Instant::now();
    match fault.code() {
        // The upstream's reply is in flight now: it must be left too.
        None => {
            bounded(
                TIMEOUT,
                "first word",
                leave_after_the_first_word(client, &proxy),
            )
            .await??
        }
        Some(expected) => {
            let answer = bounded(
                fault.route_timeout() + MARGIN,
                "the client's error",
                converse(client, &proxy),
            )
            .await?;
            let errors = client.errors(&answer);
            if errors != [expected] {
                return Err(format!(
                    "the client was told {errors:?}, not [{expected}], in {answer:?}"
                ));
            }
        }
    }
    let answered = began.elapsed();
    bounded(SETTLE, "the proxy to let go of the run", async {
        while agent.held() > 0
            || proxy.gauges().runs_in_flight() > 0
            || proxy.gauges().open_connections() > 0
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .map_err(|e| {
        format!(
            "{e} (after {answered:?}): held at the upstream {}, runs in flight {}, connections {}",
            agent.held(),
            proxy.gauges().runs_in_flight(),
            proxy.gauges().open_connections()
        )
    })
}

/// `future`, or an error naming `what` if it takes longer than `limit`.
async fn bounded<T>(
    limit: Duration,
    what: &str,
    future: impl Future<Output = T>,
) -> Result<T, String> {
    tokio::time::timeout(limit, future)
        .await
        .map_err(|_| format!("no {what} within {limit:?}"))
}

/// Every outbound, each with the inbound whose client drives it.
const OUTBOUNDS: [Outbound; 5] = [AG_UI, A2A, AGENTSCOPE, AG_KIT, CMDC];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upstream_fault_reaches_the_client_as_its_own_error_once_and_leaves_nothing_behind() {
    let cases = OUTBOUNDS.iter().flat_map(|outbound| {
        Fault::ALL.map(|fault| async move { (outbound.name, fault, case(outbound, fault).await) })
    });
    let results = within_for(
        PATIENT_TIMEOUT + MARGIN + SETTLE + Duration::from_secs(5),
        "every case",
        futures_util::future::join_all(cases),
    )
    .await;
    let failures: Vec<String> = results
        .into_iter()
        .filter_map(|(outbound, fault, result)| {
            Some(format!("{outbound} / {fault:?}: {}", result.err()?))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
