//! A route as the server runs it: built once from its configuration.

use std::sync::Arc;

use crate::config::RouteConfig;
use crate::error::Result;
use crate::protocol::{Inbound, Outbound};
use crate::store::Store;
use crate::translate::Translator;

pub struct Route {
    pub name: String,
    /// The mount point; the route serves this path and the paths below it.
    pub path: String,
    /// The largest request body accepted, in bytes.
    pub max_body: usize,
    pub inbound: Inbound,
    pub translator: Arc<Translator>,
}

impl Route {
    pub fn from_config(config: &RouteConfig, store: Arc<dyn Store>) -> Result<Self> {
        let outbound = Outbound::from_config(config)?;
        Ok(Self {
            name: config.name.clone(),
            path: config.path.clone(),
            max_body: config.max_body,
            inbound: Inbound::from_config(config)?,
            translator: Arc::new(Translator::new(
                config.name.clone(),
                outbound,
                store,
                config.timeout,
            )),
        })
    }

    /// The part of `path` below the mount point (`""` for the mount point itself), if the route serves it.
    pub fn subpath<'a>(&self, path: &'a str) -> Option<&'a str> {
        let rest = path.strip_prefix(self.path.as_str())?;
        (rest.is_empty() || rest.starts_with('/')).then_some(rest)
    }
}
