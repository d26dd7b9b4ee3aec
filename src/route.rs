//! A route as the server runs it: built once from its configuration.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;

use crate::body::{Body, BodyLimit};
use crate::config::RouteConfig;
use crate::error::Result;
use crate::protocol::{Inbound, Outbound};
use crate::store::Store;
use crate::translate::Translator;

pub struct Route {
    pub name: String,
    /// The mount point; the route serves this path and the paths below it.
    pub path: String,
    /// The largest request body accepted, and how long it may take to arrive.
    pub body_limit: BodyLimit,
    pub inbound: Inbound,
    pub translator: Arc<Translator>,
}

impl Route {
    /// Builds the route; `local` is the address the proxy listens on (for upstreams that call back).
    pub fn from_config(
        config: &RouteConfig,
        store: Arc<dyn Store>,
        local: SocketAddr,
    ) -> Result<Self> {
        let outbound = Outbound::from_config(config, local)?;
        Ok(Self {
            name: config.name.clone(),
            path: config.path.clone(),
            body_limit: BodyLimit {
                max_bytes: config.max_body,
                timeout: config.body_timeout,
            },
            inbound: Inbound::from_config(config)?,
            translator: Arc::new(Translator::new(
                config.name.clone(),
                outbound,
                store,
                config.timeout,
            )),
        })
    }

    /// Serves one request addressed to the route: a call from its upstream back into the proxy (a CMDC
    /// callback tool), or else a request of its inbound clients.
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let outbound = self.translator.outbound();
        if outbound.serves_callback(request.uri().path()) {
            return outbound.serve_callback(request).await;
        }
        self.inbound.handle(request, self).await
    }

    /// The part of `path` below the mount point (`""` for the mount point itself), if the route serves it.
    pub fn subpath<'a>(&self, path: &'a str) -> Option<&'a str> {
        let rest = path.strip_prefix(self.path.as_str())?;
        (rest.is_empty() || rest.starts_with('/')).then_some(rest)
    }
}
