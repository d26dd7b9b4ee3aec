//! The decoder's contents: text and reasoning streamed or repeated by a settled message, and the other
//! contents as artifacts.

use serde_json::Value;
use tracing::debug;

use super::{is_settled, Decoder, OpenMessage};
use crate::model::{Artifact, Event, Media, MediaKind, MediaSource, Part, Role};
use crate::protocol::agentscope::wire;

impl Decoder {
    /// One content of message `message_id` at slot `index` (streamed, or repeated by a settled message).
    pub(super) fn content(
        &mut self,
        message_id: &str,
        index: u32,
        content: &wire::Content,
        out: &mut Vec<Event>,
    ) {
        let kind = match self.messages.get(message_id) {
            Some(open) => open.kind.clone(),
            None => {
                // A content before (or without) its message: an assistant text message.
                self.messages.insert(
                    message_id.to_owned(),
                    OpenMessage::new(wire::MessageType::Message, Role::Assistant),
                );
                wire::MessageType::Message
            }
        };
        let completed = content.status.as_ref().is_some_and(is_settled);
        match (&kind, &content.body) {
            (
                wire::MessageType::Message | wire::MessageType::Reasoning,
                wire::ContentBody::Text { text: Some(text) }
                | wire::ContentBody::Refusal {
                    refusal: Some(text),
                },
            ) => self.text(message_id, index, text, content.is_delta(), out),
            (wire::MessageType::Message | wire::MessageType::Reasoning, body) => {
                if completed && !matches!(body, wire::ContentBody::Text { .. }) {
                    self.artifact(message_id, index, body, out);
                }
            }
            (kind, wire::ContentBody::Data { .. }) if kind.is_call() => {
                self.call(message_id, index, content, completed, out)
            }
            (kind, wire::ContentBody::Data { .. }) if kind.is_call_output() => {
                if completed {
                    self.result(message_id, index, content, out);
                }
            }
            (wire::MessageType::McpApprovalRequest, wire::ContentBody::Data { .. }) => {
                if completed {
                    self.approval(message_id, index, content, out);
                }
            }
            (kind, _) => {
                debug!(%kind, "an AgentScope content this proxy does not translate; skipped")
            }
        }
    }

    /// Text of a text-like message: deltas append; whole texts add only what extends what was sent.
    pub(super) fn text(
        &mut self,
        message_id: &str,
        index: u32,
        text: &str,
        delta: bool,
        out: &mut Vec<Event>,
    ) {
        let Some(open) = self.messages.get_mut(message_id) else {
            return;
        };
        let sent = open.texts.entry(index).or_default();
        let new = if delta {
            text
        } else if let Some(rest) = text.strip_prefix(sent.as_str()) {
            rest
        } else {
            debug!(message = %message_id, "a whole AgentScope text that differs from the streamed one; not shown again");
            return;
        };
        if new.is_empty() {
            return;
        }
        sent.push_str(new);
        let reasoning = open.kind == wire::MessageType::Reasoning;
        if !open.started {
            open.started = true;
            out.push(if reasoning {
                Event::ReasoningStart {
                    message_id: message_id.to_owned(),
                }
            } else {
                Event::TextStart {
                    message_id: message_id.to_owned(),
                    role: open.role,
                }
            });
        }
        let message_id = message_id.to_owned();
        let delta = new.to_owned();
        out.push(if reasoning {
            Event::ReasoningDelta { message_id, delta }
        } else {
            Event::TextDelta { message_id, delta }
        });
    }

    /// A completed non-text content of a message: an artifact, once.
    fn artifact(
        &mut self,
        message_id: &str,
        index: u32,
        body: &wire::ContentBody,
        out: &mut Vec<Event>,
    ) {
        let Some(part) = part_from_body(body) else {
            return debug!(message = %message_id, "an empty or unknown AgentScope content; skipped");
        };
        if !self.settled.insert((message_id.to_owned(), index)) {
            return;
        }
        out.push(Event::Artifact(Artifact {
            id: format!("{message_id}:{index}"),
            name: None,
            parts: vec![part],
            append: false,
            last_chunk: true,
        }));
    }
}

/// A non-text content as a canonical part.
fn part_from_body(body: &wire::ContentBody) -> Option<Part> {
    let media = |kind: MediaKind, url: &Option<String>, mime: Option<String>| {
        url.as_ref().map(|url| {
            Part::Media(Media {
                kind,
                source: MediaSource::Url(url.clone()),
                mime_type: mime,
                filename: None,
            })
        })
    };
    match body {
        wire::ContentBody::Data { data } => data.clone().map(|d| Part::Data(Value::Object(d))),
        wire::ContentBody::Image { image_url } => media(MediaKind::Image, image_url, None),
        wire::ContentBody::Video { video_url } => media(MediaKind::Video, video_url, None),
        wire::ContentBody::Audio { data, format } => {
            let mime = format.as_ref().map(|f| format!("audio/{f}"));
            let data = data.as_ref()?;
            let source = if data.contains("://") || data.starts_with("data:") {
                MediaSource::Url(data.clone())
            } else {
                MediaSource::Data(data.clone())
            };
            Some(Part::Media(Media {
                kind: MediaKind::Audio,
                source,
                mime_type: mime,
                filename: None,
            }))
        }
        wire::ContentBody::File {
            file_url,
            file_id,
            filename,
            file_data,
        } => {
            let source = match (file_url, file_data, file_id) {
                (Some(url), _, _) => MediaSource::Url(url.clone()),
                (None, Some(data), _) if data.starts_with("data:") => {
                    MediaSource::Url(data.clone())
                }
                (None, Some(data), _) => MediaSource::Data(data.clone()),
                (None, None, Some(id)) => MediaSource::File {
                    id: id.clone(),
                    provider: Some("agentscope".to_owned()),
                },
                (None, None, None) => return None,
            };
            Some(Part::Media(Media {
                kind: MediaKind::Document,
                source,
                mime_type: None,
                filename: filename.clone(),
            }))
        }
        wire::ContentBody::Text { .. }
        | wire::ContentBody::Refusal { .. }
        | wire::ContentBody::Unknown => None,
    }
}
