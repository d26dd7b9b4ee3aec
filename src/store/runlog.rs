//! A run's events kept in the store as they stream, so that a client on another replica, or on this one
//! after a restart, can follow the run: an A2A `tasks/resubscribe`, a client of a detached run coming back.
//! It knows no protocol: an event is the bytes its inbound chose to keep.
//!
//! - The writer ([`LogWriter`]) hands events to a task of its own, which appends several in one call: the
//!   run never waits on a store round trip, and the store is not written once per event. In a store
//!   replicas share, it appends what gathered over a short while (`GATHER_FOLLOWED`, `GATHER_UNFOLLOWED`);
//!   in one a process owns (redb), a full batch at a time, not synced. A [`LogWriter::durable`] point and
//!   the end of the log are appended at once, synced.
//! - A follower reads the log again when the store tells it the log was appended to (Redis's notices,
//!   [`super::notices`]), or polls where it cannot.
//! - In a store replicas share, the writer holds the run's lease while the log is open (renewed every
//!   [`LEASE_RENEWAL`]); a follower of a log that stopped growing and whose lease lapsed knows the replica
//!   driving the run is gone ([`Followed::Lost`]). In a store one process owns, a log that is not ended and
//!   that this process does not write was cut short by an earlier process.
//! - A log has one writer in this process ([`OpenLogs`]): opening it again (a newer run of the same task)
//!   takes it over, and the older writer stops without ending the log or letting go of the run's lease,
//!   both the newer writer's now.
//! - A log keeps at most [`MAX_LOG_BYTES`]: past them events are no longer kept (logged). A log cut so (or
//!   by a writer too far behind, or a failed append) ends marked cut ([`LogEnd::Cut`]): a follower reading
//!   it from the store gets what was kept, then [`Followed::Lost`], never a part of the run as the whole.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch, Notify};

use super::notices::LogWatch;
use super::{micros, now_micros, DocumentKey, Documents, LogEnd, LogPage};
use crate::sync::lock;

/// How long a run's lease holds without renewal, and how often the replica driving the run renews it.
pub const LEASE: Duration = Duration::from_secs(10);
pub const LEASE_RENEWAL: Duration = Duration::from_secs(3);
/// The most a run log keeps.
const MAX_LOG_BYTES: usize = 16 << 20;
/// The kind of the document that holds a run's lease (its id: the log's kind and id).
const LEASE_DOCUMENT: &str = "run-lease";
/// How many events one append or one read takes at most.
const BATCH: usize = 256;
/// How many events may wait for the writer before the run waits for it.
const PENDING: usize = 1024;
/// How long a writer gathers events before it appends them, in a store replicas share (unless a batch
/// filled, or a durable point or the end came first): while another replica follows the log live; while
/// nobody does. A writer starts as if followed and learns from each append whether it is.
const GATHER_FOLLOWED: Duration = Duration::from_millis(50);
const GATHER_UNFOLLOWED: Duration = Duration::from_secs(1);
/// How long a writer taking a log over waits for the older one to stop: it stops between two store calls.
const TAKE_OVER_WAIT: Duration = Duration::from_secs(10);

/// Until when (µs since the epoch) a replica drives the run.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Lease {
    until: u64,
}

/// The run logs this process writes, one writer each, so that a newer run of the same task takes its log
/// over instead of sharing it: an older writer ending later (its run still trying to keep its task) would
/// end the newer run's log and delete its lease. A route keeps it across live reloads.
#[derive(Default)]
pub struct OpenLogs(Mutex<HashMap<DocumentKey, OpenLog>>);

/// One writer's place in [`OpenLogs`].
struct OpenLog {
    writer: u64,
    /// Told to stop: checked between store calls, each wait woken by `wake`.
    taken_over: Arc<AtomicBool>,
    wake: Arc<Notify>,
    /// Closes once the writer's task stopped.
    stopped: watch::Receiver<()>,
}

impl OpenLogs {
    /// Enters `log` as `key`'s writer; once the older writer, if any, stopped (or `TAKE_OVER_WAIT`
    /// passed).
    async fn enter(&self, key: &DocumentKey, log: OpenLog) {
        let older = lock(&self.0).insert(key.clone(), log);
        let Some(mut older) = older else {
            return;
        };
        older.taken_over.store(true, Ordering::Relaxed);
        older.wake.notify_one();
        let stopped = async { while older.stopped.changed().await.is_ok() {} };
        if tokio::time::timeout(TAKE_OVER_WAIT, stopped).await.is_err() {
            tracing::warn!(run = %key.id, "a run log's older writer did not stop; taken over anyway");
        }
    }

    /// Whether this process writes `key`.
    fn writes(&self, key: &DocumentKey) -> bool {
        lock(&self.0).contains_key(key)
    }

    /// `key`'s writer `writer` stopped (or was never started: its opening was dropped): its place goes,
    /// unless a newer writer has it.
    fn leave(&self, key: &DocumentKey, writer: u64) {
        let mut logs = lock(&self.0);
        if logs.get(key).is_some_and(|log| log.writer == writer) {
            logs.remove(key);
        }
    }
}

/// A writer's place in [`OpenLogs`] while its log is being opened.
struct Place<'a> {
    open_logs: &'a OpenLogs,
    key: &'a DocumentKey,
    writer: u64,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.open_logs.leave(self.key, self.writer);
    }
}

/// Appends a run's events to its log; the log ends when this is dropped (or [`LogWriter::end`]ed).
pub struct LogWriter {
    sender: mpsc::Sender<Entry>,
    /// Declared after `sender`, so dropped after it: the writer it wakes finds the log ended.
    wake: Wake,
    task: tokio::task::JoinHandle<()>,
    /// [`LogWriter::try_push`] found the writer too far behind: the log keeps nothing more, and ends cut.
    overflowed: Arc<AtomicBool>,
}

/// Wakes a gathering writer before its time: a durable point, a full batch, the end (once dropped). Events
/// alone do not wake it: a wake-up per event would cost more than the event.
struct Wake(Arc<Notify>);

impl Drop for Wake {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

enum Entry {
    Event(Bytes),
    /// What was appended so far is to be on disk; told on the sender once it is (or the append failed).
    Durable(oneshot::Sender<()>),
}

/// What a follower of a run log reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Followed {
    /// The event numbered so, and its bytes.
    Event(u64, Bytes),
    /// The replica driving the run stopped before the log ended, or the log was cut (it outgrew
    /// [`MAX_LOG_BYTES`], or an append failed), or the store could not be read.
    Lost,
}

impl LogWriter {
    /// Keeps `event` as the log's next; waits only when the store is `PENDING` events behind.
    pub async fn push(&self, event: Bytes) {
        let _ = self.sender.send(Entry::Event(event)).await;
        self.wake_on_full_batch();
    }

    /// [`LogWriter::push`] for a run that cannot wait: when the store is `PENDING` events behind, the log
    /// keeps nothing more (logged) rather than a run with a hole in it.
    pub fn try_push(&self, event: Bytes) {
        if self.overflowed.load(Ordering::Relaxed) {
            return;
        }
        // Closed, the log was taken over by a newer run's writer: it keeps nothing of this run.
        if let Err(mpsc::error::TrySendError::Full(_)) = self.sender.try_send(Entry::Event(event)) {
            self.overflowed.store(true, Ordering::Relaxed);
            tracing::warn!("a run log fell too far behind its run; its later events are not kept");
        }
        self.wake_on_full_batch();
    }

    fn wake_on_full_batch(&self) {
        if self.sender.max_capacity() - self.sender.capacity() >= BATCH {
            self.wake.0.notify_one();
        }
    }

    /// Makes what was pushed so far durable (a run that pauses for its user); resolves once it is, or the
    /// store failed it. Asked at once, unless the store is `PENDING` events behind: then only when the
    /// returned future is polled, which holds the log open until it is asked.
    pub fn durable(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (kept, durable) = oneshot::channel();
        let waiting = match self.sender.try_send(Entry::Durable(kept)) {
            Ok(()) => None,
            Err(mpsc::error::TrySendError::Full(entry)) => Some((self.sender.clone(), entry)),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return futures_util::future::Either::Left(std::future::ready(()))
            }
        };
        let wake = Arc::clone(&self.wake.0);
        wake.notify_one();
        futures_util::future::Either::Right(async move {
            if let Some((sender, entry)) = waiting {
                if sender.send(entry).await.is_err() {
                    return;
                }
                wake.notify_one();
            }
            let _ = durable.await;
        })
    }

    /// Ends the log, and returns once what was pushed is kept, durably.
    pub async fn end(self) {
        let Self {
            sender, wake, task, ..
        } = self;
        drop(sender);
        drop(wake);
        let _ = task.await;
    }
}

impl Documents {
    fn lease_key(&self, kind: &'static str, tenant: &str, id: &str) -> DocumentKey {
        self.key(LEASE_DOCUMENT, tenant, &format!("{kind}/{id}"))
    }

    /// Starts the run log `kind`/`id` of `tenant` afresh and returns its writer, with the run's lease taken
    /// (in a store replicas share) before this returns; a writer of it in this process stops first. `None`
    /// where no log is kept (the memory backend).
    pub async fn open_log(&self, kind: &'static str, tenant: &str, id: &str) -> Option<LogWriter> {
        static WRITERS: AtomicU64 = AtomicU64::new(0);
        if !self.kept() {
            return None;
        }
        let key = self.key(kind, tenant, id);
        let number = WRITERS.fetch_add(1, Ordering::Relaxed);
        let (taken_over, wake) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
        let (stopped_sender, stopped) = watch::channel(());
        let log = OpenLog {
            writer: number,
            taken_over: Arc::clone(&taken_over),
            wake: Arc::clone(&wake),
            stopped,
        };
        // Its place is let go if this is dropped before its writer starts.
        let place = Place {
            open_logs: &self.open_logs,
            key: &key,
            writer: number,
        };
        self.open_logs.enter(&key, log).await;
        let lease = self.shared().then(|| self.lease_key(kind, tenant, id));
        let take_lease = async {
            if let Some(lease) = &lease {
                self.renew(lease).await;
            }
        };
        // Afresh now, not at the first append: another process may add to the log first (a control log),
        // and a follower must not read the last run's events as this one's. Sent with the lease, in one
        // round trip; in either order, as nothing tells of the run before both are done.
        let start = self.store.append_events(&key, 0, Vec::new(), None, false);
        let ((), started) = tokio::join!(biased; take_lease, start);
        if let Err(error) = &started {
            tracing::warn!(run = %id, "a run log could not be started: {error}");
        }
        // The writer has the place now.
        std::mem::forget(place);
        let (sender, receiver) = mpsc::channel(PENDING);
        let overflowed = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            documents: self.clone(),
            key,
            number,
            lease,
            bytes: 0,
            broken: started.is_err(),
            overflowed: Arc::clone(&overflowed),
            taken_over,
            _stopped: stopped_sender,
        };
        let task = tokio::spawn(writer.run(receiver, Arc::clone(&wake)));
        Some(LogWriter {
            sender,
            wake: Wake(wake),
            task,
            overflowed,
        })
    }

    /// Whether a replica still drives the run of log `kind`/`id`: its lease holds in a store replicas share.
    /// In a store this process owns alone, a run it does not drive was cut short when an earlier process
    /// stopped.
    pub async fn run_live(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
    ) -> crate::error::Result<bool> {
        self.is_held(LEASE_DOCUMENT, tenant, &format!("{kind}/{id}"))
            .await
    }

    /// Holds the lease `kind`/`id` of `tenant` in a store replicas share, renewing it every
    /// `LEASE_RENEWAL` until dropped (it then lapses within `LEASE`). Never resolves.
    pub async fn hold(&self, kind: &'static str, tenant: &str, id: &str) {
        if !self.shared() {
            return std::future::pending().await;
        }
        let lease = self.key(kind, tenant, id);
        self.renew(&lease).await;
        self.keep_held(&lease).await
    }

    /// Renews `lease`, taken already, every `LEASE_RENEWAL`. Never resolves.
    async fn keep_held(&self, lease: &DocumentKey) {
        loop {
            tokio::time::sleep(LEASE_RENEWAL).await;
            self.renew(lease).await;
        }
    }

    /// Whether someone holds the lease `kind`/`id` of `tenant` ([`Documents::hold`]); never, in a store
    /// this process owns alone.
    pub async fn is_held(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
    ) -> crate::error::Result<bool> {
        if !self.shared() {
            return Ok(false);
        }
        let lease = self.load::<Lease>(kind, tenant, id).await?;
        Ok(lease.is_some_and(|lease| lease.until > now_micros()))
    }

    /// Ends the log `kind`/`id` of `tenant`, cut, as a process that stopped left it: what is pushed to it from
    /// now on is refused ([`Documents::push_to_log`]).
    pub async fn end_log(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
    ) -> crate::error::Result<()> {
        let key = self.key(kind, tenant, id);
        let end = Some(LogEnd::Cut);
        let appended = self
            .store
            .append_events(&key, super::APPEND, Vec::new(), end, true);
        appended.await.map(drop)
    }

    /// Adds `event` to the log `kind`/`id` of `tenant` that another process writes (a request it is to act
    /// on), after whatever the log holds: whether it was added, which it is not once the log ended (its
    /// writer no longer reads what comes).
    pub async fn push_to_log(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
        event: Bytes,
    ) -> crate::error::Result<bool> {
        let key = self.key(kind, tenant, id);
        self.store.push_event(&key, event).await
    }

    /// Up to a batch of the events of log `kind`/`id` after `after`; `None` when no such log is kept.
    pub async fn read_log(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
        after: u64,
    ) -> crate::error::Result<Option<LogPage>> {
        self.store
            .read_events(&self.key(kind, tenant, id), after, BATCH)
            .await
    }

    /// The events of log `kind`/`id` after `after` as they are appended, until the log ends, or
    /// [`Followed::Lost`] once it stops growing with no replica driving its run.
    pub fn follow_log(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
        after: u64,
    ) -> impl Stream<Item = Followed> + Send + 'static {
        let follower = Follower {
            documents: self.clone(),
            kind,
            tenant: tenant.to_owned(),
            id: id.to_owned(),
            after,
            ready: VecDeque::new(),
            ended: false,
            cut: false,
            failing_since: None,
            watch: None,
        };
        // Fused: a consumer that reads on past the end gets the end again.
        futures_util::StreamExt::fuse(futures_util::stream::unfold(
            follower,
            |mut follower| async move {
                let next = follower.next().await?;
                Some((next, follower))
            },
        ))
    }

    /// What tells a waiter that the log `kind`/`id` of `tenant` may have been appended to (a run another
    /// replica started under that name): a notice where the store has them, else a poll.
    pub async fn watch_log(&self, kind: &'static str, tenant: &str, id: &str) -> LogWatch {
        self.store.watch_log(&self.key(kind, tenant, id)).await
    }

    async fn renew(&self, lease: &DocumentKey) {
        let until = now_micros().saturating_add(micros(LEASE));
        let bytes = super::codec::encode(&Lease { until }, now_micros(), false);
        if let Err(error) = self.store.save_document(lease, bytes).await {
            tracing::warn!(run = %lease.id, "a run's lease could not be renewed: {error}");
        }
    }
}

/// How long a writer gathers events before it appends them. In a store one process owns, until a batch
/// fills (or a durable point or the end comes): nobody reads the log before it ends (this process follows
/// its own runs in memory, and another only after a restart), and an append is not synced, so a crash
/// loses it unless another commit happened to sync it. An append there costs a write transaction, which
/// sooner appends would pay for nothing.
fn gather_window(shared: bool, followed: bool) -> Option<Duration> {
    match (shared, followed) {
        (false, _) => None,
        (true, true) => Some(GATHER_FOLLOWED),
        (true, false) => Some(GATHER_UNFOLLOWED),
    }
}

/// The task that appends a run's events.
struct Writer {
    documents: Documents,
    key: DocumentKey,
    /// Its number in [`OpenLogs`].
    number: u64,
    lease: Option<DocumentKey>,
    bytes: usize,
    /// An append failed: later events would be numbered wrong, so none is kept; the log ends cut.
    broken: bool,
    /// The run pushed faster than this kept up ([`LogWriter::try_push`]).
    overflowed: Arc<AtomicBool>,
    /// A newer writer took the log over ([`OpenLogs`]): this one stops, leaving the log and the lease alone.
    taken_over: Arc<AtomicBool>,
    /// Dropped as the task stops: what a newer writer waits on.
    _stopped: watch::Sender<()>,
}

/// A writer that stopped (however it did) leaves its place, unless a newer writer has it: a follower in this
/// process takes a log with a writer for live.
impl Drop for Writer {
    fn drop(&mut self) {
        self.documents.open_logs.leave(&self.key, self.number);
    }
}

/// Renews a run's lease until dropped.
struct Holder(tokio::task::JoinHandle<()>);

impl Drop for Holder {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Writer {
    async fn run(mut self, mut receiver: mpsc::Receiver<Entry>, wake: Arc<Notify>) {
        let shared = self.lease.is_some();
        let mut window = gather_window(shared, true);
        let holder = self.lease.clone().map(|lease| {
            let documents = self.documents.clone();
            Holder(tokio::spawn(
                async move { documents.keep_held(&lease).await },
            ))
        });
        loop {
            if self.taken_over() {
                return;
            }
            let first = tokio::select! {
                first = receiver.recv() => first,
                // Taken over, perhaps: looked at above.
                () = wake.notified() => continue,
            };
            let (batch, durable, end) = match first {
                Some(first) => match self.gather(first, &mut receiver, &wake, window).await {
                    Some(gathered) => gathered,
                    None => return,
                },
                None => (Vec::new(), Vec::new(), true),
            };
            let end = end.then(|| {
                if self.cut() {
                    LogEnd::Cut
                } else {
                    LogEnd::Whole
                }
            });
            // Looked at again before each store call: a newer writer that waited for this one in vain
            // (`TAKE_OVER_WAIT`) has the log and the lease.
            if self.taken_over() {
                return;
            }
            let followed = self
                .append(batch, end, !durable.is_empty() || end.is_some())
                .await;
            durable.into_iter().for_each(|kept| {
                let _ = kept.send(());
            });
            window = gather_window(shared, followed);
            if end.is_some() {
                // Not renewed again once deleted.
                drop(holder);
                if let Some(lease) = self.lease.as_ref().filter(|_| !self.taken_over()) {
                    let _ = self.documents.store.delete_document(lease).await;
                }
                return;
            }
        }
    }

    fn taken_over(&self) -> bool {
        self.taken_over.load(Ordering::Relaxed)
    }

    /// `first` and what follows it for one append, over `window` if any (a store write per event would cost
    /// more than the event), unless a batch fills, or a durable point or the end comes first: the batch,
    /// whom to tell it is durable (none: it need not be), whether the log ended. `None` once taken over.
    async fn gather(
        &mut self,
        first: Entry,
        receiver: &mut mpsc::Receiver<Entry>,
        wake: &Notify,
        window: Option<Duration>,
    ) -> Option<(Vec<Bytes>, Vec<oneshot::Sender<()>>, bool)> {
        let (mut batch, mut durable) = (Vec::new(), Vec::new());
        self.take(first, &mut batch, &mut durable);
        let deadline = window.map(|window| tokio::time::Instant::now() + window);
        loop {
            let end = self.drain(receiver, &mut batch, &mut durable);
            let due = deadline.is_some_and(|deadline| tokio::time::Instant::now() >= deadline);
            if end || !durable.is_empty() || batch.len() >= BATCH || due {
                return Some((batch, durable, end));
            }
            // Woken at the deadline, or before it by what cannot wait ([`Wake`]), not by each event.
            match deadline {
                Some(deadline) => {
                    let _ = tokio::time::timeout_at(deadline, wake.notified()).await;
                }
                None => wake.notified().await,
            }
            if self.taken_over() {
                return None;
            }
        }
    }

    /// Takes what waits, up to a batch or a durable point; whether the log ended.
    fn drain(
        &mut self,
        receiver: &mut mpsc::Receiver<Entry>,
        batch: &mut Vec<Bytes>,
        durable: &mut Vec<oneshot::Sender<()>>,
    ) -> bool {
        while batch.len() < BATCH && durable.is_empty() {
            match receiver.try_recv() {
                Ok(entry) => self.take(entry, batch, durable),
                Err(mpsc::error::TryRecvError::Empty) => return false,
                Err(mpsc::error::TryRecvError::Disconnected) => return true,
            }
        }
        false
    }

    /// Whether events of the run are missing from the log.
    fn cut(&self) -> bool {
        self.broken || self.bytes > MAX_LOG_BYTES || self.overflowed.load(Ordering::Relaxed)
    }

    fn take(
        &mut self,
        entry: Entry,
        batch: &mut Vec<Bytes>,
        durable: &mut Vec<oneshot::Sender<()>>,
    ) {
        match entry {
            Entry::Durable(kept) => durable.push(kept),
            Entry::Event(event) if self.bytes + event.len() <= MAX_LOG_BYTES => {
                self.bytes += event.len();
                batch.push(event);
            }
            Entry::Event(_) => {
                if self.bytes <= MAX_LOG_BYTES {
                    self.bytes = MAX_LOG_BYTES + 1;
                    tracing::warn!(
                        run = %self.key.id,
                        "a run log reached {MAX_LOG_BYTES} bytes; its later events are not kept"
                    );
                }
            }
        }
    }

    /// Appends `batch`; whether another process follows the log live.
    async fn append(&mut self, mut batch: Vec<Bytes>, end: Option<LogEnd>, durable: bool) -> bool {
        if self.broken {
            batch.clear();
        }
        if batch.is_empty() && end.is_none() && !durable {
            return false;
        }
        let appended = self
            .documents
            .store
            .append_events(&self.key, super::APPEND, batch, end, durable)
            .await;
        appended.unwrap_or_else(|error| {
            // Later events would be numbered wrong: none is kept (followers see the run stop there).
            self.broken = true;
            tracing::warn!(run = %self.key.id, "a run's events could not be kept: {error}");
            false
        })
    }
}

/// One follower's place in a run log.
struct Follower {
    documents: Documents,
    kind: &'static str,
    tenant: String,
    id: String,
    after: u64,
    ready: VecDeque<Bytes>,
    ended: bool,
    /// The log ended cut, and its follower is yet to be told ([`Followed::Lost`]).
    cut: bool,
    /// Since when the store has failed to answer, if it does.
    failing_since: Option<Instant>,
    /// Taken before the first read, so that no append after that read goes unnoticed.
    watch: Option<LogWatch>,
}

impl Follower {
    async fn next(&mut self) -> Option<Followed> {
        if self.watch.is_none() && !self.ended {
            let (kind, tenant, id) = (self.kind, &self.tenant, &self.id);
            self.watch = Some(self.documents.watch_log(kind, tenant, id).await);
        }
        loop {
            if let Some(event) = self.ready.pop_front() {
                self.after += 1;
                return Some(Followed::Event(self.after, event));
            }
            if self.ended {
                self.watch = None;
                return std::mem::take(&mut self.cut).then_some(Followed::Lost);
            }
            let live = match self.read().await {
                Some(true) => continue,
                Some(false) => self.live().await,
                None => Err(crate::error::Error::store_unavailable("the run log")),
            };
            match live {
                Ok(true) => self.failing_since = None,
                // The run may have ended between the read and the look at its lease.
                Ok(false) if self.read().await == Some(true) => continue,
                Ok(false) => return self.lost(),
                // A store that fails for a moment is no lost run; one that fails a lease long is.
                Err(_) => {
                    let since = *self.failing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > LEASE {
                        return self.lost();
                    }
                }
            }
            if let Some(watch) = &mut self.watch {
                watch.changed().await;
            }
        }
    }

    /// Whether a replica still drives the run: this one, without asking the store, while it writes the
    /// log (a run's control log, followed by the replica running the run).
    async fn live(&self) -> crate::error::Result<bool> {
        let (kind, tenant, id) = (self.kind, &self.tenant, &self.id);
        if self
            .documents
            .open_logs
            .writes(&self.documents.key(kind, tenant, id))
        {
            return Ok(true);
        }
        self.documents.run_live(kind, tenant, id).await
    }

    fn lost(&mut self) -> Option<Followed> {
        self.ended = true;
        Some(Followed::Lost)
    }

    /// Reads what was appended after `after`: whether there was anything (events, or the end). `None` is
    /// the store's failure (logged).
    async fn read(&mut self) -> Option<bool> {
        let (kind, tenant, id) = (self.kind, self.tenant.as_str(), self.id.as_str());
        match self.documents.read_log(kind, tenant, id, self.after).await {
            Ok(page) => {
                let page = page.unwrap_or_default();
                self.ended = page.ended.is_some();
                self.cut = page.ended == Some(LogEnd::Cut);
                let any = !page.events.is_empty() || self.ended;
                self.ready.extend(page.events);
                Some(any)
            }
            Err(error) => {
                tracing::warn!(run = %id, "a run log could not be read: {error}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures_util::StreamExt;

    use super::*;
    use crate::config::{StoreBackend, StoreConfig};
    use crate::store::RedbStore;

    /// The store in `folder`, once the last process (or writer task) holding it let go (bounded).
    async fn redb(folder: &std::path::Path) -> Documents {
        let config = StoreConfig {
            backend: StoreBackend::Redb,
            path: Some(folder.join("store.redb")),
            idle_ttl: Duration::from_secs(60),
            ..StoreConfig::default()
        };
        for _ in 0..100 {
            if let Ok(store) = RedbStore::open(&config) {
                return Documents::new(Arc::new(store), "route");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the store is still held");
    }

    fn folder(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "agent-bridge-runlog-{name}-{}-{}",
            std::process::id(),
            now_micros()
        ))
    }

    async fn followed(documents: &Documents, id: &str, after: u64) -> Vec<Followed> {
        documents
            .follow_log("kind", "acme", id, after)
            .collect()
            .await
    }

    fn event(n: u64) -> Followed {
        Followed::Event(n, Bytes::from(format!("event {n}")))
    }

    #[tokio::test]
    async fn an_ended_log_is_read_whole_after_a_restart_and_a_new_run_starts_it_afresh() {
        let folder = folder("ended");
        let documents = redb(&folder).await;
        let writer = documents.open_log("kind", "acme", "run").await.unwrap();
        for n in 1..=3 {
            writer.push(Bytes::from(format!("event {n}"))).await;
        }
        drop(writer);
        // The writer's task ends the log and lets go of the file.
        drop(documents);

        let documents = redb(&folder).await;
        assert_eq!(
            followed(&documents, "run", 0).await,
            [event(1), event(2), event(3)]
        );
        assert_eq!(followed(&documents, "run", 2).await, [event(3)]);
        assert_eq!(
            documents.read_log("kind", "other", "run", 0).await.unwrap(),
            None,
            "another tenant's log is another log"
        );

        let writer = documents.open_log("kind", "acme", "run").await.unwrap();
        writer.push(Bytes::from_static(b"event 1")).await;
        writer.durable().await;
        let page = documents.read_log("kind", "acme", "run", 0).await.unwrap();
        assert_eq!(page.unwrap().events.len(), 1, "kept once durable() returns");
        // Not ended, and in a store one process owns, read where its writer is not (as by the process
        // after a restart): lost after what was kept.
        let elsewhere = Documents::new(Arc::clone(&documents.store), "route");
        assert_eq!(
            followed(&elsewhere, "run", 0).await,
            [event(1), Followed::Lost]
        );
        // Where its writer is, it is live: followed to its end.
        let following = tokio::spawn({
            let documents = documents.clone();
            async move { followed(&documents, "run", 0).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        writer.push(Bytes::from_static(b"event 2")).await;
        writer.end().await;
        let read = tokio::time::timeout(Duration::from_secs(10), following).await;
        assert_eq!(read.unwrap().unwrap(), [event(1), event(2)]);
        drop(documents);
        let _ = std::fs::remove_dir_all(folder);
    }

    #[tokio::test]
    async fn a_log_whose_run_pushed_faster_than_it_kept_up_is_read_as_lost_after_what_it_kept() {
        let folder = folder("overflowed");
        let documents = redb(&folder).await;
        let writer = documents.open_log("kind", "acme", "run").await.unwrap();
        // Nothing awaited: the writer's task cannot take any before the channel fills.
        for n in 1..=PENDING as u64 + 1 {
            writer.try_push(Bytes::from(format!("event {n}")));
        }
        writer.end().await;

        let read = followed(&documents, "run", 0).await;
        assert_eq!(read.len(), PENDING + 1, "{} read", read.len());
        assert_eq!(read[PENDING - 1], event(PENDING as u64));
        assert_eq!(read[PENDING], Followed::Lost);
        drop(documents);
        let _ = std::fs::remove_dir_all(folder);
    }

    #[tokio::test]
    async fn a_log_that_outgrew_its_bound_is_read_as_lost_after_what_it_kept() {
        let folder = folder("cut");
        let documents = redb(&folder).await;
        let writer = documents.open_log("kind", "acme", "run").await.unwrap();
        let mib = Bytes::from(vec![b'x'; 1 << 20]);
        let kept = MAX_LOG_BYTES >> 20;
        for _ in 0..kept + 2 {
            writer.push(mib.clone()).await;
        }
        writer.end().await;

        let read = followed(&documents, "run", 0).await;
        assert_eq!(read.len(), kept + 1, "{} events", read.len());
        assert!(matches!(read[kept - 1], Followed::Event(n, _) if n == kept as u64));
        assert_eq!(read[kept], Followed::Lost);
        drop(documents);
        let _ = std::fs::remove_dir_all(folder);
    }
}
