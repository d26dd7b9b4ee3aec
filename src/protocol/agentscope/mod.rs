//! The AgentScope Runtime Agent API (`POST /process` of agentscope-runtime 1.1.x): one request per turn with
//! an `input` message list, answered by an SSE stream of `response` / `message` / `content` objects. See
//! `specs/agentscope.md`.

mod encoder;
mod inbound;
mod outbound;
mod request;
mod validate;
pub mod wire;

pub use encoder::{EncodeOptions, Encoder};
pub use inbound::Inbound;
pub use outbound::{Decoder, Outbound};
