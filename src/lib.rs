//! agent-bridge: a protocol-translation proxy for AI agents.
//!
//! A client speaks one agent protocol to a route; the route's upstream speaks another. Requests and live
//! event streams are translated through one canonical model ([`model`]): each protocol module under
//! [`protocol`] decodes into it and encodes from it, and [`translate`] runs a turn between the two faces.

pub mod answers;
pub mod auth;
pub mod body;
pub mod config;
pub mod connection;
pub mod cors;
pub mod detach;
pub mod egress;
pub mod error;
pub mod face;
pub mod gauges;
pub mod history;
pub mod json;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod mount;
pub mod normalize;
pub mod protocol;
pub mod relay;
pub mod route;
pub mod route_state;
pub mod routes_view;
pub mod server;
pub mod size;
pub mod sse;
pub mod store;
pub mod sync;
pub mod telemetry;
pub mod translate;
pub mod upstream;
pub mod wake;
pub mod workers;
