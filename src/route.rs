//! A route as the server runs it: built once from its configuration.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;

use crate::answers::AnswerWords;
use crate::auth::Access;
use crate::body::{Body, BodyLimit};
use crate::config::{RouteConfig, DEFAULT_RUN_BUFFER};
use crate::cors::Cors;
use crate::detach::{Detached, DetachedRuns};
use crate::error::Result;
use crate::face::{read_options, DynInbound, DynOutbound};
use crate::mount::Mount;
use crate::protocol::registry;
use crate::route_state::RouteState;
use crate::store::{Documents, OpenLogs, Store};
use crate::translate::{Agent, Runs, Translator};

pub struct Route {
    pub name: String,
    /// `inbound->outbound`.
    pub pair: String,
    pub inbound: Box<dyn DynInbound>,
    /// How the route reaches its agent; the translator runs turns against it, and it may serve calls back.
    outbound: Arc<dyn DynOutbound>,
    /// What the inbound gets of the route.
    pub mount: Mount,
    /// The state of its parts, for its next build (a reload).
    kept: RouteState,
}

impl Route {
    /// Builds the route; `local` is the address the proxy listens on (for upstreams that call back), `runs`
    /// the server's hold on the runs of every route.
    pub fn from_config(
        config: &RouteConfig,
        store: Arc<dyn Store>,
        local: SocketAddr,
        runs: &Runs,
    ) -> Result<Self> {
        Self::build(config, store, local, runs, RouteState::default())
    }

    /// Builds the route anew from its reloaded `config`, its parts keeping the state they had in `earlier`
    /// (the same route's running build) where what they depend on did not change.
    pub fn rebuild(
        config: &RouteConfig,
        store: Arc<dyn Store>,
        local: SocketAddr,
        runs: &Runs,
        earlier: &Route,
    ) -> Result<Self> {
        Self::build(config, store, local, runs, RouteState::after(&earlier.kept))
    }

    fn build(
        config: &RouteConfig,
        store: Arc<dyn Store>,
        local: SocketAddr,
        runs: &Runs,
        kept: RouteState,
    ) -> Result<Self> {
        let outbound = registry::outbound(config, local, &kept, runs.metrics())?;
        let documents = Documents::new(Arc::clone(&store), &config.name)
            .with_open_logs(kept.keep((), OpenLogs::default));
        outbound.keep_in(&documents);
        let translator = Translator::new(
            config.name.clone(),
            Arc::clone(&outbound) as Arc<dyn Agent>,
            store,
            config.timeout,
        )
        .with_answer_words(AnswerWords::new(&read_options(config)?))
        .with_quota(config.quota, &kept)
        .with_runs(runs.clone())
        .with_pair(config.pair())
        .with_losses(registry::counted_losses(config));
        let inbound = registry::inbound(config, local, &kept)?;
        let route = Self {
            name: config.name.clone(),
            pair: config.pair(),
            inbound,
            outbound,
            mount: Mount {
                path: config.path.clone(),
                body_limit: BodyLimit {
                    max_bytes: config.max_body,
                    timeout: config.body_timeout,
                },
                translator: Arc::new(translator),
                detached: (!config.detach_grace.is_zero()).then(|| {
                    let run_buffer = config.run_buffer.unwrap_or(DEFAULT_RUN_BUFFER);
                    // A run that outlives its client can be resumed after a reload.
                    let runs = kept.keep((), DetachedRuns::default);
                    Detached::new(config.detach_grace, run_buffer, documents.clone(), runs)
                }),
                documents,
                access: Arc::new(Access::new(config, &kept)),
                cors: Cors::new(&config.cors_origins),
            },
            kept,
        };
        route.kept.settle();
        Ok(route)
    }

    /// Serves one request addressed to the route: a browser's preflight, a call from its upstream back into
    /// the proxy (a CMDC callback tool), or else a request of its inbound clients.
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let cors = &self.mount.cors;
        let origin = cors.allowed_origin(request.headers());
        if let Some(preflight) = cors.preflight(&request, origin.as_ref()) {
            return preflight;
        }
        let response = if self.outbound.serves_callback(request.uri().path()) {
            self.outbound.serve_callback(request).await
        } else {
            self.inbound.handle(request, &self.mount).await
        };
        cors.finish(response, origin.as_ref())
    }

    /// The part of `path` below the route's mount point, if the route serves it (see [`Mount::subpath`]).
    pub fn subpath<'a>(&self, path: &'a str) -> Option<&'a str> {
        self.mount.subpath(path)
    }
}
