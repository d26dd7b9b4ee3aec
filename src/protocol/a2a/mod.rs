//! A2A 0.2.5: JSON-RPC over one URL, server-side history and tasks. The client sends only the new message;
//! `contextId` groups a conversation, `taskId` a unit of work; streaming answers are SSE events of
//! JSON-RPC responses. See `specs/a2a.md`.

mod card;
mod inbound;
mod options;
mod outbound;
mod rpc;
mod tasks;
pub mod wire;

pub use inbound::{EncodeOptions, Encoder, Inbound, Reader};
pub use options::{InboundOptions, OutboundOptions};
pub use outbound::{Decoder, Outbound};
pub use rpc::ResultFrames;

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::face::{read_options, Options, Row};
use crate::model::kinds::{CUSTOM_AND_RAW, REASONING, STATE_AND_STEPS, TOOL_CALLS, USAGE};
use crate::model::{History, Media, MediaKind, MediaSource, Message, Part, Role};

/// A2A agents keep the history. A2A has no tools on either side, and pauses only as `input-required`, a
/// question answered in words (docs/translation.md, "A2A ↔ canonical").
pub const ROW: Row = Row {
    history: History::Delta,
    client_tools: false,
    server_tools: false,
    approvals: false,
    questions: true,
    pause_cancel: true,
    unshown: &[
        REASONING,
        TOOL_CALLS,
        STATE_AND_STEPS,
        USAGE,
        CUSTOM_AND_RAW,
    ],
    unsent: &["client_tools", "system_messages", "context", "state"],
    inbound_options: Options::of::<InboundOptions>(),
    outbound_options: Options::of::<OutboundOptions>(),
    inbound: |route, _, kept| Ok(Box::new(Inbound::new(route, read_options(route)?, kept))),
    outbound: |upstream, route, _, _| Ok(Arc::new(Outbound::new(upstream, read_options(route)?))),
};

/// A wire message as a canonical one: `user` → user, `agent` → assistant.
fn message_from_wire(message: wire::Message) -> Message {
    let role = match message.role {
        wire::MessageRole::User => Role::User,
        wire::MessageRole::Agent => Role::Assistant,
    };
    Message::new(
        message.message_id,
        role,
        message.parts.into_iter().map(part_from_wire).collect(),
    )
}

fn part_from_wire(part: wire::Part) -> Part {
    match part {
        wire::Part::Text { text, .. } => Part::Text(text),
        wire::Part::Data { data, .. } => Part::Data(Value::Object(data)),
        wire::Part::File { file, .. } => {
            let source = match (file.bytes, file.uri) {
                (Some(bytes), _) => MediaSource::Data(bytes),
                (None, uri) => MediaSource::Url(uri.unwrap_or_default()),
            };
            Part::Media(Media {
                kind: file
                    .mime_type
                    .as_deref()
                    .map_or(MediaKind::Document, MediaKind::from_mime),
                source,
                mime_type: file.mime_type,
                filename: file.name,
            })
        }
    }
}

/// A canonical part as an A2A part. A2A data parts must be objects: other JSON is wrapped as `{"value": …}`;
/// a provider file id (no A2A form) travels as the file's `uri`.
fn part_to_wire(part: &Part) -> wire::Part {
    match part {
        Part::Text(text) => wire::Part::text(text.clone()),
        Part::Data(Value::Object(data)) => wire::Part::Data {
            data: data.clone(),
            metadata: None,
        },
        Part::Data(other) => {
            let mut data = Map::new();
            data.insert("value".to_owned(), other.clone());
            wire::Part::Data {
                data,
                metadata: None,
            }
        }
        Part::Media(media) => {
            let (bytes, uri) = match &media.source {
                MediaSource::Data(bytes) => (Some(bytes.clone()), None),
                MediaSource::Url(url) => (None, Some(url.clone())),
                MediaSource::File { id, .. } => (None, Some(id.clone())),
            };
            let file = wire::File {
                name: media.filename.clone(),
                mime_type: media.mime_type.clone(),
                bytes,
                uri,
            };
            wire::Part::File {
                file,
                metadata: None,
            }
        }
    }
}
