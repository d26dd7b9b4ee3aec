//! What an inbound face gets of its route: where it is mounted, how large and slow a request may be, who may
//! use it and from which web pages, and the hub that runs its turns. The route hands it to its inbound, so
//! no protocol knows routes.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::Either;
use futures_util::Stream;

use crate::auth::Access;
use crate::body::BodyLimit;
use crate::cors::Cors;
use crate::detach::{Detached, Frames, LostRun, RunKey};
use crate::model::Turn;
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
    /// The route's runs that outlive their clients (`detach_grace` above zero).
    pub detached: Option<Arc<Detached>>,
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

    /// The frames a request for `turn` gets: those of `start`'s run; with `detach_grace`, those of the run
    /// `key` names, kept or started now, which outlives its client (`last_event_id`: the client came back;
    /// `lost`: what it is told if the run's replica died, [`Detached::resume`]).
    pub async fn frames<S>(
        &self,
        turn: Turn,
        key: impl FnOnce(&Turn) -> RunKey,
        last_event_id: Option<u64>,
        lost: impl FnOnce(&Turn) -> LostRun,
        start: impl FnOnce(Turn) -> S,
    ) -> Either<S, Frames>
    where
        S: Stream<Item = Bytes> + Send + Unpin + 'static,
    {
        match &self.detached {
            Some(detached) => {
                let lost = lost(&turn);
                let frames = detached.serve(key(&turn), last_event_id, lost, || start(turn));
                Either::Right(frames.await)
            }
            None => Either::Left(start(turn)),
        }
    }
}
