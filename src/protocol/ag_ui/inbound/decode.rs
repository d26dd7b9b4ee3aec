//! AG-UI inbound, the request: a `RunAgentInput` body becomes a [`Turn`], or a refusal.

use crate::error::{Error, Result};
use crate::model::{ContextItem, History, Resume, ResumeStatus, Tool, Turn};
use crate::protocol::ag_ui::{message_from_wire, wire};

/// Decodes a `RunAgentInput` body into a turn.
pub fn decode(bytes: &[u8]) -> Result<Turn> {
    let deserializer = &mut serde_json::Deserializer::from_slice(bytes);
    let input: wire::RunAgentInput =
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." || inner.is_syntax() || inner.is_eof() {
                Error::bad_request(format!("invalid RunAgentInput: {inner}"))
            } else {
                Error::bad_request(format!("invalid RunAgentInput at `{path}`: {inner}"))
            }
        })?;
    turn_from_input(input)
}

fn turn_from_input(input: wire::RunAgentInput) -> Result<Turn> {
    if input.thread_id.is_empty() || input.run_id.is_empty() {
        return Err(Error::bad_request(
            "invalid RunAgentInput: `threadId` and `runId` must not be empty",
        ));
    }
    let mut extra = serde_json::Map::new();
    if let Some(props) = input.forwarded_props {
        extra.insert("forwardedProps".to_owned(), props);
    }
    Ok(Turn {
        conversation: input.thread_id,
        tenant: String::new(),
        run_id: input.run_id,
        messages: input
            .messages
            .into_iter()
            .filter_map(message_from_wire)
            .collect(),
        history: History::Full,
        tools: input
            .tools
            .into_iter()
            .map(|tool| Tool {
                name: tool.name,
                description: tool.description,
                parameters: tool
                    .parameters
                    .unwrap_or_else(crate::model::empty_object_schema),
            })
            .collect(),
        context: input
            .context
            .into_iter()
            .map(|c| ContextItem {
                description: c.description,
                value: c.value,
            })
            .collect(),
        state: input.state.filter(|state| !state.is_null()),
        options: Default::default(),
        resume: input
            .resume
            .into_iter()
            .map(|entry| Resume {
                interrupt_id: entry.interrupt_id,
                status: match entry.status {
                    wire::ResumeStatus::Resolved => ResumeStatus::Resolved,
                    wire::ResumeStatus::Cancelled => ResumeStatus::Cancelled,
                },
                payload: entry.payload,
            })
            .collect(),
        extra,
    })
}
