//! One module per protocol, each with the same two faces:
//!
//! - `inbound` (we are the server): decode the client's request into a [`Turn`](crate::model::Turn), encode
//!   the canonical event stream into the protocol's response;
//! - `outbound` (we are the client): encode a turn into the upstream request, decode the upstream's response
//!   into canonical events.
//!
//! Which module a route names, and how its faces are built, is the registry's (`registry`); what a protocol
//! means lives in its module.

pub mod a2a;
pub mod ag_kit;
pub mod ag_ui;
pub mod agentscope;
pub mod cmdc;
pub mod echo;
pub mod registry;
