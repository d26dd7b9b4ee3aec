//! A task's run: its events encoded, kept in the task and passed on to the `message/stream` client, and
//! a `tasks/resubscribe` client fed from the task's fan-out.

use std::future::pending;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc, oneshot};

use super::encode::{CancelReason, Encoder};
use super::result_frame;
use crate::face::EventEncoder;
use crate::model::Event;
use crate::protocol::a2a::tasks::{
    self, HeldHere, Registry, Snapshot, Update, CONTEXT_DOCUMENT, EVENTS_LOG, TASK_DOCUMENT,
};
use crate::protocol::a2a::wire::{RequestId, StreamResult};
use crate::store::{now_micros, Documents, LogWriter};

/// How long a run that ended tries to keep its task while the store fails ([`Runner::keep_as_ended`]).
const KEEP_ENDED_FOR: Duration = Duration::from_secs(60);
/// The pause before its second try; each next one doubles, up to [`KEEP_RETRY_LAST`].
const KEEP_RETRY_FIRST: Duration = Duration::from_millis(250);
const KEEP_RETRY_LAST: Duration = Duration::from_secs(5);

/// Consumes one run: encodes its events, stores them in the task and passes them on.
pub(super) struct Runner {
    pub(super) tasks: Arc<Registry>,
    /// Where the task is kept for other replicas and restarts, and whose it is.
    pub(super) documents: Documents,
    pub(super) tenant: String,
    /// The final status was kept in the store as it was published.
    pub(super) final_kept: bool,
    /// The run's results for followers on other replicas, in a store replicas share.
    pub(super) log: Option<LogWriter>,
    pub(super) encoder: Encoder,
    pub(super) task_id: String,
    pub(super) generation: u64,
    /// `None` once it fired or can no longer fire.
    pub(super) cancel: Option<oneshot::Receiver<CancelReason>>,
    /// The `message/stream` client, while it listens.
    pub(super) primary: Option<mpsc::Sender<Arc<StreamResult>>>,
    pub(super) cancel_on_disconnect: bool,
}

impl Runner {
    /// Keeps the task as it starts, drives the run, and keeps it as it ended (a final status is also kept
    /// before the client hears it: see [`Runner::publish`]).
    pub(super) async fn run<S: Stream<Item = Event> + Unpin>(&mut self, events: S) {
        if self.documents.shared() {
            // Opened (its lease taken) before the task shows a run: a reader never finds one with no lease.
            self.log = self
                .documents
                .open_log(EVENTS_LOG, &self.tenant, &self.task_id)
                .await;
        }
        self.keep(true).await;
        self.drive(events).await;
        // The client's stream ends here, not after the tries below.
        self.primary = None;
        if !self.final_kept {
            // Ended without a final status (failed by the registry), canceled before it was kept, or the
            // store failed as it was kept.
            self.keep_as_ended().await;
        }
        // The log ends, and the lease goes, once the task is kept as it ended (unless a newer run of the
        // task took them over meanwhile).
        if let Some(log) = self.log.take() {
            log.end().await;
        }
    }

    async fn keep(&self, name_context: bool) -> bool {
        let (tasks, documents) = (&self.tasks, &self.documents);
        keep(tasks, documents, &self.tenant, &self.task_id, name_context).await
    }

    /// Keeps the task as it ended, trying again while the store fails (Redis may be back in a moment) for
    /// up to [`KEEP_ENDED_FOR`]: another replica, or this one once it no longer holds the task, reads what
    /// the store keeps, and a task kept as running whose run's lease lapsed reads failed. Meanwhile the
    /// run's lease is held, and its log not ended.
    async fn keep_as_ended(&self) {
        let deadline = tokio::time::Instant::now() + KEEP_ENDED_FOR;
        let mut pause = KEEP_RETRY_FIRST;
        // Its context was named as the run started, and may name a newer task by now.
        while !self.keep(false).await {
            // A newer run of the task (a client answered it here) keeps it from now on.
            let superseded = self.tasks.runs_other(&self.task_id, self.generation);
            if superseded || tokio::time::Instant::now() + pause > deadline {
                tracing::warn!(task_id = %self.task_id, "a2a: the ended task could not be kept; gave up");
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(KEEP_RETRY_LAST);
        }
    }

    async fn drive<S: Stream<Item = Event> + Unpin>(&mut self, mut events: S) {
        // Marks the task failed if this ends (or panics) before a final status.
        let _finish = FinishGuard {
            tasks: Arc::clone(&self.tasks),
            task_id: self.task_id.clone(),
            generation: self.generation,
        };
        let mut out = Vec::new();
        loop {
            let watch_client = self.cancel_on_disconnect && self.primary.is_some();
            let event = tokio::select! {
                biased;
                reason = cancelled(&mut self.cancel) => Err(reason),
                () = client_gone(self.primary.as_ref()), if watch_client => {
                    Err(CancelReason::Disconnected)
                }
                event = events.next() => Ok(event),
            };
            let stopped = match event {
                Err(reason) => Err(reason),
                // The stream ends after its terminal event; the guard covers one that does not.
                Ok(None) => return,
                Ok(Some(event)) => {
                    self.encoder.encode(event, &mut out);
                    self.publish(&mut out).await
                }
            };
            if let Err(reason) = stopped {
                // Dropping the event stream cancels the upstream work.
                drop(events);
                tracing::debug!(task_id = %self.task_id, ?reason, "a2a: task canceled");
                if reason == CancelReason::Disconnected {
                    self.primary = None;
                }
                self.encoder.cancel(reason, &mut out);
                let _ = self.publish(&mut out).await;
                return;
            }
            if self.encoder.is_done() {
                // The client's stream ends now; the run is read to its end so the translator finishes
                // normally (it saves the conversation only when its receiver is still there).
                self.primary = None;
                while events.next().await.is_some() {}
                return;
            }
        }
    }

    /// Stores and passes on each result; stops early when the run is canceled meanwhile.
    async fn publish(&mut self, out: &mut Vec<StreamResult>) -> Result<(), CancelReason> {
        for result in std::mem::take(out) {
            let result = Arc::new(result);
            let interrupt_id = self.encoder.interrupt_id();
            if tasks::is_final(&result) && self.documents.kept() {
                // Kept before anyone hears it: the client's next message may reach another replica.
                let revision = now_micros();
                let (task_id, generation) = (&self.task_id, self.generation);
                if let Some(snapshot) =
                    self.tasks
                        .snapshot_after(task_id, generation, &result, interrupt_id, revision)
                {
                    // Its context was named when the run started (and may name a newer task by now).
                    self.final_kept =
                        save(&self.tasks, &self.documents, &self.tenant, &snapshot, false).await;
                }
            }
            if let Some(log) = &self.log {
                log.push(Bytes::from(
                    serde_json::to_vec(&*result).unwrap_or_default(),
                ))
                .await;
            }
            self.tasks
                .apply(&self.task_id, self.generation, &result, interrupt_id);
            let Some(primary) = &self.primary else {
                continue;
            };
            let sent = tokio::select! {
                biased;
                reason = cancelled(&mut self.cancel) => return Err(reason),
                sent = primary.send(Arc::clone(&result)) => sent.is_ok(),
            };
            if !sent {
                if self.cancel_on_disconnect {
                    return Err(CancelReason::Disconnected);
                }
                self.primary = None;
            }
        }
        Ok(())
    }
}

/// Takes in `tenant`'s task as the store keeps it, when another replica, or this one before a restart, kept a
/// newer revision of it than the registry holds; a task running here is known best here, and so is one whose
/// latest state the store failed to keep (it is kept again now). A task the store shows running, with no
/// replica driving its run any more, is failed (and kept so).
pub(super) async fn recall_task(
    tasks: &Registry,
    documents: &Documents,
    tenant: &str,
    task_id: &str,
) -> crate::error::Result<()> {
    match tasks.held_here(tenant, task_id) {
        Some(HeldHere::Running) => return Ok(()),
        Some(HeldHere::Unkept) => {
            // Kept now, if the store is back; served from here either way.
            keep(tasks, documents, tenant, task_id, false).await;
            return Ok(());
        }
        None => {}
    }
    let Some(snapshot) = documents
        .load::<Snapshot>(TASK_DOCUMENT, tenant, task_id)
        .await?
    else {
        // Gone from a store replicas share: another replica made room with it, or it expired. (One kept
        // that this version cannot read, a newer replica's, is not gone.)
        if documents.shared() && documents.is_absent(TASK_DOCUMENT, tenant, task_id).await? {
            tasks.forget(tenant, task_id);
        }
        return Ok(());
    };
    let running = snapshot.task.status.state.is_running();
    let orphaned = running && !documents.run_live(EVENTS_LOG, tenant, task_id).await?;
    tasks.adopt(tenant, snapshot);
    if orphaned && tasks.fail_orphan(tenant, task_id) {
        keep(tasks, documents, tenant, task_id, true).await;
    }
    Ok(())
}

/// Writes the task's document, and with `name_context` its context's, where documents are kept: whether
/// nothing failed.
pub(super) async fn keep(
    tasks: &Registry,
    documents: &Documents,
    tenant: &str,
    task_id: &str,
    name_context: bool,
) -> bool {
    if !documents.kept() {
        // Nothing but the registry keeps it: it is never behind a store.
        tasks.kept(task_id, u64::MAX);
        return true;
    }
    let Some(snapshot) = tasks.snapshot(task_id, now_micros()) else {
        return true;
    };
    save(tasks, documents, tenant, &snapshot, name_context).await
}

/// Writes `snapshot` and, with `name_context`, names its task its context's latest: whether it did. A store
/// that fails is logged: the task goes on, served by this replica. The task's saves take turns, and one
/// that finds a newer revision kept leaves it (a run's final status and a cancel's, made one after the
/// other, land in that order).
async fn save(
    tasks: &Registry,
    documents: &Documents,
    tenant: &str,
    snapshot: &Snapshot,
    name_context: bool,
) -> bool {
    let task = &snapshot.task;
    let saving = tasks.saving(&task.id);
    let _turn = match &saving {
        Some(saving) => Some(saving.lock().await),
        None => None,
    };
    let mut writes = Vec::new();
    if !tasks.keeps(&task.id, snapshot.revision) {
        writes.push(documents.encode(TASK_DOCUMENT, tenant, &task.id, snapshot));
    }
    if name_context {
        writes.push(documents.encode(CONTEXT_DOCUMENT, tenant, &task.context_id, &task.id));
    }
    // Together: one transaction on redb, all sent at once on Redis (where a context may then name a task
    // whose save failed: a request for it finds the task absent, and forgets it).
    let kept = match writes.is_empty() {
        true => Ok(()),
        false => documents.save_all(writes).await,
    };
    match &kept {
        Ok(()) => tasks.kept(&task.id, snapshot.revision),
        Err(error) => {
            tracing::warn!(task_id = %task.id, "a2a: the task could not be kept in the store: {error}")
        }
    }
    kept.is_ok()
}

/// Resolves when the run is told to stop; never when it no longer can be (its run ended in the registry).
async fn cancelled(cancel: &mut Option<oneshot::Receiver<CancelReason>>) -> CancelReason {
    let Some(receiver) = cancel.as_mut() else {
        return pending().await;
    };
    let result = receiver.await;
    *cancel = None;
    match result {
        Ok(reason) => reason,
        Err(_) => pending().await,
    }
}

/// Resolves when the `message/stream` client went away.
async fn client_gone(primary: Option<&mpsc::Sender<Arc<StreamResult>>>) {
    match primary {
        Some(primary) => primary.closed().await,
        None => pending().await,
    }
}

struct FinishGuard {
    tasks: Arc<Registry>,
    task_id: String,
    generation: u64,
}

impl Drop for FinishGuard {
    fn drop(&mut self) {
        self.tasks.finish(&self.task_id, self.generation);
    }
}

/// Feeds a `tasks/resubscribe` client from the run's fan-out until the final status. One that fell behind is
/// sent every artifact as it stands (replacing its copy) and the current status, then the updates after them.
pub(super) async fn forward(
    tasks: Arc<Registry>,
    task_id: String,
    id: RequestId,
    mut updates: broadcast::Receiver<Update>,
    mut after: u64,
    sender: mpsc::Sender<Bytes>,
) {
    loop {
        let update = tokio::select! {
            update = updates.recv() => update,
            () = sender.closed() => return,
        };
        let results = match update {
            Ok(update) if update.seq <= after => continue,
            Ok(update) => vec![update.result],
            Err(RecvError::Lagged(_)) => {
                let Some((seq, results)) = tasks.resync(&task_id) else {
                    return;
                };
                after = seq;
                results.into_iter().map(Arc::new).collect()
            }
            Err(RecvError::Closed) => return,
        };
        for result in results {
            if sender.send(result_frame(&id, &*result)).await.is_err() {
                return;
            }
            if tasks::is_final(&result) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::{StoreBackend, StoreConfig};
    use crate::protocol::a2a::inbound::encode;
    use crate::protocol::a2a::wire::{self, TaskState};
    use crate::store::RedbStore;

    #[tokio::test]
    async fn a_tasks_older_snapshot_saved_after_a_newer_one_leaves_the_newer_kept() {
        let folder = std::env::temp_dir().join(format!(
            "agent-bridge-a2a-saves-{}-{}",
            std::process::id(),
            now_micros()
        ));
        let config = StoreConfig {
            backend: StoreBackend::Redb,
            path: Some(folder.join("store.redb")),
            idle_ttl: Duration::from_secs(60),
            ..StoreConfig::default()
        };
        let documents = Documents::new(Arc::new(RedbStore::open(&config).unwrap()), "route");
        let tasks = Registry::new();
        let message = json!({"kind": "message", "role": "user", "messageId": "m",
                             "parts": [{"kind": "text", "text": "hi"}]});
        let started = tasks
            .begin("acme", serde_json::from_value(message).unwrap())
            .unwrap();
        let id = &started.task_id;
        let working = tasks.snapshot(id, now_micros()).unwrap();
        let done = StreamResult::StatusUpdate(wire::TaskStatusUpdateEvent {
            kind: wire::StatusUpdateKind::StatusUpdate,
            task_id: id.clone(),
            context_id: started.context_id.clone(),
            status: encode::status(TaskState::Completed, None),
            is_final: true,
            metadata: None,
        });
        let completed = tasks
            .snapshot_after(id, started.generation, &done, None, now_micros())
            .unwrap();

        // The run's final status lands first; the snapshot taken as it started, saved late, after it.
        assert!(save(&tasks, &documents, "acme", &completed, false).await);
        assert!(save(&tasks, &documents, "acme", &working, true).await);

        let kept: Snapshot = documents
            .load(TASK_DOCUMENT, "acme", id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(kept.task.status.state, TaskState::Completed);
        assert_eq!(kept.revision, completed.revision);
        let latest: Option<String> = documents
            .load(CONTEXT_DOCUMENT, "acme", &started.context_id)
            .await
            .unwrap();
        assert_eq!(latest.as_ref(), Some(id), "its context is still named");
        drop(documents);
        let _ = std::fs::remove_dir_all(folder);
    }
}
