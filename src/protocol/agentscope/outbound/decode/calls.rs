//! The decoder's tool calls: their snapshots, ends and results, and the approvals the runtime asks for.

use serde_json::Value;
use tracing::{debug, warn};

use super::{common_prefix, result_text, Call, Decoder};
use crate::model::{new_id, Event, Interrupt, InterruptKind};
use crate::protocol::agentscope::outbound::PendingApproval;
use crate::protocol::agentscope::wire;

impl Decoder {
    /// A snapshot of a call's `{call_id, name, arguments}`.
    pub(super) fn call(
        &mut self,
        message_id: &str,
        index: u32,
        content: &wire::Content,
        completed: bool,
        out: &mut Vec<Event>,
    ) {
        let snapshot: wire::McpCall = content.data_as().unwrap_or_default();
        let key = (message_id.to_owned(), index);
        if !self.calls.contains_key(&key) {
            let call_id = snapshot
                .call_id()
                .filter(|id| !id.is_empty())
                .map_or_else(|| new_id("call"), str::to_owned);
            self.calls.insert(
                key.clone(),
                Call {
                    call_id,
                    name: String::new(),
                    client: false,
                    started: false,
                    sent: String::new(),
                    latest: String::new(),
                    ended: false,
                },
            );
            self.call_order.push(key.clone());
        }
        let Some(call) = self.calls.get_mut(&key) else {
            return;
        };
        if call.ended {
            return;
        }
        if let Some(name) = snapshot.name.as_deref().filter(|n| !n.is_empty()) {
            if !call.started {
                call.name = name.to_owned();
                call.client = self.client_tools.contains(name);
            }
        }
        if !call.started && !call.name.is_empty() {
            call.started = true;
            out.push(Event::ToolCallStart {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                parent_message_id: None,
            });
        }
        let arguments = snapshot.arguments.unwrap_or_default();
        if completed {
            let output = (snapshot.output, snapshot.error);
            self.end_call(&key, Some(arguments), out);
            // An `mcp_call` may carry its own outcome.
            let (output, error) = output;
            if let Some((content, is_error)) =
                error.map(|e| (e, true)).or(output.map(|o| (o, false)))
            {
                let call_id = self.calls[&key].call_id.clone();
                self.push_result(message_id, call_id, result_text(&content), is_error, out);
            }
            return;
        }
        let previous = std::mem::replace(&mut call.latest, arguments);
        if call.client || !call.started {
            return;
        }
        // Stream only what two snapshots in a row agree on.
        let stable = common_prefix(&previous, &call.latest);
        if stable.len() > call.sent.len() && stable.starts_with(call.sent.as_str()) {
            let delta = stable[call.sent.len()..].to_owned();
            call.sent.push_str(&delta);
            out.push(Event::ToolCallArgs {
                call_id: call.call_id.clone(),
                delta,
            });
        }
    }

    /// Ends a call with its final arguments (`None`: the latest snapshot): starts it if its name never came,
    /// sends what is missing of its arguments, then its end.
    pub(super) fn end_call(
        &mut self,
        key: &(String, u32),
        arguments: Option<String>,
        out: &mut Vec<Event>,
    ) {
        let Some(call) = self.calls.get_mut(key) else {
            return;
        };
        if call.ended {
            return;
        }
        call.ended = true;
        if let Some(arguments) = arguments {
            call.latest = arguments;
        }
        if !call.started {
            call.started = true;
            debug!(call = %call.call_id, "an AgentScope call without a name");
            out.push(Event::ToolCallStart {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                parent_message_id: None,
            });
        }
        match call.latest.strip_prefix(call.sent.as_str()) {
            Some(rest) if !rest.is_empty() => out.push(Event::ToolCallArgs {
                call_id: call.call_id.clone(),
                delta: rest.to_owned(),
            }),
            Some(_) => {}
            None => warn!(
                call = %call.call_id,
                sent = %call.sent,
                final_arguments = %call.latest,
                "AgentScope rewrote arguments already streamed; the client keeps the streamed text"
            ),
        }
        out.push(Event::ToolCallEnd {
            call_id: call.call_id.clone(),
        });
    }

    /// Ends every call still open (at the end of the run).
    pub(super) fn end_calls(&mut self, out: &mut Vec<Event>) {
        for key in self.call_order.clone() {
            self.end_call(&key, None, out);
        }
    }

    /// A completed `*_call_output` content: the call's result, once.
    pub(super) fn result(
        &mut self,
        message_id: &str,
        index: u32,
        content: &wire::Content,
        out: &mut Vec<Event>,
    ) {
        if !self.settled.insert((message_id.to_owned(), index)) {
            return;
        }
        let Some(output) = content.data_as::<wire::FunctionCallOutput>() else {
            return debug!(message = %message_id, "an AgentScope call output that is not {{call_id, output}}; skipped");
        };
        // The result ends its call, whatever the upstream said before.
        if let Some(key) = self
            .call_order
            .iter()
            .find(|key| self.calls[*key].call_id == output.call_id)
            .cloned()
        {
            self.end_call(&key, None, out);
        }
        let text = result_text(&output.output);
        self.push_result(message_id, output.call_id, text, false, out);
    }

    fn push_result(
        &mut self,
        message_id: &str,
        call_id: String,
        content: String,
        is_error: bool,
        out: &mut Vec<Event>,
    ) {
        let n = self.messages.get_mut(message_id).map_or(0, |open| {
            open.results += 1;
            open.results - 1
        });
        // Clients key messages by id: a second result of one message gets an id of its own.
        let result_id = if n == 0 {
            message_id.to_owned()
        } else {
            format!("{message_id}:{n}")
        };
        out.push(Event::ToolResult {
            call_id,
            message_id: result_id,
            content,
            is_error,
        });
    }

    /// A completed `mcp_approval_request` content: an approval interrupt, once.
    pub(super) fn approval(
        &mut self,
        message_id: &str,
        index: u32,
        content: &wire::Content,
        out: &mut Vec<Event>,
    ) {
        if !self.settled.insert((message_id.to_owned(), index)) {
            return;
        }
        let Some(mut request) = content.data_as::<wire::McpApprovalRequest>() else {
            return debug!(message = %message_id, "an AgentScope approval request without its fields; skipped");
        };
        if request.id.is_empty() {
            request.id = if index == 0 {
                message_id.to_owned()
            } else {
                format!("{message_id}:{index}")
            };
        }
        let args = serde_json::from_str(&request.arguments)
            .unwrap_or_else(|_| Value::String(request.arguments.clone()));
        out.push(Event::Interrupt(Interrupt {
            id: request.id.clone(),
            kind: InterruptKind::Approval {
                tool: request.name.clone(),
                args,
                hint: None,
            },
        }));
        self.approval_ids.push(request.id.clone());
        self.approvals.push(PendingApproval {
            message_id: message_id.to_owned(),
            request,
        });
    }
}
