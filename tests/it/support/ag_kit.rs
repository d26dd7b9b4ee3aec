//! AG-Kit send-message v0 for the tests: [`Chat`], a client that behaves as `useChat` of
//! `@cloudbase/agent-ui-web` 0.0.24 (`specs/ag-kit.md` §2–3), what a scripted v0 upstream sends, and
//! [`memory_agent`], a v0 agent that keeps its own history per `conversationId`.
//!
//! No runnable v0 peer exists (spec §6), so the client follows the hook's source: delta `messages`, tools
//! with stringified `parameters`, `conversationId` on every request, the stream read until `data: [DONE]`,
//! client tools run after the stream and their results re-posted automatically once the whole round has
//! one. Everything `useChat` would choke on fails the test: frames other than the six v0 events (and the
//! proxy's `error`), `tool-call-args` when the last message is not the assistant's, arguments that are not
//! JSON at the end of a call, anything after `[DONE]`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::{post_json, Reply, SseStream, Upstream};

/// Runs a client tool: its arguments in, its result (a string, as `useChat` stringifies it) out.
type Handler = Arc<dyn Fn(&Value) -> String + Send + Sync>;

/// A `useChat` conversation against one URL.
pub struct Chat {
    url: String,
    pub conversation_id: String,
    tools: Vec<(Value, Handler)>,
    /// The hook's message list, as it builds it from the streams.
    pub messages: Vec<Value>,
    /// The last `interrupt` event received and not resumed yet.
    pub interrupt: Option<Value>,
}

/// Everything one user action streamed: the first request's stream and those of the automatic re-posts.
#[derive(Debug, Default)]
pub struct Exchange {
    pub streams: Vec<Streamed>,
}

/// One request's answer.
#[derive(Debug)]
pub struct Streamed {
    /// The v0 events, in order (without `[DONE]`).
    pub events: Vec<Value>,
    /// The request body that was sent.
    pub request: Value,
}

impl Chat {
    pub fn new(url: &str) -> Chat {
        Chat {
            url: url.to_owned(),
            conversation_id: uuid::Uuid::new_v4().to_string(),
            tools: Vec::new(),
            messages: Vec::new(),
            interrupt: None,
        }
    }

    /// Offers a client tool that the hook runs with `handler`.
    pub fn tool(
        mut self,
        name: &str,
        handler: impl Fn(&Value) -> String + Send + Sync + 'static,
    ) -> Chat {
        let schema = json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                            "properties": {"color": {"type": "string"}}, "additionalProperties": false});
        let tool = json!({"name": name, "description": format!("{name} (client side)"),
                          "parameters": schema.to_string()});
        self.tools.push((tool, Arc::new(handler)));
        self
    }

    /// The user says `text`; client tools the agent calls run and their results are re-posted, as the hook
    /// does, until a stream ends without a round to answer.
    pub async fn say(&mut self, text: &str) -> Exchange {
        let message = json!({"role": "user", "content": text});
        self.messages.push(message.clone());
        let body = self.body(json!({"messages": [message]}));
        self.exchange(body).await
    }

    /// Answers the pending interrupt with `answer` (sent as JSON text, `JSON.stringify(answer)`).
    pub async fn resume(&mut self, answer: Value) -> Exchange {
        let interrupt = self.interrupt.take().expect("an interrupt to resume");
        let body = self.body(
            json!({"resume": {"interruptId": interrupt["id"], "payload": answer.to_string()}}),
        );
        self.exchange(body).await
    }

    /// A request body with the hook's `tools` (omitted when none) and `conversationId`.
    pub fn body(&self, mut body: Value) -> Value {
        if !self.tools.is_empty() {
            body["tools"] = Value::Array(self.tools.iter().map(|(tool, _)| tool.clone()).collect());
        }
        body["conversationId"] = json!(self.conversation_id);
        body
    }

    async fn exchange(&mut self, mut body: Value) -> Exchange {
        let mut exchange = Exchange::default();
        loop {
            let streamed = self.post(body).await;
            let round = self.round(&streamed.events);
            exchange.streams.push(streamed);
            let Some(results) = self.run_round(&round) else {
                return exchange;
            };
            body = self.body(json!({ "messages": results }));
        }
    }

    /// Posts one body, checks the answer head and reads the stream to `[DONE]`, keeping the hook's state.
    pub async fn post(&mut self, body: Value) -> Streamed {
        let response = post_json(&self.url, &body).await;
        assert_eq!(
            response.status, 200,
            "a valid send-message request is answered 200"
        );
        assert_eq!(response.header("content-type"), "text/event-stream");
        let mut stream = response.sse();
        let events = self.read(&mut stream).await;
        Streamed {
            events,
            request: body,
        }
    }

    async fn read(&mut self, stream: &mut SseStream) -> Vec<Value> {
        let mut events = Vec::new();
        let mut args: HashMap<String, String> = HashMap::new();
        loop {
            let data = stream
                .next_data()
                .await
                .unwrap_or_else(|| panic!("the stream ended without data: [DONE]: {events:#?}"));
            if data == "[DONE]" {
                break;
            }
            let event: Value = serde_json::from_str(&data)
                .unwrap_or_else(|e| panic!("a v0 frame is not JSON ({e}): {data}"));
            self.apply(&event, &mut args);
            events.push(event);
        }
        assert!(
            stream.next_data().await.is_none(),
            "nothing may follow data: [DONE]"
        );
        let raw = String::from_utf8_lossy(&stream.raw);
        assert!(!raw.contains('\r'), "LF framing only: {raw:?}");
        for (call, arguments) in args {
            assert!(
                serde_json::from_str::<Value>(&arguments).is_ok(),
                "the arguments of {call} are not JSON: {arguments:?}"
            );
        }
        events
    }

    /// What the hook does with one event.
    fn apply(&mut self, event: &Value, args: &mut HashMap<String, String>) {
        let last_is_assistant = self
            .messages
            .last()
            .is_some_and(|m| m["role"] == "assistant");
        match event["type"].as_str().unwrap_or_default() {
            "text" => {
                let content = event["content"].as_str().expect("text.content is a string");
                if last_is_assistant {
                    let last = self.messages.last_mut().expect("a last message");
                    let text = format!("{}{content}", last["content"].as_str().unwrap_or_default());
                    last["content"] = json!(text);
                } else {
                    self.messages
                        .push(json!({"role": "assistant", "content": content, "toolCalls": []}));
                }
            }
            "tool-call-start" => {
                let id = event["toolCallId"]
                    .as_str()
                    .expect("tool-call-start.toolCallId");
                let name = event["toolCallName"]
                    .as_str()
                    .expect("tool-call-start.toolCallName");
                if !last_is_assistant {
                    self.messages
                        .push(json!({"role": "assistant", "content": "", "toolCalls": []}));
                }
                let last = self.messages.last_mut().expect("a last message");
                last["toolCalls"].as_array_mut().expect("toolCalls").push(
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": ""}}),
                );
                args.insert(id.to_owned(), String::new());
            }
            "tool-call-args" => {
                assert!(
                    last_is_assistant,
                    "useChat throws on tool-call-args after a tool message: {event}"
                );
                let id = event["toolCallId"]
                    .as_str()
                    .expect("tool-call-args.toolCallId");
                let delta = event["delta"]
                    .as_str()
                    .expect("tool-call-args.delta is a string");
                args.get_mut(id)
                    .unwrap_or_else(|| {
                        panic!("tool-call-args for a call that did not start: {event}")
                    })
                    .push_str(delta);
                let call = self.call_mut(id).expect("the call");
                let arguments = format!(
                    "{}{delta}",
                    call["function"]["arguments"].as_str().unwrap_or_default()
                );
                call["function"]["arguments"] = json!(arguments);
            }
            "tool-call-end" => {
                let id = event["toolCallId"]
                    .as_str()
                    .expect("tool-call-end.toolCallId");
                assert!(
                    self.call_mut(id).is_some(),
                    "tool-call-end for a call that did not start: {event}"
                );
            }
            "tool-result" => {
                let id = event["toolCallId"]
                    .as_str()
                    .expect("tool-result.toolCallId");
                assert!(
                    event["result"].is_string(),
                    "tool-result.result is a string: {event}"
                );
                self.messages
                    .push(json!({"role": "tool", "content": event["result"], "toolCallId": id}));
            }
            "interrupt" => {
                assert!(
                    event["id"].is_string() && event["reason"].is_string(),
                    "interrupt {{id, reason}}: {event}"
                );
                self.interrupt = Some(event.clone());
            }
            "error" => assert!(event["message"].is_string(), "error.message: {event}"),
            other => panic!("useChat knows no v0 event `{other}`: {event}"),
        }
    }

    fn call_mut(&mut self, id: &str) -> Option<&mut Value> {
        self.messages
            .iter_mut()
            .rev()
            .filter_map(|m| m["toolCalls"].as_array_mut())
            .flatten()
            .find(|call| call["id"] == id)
    }

    /// The calls of the stream that no `tool-result` answered: the round the client must run.
    fn round(&self, events: &[Value]) -> Vec<(String, String, Value)> {
        let answered: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "tool-result")
            .map(|e| &e["toolCallId"])
            .collect();
        events
            .iter()
            .filter(|e| e["type"] == "tool-call-start" && !answered.contains(&&e["toolCallId"]))
            .map(|e| {
                let id = e["toolCallId"].as_str().unwrap_or_default().to_owned();
                let name = e["toolCallName"].as_str().unwrap_or_default().to_owned();
                let arguments = events
                    .iter()
                    .filter(|a| a["type"] == "tool-call-args" && a["toolCallId"] == e["toolCallId"])
                    .map(|a| a["delta"].as_str().unwrap_or_default())
                    .collect::<String>();
                let arguments = serde_json::from_str(&arguments).unwrap_or(Value::Null);
                (id, name, arguments)
            })
            .collect()
    }

    /// Runs the round's client tools; the tool messages to re-post when every call has a result.
    fn run_round(&mut self, round: &[(String, String, Value)]) -> Option<Vec<Value>> {
        if round.is_empty() {
            return None;
        }
        let mut results = Vec::new();
        for (id, name, arguments) in round {
            let (_, handler) = self
                .tools
                .iter()
                .find(|(tool, _)| tool["name"] == name.as_str())?;
            let message = json!({"role": "tool", "content": handler(arguments), "toolCallId": id});
            self.messages.push(message.clone());
            results.push(message);
        }
        Some(results)
    }
}

impl Exchange {
    /// All text the assistant streamed, across the exchange.
    pub fn text(&self) -> String {
        self.events()
            .filter(|e| e["type"] == "text")
            .filter_map(|e| e["content"].as_str())
            .collect()
    }

    /// Every event of every stream, in order.
    pub fn events(&self) -> impl Iterator<Item = &Value> {
        self.streams.iter().flat_map(|s| &s.events)
    }

    /// The `type` of every event.
    pub fn types(&self) -> Vec<&str> {
        self.events()
            .map(|e| e["type"].as_str().unwrap_or("?"))
            .collect()
    }

    /// The one event of `kind`; fails unless exactly one arrived.
    pub fn only(&self, kind: &str) -> &Value {
        let found: Vec<&Value> = self.events().filter(|e| e["type"] == kind).collect();
        assert_eq!(found.len(), 1, "expected one `{kind}`: {:#?}", self.streams);
        found[0]
    }
}

/// Posts a raw body to an AG-Kit endpoint and returns the status and the JSON error body.
pub async fn refused(url: &str, body: &Value) -> (u16, Value) {
    let response = post_json(url, body).await;
    let status = response.status.as_u16();
    (status, response.json().await)
}

// --- What a scripted v0 upstream sends ---------------------------------------------------------------------

pub fn text(content: &str) -> Value {
    json!({"type": "text", "content": content})
}

/// One tool call: start, an args event per fragment, end.
pub fn call(id: &str, name: &str, args: &[&str]) -> Vec<Value> {
    let mut events =
        vec![json!({"type": "tool-call-start", "toolCallId": id, "toolCallName": name})];
    events.extend(
        args.iter()
            .map(|delta| json!({"type": "tool-call-args", "toolCallId": id, "delta": delta})),
    );
    events.push(json!({"type": "tool-call-end", "toolCallId": id}));
    events
}

pub fn result(id: &str, result: &str) -> Value {
    json!({"type": "tool-result", "toolCallId": id, "result": result})
}

pub fn interrupt(id: &str, reason: &str, payload: Value) -> Value {
    json!({"type": "interrupt", "id": id, "reason": reason, "payload": payload})
}

/// A v0 answer: the events, then `data: [DONE]`.
pub fn reply(events: impl IntoIterator<Item = Value>) -> Reply {
    Reply::sse().events(events).frame("data: [DONE]\n\n")
}

/// The `messages` of the n-th request an upstream received.
pub fn messages_of(upstream: &Upstream, nth: usize) -> Value {
    upstream.received()[nth].body["messages"].clone()
}

/// A v0 agent that keeps each conversation's history itself, keyed by `conversationId`: it answers "Your
/// name is X." when asked for a name it was told ("my name is X"), "Nice to meet you." otherwise, and
/// reports a tool message's content.
pub async fn memory_agent() -> Upstream {
    let histories: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    Upstream::answer_with(move |request, _| {
        let conversation = request.body["conversationId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut histories = histories.lock().expect("lock");
        let history = histories.entry(conversation).or_default();
        let messages = request.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        history.extend(
            messages
                .iter()
                .filter_map(|m| m["content"].as_str())
                .map(str::to_owned),
        );
        let last = messages.last().cloned().unwrap_or(Value::Null);
        let answer = if last["role"] == "tool" {
            format!(
                "The tool said: {}",
                last["content"].as_str().unwrap_or_default()
            )
        } else if last["content"]
            .as_str()
            .unwrap_or_default()
            .to_lowercase()
            .contains("what is my name")
        {
            let name = history.iter().find_map(|said| {
                let at = said.to_lowercase().find("my name is ")?;
                Some(
                    said[at + "my name is ".len()..]
                        .trim_end_matches('.')
                        .to_owned(),
                )
            });
            name.map_or_else(
                || "I do not know your name.".to_owned(),
                |name| format!("Your name is {name}."),
            )
        } else {
            "Nice to meet you.".to_owned()
        };
        reply([text(&answer)])
    })
    .await
}
