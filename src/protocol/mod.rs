//! One module per protocol, each with the same two faces:
//!
//! - `inbound` (we are the server): decode the client's request into a [`Turn`], encode the canonical event
//!   stream into the protocol's response;
//! - `outbound` (we are the client): encode a [`Turn`] into the upstream request, decode the upstream's
//!   response into canonical events.
//!
//! This file only picks the module a route names; what a protocol means lives in its module.

pub mod ag_ui;
pub mod echo;

use http::{Request, Response};
use hyper::body::Incoming;

use crate::body::Body;
use crate::config::{self, Protocol, RouteConfig};
use crate::error::{Error, Result};
use crate::model::Turn;
use crate::route::Route;
use crate::translate::RunContext;
use crate::upstream::Upstream;

/// The face a route shows its clients.
pub enum Inbound {
    AgUi(ag_ui::Inbound),
}

impl Inbound {
    pub fn from_config(route: &RouteConfig) -> Result<Self> {
        match route.inbound {
            Protocol::AgUi => Ok(Self::AgUi(ag_ui::Inbound::new(&route.translate))),
            other => Err(not_yet(&route.name, "inbound", other)),
        }
    }

    /// Serves one request addressed to the route (its path or below it).
    pub async fn handle(&self, request: Request<Incoming>, route: &Route) -> Response<Body> {
        match self {
            Self::AgUi(inbound) => inbound.handle(request, route).await,
        }
    }
}

/// How a route reaches its agent.
// Built once per route and never moved on a request's path, so the size of the largest variant is harmless.
#[allow(clippy::large_enum_variant)]
pub enum Outbound {
    AgUi(ag_ui::Outbound),
    Echo(echo::Echo),
}

impl Outbound {
    pub fn from_config(route: &RouteConfig) -> Result<Self> {
        let upstream = || {
            let uri = route.upstream.clone().ok_or_else(|| {
                Error::config(format!("route `{}` needs an upstream URL", route.name))
            })?;
            Ok::<_, Error>(Upstream::new(
                uri,
                route.upstream_headers.clone(),
                route.connect_timeout,
            ))
        };
        match route.outbound {
            config::Outbound::Echo => Ok(Self::Echo(echo::Echo)),
            config::Outbound::Protocol(Protocol::AgUi) => Ok(Self::AgUi(ag_ui::Outbound::new(
                upstream()?,
                &route.translate,
            ))),
            config::Outbound::Protocol(other) => Err(not_yet(&route.name, "outbound", other)),
        }
    }

    /// Runs one turn upstream, emitting its events into `context`. Returns when the upstream is done.
    pub async fn run(&self, turn: &Turn, context: &mut RunContext) -> Result<()> {
        match self {
            Self::AgUi(outbound) => outbound.run(turn, context).await,
            Self::Echo(echo) => echo.run(turn, context).await,
        }
    }
}

fn not_yet(route: &str, face: &str, protocol: Protocol) -> Error {
    Error::config(format!(
        "route `{route}`: {face} protocol `{}` is not implemented yet",
        protocol.name()
    ))
}
