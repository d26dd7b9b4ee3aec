//! AG-UI inbound, the request: a `RunAgentInput` body becomes a [`Turn`], or a refusal.

use http::Response;

use crate::body::{self, Body};
use crate::error::{Error, Result};
use crate::face::RequestDecoder;
use crate::json::from_body;
use crate::model::{ContextItem, History, Resume, ResumeStatus, Tool, Turn};
use crate::protocol::ag_ui::{message_from_wire, wire};

/// Reads a `RunAgentInput` body into a turn; a refusal is an HTTP error with a JSON body.
pub struct Reader;

impl RequestDecoder for Reader {
    type Request = Turn;
    type Refusal = Error;

    fn decode(&self, body: &[u8]) -> Result<Turn> {
        turn_from_input(from_body(body, "RunAgentInput")?)
    }

    fn refuse(&self, refusal: Error) -> Response<Body> {
        body::error_response(&refusal, "POST")
    }
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
