//! The CMDC events of one canonical turn (`specs/cmdc.md` §4.3).

use std::collections::HashMap;
use std::time::SystemTime;

use serde_json::{json, Value};

use super::{parse_args, timestamp, truncate, End, RESULT_LIMIT};
use crate::face::EventEncoder;
use crate::model::{Event, InterruptKind, Outcome, Role, Usage};
use crate::protocol::cmdc::sessions::Pending;
use crate::protocol::cmdc::wire::{self, Event as Cmdc};

#[derive(Debug, Clone)]
pub(super) struct Call {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) args: String,
}

/// Canonical events of one turn to CMDC events (§4.3).
pub struct Encoder {
    pub(super) client_tools: Vec<String>,
    pub(super) calls: HashMap<String, Call>,
    /// Calls of callback tools the turn made and did not answer.
    pub(super) client_calls: Vec<Call>,
    /// Interrupts the turn asked.
    pub(super) asked: Vec<Pending>,
    pub(super) text: String,
    pub(super) last_text: Option<String>,
    pub(super) logged_calls: Vec<Value>,
    pub(super) server_results: Vec<(String, String, String, bool)>,
    pub(super) usage: wire::TokenUsage,
    /// How the turn ended, once its terminal event came.
    pub(super) end: Option<End>,
}

impl Encoder {
    pub fn new(client_tools: Vec<String>) -> Self {
        Self {
            client_tools,
            calls: HashMap::new(),
            client_calls: Vec::new(),
            asked: Vec::new(),
            text: String::new(),
            last_text: None,
            logged_calls: Vec::new(),
            server_results: Vec::new(),
            usage: wire::TokenUsage::default(),
            end: None,
        }
    }
}

impl EventEncoder for Encoder {
    type Out = Vec<Cmdc>;

    /// Appends the CMDC events of one canonical event; at the terminal event, keeps how the turn ended.
    fn encode(&mut self, event: Event, out: &mut Vec<Cmdc>) {
        match event {
            Event::TextStart {
                role: Role::Assistant,
                ..
            } => {
                out.push(Cmdc::MessageStart {});
            }
            Event::TextDelta { delta, .. } if !delta.is_empty() => {
                self.text.push_str(&delta);
                out.push(Cmdc::MessageDelta { delta });
            }
            Event::TextEnd { .. } if !self.text.is_empty() => {
                self.last_text = Some(self.text.clone());
            }
            Event::ReasoningStart { .. } => out.push(Cmdc::ThinkingStart {}),
            Event::ReasoningDelta { delta, .. } if !delta.is_empty() => {
                out.push(Cmdc::ThinkingDelta { delta });
            }
            Event::ToolCallStart { call_id, name, .. } => {
                self.calls.insert(
                    call_id.clone(),
                    Call {
                        id: call_id,
                        name,
                        args: String::new(),
                    },
                );
            }
            Event::ToolCallArgs { call_id, delta } => {
                if let Some(call) = self.calls.get_mut(&call_id) {
                    call.args.push_str(&delta);
                }
            }
            Event::ToolCallEnd { call_id } => {
                if let Some(call) = self.calls.get(&call_id).cloned() {
                    let args = parse_args(&call.args);
                    self.logged_calls
                        .push(json!({"id": call.id, "name": call.name, "args": args}));
                    out.push(Cmdc::ToolCalls { count: 1 });
                    out.push(Cmdc::ToolExecutionStart {
                        tool_name: call.name.clone(),
                        call_id: call.id.clone(),
                        args,
                    });
                    if self.client_tools.contains(&call.name) {
                        self.client_calls.push(call);
                    }
                }
            }
            Event::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => {
                self.client_calls.retain(|call| call.id != call_id);
                let name = self
                    .calls
                    .get(&call_id)
                    .map(|c| c.name.clone())
                    .unwrap_or_default();
                out.push(Cmdc::ToolExecutionEnd {
                    tool_name: name.clone(),
                    call_id: call_id.clone(),
                    status: if is_error { "error" } else { "ok" }.into(),
                    result: Value::String(truncate(&content, RESULT_LIMIT)),
                });
                self.server_results.push((call_id, name, content, is_error));
            }
            Event::Usage(usage) => self.usage = token_usage(&usage, self.usage),
            Event::RunFinished { outcome, usage } => {
                if let Some(usage) = usage {
                    self.usage = token_usage(&usage, self.usage);
                }
                self.end = Some(match outcome {
                    Outcome::Completed => End::Completed,
                    Outcome::Interrupted => End::Interrupted,
                    Outcome::Cancelled => End::Cancelled,
                });
            }
            Event::RunError(error) if error.is_cancelled() => self.end = Some(End::Cancelled),
            Event::RunError(error) => self.end = Some(End::Error(error.message().to_owned())),
            _ => {}
        }
    }
}

/// `approval_required` or `ask_user` for a canonical interrupt.
pub(super) fn interrupt_event(id: &str, kind: InterruptKind) -> Cmdc {
    match kind {
        InterruptKind::Approval { tool, args, hint } => Cmdc::ApprovalRequired {
            approval_id: id.to_owned(),
            tool_name: tool,
            args,
            hint: hint.unwrap_or_default(),
            requested_at: Some(timestamp(SystemTime::now(), false)),
        },
        InterruptKind::Question { text, options } => Cmdc::AskUser {
            reference: id.to_owned(),
            question: text,
            options: (!options.is_empty()).then_some(options),
        },
        other => Cmdc::AskUser {
            reference: id.to_owned(),
            question: other.prompt(),
            options: None,
        },
    }
}

/// The canonical usage added to what the turn reported so far.
fn token_usage(usage: &Usage, mut total: wire::TokenUsage) -> wire::TokenUsage {
    let input = usage.input_tokens.unwrap_or(0);
    let output = usage.output_tokens.unwrap_or(0);
    total.prompt_tokens = total.prompt_tokens.max(input);
    total.completion_tokens = total.completion_tokens.max(output);
    total.total_tokens = total
        .total_tokens
        .max(usage.total_tokens.unwrap_or(input + output));
    total
}
