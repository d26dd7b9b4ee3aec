//! The AgentScope Runtime Agent API (`POST /process` of agentscope-runtime 1.1.x): one request per turn with
//! an `input` message list, answered by an SSE stream of `response` / `message` / `content` objects. See
//! `specs/agentscope.md`.

mod inbound;
mod options;
mod outbound;
mod validate;
pub mod wire;

pub use inbound::{EncodeOptions, Encoder, Inbound, Reader};
pub use options::{InboundOptions, OutboundOptions};
pub use outbound::{Decoder, Outbound};

use std::sync::Arc;

use crate::face::{read_options, Options, Row};
use crate::model::kinds::{CUSTOM_AND_RAW, STATE_AND_STEPS};
use crate::model::History;

/// An AgentScope runtime takes the whole conversation, and pauses only with `mcp_approval_request`: a
/// question reaches its clients as an approval request answered by its reason.
pub const ROW: Row = Row {
    history: History::Full,
    client_tools: true,
    server_tools: true,
    approvals: true,
    questions: false,
    pause_cancel: false,
    unshown: &[STATE_AND_STEPS, CUSTOM_AND_RAW],
    unsent: &["context", "state"],
    inbound_options: Options::of::<InboundOptions>(),
    outbound_options: Options::of::<OutboundOptions>(),
    inbound: |route, _, kept| Ok(Box::new(Inbound::new(read_options(route)?, kept))),
    outbound: |upstream, route, _, _| Ok(Arc::new(Outbound::new(upstream, read_options(route)?))),
};
