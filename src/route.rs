//! A route as the server runs it: built once from its configuration.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;

use crate::answers::AnswerWords;
use crate::auth::Access;
use crate::body::{Body, BodyLimit};
use crate::config::RouteConfig;
use crate::cors::Cors;
use crate::error::Result;
use crate::protocol::{Inbound, Outbound};
use crate::store::Store;
use crate::translate::{Runs, Translator};

pub struct Route {
    pub name: String,
    /// The mount point; the route serves this path and the paths below it.
    pub path: String,
    /// The largest request body accepted, and how long it may take to arrive.
    pub body_limit: BodyLimit,
    pub inbound: Inbound,
    /// How the route reaches its agent; the translator runs turns against it, and it may serve calls back.
    outbound: Arc<Outbound>,
    pub translator: Arc<Translator>,
    /// Who may use the route and how often; each inbound asks it where its protocol needs a client.
    pub access: Arc<Access>,
    /// Which web pages may use the route (`cors_origins`).
    pub cors: Cors,
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
        let outbound = Arc::new(Outbound::from_config(config, local)?);
        Ok(Self {
            name: config.name.clone(),
            path: config.path.clone(),
            body_limit: BodyLimit {
                max_bytes: config.max_body,
                timeout: config.body_timeout,
            },
            inbound: Inbound::from_config(config, local)?,
            outbound: Arc::clone(&outbound),
            translator: Arc::new(
                Translator::new(config.name.clone(), outbound, store, config.timeout)
                    .with_answer_words(AnswerWords::new(
                        &config.translate.approval_words,
                        &config.translate.rejection_words,
                    ))
                    .with_quota(config.quota)
                    .with_runs(runs.clone()),
            ),
            access: Arc::new(Access::new(config)),
            cors: Cors::new(&config.cors_origins),
        })
    }

    /// Serves one request addressed to the route: a browser's preflight, a call from its upstream back into
    /// the proxy (a CMDC callback tool), or else a request of its inbound clients.
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let origin = self.cors.allowed_origin(request.headers());
        if let Some(preflight) = self.cors.preflight(&request, origin.as_ref()) {
            return preflight;
        }
        let response = if self.outbound.serves_callback(request.uri().path()) {
            self.outbound.serve_callback(request).await
        } else {
            self.inbound.handle(request, self).await
        };
        self.cors.finish(response, origin.as_ref())
    }

    /// The part of `path` below the mount point (`""` for the mount point itself), if the route serves it.
    /// A route mounted at `/` serves every path (longer mount points are tried first).
    pub fn subpath<'a>(&self, path: &'a str) -> Option<&'a str> {
        let mount = self.path.trim_end_matches('/');
        let rest = path.strip_prefix(mount)?;
        if mount.is_empty() && rest == "/" {
            return Some("");
        }
        (rest.is_empty() || rest.starts_with('/')).then_some(rest)
    }
}
