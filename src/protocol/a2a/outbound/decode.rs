//! The answer: SSE events or one JSON body of JSON-RPC responses, as canonical events.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use tracing::debug;

use crate::error::{Error, Result};
use crate::face::{StreamEnd, UpstreamDecoder};
use crate::model::{new_id, Artifact, Event, Interrupt, InterruptKind, Outcome, Part};
use crate::protocol::a2a::{part_from_wire, wire};
use crate::sse::SseEvent;

use super::rpc_error;

/// Decodes an upstream A2A answer into canonical events. Each SSE `data:` payload of `message/stream`, or the
/// JSON body of `message/send`, is one JSON-RPC response ([`Decoder::decode`]); when the stream ends without
/// settling the run, [`Decoder::end_of_stream`] names the task to ask about, and
/// [`Decoder::decode_task_query`] reads the `tasks/get` answer.
///
/// - artifact text → assistant text, one message per artifact: `append` adds to it (an unknown artifact is
///   created), a replacement (`append` false) of a known artifact shows only the new suffix when it extends
///   the old text and otherwise starts a new message; `lastChunk` ends the message;
/// - data and file parts → [`Event::Artifact`];
/// - status message text → assistant text (only the new suffix when it extends the task's previous status
///   text; nothing when it repeats an artifact's text); `submitted`/`working` alone → nothing;
/// - `input-required` / `auth-required` → an input-required interrupt, then the run finishes interrupted;
///   `completed` → finished; `canceled` → cancelled; `failed` / `rejected` / `unknown` → a run error with
///   that code and the status message; a JSON-RPC error → a run error with its code (`"-32001"`, ...);
/// - a `Message` result → its text, and the run is finished.
#[derive(Debug, Default)]
pub struct Decoder {
    /// The upstream conversation, as the agent last named it.
    context_id: Option<String>,
    /// The run's task, once the agent named one.
    task_id: Option<String>,
    /// The task's last state.
    state: Option<wire::TaskState>,
    /// The question of a paused status that did not end the stream (`final` absent): it settles the run if
    /// nothing moves the task on before the stream ends.
    pending_pause: Option<String>,
    /// The run's terminal event was produced.
    settled: bool,
    /// The stream said it is over (`final`) without a state that settles the run.
    over: bool,
    /// The interrupt the run ended with.
    interrupt_id: Option<String>,
    /// What each artifact has shown, by artifactId.
    artifacts: HashMap<String, ShownArtifact>,
    /// The last status message text of each task ("" for none), and the message showing it.
    status_texts: HashMap<String, StatusText>,
}

/// What one artifact has shown so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct ShownArtifact {
    /// The canonical message showing its text.
    #[serde(skip)]
    message_id: String,
    text: String,
    /// How many data and file parts were emitted.
    data_parts: usize,
}

#[derive(Debug)]
struct StatusText {
    message_id: String,
    text: String,
}

impl UpstreamDecoder for Decoder {
    fn frame(&mut self, frame: &SseEvent, out: &mut Vec<Event>) -> Result<bool> {
        self.decode(&frame.data, out)
    }

    /// However the stream ended, a task left unsettled is asked about next ([`Decoder::end_of_stream`]); a
    /// last event without its blank line still counts.
    fn end(&mut self, end: StreamEnd, out: &mut Vec<Event>) -> Result<()> {
        if let StreamEnd::InsideEvent(Some(frame)) = end {
            self.decode(&frame.data, out)?;
        }
        Ok(())
    }
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one JSON-RPC response. Returns `true` when the stream has nothing more to say: the run is
    /// settled (its terminal event is in `out`), or the agent said `final`.
    pub fn decode(&mut self, data: &str, out: &mut Vec<Event>) -> Result<bool> {
        if self.settled || self.over {
            debug!("dropping an A2A event after the end of the run");
            return Ok(true);
        }
        if data.trim().is_empty() {
            return Ok(false);
        }
        let response = serde_json::from_str::<wire::RawResponse<wire::StreamResult>>(data)
            .map_err(|e| {
                Error::upstream_malformed(format!(
                    "upstream sent something that is not an A2A 0.2.5 JSON-RPC response: {e}"
                ))
            })?;
        match response {
            wire::RawResponse {
                error: Some(error), ..
            } => self.settle(Event::RunError(rpc_error(error)), out),
            wire::RawResponse {
                result: Some(result),
                ..
            } => self.result(result, out),
            _ => {
                return Err(Error::upstream_malformed(
                    "upstream sent a JSON-RPC response with neither result nor error",
                ))
            }
        }
        Ok(self.settled || self.over)
    }

    /// The stream ended (closed, broken off, or `final`). Settles the run on a paused task; otherwise returns
    /// the task a `tasks/get` could tell the state of, if the run is not settled.
    pub fn end_of_stream(&mut self, out: &mut Vec<Event>) -> Option<String> {
        if self.settled {
            return None;
        }
        if let Some(text) = self.pending_pause.take() {
            self.pause(text, out);
            return None;
        }
        self.task_id.clone()
    }

    /// Decodes the `tasks/get` answer for that task: a state that settles the run settles it (with what the
    /// task shows that the stream did not); a task still running, or an error, leaves the run unsettled, and
    /// the run ends as cut short.
    pub fn decode_task_query(&mut self, data: &str, out: &mut Vec<Event>) {
        if self.settled {
            return;
        }
        match serde_json::from_str::<wire::RawResponse<wire::Task>>(data) {
            Ok(wire::RawResponse {
                error: Some(error), ..
            }) => debug!(
                "tasks/get answered an error: {}",
                crate::logging::clipped(&error.message)
            ),
            Ok(wire::RawResponse {
                result: Some(task), ..
            }) => {
                self.over = false;
                self.task(task, out);
                if let Some(text) = self.pending_pause.take() {
                    self.pause(text, out);
                }
            }
            Ok(_) => debug!("tasks/get answered neither a task nor an error"),
            Err(e) => debug!("tasks/get answered something that is not a task: {e}"),
        }
    }

    /// The upstream conversation, once the agent named it.
    pub fn context_id(&self) -> Option<&str> {
        self.context_id.as_deref()
    }

    /// The run's task, once the agent named it.
    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }

    /// The task and the interrupt, when the run ended with the task waiting for input.
    pub fn paused(&self) -> Option<(&str, &str)> {
        match (&self.task_id, &self.interrupt_id, self.state) {
            (Some(task), Some(interrupt), Some(state)) if state.is_paused() => {
                Some((task, interrupt))
            }
            _ => None,
        }
    }

    /// The task while it still runs upstream: known, not settled, not in a terminal or paused state.
    pub(super) fn running_task(&self) -> Option<&str> {
        match self.state {
            _ if self.settled => None,
            Some(state) if state.is_terminal() || state.is_paused() => None,
            _ => self.task_id.as_deref(),
        }
    }

    /// What the artifacts have shown, as kept in the conversation record while the task waits for input.
    pub(super) fn shown_artifacts(&self) -> BTreeMap<String, ShownArtifact> {
        self.artifacts
            .iter()
            .map(|(id, artifact)| (id.clone(), artifact.clone()))
            .collect()
    }

    /// Starts from what a paused task had shown, so continuing it shows only what is new.
    pub(super) fn seed_shown_artifacts(&mut self, shown: BTreeMap<String, ShownArtifact>) {
        self.artifacts = shown
            .into_iter()
            .map(|(id, mut artifact)| {
                artifact.message_id = new_id("msg");
                (id, artifact)
            })
            .collect();
    }

    fn result(&mut self, result: wire::StreamResult, out: &mut Vec<Event>) {
        match result {
            wire::StreamResult::Task(task) => self.task(task, out),
            wire::StreamResult::Message(message) => self.message(message, out),
            wire::StreamResult::StatusUpdate(update) => {
                self.note_ids(&update.context_id, &update.task_id);
                self.status(&update.task_id, update.status, update.is_final, out);
            }
            wire::StreamResult::ArtifactUpdate(update) => {
                self.note_ids(&update.context_id, &update.task_id);
                self.artifact_update(update.artifact, update.append, update.last_chunk, out);
            }
        }
    }

    fn note_ids(&mut self, context_id: &str, task_id: &str) {
        if !context_id.is_empty() && self.context_id.as_deref() != Some(context_id) {
            self.context_id = Some(context_id.to_owned());
        }
        if !task_id.is_empty() && self.task_id.as_deref() != Some(task_id) {
            self.task_id = Some(task_id.to_owned());
            // The run's span names its task even when the task ends with the run (the record keeps none).
            crate::telemetry::annotate("a2a.task.id", task_id);
        }
    }

    /// A whole task (the `message/send` result, a stream's first event, the `tasks/get` answer): its artifacts
    /// as snapshots (duplicate artifactIds concatenated in order), then its status.
    fn task(&mut self, task: wire::Task, out: &mut Vec<Event>) {
        self.note_ids(&task.context_id, &task.id);
        let complete = task.status.state.is_terminal();
        for artifact in merge_artifacts(task.artifacts) {
            self.artifact_snapshot(artifact, complete, out);
        }
        // A task is not a stream's `final`: a paused one may still move on (a continued task starts out
        // paused), so its pause settles the run only at the end of the stream.
        self.status(&task.id, task.status, false, out);
    }

    /// A `Message` result: the whole answer, no task.
    fn message(&mut self, message: wire::Message, out: &mut Vec<Event>) {
        if let Some(context_id) = &message.context_id {
            self.context_id = Some(context_id.clone());
        }
        let (text, data) = split_parts(message.parts);
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            let message_id = new_id("msg");
            out.push(Event::TextDelta {
                message_id: message_id.clone(),
                delta: text,
            });
            out.push(Event::TextEnd { message_id });
        }
        if !data.is_empty() {
            out.push(Event::Artifact(Artifact {
                id: message.message_id,
                name: None,
                parts: data,
                append: false,
                last_chunk: true,
            }));
        }
        self.settle(
            Event::RunFinished {
                outcome: Outcome::Completed,
                usage: None,
            },
            out,
        );
    }

    fn status(
        &mut self,
        task_id: &str,
        status: wire::TaskStatus,
        is_final: bool,
        out: &mut Vec<Event>,
    ) {
        use wire::TaskState as S;
        let state = status.state;
        let previous = self.state.replace(state);
        let (text, data) = match status.message {
            Some(message) => {
                let id = message.message_id.clone();
                let (text, data) = split_parts(message.parts);
                (text.unwrap_or_default(), Some((id, data)))
            }
            None => (String::new(), None),
        };
        if let Some((id, data)) = data.filter(|(_, data)| !data.is_empty()) {
            out.push(Event::Artifact(Artifact {
                id,
                name: None,
                parts: data,
                append: false,
                last_chunk: true,
            }));
        }
        if !state.is_paused() {
            self.pending_pause = None;
        }
        match state {
            S::Submitted | S::Working => {
                // Said at once, not left to the first content: a client shows the run as started while
                // the agent thinks.
                if !matches!(previous, Some(S::Submitted | S::Working)) {
                    out.push(Event::RunStarted);
                }
                self.status_text(task_id, text, out);
                if is_final {
                    debug!(
                        state = state.as_str(),
                        "A2A stream ended on a task still running"
                    );
                    self.over = true;
                }
            }
            S::InputRequired | S::AuthRequired => {
                // The question goes into the interrupt, not the chat: clients show the interrupt.
                let text = if !text.is_empty() {
                    text
                } else if state == S::AuthRequired {
                    "The agent needs authorization to go on.".to_owned()
                } else {
                    "The agent needs more input to go on.".to_owned()
                };
                if is_final {
                    self.pause(text, out);
                } else {
                    self.pending_pause = Some(text);
                }
            }
            S::Completed => {
                self.status_text(task_id, text, out);
                self.settle(
                    Event::RunFinished {
                        outcome: Outcome::Completed,
                        usage: None,
                    },
                    out,
                );
            }
            S::Canceled => {
                self.status_text(task_id, text, out);
                self.settle(
                    Event::RunFinished {
                        outcome: Outcome::Cancelled,
                        usage: None,
                    },
                    out,
                );
            }
            S::Failed | S::Rejected | S::Unknown => {
                let message = if !text.is_empty() {
                    text
                } else {
                    match state {
                        S::Failed => "the A2A agent's task failed".to_owned(),
                        S::Rejected => "the A2A agent rejected the task".to_owned(),
                        _ => "the A2A agent's task ended in state unknown".to_owned(),
                    }
                };
                let error = Error::upstream_agent(state.as_str(), message);
                self.settle(Event::RunError(error), out);
            }
        }
    }

    /// Status message text as assistant text: only what is new.
    fn status_text(&mut self, task_id: &str, text: String, out: &mut Vec<Event>) {
        if text.is_empty() {
            return;
        }
        if self.artifacts.values().any(|a| a.text == text) {
            debug!("status message repeats an artifact's text; not shown twice");
            return;
        }
        match self.status_texts.get_mut(task_id) {
            Some(previous) if previous.text == text => {}
            Some(previous) if text.starts_with(&previous.text) => {
                out.push(Event::TextDelta {
                    message_id: previous.message_id.clone(),
                    delta: text[previous.text.len()..].to_owned(),
                });
                previous.text = text;
            }
            _ => {
                let message_id = new_id("msg");
                out.push(Event::TextDelta {
                    message_id: message_id.clone(),
                    delta: text.clone(),
                });
                self.status_texts
                    .insert(task_id.to_owned(), StatusText { message_id, text });
            }
        }
    }

    /// A streamed chunk of an artifact.
    fn artifact_update(
        &mut self,
        artifact: wire::Artifact,
        append: bool,
        last_chunk: bool,
        out: &mut Vec<Event>,
    ) {
        let wire::Artifact {
            artifact_id,
            name,
            parts,
            ..
        } = artifact;
        let (text, data) = split_parts(parts);
        let shown = self.shown_so_far(&artifact_id);
        let known = !shown.message_id.is_empty();
        if !known {
            shown.message_id = new_id("msg");
        }
        if let Some(text) = text {
            if append || !known {
                // Appending, or creating (an unknown artifact with `append`, as the seed vendor sends).
                shown.text.push_str(&text);
                if !text.is_empty() {
                    out.push(Event::TextDelta {
                        message_id: shown.message_id.clone(),
                        delta: text,
                    });
                }
            } else {
                replace_text(shown, text, out);
            }
        }
        let appends_data = append && shown.data_parts > 0;
        if !appends_data {
            shown.data_parts = 0;
        }
        if !data.is_empty() {
            shown.data_parts += data.len();
            out.push(Event::Artifact(Artifact {
                id: artifact_id,
                name,
                parts: data,
                append: appends_data,
                last_chunk,
            }));
        }
        if last_chunk && !shown.text.is_empty() {
            out.push(Event::TextEnd {
                message_id: shown.message_id.clone(),
            });
        }
    }

    /// What the artifact `id` has shown so far (nothing, the first time).
    fn shown_so_far(&mut self, id: &str) -> &mut ShownArtifact {
        // Looked up before it is inserted: the id is copied once per artifact, not per chunk.
        if !self.artifacts.contains_key(id) {
            self.artifacts
                .insert(id.to_owned(), ShownArtifact::default());
        }
        self.artifacts.get_mut(id).expect("inserted above")
    }

    /// An artifact as a task shows it whole: only what was not shown yet.
    fn artifact_snapshot(
        &mut self,
        artifact: wire::Artifact,
        complete: bool,
        out: &mut Vec<Event>,
    ) {
        let (text, data) = split_parts(artifact.parts);
        let shown = self.shown_so_far(&artifact.artifact_id);
        if shown.message_id.is_empty() {
            shown.message_id = new_id("msg");
        }
        if let Some(text) = text {
            replace_text(shown, text, out);
        }
        if data.len() > shown.data_parts {
            let append = shown.data_parts > 0;
            let new = data[shown.data_parts..].to_vec();
            shown.data_parts = data.len();
            out.push(Event::Artifact(Artifact {
                id: artifact.artifact_id,
                name: artifact.name,
                parts: new,
                append,
                last_chunk: complete,
            }));
        }
    }

    /// The run pauses: the question as an interrupt, then the end of the run.
    fn pause(&mut self, text: String, out: &mut Vec<Event>) {
        let id = new_id("int");
        self.interrupt_id = Some(id.clone());
        out.push(Event::Interrupt(Interrupt {
            id,
            kind: InterruptKind::InputRequired { text },
        }));
        self.settle(
            Event::RunFinished {
                outcome: Outcome::Interrupted,
                usage: None,
            },
            out,
        );
    }

    fn settle(&mut self, terminal: Event, out: &mut Vec<Event>) {
        self.settled = true;
        out.push(terminal);
    }
}

/// An artifact's text replaced by `text`: only the suffix when it extends what was shown, nothing when it is
/// the same, otherwise a new message (the old one ends).
fn replace_text(shown: &mut ShownArtifact, text: String, out: &mut Vec<Event>) {
    if text == shown.text {
        return;
    }
    if text.starts_with(&shown.text) {
        out.push(Event::TextDelta {
            message_id: shown.message_id.clone(),
            delta: text[shown.text.len()..].to_owned(),
        });
    } else {
        if !shown.text.is_empty() {
            out.push(Event::TextEnd {
                message_id: shown.message_id.clone(),
            });
            shown.message_id = new_id("msg");
        }
        out.push(Event::TextDelta {
            message_id: shown.message_id.clone(),
            delta: text.clone(),
        });
    }
    shown.text = text;
}

/// The text of the text parts (`None` when there are none) and the other parts as canonical parts.
fn split_parts(parts: Vec<wire::Part>) -> (Option<String>, Vec<Part>) {
    let mut text: Option<String> = None;
    let mut data = Vec::new();
    for part in parts {
        match part {
            wire::Part::Text { text: t, .. } => match &mut text {
                Some(text) => text.push_str(&t),
                None => text = Some(t),
            },
            other => data.push(part_from_wire(other)),
        }
    }
    (text, data)
}

/// Artifacts by artifactId, in order of first appearance, the parts of repeated ids concatenated.
fn merge_artifacts(artifacts: Vec<wire::Artifact>) -> Vec<wire::Artifact> {
    let mut merged: Vec<wire::Artifact> = Vec::with_capacity(artifacts.len());
    for artifact in artifacts {
        match merged
            .iter_mut()
            .find(|m| m.artifact_id == artifact.artifact_id)
        {
            Some(existing) => {
                existing.parts.extend(artifact.parts);
                if existing.name.is_none() {
                    existing.name = artifact.name;
                }
            }
            None => merged.push(artifact),
        }
    }
    merged
}
