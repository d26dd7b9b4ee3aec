//! The CMDC gateway API: stateful and asynchronous. A session (an agent process holding the history) is
//! created first; `POST …/prompt` only enqueues text (202) and the run's events arrive on a separate SSE
//! stream (or WebSocket); approvals and questions pause the run until answered by separate calls. See
//! `specs/cmdc.md`.

mod inbound;
mod options;
mod outbound;
mod run;
mod sessions;
pub mod wire;

pub use inbound::{Inbound, Reader};
pub use options::OutboundOptions;
pub use outbound::{Decoder, Outbound};
pub use run::Encoder;

use std::sync::Arc;

use crate::face::{read_options, Options, Row};
use crate::model::kinds::{ARTIFACT, CUSTOM_AND_RAW, STATE_AND_STEPS};
use crate::model::History;

/// A CMDC gateway keeps the history in its session; the client's tools become callback tools.
pub const ROW: Row = Row {
    history: History::Delta,
    client_tools: true,
    server_tools: true,
    approvals: true,
    questions: true,
    pause_cancel: true,
    unshown: &[STATE_AND_STEPS, ARTIFACT, CUSTOM_AND_RAW],
    unsent: &["context", "state"],
    inbound_options: Options::NONE,
    outbound_options: Options::of::<OutboundOptions>(),
    inbound: |route, local, kept| Ok(Box::new(Inbound::new(route, local, kept))),
    outbound: |upstream, route, local, kept| {
        let options = read_options(route)?;
        Ok(Arc::new(Outbound::new(
            upstream, route, options, local, kept,
        )?))
    },
};
