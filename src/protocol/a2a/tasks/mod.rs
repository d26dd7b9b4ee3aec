//! A2A inbound, the task registry of one route (`specs/a2a.md` §4.5): every task's state, artifacts (merged
//! per `artifactId`), history (the user's messages and the agent's final status messages), context, the
//! interrupt a paused task waits on, and, while a run goes on, its cancel handle and live fan-out.
//!
//! Choices:
//! - Per tenant: another tenant's task is not found (-32001), even when a client chose its id, and contexts
//!   are looked up per tenant.
//! - In memory, per route: tasks are the inbound's own bookkeeping, not conversation state an upstream needs,
//!   and a live run (its cancel handle, its subscribers) cannot outlive the process anyway. Where the store
//!   keeps documents, each task is also kept there ([`Snapshot`]) for other replicas and restarts, and in a
//!   store replicas share each run's results go to its log ([`EVENTS_LOG`]).
//! - Bounded: an entry expires after [`IDLE_TTL`] without use, and the registry holds at most [`MAX_TASKS`];
//!   when full, the least recently used task that is not running makes room (running tasks are never
//!   dropped; when every task runs, a new one is refused with -32603). The new task's tenant's own tasks go
//!   first, so that one tenant cannot push out another's; finished tasks go before paused ones (a person may
//!   still answer those).
//! - Per tenant (`[routes.quota]` tasks): a tenant at its quota makes room among its own tasks the same way;
//!   when every one of them runs, its new task is refused with -32051. Where a store keeps tasks, the
//!   inbound also counts it there (across replicas, and what the store kept before a restart), and
//!   withdraws a new task it has no room for.
//! - Bounded in bytes too: a task keeps the latest [`content::MAX_HISTORY_BYTES`] of history (the oldest messages go,
//!   the latest always stays) and [`content::MAX_ARTIFACT_BYTES`] of artifacts (text beyond is cut and ends with
//!   [`content::ARTIFACT_TRUNCATED`]; later chunks of it are not kept). Live subscribers still get every chunk; what is
//!   bounded is what `tasks/get` and a resubscription read back. Sizes: text by its bytes, other parts and
//!   messages by their JSON length.
//! - The fan-out is a broadcast channel per run, made for its first subscriber (most runs have none, and
//!   its slots are about 10 KiB) and dropped with the run so a finished task keeps no buffer. A subscriber
//!   that falls behind (more than [`FANOUT`] updates) is resynchronised from the stored task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, oneshot, watch};

use super::inbound::encode::{self, CancelReason};
use super::rpc::RpcError;
use super::wire::{self, StreamResult, TaskState};
use crate::model::new_id;

mod content;

pub use content::with_history_length;
use content::{merge_artifact, push_history};

/// How long a task is kept without being used.
pub const IDLE_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// How many tasks one route keeps at most.
pub const MAX_TASKS: usize = 10_000;
/// How many updates a live subscriber may fall behind before it is resynchronised.
pub const FANOUT: usize = 256;
/// How often expired tasks are swept (on the next new task).
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The tasks of one route.
pub struct Registry {
    inner: Mutex<Tasks>,
}

/// How many tasks a registry keeps.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// In all.
    pub total: usize,
    /// Of one tenant.
    pub per_tenant: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            total: MAX_TASKS,
            per_tenant: usize::MAX,
        }
    }
}

struct Tasks {
    tasks: HashMap<String, Entry>,
    bounds: Bounds,
    /// The latest task of each (tenant, context).
    contexts: HashMap<(String, String), String>,
    next_generation: u64,
    last_sweep: Instant,
}

struct Entry {
    /// Whose task it is; nobody else sees it.
    tenant: String,
    /// The revision of the task this entry holds (0: none yet), stamped on each snapshot to keep and on
    /// each change made here outside a run: a newer one the store keeps (another replica's) replaces it
    /// when no run goes on here.
    revision: u64,
    /// The newest revision the store is known to keep. While `revision` is newer (a save failed, or is to
    /// come), this entry is all there is of the task as it is: the store's older document, or none (a Redis
    /// restarted empty), does not replace it ([`Registry::held_here`]).
    kept_revision: u64,
    /// Held by a save of the task while it writes: one at a time, so that they land in turn.
    saving: Arc<tokio::sync::Mutex<()>>,
    task: wire::Task,
    /// The canonical interrupt a paused task waits on.
    interrupt_id: Option<String>,
    /// The run going on, if any.
    run: Option<Run>,
    /// Updates applied so far, over every run.
    seq: u64,
    touched: Instant,
}

/// A run in progress. Dropped when its final status is applied: waiters on `done` then wake.
struct Run {
    generation: u64,
    cancel: Option<oneshot::Sender<CancelReason>>,
    /// The fan-out, once someone subscribed.
    updates: Option<broadcast::Sender<Update>>,
    done: watch::Sender<()>,
}

/// One applied result, numbered within its task.
#[derive(Debug, Clone)]
pub struct Update {
    pub seq: u64,
    pub result: Arc<StreamResult>,
}

impl Update {
    pub fn is_final(&self) -> bool {
        is_final(&self.result)
    }
}

/// Whether a result ends its stream.
pub fn is_final(result: &StreamResult) -> bool {
    matches!(result, StreamResult::StatusUpdate(update) if update.is_final)
}

/// A run the registry accepted: what the runner needs.
pub struct Started {
    pub tenant: String,
    pub task_id: String,
    pub context_id: String,
    pub generation: u64,
    /// The task as it starts (`submitted`, history with the new message).
    pub task: wire::Task,
    /// The interrupt the new message answers, when it continues a paused task.
    pub resume: Option<String>,
    pub cancel: oneshot::Receiver<CancelReason>,
    /// The message made a new task (it continues none).
    pub new: bool,
}

/// The kind of the store document that keeps a task (by its id) for `tasks/get`, `tasks/cancel` and the
/// answer to a paused task after a restart or on another replica.
pub const TASK_DOCUMENT: &str = "a2a-task";
/// The kind of the store document that names the latest task of a context (by the context's id).
pub const CONTEXT_DOCUMENT: &str = "a2a-context";

/// The kind of the run log that keeps a task's results as they stream, in a store replicas share: a
/// `tasks/resubscribe` on another replica follows it, and its lease tells a run another replica drives from
/// one whose replica died.
pub const EVENTS_LOG: &str = "a2a-events";

/// A task as its store document keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    /// Newer snapshots have a larger revision (microseconds since the epoch when kept).
    pub revision: u64,
    pub task: wire::Task,
    /// The canonical interrupt a paused task waits on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_id: Option<String>,
}

/// What `tasks/cancel` found.
pub enum Cancel {
    /// Canceled (or not cancelable) at once.
    Done(Result<Box<wire::Task>, RpcError>),
    /// A paused task, canceled at once; the upstream still waits for the answer to `interrupt_id`.
    Declined {
        task: Box<wire::Task>,
        interrupt_id: String,
    },
    /// The run was told to stop; wait for it.
    Wait(watch::Receiver<()>),
}

/// Why a registry knows a task better than the store ([`Registry::held_here`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldHere {
    /// A run of it goes on here.
    Running,
    /// Its latest state is not kept in the store yet (a save failed, or is still to come).
    Unkept,
}

/// What a subscriber (`tasks/resubscribe`, or a blocking `message/send` waiting for the end) found.
pub enum Subscription {
    /// A run goes on: its updates after `after`.
    Live {
        updates: broadcast::Receiver<Update>,
        after: u64,
    },
    /// No run goes on: the current status, as a final update.
    Finished(Box<wire::TaskStatusUpdateEvent>),
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
        Self::bounded(Bounds::default())
    }

    /// Holds the registry to `bounds` from now on (a reload of its route changed them).
    pub fn rebound(&self, bounds: Bounds) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).bounds = bounds;
    }

    pub fn bounded(bounds: Bounds) -> Self {
        Self {
            inner: Mutex::new(Tasks {
                tasks: HashMap::new(),
                bounds,
                contexts: HashMap::new(),
                next_generation: 0,
                last_sweep: Instant::now(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tasks> {
        // The registry's invariants hold between statements; a panic elsewhere leaves it usable.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Accepts a message: a new task, or the continuation of a paused one (its `taskId`, or only its
    /// `contextId` when that context's latest task is paused). A `taskId` that names no task yet is the id
    /// the client chose for a new task (what the A2A TCK and clients that pick their own ids expect).
    pub fn begin(&self, tenant: &str, mut message: wire::Message) -> Result<Started, RpcError> {
        let mut tasks = self.lock();
        let now = Instant::now();
        tasks.sweep(now);
        let message_task = message.task_id.take().filter(|id| !id.is_empty());
        let message_context = message.context_id.take().filter(|id| !id.is_empty());
        let continued = match (&message_task, &message_context) {
            (Some(task_id), _) => match tasks.tasks.get(task_id) {
                Some(entry) if entry.tenant != tenant => {
                    return Err(RpcError::task_not_found(task_id))
                }
                Some(entry) => {
                    entry.check_continuable(message_context.as_deref())?;
                    Some(task_id.clone())
                }
                None => {
                    check_client_task_id(task_id)?;
                    None
                }
            },
            (None, Some(context_id)) => tasks
                .contexts
                .get(&(tenant.to_owned(), context_id.clone()))
                .cloned()
                .filter(|id| {
                    tasks.tasks.get(id).is_some_and(|entry| {
                        entry.run.is_none() && entry.task.status.state.is_paused()
                    })
                }),
            (None, None) => None,
        };
        let new = continued.is_none();
        let task_id = match continued {
            Some(task_id) => task_id,
            None => {
                tasks.make_room(tenant)?;
                let task_id = message_task.unwrap_or_else(|| new_id("task"));
                let context_id = message_context.unwrap_or_else(|| new_id("ctx"));
                tasks.tasks.insert(
                    task_id.clone(),
                    Entry::new(tenant, &task_id, context_id, now),
                );
                task_id
            }
        };
        let generation = tasks.next_generation;
        tasks.next_generation += 1;
        let entry = tasks
            .tasks
            .get_mut(&task_id)
            .ok_or_else(|| RpcError::internal("the task vanished"))?;
        let context_id = entry.task.context_id.clone();
        message.task_id = Some(task_id.clone());
        message.context_id = Some(context_id.clone());
        push_history(&mut entry.task.history, message);
        entry.task.status = encode::status(TaskState::Submitted, None);
        entry.touched = now;
        let (cancel_sender, cancel) = oneshot::channel();
        entry.run = Some(Run {
            generation,
            cancel: Some(cancel_sender),
            updates: None,
            done: watch::channel(()).0,
        });
        let started = Started {
            tenant: tenant.to_owned(),
            task_id: task_id.clone(),
            context_id: context_id.clone(),
            generation,
            task: entry.task.clone(),
            resume: entry.interrupt_id.take(),
            cancel,
            new,
        };
        tasks
            .contexts
            .insert((tenant.to_owned(), context_id), task_id);
        Ok(started)
    }

    /// Applies one result of a run to its task and sends it to the run's subscribers. A final status ends
    /// the run; `interrupt_id` is what a pause waits on. False when the run is no longer the task's (it was
    /// canceled, or the task is gone).
    pub fn apply(
        &self,
        task_id: &str,
        generation: u64,
        result: &Arc<StreamResult>,
        interrupt_id: Option<&str>,
    ) -> bool {
        let mut tasks = self.lock();
        let Some(entry) = tasks.tasks.get_mut(task_id) else {
            return false;
        };
        if entry.run.as_ref().map(|run| run.generation) != Some(generation) {
            return false;
        }
        entry.apply(result);
        if is_final(result) && entry.task.status.state.is_paused() {
            entry.interrupt_id = interrupt_id.map(str::to_owned);
        }
        true
    }

    /// The runner is gone: if its run never reached a final status, the task fails.
    pub fn finish(&self, task_id: &str, generation: u64) {
        let mut tasks = self.lock();
        let Some(entry) = tasks.tasks.get_mut(task_id) else {
            return;
        };
        if entry.run.as_ref().map(|run| run.generation) != Some(generation) {
            return;
        }
        tracing::warn!(%task_id, "a2a: run ended without a final status");
        entry.settle(TaskState::Failed, "The run ended without a result.");
    }

    /// Asks the run to stop if it is still `generation` (the client of a blocking `message/send` left).
    pub fn cancel_run(&self, task_id: &str, generation: u64, reason: CancelReason) {
        let mut tasks = self.lock();
        let run = tasks
            .tasks
            .get_mut(task_id)
            .and_then(|entry| entry.run.as_mut())
            .filter(|run| run.generation == generation);
        if let Some(cancel) = run.and_then(|run| run.cancel.take()) {
            let _ = cancel.send(reason);
        }
    }

    /// `tasks/cancel`: a running task is told to stop (wait, then read it); a paused one is canceled here.
    pub fn cancel(&self, tenant: &str, task_id: &str) -> Cancel {
        let mut tasks = self.lock();
        let entry = match tasks.entry(tenant, task_id) {
            Ok(entry) => entry,
            Err(error) => return Cancel::Done(Err(error)),
        };
        entry.touched = Instant::now();
        let state = entry.task.status.state;
        if state.is_terminal() {
            return Cancel::Done(Err(RpcError::not_cancelable(task_id, state)));
        }
        if let Some(run) = &mut entry.run {
            if let Some(cancel) = run.cancel.take() {
                let _ = cancel.send(CancelReason::Request);
            }
            return Cancel::Wait(run.done.subscribe());
        }
        entry.settle(
            TaskState::Canceled,
            "The task was canceled by tasks/cancel.",
        );
        let task = Box::new(entry.task.clone());
        match entry.interrupt_id.take() {
            Some(interrupt_id) => Cancel::Declined { task, interrupt_id },
            None => Cancel::Done(Ok(task)),
        }
    }

    /// The task as its store document keeps it, stamped with a new revision; `None` when it is gone.
    pub fn snapshot(&self, task_id: &str, revision: u64) -> Option<Snapshot> {
        let mut tasks = self.lock();
        let entry = tasks.tasks.get_mut(task_id)?;
        entry.revision = revision.max(entry.revision + 1);
        Some(Snapshot {
            revision: entry.revision,
            task: entry.task.clone(),
            interrupt_id: entry.interrupt_id.clone(),
        })
    }

    /// The task as its store document will keep it once `result` of run `generation` is applied (with
    /// `interrupt_id` when that pauses it), stamped with a new revision: kept before the result is applied
    /// and heard. `None` when the run is no longer the task's.
    pub fn snapshot_after(
        &self,
        task_id: &str,
        generation: u64,
        result: &StreamResult,
        interrupt_id: Option<&str>,
        revision: u64,
    ) -> Option<Snapshot> {
        let mut tasks = self.lock();
        let entry = tasks.tasks.get_mut(task_id)?;
        if entry.run.as_ref().map(|run| run.generation) != Some(generation) {
            return None;
        }
        entry.revision = revision.max(entry.revision + 1);
        let mut task = entry.task.clone();
        apply_to(&mut task, result);
        let interrupt_id = if is_final(result) && task.status.state.is_paused() {
            interrupt_id.map(str::to_owned)
        } else {
            entry.interrupt_id.clone()
        };
        Some(Snapshot {
            revision: entry.revision,
            task,
            interrupt_id,
        })
    }

    /// Whether this registry, not the store, knows `tenant`'s task best, and why.
    pub fn held_here(&self, tenant: &str, task_id: &str) -> Option<HeldHere> {
        let mut tasks = self.lock();
        let entry = tasks.entry(tenant, task_id).ok()?;
        if entry.run.is_some() {
            Some(HeldHere::Running)
        } else if entry.unkept() {
            Some(HeldHere::Unkept)
        } else {
            None
        }
    }

    /// What a save of the task holds while it writes, one save at a time; `None` once the task is gone.
    pub fn saving(&self, task_id: &str) -> Option<Arc<tokio::sync::Mutex<()>>> {
        Some(Arc::clone(&self.lock().tasks.get(task_id)?.saving))
    }

    /// Whether the store is known to keep the task at `revision` or a newer one.
    pub fn keeps(&self, task_id: &str, revision: u64) -> bool {
        let tasks = self.lock();
        tasks
            .tasks
            .get(task_id)
            .is_some_and(|entry| entry.kept_revision >= revision)
    }

    /// Records that the store keeps the task at `revision` (a [`Snapshot`]'s) or a newer one.
    pub fn kept(&self, task_id: &str, revision: u64) {
        if let Some(entry) = self.lock().tasks.get_mut(task_id) {
            entry.kept_revision = entry.kept_revision.max(revision);
        }
    }

    /// Takes in `tenant`'s task as another replica (or this one before a restart) kept it, unless a run of
    /// it goes on here or this registry holds that revision or a newer one. Its run, if it had one, is not
    /// here: it reads as the task last kept.
    pub fn adopt(&self, tenant: &str, snapshot: Snapshot) {
        let mut tasks = self.lock();
        let Snapshot {
            revision,
            task,
            interrupt_id,
        } = snapshot;
        let task_id = task.id.clone();
        match tasks.tasks.get_mut(&task_id) {
            Some(entry) if entry.tenant != tenant => return,
            Some(entry) => {
                if entry.run.is_some() || entry.revision >= revision {
                    return;
                }
                entry.task = task;
                entry.interrupt_id = interrupt_id;
                entry.revision = revision;
                entry.kept_revision = revision;
                entry.touched = Instant::now();
            }
            None => {
                if tasks.make_room(tenant).is_err() {
                    return;
                }
                let mut entry =
                    Entry::new(tenant, &task_id, task.context_id.clone(), Instant::now());
                entry.task = task;
                entry.interrupt_id = interrupt_id;
                entry.revision = revision;
                entry.kept_revision = revision;
                tasks.tasks.insert(task_id.clone(), entry);
            }
        }
        let context = tasks.tasks[&task_id].task.context_id.clone();
        tasks.contexts.insert((tenant.to_owned(), context), task_id);
    }

    /// Whether a run of the task other than `generation` goes on here.
    pub fn runs_other(&self, task_id: &str, generation: u64) -> bool {
        let tasks = self.lock();
        let run = tasks
            .tasks
            .get(task_id)
            .and_then(|entry| entry.run.as_ref());
        run.is_some_and(|run| run.generation != generation)
    }

    /// Drops the new task `task_id` that [`Registry::begin`] made for the run `generation`, before the run
    /// started (the tenant's quota, counted in the store, had no room for it).
    pub fn withdraw(&self, task_id: &str, generation: u64) {
        let mut tasks = self.lock();
        let begun = tasks
            .tasks
            .get(task_id)
            .and_then(|entry| entry.run.as_ref());
        if begun.is_some_and(|run| run.generation == generation) {
            tasks.drop_task(task_id, "no room in its tenant's quota");
        }
    }

    /// Drops `tenant`'s task `task_id`, unless this registry knows it best ([`Registry::held_here`]): a
    /// replica made room with it (this one, or another, which deleted it from the store they share), or it
    /// expired there.
    pub fn forget(&self, tenant: &str, task_id: &str) {
        let mut tasks = self.lock();
        if tasks
            .entry(tenant, task_id)
            .is_ok_and(|entry| entry.run.is_none() && !entry.unkept())
        {
            tasks.drop_task(task_id, "it made room in its tenant's quota, or expired");
        }
    }

    /// Fails `tenant`'s task if it shows a run going on (submitted, working) that no replica drives any
    /// more. Whether it did.
    pub fn fail_orphan(&self, tenant: &str, task_id: &str) -> bool {
        let mut tasks = self.lock();
        let Ok(entry) = tasks.entry(tenant, task_id) else {
            return false;
        };
        let state = entry.task.status.state;
        if entry.run.is_some() || !state.is_running() {
            return false;
        }
        tracing::warn!(%task_id, "a2a: the proxy running the task stopped; the task failed");
        entry.settle(
            TaskState::Failed,
            "The proxy running this task stopped before the task ended.",
        );
        true
    }

    /// The task as `tasks/get` shows it, with at most `history_length` messages of history.
    pub fn get(
        &self,
        tenant: &str,
        task_id: &str,
        history_length: Option<u64>,
    ) -> Result<wire::Task, RpcError> {
        let mut tasks = self.lock();
        let entry = tasks.entry(tenant, task_id)?;
        entry.touched = Instant::now();
        Ok(with_history_length(entry.task.clone(), history_length))
    }

    /// The task's updates from now on, or its status when no run goes on.
    pub fn subscribe(&self, tenant: &str, task_id: &str) -> Result<Subscription, RpcError> {
        let mut tasks = self.lock();
        let entry = tasks.entry(tenant, task_id)?;
        entry.touched = Instant::now();
        Ok(match &mut entry.run {
            Some(run) => Subscription::Live {
                updates: run
                    .updates
                    .get_or_insert_with(|| broadcast::channel(FANOUT).0)
                    .subscribe(),
                after: entry.seq,
            },
            None => Subscription::Finished(Box::new(entry.current_update())),
        })
    }

    /// What a subscriber that fell behind needs to catch up: every artifact as it stands (replacing what the
    /// subscriber has), the current status (final when no run goes on), and the update number they reflect.
    pub fn resync(&self, task_id: &str) -> Option<(u64, Vec<StreamResult>)> {
        let tasks = self.lock();
        let entry = tasks.tasks.get(task_id)?;
        let mut results: Vec<StreamResult> = entry
            .task
            .artifacts
            .iter()
            .map(|artifact| {
                StreamResult::ArtifactUpdate(wire::TaskArtifactUpdateEvent {
                    kind: wire::ArtifactUpdateKind::ArtifactUpdate,
                    task_id: task_id.to_owned(),
                    context_id: entry.task.context_id.clone(),
                    artifact: artifact.clone(),
                    append: false,
                    last_chunk: false,
                    metadata: None,
                })
            })
            .collect();
        results.push(StreamResult::StatusUpdate(entry.current_update()));
        Some((entry.seq, results))
    }
}

/// The longest task id a client may choose.
const MAX_CLIENT_TASK_ID: usize = 128;

/// A task id a client chose for a new task: at most [`MAX_CLIENT_TASK_ID`] characters of
/// `[A-Za-z0-9._:-]`, so that it is safe in logs, store keys and URLs.
fn check_client_task_id(task_id: &str) -> Result<(), RpcError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-');
    if task_id.len() <= MAX_CLIENT_TASK_ID && task_id.chars().all(allowed) {
        Ok(())
    } else {
        Err(RpcError::invalid_params(format!(
            "`message.taskId` names no task, and a new task's id must be at most \
             {MAX_CLIENT_TASK_ID} characters of [A-Za-z0-9._:-]"
        )))
    }
}

impl Tasks {
    /// The tenant's task `task_id`; another tenant's is not found.
    fn entry(&mut self, tenant: &str, task_id: &str) -> Result<&mut Entry, RpcError> {
        self.tasks
            .get_mut(task_id)
            .filter(|entry| entry.tenant == tenant)
            .ok_or_else(|| RpcError::task_not_found(task_id))
    }

    /// Drops tasks idle for longer than [`IDLE_TTL`] (at most once per [`SWEEP_EVERY`]).
    fn sweep(&mut self, now: Instant) {
        if now.duration_since(self.last_sweep) < SWEEP_EVERY {
            return;
        }
        self.last_sweep = now;
        self.tasks
            .retain(|_, entry| entry.run.is_some() || now.duration_since(entry.touched) < IDLE_TTL);
        let tasks = &self.tasks;
        self.contexts
            .retain(|_, task_id| tasks.contains_key(task_id));
    }

    /// Makes room for one more task of `tenant`, within its quota and the registry's: a task that is not
    /// running goes, one the store keeps as it is before one it does not (this entry is all there is of
    /// it), `tenant`'s own before others', finished before paused, least recently used first.
    fn make_room(&mut self, tenant: &str) -> Result<(), RpcError> {
        let Bounds { total, per_tenant } = self.bounds;
        let own = self.tasks.values().filter(|e| e.tenant == tenant).count();
        if own >= per_tenant {
            let oldest = self
                .evictable(|entry| entry.tenant == tenant, tenant)
                .ok_or_else(|| quota_reached(per_tenant))?;
            self.drop_task(&oldest, "its tenant at its quota; the least recently used");
        } else if self.tasks.len() >= total {
            let oldest = self.evictable(|_| true, tenant).ok_or_else(|| {
                RpcError::internal(format!("{total} tasks are running; try again later"))
            })?;
            self.drop_task(&oldest, "registry full; the least recently used");
        }
        Ok(())
    }

    /// The task to drop first among those `eligible` that are not running, for room for `tenant`.
    fn evictable(&self, eligible: impl Fn(&Entry) -> bool, tenant: &str) -> Option<String> {
        self.tasks
            .iter()
            .filter(|(_, entry)| entry.run.is_none() && eligible(entry))
            .min_by_key(|(_, entry)| {
                let paused = entry.task.status.state.is_paused();
                (
                    entry.unkept(),
                    entry.tenant != tenant,
                    paused,
                    entry.touched,
                )
            })
            .map(|(id, _)| id.clone())
    }

    fn drop_task(&mut self, task_id: &str, why: &str) {
        tracing::debug!(%task_id, "a2a: task dropped: {why}");
        if let Some(entry) = self.tasks.remove(task_id) {
            let context = (entry.tenant, entry.task.context_id);
            if self.contexts.get(&context).map(String::as_str) == Some(task_id) {
                self.contexts.remove(&context);
            }
        }
    }
}

/// A tenant's new task, refused: as many of its tasks as its quota lets it keep are running (-32051).
pub fn quota_reached(per_tenant: usize) -> RpcError {
    RpcError::rate_limited(&format!(
        "{per_tenant} tasks of this client are running (its quota); try again later"
    ))
}

/// What one result changes in a task.
fn apply_to(task: &mut wire::Task, result: &StreamResult) {
    match result {
        StreamResult::StatusUpdate(update) => {
            task.status = update.status.clone();
            if update.is_final {
                if let Some(message) = &update.status.message {
                    push_history(&mut task.history, message.clone());
                }
            }
        }
        StreamResult::ArtifactUpdate(update) => {
            merge_artifact(&mut task.artifacts, &update.artifact, update.append)
        }
        StreamResult::Task(_) | StreamResult::Message(_) => {}
    }
}

impl Entry {
    fn new(tenant: &str, task_id: &str, context_id: String, now: Instant) -> Self {
        Self {
            tenant: tenant.to_owned(),
            revision: 0,
            task: wire::Task {
                kind: wire::TaskKind::Task,
                id: task_id.to_owned(),
                context_id,
                status: encode::status(TaskState::Submitted, None),
                artifacts: Vec::new(),
                history: Vec::new(),
                metadata: None,
            },
            interrupt_id: None,
            run: None,
            kept_revision: 0,
            saving: Arc::default(),
            seq: 0,
            touched: now,
        }
    }

    /// Only a paused task, in the same context, takes another message.
    fn check_continuable(&self, context_id: Option<&str>) -> Result<(), RpcError> {
        let task = &self.task;
        let state = task.status.state;
        if state.is_terminal() {
            return Err(RpcError::terminal(&task.id, state));
        }
        if self.run.is_some() || !state.is_paused() {
            return Err(RpcError::invalid_params(format!(
                "Task {} is {}; only a task in input-required or auth-required takes another message",
                task.id,
                state.as_str()
            )));
        }
        match context_id {
            Some(context_id) if context_id != task.context_id => {
                Err(RpcError::invalid_params(format!(
                    "`message.contextId` {context_id} is not the context of task {} ({})",
                    task.id, task.context_id
                )))
            }
            _ => Ok(()),
        }
    }

    /// Stores a result and passes it on; a final status ends the run.
    fn apply(&mut self, result: &Arc<StreamResult>) {
        apply_to(&mut self.task, result);
        self.seq += 1;
        self.touched = Instant::now();
        if let Some(updates) = self.run.as_ref().and_then(|run| run.updates.as_ref()) {
            // No subscriber left is fine.
            let _ = updates.send(Update {
                seq: self.seq,
                result: Arc::clone(result),
            });
        }
        if is_final(result) {
            self.run = None;
        }
    }

    /// Ends the task in `state`, with an agent message saying why.
    fn settle(&mut self, state: TaskState, why: &str) {
        let message = encode::agent_message(
            &self.task.id,
            &self.task.context_id,
            vec![wire::Part::text(why)],
        );
        let update = encode::status_update(
            &self.task.id,
            &self.task.context_id,
            state,
            Some(message),
            true,
        );
        self.apply(&Arc::new(StreamResult::StatusUpdate(update)));
        // Changed here, not kept yet.
        self.revision += 1;
    }

    /// Whether the store's copy is older than this entry ([`Entry::kept_revision`]).
    fn unkept(&self) -> bool {
        self.revision > self.kept_revision
    }

    /// The current status as an update; final unless a run goes on.
    fn current_update(&self) -> wire::TaskStatusUpdateEvent {
        wire::TaskStatusUpdateEvent {
            kind: wire::StatusUpdateKind::StatusUpdate,
            task_id: self.task.id.clone(),
            context_id: self.task.context_id.clone(),
            status: self.task.status.clone(),
            is_final: self.run.is_none(),
            metadata: None,
        }
    }
}
#[cfg(test)]
mod tests {
    use super::content::{ARTIFACT_TRUNCATED, MAX_ARTIFACT_BYTES, MAX_HISTORY_BYTES};
    use super::*;
    use crate::size::json_len;
    use serde_json::json;

    fn user(text: &str) -> wire::Message {
        serde_json::from_value(json!({"kind": "message", "role": "user", "messageId": "m1",
                                      "parts": [{"kind": "text", "text": text}]}))
        .unwrap()
    }

    fn with_ids(
        mut message: wire::Message,
        task: Option<&str>,
        context: Option<&str>,
    ) -> wire::Message {
        message.task_id = task.map(str::to_owned);
        message.context_id = context.map(str::to_owned);
        message
    }

    fn status(task: &str, ctx: &str, state: TaskState, is_final: bool) -> Arc<StreamResult> {
        Arc::new(StreamResult::StatusUpdate(encode::status_update(
            task, ctx, state, None, is_final,
        )))
    }

    fn chunk(id: &str, text: &str) -> wire::Artifact {
        wire::Artifact {
            artifact_id: id.into(),
            name: None,
            description: None,
            parts: vec![wire::Part::text(text)],
            metadata: None,
        }
    }

    #[test]
    fn a_task_keeps_its_artifacts_within_the_bound_marked_where_cut() {
        let mut artifacts = Vec::new();
        let piece = "y".repeat(300_000);
        for _ in 0..8 {
            merge_artifact(&mut artifacts, &chunk("a", &piece), true);
        }
        let wire::Part::Text { text, .. } = &artifacts[0].parts[0] else {
            panic!("a text part");
        };
        assert!(text.len() <= MAX_ARTIFACT_BYTES, "{} bytes", text.len());
        assert!(
            text.len() > MAX_ARTIFACT_BYTES - 1000,
            "no more is cut than needed"
        );
        assert!(text.ends_with(ARTIFACT_TRUNCATED));
        assert!(text.starts_with("yyy"), "the start is kept");
    }

    #[test]
    fn a_task_keeps_its_latest_history_within_the_bound() {
        let mut history = Vec::new();
        for i in 0..8 {
            push_history(&mut history, user(&format!("{i}{}", "z".repeat(300_000))));
        }
        let total: usize = history.iter().map(json_len).sum();
        assert!(total <= MAX_HISTORY_BYTES, "{total} bytes");
        let wire::Part::Text { text, .. } = &history.last().unwrap().parts[0] else {
            panic!("a text part");
        };
        assert!(text.starts_with('7'), "the latest message stays");
    }

    #[test]
    fn artifacts_merge_per_id_with_text_joined() {
        let mut artifacts = Vec::new();
        merge_artifact(&mut artifacts, &chunk("a", "Hel"), false);
        merge_artifact(&mut artifacts, &chunk("a", "lo"), true);
        merge_artifact(&mut artifacts, &chunk("b", "x"), true);
        merge_artifact(&mut artifacts, &chunk("a", ""), true);
        assert_eq!(artifacts.len(), 2);
        assert_eq!(artifacts[0].parts, [wire::Part::text("Hello")]);
        merge_artifact(&mut artifacts, &chunk("a", "new"), false);
        assert_eq!(artifacts[0].parts, [wire::Part::text("new")]);
        assert_eq!(artifacts[1].parts, [wire::Part::text("x")]);
    }

    #[test]
    fn history_length_keeps_the_latest_messages() {
        let registry = Registry::new();
        let started = registry.begin("", user("a")).unwrap();
        let task = registry.get("", &started.task_id, Some(0)).unwrap();
        assert!(task.history.is_empty());
        let task = registry.get("", &started.task_id, None).unwrap();
        assert_eq!(task.history.len(), 1);
        assert_eq!(
            task.history[0].task_id.as_deref(),
            Some(started.task_id.as_str())
        );
    }

    /// Begins task `id` of `tenant` and ends its run in `state`.
    fn ended(registry: &Registry, tenant: &str, id: &str, state: TaskState) {
        let started = registry
            .begin(tenant, with_ids(user("x"), Some(id), None))
            .unwrap();
        let end = status(id, &started.context_id, state, true);
        assert!(registry.apply(id, started.generation, &end, Some("int")));
    }

    #[test]
    fn a_task_whose_latest_state_the_store_did_not_keep_is_held_here_until_it_does() {
        let registry = Registry::new();
        let started = registry.begin("acme", user("a")).unwrap();
        let id = &started.task_id;
        let kept = registry.snapshot(id, 10).unwrap();
        registry.kept(id, kept.revision);
        assert_eq!(registry.held_here("acme", id), Some(HeldHere::Running));

        // Its final status, snapshot to keep, and the save failed.
        let done = status(id, &started.context_id, TaskState::Completed, true);
        let unkept = registry
            .snapshot_after(id, started.generation, &done, None, 20)
            .unwrap();
        assert!(registry.apply(id, started.generation, &done, None));
        assert_eq!(registry.held_here("acme", id), Some(HeldHere::Unkept));
        // Neither the store's older copy nor its absence replaces it.
        registry.adopt("acme", kept.clone());
        registry.forget("acme", id);
        let task = registry.get("acme", id, None).unwrap();
        assert_eq!(task.status.state, TaskState::Completed);
        assert_eq!(registry.held_here("acme", id), Some(HeldHere::Unkept));

        // Kept; an older save that returns later does not undo that.
        registry.kept(id, unkept.revision);
        registry.kept(id, kept.revision);
        assert_eq!(registry.held_here("acme", id), None);
        registry.forget("acme", id);
        assert!(
            registry.get("acme", id, None).is_err(),
            "known to the store: forgotten"
        );
    }

    #[test]
    fn a_tenant_at_its_task_quota_makes_room_among_its_own_finished_tasks_else_is_refused() {
        let registry = Registry::bounded(Bounds {
            total: 100,
            per_tenant: 2,
        });
        let first = registry.begin("acme", user("1")).unwrap();
        registry.begin("acme", user("2")).unwrap();
        let refused = registry.begin("acme", user("3")).err().unwrap();
        assert_eq!(refused.code, wire::code::RATE_LIMITED);
        registry.begin("globex", user("other")).unwrap();

        let done = status(
            &first.task_id,
            &first.context_id,
            TaskState::Completed,
            true,
        );
        assert!(registry.apply(&first.task_id, first.generation, &done, None));
        registry.begin("acme", user("3")).unwrap();
        assert!(registry.get("acme", &first.task_id, None).is_err());
    }

    #[test]
    fn a_full_registry_drops_a_task_the_store_keeps_before_one_whose_latest_state_it_failed_to_keep(
    ) {
        let registry = Registry::bounded(Bounds {
            total: 2,
            per_tenant: usize::MAX,
        });
        ended(&registry, "acme", "unkept", TaskState::Completed);
        ended(&registry, "acme", "kept", TaskState::Completed);
        // Both snapshot to keep; one save failed.
        registry.snapshot("unkept", 10).unwrap();
        let kept = registry.snapshot("kept", 10).unwrap();
        registry.kept("kept", kept.revision);

        registry.begin("acme", user("new")).unwrap();
        assert!(registry.get("acme", "kept", None).is_err());
        assert!(
            registry.get("acme", "unkept", None).is_ok(),
            "the least recently used, but the only copy of its task"
        );
    }

    #[test]
    fn a_full_registry_drops_the_new_tasks_tenants_own_first_and_others_paused_tasks_last() {
        let registry = Registry::bounded(Bounds {
            total: 3,
            per_tenant: usize::MAX,
        });
        ended(&registry, "globex", "g-paused", TaskState::InputRequired);
        ended(&registry, "globex", "g-done", TaskState::Completed);
        ended(&registry, "acme", "a-done", TaskState::Completed);
        let present = |tenant, id| registry.get(tenant, id, None).is_ok();

        registry.begin("acme", user("new")).unwrap();
        assert!(!present("acme", "a-done"), "acme's own goes first");
        assert!(present("globex", "g-paused") && present("globex", "g-done"));

        registry.begin("acme", user("newer")).unwrap();
        assert!(!present("globex", "g-done"), "then another's finished task");
        assert!(present("globex", "g-paused"), "another's paused task last");
    }

    #[test]
    fn a_paused_task_continues_by_task_id_or_by_context_id() {
        let registry = Registry::new();
        let first = registry
            .begin("", with_ids(user("a"), None, Some("ctx-1")))
            .unwrap();
        assert_eq!(first.context_id, "ctx-1");
        let paused = status(&first.task_id, "ctx-1", TaskState::InputRequired, true);
        assert!(registry.apply(&first.task_id, first.generation, &paused, Some("int-1")));

        let second = registry
            .begin("", with_ids(user("b"), None, Some("ctx-1")))
            .unwrap();
        assert_eq!(second.task_id, first.task_id);
        assert_eq!(second.resume.as_deref(), Some("int-1"));
        assert_eq!(second.task.history.len(), 2);

        // Running now: neither path continues it; the context starts a new task.
        let err = registry
            .begin("", with_ids(user("c"), Some(&first.task_id), None))
            .err()
            .unwrap();
        assert!(err.message.contains("is submitted"), "{}", err.message);
        let third = registry
            .begin("", with_ids(user("c"), None, Some("ctx-1")))
            .unwrap();
        assert_ne!(third.task_id, first.task_id);
        assert_eq!(third.resume, None);
    }

    #[test]
    fn a_task_id_the_client_chose_names_a_new_task_when_it_is_safe() {
        let registry = Registry::new();
        let started = registry
            .begin(
                "",
                with_ids(user("a"), Some("client-task:1"), Some("ctx-9")),
            )
            .unwrap();
        assert_eq!(started.task_id, "client-task:1");
        assert_eq!(started.context_id, "ctx-9");
        assert_eq!(started.resume, None);
        assert_eq!(
            registry.get("", "client-task:1", None).unwrap().context_id,
            "ctx-9"
        );

        for unsafe_id in ["a/b", "white space", "ü", &"x".repeat(129)] {
            let err = registry
                .begin("", with_ids(user("a"), Some(unsafe_id), None))
                .err()
                .unwrap();
            assert_eq!(err.code, wire::code::INVALID_PARAMS, "{unsafe_id}");
            assert!(registry.get("", unsafe_id, None).is_err());
        }
        assert!(registry
            .begin("", with_ids(user("a"), Some(&"x".repeat(128)), None))
            .is_ok());
    }

    #[test]
    fn a_task_of_another_context_is_refused() {
        let registry = Registry::new();
        let first = registry
            .begin("", with_ids(user("a"), None, Some("ctx-1")))
            .unwrap();
        let paused = status(&first.task_id, "ctx-1", TaskState::InputRequired, true);
        registry.apply(&first.task_id, first.generation, &paused, Some("int-1"));
        let err = registry
            .begin("", with_ids(user("b"), Some(&first.task_id), Some("ctx-2")))
            .err()
            .unwrap();
        assert_eq!(err.code, wire::code::INVALID_PARAMS);
        assert!(err.message.contains("not the context"), "{}", err.message);
    }

    #[test]
    fn terminal_and_unknown_tasks_are_refused() {
        let registry = Registry::new();
        assert_eq!(
            registry.get("", "nope", None).err(),
            Some(RpcError::task_not_found("nope"))
        );
        assert!(
            matches!(registry.cancel("", "nope"), Cancel::Done(Err(e)) if e == RpcError::task_not_found("nope"))
        );
        assert!(
            matches!(registry.subscribe("", "nope"), Err(e) if e == RpcError::task_not_found("nope"))
        );
        let started = registry.begin("", user("a")).unwrap();
        let done = status(
            &started.task_id,
            &started.context_id,
            TaskState::Completed,
            true,
        );
        registry.apply(&started.task_id, started.generation, &done, None);
        let err = registry
            .begin("", with_ids(user("b"), Some(&started.task_id), None))
            .err()
            .unwrap();
        assert_eq!(
            err,
            RpcError::terminal(&started.task_id, TaskState::Completed)
        );
        assert!(matches!(registry.cancel("", &started.task_id),
            Cancel::Done(Err(e)) if e.code == wire::code::TASK_NOT_CANCELABLE));
        // A stale run's results are ignored.
        assert!(!registry.apply(&started.task_id, started.generation, &done, None));
    }

    #[test]
    fn final_updates_end_the_run_and_reach_subscribers() {
        let registry = Registry::new();
        let started = registry.begin("", user("a")).unwrap();
        let Ok(Subscription::Live { mut updates, after }) =
            registry.subscribe("", &started.task_id)
        else {
            panic!("live")
        };
        assert_eq!(after, 0);
        let working = status(
            &started.task_id,
            &started.context_id,
            TaskState::Working,
            false,
        );
        let done = status(
            &started.task_id,
            &started.context_id,
            TaskState::Completed,
            true,
        );
        registry.apply(&started.task_id, started.generation, &working, None);
        registry.apply(&started.task_id, started.generation, &done, None);
        assert_eq!(updates.try_recv().unwrap().seq, 1);
        assert!(updates.try_recv().unwrap().is_final());
        assert!(matches!(
            registry.subscribe("", &started.task_id),
            Ok(Subscription::Finished(update)) if update.is_final && update.status.state == TaskState::Completed
        ));
        // A dropped run (no final) fails the task.
        let next = registry.begin("", user("b")).unwrap();
        registry.finish(&next.task_id, next.generation);
        assert_eq!(
            registry.get("", &next.task_id, None).unwrap().status.state,
            TaskState::Failed
        );
    }

    #[test]
    fn cancel_signals_a_running_task_and_cancels_a_paused_one_at_once() {
        let registry = Registry::new();
        let mut started = registry.begin("", user("a")).unwrap();
        assert!(matches!(
            registry.cancel("", &started.task_id),
            Cancel::Wait(_)
        ));
        assert_eq!(started.cancel.try_recv(), Ok(CancelReason::Request));

        let other = registry.begin("", user("b")).unwrap();
        let paused = status(
            &other.task_id,
            &other.context_id,
            TaskState::InputRequired,
            true,
        );
        registry.apply(&other.task_id, other.generation, &paused, Some("int"));
        match registry.cancel("", &other.task_id) {
            Cancel::Declined { task, interrupt_id } => {
                assert_eq!(task.status.state, TaskState::Canceled);
                assert_eq!(interrupt_id, "int", "the upstream is told");
            }
            _ => panic!("canceled at once"),
        }
    }
}
