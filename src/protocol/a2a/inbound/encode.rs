//! A2A inbound, the stream face: one run's canonical events as the A2A results of its task
//! (`specs/a2a.md` §4.4). Pure and synchronous: the task registry stores what comes out, the inbound frames it.
//!
//! What each canonical event becomes (choices are marked):
//!
//! | canonical | A2A |
//! | --- | --- |
//! | `RunStarted` | `status-update` `working`, `final:false` |
//! | text message | `artifact-update`s of one artifact per message (fresh `artifactId`, `name:"response"`): the first delta without `append`, later deltas `append:true`, the end an empty text part with `append:true, lastChunk:true`; an empty message sends nothing |
//! | `Artifact` | `artifact-update` with its parts, `append` and `lastChunk` as given |
//! | `Interrupt` | remembered; the run's end becomes `input-required` with the prompt as `status.message` (choice: the first interrupt; an approval's tool and arguments, or question options, follow as a data part) |
//! | tool calls and results | choice: dropped (debug log), as `specs/a2a.md` §3.2 decides; with the tool-activity option, `status-update` `working` messages holding data parts `{"type":"tool-call",id,name,arguments,rawArguments}` / `{"type":"tool-result",toolCallId,payload[,isError]}` (the `@ag-ui/a2a` convention) |
//! | reasoning, usage, state, messages snapshots, steps, custom, raw | dropped (debug log): A2A has no form for them |
//! | `RunFinished` | the one final `status-update`: `completed` (with the status-message option, the whole reply text as `status.message`), `input-required`, or `canceled` |
//! | `RunError` | final `failed` with a `status.message` explaining the error (`canceled` for a cancellation) |

use std::time::SystemTime;

use serde_json::{json, Map, Value};
use tracing::debug;

use crate::error::Error;
use crate::face::EventEncoder;
use crate::model::{new_id, Event, Interrupt, InterruptKind, Outcome};
use crate::protocol::a2a::part_to_wire;
use crate::protocol::a2a::wire::{self, StreamResult, TaskState};

/// The artifact name of streamed reply text.
const RESPONSE_ARTIFACT: &str = "response";

/// What a route's options change in the output.
#[derive(Debug, Clone, Copy, Default)]
pub struct EncodeOptions {
    /// Also put the whole reply text in the final `status.message` (`[routes.translate] a2a_status_message`).
    pub status_message: bool,
    /// Show server-side tool calls and results as data parts of `working` status messages.
    pub tool_activity: bool,
}

/// Why a run was canceled by the proxy rather than by the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// `tasks/cancel`.
    Request,
    /// The client of `message/send` or `message/stream` went away.
    Disconnected,
}

impl CancelReason {
    fn text(self) -> &'static str {
        match self {
            Self::Request => "The task was canceled by tasks/cancel.",
            Self::Disconnected => "The client disconnected; the task was canceled.",
        }
    }
}

/// Encodes the canonical events of one run of one task.
#[derive(Debug)]
pub struct Encoder {
    task_id: String,
    context_id: String,
    options: EncodeOptions,
    /// The text message being streamed as an artifact.
    text: Option<OpenText>,
    /// The text of every finished message, for the status-message option.
    reply: Vec<String>,
    /// The interrupt the run pauses on.
    interrupt: Option<Interrupt>,
    /// The tool call being streamed: id, name, arguments so far.
    call: Option<(String, String, String)>,
    /// The final status was produced; nothing follows it.
    done: bool,
}

#[derive(Debug)]
struct OpenText {
    artifact_id: String,
    /// A chunk was sent (later ones append).
    started: bool,
    text: String,
}

impl Encoder {
    pub fn new(task_id: &str, context_id: &str, options: EncodeOptions) -> Self {
        Self {
            task_id: task_id.to_owned(),
            context_id: context_id.to_owned(),
            options,
            text: None,
            reply: Vec::new(),
            interrupt: None,
            call: None,
            done: false,
        }
    }

    /// The id of the interrupt the run paused on, once it did.
    pub fn interrupt_id(&self) -> Option<&str> {
        self.interrupt.as_ref().map(|i| i.id.as_str())
    }

    /// The final status was produced.
    pub fn is_done(&self) -> bool {
        self.done
    }
}

impl EventEncoder for Encoder {
    type Out = Vec<StreamResult>;

    /// Appends what `event` becomes (usually nothing or one result).
    fn encode(&mut self, event: Event, out: &mut Vec<StreamResult>) {
        if self.done {
            debug!(
                event = %crate::logging::clipped(&format!("{event:?}")),
                "a2a: event after the final status dropped"
            );
            return;
        }
        match event {
            Event::RunStarted => out.push(self.status(TaskState::Working, None, false)),
            Event::TextStart { .. } => {
                self.text = Some(OpenText {
                    artifact_id: new_id("artifact"),
                    started: false,
                    text: String::new(),
                });
            }
            Event::TextDelta { delta, .. } => self.text_chunk(delta, out),
            Event::TextEnd { .. } => self.text_end(out),
            Event::Artifact(artifact) => {
                let mut parts: Vec<wire::Part> = artifact.parts.iter().map(part_to_wire).collect();
                if parts.is_empty() {
                    // A2A requires at least one part.
                    parts.push(wire::Part::text(""));
                }
                out.push(self.artifact_update(
                    wire::Artifact {
                        artifact_id: artifact.id,
                        name: artifact.name,
                        description: None,
                        parts,
                        metadata: None,
                    },
                    artifact.append,
                    artifact.last_chunk,
                ));
            }
            Event::Interrupt(interrupt) => {
                if self.interrupt.is_some() {
                    debug!(id = %interrupt.id, "a2a: a task pauses on one interrupt; a second one dropped");
                } else {
                    self.interrupt = Some(interrupt);
                }
            }
            Event::ToolCallStart { call_id, name, .. } => {
                self.call = Some((call_id, name, String::new()));
            }
            Event::ToolCallArgs { delta, .. } => {
                if let Some((_, _, args)) = &mut self.call {
                    args.push_str(&delta);
                }
            }
            Event::ToolCallEnd { .. } => {
                let Some((id, name, args)) = self.call.take() else {
                    return;
                };
                if !self.options.tool_activity {
                    debug!(%id, %name, "a2a: server-side tool call not shown to the A2A client");
                    return;
                }
                let arguments = serde_json::from_str(&args).unwrap_or_else(|_| json!({}));
                let data = json!({"type": "tool-call", "id": id, "name": name,
                                  "arguments": arguments, "rawArguments": args});
                out.push(self.working_data(data));
            }
            Event::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => {
                if !self.options.tool_activity {
                    debug!(%call_id, "a2a: server-side tool result not shown to the A2A client");
                    return;
                }
                let payload =
                    serde_json::from_str(&content).unwrap_or(Value::String(content.clone()));
                let mut data =
                    json!({"type": "tool-result", "toolCallId": call_id, "payload": payload});
                if is_error {
                    data["isError"] = Value::Bool(true);
                }
                out.push(self.working_data(data));
            }
            Event::RunFinished { outcome, .. } => self.finish(outcome, out),
            Event::RunError(error) => self.fail(&error, out),
            other => debug!(
                event = %crate::logging::clipped(&format!("{other:?}")),
                "a2a: event with no A2A form dropped"
            ),
        }
    }
}

impl Encoder {
    /// The final `canceled` status, unless the run already ended.
    pub fn cancel(&mut self, reason: CancelReason, out: &mut Vec<StreamResult>) {
        if !self.done {
            let message = self.agent_message(vec![wire::Part::text(reason.text())]);
            out.push(self.status(TaskState::Canceled, Some(message), true));
        }
    }

    fn text_chunk(&mut self, delta: String, out: &mut Vec<StreamResult>) {
        let Some(open) = &mut self.text else {
            return;
        };
        if delta.is_empty() {
            return;
        }
        if self.options.status_message {
            open.text.push_str(&delta);
        }
        let append = open.started;
        open.started = true;
        let artifact = wire::Artifact {
            artifact_id: open.artifact_id.clone(),
            name: (!append).then(|| RESPONSE_ARTIFACT.to_owned()),
            description: None,
            parts: vec![wire::Part::text(delta)],
            metadata: None,
        };
        out.push(self.artifact_update(artifact, append, false));
    }

    fn text_end(&mut self, out: &mut Vec<StreamResult>) {
        let Some(open) = self.text.take() else {
            return;
        };
        if !open.started {
            return;
        }
        if !open.text.is_empty() {
            self.reply.push(open.text);
        }
        let artifact = wire::Artifact {
            artifact_id: open.artifact_id,
            name: None,
            description: None,
            parts: vec![wire::Part::text("")],
            metadata: None,
        };
        out.push(self.artifact_update(artifact, true, true));
    }

    fn finish(&mut self, outcome: Outcome, out: &mut Vec<StreamResult>) {
        let result = match outcome {
            Outcome::Completed => {
                let message = (self.options.status_message && !self.reply.is_empty())
                    .then(|| self.agent_message(vec![wire::Part::text(self.reply.join("\n"))]));
                self.status(TaskState::Completed, message, true)
            }
            Outcome::Interrupted => {
                let parts = match &self.interrupt {
                    Some(interrupt) => question_parts(&interrupt.kind),
                    None => vec![wire::Part::text("The agent is waiting for your input.")],
                };
                let message = self.agent_message(parts);
                self.status(TaskState::InputRequired, Some(message), true)
            }
            Outcome::Cancelled => {
                let message =
                    self.agent_message(vec![wire::Part::text("The agent canceled the task.")]);
                self.status(TaskState::Canceled, Some(message), true)
            }
        };
        out.push(result);
    }

    fn fail(&mut self, error: &Error, out: &mut Vec<StreamResult>) {
        let state = if error.is_cancelled() {
            TaskState::Canceled
        } else {
            TaskState::Failed
        };
        let text = format!("{} ({})", error.message(), error.code());
        let message = self.agent_message(vec![wire::Part::text(text)]);
        out.push(self.status(state, Some(message), true));
    }

    fn working_data(&mut self, data: Value) -> StreamResult {
        let data = match data {
            Value::Object(data) => data,
            other => Map::from_iter([("value".to_owned(), other)]),
        };
        let message = self.agent_message(vec![wire::Part::Data {
            data,
            metadata: None,
        }]);
        self.status(TaskState::Working, Some(message), false)
    }

    fn status(
        &mut self,
        state: TaskState,
        message: Option<wire::Message>,
        is_final: bool,
    ) -> StreamResult {
        self.done |= is_final;
        StreamResult::StatusUpdate(status_update(
            &self.task_id,
            &self.context_id,
            state,
            message,
            is_final,
        ))
    }

    fn artifact_update(
        &self,
        artifact: wire::Artifact,
        append: bool,
        last_chunk: bool,
    ) -> StreamResult {
        StreamResult::ArtifactUpdate(wire::TaskArtifactUpdateEvent {
            kind: wire::ArtifactUpdateKind::ArtifactUpdate,
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            artifact,
            append,
            last_chunk,
            metadata: None,
        })
    }

    fn agent_message(&self, parts: Vec<wire::Part>) -> wire::Message {
        agent_message(&self.task_id, &self.context_id, parts)
    }
}

/// What a paused task asks: the prompt as text, and as a data part an approval's tool and arguments (the
/// prompt may be only the agent's hint), a question's choices, or a custom pause's reason and payload.
fn question_parts(kind: &InterruptKind) -> Vec<wire::Part> {
    let mut parts = vec![wire::Part::text(kind.prompt())];
    let mut data = Map::new();
    match kind {
        InterruptKind::Approval { tool, args, .. } => {
            data.insert("tool".to_owned(), json!(tool));
            data.insert("arguments".to_owned(), args.clone());
        }
        InterruptKind::Question { options, .. } if !options.is_empty() => {
            data.insert("options".to_owned(), json!(options));
        }
        InterruptKind::Custom { reason, payload } => {
            data.insert("reason".to_owned(), json!(reason));
            data.insert("payload".to_owned(), payload.clone());
        }
        _ => {}
    }
    if !data.is_empty() {
        parts.push(wire::Part::Data {
            data,
            metadata: None,
        });
    }
    parts
}

/// A message of the agent in a task.
pub fn agent_message(task_id: &str, context_id: &str, parts: Vec<wire::Part>) -> wire::Message {
    wire::Message {
        kind: wire::MessageKind::Message,
        role: wire::MessageRole::Agent,
        message_id: new_id("msg"),
        parts,
        context_id: Some(context_id.to_owned()),
        task_id: Some(task_id.to_owned()),
        reference_task_ids: Vec::new(),
        metadata: None,
    }
}

/// A status update stamped now.
pub fn status_update(
    task_id: &str,
    context_id: &str,
    state: TaskState,
    message: Option<wire::Message>,
    is_final: bool,
) -> wire::TaskStatusUpdateEvent {
    wire::TaskStatusUpdateEvent {
        kind: wire::StatusUpdateKind::StatusUpdate,
        task_id: task_id.to_owned(),
        context_id: context_id.to_owned(),
        status: status(state, message),
        is_final,
        metadata: None,
    }
}

/// A task status stamped now.
pub fn status(state: TaskState, message: Option<wire::Message>) -> wire::TaskStatus {
    wire::TaskStatus {
        state,
        message,
        timestamp: Some(timestamp(SystemTime::now())),
    }
}

/// ISO-8601 in UTC with milliseconds: `2025-07-15T14:50:28.575Z`.
pub fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Artifact, Part, Role};
    use std::time::{Duration, UNIX_EPOCH};

    fn encode_all(options: EncodeOptions, events: Vec<Event>) -> Vec<Value> {
        let mut encoder = Encoder::new("t1", "c1", options);
        let mut out = Vec::new();
        for event in events {
            encoder.encode(event, &mut out);
        }
        out.iter()
            .map(|r| serde_json::to_value(r).unwrap())
            .collect()
    }

    fn text(id: &str, deltas: &[&str]) -> Vec<Event> {
        let mut events = vec![Event::TextStart {
            message_id: id.into(),
            role: Role::Assistant,
        }];
        events.extend(deltas.iter().map(|d| Event::TextDelta {
            message_id: id.into(),
            delta: (*d).into(),
        }));
        events.push(Event::TextEnd {
            message_id: id.into(),
        });
        events
    }

    fn finished(outcome: Outcome) -> Event {
        Event::RunFinished {
            outcome,
            usage: None,
        }
    }

    #[test]
    fn timestamps_are_iso_8601_utc() {
        let at = |secs: u64, millis: u64| {
            timestamp(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_700_000_000, 123), "2023-11-14T22:13:20.123Z");
        assert_eq!(at(4_102_444_799, 999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn text_streams_as_one_artifact_per_message() {
        let mut events = vec![Event::RunStarted];
        events.extend(text("m1", &["Hel", "lo"]));
        events.extend(text("m2", &["Bye"]));
        events.push(finished(Outcome::Completed));
        let out = encode_all(EncodeOptions::default(), events);
        let kinds: Vec<_> = out.iter().map(|r| r["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "status-update",
                "artifact-update",
                "artifact-update",
                "artifact-update",
                "artifact-update",
                "artifact-update",
                "status-update"
            ]
        );
        assert_eq!(out[0]["status"]["state"], "working");
        assert_eq!(out[0]["final"], false);
        assert_eq!(out[1]["artifact"]["name"], "response");
        assert!(out[1].get("append").is_none());
        assert_eq!(out[2]["append"], true);
        assert_eq!(out[3]["lastChunk"], true);
        assert_eq!(out[3]["artifact"]["parts"][0]["text"], "");
        let first = &out[1]["artifact"]["artifactId"];
        assert_eq!(&out[3]["artifact"]["artifactId"], first);
        assert_ne!(&out[4]["artifact"]["artifactId"], first);
        assert_eq!(out[6]["status"]["state"], "completed");
        assert_eq!(out[6]["final"], true);
        assert!(out[6]["status"].get("message").is_none());
    }

    #[test]
    fn status_message_option_carries_the_whole_reply() {
        let mut events = vec![Event::RunStarted];
        events.extend(text("m1", &["Hel", "lo"]));
        events.extend(text("m2", &["Bye"]));
        events.push(finished(Outcome::Completed));
        let options = EncodeOptions {
            status_message: true,
            ..Default::default()
        };
        let out = encode_all(options, events);
        let message = &out.last().unwrap()["status"]["message"];
        assert_eq!(message["role"], "agent");
        assert_eq!(message["parts"][0]["text"], "Hello\nBye");
        assert_eq!(message["taskId"], "t1");
        assert_eq!(message["contextId"], "c1");
    }

    #[test]
    fn an_empty_text_message_sends_nothing() {
        let out = encode_all(EncodeOptions::default(), text("m1", &[""]));
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn interrupt_pauses_as_input_required_with_the_question() {
        let interrupt = Interrupt {
            id: "int-1".into(),
            kind: InterruptKind::Question {
                text: "Which city?".into(),
                options: vec!["Paris".into(), "Rome".into()],
            },
        };
        let mut encoder = Encoder::new("t1", "c1", EncodeOptions::default());
        let mut out = Vec::new();
        encoder.encode(Event::RunStarted, &mut out);
        encoder.encode(Event::Interrupt(interrupt), &mut out);
        encoder.encode(finished(Outcome::Interrupted), &mut out);
        assert_eq!(encoder.interrupt_id(), Some("int-1"));
        assert!(encoder.is_done());
        let last = serde_json::to_value(out.last().unwrap()).unwrap();
        assert_eq!(last["status"]["state"], "input-required");
        assert_eq!(last["final"], true);
        assert_eq!(
            last["status"]["message"]["parts"],
            json!([{"kind": "text", "text": "Which city?"},
                   {"kind": "data", "data": {"options": ["Paris", "Rome"]}}])
        );
    }

    #[test]
    fn errors_fail_the_task_and_cancellations_cancel_it() {
        let out = encode_all(
            EncodeOptions::default(),
            vec![
                Event::RunStarted,
                Event::RunError(Error::upstream_timeout("too slow")),
            ],
        );
        assert_eq!(out[1]["status"]["state"], "failed");
        assert_eq!(
            out[1]["status"]["message"]["parts"][0]["text"],
            "too slow (UPSTREAM_TIMEOUT)"
        );
        let out = encode_all(
            EncodeOptions::default(),
            vec![Event::RunError(Error::cancelled("upstream stopped"))],
        );
        assert_eq!(out[0]["status"]["state"], "canceled");
    }

    #[test]
    fn nothing_follows_the_final_status() {
        let mut encoder = Encoder::new("t1", "c1", EncodeOptions::default());
        let mut out = Vec::new();
        encoder.encode(finished(Outcome::Completed), &mut out);
        encoder.encode(Event::RunStarted, &mut out);
        encoder.cancel(CancelReason::Request, &mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn tool_activity_is_dropped_unless_the_option_shows_it() {
        let events = || {
            vec![
                Event::ToolCallStart {
                    call_id: "call-1".into(),
                    name: "search".into(),
                    parent_message_id: None,
                },
                Event::ToolCallArgs {
                    call_id: "call-1".into(),
                    delta: "{\"q\":".into(),
                },
                Event::ToolCallArgs {
                    call_id: "call-1".into(),
                    delta: "\"x\"}".into(),
                },
                Event::ToolCallEnd {
                    call_id: "call-1".into(),
                },
                Event::ToolResult {
                    call_id: "call-1".into(),
                    message_id: "tr-1".into(),
                    content: "found".into(),
                    is_error: true,
                },
                Event::ReasoningStart {
                    message_id: "r1".into(),
                },
            ]
        };
        assert!(encode_all(EncodeOptions::default(), events()).is_empty());
        let options = EncodeOptions {
            tool_activity: true,
            ..Default::default()
        };
        let out = encode_all(options, events());
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["status"]["state"], "working");
        assert_eq!(
            out[0]["status"]["message"]["parts"][0]["data"],
            json!({"type": "tool-call", "id": "call-1", "name": "search",
                   "arguments": {"q": "x"}, "rawArguments": "{\"q\":\"x\"}"})
        );
        assert_eq!(
            out[1]["status"]["message"]["parts"][0]["data"],
            json!({"type": "tool-result", "toolCallId": "call-1", "payload": "found", "isError": true})
        );
    }

    #[test]
    fn artifacts_keep_their_id_and_flags() {
        let out = encode_all(
            EncodeOptions::default(),
            vec![Event::Artifact(Artifact {
                id: "a1".into(),
                name: None,
                parts: vec![Part::Data(json!([1, 2]))],
                append: true,
                last_chunk: true,
            })],
        );
        assert_eq!(
            out[0],
            json!({"kind": "artifact-update", "taskId": "t1", "contextId": "c1",
                   "artifact": {"artifactId": "a1", "parts": [{"kind": "data", "data": {"value": [1, 2]}}]},
                   "append": true, "lastChunk": true})
        );
    }
}
