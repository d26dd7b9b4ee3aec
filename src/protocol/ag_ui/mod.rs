//! AG-UI: stateless, full history, one `POST` of `RunAgentInput` per run answered by an SSE stream of typed
//! events. See `specs/ag-ui.md`.

mod inbound;
mod options;
mod outbound;
pub mod wire;

pub use inbound::{Encoder, Inbound, Reader};
pub use options::{AguiInterrupts, InboundOptions, OutboundOptions};
pub use outbound::{Decoder, Outbound};

use std::sync::Arc;

use crate::face::{read_options, Options, Row};
use crate::model::{History, Media, MediaKind, MediaSource, Message, Part, Role, ToolCall};

/// AG-UI sends the whole conversation and has everything; its pauses are calls of frontend tools.
pub const ROW: Row = Row {
    history: History::Full,
    client_tools: true,
    server_tools: true,
    approvals: true,
    questions: true,
    pause_cancel: true,
    unshown: &[],
    unsent: &[],
    inbound_options: Options::of::<InboundOptions>(),
    outbound_options: Options::of::<OutboundOptions>(),
    inbound: |route, _, _| Ok(Box::new(Inbound::new(read_options(route)?))),
    outbound: |upstream, route, _, _| {
        let options = read_options(route)?;
        Ok(Arc::new(Outbound::new(upstream, options, route.inbound)))
    },
};

/// A wire message as a canonical one; `None` for messages that are never sent to an agent (activity,
/// reasoning).
fn message_from_wire(message: wire::Message) -> Option<Message> {
    let message = match message {
        wire::Message::Developer(m) => named(
            Message::text_message(m.id, Role::Developer, m.content),
            m.name,
        ),
        wire::Message::System(m) => {
            named(Message::text_message(m.id, Role::System, m.content), m.name)
        }
        wire::Message::User(m) => named(
            Message::new(m.id, Role::User, parts_from_wire(m.content)),
            m.name,
        ),
        wire::Message::Assistant(m) => {
            let content = m
                .content
                .filter(|text| !text.is_empty())
                .map(Part::Text)
                .into_iter()
                .collect();
            let mut message = named(Message::new(m.id, Role::Assistant, content), m.name);
            message.tool_calls = m
                .tool_calls
                .into_iter()
                .map(|call| ToolCall {
                    id: call.id,
                    name: call.function.name,
                    arguments: call.function.arguments,
                })
                .collect();
            message
        }
        wire::Message::Tool(m) => {
            let mut message = Message::new(m.id, Role::Tool, parts_from_wire(m.content));
            message.tool_call_id = Some(m.tool_call_id);
            message.is_error = m.error.is_some();
            message
        }
        wire::Message::Activity(_) | wire::Message::Reasoning(_) => return None,
    };
    Some(message)
}

fn named(mut message: Message, name: Option<String>) -> Message {
    message.name = name;
    message
}

fn parts_from_wire(content: wire::Content) -> Vec<Part> {
    match content {
        wire::Content::Text(text) => vec![Part::Text(text)],
        wire::Content::Parts(parts) => parts.into_iter().filter_map(part_from_wire).collect(),
    }
}

fn part_from_wire(part: wire::ContentPart) -> Option<Part> {
    let (kind, part) = match part {
        wire::ContentPart::Text { text } => return Some(Part::Text(text)),
        wire::ContentPart::Image(p) => (MediaKind::Image, p),
        wire::ContentPart::Audio(p) => (MediaKind::Audio, p),
        wire::ContentPart::Video(p) => (MediaKind::Video, p),
        wire::ContentPart::Document(p) => (MediaKind::Document, p),
        // The pre-1.0 part, upgraded as the 1.0 client does: data first, then url.
        wire::ContentPart::Binary {
            mime_type,
            url,
            data,
            filename,
        } => {
            let source = match (data, url) {
                (Some(data), _) => MediaSource::Data(data),
                (None, Some(url)) => MediaSource::Url(url),
                (None, None) => return None,
            };
            return Some(Part::Media(Media {
                kind: MediaKind::from_mime(&mime_type),
                source,
                mime_type: Some(mime_type),
                filename,
            }));
        }
    };
    // Where the 1.0 client puts a legacy part's filename (and where `part_to_wire` writes it).
    let filename = part
        .metadata
        .as_ref()
        .and_then(|metadata| metadata.get("filename")?.as_str())
        .map(str::to_owned);
    let (source, mime_type) = match part.source {
        wire::Source::Data { value, mime_type } => (MediaSource::Data(value), mime_type),
        wire::Source::Url { value, mime_type } => (MediaSource::Url(value), mime_type),
        wire::Source::File {
            value,
            provider,
            mime_type,
        } => (
            MediaSource::File {
                id: value,
                provider,
            },
            mime_type,
        ),
    };
    Some(Part::Media(Media {
        kind,
        source,
        mime_type,
        filename,
    }))
}

/// A canonical message as AG-UI writes it.
fn message_to_wire(message: &Message) -> wire::Message {
    let id = message.id.clone();
    let name = message.name.clone();
    match message.role {
        Role::System => wire::Message::System(wire::PlainMessage {
            id,
            content: message.text(),
            name,
        }),
        Role::Developer => wire::Message::Developer(wire::PlainMessage {
            id,
            content: message.text(),
            name,
        }),
        Role::User => wire::Message::User(wire::UserMessage {
            id,
            content: content_to_wire(&message.content),
            name,
        }),
        Role::Assistant => wire::Message::Assistant(wire::AssistantMessage {
            id,
            content: Some(message.text()).filter(|text| !text.is_empty()),
            tool_calls: message
                .tool_calls
                .iter()
                .map(|call| wire::ToolCall {
                    id: call.id.clone(),
                    kind: "function".to_owned(),
                    function: wire::FunctionCall {
                        name: call.name.clone(),
                        arguments: call.arguments.clone(),
                    },
                })
                .collect(),
            name,
        }),
        Role::Tool => {
            let content = message.text();
            wire::Message::Tool(wire::ToolMessage {
                id,
                error: message.is_error.then(|| content.clone()),
                content: wire::Content::Text(content),
                tool_call_id: message.tool_call_id.clone().unwrap_or_default(),
            })
        }
    }
}

/// Plain text stays a string (what every server version reads); anything else becomes 1.0 parts.
fn content_to_wire(parts: &[Part]) -> wire::Content {
    if parts.iter().all(|part| matches!(part, Part::Text(_))) {
        return wire::Content::Text(crate::model::parts_text(parts));
    }
    wire::Content::Parts(parts.iter().map(part_to_wire).collect())
}

fn part_to_wire(part: &Part) -> wire::ContentPart {
    let media = match part {
        Part::Text(text) => return wire::ContentPart::Text { text: text.clone() },
        Part::Data(value) => {
            return wire::ContentPart::Text {
                text: value.to_string(),
            }
        }
        Part::Media(media) => media,
    };
    let mime_type = media.mime_type.clone();
    let source = match &media.source {
        MediaSource::Data(value) => wire::Source::Data {
            value: value.clone(),
            mime_type,
        },
        MediaSource::Url(value) => wire::Source::Url {
            value: value.clone(),
            mime_type,
        },
        MediaSource::File { id, provider } => wire::Source::File {
            value: id.clone(),
            provider: provider.clone(),
            mime_type,
        },
    };
    let metadata = media
        .filename
        .as_ref()
        .map(|name| serde_json::json!({"filename": name}));
    let part = wire::SourcePart { source, metadata };
    match media.kind {
        MediaKind::Image => wire::ContentPart::Image(part),
        MediaKind::Audio => wire::ContentPart::Audio(part),
        MediaKind::Video => wire::ContentPart::Video(part),
        MediaKind::Document => wire::ContentPart::Document(part),
    }
}
