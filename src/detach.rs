//! Runs that outlive their client (`detach_grace`). It knows no protocol: an inbound names the run a
//! request is about ([`RunKey`]) and how to start it (its SSE frames); this does the rest.
//!
//! - The run is driven apart from the client's response. Its frames are cut into SSE events, and each is
//!   given an `id:` (1, 2, ...) and kept in the run's log, at most `run_buffer` bytes of them.
//! - Whoever follows the run reads the log: the client that started it, or one that comes back. A follower
//!   that falls `run_buffer` behind holds the run back (the upstream read waits), as a slow client does on
//!   any route; with nobody following, the oldest events go.
//! - A client that leaves stops following. With nobody following for `detach_grace`, the run is dropped,
//!   which cancels the upstream work. After its end the log is kept `detach_grace` longer.
//! - A request naming a kept run follows it instead of starting another upstream run: from after its
//!   `Last-Event-ID`, or from the start (the oldest kept event) when it sends none while the run is live.
//! - Where the store keeps documents, the events are also appended to the run's log in the store
//!   ([`crate::store::LogWriter`]): a client that comes back to another replica, or to this one after a
//!   restart, follows the run from there. While it does, it holds a lease that the replica driving the run
//!   counts as a follower. If that replica dies before the run's end, the follower is told so in its
//!   inbound's own error (an AG-UI `RUN_ERROR`, ...), which the inbound hands in.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::future::Either;
use futures_util::{Stream, StreamExt};
use tokio::sync::{watch, Notify};

use crate::store::{Documents, Followed, LogEnd};
use crate::sync::lock;

/// The kind of a detached run's log in the store.
const LOG: &str = "detached-run";
/// The kind of the lease a follower on another replica holds while it reads a run's log.
const FOLLOWER: &str = "detached-follower";

/// Which run a request names, as its inbound tells it: the tenant and the protocol's own ids.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunKey {
    tenant: String,
    run: Vec<String>,
}

impl RunKey {
    pub fn new(tenant: &str, ids: &[&str]) -> Self {
        Self {
            tenant: tenant.to_owned(),
            run: ids.iter().map(|id| (*id).to_owned()).collect(),
        }
    }

    /// The run's id in the store: its ids as a JSON array, so that no two runs share one.
    fn id(&self) -> String {
        serde_json::to_string(&self.run).unwrap_or_default()
    }
}

/// One route's runs that may outlive their clients.
pub struct Detached {
    grace: Duration,
    max_bytes: usize,
    runs: Arc<DetachedRuns>,
    /// Where the runs' events are kept for other replicas and restarts.
    documents: Documents,
}

/// A route's runs that outlive their clients, by name.
#[derive(Default)]
pub struct DetachedRuns(Mutex<HashMap<RunKey, Arc<Log>>>);

/// A run's log in the store, as a follower on another replica reads it.
#[derive(Clone)]
struct KeptRun {
    documents: Documents,
    tenant: String,
    id: String,
}

impl KeptRun {
    /// The run's event numbered `number` (from 1), as kept; empty when there is none (or it cannot be read).
    async fn event(&self, number: u64) -> Bytes {
        let Some(after) = number.checked_sub(1) else {
            return Bytes::new();
        };
        let page = self.documents.read_log(LOG, &self.tenant, &self.id, after);
        let page = page.await.ok().flatten();
        page.and_then(|page| page.events.into_iter().next())
            .unwrap_or_default()
    }
}

/// What a request gets: the frames of the run it follows.
pub type Frames = std::pin::Pin<Box<dyn Stream<Item = Bytes> + Send>>;

/// What an inbound tells a client that follows a run from the store when the replica driving it dies: its
/// protocol's error for a failed run, given the run's first event and the last one the client got (each
/// as kept, an SSE event without its `id:`), which a protocol may number or name its error after.
pub type LostRun = Box<dyn FnOnce(&[u8], &[u8]) -> Bytes + Send>;

/// The `Last-Event-ID` a client that comes back sends: the `id:` of the last event it read.
pub fn last_event_id(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get("last-event-id")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

impl Detached {
    /// Keeps each run `max_bytes` of events, for `grace` after its client left, in `runs` (a route's, kept
    /// across its reloads).
    pub fn new(
        grace: Duration,
        max_bytes: usize,
        documents: Documents,
        runs: Arc<DetachedRuns>,
    ) -> Arc<Self> {
        Arc::new(Self {
            grace,
            max_bytes,
            runs,
            documents,
        })
    }

    /// The frames for a request naming `key`: the kept run's, from after `last_event_id` (or from its start
    /// while it is live), else those of a new run of `start`. `lost`: see [`Detached::resume`].
    pub async fn serve<S>(
        self: &Arc<Self>,
        key: RunKey,
        last_event_id: Option<u64>,
        lost: LostRun,
        start: impl FnOnce() -> S,
    ) -> Frames
    where
        S: Stream<Item = Bytes> + Send + Unpin + 'static,
    {
        match self.resume(&key, last_event_id, lost).await {
            Some(frames) => frames,
            None => self.start(key, start()),
        }
    }

    /// The kept run `key`'s frames from after `last_event_id`, or from its start while it is live; `None`
    /// when no run of that name is kept (or it ended and the request names no event of it). A run this
    /// replica does not hold is looked for in the store; if its replica dies (or it outgrows what the store
    /// keeps), its follower gets what `lost` makes.
    pub async fn resume(
        &self,
        key: &RunKey,
        last_event_id: Option<u64>,
        lost: LostRun,
    ) -> Option<Frames> {
        if let Some(log) = lock(&self.runs.0).get(key) {
            let (last, ended) = {
                let state = log.state();
                (state.last, state.ended)
            };
            // An id past the run's last event is not one it gave (a client's earlier run's, or made up):
            // the request names no event of it.
            let after = last_event_id.filter(|id| *id <= last);
            if after.is_none() && ended {
                return None;
            }
            return Some(follow(Arc::clone(log), after.unwrap_or(0)));
        }
        self.resume_kept(key, last_event_id, lost).await
    }

    /// The frames of run `key` as the store keeps them, from after `last_event_id` (from the start when
    /// the run is live elsewhere and the request names no event), followed as they are appended.
    async fn resume_kept(
        &self,
        key: &RunKey,
        last_event_id: Option<u64>,
        lost: LostRun,
    ) -> Option<Frames> {
        if !self.documents.kept() {
            return None;
        }
        let (tenant, id) = (key.tenant.as_str(), key.id());
        let read = || async {
            let found = self.documents.read_log(LOG, tenant, &id, 0).await;
            found
                .inspect_err(|error| {
                    tracing::warn!("a detached run could not be looked for in the store: {error}")
                })
                .ok()
        };
        let mut page = read().await?;
        // Its lease is taken before any client reads its first event; the events may reach the store
        // after a client read them.
        let ended = page.as_ref().is_some_and(|page| page.ended.is_some());
        let live = !ended
            && self
                .documents
                .run_live(LOG, tenant, &id)
                .await
                .unwrap_or(false);
        if !live && page.is_none() {
            // The run may have ended, its events kept and its lease let go, between the read and the look
            // at its lease.
            page = read().await?;
        }
        if !live && (page.is_none() || last_event_id.is_none()) {
            return None;
        }
        if let (false, Some(after)) = (live, last_event_id) {
            if self.gave_no_event(tenant, &id, after).await {
                return None;
            }
        }
        let follower = Arc::new(Holder(tokio::spawn({
            let documents = self.documents.clone();
            let (tenant, id) = (tenant.to_owned(), id.clone());
            async move { documents.hold(FOLLOWER, &tenant, &id).await }
        })));
        let after = last_event_id.unwrap_or(0);
        let events = self.documents.follow_log(LOG, tenant, &id, after);
        let kept = KeptRun {
            documents: self.documents.clone(),
            tenant: tenant.to_owned(),
            id,
        };
        let (mut last, mut lost) = (None, Some(lost));
        Some(Box::pin(events.filter_map(move |followed| {
            let _holding = &follower;
            let lost = match followed {
                Followed::Event(id, event) => {
                    let frame = with_id(id, &event);
                    last = Some(event);
                    return Either::Left(std::future::ready(Some(frame)));
                }
                Followed::Lost => lost.take(),
            };
            let (kept, last) = (kept.clone(), last.clone());
            // Without an id: a client that comes back is told again.
            Either::Right(async move {
                let first = kept.event(1).await;
                let last = match last {
                    Some(last) => last,
                    None => kept.event(after).await,
                };
                Some(lost?(&first, &last))
            })
        })))
    }

    /// Starts `run` as the run named `key` (replacing one that ended), and follows it.
    pub fn start<S>(self: &Arc<Self>, key: RunKey, run: S) -> Frames
    where
        S: Stream<Item = Bytes> + Send + Unpin + 'static,
    {
        let log = Arc::new(Log::new(self.max_bytes));
        lock(&self.runs.0).insert(key.clone(), Arc::clone(&log));
        // The first follower counts before the run starts: the run is not abandoned before anyone came.
        let frames = follow(Arc::clone(&log), 0);
        tokio::spawn(Arc::clone(self).drive(key, log, run));
        frames
    }

    /// Drives the run into its log until it ends or nobody followed it for the grace, then keeps the log
    /// for the grace.
    async fn drive<S: Stream<Item = Bytes> + Unpin>(
        self: Arc<Self>,
        key: RunKey,
        log: Arc<Log>,
        run: S,
    ) {
        let mut run = run;
        let mut events = EventCutter::default();
        let kept = self.documents.open_log(LOG, &key.tenant, &key.id()).await;
        // One wait across the whole run: the grace is not restarted by each event the run produces.
        let abandoned = log.abandoned(self.grace);
        tokio::pin!(abandoned);
        loop {
            tokio::select! {
                frame = run.next() => match frame {
                    Some(frame) => {
                        for event in events.cut(frame) {
                            if let Some(kept) = &kept {
                                kept.push(event.clone()).await;
                            }
                            log.append(event).await;
                        }
                    }
                    None => break,
                },
                () = &mut abandoned => {
                    if self.followed_elsewhere(&key).await {
                        abandoned.set(log.abandoned(self.grace));
                        continue;
                    }
                    tracing::debug!("nobody followed a detached run for its grace; cancelled");
                    break;
                }
            }
        }
        // Dropping the run cancels what is left of it upstream. Its kept log ends first: a follower that saw
        // the end here finds it ended anywhere.
        drop(run);
        if let Some(kept) = kept {
            kept.end().await;
        }
        log.end();
        tokio::time::sleep(self.grace).await;
        let mut runs = lock(&self.runs.0);
        if runs.get(&key).is_some_and(|kept| Arc::ptr_eq(kept, &log)) {
            runs.remove(&key);
        }
    }
}

impl Detached {
    /// Whether the kept log `id` ended whole before event `event`: an id past its last is not one the run
    /// gave. (Until the log ends, its events may reach the store after a client read them: an id past the
    /// kept ones may be its own.)
    async fn gave_no_event(&self, tenant: &str, id: &str, event: u64) -> bool {
        let Some(before) = event.checked_sub(1) else {
            return false;
        };
        let page = self.documents.read_log(LOG, tenant, id, before).await;
        matches!(page, Ok(Some(page)) if page.events.is_empty() && page.ended == Some(LogEnd::Whole))
    }

    /// Whether a client follows run `key` from another replica (it holds the run's follower lease).
    async fn followed_elsewhere(&self, key: &RunKey) -> bool {
        let held = self
            .documents
            .is_held(FOLLOWER, &key.tenant, &key.id())
            .await;
        held.unwrap_or(false)
    }
}

/// A task that holds a lease for as long as this lives.
struct Holder(tokio::task::JoinHandle<()>);

impl Drop for Holder {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An event as a follower reads it: its `id:` first (a client that comes back sends the last one it read
/// as `Last-Event-ID`), then the event.
fn with_id(id: u64, event: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(event.len() + 24);
    write_with_id(&mut frame, id, event);
    frame.freeze()
}

fn write_with_id(frame: &mut BytesMut, id: u64, event: &[u8]) {
    let _ = writeln!(frame, "id: {id}");
    frame.extend_from_slice(event);
}

/// The most a follower is handed at once (a client that comes back to a long log reads it in parts).
const MAX_FRAME_BYTES: usize = 64 * 1024;

/// One run's events, numbered, and who reads them.
struct Log {
    state: Mutex<State>,
    /// Woken at every change: an event appended, the end, a follower that read or left.
    changed: Notify,
    /// How many follow the run.
    followers: watch::Sender<usize>,
    max_bytes: usize,
}

#[derive(Default)]
struct State {
    events: VecDeque<(u64, Bytes)>,
    bytes: usize,
    /// The id of the last event appended.
    last: u64,
    ended: bool,
    /// Each follower's position (the id of the last event it read), by its token.
    positions: HashMap<u64, u64>,
    next_token: u64,
}

impl State {
    /// Drops the oldest events, every follower having read them, until `needed` more bytes fit in `max`.
    /// Whether they fit (or nothing is left to drop: one event larger than `max` is still kept).
    fn make_room(&mut self, needed: usize, max: usize) -> bool {
        let slowest = self.positions.values().min().copied();
        while self.bytes + needed > max {
            let Some(&(oldest, _)) = self.events.front() else {
                return true;
            };
            if slowest.is_some_and(|read| read < oldest) {
                return false;
            }
            if let Some((id, gone)) = self.events.pop_front() {
                self.bytes -= kept_len(id, &gone);
            }
        }
        true
    }
}

impl Log {
    fn new(max_bytes: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            followers: watch::Sender::new(0),
            max_bytes,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Keeps `event` as the next one. The oldest events go to make room, but not one a follower has yet to
    /// read: then this waits for it (it holds the run back).
    async fn append(&self, event: Bytes) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.state();
                let id = state.last + 1;
                let size = kept_len(id, &event);
                if state.make_room(size, self.max_bytes) {
                    state.last = id;
                    state.bytes += size;
                    state.events.push_back((id, event));
                    drop(state);
                    self.changed.notify_waiters();
                    return;
                }
            }
            changed.await;
        }
    }

    fn end(&self) {
        self.state().ended = true;
        self.changed.notify_waiters();
    }

    /// Resolves once nobody has followed the run for `grace`.
    async fn abandoned(&self, grace: Duration) {
        let mut followers = self.followers.subscribe();
        loop {
            if followers.wait_for(|count| *count == 0).await.is_err() {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(grace) => return,
                joined = followers.wait_for(|count| *count > 0) => if joined.is_err() { return },
            }
        }
    }

    /// The events after `after` (from the oldest kept, if those went), as one frame of at most about
    /// [`MAX_FRAME_BYTES`], with the id of the last; `None` when there are none yet; `Some` empty at the
    /// end. Records that follower `token` read them.
    fn read_after(&self, token: u64, after: u64) -> Option<(Bytes, u64)> {
        let mut state = self.state();
        let mut frame = BytesMut::new();
        let mut last = after;
        for (id, event) in state.events.iter().filter(|(id, _)| *id > after) {
            write_with_id(&mut frame, *id, event);
            last = *id;
            if frame.len() >= MAX_FRAME_BYTES {
                break;
            }
        }
        if frame.is_empty() {
            return state.ended.then(|| (Bytes::new(), after));
        }
        state.positions.insert(token, last);
        drop(state);
        // A run held back by this follower may go on.
        self.changed.notify_waiters();
        Some((frame.freeze(), last))
    }
}

/// The bytes event `id` takes as a follower reads it: its `id:` line and the event.
fn kept_len(id: u64, event: &[u8]) -> usize {
    let digits = id.checked_ilog10().map_or(1, |log| log as usize + 1);
    "id: \n".len() + digits + event.len()
}

/// A follower: counted while its stream lives.
struct Follower {
    log: Arc<Log>,
    token: u64,
    after: u64,
}

impl Follower {
    fn new(log: Arc<Log>, after: u64) -> Self {
        let token = {
            let mut state = log.state();
            state.next_token += 1;
            let token = state.next_token;
            state.positions.insert(token, after);
            token
        };
        log.followers.send_modify(|count| *count += 1);
        Self { log, token, after }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.log.state().positions.remove(&self.token);
        self.log.followers.send_modify(|count| *count -= 1);
        self.log.changed.notify_waiters();
    }
}

/// The run's frames for one follower, from after `after`, until the run's end.
fn follow(log: Arc<Log>, after: u64) -> Frames {
    let follower = Follower::new(log, after);
    Box::pin(futures_util::stream::unfold(
        follower,
        |mut follower| async move {
            loop {
                let log = Arc::clone(&follower.log);
                let changed = log.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                match log.read_after(follower.token, follower.after) {
                    Some((frame, _)) if frame.is_empty() => return None,
                    Some((frame, last)) => {
                        follower.after = last;
                        return Some((frame, follower));
                    }
                    None => changed.await,
                }
            }
        },
    ))
}

/// Cuts frames into whole SSE events (each ends with a blank line). An encoder writes whole events, but a
/// frame boundary inside one would be kept for the next frame.
#[derive(Default)]
struct EventCutter {
    partial: BytesMut,
}

impl EventCutter {
    /// The whole events `frame` completes (their `id:` lines are [`Log::append`]'s). A comment (a ping)
    /// is no event: it is not kept, and the response's own heartbeat stands in for it.
    fn cut(&mut self, frame: Bytes) -> Vec<Bytes> {
        // Whole frames, the usual case, are cut without a copy.
        let mut rest = if self.partial.is_empty() {
            frame
        } else {
            self.partial.extend_from_slice(&frame);
            self.partial.split().freeze()
        };
        let mut events = Vec::new();
        while let Some(end) = memchr::memmem::find(&rest, b"\n\n") {
            let event = rest.split_to(end + 2);
            if !event
                .split(|byte| *byte == b'\n')
                .all(|line| line.is_empty() || line[0] == b':')
            {
                events.push(event);
            }
        }
        self.partial.extend_from_slice(&rest);
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_cut_into_whole_events_and_comments_are_not_kept() {
        let mut cutter = EventCutter::default();
        let events = cutter.cut(Bytes::from_static(b"data: 1\n\n: ping\n\ndata: 2\n"));
        assert_eq!(events, [Bytes::from_static(b"data: 1\n\n")]);
        let events = cutter.cut(Bytes::from_static(b"\nevent: x\ndata: 3\n\n"));
        assert_eq!(
            events,
            [
                Bytes::from_static(b"data: 2\n\n"),
                Bytes::from_static(b"event: x\ndata: 3\n\n")
            ]
        );
    }

    #[tokio::test]
    async fn with_nobody_following_the_oldest_events_go_and_a_follower_holds_the_run_back() {
        let log = Arc::new(Log::new(40));
        for n in 0..4 {
            log.append(Bytes::from(format!("data: {n}\n\n"))).await;
        }
        // Each kept event is `id: N\ndata: M\n\n` (15 bytes): two fit in 40.
        let kept: Vec<u64> = log.state().events.iter().map(|(id, _)| *id).collect();
        assert_eq!(kept, [3, 4]);

        let mut follower = follow(Arc::clone(&log), 0);
        let first = follower.next().await.unwrap();
        assert_eq!(
            first,
            Bytes::from_static(b"id: 3\ndata: 2\n\nid: 4\ndata: 3\n\n")
        );
        log.append(Bytes::from_static(b"data: 4\n\n")).await;
        log.append(Bytes::from_static(b"data: 5\n\n")).await;
        // Full, and the follower has not read event 5: the next append waits for it.
        let held = log.append(Bytes::from_static(b"data: 6\n\n"));
        tokio::pin!(held);
        let waited = tokio::time::timeout(Duration::from_millis(50), held.as_mut()).await;
        assert!(waited.is_err(), "the append waits for the follower");
        let read = follower.next().await.unwrap();
        assert_eq!(
            read,
            Bytes::from_static(b"id: 5\ndata: 4\n\nid: 6\ndata: 5\n\n")
        );
        held.await;
        log.end();
        assert_eq!(
            follower.next().await.unwrap(),
            Bytes::from_static(b"id: 7\ndata: 6\n\n")
        );
        assert_eq!(follower.next().await, None);
    }
}
