//! The encoder's tool calls, their results, and the pauses asked as approval requests.

use serde_json::{json, Map, Value};

use super::{
    call_body, data_body, kept_data, new_message_id, Encoder, Open, OpenKind, SERVER_LABEL,
};
use crate::model::{Interrupt, InterruptKind};
use crate::protocol::agentscope::wire::{self, MessageType, RunStatus};

impl<G> Encoder<G> {
    pub(super) fn open_call(&mut self, call_id: String, name: String) {
        self.close();
        let client = self.client_tools.contains(&name);
        self.calls.insert(call_id.clone(), (name.clone(), client));
        let kind = if client {
            MessageType::FunctionCall
        } else {
            MessageType::PluginCall
        };
        let message = self.start_message(new_message_id(), kind, wire::Role::Assistant, Map::new());
        let body = call_body(&call_id, &name, "");
        self.content(&message.id, body, RunStatus::InProgress, Some(false));
        self.open = Some(Open {
            message,
            kind: OpenKind::Call {
                call_id,
                name,
                arguments: String::new(),
            },
            announced: true,
        });
    }

    pub(super) fn call_args(&mut self, delta: &str) {
        let Some(Open {
            message,
            kind:
                OpenKind::Call {
                    call_id,
                    name,
                    arguments,
                },
            ..
        }) = &mut self.open
        else {
            return;
        };
        if delta.is_empty() {
            return;
        }
        arguments.push_str(delta);
        let body = call_body(call_id, name, arguments);
        let id = message.id.clone();
        self.content(&id, body, RunStatus::InProgress, Some(false));
    }

    pub(super) fn tool_result(
        &mut self,
        call_id: String,
        message_id: String,
        output: String,
        is_error: bool,
    ) {
        self.close();
        let (name, client) = self.calls.get(&call_id).cloned().unwrap_or_default();
        let kind = if client {
            MessageType::FunctionCallOutput
        } else {
            MessageType::PluginCallOutput
        };
        let mut metadata = Map::new();
        if is_error {
            metadata.insert("is_error".to_owned(), Value::Bool(true));
        }
        let message = self.start_message(message_id, kind, wire::Role::Tool, metadata);
        let result = |output: String| {
            data_body(wire::FunctionCallOutput {
                call_id: call_id.clone(),
                name: (!name.is_empty()).then(|| name.clone()),
                output,
            })
        };
        self.content(
            &message.id,
            result(String::new()),
            RunStatus::InProgress,
            Some(false),
        );
        let body = result(output);
        self.content(&message.id, body.clone(), RunStatus::Completed, Some(false));
        self.complete_message(message, vec![kept_data(body)]);
    }

    pub(super) fn interrupt(&mut self, interrupt: Interrupt) {
        self.close();
        let prompt = interrupt.kind.prompt();
        let (kind, name, arguments) = match &interrupt.kind {
            InterruptKind::Approval { tool, args, .. } => {
                let arguments = match args {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                ("approval", tool.clone(), arguments)
            }
            InterruptKind::Question { text, options } => {
                let mut arguments = json!({ "question": text });
                if !options.is_empty() {
                    arguments["options"] = json!(options);
                }
                (
                    "question",
                    self.options.question_tool.clone(),
                    arguments.to_string(),
                )
            }
            InterruptKind::InputRequired { text } => (
                "input_required",
                self.options.question_tool.clone(),
                json!({ "question": text }).to_string(),
            ),
            InterruptKind::Custom { reason, payload } => (
                reason.as_str(),
                self.options.question_tool.clone(),
                json!({ "question": prompt, "reason": reason, "payload": payload }).to_string(),
            ),
        };
        let metadata = Map::from_iter([
            ("interrupt".to_owned(), Value::from(kind)),
            ("prompt".to_owned(), Value::from(prompt)),
        ]);
        let message = self.start_message(
            new_message_id(),
            MessageType::McpApprovalRequest,
            wire::Role::Assistant,
            metadata,
        );
        let body = data_body(wire::McpApprovalRequest {
            id: interrupt.id,
            name,
            arguments,
            server_label: SERVER_LABEL.to_owned(),
        });
        self.content(&message.id, body.clone(), RunStatus::Completed, Some(false));
        self.complete_message(message, vec![kept_data(body)]);
    }
}
