//! A session's runs as its subscribers read them: `GET …/events` one run, a WebSocket every run. A run of
//! this replica's is read from its buffer; in a store replicas share, a run another replica drives (or drove,
//! and nobody read yet) is read from its log in the store, and a subscriber waiting for the next run looks
//! at the session in the store whenever the session's run log is appended to (a run another replica
//! started), as the store tells it. A run whose replica died while it waited on its user is followed where
//! it is carried on ([`Runner::recall`]).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{stream, Stream, StreamExt};

use super::super::run::Runner;
use super::super::sessions::{Follower, Session, READ_DOCUMENT, RUN_LOG};
use super::super::wire::Event;
use crate::error::Error;
use crate::store::{Documents, Followed, LEASE};

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
    let state = (
        follower,
        first,
        ReadMarks::of(runner, session),
        Arc::clone(session),
    );
    let events = stream::unfold(state, |(mut follower, first, marks, session)| async move {
        let event = match first {
            Some(event) => event,
            None => follower.next().await?,
        };
        // The session's latest run only: a subscriber a run behind does not take a later run's mark back.
        let latest = || follower.last_run() == session.state().runs;
        if let Some(marks) = marks.as_ref().filter(|_| event.is_terminal() && latest()) {
            marks.read_to_end(follower.last_run()).await;
        }
        Some((event, (follower, None, marks, session)))
    });
    Box::pin(events)
}

/// Where the session's subscribers keep which of its runs one read to its end, so that its next
/// subscriber, on any replica or after a restart, waits for the next run rather than read that one again.
struct ReadMarks {
    documents: Documents,
    tenant: String,
    id: String,
}

impl ReadMarks {
    /// `None` where the store keeps no runs.
    fn of(runner: &Runner, session: &Session) -> Option<Arc<Self>> {
        runner.documents.kept().then(|| {
            Arc::new(Self {
                documents: runner.documents.clone(),
                tenant: session.tenant.clone(),
                id: session.id.clone(),
            })
        })
    }

    async fn read_to_end(&self, run: u64) {
        let _ = self
            .documents
            .save(READ_DOCUMENT, &self.tenant, &self.id, &run)
            .await;
    }

    async fn was_read(&self, run: u64) -> bool {
        let read = self
            .documents
            .load::<u64>(READ_DOCUMENT, &self.tenant, &self.id);
        read.await.ok().flatten() >= Some(run)
    }
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
/// subscriber read it yet: from its first event, then live ([`logged_run`]).
async fn kept_run(runner: &Arc<Runner>, session: &Arc<Session>) -> Option<Events> {
    let marks = ReadMarks::of(runner, session)?;
    let (elsewhere, runs) = {
        let state = session.state();
        (state.elsewhere, state.runs)
    };
    let ran_here = session.current_run().is_some_and(|run| run.seq() == runs);
    if !elsewhere && (runs == 0 || ran_here) {
        return None;
    }
    // Also where another replica shows the run going on: it may have read it to its end a moment ago.
    if marks.was_read(runs).await {
        return None;
    }
    if !elsewhere {
        let (tenant, id) = (&session.tenant, &session.id);
        runner
            .documents
            .read_log(RUN_LOG, tenant, id, 0)
            .await
            .ok()??;
    }
    Some(logged_run(runner, session, runs, 0, Lost::CarriedOn))
}

/// What a follower of a run log does when the replica running the run died.
#[derive(Clone, Copy)]
enum Lost {
    /// Follows the run where it is carried on, if it was paused on its user ([`rest_of_a_lost_run`]).
    CarriedOn,
    /// Ends with an `error` and `agent_abort {reason:"error"}`.
    Failed,
}

/// Run `run`'s events from its log in the store, after the first `after`, then live; its end is kept as
/// read.
fn logged_run(
    runner: &Arc<Runner>,
    session: &Arc<Session>,
    run: u64,
    after: u64,
    lost: Lost,
) -> Events {
    let log = runner
        .documents
        .follow_log(RUN_LOG, &session.tenant, &session.id, after);
    let (runner, session) = (Arc::clone(runner), Arc::clone(session));
    let marks = ReadMarks::of(&runner, &session);
    let mut read = after;
    let events = log.then(move |followed| {
        let event = match followed {
            Followed::Event(number, bytes) => {
                read = number;
                Some(serde_json::from_slice::<Event>(&bytes).ok())
            }
            Followed::Lost => None,
        };
        let (marks, runner, session) = (marks.clone(), Arc::clone(&runner), Arc::clone(&session));
        async move {
            let Some(event) = event else {
                return match lost {
                    Lost::CarriedOn => rest_of_a_lost_run(&runner, &session, run, read).await,
                    Lost::Failed => failed(),
                };
            };
            if let Some(marks) = marks.filter(|_| event.as_ref().is_some_and(Event::is_terminal)) {
                marks.read_to_end(run).await;
            }
            Box::pin(stream::iter(event)) as Events
        }
    });
    Box::pin(events.flatten())
}

/// The end of a run whose replica died.
fn failed() -> Events {
    let reason = Error::run_lost().message().to_owned();
    let abort = Event::AgentAbort {
        reason: "error".into(),
    };
    Box::pin(stream::iter([Event::Error { reason }, abort]))
}

/// The rest of run `run`, of which the subscriber read the first `read` events from the log of a replica
/// that died: a run paused on its user is carried on, here or by another replica ([`Runner::recall`]), and
/// followed there; any other failed.
async fn rest_of_a_lost_run(
    runner: &Arc<Runner>,
    session: &Arc<Session>,
    run: u64,
    read: u64,
) -> Events {
    // The dead replica's leases lapse apart: its control log may show it a moment after its run log no
    // longer does.
    let deadline = tokio::time::Instant::now() + LEASE;
    loop {
        let Ok(Some(kept)) = runner.recall(&session.tenant, &session.id).await else {
            return failed();
        };
        let carried_here = {
            let state = session.state();
            state.busy && !state.elsewhere
        };
        let current = session.current_run().filter(|current| current.seq() == run);
        if carried_here && current.is_some() {
            let skip = usize::try_from(read).unwrap_or(usize::MAX);
            let follower = session.subscribe_run();
            return Box::pin(local_run(runner, session, follower, None).skip(skip));
        }
        if !kept.busy || kept.runs != run {
            return failed();
        }
        let (tenant, id) = (&session.tenant, &session.id);
        if runner.drives(tenant, id, run).await.unwrap_or(false) {
            // Carried on by another replica, which logs the run afresh, the same events first.
            session.take_in(kept);
            return logged_run(runner, session, run, read, Lost::Failed);
        }
        if tokio::time::Instant::now() >= deadline {
            return failed();
        }
        tokio::time::sleep(LOOK_AGAIN).await;
    }
}

/// How often a follower of a lost run looks whether it is carried on.
const LOOK_AGAIN: Duration = Duration::from_millis(500);
