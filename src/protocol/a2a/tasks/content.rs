//! What a task keeps of its run: its history and its artifacts (merged per `artifactId`), bounded in bytes.

use super::super::wire;
use crate::size::json_len;

/// The bytes of history a task keeps.
pub const MAX_HISTORY_BYTES: usize = 1 << 20;
/// The bytes of artifacts a task keeps.
pub const MAX_ARTIFACT_BYTES: usize = 1 << 20;
/// Ends an artifact's kept text when the rest of it was not kept.
pub const ARTIFACT_TRUNCATED: &str =
    "…[truncated: the task's artifacts exceeded what the proxy keeps]";

/// Appends a message, then drops the oldest ones beyond [`MAX_HISTORY_BYTES`] (never the latest).
pub(super) fn push_history(history: &mut Vec<wire::Message>, message: wire::Message) {
    history.push(message);
    let sizes: Vec<usize> = history.iter().map(json_len).collect();
    let mut total: usize = sizes.iter().sum();
    let mut drop = 0;
    while total > MAX_HISTORY_BYTES && drop + 1 < history.len() {
        total -= sizes[drop];
        drop += 1;
    }
    history.drain(..drop);
}

fn part_bytes(part: &wire::Part) -> usize {
    match part {
        wire::Part::Text { text, .. } => text.len(),
        other => json_len(other),
    }
}

/// Keeps a task's artifacts within [`MAX_ARTIFACT_BYTES`]: the parts of artifact `index` that do not fit go,
/// a text part is cut and marked [`ARTIFACT_TRUNCATED`].
fn bound_artifacts(artifacts: &mut [wire::Artifact], index: usize) {
    let total: usize = artifacts
        .iter()
        .flat_map(|artifact| &artifact.parts)
        .map(part_bytes)
        .sum();
    let mut over = total.saturating_sub(MAX_ARTIFACT_BYTES);
    let parts = &mut artifacts[index].parts;
    while over > 0 {
        match parts.last_mut() {
            Some(wire::Part::Text { text, .. }) if text.ends_with(ARTIFACT_TRUNCATED) => {
                let keep = text.len() - ARTIFACT_TRUNCATED.len();
                let cut = crate::logging::char_prefix(text, keep.saturating_sub(over)).len();
                text.truncate(cut);
                text.push_str(ARTIFACT_TRUNCATED);
                return;
            }
            Some(wire::Part::Text { text, .. }) if text.len() > over => {
                let keep = text.len() - over;
                let cut = crate::logging::char_prefix(
                    text,
                    keep.saturating_sub(ARTIFACT_TRUNCATED.len()),
                )
                .len();
                text.truncate(cut);
                text.push_str(ARTIFACT_TRUNCATED);
                return;
            }
            Some(part) => {
                over = over.saturating_sub(part_bytes(part));
                parts.pop();
            }
            None => return,
        }
    }
}

/// Merges a chunk into the task's artifacts: one artifact per id; `append` adds parts (a text part joins the
/// text part before it), otherwise the chunk replaces the artifact. Appending to an unknown id creates it.
pub fn merge_artifact(artifacts: &mut Vec<wire::Artifact>, chunk: &wire::Artifact, append: bool) {
    let Some(existing) = artifacts
        .iter_mut()
        .find(|a| a.artifact_id == chunk.artifact_id)
    else {
        let mut artifact = chunk.clone();
        artifact.parts = Vec::new();
        push_parts(&mut artifact.parts, &chunk.parts);
        artifacts.push(artifact);
        let last = artifacts.len() - 1;
        bound_artifacts(artifacts, last);
        return;
    };
    if !append {
        existing.parts.clear();
    }
    push_parts(&mut existing.parts, &chunk.parts);
    if chunk.name.is_some() {
        existing.name.clone_from(&chunk.name);
    }
    if chunk.description.is_some() {
        existing.description.clone_from(&chunk.description);
    }
    if chunk.metadata.is_some() {
        existing.metadata.clone_from(&chunk.metadata);
    }
    if let Some(index) = artifacts
        .iter()
        .position(|a| a.artifact_id == chunk.artifact_id)
    {
        bound_artifacts(artifacts, index);
    }
}

/// Appends parts, joining consecutive text parts (the text of an empty part alone is kept only when nothing
/// else is there).
fn push_parts(parts: &mut Vec<wire::Part>, new: &[wire::Part]) {
    for part in new {
        match (parts.last_mut(), part) {
            (
                Some(wire::Part::Text {
                    text: last,
                    metadata: None,
                }),
                wire::Part::Text {
                    text,
                    metadata: None,
                },
            ) => last.push_str(text),
            _ => parts.push(part.clone()),
        }
    }
}

/// The task with only its last `history_length` messages (all when absent).
pub fn with_history_length(mut task: wire::Task, history_length: Option<u64>) -> wire::Task {
    if let Some(length) = history_length {
        let keep = usize::try_from(length).unwrap_or(usize::MAX);
        let drop = task.history.len().saturating_sub(keep);
        task.history.drain(..drop);
    }
    task
}
