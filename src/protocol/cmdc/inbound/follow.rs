//! A session's runs as its subscribers read them: `GET …/events` one run, a WebSocket every run. A run of
//! this replica's is read from its buffer; in a store replicas share, a run another replica drives (or drove,
//! and nobody read yet) is read from its log in the store, and a subscriber waiting for the next run looks
//! at the session in the store whenever the session's run log is appended to (a run another replica
//! started), as the store tells it.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{stream, Stream, StreamExt};

use super::super::run::Runner;
use super::super::sessions::{Follower, Session, READ_DOCUMENT, RUN_LOG};
use super::super::wire::Event;
use crate::store::Followed;

/// A run's events (or several runs').
pub(super) type Events = Pin<Box<dyn Stream<Item = Event> + Send>>;

/// One run: the current one if nobody read its end yet, else the next one.
pub(super) async fn one_run(runner: &Arc<Runner>, session: &Arc<Session>) -> Events {
    match kept_run(runner, session).await {
        Some(events) => events,
        None if runner.documents.shared() => next_run_anywhere(runner, session),
        None => local_run(runner, session, session.subscribe_run(), None),
    }
}

/// Every run from now on (the current one first, if nobody read its end yet), until the session closes.
pub(super) fn every_run(runner: &Arc<Runner>, session: &Arc<Session>) -> Events {
    if !runner.documents.shared() {
        return local_run(runner, session, session.subscribe_all(), None);
    }
    let state = (Arc::clone(runner), Arc::clone(session), true);
    let runs = stream::unfold(state, |(runner, session, first)| async move {
        if session.is_closed() {
            return None;
        }
        let run = if first {
            one_run(&runner, &session).await
        } else {
            next_run_anywhere(&runner, &session)
        };
        Some((run, (runner, session, false)))
    });
    Box::pin(runs.flatten())
}

/// A run of this replica's, as `follower` reads it (`first` already read from it). Where the store keeps
/// runs, each run's end is kept as read before the subscriber gets it: the session's next subscriber, on
/// any replica or after a restart, waits for the next run.
fn local_run(
    runner: &Arc<Runner>,
    session: &Arc<Session>,
    follower: Follower,
    first: Option<Event>,
) -> Events {
    let documents = runner.documents.clone();
    let (tenant, id) = (session.tenant.clone(), session.id.clone());
    let events = stream::unfold((follower, first), move |(mut follower, first)| {
        let (documents, tenant, id) = (documents.clone(), tenant.clone(), id.clone());
        async move {
            let event = match first {
                Some(event) => event,
                None => follower.next().await?,
            };
            if event.is_terminal() && documents.kept() {
                let read = follower.last_run();
                let _ = documents.save(READ_DOCUMENT, &tenant, &id, &read).await;
            }
            Some((event, (follower, None)))
        }
    });
    Box::pin(events)
}

/// The session's next run, in a store replicas share: this replica's, or one the store shows another
/// replica started.
fn next_run_anywhere(runner: &Arc<Runner>, session: &Arc<Session>) -> Events {
    let (runner, session) = (Arc::clone(runner), Arc::clone(session));
    let mut follower = session.subscribe_run();
    let known = session.state().runs;
    let next = async move {
        let elsewhere = async {
            let (tenant, id) = (&session.tenant, &session.id);
            let mut appended = runner.documents.watch_log(RUN_LOG, tenant, id).await;
            loop {
                appended.changed().await;
                let kept = runner.recall(&session.tenant, &session.id).await;
                match kept {
                    Ok(Some(kept)) if kept.runs > known => {
                        session.take_in(kept);
                        return kept_run(&runner, &session).await;
                    }
                    Ok(None) => return None,
                    _ => {}
                }
            }
        };
        let kept = tokio::select! {
            first = follower.next() => return local_run(&runner, &session, follower, first),
            kept = elsewhere => kept,
        };
        // None: the run the store shows is this replica's after all (or the session is gone).
        kept.unwrap_or_else(|| local_run(&runner, &session, follower, None))
    };
    Box::pin(stream::once(next).flatten())
}

/// The session's latest run from its log in the store, when another replica runs it, or ran it and no
/// subscriber read it yet: from its first event, then live. A run whose replica died ends with an `error`
/// and `agent_abort {reason:"error"}`.
async fn kept_run(runner: &Runner, session: &Session) -> Option<Events> {
    let documents = &runner.documents;
    if !documents.kept() {
        return None;
    }
    let (tenant, id) = (session.tenant.clone(), session.id.clone());
    let (elsewhere, runs) = {
        let state = session.state();
        (state.elsewhere, state.runs)
    };
    if !elsewhere {
        let ran_here = session.current_run().is_some_and(|run| run.seq() == runs);
        if runs == 0 || ran_here {
            return None;
        }
        let read = documents.load::<u64>(READ_DOCUMENT, &tenant, &id).await;
        if read.ok().flatten() >= Some(runs) {
            return None;
        }
        documents.read_log(RUN_LOG, &tenant, &id, 0).await.ok()??;
    }
    let log = documents.follow_log(RUN_LOG, &tenant, &id, 0);
    let documents = documents.clone();
    let events = log.then(move |followed| {
        let events = match followed {
            Followed::Event(_, bytes) => serde_json::from_slice::<Event>(&bytes)
                .into_iter()
                .collect(),
            Followed::Lost => vec![
                Event::Error {
                    reason: "the rest of this run cannot be read: the proxy running it stopped, \
                             or the run outgrew what the store keeps of one"
                        .into(),
                },
                Event::AgentAbort {
                    reason: "error".into(),
                },
            ],
        };
        let read = events.iter().any(Event::is_terminal);
        let (documents, tenant, id) = (documents.clone(), tenant.clone(), id.clone());
        async move {
            if read {
                // Read to its end: the session's next subscriber waits for its next run.
                let _ = documents.save(READ_DOCUMENT, &tenant, &id, &runs).await;
            }
            stream::iter(events)
        }
    });
    Some(Box::pin(events.flatten()))
}
