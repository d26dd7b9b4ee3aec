//! What every in-process test shares: the proxy serving on a real socket ([`Proxy`]) the routes a test
//! writes with [`Route`] and [`Routes`], scripted upstreams ([`Reply`], [`Upstream`]), an HTTP client that
//! reads SSE ([`post_json`], [`send`], [`SseStream`]), and a client of a CMDC gateway's REST API
//! ([`CmdcClient`]).
//!
//! Everything binds `127.0.0.1:0`, every wait is bounded by [`WAIT`], and everything started stops when its
//! handle is dropped. Protocol knowledge lives in one submodule per protocol ([`ag_ui`], [`a2a`], [`agentscope`], [`ag_kit`]).

pub mod a2a;
pub mod ag_kit;
pub mod ag_ui;
pub mod agentscope;
pub mod binary;
pub mod canonical;
mod client;
pub mod cmdc;
mod cmdc_client;
pub mod golden;
pub mod interop;
mod proxy;
mod routes;
pub mod stores;
mod upstream;

use std::future::Future;
use std::time::Duration;

pub use client::{post_json, send, send_over_http2, Response, SseStream};
pub use cmdc_client::CmdcClient;
pub use proxy::Proxy;
pub use routes::{Route, Routes};
pub use upstream::{Received, Reply, Silent, Upstream};

/// The longest any test waits for anything.
pub const WAIT: Duration = Duration::from_secs(10);

/// Awaits `future`, failing the test if it takes longer than [`WAIT`].
pub async fn within<F: Future>(what: &str, future: F) -> F::Output {
    within_for(WAIT, what, future).await
}

/// Awaits `future`, failing the test if it takes longer than `limit`.
pub async fn within_for<F: Future>(limit: Duration, what: &str, future: F) -> F::Output {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {limit:?} waiting for {what}"))
}
