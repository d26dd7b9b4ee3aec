//! The one table of protocols: for each, where its runs are served, what its client sends (the inbound
//! face's peer) and what its scripted agent streams (the outbound face's peer). Everything else in the tool
//! is protocol-independent: each text delta carries its send stamp as `@<ns>;`, read out of the raw bytes
//! of whatever frames carry it ([`crate::load::StampScanner`]).

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpStream;

pub use agent_bridge::config::Protocol;

const PROMPT: &str = "Tell me a story.";

/// What the tool knows of each protocol: where its runs go, its client's request, its agent's stream.
pub trait Peer: Sized {
    fn upstream_url(self, addr: SocketAddr) -> String;
    fn outbound_translate(self) -> &'static str;
    async fn open(self, server: Server, n: usize) -> Result<Opened, String>;
    #[allow(dead_code)] // benches/soak.rs's
    async fn send_malformed(self, server: Server) -> Result<(), String>;
    fn stream_type(self) -> &'static str;
    fn script(self, request: &Value) -> Script;
}

impl Peer for Protocol {
    /// The route's `upstream` for a scripted agent of this protocol at `addr`.
    fn upstream_url(self, addr: SocketAddr) -> String {
        format!("http://{addr}{}", run_path(self))
    }

    /// The route's `[routes.translate]` lines this protocol needs as the outbound face.
    fn outbound_translate(self) -> &'static str {
        match self {
            // A gateway session needs a model; nothing else does.
            Protocol::Cmdc => "model = \"bench\"\n",
            _ => "",
        }
    }

    // --- The client ---------------------------------------------------------------------------------------

    /// Starts run `n` against `server` the way this protocol's clients do.
    async fn open(self, server: Server, n: usize) -> Result<Opened, String> {
        if self == Protocol::Cmdc {
            return open_cmdc_run(server).await;
        }
        let mut connection = server.connect().await?;
        let response = connection
            .post(&server.path(run_path(self)), run_request(self, n))
            .await?;
        expect_status(&response, StatusCode::OK)?;
        Ok(Opened {
            body: response.into_body(),
            connections: vec![connection],
            session: None,
        })
    }

    /// Posts a body that is not JSON where this protocol's runs start (a CMDC client's: where sessions are
    /// created); the server must refuse it as this protocol's servers do: 400, AgentScope's 422 (FastAPI's
    /// validation error), A2A's JSON-RPC parse error (-32700) in a 200.
    async fn send_malformed(self, server: Server) -> Result<(), String> {
        let path = match self {
            Protocol::Cmdc => server.path("/v1/sessions"),
            _ => server.path(run_path(self)),
        };
        let mut connection = server.connect().await?;
        let response = connection
            .send(Method::POST, &path, Bytes::from_static(b"{\"not json"))
            .await?;
        match self {
            Protocol::A2a => {
                expect_status(&response, StatusCode::OK)?;
                let body = response.into_body().collect().await;
                let body = body.map_err(|e| format!("reading the refusal: {e}"))?;
                let body = String::from_utf8_lossy(&body.to_bytes()).into_owned();
                match body.contains("-32700") {
                    true => Ok(()),
                    false => Err(format!("not a JSON-RPC parse error: {body}")),
                }
            }
            Protocol::Agentscope => expect_status(&response, StatusCode::UNPROCESSABLE_ENTITY),
            _ => expect_status(&response, StatusCode::BAD_REQUEST),
        }
    }

    // --- The scripted agent -------------------------------------------------------------------------------

    /// The `Content-Type` of the agent's stream.
    fn stream_type(self) -> &'static str {
        match self {
            Protocol::AgUi | Protocol::AgKit => "text/event-stream",
            Protocol::A2a | Protocol::Agentscope | Protocol::Cmdc => {
                "text/event-stream; charset=utf-8"
            }
        }
    }

    /// The script of one run answering `request` (the run's JSON body; the prompt for CMDC).
    fn script(self, request: &Value) -> Script {
        Script {
            protocol: self,
            request_id: request.get("id").cloned().unwrap_or(Value::Null),
            session_id: request.get("session_id").cloned().unwrap_or(Value::Null),
            sequence: 0,
            text: String::new(),
        }
    }
}

/// Where a run is posted, under a server's base path (the route's path on the proxy, none on the agent).
/// A CMDC "run" is a gateway session: its base is the gateway's.
fn run_path(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::AgUi | Protocol::A2a | Protocol::Cmdc => "",
        Protocol::Agentscope => "/process",
        Protocol::AgKit => "/send-message",
    }
}

/// The request body that starts run `n` (unique ids per run, as separate clients would send).
fn run_request(protocol: Protocol, n: usize) -> Value {
    match protocol {
        Protocol::AgUi => json!({"threadId": format!("bench-{n}"), "runId": format!("run-{n}"),
            "messages": [{"id": "u1", "role": "user", "content": PROMPT}],
            "tools": [], "context": [], "state": {}, "forwardedProps": {}}),
        Protocol::A2a => json!({"jsonrpc": "2.0", "id": n, "method": "message/stream",
            "params": {"message": {"kind": "message", "role": "user", "messageId": format!("m-{n}"),
                                   "parts": [{"kind": "text", "text": PROMPT}]}}}),
        Protocol::Agentscope => json!({"input": [{"object": "message", "status": "created",
            "id": "u1", "type": "message", "role": "user",
            "content": [{"object": "content", "type": "text", "delta": false, "text": PROMPT}]}],
            "stream": true, "session_id": format!("s-{n}"), "user_id": "u1"}),
        Protocol::AgKit => json!({"messages": [{"role": "user", "content": PROMPT}],
            "conversationId": format!("c-{n}")}),
        Protocol::Cmdc => json!({"text": PROMPT}),
    }
}

/// One scripted run in its protocol's frames: [`Script::head`] at once, a [`Script::delta`] per paced
/// text delta, [`Script::tail`] at once.
pub struct Script {
    protocol: Protocol,
    /// A2A: the JSON-RPC id every response echoes.
    request_id: Value,
    /// AgentScope: the session every `response` echoes.
    session_id: Value,
    /// AgentScope: the next `sequence_number`.
    sequence: u64,
    /// AgentScope: the text so far, repeated whole when the message completes.
    text: String,
}

impl Script {
    pub fn head(&mut self) -> Vec<Bytes> {
        match self.protocol {
            Protocol::AgUi => vec![
                data(json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})),
                data(json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"})),
            ],
            Protocol::A2a => vec![
                self.a2a(json!({"kind": "task", "id": "task-1", "contextId": "ctx-1",
                                "status": {"state": "submitted"}})),
                self.a2a(a2a_status("working", false)),
            ],
            Protocol::Agentscope => {
                let created = self.agentscope_response("created", Value::Null);
                let in_progress = self.agentscope_response("in_progress", Value::Null);
                let message = agentscope_message("in_progress", Value::Null);
                vec![created, in_progress, self.agentscope(message)]
            }
            Protocol::AgKit => Vec::new(),
            Protocol::Cmdc => vec![
                cmdc("prompt_received", json!({"text": PROMPT})),
                cmdc("agent_start", json!({})),
                cmdc("message_start", json!({})),
            ],
        }
    }

    pub fn delta(&mut self, index: usize, text: &str) -> Bytes {
        match self.protocol {
            Protocol::AgUi => {
                data(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": text}))
            }
            // The first chunk creates the artifact, the others append to it.
            Protocol::A2a => self.a2a(json!({"kind": "artifact-update", "taskId": "task-1",
                "contextId": "ctx-1", "append": index > 0, "lastChunk": false,
                "artifact": {"artifactId": "a1", "name": "response", "parts": [{"kind": "text", "text": text}]}})),
            Protocol::Agentscope => {
                self.text.push_str(text);
                let content = agentscope_content("in_progress", json!(true), text);
                self.agentscope(content)
            }
            Protocol::AgKit => data(json!({"type": "text", "content": text})),
            Protocol::Cmdc => cmdc("message_delta", json!({ "delta": text })),
        }
    }

    pub fn tail(&mut self) -> Vec<Bytes> {
        match self.protocol {
            Protocol::AgUi => vec![
                data(json!({"type": "TEXT_MESSAGE_END", "messageId": "m1"})),
                data(json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"})),
            ],
            Protocol::A2a => vec![self.a2a(a2a_status("completed", true))],
            Protocol::Agentscope => {
                // As the runtime does: the whole text once more, in the completed content and message.
                let whole = agentscope_content("completed", Value::Null, &self.text);
                let whole = self.agentscope_value(whole);
                let message =
                    self.agentscope_value(agentscope_message("completed", json!([whole])));
                let completed = self.agentscope_response("completed", json!([message]));
                vec![frame(&whole), frame(&message), completed]
            }
            Protocol::AgKit => vec![Bytes::from_static(b"data: [DONE]\n\n")],
            Protocol::Cmdc => vec![cmdc("agent_end", json!({"messageCount": 2}))],
        }
    }

    /// One JSON-RPC response of the `message/stream` call, framed as a2a-sdk frames it (CRLF).
    fn a2a(&self, result: Value) -> Bytes {
        let response = json!({"jsonrpc": "2.0", "id": self.request_id, "result": result});
        Bytes::from(format!("data: {response}\r\n\r\n"))
    }

    /// Numbers an AgentScope object (every frame has the next `sequence_number`).
    fn agentscope_value(&mut self, mut object: Value) -> Value {
        object["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        object
    }

    fn agentscope(&mut self, object: Value) -> Bytes {
        frame(&self.agentscope_value(object))
    }

    fn agentscope_response(&mut self, status: &str, output: Value) -> Bytes {
        let response = json!({"object": "response", "status": status, "error": null, "id": "response_1",
            "created_at": 1795311189, "completed_at": null, "output": output, "usage": null,
            "session_id": self.session_id});
        self.agentscope(response)
    }
}

fn frame(json: &Value) -> Bytes {
    Bytes::from(format!("data: {json}\n\n"))
}

fn data(json: Value) -> Bytes {
    frame(&json)
}

fn cmdc(event: &str, data: Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

fn a2a_status(state: &str, is_final: bool) -> Value {
    json!({"kind": "status-update", "taskId": "task-1", "contextId": "ctx-1",
           "status": {"state": state}, "final": is_final})
}

fn agentscope_message(status: &str, content: Value) -> Value {
    json!({"object": "message", "status": status, "error": null, "id": "msg_1", "type": "message",
           "role": "assistant", "content": content, "code": null, "message": null, "usage": null,
           "metadata": {}})
}

fn agentscope_content(status: &str, delta: Value, text: &str) -> Value {
    json!({"object": "content", "status": status, "error": null, "type": "text", "index": 0,
           "delta": delta, "msg_id": "msg_1", "text": text})
}

// ---------------------------------------------------------------------------------------------------------
// HTTP/1.1 as the clients speak it: each stream its own connection(s)

/// A run being streamed, and the connections it was started on (held until it ends, as a client holds
/// them).
pub struct Opened {
    pub body: Incoming,
    connections: Vec<Connection>,
    /// CMDC: the session's path, deleted once the run was read.
    session: Option<String>,
}

impl Opened {
    /// Ends the run as a tidy client does: a CMDC client deletes its session (the gateway keeps it for a day
    /// otherwise, and holds at most 10,000).
    pub async fn finish(mut self) -> Result<(), String> {
        let (Some(session), Some(control)) = (self.session.take(), self.connections.first_mut())
        else {
            return Ok(());
        };
        let deleted = control.send(Method::DELETE, &session, Bytes::new()).await?;
        expect_status(&deleted, StatusCode::OK)
    }
}

/// A server the clients talk to: the scripted agent (base path none) or the proxy (the route's path).
#[derive(Clone, Copy)]
pub struct Server {
    pub addr: SocketAddr,
    pub base: &'static str,
}

impl Server {
    fn path(self, suffix: &str) -> String {
        let path = format!("{}{suffix}", self.base);
        if path.is_empty() {
            "/".to_owned()
        } else {
            path
        }
    }

    async fn connect(self) -> Result<Connection, String> {
        let tcp = TcpStream::connect(self.addr)
            .await
            .map_err(|e| format!("connect to {}: {e}", self.addr))?;
        let _ = tcp.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Connection {
            sender,
            host: self.addr.to_string(),
        })
    }
}

struct Connection {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

impl Connection {
    async fn post(&mut self, path: &str, body: Value) -> Result<http::Response<Incoming>, String> {
        self.send(Method::POST, path, Bytes::from(body.to_string()))
            .await
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<http::Response<Incoming>, String> {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, &self.host)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "text/event-stream, application/json")
            .body(Full::new(body))
            .map_err(|e| format!("request: {e}"))?;
        self.sender
            .send_request(request)
            .await
            .map_err(|e| format!("{path}: {e}"))
    }
}

fn expect_status(response: &http::Response<Incoming>, status: StatusCode) -> Result<(), String> {
    match response.status() == status {
        true => Ok(()),
        false => Err(format!("status {} (expected {status})", response.status())),
    }
}

/// A CMDC client's run: creates a session, subscribes to its events (on a connection of their own, as the
/// stream holds it), then prompts; the events stream is the run.
async fn open_cmdc_run(server: Server) -> Result<Opened, String> {
    let mut control = server.connect().await?;
    let sessions = server.path("/v1/sessions");
    let created = control.post(&sessions, json!({"model": "bench"})).await?;
    expect_status(&created, StatusCode::CREATED)?;
    let created = created
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the session: {e}"))?
        .to_bytes();
    let created: Value = serde_json::from_slice(&created).map_err(|e| format!("session: {e}"))?;
    let session = created["sessionId"]
        .as_str()
        .ok_or_else(|| format!("no sessionId in {created}"))?;
    let session = format!("{sessions}/{session}");
    let mut subscription = server.connect().await?;
    let events = subscription
        .send(Method::GET, &format!("{session}/events"), Bytes::new())
        .await?;
    expect_status(&events, StatusCode::OK)?;
    let prompt = run_request(Protocol::Cmdc, 0);
    let accepted = control.post(&format!("{session}/prompt"), prompt).await?;
    expect_status(&accepted, StatusCode::ACCEPTED)?;
    Ok(Opened {
        body: events.into_body(),
        connections: vec![control, subscription],
        session: Some(session),
    })
}
