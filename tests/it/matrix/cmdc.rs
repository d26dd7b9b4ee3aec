//! CMDC in the matrix: its client (the inbound face's peer) and its scripted gateway (the outbound face's
//! peer).
//!
//! The client behaves as cmdc-sdk 0.1.0 does (`specs/cmdc.md` §4.1), except that it subscribes before it
//! prompts (so a run's first words are read as they come, not replayed): it creates one session, registers its [`CLIENT_TOOL`] as a callback tool served by a small HTTP endpoint of
//! its own, and for each prompt opens `GET …/events`, POSTs the prompt (202) and reads until
//! `agent_end`/`agent_abort`. A CMDC run pauses *inside* the stream (`approval_required`, `ask_user`, a call
//! of its callback tool): [`Run::finish`] returns at the pause and the client keeps the stream, and the next
//! [`Client::start`] answers (`approve`/`reject`, `respond`, the held callback) and reads on in it.
//!
//! The agent is the scripted gateway of `tests/it/support/cmdc.rs`, which keeps each session's history
//! itself.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use super::peers::*;
use crate::support::cmdc::{self as gateway, Gate, Gateway, History, Step};
use crate::support::{within, CmdcClient, Response, SseStream, WAIT};

pub const INBOUND_TRANSLATE: &[(&str, &str)] = &[];
pub const OUTBOUND_TRANSLATE: &[(&str, &str)] = &[("model", "deepseek:deepseek-chat")];
/// The scripted gateway's key (`support::cmdc::KEY`).
pub const UPSTREAM_HEADERS: &[(&str, &str)] = &[("X-API-Key", "sk-cmdc-test-key")];
/// The code the proxy gives the gateway's `error` event ([`Script::FailMidStream`]): CMDC errors have none.
pub const FAILURE_CODE: &str = "CMDC_ERROR";

/// The client's API key (the matrix's CMDC routes are open: any key is let in).
const CLIENT_KEY: &str = "sk-matrix-client";
/// The model the client asks for (the proxy's route decides what the upstream gets).
const CLIENT_MODEL: &str = "deepseek:deepseek-chat";

// --- The client --------------------------------------------------------------------------------------------

pub struct Client {
    /// The REST calls, with [`CLIENT_KEY`].
    rest: CmdcClient,
    /// The session and the client's callback endpoint, made by the first exchange.
    session: Option<Session>,
    /// The events of the run going on (kept across a pause); boxed, as the other clients are small.
    events: Option<Box<Events>>,
    /// Whether the paused run's stream was left behind on another proxy ([`Client::retarget`]): the answer
    /// subscribes again, and the run's events already read come again first.
    resubscribe: bool,
    /// What the paused run waits for.
    pending: Option<Pending>,
    /// Every event of the current prompt's run so far, across its pauses.
    run: Vec<(String, Value)>,
    /// Each answer given to an approval of the current run: its `approvalId` and the decision the client
    /// gave, where it knows it (`None`: words that say neither yes nor no).
    decisions: Vec<(String, Option<bool>)>,
    /// Whether the client aborted the current run.
    aborted: bool,
}

struct Session {
    id: String,
    callbacks: Callbacks,
}

/// What a paused run waits for the client to answer.
enum Pending {
    Approval { id: String },
    Question { reference: String },
    Callback { answer: oneshot::Sender<String> },
}

impl Client {
    pub fn new(url: String) -> Client {
        Client {
            rest: CmdcClient::new(url).with_key(CLIENT_KEY),
            session: None,
            events: None,
            resubscribe: false,
            pending: None,
            run: Vec::new(),
            decisions: Vec::new(),
            aborted: false,
        }
    }

    /// The same session, now through the route served at `url` (another replica, a restarted proxy), as a
    /// client would go on after its stream broke: a run paused in the old stream is followed again from the
    /// new proxy, which replays the run from its start.
    pub fn retarget(&mut self, url: String) {
        self.rest = CmdcClient::new(url).with_key(CLIENT_KEY);
        self.resubscribe = self.events.take().is_some();
    }

    pub async fn start(&mut self, input: Input) -> Run<'_> {
        let mut seen = Seen::default();
        if let Err(error) = self.send(input).await {
            seen.errors.push(error);
            self.events = None;
        }
        Run {
            client: self,
            seen,
            call_ids: Vec::new(),
        }
    }

    /// Sends `input` natively; `Err` with the message of an HTTP error answer.
    async fn send(&mut self, input: Input) -> Result<(), String> {
        let session = self.session().await?;
        if std::mem::take(&mut self.resubscribe) && self.pending.is_some() {
            let response = self.call(Method::GET, &session, "events", None).await?;
            self.events = Some(Box::new(Events::new(response).replaying(&self.run)));
        }
        match (input, self.pending.take()) {
            (Input::Say(text), _) => {
                self.run.clear();
                self.decisions.clear();
                self.aborted = false;
                // Subscribed first, so that no event of the run can be published before we listen.
                let response = self.call(Method::GET, &session, "events", None).await?;
                self.events = Some(Box::new(Events::new(response)));
                self.call(
                    Method::POST,
                    &session,
                    "prompt",
                    Some(json!({ "text": text })),
                )
                .await
                .map(drop)
            }
            (Input::Approve(approved), Some(Pending::Approval { id })) => {
                self.decisions.push((id.clone(), Some(approved)));
                let action = if approved { "approve" } else { "reject" };
                let body = json!({ "approvalId": id });
                self.call(Method::POST, &session, action, Some(body))
                    .await
                    .map(drop)
            }
            // An approval answered in words: the gateway's `respond` takes any pending ref.
            (
                Input::Answer(text),
                Some(Pending::Question { reference } | Pending::Approval { id: reference }),
            ) => {
                if self.run.iter().any(|(name, data)| {
                    name == "approval_required" && data["approvalId"] == reference.as_str()
                }) {
                    self.decisions.push((reference.clone(), decides(&text)));
                }
                let body = json!({"ref": reference, "response": text});
                self.call(Method::POST, &session, "respond", Some(body))
                    .await
                    .map(drop)
            }
            (Input::ToolResult(result), Some(Pending::Callback { answer })) => answer
                .send(result)
                .map_err(|_| "the held callback was gone before its result".to_owned()),
            // Gateway 0.2's abort ends the paused run; its `agent_abort` is read on the same stream.
            (Input::Cancel, Some(_)) => {
                self.aborted = true;
                self.call(Method::POST, &session, "abort", None)
                    .await
                    .map(drop)
            }
            (input, _) => panic!("CMDC client: {input:?} answers no pending pause"),
        }
    }

    /// The session's id, creating the session (with the client's callback tool) on first use.
    async fn session(&mut self) -> Result<String, String> {
        if let Some(session) = &self.session {
            return Ok(session.id.clone());
        }
        let created = self
            .request(
                Method::POST,
                "/v1/sessions",
                Some(json!({"model": CLIENT_MODEL})),
            )
            .await?
            .json()
            .await;
        let id = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no sessionId in {created}"))
            .to_owned();
        let callbacks = Callbacks::serve().await;
        let tool = json!({"name": CLIENT_TOOL, "description": CLIENT_TOOL_DESCRIPTION,
                          "parameters": client_tool_parameters(), "callbackUrl": callbacks.url});
        self.call(Method::POST, &id, "tools", Some(tool)).await?;
        self.session = Some(Session {
            id: id.clone(),
            callbacks,
        });
        Ok(id)
    }

    /// `method …/v1/sessions/<session>/<action>`.
    async fn call(
        &self,
        method: Method,
        session: &str,
        action: &str,
        body: Option<Value>,
    ) -> Result<Response, String> {
        let path = format!("/v1/sessions/{session}/{action}");
        self.request(method, &path, body).await
    }

    /// One REST call with the headers cmdc-sdk sends; `Err` with the message of an HTTP error answer.
    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Response, String> {
        let response = self.rest.call(method, path, body).await;
        if response.status.is_success() {
            return Ok(response);
        }
        Err(http_error(response).await)
    }
}

impl Client {
    /// Fails unless the run that just ended has the shape of one CMDC run: one `prompt_received`, one
    /// `agent_start`, every approval answered resolved as decided, and it ends with `agent_end` once, or,
    /// after an `error` event, with `agent_abort {"reason": "error"}` (or the client's own abort).
    fn check_run(&self) {
        let run = &self.run;
        let count = |name: &str| run.iter().filter(|(n, _)| n == name).count();
        assert_eq!(count("prompt_received"), 1, "CMDC run: {run:#?}");
        assert_eq!(count("agent_start"), 1, "CMDC run: {run:#?}");
        let (last, data) = run.last().expect("the run's last event");
        if self.aborted {
            assert_eq!(last, "agent_abort", "CMDC run: {run:#?}");
        } else if count("error") > 0 {
            assert_eq!(
                (last.as_str(), data),
                ("agent_abort", &json!({"reason": "error"})),
                "CMDC run: {run:#?}"
            );
        } else {
            assert_eq!(last, "agent_end", "CMDC run: {run:#?}");
            assert_eq!(count("agent_abort"), 0, "CMDC run: {run:#?}");
        }
        assert_eq!(
            count("agent_end") + count("agent_abort"),
            1,
            "CMDC run: {run:#?}"
        );
        if self.aborted || count("error") > 0 {
            return;
        }
        for (id, decision) in &self.decisions {
            let resolved: Vec<Value> = run
                .iter()
                .filter(|(name, data)| {
                    name == "approval_resolved" && data["approvalId"] == id.as_str()
                })
                .map(|(_, data)| data["status"].clone())
                .collect();
            let Some(decided) = decision else { continue };
            let status = if *decided { "approved" } else { "rejected" };
            // An answer that says neither yes nor no resolves nothing: the approval is asked again.
            assert_eq!(
                resolved,
                [json!(status)],
                "CMDC run: approval {id}: {run:#?}"
            );
        }
    }
}

/// The message of an HTTP error answer, as cmdc-sdk reports it (the body's `message`, else its text).
async fn http_error(response: Response) -> String {
    let status = response.status;
    let bytes = response.bytes().await;
    let message = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|body| body["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
    format!("HTTP {status}: {message}")
}

pub struct Run<'a> {
    client: &'a mut Client,
    seen: Seen,
    /// The `callId` of each of `seen.tools`.
    call_ids: Vec<String>,
}

/// What one step of reading a run brought.
enum Read {
    Text(String),
    Other,
    /// The run waits for the client: the exchange is over, the stream is kept.
    Paused,
    /// The run (or its stream) ended.
    Ended,
}

impl Run<'_> {
    pub async fn until_text(&mut self) -> String {
        loop {
            match self.read().await {
                Read::Text(text) => return text,
                Read::Other => {}
                Read::Paused | Read::Ended => panic!(
                    "CMDC client: the exchange ended before any text: {:#?}",
                    self.seen
                ),
            }
        }
    }

    pub async fn finish(mut self) -> Seen {
        while matches!(self.read().await, Read::Text(_) | Read::Other) {}
        self.seen
    }

    /// `POST …/abort` for the running run (gateway ≥ 0.2; cmdc-sdk 0.1.0 has none), then the stream is
    /// dropped.
    pub async fn leave(self) {
        if let Some(session) = &self.client.session {
            let session = session.id.clone();
            if let Err(error) = self
                .client
                .call(Method::POST, &session, "abort", None)
                .await
            {
                eprintln!("CMDC client: abort answered {error}");
            }
        }
        self.client.events = None;
        self.client.pending = None;
    }

    /// Reads one event of the run, or a call of the client's callback tool.
    async fn read(&mut self) -> Read {
        let client = &mut *self.client;
        let (Some(events), Some(session)) = (&mut client.events, &mut client.session) else {
            return Read::Ended;
        };
        let next = tokio::select! {
            event = events.next() => event,
            call = session.callbacks.calls.recv() => {
                let call = call.expect("the callback endpoint lives as long as the client");
                self.seen.pause = Some(Pause::ClientTool { name: call.name, arguments: call.arguments });
                client.pending = Some(Pending::Callback { answer: call.answer });
                return Read::Paused;
            }
        };
        let read = match next {
            Some((name, data)) => {
                self.client.run.push((name.clone(), data.clone()));
                let read = self.seen_event(&name, &data);
                if matches!(read, Read::Ended) {
                    self.client.check_run();
                }
                read
            }
            None => Read::Ended,
        };
        if matches!(read, Read::Ended) {
            self.client.events = None;
        }
        read
    }

    /// Adds one CMDC event to what was seen.
    fn seen_event(&mut self, name: &str, data: &Value) -> Read {
        let text = |key: &str| data[key].as_str().unwrap_or_default().to_owned();
        match name {
            "message_delta" => {
                let delta = text("delta");
                self.seen.text.push_str(&delta);
                return Read::Text(delta);
            }
            // The client's own tool is not a tool of the agent's side.
            "tool_execution_start" if data["toolName"] != CLIENT_TOOL => {
                self.tool_call(&text("callId"), &text("toolName")).arguments = data["args"].clone();
            }
            "tool_execution_end" if data["toolName"] != CLIENT_TOOL => {
                let result = match &data["result"] {
                    Value::String(result) => result.clone(),
                    other => other.to_string(),
                };
                self.tool_call(&text("callId"), &text("toolName")).result = result;
            }
            "approval_required" => {
                self.seen.pause = Some(Pause::Approval {
                    text: format!("{} {} {}", text("toolName"), data["args"], text("hint")),
                });
                self.client.pending = Some(Pending::Approval {
                    id: text("approvalId"),
                });
                return Read::Paused;
            }
            "ask_user" => {
                let mut question = text("question");
                if data["options"].is_array() {
                    question = format!("{question} {}", data["options"]);
                }
                self.seen.pause = Some(Pause::Question { text: question });
                self.client.pending = Some(Pending::Question {
                    reference: text("ref"),
                });
                return Read::Paused;
            }
            "error" => self.seen.errors.push(text("reason")),
            "agent_end" | "agent_abort" => return Read::Ended,
            _ => {}
        }
        Read::Other
    }

    /// The tool call `call_id` shown so far, added when it is new.
    fn tool_call(&mut self, call_id: &str, name: &str) -> &mut ToolSeen {
        let index = match self.call_ids.iter().position(|id| id == call_id) {
            Some(index) => index,
            None => {
                self.call_ids.push(call_id.to_owned());
                self.seen.tools.push(ToolSeen {
                    name: name.to_owned(),
                    arguments: Value::Null,
                    result: String::new(),
                });
                self.seen.tools.len() - 1
            }
        };
        &mut self.seen.tools[index]
    }
}

/// A run's SSE stream as `(event name, data)`.
struct Events {
    stream: SseStream,
    /// How many bytes of `stream.raw` were parsed into events.
    parsed: usize,
    /// The names of the events read before on another stream, which this one replays first.
    replayed: std::collections::VecDeque<String>,
}

impl Events {
    fn new(response: Response) -> Events {
        Events {
            stream: response.sse(),
            parsed: 0,
            replayed: Default::default(),
        }
    }

    /// This stream, whose first events are `run` again: they are checked and skipped.
    fn replaying(mut self, run: &[(String, Value)]) -> Events {
        self.replayed = run.iter().map(|(name, _)| name.clone()).collect();
        self
    }

    /// The next event; `None` once the stream ended.
    async fn next(&mut self) -> Option<(String, Value)> {
        loop {
            let Some((name, data)) = self.parse() else {
                // `SseStream` frames the bytes; the event names are read back from what it received.
                self.stream.next_data().await?;
                continue;
            };
            let Some(read_before) = self.replayed.pop_front() else {
                return Some((name, data));
            };
            assert_eq!(name, read_before, "CMDC client: the run replayed otherwise");
        }
    }

    /// The next complete frame received and not parsed yet that carries data.
    fn parse(&mut self) -> Option<(String, Value)> {
        loop {
            let rest = &self.stream.raw[self.parsed..];
            let end = rest.windows(2).position(|w| w == b"\n\n")?;
            let frame = String::from_utf8_lossy(&rest[..end]).into_owned();
            self.parsed += end + 2;
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .map(|value| value.strip_prefix(' ').unwrap_or(value).to_owned())
            };
            let Some(data) = field("data:") else {
                continue; // a comment (heartbeat)
            };
            // httpx-sse delivers a frame without `event:` as "message".
            let name = field("event:").unwrap_or_else(|| "message".to_owned());
            let data = serde_json::from_str(&data).unwrap_or_else(|_| json!({}));
            return Some((name, data));
        }
    }
}

// --- The client's callback endpoint ------------------------------------------------------------------------

/// A call of the client's callback tool, held until the client answers it.
struct HeldCall {
    name: String,
    arguments: Value,
    answer: oneshot::Sender<String>,
}

/// The client's HTTP endpoint for its callback tool, on `127.0.0.1:0`; stopped when dropped.
struct Callbacks {
    url: String,
    calls: mpsc::UnboundedReceiver<HeldCall>,
    task: AbortHandle,
}

impl Callbacks {
    async fn serve() -> Callbacks {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the callback endpoint");
        let url = format!(
            "http://{}/callback",
            listener.local_addr().expect("its address")
        );
        let (calls, received) = mpsc::unbounded_channel();
        let task = tokio::spawn(accept_callbacks(listener, calls)).abort_handle();
        Callbacks {
            url,
            calls: received,
            task,
        }
    }
}

impl Drop for Callbacks {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_callbacks(listener: TcpListener, calls: mpsc::UnboundedSender<HeldCall>) {
    // Aborted with the accept task, so no connection outlives the endpoint.
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        let calls = calls.clone();
        let service = service_fn(move |request| {
            let calls = calls.clone();
            async move { Ok::<_, Infallible>(hold_callback(request, &calls).await) }
        });
        connections.spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Hands the call `{callId, toolName, args, sessionId}` to the client and answers `{"result"}` once it has
/// the result.
async fn hold_callback(
    request: Request<Incoming>,
    calls: &mpsc::UnboundedSender<HeldCall>,
) -> http::Response<Full<Bytes>> {
    let body = within("the callback request body", request.into_body().collect())
        .await
        .map(|body| body.to_bytes())
        .unwrap_or_default();
    let call: Value = serde_json::from_slice(&body).unwrap_or_default();
    let (answer, answered) = oneshot::channel();
    let held = HeldCall {
        name: call["toolName"].as_str().unwrap_or_default().to_owned(),
        arguments: call["args"].clone(),
        answer,
    };
    let reply = match calls.send(held) {
        Ok(()) => match tokio::time::timeout(WAIT, answered).await {
            Ok(Ok(result)) => json!({ "result": result }),
            _ => json!({"error": "the client did not answer"}),
        },
        Err(_) => json!({"error": "the client is gone"}),
    };
    http::Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(reply.to_string())))
        .expect("a valid callback answer")
}

// --- The agent -----------------------------------------------------------------------------------------------

/// The scripted CMDC gateway playing a [`Script`]; it keeps each session's history itself.
pub struct Agent {
    gateway: Gateway,
    gate: Gate,
}

impl Agent {
    pub async fn serve(script: Script) -> Agent {
        let gate = Gate::default();
        let released = gate.clone();
        let gateway =
            Gateway::start(move |text, history| steps(script, text, history, &released)).await;
        Agent { gateway, gate }
    }

    pub fn url(&self) -> String {
        self.gateway.url()
    }

    pub fn release(&self) {
        self.gate.open();
    }

    /// Each prompt as said, each `approve`/`reject` as a decision, each `respond` as an answer, each `abort`.
    pub fn heard(&self) -> Vec<Heard> {
        let received = self.gateway.received();
        let heard = received.iter().filter_map(|request| {
            let field = |name: &str| request.body[name].as_str().unwrap_or_default().to_owned();
            let action = request.path.rsplit('/').next().unwrap_or_default();
            match (request.method.as_str(), action) {
                ("POST", "prompt") => Some(Heard::Said(field("text"))),
                ("POST", "approve") => Some(Heard::Decision(true)),
                ("POST", "reject") => Some(Heard::Decision(false)),
                ("POST", "respond") => Some(Heard::Answer(field("response"))),
                ("POST", "abort") => Some(Heard::Cancelled),
                _ => None,
            }
        });
        heard.collect()
    }

    /// Whether `POST …/abort` arrived within `wait`: the proxy's CMDC outbound aborts the gateway's run when
    /// its client goes away (closing the events connection alone would leave the run going).
    pub async fn cancelled(&self, wait: std::time::Duration) -> bool {
        let aborted = async {
            while self.gateway.requests("POST abort").is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(wait, aborted).await.is_ok()
    }
}

/// The steps of one run of `script`, given the prompt and the session's history.
fn steps(script: Script, text: &str, history: &History, gate: &Gate) -> Vec<Step> {
    match script {
        // One LLM message, its rest held at the gate.
        Script::Text => [
            gateway::text(&[HELLO]),
            vec![
                gateway::wait(gate),
                gateway::event("message_delta", json!({"delta": &GREETING[HELLO.len()..]})),
                gateway::end(GREETING),
            ],
        ]
        .concat(),
        Script::ServerTool => [
            gateway::tool_execution(
                "call_weather",
                WEATHER_TOOL,
                weather_arguments(),
                WEATHER_RESULT,
            ),
            gateway::reply(&[WEATHER_TEXT]),
        ]
        .concat(),
        Script::Memory => {
            let said: Vec<&str> = history
                .prompts
                .iter()
                .map(String::as_str)
                .chain([text])
                .collect();
            gateway::reply(&[&you_said(&said)])
        }
        Script::Approval => vec![gateway::approval(
            "apr_1",
            APPROVAL_TOOL,
            approval_arguments(),
            "deletes a file",
            gateway::reply(&[APPROVED_TEXT]),
            gateway::reply(&[REJECTED_TEXT]),
        )],
        Script::Question => vec![gateway::ask("ask_1", QUESTION, None, |answer| {
            gateway::reply(&[&answered(answer)])
        })],
        Script::ClientTool if history.tools.iter().any(|tool| tool == CLIENT_TOOL) => {
            vec![gateway::call_tool(
                "call_time",
                CLIENT_TOOL,
                client_tool_arguments(),
                |result| gateway::reply(&[&tool_returned(result)]),
            )]
        }
        Script::ClientTool => gateway::reply(&[NO_TOOLS]),
        Script::FailMidStream => [
            gateway::text(&[HELLO]),
            vec![gateway::error(FAILURE), gateway::abort("error")],
        ]
        .concat(),
        Script::Hang => [gateway::text(&[HELLO]), vec![gateway::hang()]].concat(),
    }
}
