//! What an inbound face gets of its route: where it is mounted, how large and slow a request may be, who may
//! use it and from which web pages, and the hub that runs its turns. The route hands it to its inbound, so
//! no protocol knows routes.

use std::sync::Arc;

use crate::auth::Access;
use crate::body::BodyLimit;
use crate::cors::Cors;
use crate::store::Documents;
use crate::translate::Translator;

pub struct Mount {
    /// The mount point; the route serves this path and the paths below it.
    pub path: String,
    /// The largest request body accepted, and how long it may take to arrive.
    pub body_limit: BodyLimit,
    /// Runs the route's turns.
    pub translator: Arc<Translator>,
    /// Where the inbound keeps what it must find again after a restart or on another replica.
    pub documents: Documents,
    /// Who may use the route and how often; each inbound asks it where its protocol needs a client.
    pub access: Arc<Access>,
    /// Which web pages may use the route (`cors_origins`).
    pub cors: Cors,
}

impl Mount {
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
