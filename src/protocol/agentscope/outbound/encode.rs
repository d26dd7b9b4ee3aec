//! The request: a turn as one `AgentRequest` carrying the whole history, the tools and the answers to the
//! last run's approvals.

use std::collections::HashMap;

use serde_json::{Map, Value};
use tracing::debug;

use crate::model::{new_id, Media, MediaKind, MediaSource, Message, Part, Resume, Role, Turn};
use crate::protocol::agentscope::wire;

use super::{Identity, PendingApproval};

/// The `/process` body of a turn.
pub(super) fn request(
    turn: &Turn,
    identity: &Identity,
    route_model: Option<&str>,
    approvals: &[PendingApproval],
) -> wire::AgentRequest {
    let mut input = input_messages(&turn.messages);
    input.extend(approval_messages(&turn.resume, approvals));
    if turn.state.is_some() || !turn.context.is_empty() {
        debug!(
            context = turn.context.len(),
            "the AgentScope Agent API has no place for client context or state; not sent"
        );
    }
    let extra = |key: &str| turn.extra.get(key);
    wire::AgentRequest {
        input,
        stream: true,
        id: (!turn.run_id.is_empty()).then(|| turn.run_id.clone()),
        session_id: Some(identity.session_id.clone()),
        user_id: Some(identity.user_id.clone()),
        tools: (!turn.tools.is_empty()).then(|| {
            turn.tools
                .iter()
                .map(|tool| {
                    wire::Tool::function(&tool.name, &tool.description, tool.parameters.clone())
                })
                .collect()
        }),
        // The client's choice first; the route's model is the default.
        model: turn
            .options
            .model
            .clone()
            .or_else(|| route_model.map(str::to_owned)),
        temperature: turn.options.temperature,
        max_tokens: turn.options.max_tokens,
        // Options the canonical model has no field for, under their AgentScope names (an AgentScope inbound
        // keeps them in `extra`).
        top_p: extra("top_p").and_then(Value::as_f64),
        frequency_penalty: extra("frequency_penalty").and_then(Value::as_f64),
        presence_penalty: extra("presence_penalty").and_then(Value::as_f64),
        stop: extra("stop").and_then(|v| serde_json::from_value(v.clone()).ok()),
        seed: extra("seed").and_then(Value::as_i64),
        n: None,
        extra: Map::new(),
    }
}

/// The canonical history as AgentScope messages: text and media as `message` contents, each assistant tool
/// call as a `function_call` message, each tool result as a `function_call_output` message.
pub fn input_messages(messages: &[Message]) -> Vec<wire::Message> {
    let call_names: HashMap<&str, &str> = messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .map(|call| (call.id.as_str(), call.name.as_str()))
        .collect();
    let mut input = Vec::with_capacity(messages.len());
    for message in messages {
        let contents: Vec<wire::Content> = message.content.iter().map(content_from_part).collect();
        match message.role {
            Role::Tool => {
                let Some(call_id) = &message.tool_call_id else {
                    // A tool message that answers no call: its text, from the tool.
                    input.push(wire::Message::new(
                        &message.id,
                        wire::MessageType::Message,
                        wire::Role::Tool,
                        contents,
                    ));
                    continue;
                };
                if message.is_error {
                    debug!(call = %call_id, "AgentScope tool outputs have no error flag; sent as output");
                }
                let output = wire::FunctionCallOutput {
                    call_id: call_id.clone(),
                    name: message
                        .name
                        .clone()
                        .or_else(|| call_names.get(call_id.as_str()).map(|n| (*n).to_owned())),
                    output: tool_output(&message.content),
                };
                input.push(wire::Message::new(
                    &message.id,
                    wire::MessageType::FunctionCallOutput,
                    wire::Role::Tool,
                    vec![wire::Content::data(output)],
                ));
            }
            role => {
                let role = match role {
                    Role::User => wire::Role::User,
                    Role::Assistant => wire::Role::Assistant,
                    // The runtime knows no `developer` role.
                    _ => wire::Role::System,
                };
                if !contents.is_empty() {
                    input.push(wire::Message::new(
                        &message.id,
                        wire::MessageType::Message,
                        role,
                        contents,
                    ));
                }
                for call in &message.tool_calls {
                    let data = wire::FunctionCall {
                        call_id: Some(call.id.clone()),
                        name: Some(call.name.clone()),
                        arguments: Some(call.arguments.clone()),
                    };
                    input.push(wire::Message::new(
                        format!("{}:{}", message.id, call.id),
                        wire::MessageType::FunctionCall,
                        wire::Role::Assistant,
                        vec![wire::Content::data(data)],
                    ));
                }
            }
        }
    }
    input
}

/// A tool message's content as the `output` string: its text, or JSON for what is not text.
fn tool_output(parts: &[Part]) -> String {
    match parts {
        [Part::Data(value)] => value.to_string(),
        parts => crate::model::parts_text(parts),
    }
}

/// One canonical part as an AgentScope content.
fn content_from_part(part: &Part) -> wire::Content {
    match part {
        Part::Text(text) => wire::Content::text(text),
        Part::Data(Value::Object(map)) => wire::Content::new(wire::ContentBody::Data {
            data: Some(map.clone()),
        }),
        // `data` is an object on the runtime.
        Part::Data(other) => {
            let mut map = Map::new();
            map.insert("value".to_owned(), other.clone());
            wire::Content::new(wire::ContentBody::Data { data: Some(map) })
        }
        Part::Media(media) => wire::Content::new(media_body(media)),
    }
}

fn media_body(media: &Media) -> wire::ContentBody {
    let mime = media.mime_type.as_deref();
    // Inline data as a data: URL (the OpenAI convention the runtime's adapters follow).
    let url = match &media.source {
        MediaSource::Url(url) => Some(url.clone()),
        MediaSource::Data(data) => Some(format!(
            "data:{};base64,{data}",
            mime.unwrap_or("application/octet-stream")
        )),
        MediaSource::File { .. } => None,
    };
    match (media.kind, &media.source) {
        (MediaKind::Image, MediaSource::Url(_) | MediaSource::Data(_)) => {
            wire::ContentBody::Image { image_url: url }
        }
        (MediaKind::Video, MediaSource::Url(_) | MediaSource::Data(_)) => {
            wire::ContentBody::Video { video_url: url }
        }
        (MediaKind::Audio, MediaSource::Url(_) | MediaSource::Data(_)) => {
            wire::ContentBody::Audio {
                data: match &media.source {
                    MediaSource::Data(data) => Some(data.clone()),
                    _ => url,
                },
                format: mime
                    .and_then(|m| m.split('/').nth(1))
                    .map(|f| f.split(';').next().unwrap_or(f).trim().to_owned()),
            }
        }
        (_, source) => wire::ContentBody::File {
            file_url: match source {
                MediaSource::Url(url) => Some(url.clone()),
                _ => None,
            },
            file_id: match source {
                MediaSource::File { id, .. } => Some(id.clone()),
                _ => None,
            },
            filename: media.filename.clone(),
            file_data: match source {
                MediaSource::Data(_) => url,
                _ => None,
            },
        },
    }
}

/// The answers to the last run's approval requests: for each answered one, the request message again
/// (with full history and no response id, the app needs it to know what is being answered) and an
/// `mcp_approval_response`. Resume entries for anything else are not ours and are ignored.
fn approval_messages(resume: &[Resume], approvals: &[PendingApproval]) -> Vec<wire::Message> {
    let mut messages = Vec::new();
    for answer in resume {
        let Some(approval) = approvals
            .iter()
            .find(|a| a.request.id == answer.interrupt_id)
        else {
            debug!(interrupt = %answer.interrupt_id,
                "resume entry for no approval this AgentScope conversation waits on; ignored");
            continue;
        };
        let (approve, reason) = answer.approval();
        let mut request = wire::Message::new(
            &approval.message_id,
            wire::MessageType::McpApprovalRequest,
            wire::Role::Assistant,
            vec![wire::Content::data(&approval.request)],
        );
        request.status = wire::RunStatus::Completed;
        messages.push(request);
        messages.push(wire::Message::new(
            new_id("msg"),
            wire::MessageType::McpApprovalResponse,
            wire::Role::User,
            vec![wire::Content::data(wire::McpApprovalResponse {
                approval_request_id: approval.request.id.clone(),
                approve,
                id: None,
                reason,
            })],
        ));
    }
    messages
}
