//! One module per protocol, each with the same two faces:
//!
//! - `inbound` (we are the server): decode the client's request into a [`Turn`], encode the canonical event
//!   stream into the protocol's response;
//! - `outbound` (we are the client): encode a [`Turn`] into the upstream request, decode the upstream's
//!   response into canonical events.
//!
//! This file only picks the module a route names; what a protocol means lives in its module.

pub mod a2a;
pub mod ag_kit;
pub mod ag_ui;
pub mod agentscope;
pub mod cmdc;
pub mod echo;
pub mod registry;

use std::net::SocketAddr;

use futures_util::future::BoxFuture;
use http::{Request, Response};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;

use crate::body::{self, Body};
use crate::config::{self, Protocol, RouteConfig};
use crate::error::{Error, Result};
use crate::model::{History, Turn};
use crate::mount::Mount;
use crate::translate::{Agent, RunContext};
use crate::upstream::Upstream;

/// The options `T` (a face's, or the hub's) of `route`'s `[routes.translate]`, which the registry checked
/// when the file loaded.
pub fn read_options<T: DeserializeOwned>(route: &RouteConfig) -> Result<T> {
    route.translate.read().map_err(|error| {
        Error::config(format!(
            "route `{}`: translate.{}: {}",
            route.name, error.key, error.message
        ))
    })
}

/// The face a route shows its clients.
pub enum Inbound {
    AgUi(ag_ui::Inbound),
    A2a(a2a::Inbound),
    Agentscope(agentscope::Inbound),
    AgKit(ag_kit::Inbound),
    Cmdc(cmdc::Inbound),
}

impl Inbound {
    /// Builds the route's inbound; `local` is the address the proxy listens on.
    pub fn from_config(route: &RouteConfig, local: SocketAddr) -> Result<Self> {
        match route.inbound {
            Protocol::AgUi => Ok(Self::AgUi(ag_ui::Inbound::new(read_options(route)?))),
            Protocol::A2a => Ok(Self::A2a(a2a::Inbound::new(route, read_options(route)?))),
            Protocol::Agentscope => Ok(Self::Agentscope(agentscope::Inbound::new(read_options(
                route,
            )?))),
            Protocol::AgKit => Ok(Self::AgKit(ag_kit::Inbound::new())),
            Protocol::Cmdc => Ok(Self::Cmdc(cmdc::Inbound::new(route, local))),
        }
    }

    /// Serves one request addressed to the route (its path or below it).
    pub async fn handle(&self, request: Request<Incoming>, mount: &Mount) -> Response<Body> {
        match self {
            Self::AgUi(inbound) => inbound.handle(request, mount).await,
            Self::A2a(inbound) => inbound.handle(request, mount).await,
            Self::Agentscope(inbound) => inbound.handle(request, mount).await,
            Self::AgKit(inbound) => inbound.handle(request, mount).await,
            Self::Cmdc(inbound) => inbound.handle(request, mount).await,
        }
    }
}

/// How a route reaches its agent.
// Built once per route and never moved on a request's path, so the size of the largest variant is harmless.
#[allow(clippy::large_enum_variant)]
pub enum Outbound {
    AgUi(ag_ui::Outbound),
    A2a(a2a::Outbound),
    Agentscope(agentscope::Outbound),
    AgKit(ag_kit::Outbound),
    Cmdc(cmdc::Outbound),
    Echo(echo::Echo),
}

impl Outbound {
    /// Builds the route's outbound; `local` is the address the proxy listens on.
    pub fn from_config(route: &RouteConfig, local: SocketAddr) -> Result<Self> {
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
                read_options(route)?,
                route.inbound,
            ))),
            config::Outbound::Protocol(Protocol::A2a) => Ok(Self::A2a(a2a::Outbound::new(
                upstream()?,
                read_options(route)?,
            ))),
            config::Outbound::Protocol(Protocol::Agentscope) => Ok(Self::Agentscope(
                agentscope::Outbound::new(upstream()?, read_options(route)?),
            )),
            config::Outbound::Protocol(Protocol::AgKit) => {
                Ok(Self::AgKit(ag_kit::Outbound::new(upstream()?)))
            }
            config::Outbound::Protocol(Protocol::Cmdc) => {
                let options = read_options(route)?;
                Ok(Self::Cmdc(cmdc::Outbound::new(
                    upstream()?,
                    route,
                    options,
                    local,
                )?))
            }
        }
    }

    /// Whether `path` is where the upstream calls back into the proxy (CMDC callback tools).
    pub fn serves_callback(&self, path: &str) -> bool {
        match self {
            Self::Cmdc(outbound) => outbound.serves_callback(path),
            _ => false,
        }
    }

    /// Answers a call of the upstream back into the proxy (see [`Self::serves_callback`]).
    pub async fn serve_callback(&self, request: Request<Incoming>) -> Response<Body> {
        match self {
            Self::Cmdc(outbound) => outbound.serve_callback(request).await,
            _ => body::error_response(&Error::not_found("no callback here"), "POST"),
        }
    }
}

impl Agent for Outbound {
    fn history(&self) -> History {
        match self {
            Self::AgUi(_) => ag_ui::ROW.history,
            Self::A2a(_) => a2a::ROW.history,
            Self::Agentscope(_) => agentscope::ROW.history,
            Self::AgKit(_) => ag_kit::ROW.history,
            Self::Cmdc(_) => cmdc::ROW.history,
            Self::Echo(_) => History::Full,
        }
    }

    /// Each protocol's run is boxed: it lives as long as the stream, and unboxed every route's run would be
    /// as large as the largest protocol's.
    fn run<'a>(&'a self, turn: &'a Turn, context: &'a mut RunContext) -> BoxFuture<'a, Result<()>> {
        match self {
            Self::AgUi(outbound) => Box::pin(outbound.run(turn, context)),
            Self::A2a(outbound) => Box::pin(outbound.run(turn, context)),
            Self::Agentscope(outbound) => Box::pin(outbound.run(turn, context)),
            Self::AgKit(outbound) => Box::pin(outbound.run(turn, context)),
            Self::Cmdc(outbound) => Box::pin(outbound.run(turn, context)),
            Self::Echo(echo) => Box::pin(echo.run(turn, context)),
        }
    }
}
