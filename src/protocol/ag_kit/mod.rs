//! AG-Kit send-message v0 (the legacy Tencent CloudBase protocol): the server keeps the history under
//! `conversationId`, each `POST` carries only what is new (`messages`) or the answer to an interrupt
//! (`resume`), and the reply is an SSE stream of lower-case events ending with `data: [DONE]`. See
//! `specs/ag-kit.md`.

mod inbound;
mod outbound;
pub mod wire;

pub use inbound::{Encoder, Inbound, Reader};
pub use outbound::{Decoder, Outbound};

use std::sync::Arc;

use crate::face::{Options, Row};
use crate::model::kinds::{ARTIFACT, CUSTOM_AND_RAW, REASONING, STATE_AND_STEPS, USAGE};
use crate::model::History;

/// An AG-Kit v0 agent keeps the history under its `conversationId`; `interrupt` carries both pauses.
pub const ROW: Row = Row {
    history: History::Delta,
    client_tools: true,
    server_tools: true,
    approvals: true,
    questions: true,
    pause_cancel: false,
    unshown: &[REASONING, STATE_AND_STEPS, ARTIFACT, USAGE, CUSTOM_AND_RAW],
    unsent: &["system_messages", "context", "state"],
    inbound_options: Options::NONE,
    outbound_options: Options::NONE,
    inbound: |_, _, _| Ok(Box::new(Inbound::new())),
    outbound: |upstream, _, _, _| Ok(Arc::new(Outbound::new(upstream))),
};

/// Interrupt reasons of the canonical pauses (`specs/ag-kit.md` §4.3); an upstream's own reasons pass
/// through as they are.
const APPROVAL: &str = "approval";
const QUESTION: &str = "question";
const INPUT_REQUIRED: &str = "input_required";
