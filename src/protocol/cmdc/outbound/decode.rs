//! The events: the gateway session's SSE events, as canonical events.

use std::collections::HashSet;

use serde_json::Value;
use tracing::debug;

use crate::error::{Error, Result};
use crate::face::{StreamEnd, UpstreamDecoder};
use crate::model::{new_id, Event, Interrupt, InterruptKind, Usage};
use crate::protocol::cmdc::wire;
use crate::sse::SseEvent;

use super::encode::answer_text;
use super::{StepEnd, Waiting};

/// Decodes one step's CMDC events into canonical events.
#[derive(Default)]
pub struct Decoder {
    /// The text message the deltas go to; a `message_start` begins a new one.
    text_id: Option<String>,
    reasoning_id: Option<String>,
    /// A queued prompt: the events of the runs before it are not ours.
    pub(super) skip_until_prompt: Option<String>,
    /// Calls already shown to the client.
    shown_calls: HashSet<String>,
    /// Client tool calls the client answered itself: the gateway's report of their end is not shown.
    pub(super) answered: HashSet<String>,
    /// The run before our queued prompt's ended: the gateway closes the stream after each run, so the next
    /// run, ours, is read on a new subscription.
    pub(super) resubscribe: bool,
    /// How the step ended, once its run ended, paused or failed.
    ended: Option<Result<StepEnd>>,
}

impl UpstreamDecoder for Decoder {
    /// One frame of the session's events: over when the step's run ended, paused or failed (see
    /// `Decoder::take_end`). Frames without a name and events this proxy does not translate are dropped; a
    /// frame that does not read is `UPSTREAM_MALFORMED`.
    fn frame(&mut self, frame: &SseEvent, out: &mut Vec<Event>) -> Result<bool> {
        let Some(name) = frame.event.as_deref() else {
            debug!("dropping a CMDC frame without an event name");
            return Ok(false);
        };
        let event = wire::Event::from_sse(name, &frame.data).map_err(|e| {
            Error::upstream_malformed(format!("the CMDC event `{name}` does not read: {e}"))
        })?;
        let Some(event) = event else {
            debug!(
                event = %crate::logging::clipped(name),
                "dropping a CMDC event this proxy does not translate"
            );
            return Ok(false);
        };
        self.resubscribe = self.skip_until_prompt.is_some() && event.is_terminal();
        let step = self.decode(event, out);
        if self.resubscribe {
            self.skip_until_prompt = None;
        }
        self.ended = step.transpose();
        Ok(self.ended.is_some())
    }

    /// The gateway ends each run with an event of its own: a body that ends first was cut off.
    fn end(&mut self, _end: StreamEnd, _out: &mut Vec<Event>) -> Result<()> {
        Err(Error::upstream_eof())
    }
}

impl Decoder {
    /// How the step ended, once [`UpstreamDecoder::frame`] said it is over: the gateway's run ended or paused,
    /// or the agent failed.
    pub(super) fn take_end(&mut self) -> Result<StepEnd> {
        self.ended
            .take()
            .unwrap_or_else(|| Err(Error::upstream_eof()))
    }

    /// Decodes one event. `Ok(Some(_))` when the step's run ended or paused; `Err` when it failed.
    pub fn decode(&mut self, event: wire::Event, out: &mut Vec<Event>) -> Result<Option<StepEnd>> {
        use wire::Event as W;
        if let Some(prompt) = &self.skip_until_prompt {
            if matches!(&event, W::PromptReceived { text } if text == prompt) {
                self.skip_until_prompt = None;
            }
            return Ok(None);
        }
        match event {
            W::PromptReceived { .. } | W::ToolCalls { .. } | W::ApprovalResolved { .. } => {}
            W::AgentStart {} => out.push(Event::RunStarted),
            W::MessageStart {} => self.text_id = None,
            W::MessageDelta { delta } if !delta.is_empty() => {
                let message_id = self.text_id.get_or_insert_with(|| new_id("msg")).clone();
                out.push(Event::TextDelta { message_id, delta });
            }
            W::ThinkingStart {} => self.reasoning_id = None,
            W::ThinkingDelta { delta } if !delta.is_empty() => {
                let message_id = self
                    .reasoning_id
                    .get_or_insert_with(|| new_id("reasoning"))
                    .clone();
                out.push(Event::ReasoningDelta { message_id, delta });
            }
            W::MessageDelta { .. } | W::ThinkingDelta { .. } => {}
            W::ToolExecutionStart {
                tool_name,
                call_id,
                args,
            } => self.show_call(call_id, tool_name, &args, out),
            W::ToolExecutionEnd { call_id, .. } if self.answered.contains(&call_id) => {}
            W::ToolExecutionEnd {
                call_id,
                status,
                result,
                ..
            } => out.push(Event::ToolResult {
                call_id,
                message_id: String::new(),
                content: answer_text(&result),
                is_error: status == "error",
            }),
            W::ApprovalRequired {
                approval_id,
                tool_name,
                args,
                hint,
                ..
            } => {
                out.push(Event::Interrupt(Interrupt {
                    id: approval_id.clone(),
                    kind: InterruptKind::Approval {
                        tool: tool_name,
                        args,
                        hint: Some(hint).filter(|hint| !hint.is_empty()),
                    },
                }));
                return Ok(Some(StepEnd::Paused(Waiting::Approval(approval_id))));
            }
            W::AskUser {
                reference,
                question,
                options,
            } => {
                out.push(Event::Interrupt(Interrupt {
                    id: reference.clone(),
                    kind: InterruptKind::Question {
                        text: question,
                        options: options.unwrap_or_default(),
                    },
                }));
                return Ok(Some(StepEnd::Paused(Waiting::Question(reference))));
            }
            W::Error { reason } => return Err(Error::upstream_agent("CMDC_ERROR", reason)),
            W::AgentEnd { token_usage, .. } => {
                let usage = token_usage.map(|usage| Usage {
                    input_tokens: Some(usage.prompt_tokens),
                    output_tokens: Some(usage.completion_tokens),
                    total_tokens: Some(usage.total_tokens),
                });
                return Ok(Some(StepEnd::Finished(usage)));
            }
            W::AgentAbort { reason } => {
                return match reason.as_str() {
                    "user_cancelled" | "aborted" => Ok(Some(StepEnd::Cancelled)),
                    _ => Err(Error::upstream_agent("agent_abort", reason)),
                };
            }
        }
        Ok(None)
    }

    /// A call, once: the gateway reports a callback tool's call on the stream and calls back, in either
    /// order.
    fn show_call(&mut self, call_id: String, name: String, args: &Value, out: &mut Vec<Event>) {
        if !self.shown_calls.insert(call_id.clone()) {
            return;
        }
        out.push(Event::ToolCallStart {
            call_id: call_id.clone(),
            name,
            parent_message_id: None,
        });
        out.push(Event::ToolCallArgs {
            call_id: call_id.clone(),
            delta: args.to_string(),
        });
        out.push(Event::ToolCallEnd { call_id });
    }

    /// The gateway called a client tool: the client is shown the call, and the step waits for its answer.
    pub(super) fn callback(&mut self, call: wire::ToolCallback, out: &mut Vec<Event>) -> Waiting {
        self.show_call(call.call_id.clone(), call.tool_name, &call.args, out);
        Waiting::Callback(call.call_id)
    }
}
