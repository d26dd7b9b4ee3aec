//! The sessions of one CMDC inbound route: an in-memory registry per (tenant, session id), each session with
//! its state, its queue of prompts, its callback tools, its message log and the event buffer of its current
//! run. Where the store keeps documents, each session is kept there too ([`Kept`]), and its runs' events go to
//! a run log ([`RUN_LOG`]), so that other replicas (or this one after a restart) serve it.
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
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

use super::wire::{self, CallbackTool, Event};
use crate::egress::Requester;
use crate::model::Resume;
use crate::size::json_len;
use crate::store::{now_micros, LogWriter};
use crate::sync::lock;

/// How long a finished run's buffer waits for a subscriber to read it.
pub const FINISHED_RUN_TTL: Duration = Duration::from_secs(300);
/// A session nobody used this long (and that is not running) is forgotten.
const SESSION_IDLE_TTL: Duration = Duration::from_secs(24 * 3600);
/// The bytes of a session's message log (`GET …/messages`) kept: the oldest messages go first.
pub const MESSAGE_LOG_BYTES: usize = 8 << 20;
/// The most sessions a route holds in memory; where a store keeps sessions, those in use may take it over.
const MAX_SESSIONS: usize = 10_000;

/// How many sessions a full route holds once it forgot those nothing uses, to adopt one more.
const SESSIONS_AFTER_FORGETTING: usize = MAX_SESSIONS * 9 / 10;

/// Why a session could not be created.
#[derive(Debug, PartialEq, Eq)]
pub enum CreateError {
    Exists,
    /// The route holds [`MAX_SESSIONS`], or the tenant the sessions its quota lets this map count.
    Full,
}

/// Who counts a route's sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Counted {
    /// This map, against the tenant's `[routes.quota]` sessions: all the route has is here.
    Here(Option<NonZeroUsize>),
    /// The store, which keeps every session (another replica's, or this one's before a restart) and counts
    /// the quota: once the route holds [`MAX_SESSIONS`], sessions nothing here uses make room for a new one.
    InStore,
}

/// A route's sessions by tenant and id.
type SessionMap = HashMap<(String, String), Arc<Session>>;

/// Every session of a route, and the per-API-key meter.
pub struct Sessions {
    sessions: Mutex<SessionMap>,
    meters: Mutex<HashMap<String, Meter>>,
    /// The bytes of events each run keeps (`run_buffer`). A reload may change it for the runs to come.
    run_buffer: AtomicUsize,
}

impl Default for Sessions {
    fn default() -> Self {
        Self::new(crate::config::DEFAULT_RUN_BUFFER)
    }
}

/// What one API key used, across its sessions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Meter {
    pub prompts: u64,
    pub usage: wire::TokenUsage,
}

impl Sessions {
    /// Sessions whose runs keep `run_buffer` bytes of events.
    pub fn new(run_buffer: usize) -> Self {
        Self {
            sessions: Mutex::default(),
            meters: Mutex::default(),
            run_buffer: AtomicUsize::new(run_buffer),
        }
    }

    /// The runs to come keep `run_buffer` bytes of events (a reload of their route changed it).
    pub fn limit(&self, run_buffer: usize) {
        self.run_buffer.store(run_buffer, Ordering::Relaxed);
    }

    fn run_buffer(&self) -> usize {
        self.run_buffer.load(Ordering::Relaxed)
    }

    /// Registers a new session, first forgetting sessions idle for longer than a day.
    pub fn create(
        &self,
        tenant: &str,
        id: &str,
        model: String,
        system_prompt: Option<String>,
        counted: Counted,
    ) -> Result<Arc<Session>, CreateError> {
        let mut sessions = lock(&self.sessions);
        forget_idle(&mut sessions, SESSION_IDLE_TTL);
        let key = (tenant.to_owned(), id.to_owned());
        if sessions.contains_key(&key) {
            return Err(CreateError::Exists);
        }
        let tenant_full = match counted {
            Counted::Here(per_tenant) => per_tenant.is_some_and(|quota| {
                sessions.keys().filter(|(owner, _)| owner == tenant).count() >= quota.get()
            }),
            Counted::InStore => {
                forget_least_recently_used(&mut sessions);
                false
            }
        };
        if sessions.len() >= MAX_SESSIONS || tenant_full {
            return Err(CreateError::Full);
        }
        let session = Arc::new(Session::new(
            tenant,
            id,
            model,
            system_prompt,
            self.run_buffer(),
        ));
        sessions.insert(key, Arc::clone(&session));
        Ok(session)
    }

    /// The tenant's session `id` as another replica made it (the store keeps it), unless this one knows it.
    /// Its creation was counted where it was made; in this replica's memory, once the route holds
    /// [`MAX_SESSIONS`], it takes the place of sessions nothing here uses.
    pub fn adopt(&self, tenant: &str, id: &str, kept: Kept) -> Arc<Session> {
        let mut sessions = lock(&self.sessions);
        let key = (tenant.to_owned(), id.to_owned());
        if sessions.len() >= MAX_SESSIONS && !sessions.contains_key(&key) {
            forget_idle(&mut sessions, SESSION_IDLE_TTL);
            forget_least_recently_used(&mut sessions);
        }
        let session = sessions.entry(key).or_insert_with(|| {
            Arc::new(Session::from_kept(
                tenant,
                id,
                kept.clone(),
                self.run_buffer(),
            ))
        });
        session.take_in(kept);
        Arc::clone(session)
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

/// Forgets (and closes) the sessions no request used for `ttl` ([`SESSION_IDLE_TTL`]) that nothing holds
/// either ([`Session::unused`]): a WebSocket open on a session keeps it, however long ago its last request.
fn forget_idle(sessions: &mut SessionMap, ttl: Duration) {
    sessions.retain(|_, session| {
        let idle = session.idle_for() > ttl && session.unused();
        if idle {
            session.close();
        }
        !idle
    });
}

/// Where the store keeps sessions, once the route holds [`MAX_SESSIONS`]: lets go of the least recently used
/// sessions that nothing here holds (see [`Session::unused`]) down to [`SESSIONS_AFTER_FORGETTING`], so that
/// the scan is paid once per many adoptions. The store still has them, and the next request for one adopts
/// it again. Sessions in use stay: the route holds more than [`MAX_SESSIONS`] while that many are in use
/// (runs, requests, subscribers), and comes back under once they are not.
fn forget_least_recently_used(sessions: &mut SessionMap) {
    if sessions.len() < MAX_SESSIONS {
        return;
    }
    let over = sessions.len() + 1 - SESSIONS_AFTER_FORGETTING;
    let mut unused: Vec<_> = sessions
        .iter()
        .filter(|(_, session)| session.unused())
        .map(|(key, session)| (*lock(&session.used), key.clone()))
        .collect();
    unused.sort_unstable();
    for (_, key) in unused.into_iter().take(over) {
        sessions.remove(&key);
    }
}

pub fn add(total: &mut wire::TokenUsage, usage: wire::TokenUsage) {
    total.prompt_tokens += usage.prompt_tokens;
    total.completion_tokens += usage.completion_tokens;
    total.total_tokens += usage.total_tokens;
}

/// A session's `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// A session as the store keeps it (kind [`SESSION_DOCUMENT`]), so that any replica serves it: what its
/// handlers show and what a run driven on any replica needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Kept {
    pub conversation: String,
    pub model: String,
    /// When it was created, in µs since the epoch.
    pub created: u64,
    pub status: Status,
    pub turns: u64,
    pub tool_calls: u64,
    pub usage: wire::TokenUsage,
    pub system_prompt: Option<String>,
    pub pending: Vec<Pending>,
    pub tools: Vec<KeptTool>,
    pub messages: Vec<Value>,
    pub messages_logged: u64,
    /// A run goes on (running or paused), on the replica that holds the lease of the session's control log
    /// ([`CONTROL_LOG`]).
    pub busy: bool,
    /// How many runs the session had; the latest one's events are its run log.
    pub runs: u64,
    /// The run that opened the control log of the runs going on ([`control_log`]). None in what the version
    /// before it kept, whose replicas open one log per session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<u64>,
}

/// A callback tool as the store keeps it, with the client that registered it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeptTool {
    pub tool: CallbackTool,
    pub peer: std::net::IpAddr,
    pub local: std::net::SocketAddr,
}

impl KeptTool {
    pub fn of(registered: &RegisteredTool) -> Self {
        Self {
            tool: registered.tool.clone(),
            peer: registered.requester.peer,
            local: registered.requester.local,
        }
    }

    pub fn registered(self) -> RegisteredTool {
        RegisteredTool {
            tool: self.tool,
            requester: Requester {
                peer: self.peer,
                local: self.local,
            },
        }
    }
}

/// The kind of a session's store document (by the session's id).
pub const SESSION_DOCUMENT: &str = "cmdc-session";
/// The kind of the run log of a session's latest run (by the session's id): its events as WebSocket frames.
pub const RUN_LOG: &str = "cmdc-run";
/// The kind of the log through which other replicas hand the replica running a session's runs what their
/// clients asked of them ([`Control`]; by [`control_log`]).
pub const CONTROL_LOG: &str = "cmdc-control";

/// The kind of the claim to start a session's next run, in a store replicas share (by [`run_id`]).
pub const RUN_CLAIM: &str = "cmdc-run-claim";

/// The id of the claim to carry on the session's run number `run`, paused on its user when the proxy that
/// ran it stopped.
pub fn paused_claim(session: &str, run: u64) -> String {
    format!("{}/paused", run_id(session, run))
}

/// The id of the session's run number `run`, for what is that run's alone: the control log it opens (so
/// that the end of the last replica's log, a moment after it kept the session idle, cannot end the next
/// replica's) and the claim to start it.
pub fn run_id(session: &str, run: u64) -> String {
    format!("{session}/{run}")
}

/// The id of the control log that run `control` opened; with none named, the session's own, which a replica
/// of the version before opens (a run it drives during a rolling upgrade is still reached).
pub fn control_log(session: &str, control: Option<u64>) -> String {
    control.map_or_else(|| session.to_owned(), |run| run_id(session, run))
}
/// The kind of the document that says which of a session's runs a subscriber on some replica read to its end.
pub const READ_DOCUMENT: &str = "cmdc-read";

/// What a client asked of a session whose run goes on on another replica, handed there.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Control {
    Prompt { text: String, api_key: String },
    Tool(KeptTool),
    Answer(Resume),
    Abort,
    Close,
}

impl Control {
    /// Whether the session's run, as `session` shows it, waits for this: an answer only while the run waits
    /// on its interrupt (the run it was meant for may have ended, and the next one waits on none of it).
    pub fn is_awaited_by(&self, session: &Session) -> bool {
        match self {
            Control::Answer(resume) => session.is_pending(&resume.interrupt_id),
            _ => true,
        }
    }
}

/// Why an answer was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Unanswered {
    /// The session's run waits on no such interrupt.
    NotPending,
    RunEnded,
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
    /// µs since the epoch.
    created: u64,
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
    /// Whether a run is going on (running or paused) on this replica.
    pub busy: bool,
    /// Whether a run goes on on another replica, as the store last said.
    pub elsewhere: bool,
    /// How many runs the session had, on any replica, as far as this one knows.
    pub runs: u64,
    /// The run that opened the control log of the runs going on, here or elsewhere ([`control_log`]).
    pub control: Option<u64>,
    /// The runtime of the latest subscriber. A run is driven there, on the thread that streams its events,
    /// rather than on the one its prompt came in on: its events then cross no thread (src/workers.rs).
    pub subscriber_runtime: Option<Handle>,
}

impl State {
    /// Registers a callback tool, replacing one of the same name.
    pub fn register(&mut self, registered: RegisteredTool) {
        self.tools.retain(|t| t.tool.name != registered.tool.name);
        self.tools.push(registered);
    }

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
        // Not the session id: that is a client's secret on an open route, and the key is logged.
        let conversation = crate::model::random_hex();
        let session = Self::with(tenant, id, conversation, model, now_micros(), run_buffer);
        session.state().system_prompt = system_prompt;
        session
    }

    /// The session another replica made, as the store keeps it.
    fn from_kept(tenant: &str, id: &str, kept: Kept, run_buffer: usize) -> Self {
        let session = Self::with(
            tenant,
            id,
            kept.conversation.clone(),
            kept.model.clone(),
            kept.created,
            run_buffer,
        );
        session.take_in(kept);
        session
    }

    fn with(
        tenant: &str,
        id: &str,
        conversation: String,
        model: String,
        created: u64,
        run_buffer: usize,
    ) -> Self {
        Self {
            id: id.to_owned(),
            conversation,
            tenant: tenant.to_owned(),
            model,
            run_buffer,
            created,
            used: Mutex::new(Instant::now()),
            state: Mutex::new(State::default()),
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

    /// Whether nothing on this replica depends on its being held here, called under the map's lock (every
    /// other holder got its `Arc` from the map): no run, request, WebSocket or `/events` follower holds it
    /// (each holds an `Arc`), and no finished run waits for a late subscriber (its expiry holds a receiver).
    fn unused(self: &Arc<Self>) -> bool {
        Arc::strong_count(self) == 1 && !self.state().busy && self.current.receiver_count() == 0
    }

    pub fn uptime_ms(&self) -> u64 {
        now_micros().saturating_sub(self.created) / 1000
    }

    /// The session as the store keeps it.
    pub fn kept(&self) -> Kept {
        let state = self.state();
        Kept {
            conversation: self.conversation.clone(),
            model: self.model.clone(),
            created: self.created,
            status: state.status,
            turns: state.turns,
            tool_calls: state.tool_calls,
            usage: state.usage,
            system_prompt: state.system_prompt.clone(),
            pending: state.pending.clone(),
            tools: state.tools.iter().map(KeptTool::of).collect(),
            messages: state.messages.clone(),
            messages_logged: state.messages_logged,
            busy: state.busy || state.elsewhere,
            runs: state.runs,
            control: state.control,
        }
    }

    /// Takes in the session as the store keeps it, unless a run goes on here (then this replica knows
    /// it best).
    pub fn take_in(&self, kept: Kept) {
        let mut state = self.state();
        if state.busy {
            return;
        }
        state.status = kept.status;
        state.turns = kept.turns;
        state.tool_calls = kept.tool_calls;
        state.usage = kept.usage;
        state.system_prompt = kept.system_prompt;
        state.pending = kept.pending;
        state.tools = kept.tools.into_iter().map(KeptTool::registered).collect();
        state.messages_bytes = kept.messages.iter().map(json_len).sum();
        state.messages = kept.messages;
        state.messages_logged = kept.messages_logged;
        state.elsewhere = kept.busy;
        state.runs = state.runs.max(kept.runs);
        state.control = kept.control;
    }

    /// Starts the buffer of a new run and makes it the one subscribers attach to.
    pub fn new_run(&self, state: &mut State) -> Arc<Run> {
        state.runs += 1;
        self.run_again(state)
    }

    /// Starts a buffer for the session's latest run afresh (one carried on here) and makes it the one
    /// subscribers attach to.
    pub fn run_again(&self, state: &State) -> Arc<Run> {
        let run = Arc::new(Run::new(state.runs, self.run_buffer));
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

    /// Whether the session's run waits on interrupt `id`.
    pub fn is_pending(&self, id: &str) -> bool {
        self.state().pending.iter().any(|p| p.id == id)
    }

    /// Hands an answer to the run paused here.
    pub fn answer(&self, resume: Resume) -> Result<(), Unanswered> {
        let mut state = self.state();
        let position = state
            .pending
            .iter()
            .position(|p| p.id == resume.interrupt_id);
        let (Some(position), Some(answers)) = (position, state.answers.clone()) else {
            return Err(Unanswered::NotPending);
        };
        state.pending.remove(position);
        answers.send(resume).map_err(|_| Unanswered::RunEnded)
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
    /// The run's log in the store, while the run goes on (for subscribers on other replicas).
    log: Mutex<Option<LogWriter>>,
}

/// The run's latest events, within `limit` bytes: the events from index `first` on, each with its cost.
struct Buffer {
    events: VecDeque<(Event, usize)>,
    first: usize,
    bytes: usize,
    limit: usize,
    done: bool,
    read: bool,
    /// The run's end, kept from subscribers until its log in the store ended ([`Run::end_log`]).
    held_end: Option<Event>,
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
            held_end: None,
        };
        Self {
            seq,
            buffer: Mutex::new(buffer),
            len: watch::channel(0).0,
            aborted: watch::channel(false).0,
            log: Mutex::new(None),
        }
    }

    /// Keeps the run's events from now on in its log in the store too, until [`Run::end_log`].
    pub fn keep_in(&self, log: LogWriter) {
        *lock(&self.log) = Some(log);
    }

    /// Ends the run's log in the store, if kept, then shows subscribers the run's end: a client that read
    /// it finds the run ended on any replica, and after a restart.
    pub async fn end_log(&self) {
        let log = lock(&self.log).take();
        if let Some(log) = log {
            log.end().await;
        }
        let held = lock(&self.buffer).held_end.take();
        if let Some(end) = held {
            self.append(end);
        }
    }

    /// Hands `event` to the run's log, if kept. A pause is kept durably (a person may answer it much later,
    /// on any replica or after a restart): what resolves once it is.
    fn log(&self, event: &Event) -> Option<impl std::future::Future<Output = ()> + use<>> {
        let log = lock(&self.log);
        let writer = log.as_ref()?;
        writer.try_push(bytes::Bytes::from(event.to_frame()));
        let pause = matches!(
            event,
            Event::ApprovalRequired { .. } | Event::AskUser { .. }
        );
        pause.then(|| writer.durable())
    }

    /// Appends the events so far of a run carried on here, as its log in the store kept them, keeping them in
    /// this run's log again (waiting on the store rather than dropping any), durably before this returns.
    pub async fn replay(&self, events: Vec<Event>) {
        // Only the run's driver pushes: nothing else needs the writer meanwhile.
        let writer = lock(&self.log).take();
        for event in events {
            if let Some(writer) = &writer {
                writer.push(bytes::Bytes::from(event.to_frame())).await;
            }
            self.append(event);
        }
        if let Some(writer) = &writer {
            writer.durable().await;
        }
        *lock(&self.log) = writer;
    }

    /// Appends a pause (`approval_required`, `ask_user`) once the run's log, if kept, keeps it durably: a
    /// client that saw it may answer it on any replica, or after a restart.
    pub async fn push_pause(&self, event: Event) {
        let durable = {
            let buffer = lock(&self.buffer);
            if buffer.done {
                return;
            }
            self.log(&event)
        };
        if let Some(durable) = durable {
            durable.await;
        }
        self.append(event);
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

    /// Appends an event and wakes the subscribers. The run's end, where the run is kept in a log, waits
    /// for [`Run::end_log`].
    pub fn push(&self, event: Event) {
        {
            let mut buffer = lock(&self.buffer);
            if buffer.done {
                return;
            }
            buffer.done = event.is_terminal();
            // A pause pushed so is still asked to be kept durably (unless the log's queue is full); the
            // push does not wait for it.
            let _ = self.log(&event);
            if buffer.done && lock(&self.log).is_some() {
                buffer.held_end = Some(event);
                return;
            }
        }
        self.append(event);
    }

    /// Adds `event` to the buffer and wakes the subscribers; beyond the buffer's limit the oldest events go
    /// (the newest always stays, so that the subscribers that keep up read it).
    fn append(&self, event: Event) {
        let len = {
            let mut buffer = lock(&self.buffer);
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

    /// The run's number within its session.
    pub fn seq(&self) -> u64 {
        self.seq
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
    /// The number of the last run this follower read to its end.
    pub fn last_run(&self) -> u64 {
        self.last_seq
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(text: &str) -> Event {
        Event::MessageDelta { delta: text.into() }
    }

    #[tokio::test]
    async fn a_late_subscriber_replays_the_run_and_the_next_one_waits_for_a_new_run() {
        let sessions = Sessions::default();
        let session = sessions
            .create("t", "s", "m".into(), None, Counted::Here(None))
            .unwrap();
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
            .create("t", "s", "m".into(), None, Counted::Here(None))
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

    #[test]
    fn a_run_kept_by_the_version_before_is_reached_through_the_session_s_own_control_log() {
        let session = Sessions::default()
            .create("t", "s", "m".into(), None, Counted::Here(None))
            .unwrap();
        let mut before = serde_json::to_value(session.kept()).unwrap();
        // Nothing named yet is not written: the version before reads the document as it wrote it.
        assert!(before.get("runs").is_some() && before.get("control").is_none());
        before["busy"] = true.into();
        let adopted = Sessions::default().adopt("t", "s", serde_json::from_value(before).unwrap());
        assert_eq!(control_log("s", adopted.state().control), "s");

        session.state().control = Some(2);
        let kept: Kept =
            serde_json::from_slice(&serde_json::to_vec(&session.kept()).unwrap()).unwrap();
        assert_eq!(control_log("s", kept.control), "s/2");
    }

    #[tokio::test]
    async fn adopting_into_a_full_route_forgets_the_least_recently_used_sessions_nothing_uses() {
        let kept = Sessions::default()
            .create("t", "elsewhere", "m".into(), None, Counted::Here(None))
            .unwrap()
            .kept();
        let sessions = Sessions::default();
        let held = sessions.adopt("t", "held", kept.clone());
        // A finished run waiting for a late subscriber: nothing holds the session but that wait.
        let waiting = sessions.adopt("t", "waiting", kept.clone());
        let run = waiting.new_run(&mut waiting.state());
        run.push(Event::AgentStart {});
        run.push(Event::AgentAbort {
            reason: "user_cancelled".into(),
        });
        waiting.expire_unread(&run, FINISHED_RUN_TTL);
        drop(waiting);
        for n in 2..MAX_SESSIONS {
            sessions.adopt("t", &n.to_string(), kept.clone());
        }
        assert_eq!(sessions.active(), MAX_SESSIONS);

        let newest = sessions.adopt("t", "new", kept.clone());

        assert_eq!(sessions.active(), SESSIONS_AFTER_FORGETTING);
        assert!(Arc::ptr_eq(&sessions.get("t", "held").unwrap(), &held));
        assert!(sessions.get("t", "waiting").is_some());
        assert!(Arc::ptr_eq(&sessions.get("t", "new").unwrap(), &newest));
        // The least recently used went, the latest stayed.
        assert!(sessions.get("t", "2").is_none());
        assert!(sessions.get("t", &(MAX_SESSIONS - 1).to_string()).is_some());
    }

    #[test]
    fn an_idle_session_is_forgotten_unless_something_holds_it() {
        let sessions = Sessions::default();
        let held = sessions
            .create("t", "held", "m".into(), None, Counted::Here(None))
            .unwrap();
        let idle = sessions
            .create("t", "idle", "m".into(), None, Counted::Here(None))
            .unwrap();
        drop(idle);
        let busy = sessions
            .create("t", "busy", "m".into(), None, Counted::Here(None))
            .unwrap();
        busy.state().busy = true;
        drop(busy);
        std::thread::sleep(Duration::from_millis(2));

        forget_idle(&mut lock(&sessions.sessions), Duration::from_millis(1));

        assert!(Arc::ptr_eq(&sessions.get("t", "held").unwrap(), &held));
        assert!(sessions.get("t", "busy").is_some());
        assert!(sessions.get("t", "idle").is_none());
        assert!(!held.is_closed());
    }

    #[test]
    fn a_full_route_makes_room_for_a_new_session_only_where_a_shared_store_keeps_the_others() {
        let kept = Sessions::default()
            .create("t", "elsewhere", "m".into(), None, Counted::Here(None))
            .unwrap()
            .kept();
        let sessions = Sessions::default();
        for n in 0..MAX_SESSIONS {
            sessions.adopt("t", &n.to_string(), kept.clone());
        }
        let create = |counted| sessions.create("t", "new", "m".into(), None, counted);

        assert_eq!(create(Counted::Here(None)).err(), Some(CreateError::Full));
        assert!(create(Counted::InStore).is_ok());
        assert_eq!(sessions.active(), SESSIONS_AFTER_FORGETTING);
        assert!(
            sessions.get("t", "0").is_none(),
            "the least recently used went"
        );
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
        let session = sessions
            .create("t", "s", "m".into(), None, Counted::Here(None))
            .unwrap();
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
        let sessions = Sessions::new(4096);
        let session = sessions
            .create("t", "s", "m".into(), None, Counted::Here(None))
            .unwrap();
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
        let session = sessions
            .create("t", "s", "m".into(), None, Counted::Here(None))
            .unwrap();
        assert_eq!(
            sessions
                .create("t", "s", "m".into(), None, Counted::Here(None))
                .err(),
            Some(CreateError::Exists)
        );
        assert!(sessions.get("other", "s").is_none());
        let mut all = session.subscribe_all();
        session.close();
        assert!(all.next().await.is_none());
    }
}
