//! The sessions of one CMDC inbound route: an in-memory registry per (tenant, session id), each session with
//! its state, its queue of prompts, its callback tools, its message log and the event buffer of its current
//! run.
//!
//! A run's events are appended to the run's buffer and every subscriber reads the buffer with a cursor of
//! its own (`specs/cmdc.md` §4.2 #1): a subscriber that attaches after the prompt (cmdc-sdk posts `/prompt`
//! before it opens `/events`) replays the run from its first event, then follows it live. The run never
//! waits for a subscriber, a slow subscriber only falls behind in the buffer, and nothing is buffered per
//! subscriber. A finished run's buffer stays until a subscriber has read its terminal event, or until the
//! idle TTL drops it.
//!
//! The buffer keeps at most the route's `run_buffer` bytes (an estimate: each event's JSON length plus the
//! size of the event itself, so that a run of many one-word deltas counts what it costs). Beyond it the
//! oldest events go, never the newest: subscribers that keep up read every event. A subscriber that needs
//! an event no longer kept (it arrived late, or fell that far behind) gets one `error` event
//! (`run_buffer_exceeded: …`) and no more of that run: never a partial run presented as whole.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

use super::wire::{self, CallbackTool, Event};
use crate::egress::Requester;
use crate::model::Resume;
use crate::size::json_len;

/// How long a finished run's buffer waits for a subscriber to read it.
pub const FINISHED_RUN_TTL: Duration = Duration::from_secs(300);
/// A session nobody used this long (and that is not running) is forgotten.
const SESSION_IDLE_TTL: Duration = Duration::from_secs(24 * 3600);
/// The bytes of a session's message log (`GET …/messages`) kept: the oldest messages go first.
pub const MESSAGE_LOG_BYTES: usize = 8 << 20;
/// The most sessions a route keeps.
const MAX_SESSIONS: usize = 10_000;

/// Why a session could not be created.
#[derive(Debug, PartialEq, Eq)]
pub enum CreateError {
    Exists,
    /// The route holds [`MAX_SESSIONS`], or the tenant its `[routes.quota]` sessions.
    Full,
}

/// Every session of a route, and the per-API-key meter.
pub struct Sessions {
    sessions: Mutex<HashMap<(String, String), Arc<Session>>>,
    meters: Mutex<HashMap<String, Meter>>,
    /// `[routes.quota]` sessions: how many one tenant may keep.
    per_tenant: Option<std::num::NonZeroUsize>,
    /// The bytes of events each run keeps (`run_buffer`).
    run_buffer: usize,
}

impl Default for Sessions {
    fn default() -> Self {
        Self::new(crate::config::DEFAULT_RUN_BUFFER, None)
    }
}

/// What one API key used, across its sessions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Meter {
    pub prompts: u64,
    pub usage: wire::TokenUsage,
}

impl Sessions {
    /// Sessions whose runs keep `run_buffer` bytes of events, at most `per_tenant` of them per tenant.
    pub fn new(run_buffer: usize, per_tenant: Option<std::num::NonZeroUsize>) -> Self {
        Self {
            sessions: Mutex::default(),
            meters: Mutex::default(),
            per_tenant,
            run_buffer,
        }
    }

    /// Registers a new session, first forgetting sessions idle for longer than a day.
    pub fn create(
        &self,
        tenant: &str,
        id: &str,
        model: String,
        system_prompt: Option<String>,
    ) -> Result<Arc<Session>, CreateError> {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, session| {
            let idle = session.idle_for() > SESSION_IDLE_TTL && !session.state().busy;
            if idle {
                session.close();
            }
            !idle
        });
        let key = (tenant.to_owned(), id.to_owned());
        if sessions.contains_key(&key) {
            return Err(CreateError::Exists);
        }
        let tenant_full = self.per_tenant.is_some_and(|quota| {
            sessions.keys().filter(|(owner, _)| owner == tenant).count() >= quota.get()
        });
        if sessions.len() >= MAX_SESSIONS || tenant_full {
            return Err(CreateError::Full);
        }
        let session = Arc::new(Session::new(
            tenant,
            id,
            model,
            system_prompt,
            self.run_buffer,
        ));
        sessions.insert(key, Arc::clone(&session));
        Ok(session)
    }

    /// The tenant's session `id`; another tenant's sessions are invisible.
    pub fn get(&self, tenant: &str, id: &str) -> Option<Arc<Session>> {
        let session = lock(&self.sessions)
            .get(&(tenant.to_owned(), id.to_owned()))
            .cloned()?;
        *lock(&session.used) = Instant::now();
        Some(session)
    }

    pub fn remove(&self, tenant: &str, id: &str) -> Option<Arc<Session>> {
        lock(&self.sessions).remove(&(tenant.to_owned(), id.to_owned()))
    }

    pub fn active(&self) -> usize {
        lock(&self.sessions).len()
    }

    pub fn tracked_keys(&self) -> usize {
        lock(&self.meters).len()
    }

    pub fn meter(&self, api_key: &str) -> Meter {
        lock(&self.meters).get(api_key).copied().unwrap_or_default()
    }

    pub fn count_prompt(&self, api_key: &str) {
        lock(&self.meters)
            .entry(api_key.to_owned())
            .or_default()
            .prompts += 1;
    }

    pub fn add_usage(&self, api_key: &str, usage: wire::TokenUsage) {
        let mut meters = lock(&self.meters);
        let meter = meters.entry(api_key.to_owned()).or_default();
        add(&mut meter.usage, usage);
    }
}

pub fn add(total: &mut wire::TokenUsage, usage: wire::TokenUsage) {
    total.prompt_tokens += usage.prompt_tokens;
    total.completion_tokens += usage.completion_tokens;
    total.total_tokens += usage.total_tokens;
}

/// A session's `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Status {
    #[default]
    Idle,
    Working,
    WaitingApproval,
    WaitingInput,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Working => "working",
            Self::WaitingApproval => "waiting_approval",
            Self::WaitingInput => "waiting_input",
        }
    }
}

/// An interrupt the paused run waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub id: String,
    pub approval: bool,
}

/// A prompt waiting for the run before it.
#[derive(Debug, Clone)]
pub struct Queued {
    pub text: String,
    pub api_key: String,
}

/// One session.
pub struct Session {
    pub id: String,
    /// The key of the session's conversation record: unique to this session, so that a session created
    /// again under a deleted one's id starts with nothing of it (its history died with it).
    pub conversation: String,
    pub tenant: String,
    pub model: String,
    run_buffer: usize,
    created: Instant,
    used: Mutex<Instant>,
    state: Mutex<State>,
    current: watch::Sender<Current>,
    cancel: watch::Sender<bool>,
}

/// A callback tool of the session and the client that registered it: where its calls may go by default.
#[derive(Debug, Clone)]
pub struct RegisteredTool {
    pub tool: CallbackTool,
    pub requester: Requester,
}

/// What a session's handlers and its run read and change, under one lock.
#[derive(Default)]
pub struct State {
    pub status: Status,
    pub turns: u64,
    pub tool_calls: u64,
    pub usage: wire::TokenUsage,
    /// Sent as the system message of the conversation's first turn, then gone.
    pub system_prompt: Option<String>,
    pub queue: VecDeque<Queued>,
    /// What the paused run waits on, and where the answers go.
    pub pending: Vec<Pending>,
    pub answers: Option<mpsc::UnboundedSender<Resume>>,
    pub tools: Vec<RegisteredTool>,
    /// The conversation as CMDC messages (`GET …/messages`), its latest [`MESSAGE_LOG_BYTES`]; add with
    /// [`State::log_message`].
    pub messages: Vec<Value>,
    /// The JSON bytes of `messages`.
    messages_bytes: usize,
    /// Every message logged, kept or not (`agent_end.message_count`).
    pub messages_logged: u64,
    /// Whether a run is going on (running or paused).
    pub busy: bool,
    /// The runtime of the latest subscriber. A run is driven there, on the thread that streams its events,
    /// rather than on the one its prompt came in on: its events then cross no thread (src/workers.rs).
    pub subscriber_runtime: Option<Handle>,
    next_run: u64,
}

impl State {
    /// Adds a message to the session's log; beyond [`MESSAGE_LOG_BYTES`] the oldest go (never the latest).
    pub fn log_message(&mut self, message: Value) {
        self.messages_bytes += json_len(&message);
        self.messages.push(message);
        self.messages_logged += 1;
        let mut drop = 0;
        while self.messages_bytes > MESSAGE_LOG_BYTES && drop + 1 < self.messages.len() {
            self.messages_bytes -= json_len(&self.messages[drop]);
            drop += 1;
        }
        self.messages.drain(..drop);
    }
}

/// The run subscribers attach to, and whether the session is gone.
#[derive(Clone, Default)]
struct Current {
    run: Option<Arc<Run>>,
    closed: bool,
}

impl Session {
    fn new(
        tenant: &str,
        id: &str,
        model: String,
        system_prompt: Option<String>,
        run_buffer: usize,
    ) -> Self {
        Self {
            id: id.to_owned(),
            conversation: format!("{id}:{}", crate::model::random_hex()),
            tenant: tenant.to_owned(),
            model,
            run_buffer,
            created: Instant::now(),
            used: Mutex::new(Instant::now()),
            state: Mutex::new(State {
                system_prompt,
                ..State::default()
            }),
            current: watch::channel(Current::default()).0,
            cancel: watch::channel(false).0,
        }
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn idle_for(&self) -> Duration {
        lock(&self.used).elapsed()
    }

    pub fn uptime_ms(&self) -> u64 {
        u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Starts the buffer of a new run and makes it the one subscribers attach to.
    pub fn new_run(&self, state: &mut State) -> Arc<Run> {
        state.next_run += 1;
        let run = Arc::new(Run::new(state.next_run, self.run_buffer));
        self.current
            .send_modify(|current| current.run = Some(Arc::clone(&run)));
        run
    }

    /// Drops a finished run's buffer that nobody read within `ttl`. The wait ends early, keeping nothing, once
    /// the session closes or goes or another run takes this one's place: then there is nothing to drop.
    pub fn expire_unread(self: &Arc<Self>, run: &Arc<Run>, ttl: Duration) {
        let session = Arc::downgrade(self);
        // The run's address, not a reference: a `Weak` would keep its allocation for the whole `ttl`.
        let run = Arc::as_ptr(run) as usize;
        let is_this_run = move |current: &Current| {
            current
                .run
                .as_ref()
                .is_some_and(|c| Arc::as_ptr(c) as usize == run)
        };
        let mut changes = self.current.subscribe();
        tokio::spawn(async move {
            let superseded = changes.wait_for(|current| current.closed || !is_this_run(current));
            tokio::select! {
                () = tokio::time::sleep(ttl) => {}
                _ = superseded => return,
            }
            let Some(session) = session.upgrade() else {
                return;
            };
            session.current.send_if_modified(|current| {
                let stale =
                    is_this_run(current) && current.run.as_ref().is_some_and(|c| c.is_done());
                if stale {
                    current.run = None;
                }
                stale
            });
        });
    }

    /// Ends the session: its run is cancelled, and subscribers end once they read what is buffered.
    pub fn close(&self) {
        self.cancel.send_replace(true);
        self.current.send_modify(|current| current.closed = true);
    }

    pub fn is_closed(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Resolves once the session is closed.
    pub async fn closed(&self) {
        let mut cancel = self.cancel.subscribe();
        let _ = cancel.wait_for(|closed| *closed).await;
    }

    /// The run subscribers attach to now (the running one, or the last one).
    pub fn current_run(&self) -> Option<Arc<Run>> {
        self.current.borrow().run.clone()
    }

    /// A subscriber for one run: the current one if nobody read its end yet, else the next one.
    pub fn subscribe_run(self: &Arc<Self>) -> Follower {
        self.follower(true)
    }

    /// A subscriber for every run from now on (a WebSocket).
    pub fn subscribe_all(self: &Arc<Self>) -> Follower {
        self.follower(false)
    }

    fn follower(self: &Arc<Self>, single: bool) -> Follower {
        self.state().subscriber_runtime = Handle::try_current().ok();
        let current = self.current.borrow().clone();
        let (run, last_seq) = match current.run {
            Some(run) if !run.is_consumed() => {
                let seq = run.seq;
                (Some((run, 0)), seq - 1)
            }
            Some(run) => (None, run.seq),
            None => (None, 0),
        };
        Follower {
            session: Arc::clone(self),
            run,
            last_seq,
            single,
            finished: false,
        }
    }
}

/// The events of one run, as they come.
pub struct Run {
    seq: u64,
    buffer: Mutex<Buffer>,
    /// How many events the run pushed so far (kept or not).
    len: watch::Sender<usize>,
    /// Set by `POST …/abort`.
    aborted: watch::Sender<bool>,
}

/// The run's latest events, within `limit` bytes: the events from index `first` on, each with its cost.
struct Buffer {
    events: VecDeque<(Event, usize)>,
    first: usize,
    bytes: usize,
    limit: usize,
    done: bool,
    read: bool,
}

/// A subscriber asked for an event the buffer no longer keeps.
struct NoLongerKept;

/// The event a subscriber gets instead of a run it is too late to replay.
fn too_late() -> Event {
    Event::Error {
        reason:
            "run_buffer_exceeded: this run's events went past the route's run_buffer and its start \
                 is no longer kept; too late to replay this run"
                .into(),
    }
}

/// What an event costs the buffer: its JSON length plus the event itself (a cheap, stable estimate).
fn kept_bytes(event: &Event) -> usize {
    json_len(event) + std::mem::size_of::<Event>()
}

impl Run {
    fn new(seq: u64, limit: usize) -> Self {
        let buffer = Buffer {
            events: VecDeque::new(),
            first: 0,
            bytes: 0,
            limit,
            done: false,
            read: false,
        };
        Self {
            seq,
            buffer: Mutex::new(buffer),
            len: watch::channel(0).0,
            aborted: watch::channel(false).0,
        }
    }

    /// Asks the run to stop (`POST …/abort`); a finished run is left as it is.
    pub fn abort(&self) {
        if !self.is_done() {
            self.aborted.send_replace(true);
        }
    }

    /// Resolves once the run was asked to stop.
    pub async fn aborted(&self) {
        let mut aborted = self.aborted.subscribe();
        let _ = aborted.wait_for(|aborted| *aborted).await;
    }

    /// Appends an event and wakes the subscribers; beyond the buffer's limit the oldest events go (the
    /// newest always stays, so that the subscribers that keep up read it).
    pub fn push(&self, event: Event) {
        let len = {
            let mut buffer = lock(&self.buffer);
            if buffer.done {
                return;
            }
            buffer.done = event.is_terminal();
            let cost = kept_bytes(&event);
            buffer.bytes += cost;
            buffer.events.push_back((event, cost));
            if buffer.bytes > buffer.limit && buffer.first == 0 {
                tracing::warn!(
                    run_buffer = buffer.limit,
                    "a CMDC run outgrew its run_buffer; late subscribers can no longer replay it"
                );
            }
            while buffer.bytes > buffer.limit && buffer.events.len() > 1 {
                if let Some((_, cost)) = buffer.events.pop_front() {
                    buffer.bytes -= cost;
                    buffer.first += 1;
                }
            }
            buffer.first + buffer.events.len()
        };
        self.len.send_replace(len);
    }

    pub fn is_done(&self) -> bool {
        lock(&self.buffer).done
    }

    fn is_consumed(&self) -> bool {
        let buffer = lock(&self.buffer);
        buffer.done && buffer.read
    }

    /// The run's event at `index`: `None` if not pushed yet.
    fn get(&self, index: usize) -> Result<Option<Event>, NoLongerKept> {
        let mut buffer = lock(&self.buffer);
        let kept = index.checked_sub(buffer.first).ok_or(NoLongerKept)?;
        let event = buffer.events.get(kept).map(|(event, _)| event.clone());
        if event.as_ref().is_some_and(Event::is_terminal) {
            buffer.read = true;
        }
        Ok(event)
    }
}

/// One subscriber's cursor over a session's runs.
pub struct Follower {
    session: Arc<Session>,
    run: Option<(Arc<Run>, usize)>,
    last_seq: u64,
    single: bool,
    finished: bool,
}

impl Follower {
    /// The next event; `None` once the run ended (one-run subscribers) or the session is gone.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some((run, index)) = &mut self.run {
                let mut changed = run.len.subscribe();
                let (event, ends_run) = match run.get(*index) {
                    Ok(Some(event)) => {
                        let terminal = event.is_terminal();
                        (event, terminal)
                    }
                    Ok(None) => {
                        // The sender lives as long as the run we hold.
                        let _ = changed.changed().await;
                        continue;
                    }
                    Err(NoLongerKept) => (too_late(), true),
                };
                *index += 1;
                if ends_run {
                    self.last_seq = run.seq;
                    self.run = None;
                    self.finished = true;
                }
                return Some(event);
            }
            if self.single && self.finished {
                return None;
            }
            let last = self.last_seq;
            let mut current = self.session.current.subscribe();
            let next = current
                .wait_for(|c| c.closed || c.run.as_ref().is_some_and(|r| r.seq > last))
                .await
                .ok()?
                .clone();
            match next.run.filter(|r| r.seq > last) {
                Some(run) => self.run = Some((run, 0)),
                None => return None,
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; go on with it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(text: &str) -> Event {
        Event::MessageDelta { delta: text.into() }
    }

    #[tokio::test]
    async fn a_late_subscriber_replays_the_run_and_the_next_one_waits_for_a_new_run() {
        let sessions = Sessions::default();
        let session = sessions.create("t", "s", "m".into(), None).unwrap();
        let run = session.new_run(&mut session.state());
        run.push(Event::AgentStart {});
        run.push(delta("a"));
        run.push(Event::AgentAbort {
            reason: "user_cancelled".into(),
        });
        let mut late = session.subscribe_run();
        let mut seen = Vec::new();
        while let Some(event) = late.next().await {
            seen.push(event.name());
        }
        assert_eq!(seen, ["agent_start", "message_delta", "agent_abort"]);

        let mut after = session.subscribe_run();
        let next = session.new_run(&mut session.state());
        next.push(Event::AgentStart {});
        assert_eq!(after.next().await.map(|e| e.name()), Some("agent_start"));
    }

    /// A session whose run is over, and that run.
    fn finished_run() -> (Arc<Session>, Arc<Run>) {
        let session = Sessions::default()
            .create("t", "s", "m".into(), None)
            .unwrap();
        let run = session.new_run(&mut session.state());
        run.push(Event::AgentStart {});
        run.push(Event::AgentAbort {
            reason: "user_cancelled".into(),
        });
        (session, run)
    }

    /// Lets the spawned expiry task run as far as it can.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_run_nobody_read_is_dropped_after_its_ttl() {
        let (session, run) = finished_run();
        session.expire_unread(&run, Duration::from_secs(300));
        tokio::time::sleep(Duration::from_secs(299)).await;
        settle().await;
        assert!(session.current_run().is_some());
        tokio::time::sleep(Duration::from_secs(2)).await;
        settle().await;
        assert!(session.current_run().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn the_expiry_of_a_run_lets_go_of_its_session_once_the_session_closes() {
        let (session, run) = finished_run();
        session.expire_unread(&run, Duration::from_secs(300));
        settle().await;
        assert_eq!(Arc::weak_count(&session), 1, "the expiry waits");
        session.close();
        settle().await;
        assert_eq!(Arc::weak_count(&session), 0, "nothing is held for the ttl");
    }

    #[tokio::test]
    async fn a_subscriber_that_does_not_read_never_holds_up_the_run_or_another_subscriber() {
        let sessions = Sessions::default();
        let session = sessions.create("t", "s", "m".into(), None).unwrap();
        let run = session.new_run(&mut session.state());
        let mut stalled = session.subscribe_run();
        let mut reader = session.subscribe_run();
        for i in 0..10_000 {
            run.push(delta(&i.to_string()));
            if i % 1000 == 0 {
                assert_eq!(reader.next().await.map(|e| e.name()), Some("message_delta"));
            }
        }
        run.push(Event::AgentEnd {
            message_count: 0,
            last_message: None,
            token_usage: None,
        });
        let mut read = 10;
        while reader.next().await.is_some() {
            read += 1;
        }
        assert_eq!(read, 10_001);
        // The stalled one catches up from the run's buffer.
        let mut caught_up = 0;
        while stalled.next().await.is_some() {
            caught_up += 1;
        }
        assert_eq!(caught_up, 10_001);
    }

    #[tokio::test]
    async fn past_the_run_buffer_a_late_subscriber_gets_an_error_and_a_live_one_every_event() {
        let sessions = Sessions::new(4096, None);
        let session = sessions.create("t", "s", "m".into(), None).unwrap();
        let run = session.new_run(&mut session.state());
        let mut live = session.subscribe_run();
        run.push(Event::AgentStart {});
        let mut seen = 0;
        for i in 0..1000 {
            run.push(delta(&i.to_string()));
            // Reading as it comes, the live subscriber never needs an event that is gone.
            while let Ok(Some(_)) = tokio::time::timeout(Duration::ZERO, live.next()).await {
                seen += 1;
            }
        }
        let kept = lock(&run.buffer).bytes;
        assert!(kept <= 4096, "the buffer keeps {kept} bytes");
        let mut late = session.subscribe_run();
        run.push(Event::AgentAbort {
            reason: "user_cancelled".into(),
        });
        while live.next().await.is_some() {
            seen += 1;
        }
        assert_eq!(seen, 1002, "the live subscriber read every event");

        match late.next().await {
            Some(Event::Error { reason }) => assert!(reason.starts_with("run_buffer_exceeded")),
            other => panic!("expected the run_buffer error, got {other:?}"),
        }
        assert!(late.next().await.is_none(), "and no part of the run");
    }

    #[test]
    fn the_message_log_keeps_its_latest_bytes_and_counts_every_message() {
        let mut state = State::default();
        let big = "m".repeat(MESSAGE_LOG_BYTES / 3);
        for i in 0..5 {
            state.log_message(serde_json::json!({"id": i, "content": big}));
        }
        assert_eq!(state.messages_logged, 5);
        assert_eq!(state.messages.len(), 2, "the oldest went");
        assert_eq!(state.messages[1]["id"], 4);
        assert!(state.messages_bytes <= MESSAGE_LOG_BYTES);
    }

    #[tokio::test]
    async fn subscribers_end_when_the_session_closes() {
        let sessions = Sessions::default();
        let session = sessions.create("t", "s", "m".into(), None).unwrap();
        assert_eq!(
            sessions.create("t", "s", "m".into(), None).err(),
            Some(CreateError::Exists)
        );
        assert!(sessions.get("other", "s").is_none());
        let mut all = session.subscribe_all();
        session.close();
        assert!(all.next().await.is_none());
    }
}
