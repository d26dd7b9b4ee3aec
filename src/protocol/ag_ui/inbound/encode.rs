//! AG-UI inbound, the response: canonical events become AG-UI SSE frames.

use std::borrow::Cow;

use bytes::BytesMut;
use serde_json::json;

use crate::face::EventEncoder;
use crate::model::{Event, Interrupt, InterruptKind, Outcome, Role, Turn};
use crate::protocol::ag_ui::wire::{self, TextRole};
use crate::protocol::ag_ui::{message_to_wire, part_to_wire, AguiInterrupts, InboundOptions};
use crate::sse;

/// What a route's options, and the run's client, change in the output.
struct EncodeOptions {
    approval_tool: String,
    question_tool: String,
    /// Pause with a call of the approval tool (else `RUN_FINISHED.outcome.interrupt`, 0.0.59+).
    approval_as_tool: bool,
    /// Pause with a call of the question tool (else `RUN_FINISHED.outcome.interrupt`).
    question_as_tool: bool,
    /// Emit `REASONING_*` events (0.0.59+) instead of `agent-bridge.reasoning` custom events.
    reasoning: bool,
}

impl EncodeOptions {
    /// The options for the run of `turn`: with `agui_interrupts = "auto"`, a pause is a tool call only when
    /// the client declared that tool in this run (it has a handler for it).
    fn new(options: &InboundOptions, turn: &Turn) -> Self {
        let as_tool = |tool: &str| match options.agui_interrupts {
            AguiInterrupts::Tool => true,
            AguiInterrupts::Outcome => false,
            AguiInterrupts::Auto => turn.tools.iter().any(|declared| declared.name == tool),
        };
        Self {
            approval_tool: options.approval_tool.clone(),
            question_tool: options.question_tool.clone(),
            approval_as_tool: as_tool(&options.approval_tool),
            question_as_tool: as_tool(&options.question_tool),
            reasoning: options.agui_reasoning,
        }
    }
}

/// Encodes one run's canonical events as AG-UI SSE frames.
pub struct Encoder {
    thread_id: String,
    run_id: String,
    options: EncodeOptions,
    interrupts: Vec<wire::Interrupt>,
    /// The last assistant text message: the parent of a pause's tool call, as the normalizer makes it the
    /// parent of upstream calls (`specs/ag-ui.md` §4.2.4).
    last_assistant_message: Option<String>,
}

impl Encoder {
    /// An encoder for the run of `turn`, with the route's options.
    pub fn new(turn: &Turn, options: &InboundOptions) -> Self {
        Self {
            thread_id: turn.conversation.clone(),
            run_id: turn.run_id.clone(),
            options: EncodeOptions::new(options, turn),
            interrupts: Vec::new(),
            last_assistant_message: None,
        }
    }
}

impl EventEncoder for Encoder {
    type Out = BytesMut;

    /// The frames for one event (usually one; an interrupt paused as a tool call takes three).
    fn encode(&mut self, event: Event, out: &mut BytesMut) {
        match event {
            Event::RunStarted => {
                let started = wire::Event::RunStarted {
                    thread_id: Cow::Borrowed(&self.thread_id),
                    run_id: Cow::Borrowed(&self.run_id),
                };
                write(out, &started);
            }
            Event::RunFinished { outcome, .. } => self.encode_finish(outcome, out),
            Event::Interrupt(interrupt) => self.encode_interrupt(interrupt, out),
            Event::ReasoningStart { .. }
            | Event::ReasoningDelta { .. }
            | Event::ReasoningEnd { .. } => self.encode_reasoning(&event, out),
            other => {
                if let Event::TextStart {
                    message_id,
                    role: Role::Assistant,
                } = &other
                {
                    self.last_assistant_message = Some(message_id.clone());
                }
                if let Some(wire) = to_wire(&other) {
                    write(out, &wire);
                }
            }
        }
    }
}

impl Encoder {
    /// A pause becomes a call of the route's approval or question tool, answered in the next run, when the
    /// client handles that tool (see [`EncodeOptions::new`]); otherwise an interrupt in
    /// `RUN_FINISHED.outcome`, preceded by the question as text so that clients that ignore `outcome` still
    /// show it.
    fn encode_interrupt(&mut self, interrupt: Interrupt, out: &mut BytesMut) {
        let as_tool = match interrupt.kind {
            InterruptKind::Approval { .. } => self.options.approval_as_tool,
            _ => self.options.question_as_tool,
        };
        if !as_tool {
            let message_id = crate::model::new_id("msg");
            let prompt = interrupt.kind.prompt();
            write(
                out,
                &wire::Event::TextMessageStart {
                    message_id: (&message_id).into(),
                    role: Some(TextRole::Assistant),
                },
            );
            write(
                out,
                &wire::Event::TextMessageContent {
                    message_id: (&message_id).into(),
                    delta: prompt.clone().into(),
                },
            );
            write(
                out,
                &wire::Event::TextMessageEnd {
                    message_id: message_id.into(),
                },
            );
            self.interrupts.push(interrupt_to_wire(interrupt, prompt));
            return;
        }
        let (tool, arguments) = match &interrupt.kind {
            InterruptKind::Approval { tool, args, hint } => (
                &self.options.approval_tool,
                json!({"action": hint.clone().unwrap_or_else(|| interrupt.kind.prompt()), "tool": tool, "arguments": args}),
            ),
            InterruptKind::Question { text, options } => (
                &self.options.question_tool,
                json!({"question": text, "options": options}),
            ),
            InterruptKind::InputRequired { text } => {
                (&self.options.question_tool, json!({"question": text}))
            }
            InterruptKind::Custom { reason, payload } => (
                &self.options.question_tool,
                json!({"question": interrupt.kind.prompt(), "reason": reason, "payload": payload}),
            ),
        };
        let start = wire::Event::ToolCallStart {
            tool_call_id: Cow::Borrowed(&interrupt.id),
            tool_call_name: Cow::Owned(tool.clone()),
            parent_message_id: self.last_assistant_message.as_deref().map(Cow::Borrowed),
        };
        write(out, &start);
        let args = wire::Event::ToolCallArgs {
            tool_call_id: Cow::Borrowed(&interrupt.id),
            delta: arguments.to_string().into(),
        };
        write(out, &args);
        write(
            out,
            &wire::Event::ToolCallEnd {
                tool_call_id: Cow::Borrowed(&interrupt.id),
            },
        );
    }

    fn encode_finish(&mut self, outcome: Outcome, out: &mut BytesMut) {
        let outcome = match outcome {
            Outcome::Interrupted if !self.interrupts.is_empty() => {
                Some(wire::RunOutcome::Interrupt {
                    interrupts: std::mem::take(&mut self.interrupts),
                })
            }
            // `outcome: cancelled` breaks 0.0.59 clients; a plain finish is what every version reads.
            _ => None,
        };
        let finished = wire::Event::RunFinished {
            thread_id: Cow::Owned(std::mem::take(&mut self.thread_id)),
            run_id: Cow::Owned(std::mem::take(&mut self.run_id)),
            outcome,
        };
        write(out, &finished);
    }

    /// Reasoning as `REASONING_*` events when the route allows them (they break 0.0.36 clients); otherwise
    /// as namespaced `CUSTOM` events, visible to clients that look for them and harmless to the rest.
    fn encode_reasoning(&self, event: &Event, out: &mut BytesMut) {
        if !self.options.reasoning {
            let value = match event {
                Event::ReasoningStart { message_id } => {
                    json!({"messageId": message_id, "phase": "start"})
                }
                Event::ReasoningDelta { message_id, delta } => {
                    json!({"messageId": message_id, "delta": delta})
                }
                Event::ReasoningEnd { message_id } => {
                    json!({"messageId": message_id, "phase": "end"})
                }
                _ => return,
            };
            let custom = wire::Event::Custom {
                name: Cow::Borrowed("agent-bridge.reasoning"),
                value,
            };
            return write(out, &custom);
        }
        match event {
            Event::ReasoningStart { message_id } => {
                write(
                    out,
                    &wire::Event::ReasoningStart {
                        message_id: message_id.into(),
                    },
                );
                let start = wire::Event::ReasoningMessageStart {
                    message_id: message_id.into(),
                    role: wire::ReasoningRole::Reasoning,
                };
                write(out, &start);
            }
            Event::ReasoningDelta { message_id, delta } => {
                let content = wire::Event::ReasoningMessageContent {
                    message_id: message_id.into(),
                    delta: delta.into(),
                };
                write(out, &content);
            }
            Event::ReasoningEnd { message_id } => {
                write(
                    out,
                    &wire::Event::ReasoningMessageEnd {
                        message_id: message_id.into(),
                    },
                );
                write(
                    out,
                    &wire::Event::ReasoningEnd {
                        message_id: message_id.into(),
                    },
                );
            }
            _ => {}
        }
    }
}

/// Appends one event as an SSE frame.
fn write(buf: &mut BytesMut, event: &wire::Event<'_>) {
    sse::write_json_event(buf, event);
}

/// The one-to-one translations, borrowing from the canonical event. What AG-UI has no event for goes into a
/// namespaced `CUSTOM` event (0.0.59 rejects unknown types). `None` for the events the encoder handles
/// itself.
fn to_wire(event: &Event) -> Option<wire::Event<'_>> {
    let wire = match event {
        Event::RunError(error) => wire::Event::RunError {
            message: error.message().into(),
            code: Some(error.code().into()),
        },
        Event::TextStart { message_id, role } => wire::Event::TextMessageStart {
            message_id: message_id.into(),
            role: Some(match role {
                Role::System => TextRole::System,
                Role::Developer => TextRole::Developer,
                Role::User => TextRole::User,
                Role::Assistant | Role::Tool => TextRole::Assistant,
            }),
        },
        Event::TextDelta { message_id, delta } => wire::Event::TextMessageContent {
            message_id: message_id.into(),
            delta: delta.into(),
        },
        Event::TextEnd { message_id } => wire::Event::TextMessageEnd {
            message_id: message_id.into(),
        },
        Event::ToolCallStart {
            call_id,
            name,
            parent_message_id,
        } => wire::Event::ToolCallStart {
            tool_call_id: call_id.into(),
            tool_call_name: name.into(),
            parent_message_id: parent_message_id.as_deref().map(Cow::Borrowed),
        },
        Event::ToolCallArgs { call_id, delta } => wire::Event::ToolCallArgs {
            tool_call_id: call_id.into(),
            delta: delta.into(),
        },
        Event::ToolCallEnd { call_id } => wire::Event::ToolCallEnd {
            tool_call_id: call_id.into(),
        },
        Event::ToolResult {
            call_id,
            message_id,
            content,
            ..
        } => wire::Event::ToolCallResult {
            message_id: message_id.into(),
            tool_call_id: call_id.into(),
            content: wire::ToolResultContent::Text(content.into()),
        },
        Event::StateSnapshot(snapshot) => wire::Event::StateSnapshot {
            snapshot: snapshot.clone(),
        },
        Event::StateDelta(delta) => wire::Event::StateDelta {
            delta: delta.clone(),
        },
        Event::MessagesSnapshot(messages) => wire::Event::MessagesSnapshot {
            messages: messages.iter().map(message_to_wire).collect(),
        },
        Event::StepStarted { name } => wire::Event::StepStarted {
            step_name: name.into(),
        },
        Event::StepFinished { name } => wire::Event::StepFinished {
            step_name: name.into(),
        },
        Event::Custom { name, value } => wire::Event::Custom {
            name: name.into(),
            value: value.clone(),
        },
        Event::Raw { source, event } => wire::Event::Raw {
            event: event.clone(),
            source: source.as_deref().map(Cow::Borrowed),
        },
        Event::Usage(usage) => custom(
            "agent-bridge.usage",
            json!(wire::TokenUsage {
                input_tokens: usage.input_tokens,
                output_tokens: usage.output_tokens,
                total_tokens: usage.total_tokens,
            }),
        ),
        Event::Artifact(artifact) => {
            // Parts in AG-UI's own content part shape; no `name: null` (nulls break 1.0 schemas).
            let mut value = json!({
                "artifactId": artifact.id,
                "parts": artifact.parts.iter().map(part_to_wire).collect::<Vec<_>>(),
                "append": artifact.append,
                "lastChunk": artifact.last_chunk,
            });
            if let Some(name) = &artifact.name {
                value["name"] = json!(name);
            }
            custom("agent-bridge.artifact", value)
        }
        Event::RunStarted
        | Event::RunFinished { .. }
        | Event::Interrupt(_)
        | Event::ReasoningStart { .. }
        | Event::ReasoningDelta { .. }
        | Event::ReasoningEnd { .. } => return None,
    };
    Some(wire)
}

fn custom(name: &'static str, value: serde_json::Value) -> wire::Event<'static> {
    wire::Event::Custom {
        name: Cow::Borrowed(name),
        value,
    }
}

fn interrupt_to_wire(interrupt: Interrupt, prompt: String) -> wire::Interrupt {
    let (reason, schema) = match &interrupt.kind {
        InterruptKind::Approval { .. } => (
            "approval",
            json!({"type": "object", "properties": {"approved": {"type": "boolean"}}}),
        ),
        InterruptKind::Question { .. } => ("question", json!({"type": "string"})),
        InterruptKind::InputRequired { .. } => ("input_required", json!({"type": "string"})),
        InterruptKind::Custom { reason, .. } => (reason.as_str(), json!({})),
    };
    wire::Interrupt {
        reason: reason.to_owned(),
        id: interrupt.id,
        message: Some(prompt),
        tool_call_id: None,
        response_schema: Some(schema),
    }
}
