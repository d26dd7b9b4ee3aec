//! The hub of a route: runs one [`Turn`] against the route's [`Agent`] and hands the inbound a well-formed,
//! bounded stream of canonical [`Event`]s.
//!
//! The run is polled by whoever reads its events, in the client connection's task: an event crosses no task
//! boundary between the upstream's bytes and the client's. Events wait in a small bounded queue, so a slow
//! client slows the upstream read instead of filling memory. When the client goes away mid-run, the stream
//! hands the run to a task of its own, which sees the queue closed, drops the outbound future (that closes
//! the upstream request and sends the upstream's cancel) and saves what the run learned.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::Stream;
use serde_json::Value;
use tokio::sync::watch;

use crate::answers::{AnswerWords, Decision};
use crate::config::Quota;
use crate::error::{Error, Result};
use crate::gauges::Gauges;
use crate::history::{self, ReplyLog};
use crate::metrics::{Metrics, RunReport};
use crate::model::{
    Event, EventCounts, History, Interrupt, InterruptKind, Outcome, Resume, ResumeStatus, Role,
    Turn,
};
use crate::normalize::Normalizer;
use crate::route_state::RouteState;
use crate::store::{now_micros, DocumentKey, Key, Record, Store, UpstreamId, LEASE, LEASE_RENEWAL};
use crate::sync::lock;
use crate::telemetry::{store_span, RunSpan};
use crate::wake::NotingWaker;

/// How many events may wait for a slow client before the upstream read pauses.
const EVENT_BUFFER: usize = 16;

/// What the hub runs a turn against: an agent as one protocol's outbound face reaches it, or the built-in
/// echo agent. The outbounds implement it; the hub knows none of them.
pub trait Agent: Send + Sync {
    /// Whether the agent wants the whole conversation every turn or only what is new.
    fn history(&self) -> History;

    /// Runs one turn, emitting its events into `context`; returns when the agent is done.
    fn run<'a>(&'a self, turn: &'a Turn, context: &'a mut RunContext) -> BoxFuture<'a, Result<()>>;

    /// What identifies the conversation upstream in `record`, for the log line and span of a finished run.
    fn upstream_ids(&self, record: &Record) -> Vec<UpstreamId>;
}

/// Runs turns of one route.
pub struct Translator {
    route: String,
    /// `inbound->outbound`, as logs name the route's pair.
    pair: String,
    /// What the pair cannot carry, counted as the runs meet it.
    losses: Losses,
    agent: Arc<dyn Agent>,
    store: Arc<dyn Store>,
    timeout: Duration,
    /// How the route reads a person's free-text answer to an approval.
    answer_words: AnswerWords,
    /// `[routes.quota]` conversations: how many one tenant keeps in the store.
    conversations_per_tenant: Option<NonZeroUsize>,
    /// `[routes.quota]` streams: the runs of each tenant under way.
    streams: Arc<OpenStreams>,
    /// Where the route's runs are counted, and what ends them when a shutdown's grace is over.
    runs: Runs,
}

impl Translator {
    pub fn new(
        route: String,
        agent: Arc<dyn Agent>,
        store: Arc<dyn Store>,
        timeout: Duration,
    ) -> Self {
        Self {
            route,
            pair: String::new(),
            losses: Losses::default(),
            agent,
            store,
            timeout,
            answer_words: AnswerWords::default(),
            conversations_per_tenant: None,
            streams: Arc::default(),
            runs: Runs::unowned(),
        }
    }

    /// Holds each tenant to the route's `[routes.quota]` conversations and streams; the count of runs under
    /// way is `kept` across the route's reloads.
    pub fn with_quota(mut self, quota: Quota, kept: &RouteState) -> Self {
        self.conversations_per_tenant = quota.conversations;
        self.streams = kept.keep((), OpenStreams::default);
        let per_tenant = quota.streams.map_or(0, NonZeroUsize::get);
        self.streams.per_tenant.store(per_tenant, Ordering::Relaxed);
        self
    }

    /// Names the route's pair (`inbound->outbound`) in the line each finished run logs.
    pub fn with_pair(mut self, pair: String) -> Self {
        self.pair = pair;
        self
    }

    /// Counts what the route's pair cannot carry (`downgrades_total`) as its runs meet it.
    pub fn with_losses(mut self, losses: Losses) -> Self {
        self.losses = losses;
        self
    }

    /// Counts the route's runs among `runs`, and ends them when `runs` are ended.
    pub fn with_runs(mut self, runs: Runs) -> Self {
        self.runs = runs;
        self
    }

    /// Reads free-text answers to approvals with `words` (the built-in lists and the route's own).
    /// What `answer` to an approval decides, its words read by the route's lists; `None` when they say
    /// neither yes nor no, and the approval is asked again.
    pub fn approval_decision(&self, answer: &Resume) -> Option<bool> {
        match (answer.status, &answer.payload) {
            (ResumeStatus::Resolved, Some(Value::String(text))) => self.answer_words.approves(text),
            _ => Some(answer.approval().0),
        }
    }

    pub fn with_answer_words(mut self, words: AnswerWords) -> Self {
        self.answer_words = words;
        self
    }

    /// The turn's event stream: `RunStarted` first, exactly one terminal event last. The turn runs as the
    /// stream is read.
    pub fn start(self: &Arc<Self>, mut turn: Turn) -> EventStream {
        let events = EventQueue::default();
        let translator = Arc::clone(self);
        let in_flight = self.runs.gauges.start_run();
        let open = self.runs.metrics.run_opened(&self.route, &self.pair);
        // The trace of the request that asked for the run (its `traceparent`), while it is current.
        let parent = opentelemetry::Context::current();
        EventStream::new(events.clone(), async move {
            let _in_flight = (in_flight, open);
            // Lent, not moved, down the calls: each `async fn` would hold a moved argument twice.
            translator.run(&mut turn, events, &parent).await;
        })
    }

    /// The interrupt `interrupt_id` if the tenant's conversation waits on it: for an inbound whose answers
    /// take a shape that depends on what was asked.
    pub async fn pending_interrupt(
        &self,
        tenant: &str,
        conversation: &str,
        interrupt_id: &str,
    ) -> Option<Interrupt> {
        let record = self
            .store
            .load(&self.key(tenant, conversation))
            .await
            .ok()??;
        record
            .pending_interrupts
            .into_iter()
            .find(|interrupt| interrupt.id == interrupt_id)
    }

    fn key(&self, tenant: &str, conversation: &str) -> Key {
        Key {
            route: self.route.clone(),
            tenant: tenant.to_owned(),
            conversation: conversation.to_owned(),
        }
    }

    /// Runs the turn in its span under `parent`, then counts it in the metrics and logs one line that says
    /// what it did.
    async fn run(&self, turn: &mut Turn, events: EventQueue, parent: &opentelemetry::Context) {
        let started = Instant::now();
        let span = RunSpan::start(parent, &self.route, &self.pair, &turn.conversation);
        // Escaped and cut (a client chose it): one line, of bounded length.
        let conversation = crate::logging::clipped(&turn.conversation).to_string();
        let mut context = RunContext::new(turn, events);
        let upstream = span.within(self.run_turn(turn, &mut context)).await;
        let (outcome, error) = context.outcome();
        let duration = started.elapsed();
        let downgrades = self.losses.met(&context);
        let report = RunReport {
            outcome,
            error,
            duration,
            first_event: context.first_event.map(|at| at - started),
            answers: context.answers,
            events_in: &context.events_in,
            events_out: &context.events_out,
            downgrades: &downgrades,
        };
        self.runs
            .metrics
            .run_ended(&self.route, &self.pair, &report);
        span.end(outcome, error, &upstream);
        let upstream: Vec<String> = upstream
            .iter()
            .map(|id| format!("{}={}", id.field, id.value))
            .collect();
        let upstream = match upstream.is_empty() {
            true => "-".to_owned(),
            false => upstream.join(" "),
        };
        tracing::info!(
            route = %self.route,
            pair = %self.pair,
            conversation = conversation.as_str(),
            upstream = crate::logging::clipped(&upstream).to_string().as_str(),
            outcome,
            code = error
                .map(|error| crate::logging::clipped(error.code()).to_string())
                .as_deref(),
            duration_ms = duration.as_millis() as u64,
            events = context.events_out.total(),
            upstream_bytes = context.upstream_bytes,
            "run finished"
        );
    }

    /// Runs the turn through `context`; what identifies the conversation upstream, once the run reached
    /// it and its upstream keeps one.
    async fn run_turn(&self, turn: &mut Turn, context: &mut RunContext) -> Vec<UpstreamId> {
        let key = self.key(&turn.tenant, &turn.conversation);
        let _stream = match self.enter_stream(&turn.tenant).await {
            Ok(slot) => slot,
            Err(error) => {
                context.finish(Err(error)).await;
                return Vec::new();
            }
        };
        context.record = match self.load_or_admit(&key).await {
            Ok(record) => record,
            Err(error) => {
                context.finish(Err(error)).await;
                return Vec::new();
            }
        };
        if let Err(error) = check_answers(turn, &context.record) {
            // Refused before anything reached the upstream; the conversation stays as it was.
            context.finish(Err(error)).await;
            return Vec::new();
        }
        let waiting = context.record.pending_interrupts.clone();
        // Calls the client did not answer this turn lapse, as unanswered interrupts do.
        context.record.pending_calls.clear();
        take_interrupt_answers(turn, &mut context.record);
        if let Some(unclear) = read_approvals(&mut turn.resume, &waiting, &self.answer_words) {
            // Nothing reaches the upstream, and the stored conversation is left as it was: it waits on the
            // same interrupt, asked again. Boxed: rare, it would otherwise size every run's future.
            Box::pin(context.ask_again(unclear)).await;
            return Vec::new();
        }
        context.answers = turn.resume.len();
        context.reply = history::prepare(turn, &mut context.record, self.agent.history());
        context.unsent = self.losses.unsent_of(turn);
        let terminal = match self.run_outbound(turn, context).await {
            Some(result) => {
                if let Err(error) = &result {
                    tracing::warn!(
                        route = %self.route,
                        code = error.code(),
                        "run failed: {}",
                        crate::logging::clipped(error.message())
                    );
                }
                context.finish_but_terminal(result).await
            }
            // What the run learned so far (an upstream id, say) is still worth keeping.
            None => {
                tracing::debug!(route = %self.route, "client went away; upstream run dropped");
                None
            }
        };
        let mut record = std::mem::take(&mut context.record);
        std::mem::replace(&mut context.reply, ReplyLog::Nothing).finish(&mut record);
        let upstream = self.agent.upstream_ids(&record);
        // Kept before the client hears that the run ended: its next turn, sent at once to another replica
        // or to this proxy restarted after a crash, finds it.
        if let Err(error) = store_span("store save", self.store.save(&key, record)).await {
            tracing::error!(route = %self.route, "saving the conversation failed: {error}");
        }
        if let Some(terminal) = terminal {
            context.send_terminal(terminal).await;
        }
        upstream
    }

    /// The conversation's record, or an empty one for a new conversation if its tenant has room for one.
    async fn load_or_admit(&self, key: &Key) -> Result<Record> {
        if let Some(record) = store_span("store load", self.store.load(key)).await? {
            return Ok(record);
        }
        if let Some(quota) = self.conversations_per_tenant {
            store_span("store admit", self.store.admit(key, quota.get())).await?;
        }
        Ok(Record::default())
    }

    /// Runs the outbound within the route's timeout, unless the proxy ends its runs first (its shutdown's
    /// grace is over). `None` when the client went away first.
    async fn run_outbound(&self, turn: &Turn, context: &mut RunContext) -> Option<Result<()>> {
        let events = context.events.clone();
        let run = tokio::time::timeout(self.timeout, self.agent.run(turn, context));
        // In a fixed order (an unbiased select draws a random number at every poll, i.e. every event), the
        // run last: a client gone while the run also could go on is a client gone.
        tokio::select! {
            biased;
            () = events.closed() => None,
            () = self.runs.ended() => Some(Err(Error::shutting_down())),
            result = run => Some(result.unwrap_or_else(|_| Err(Error::upstream_timeout(format!(
                "upstream run took longer than the route's timeout of {:?}", self.timeout
            ))))),
        }
    }
}

/// What a route's pair cannot carry (docs/translation.md), as the hub counts it: the canonical events its
/// clients are not shown, and the client's tools its agent cannot be offered.
#[derive(Debug, Clone, Copy, Default)]
pub struct Losses {
    /// The [`Event::KINDS`] names the inbound has no form for, by family.
    pub unshown: &'static [&'static [&'static str]],
    /// The parts of a turn the outbound cannot send (see [`crate::face::Row::unsent`]).
    pub unsent: &'static [&'static str],
}

impl Losses {
    /// What of the turn, as it goes to the agent, is not sent, and how much: `client_tools` and `context`
    /// once, `state` once unless empty, `system_messages` per message.
    fn unsent_of(&self, turn: &Turn) -> Vec<(&'static str, u64)> {
        let system = turn
            .messages
            .iter()
            .filter(|message| matches!(message.role, Role::System | Role::Developer))
            .count() as u64;
        let state = turn.state.as_ref().is_some_and(|state| {
            !matches!(state, Value::Null) && state != &Value::Object(Default::default())
        });
        [
            ("client_tools", u64::from(!turn.tools.is_empty())),
            ("system_messages", system),
            ("context", u64::from(!turn.context.is_empty())),
            ("state", u64::from(state)),
        ]
        .into_iter()
        .filter(|(part, count)| *count > 0 && self.unsent.contains(part))
        .collect()
    }

    /// What of these a run met, and how often: its events not shown by kind, and the parts of its turn
    /// not sent.
    fn met(&self, context: &RunContext) -> Vec<(&'static str, u64)> {
        context
            .events_out
            .counted()
            .filter(|(kind, _)| self.unshown.iter().any(|family| family.contains(kind)))
            .chain(context.unsent.iter().copied())
            .collect()
    }
}

impl Translator {
    /// Counts the run among its tenant's under way, against `[routes.quota]` streams: in a store replicas
    /// share, as a slot the run renews while it lasts (the runs of a replica that dies stop counting once
    /// their slots lapse); else in this process.
    async fn enter_stream(&self, tenant: &str) -> Result<StreamSlot<'_>> {
        let quota = self.streams.per_tenant.load(Ordering::Relaxed);
        if quota == 0 || !self.store.shared() {
            return self.streams.enter(tenant, quota);
        }
        let key = DocumentKey {
            kind: STREAM_SLOT,
            route: self.route.clone(),
            tenant: tenant.to_owned(),
            id: crate::model::random_hex(),
        };
        if !self.store.enter_slot(&key, quota, lease_end()).await? {
            return Err(streams_quota_reached(quota));
        }
        let store = Arc::clone(&self.store);
        let renewal = tokio::spawn({
            let (store, key) = (Arc::clone(&store), key.clone());
            async move {
                loop {
                    tokio::time::sleep(LEASE_RENEWAL).await;
                    if let Err(error) = store.renew_slot(&key, lease_end()).await {
                        tracing::warn!("a run's place in its tenant's streams quota could not be renewed: {error}");
                    }
                }
            }
        });
        Ok(StreamSlot {
            streams: &self.streams,
            held: Some(Held::Shared {
                store,
                key,
                renewal,
            }),
        })
    }
}

/// The kind of a run's slot among its tenant's runs under way, in a store replicas share.
const STREAM_SLOT: &str = "stream";

/// When a slot taken or renewed now lapses, in µs since the epoch.
fn lease_end() -> u64 {
    now_micros().saturating_add(crate::store::micros(LEASE))
}

fn streams_quota_reached(quota: usize) -> Error {
    Error::too_many(
        format!(
            "this client's runs under way reached its quota ({quota}); try again when one ends"
        ),
        1,
    )
}

/// The runs under way per tenant in this process, held to `[routes.quota]` streams.
#[derive(Default)]
struct OpenStreams {
    /// How many runs one tenant may have under way (0: no quota). A reload may change it.
    per_tenant: AtomicUsize,
    open: Mutex<HashMap<String, usize>>,
}

impl OpenStreams {
    /// Counts one more run of `tenant` until the slot is dropped, unless the tenant has `quota` under way
    /// (0: no quota, nothing counted).
    fn enter(&self, tenant: &str, quota: usize) -> Result<StreamSlot<'_>> {
        if quota == 0 {
            return Ok(StreamSlot {
                streams: self,
                held: None,
            });
        }
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(tenant.to_owned()).or_default();
        if *count >= quota {
            return Err(streams_quota_reached(quota));
        }
        *count += 1;
        Ok(StreamSlot {
            streams: self,
            held: Some(Held::Here(tenant.to_owned())),
        })
    }
}

/// One run counted against its tenant's streams quota (nothing held when the route sets none).
struct StreamSlot<'a> {
    streams: &'a OpenStreams,
    held: Option<Held>,
}

/// Where a run is counted.
enum Held {
    /// In [`OpenStreams`], under its tenant.
    Here(String),
    /// In a store replicas share: its slot, and what renews it.
    Shared {
        store: Arc<dyn Store>,
        key: DocumentKey,
        renewal: tokio::task::JoinHandle<()>,
    },
}

impl Drop for StreamSlot<'_> {
    fn drop(&mut self) {
        match self.held.take() {
            None => {}
            Some(Held::Here(tenant)) => {
                let mut open = self
                    .streams
                    .open
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if let Some(count) = open.get_mut(&tenant) {
                    *count -= 1;
                    if *count == 0 {
                        open.remove(&tenant);
                    }
                }
            }
            Some(Held::Shared {
                store,
                key,
                renewal,
            }) => {
                renewal.abort();
                // Left at once where a runtime still runs; else it lapses with its lease.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move { store.leave_slot(&key).await });
                }
            }
        }
    }
}

/// The runs of every route, as the server holds them: counted in its [`Gauges`], and ended by its
/// [`RunsEnder`] at the end of a shutdown's grace. An ended run's last event is a `SHUTTING_DOWN` error, which
/// each inbound tells its client in its own protocol before its stream closes.
#[derive(Clone)]
pub struct Runs {
    gauges: Arc<Gauges>,
    /// Where each run's end is counted.
    metrics: Arc<Metrics>,
    ended: watch::Receiver<bool>,
}

/// Ends every run of a [`Runs`].
pub struct RunsEnder(watch::Sender<bool>);

impl Runs {
    /// The runs counted in `gauges` and `metrics`, and what ends them.
    pub fn new(gauges: Arc<Gauges>, metrics: Arc<Metrics>) -> (Runs, RunsEnder) {
        let (ender, ended) = watch::channel(false);
        let runs = Runs {
            gauges,
            metrics,
            ended,
        };
        (runs, RunsEnder(ender))
    }

    /// Runs nobody counts or ends early: a hub outside a server.
    pub fn unowned() -> Runs {
        let gauges = Arc::new(Gauges::default());
        Runs::new(Arc::clone(&gauges), Metrics::new(gauges)).0
    }

    /// Where the runs are counted.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Resolves once the runs are ended; never, for runs nobody can end.
    async fn ended(&self) {
        let mut ended = self.ended.clone();
        if ended.wait_for(|ended| *ended).await.is_err() {
            std::future::pending().await
        }
    }
}

impl RunsEnder {
    /// Ends every run going now, and every run started from now on.
    pub fn end_all(&self) {
        self.0.send_replace(true);
    }
}

/// A client that sends only what is new answers only what the conversation waits on: an answer to an
/// interrupt or a tool call it was never asked, or answered already, is the client's mistake and never
/// reaches the upstream. A full history repeats earlier answers by design, so it is not checked here.
fn check_answers(turn: &Turn, record: &Record) -> Result<()> {
    if turn.history != History::Delta {
        return Ok(());
    }
    let is_pending_interrupt = |id: &str| record.pending_interrupts.iter().any(|i| i.id == id);
    if let Some(resume) = turn
        .resume
        .iter()
        .find(|r| !is_pending_interrupt(&r.interrupt_id))
    {
        return Err(Error::bad_request(format!(
            "interrupt `{}` is not pending in this conversation",
            resume.interrupt_id
        )));
    }
    let unknown_call = turn
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.tool_call_id.as_deref().unwrap_or_default())
        .find(|id| !record.pending_calls.iter().any(|c| c == id) && !is_pending_interrupt(id));
    match unknown_call {
        Some(id) => Err(Error::bad_request(format!(
            "tool call `{id}` is not waiting for a result in this conversation"
        ))),
        None => Ok(()),
    }
}

/// Tool messages that answer a pending interrupt are not tool results for the upstream: they become the
/// turn's `resume`. Interrupts left unanswered lapse: the client moved on. Either way the interrupt is then
/// closed, and the call that paused the client and its answer are dropped from this turn's history and every
/// later one (the client keeps resending them).
fn take_interrupt_answers(turn: &mut Turn, record: &mut Record) {
    let pending = std::mem::take(&mut record.pending_interrupts);
    let is_pending = |id: &str| pending.iter().any(|interrupt| interrupt.id == id);
    let explicit = turn.resume.len();
    for message in &turn.messages {
        match &message.tool_call_id {
            Some(call_id) if message.role == Role::Tool && is_pending(call_id) => {
                let payload = Some(answer_payload(&message.text()));
                match turn.resume.iter().position(|r| &r.interrupt_id == call_id) {
                    // The client's own resume entry wins over a tool message.
                    Some(index) if index < explicit => {}
                    // A call asked again was answered again: the later answer is the one meant.
                    Some(index) => turn.resume[index].payload = payload,
                    None => turn.resume.push(Resume {
                        interrupt_id: call_id.clone(),
                        status: ResumeStatus::Resolved,
                        payload,
                    }),
                }
            }
            _ => {}
        }
    }
    // A full history repeats answers given in earlier turns: an interrupt answered once stays answered.
    turn.resume.retain(|r| {
        is_pending(&r.interrupt_id) || !record.closed_interrupts.contains(&r.interrupt_id)
    });
    for interrupt in pending {
        if !record.closed_interrupts.contains(&interrupt.id) {
            record.closed_interrupts.push(interrupt.id);
        }
    }
    if record.closed_interrupts.is_empty() {
        return;
    }
    let is_closed = |id: &str| record.closed_interrupts.iter().any(|closed| closed == id);
    turn.messages
        .retain(|m| !(m.role == Role::Tool && m.tool_call_id.as_deref().is_some_and(is_closed)));
    for message in &mut turn.messages {
        message.tool_calls.retain(|call| !is_closed(&call.id));
    }
    turn.messages.retain(|m| {
        !(m.role == Role::Assistant && m.content.is_empty() && m.tool_calls.is_empty())
    });
}

/// Turns each free-text answer to an approval into the decision it states (`{"approved": …}`, the text kept
/// as the `reason` of a rejection), read by the route's words. The first approval whose answer is unclear is
/// returned, worded to say what is expected: it is asked again instead of being guessed.
fn read_approvals(
    resume: &mut [Resume],
    waiting: &[Interrupt],
    words: &AnswerWords,
) -> Option<Interrupt> {
    for answer in resume {
        let (ResumeStatus::Resolved, Some(Value::String(text))) = (answer.status, &answer.payload)
        else {
            continue;
        };
        let Some(asked) = waiting
            .iter()
            .find(|interrupt| interrupt.id == answer.interrupt_id)
            .filter(|interrupt| matches!(interrupt.kind, InterruptKind::Approval { .. }))
        else {
            continue;
        };
        let decision = match words.read(text) {
            Decision::Approve => serde_json::json!({"approved": true}),
            Decision::Reject => serde_json::json!({"approved": false, "reason": text}),
            Decision::Unclear => return Some(asked_again(asked, text)),
        };
        answer.payload = Some(decision);
    }
    None
}

/// The approval `asked`, its prompt saying that `answer` was not understood and what is expected.
fn asked_again(asked: &Interrupt, answer: &str) -> Interrupt {
    /// How much of the answer the question quotes back.
    const QUOTED: usize = 80;
    let mut quoted: String = answer.chars().take(QUOTED).collect();
    if quoted.len() < answer.len() {
        quoted.push('…');
    }
    let mut kind = asked.kind.clone();
    if let InterruptKind::Approval { hint, .. } = &mut kind {
        *hint = Some(format!(
            "I could not tell whether \"{quoted}\" means yes or no. {} Answer yes or no.",
            asked.kind.prompt().trim_end_matches(" Answer yes or no.")
        ));
    }
    Interrupt {
        id: asked.id.clone(),
        kind,
    }
}

/// A tool answer is JSON when it parses as JSON, otherwise the text itself.
fn answer_payload(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// What an outbound gets while it runs a turn: the conversation record to read and update, and the way to
/// emit events.
pub struct RunContext {
    pub record: Record,
    /// The names of the tools the client executes itself: their calls wait for the client's answer.
    client_tools: Vec<String>,
    reply: ReplyLog,
    normalizer: Normalizer,
    events: EventQueue,
    ready: Vec<Event>,
    /// The run's terminal event, held back until the run's record is kept ([`RunContext::finish`]).
    terminal: Option<Event>,
    /// The events the outbound emitted, and those that reached the inbound.
    events_in: EventCounts,
    events_out: EventCounts,
    /// When the outbound emitted its first event.
    first_event: Option<Instant>,
    /// The bytes of the agent's answers read (their bodies' bytes, as they came).
    upstream_bytes: u64,
    /// The parts of the turn the agent could not be sent ([`Losses::unsent_of`]).
    unsent: Vec<(&'static str, u64)>,
    /// The interrupt answers the run carried to its agent.
    answers: usize,
    /// How the run ended, once its terminal event reached the inbound: the outcome, and the error it failed
    /// with.
    ended: Option<(&'static str, Option<Error>)>,
}

impl RunContext {
    fn new(turn: &Turn, events: EventQueue) -> Self {
        Self {
            record: Record::default(),
            client_tools: turn.tools.iter().map(|tool| tool.name.clone()).collect(),
            reply: ReplyLog::Nothing,
            normalizer: Normalizer::new(),
            events,
            ready: Vec::new(),
            terminal: None,
            events_in: EventCounts::default(),
            events_out: EventCounts::default(),
            first_event: None,
            upstream_bytes: 0,
            unsent: Vec::new(),
            answers: 0,
            ended: None,
        }
    }

    /// How the run ended, as its log line and metrics name it: `completed`, `paused`, `failed` (with the
    /// error's code) or `cancelled` (a client that went away included).
    fn outcome(&self) -> (&'static str, Option<&Error>) {
        match &self.ended {
            Some((outcome, error)) => (outcome, error.as_ref()),
            None => ("cancelled", None),
        }
    }

    /// Hands the inbound the run's terminal event, noting how the run ended.
    async fn send_terminal(&mut self, terminal: Event) {
        let ended = match &terminal {
            Event::RunFinished { outcome, .. } => match outcome {
                Outcome::Completed => ("completed", None),
                Outcome::Interrupted => ("paused", None),
                Outcome::Cancelled => ("cancelled", None),
            },
            Event::RunError(error) => ("failed", Some(error.clone())),
            _ => ("completed", None),
        };
        let kind = terminal.kind();
        // The client may already be gone; there is nobody left to tell.
        if self.events.send(terminal).await {
            self.events_out.count_kind(kind);
            self.ended = Some(ended);
        }
    }

    /// Counts `bytes` more of the agent's answer read.
    pub fn read_from_upstream(&mut self, bytes: u64) {
        self.upstream_bytes += bytes;
    }

    /// Emits one event toward the client. Fails with a cancelled error once the client went away, so an
    /// outbound can stop with `?`. Not an `async fn` (nor is [`Self::pass`]): the event is taken at once,
    /// and the future, in every outbound's while it waits, holds no copy of it.
    pub fn emit(&mut self, event: Event) -> impl Future<Output = Result<()>> + Send + '_ {
        self.events_in.count(&event);
        self.first_event.get_or_insert_with(Instant::now);
        self.pass(event)
    }

    /// Passes an event toward the client: the outbound's, or one of the hub's own (not counted as the
    /// agent's).
    fn pass(&mut self, event: Event) -> impl Future<Output = Result<()>> + Send + '_ {
        self.normalizer.push(event, &mut self.ready);
        self.send_ready()
    }

    /// A run of the hub's own that asks `interrupt` again and pauses.
    async fn ask_again(&mut self, interrupt: Interrupt) {
        for event in [
            Event::RunStarted,
            Event::Interrupt(interrupt),
            Event::RunFinished {
                outcome: Outcome::Interrupted,
                usage: None,
            },
        ] {
            if self.pass(event).await.is_err() {
                return;
            }
        }
        self.finish(Ok(())).await;
    }

    async fn finish(&mut self, result: Result<()>) {
        if let Some(terminal) = self.finish_but_terminal(result).await {
            self.send_terminal(terminal).await;
        }
    }

    /// Ends the run and sends every event but the terminal one, which is returned (already counted in the
    /// record): the caller keeps the record before the client hears that the run ended.
    async fn finish_but_terminal(&mut self, result: Result<()>) -> Option<Event> {
        self.normalizer.finish(result, &mut self.ready);
        self.send_ready().await.ok()?;
        self.terminal.take()
    }

    /// What `event` changes in the conversation's record.
    fn observe(&mut self, event: &Event) {
        match event {
            Event::Interrupt(interrupt) => {
                self.record.pending_interrupts.push(interrupt.clone());
            }
            Event::ToolCallStart { call_id, name, .. } if self.client_tools.contains(name) => {
                self.record.pending_calls.push(call_id.clone());
            }
            Event::ToolResult { call_id, .. } => {
                self.record
                    .pending_calls
                    .retain(|pending| pending != call_id);
            }
            _ => {}
        }
        self.reply.observe(event, &mut self.record);
    }

    async fn send_ready(&mut self) -> Result<()> {
        let mut ready = std::mem::take(&mut self.ready);
        for event in ready.drain(..) {
            self.observe(&event);
            if matches!(event, Event::RunFinished { .. } | Event::RunError(_)) {
                self.terminal = Some(event);
                continue;
            }
            let kind = event.kind();
            if !self.events.send(event).await {
                return Err(Error::cancelled("the client went away"));
            }
            self.events_out.count_kind(kind);
        }
        // Keep the allocation for the next event.
        self.ready = ready;
        Ok(())
    }
}

/// The events of one run, in order, ending after the terminal event. Reading them drives the run.
pub struct EventStream {
    /// The events the run emitted that were not read yet.
    events: EventQueue,
    /// The run, until it ended.
    run: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// The run is polled through it, to tell whether it was woken since it last waited.
    wakes: NotingWaker,
    /// The run waits for something that wakes it (not for room in the queue, which wakes nothing).
    run_waits: bool,
}

impl EventStream {
    fn new(events: EventQueue, run: impl Future<Output = ()> + Send + 'static) -> Self {
        Self {
            events,
            run: Some(Box::pin(run)),
            wakes: NotingWaker::default(),
            run_waits: false,
        }
    }
}

impl Stream for EventStream {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        if let Some(event) = self.events.take() {
            return Poll::Ready(Some(event));
        }
        let this = &mut *self;
        let Some(run) = &mut this.run else {
            return Poll::Ready(None);
        };
        // Not woken since it waited, it would only wait again: hyper asks once more after every frame.
        if this.run_waits && !this.wakes.woken(cx) {
            return Poll::Pending;
        }
        // The queue is empty, so the run can go on. Everything else it awaits registers the waker it is polled
        // with, but the queue's closing, which only comes once this stream is dropped.
        match this.wakes.poll_noting(cx, |cx| run.as_mut().poll(cx)) {
            Poll::Ready(()) => this.run = None,
            // With the queue full it may wait for room, which no waker tells.
            Poll::Pending => this.run_waits = !this.events.is_full(),
        }
        match self.events.take() {
            Some(event) => Poll::Ready(Some(event)),
            None if self.run.is_none() => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

impl Drop for EventStream {
    /// A reader that leaves mid-run hands the run to a task of its own: closing the queue tells it the client
    /// is gone, and it still cancels the upstream and saves the conversation.
    fn drop(&mut self) {
        let Some(run) = self.run.take() else { return };
        self.events.close();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(run)),
            Err(_) => tracing::debug!("a run left outside a runtime is dropped unfinished"),
        }
    }
}

/// The queue between a run and its [`EventStream`]: at most [`EVENT_BUFFER`] events wait in it.
///
/// It wakes no task, unlike a channel. The run is only ever polled by the stream that reads the queue (in
/// that reader's task, so a wake-up would only poll the same task once more for nothing), or, once the
/// stream is gone, by a task of its own after the queue was closed. So a send that finds the queue full
/// waits without a waker: the stream polls the run again when it has emptied the queue, even though the run
/// was not woken ([`EventQueue::is_full`]). And the queue's closing happens before the run's own task first
/// polls it.
#[derive(Clone, Default)]
struct EventQueue(Arc<Mutex<QueueState>>);

#[derive(Default)]
struct QueueState {
    events: VecDeque<Event>,
    closed: bool,
}

impl QueueState {
    fn is_full(&self) -> bool {
        self.events.len() >= EVENT_BUFFER
    }
}

impl EventQueue {
    /// Queues `event` once there is room: whether it was queued (not, once the reader is gone).
    async fn send(&self, event: Event) -> bool {
        let mut event = Some(event);
        std::future::poll_fn(|_| {
            let mut queue = lock(&self.0);
            if queue.closed {
                return Poll::Ready(false);
            }
            if queue.is_full() {
                return Poll::Pending;
            }
            if let Some(event) = event.take() {
                queue.events.push_back(event);
            }
            Poll::Ready(true)
        })
        .await
    }

    /// Resolves once the reader is gone, without a waker (see the type's doc).
    async fn closed(&self) {
        std::future::poll_fn(|_| match lock(&self.0).closed {
            true => Poll::Ready(()),
            false => Poll::Pending,
        })
        .await
    }

    /// A send would wait (see the type's doc): the stream polls the run again however it was woken.
    fn is_full(&self) -> bool {
        lock(&self.0).is_full()
    }

    /// The oldest event waiting.
    fn take(&self) -> Option<Event> {
        lock(&self.0).events.pop_front()
    }

    /// Ends the queue: what waits in it is dropped, and every later send fails.
    fn close(&self) {
        let mut queue = lock(&self.0);
        queue.closed = true;
        queue.events.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{InterruptKind, Message};
    use std::pin::pin;

    fn numbered(n: usize) -> Event {
        Event::TextDelta {
            message_id: "m".into(),
            delta: n.to_string(),
        }
    }

    #[test]
    fn the_event_queue_holds_a_bounded_number_and_fails_every_send_once_closed() {
        let queue = EventQueue::default();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for n in 0..EVENT_BUFFER {
            assert_eq!(
                pin!(queue.send(numbered(n))).poll(&mut cx),
                Poll::Ready(true)
            );
        }
        let mut full = pin!(queue.send(numbered(EVENT_BUFFER)));
        assert!(
            full.as_mut().poll(&mut cx).is_pending(),
            "the queue is full"
        );
        assert!(queue.take().is_some());
        assert_eq!(full.poll(&mut cx), Poll::Ready(true));

        let mut closed = pin!(queue.closed());
        assert!(closed.as_mut().poll(&mut cx).is_pending());
        queue.close();
        assert!(queue.take().is_none(), "what waited is dropped");
        assert!(closed.poll(&mut cx).is_ready());
        assert_eq!(
            pin!(queue.send(numbered(0))).poll(&mut cx),
            Poll::Ready(false)
        );
    }

    /// A stream over `run`, which emits into `events`.
    fn stream_of(
        events: &EventQueue,
        run: impl Future<Output = ()> + Send + 'static,
    ) -> EventStream {
        EventStream::new(events.clone(), run)
    }

    #[test]
    fn a_run_emitting_more_than_the_queue_holds_at_once_is_read_whole_without_a_wake_up() {
        let events = EventQueue::default();
        let emitter = events.clone();
        let mut stream = stream_of(&events, async move {
            for n in 0..3 * EVENT_BUFFER + 1 {
                assert!(emitter.send(numbered(n)).await);
            }
        });
        // A waker that does nothing: the stream must not need one to go on.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for n in 0..3 * EVENT_BUFFER + 1 {
            assert_eq!(
                Pin::new(&mut stream).poll_next(&mut cx),
                Poll::Ready(Some(numbered(n)))
            );
        }
        assert_eq!(Pin::new(&mut stream).poll_next(&mut cx), Poll::Ready(None));
    }

    #[test]
    fn a_waiting_run_is_polled_again_only_once_woken() {
        let events = EventQueue::default();
        let emitter = events.clone();
        let polls = Arc::new(AtomicUsize::new(0));
        let (waiting, woken) = (Arc::clone(&polls), Arc::new(Mutex::new(None)));
        let kept = Arc::clone(&woken);
        let mut stream = stream_of(&events, async move {
            // Waits on its first poll, and is done on the next: then emits one event and ends.
            std::future::poll_fn(|cx| match waiting.fetch_add(1, Ordering::SeqCst) {
                0 => {
                    *lock(&kept) = Some(cx.waker().clone());
                    Poll::Pending
                }
                _ => Poll::Ready(()),
            })
            .await;
            assert!(emitter.send(numbered(0)).await);
        });
        let (task, wakes) = crate::wake::WakeCount::waker();
        let mut cx = Context::from_waker(&task);
        for _ in 0..3 {
            assert_eq!(Pin::new(&mut stream).poll_next(&mut cx), Poll::Pending);
        }
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "not woken: not polled again"
        );

        lock(&woken).take().expect("the run kept its waker").wake();
        assert_eq!(wakes.get(), 1, "the wake reached the task");
        assert_eq!(
            Pin::new(&mut stream).poll_next(&mut cx),
            Poll::Ready(Some(numbered(0)))
        );
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert_eq!(Pin::new(&mut stream).poll_next(&mut cx), Poll::Ready(None));
    }

    #[tokio::test]
    async fn a_stream_dropped_mid_run_hands_the_run_a_task_where_its_sends_fail() {
        let events = EventQueue::default();
        let emitter = events.clone();
        let (report, sent) = tokio::sync::oneshot::channel();
        let mut stream = stream_of(&events, async move {
            let mut n = 0;
            while emitter.send(numbered(n)).await {
                n += 1;
                tokio::task::yield_now().await;
            }
            let _ = report.send(n);
        });
        let first = tokio::time::timeout(
            Duration::from_secs(5),
            futures_util::StreamExt::next(&mut stream),
        );
        assert_eq!(
            first.await.expect("the first event came"),
            Some(numbered(0))
        );
        drop(stream);

        let sent = tokio::time::timeout(Duration::from_secs(5), sent)
            .await
            .expect("the run ended in its own task")
            .unwrap();
        assert!(
            sent < 2 * EVENT_BUFFER,
            "the run stopped once its reader was gone ({sent} sent)"
        );
    }

    fn question(id: &str) -> Interrupt {
        Interrupt {
            id: id.into(),
            kind: InterruptKind::Question {
                text: "Which city?".into(),
                options: vec![],
            },
        }
    }

    fn answer(call_id: &str, text: &str) -> Message {
        let mut message = Message::text_message(format!("answer-{call_id}"), Role::Tool, text);
        message.tool_call_id = Some(call_id.into());
        message
    }

    #[test]
    fn a_tool_message_answering_a_pending_interrupt_becomes_its_resume() {
        let mut record = Record {
            pending_interrupts: vec![question("int_1")],
            ..Record::default()
        };
        let mut turn = Turn {
            messages: vec![answer("int_1", "Paris")],
            ..Turn::default()
        };

        take_interrupt_answers(&mut turn, &mut record);

        assert_eq!(turn.resume.len(), 1);
        assert_eq!(turn.resume[0].payload, Some(Value::String("Paris".into())));
        assert!(
            turn.messages.is_empty(),
            "the answer is not also a tool result"
        );
        assert_eq!(record.closed_interrupts, ["int_1"]);
    }

    #[test]
    fn an_approval_asked_again_takes_the_later_answer_of_a_full_history() {
        let approval = Interrupt {
            id: "int_1".into(),
            kind: InterruptKind::Approval {
                tool: "delete_temp_files".into(),
                args: serde_json::json!({"path": "/tmp"}),
                hint: None,
            },
        };
        let mut record = Record {
            pending_interrupts: vec![approval.clone()],
            ..Record::default()
        };
        let mut turn = Turn {
            messages: vec![
                answer("int_1", "maybe later"),
                answer("int_1", "yes, do it"),
            ],
            ..Turn::default()
        };
        take_interrupt_answers(&mut turn, &mut record);
        assert_eq!(turn.resume.len(), 1);
        assert_eq!(
            turn.resume[0].payload,
            Some(Value::String("yes, do it".into()))
        );

        let words = AnswerWords::default();
        assert_eq!(
            read_approvals(&mut turn.resume, std::slice::from_ref(&approval), &words),
            None
        );
        assert_eq!(
            turn.resume[0].payload,
            Some(serde_json::json!({"approved": true}))
        );

        let mut unclear = vec![Resume {
            interrupt_id: "int_1".into(),
            status: ResumeStatus::Resolved,
            payload: Some(Value::String("maybe later".into())),
        }];
        let again = read_approvals(&mut unclear, &[approval], &words).expect("asked again");
        assert_eq!(again.id, "int_1");
        assert_eq!(
            again.kind.prompt(),
            "I could not tell whether \"maybe later\" means yes or no. Approve `delete_temp_files` \
             with {\"path\":\"/tmp\"}? Answer yes or no."
        );
    }

    #[test]
    fn a_delta_client_may_answer_only_what_the_conversation_waits_on() {
        let record = Record {
            pending_interrupts: vec![question("int_1")],
            pending_calls: vec!["call_1".into()],
            ..Record::default()
        };
        let delta = |messages: Vec<Message>, resume: Vec<Resume>| Turn {
            messages,
            resume,
            history: History::Delta,
            ..Turn::default()
        };
        let resume = |id: &str| Resume {
            interrupt_id: id.into(),
            status: ResumeStatus::Resolved,
            payload: None,
        };
        assert!(check_answers(
            &delta(vec![answer("call_1", "ok")], vec![resume("int_1")]),
            &record
        )
        .is_ok());
        let unknown_call = check_answers(&delta(vec![answer("call_9", "ok")], vec![]), &record);
        assert!(unknown_call.unwrap_err().message().contains("call_9"));
        let unknown_interrupt = check_answers(&delta(vec![], vec![resume("int_9")]), &record);
        assert!(unknown_interrupt.unwrap_err().is_client());

        let full = Turn {
            messages: vec![answer("call_9", "ok")],
            ..Turn::default()
        };
        assert!(
            check_answers(&full, &record).is_ok(),
            "a full history repeats old answers"
        );
    }

    #[test]
    fn answers_repeated_by_a_later_full_history_are_dropped() {
        let mut record = Record {
            closed_interrupts: vec!["int_1".into()],
            ..Record::default()
        };
        let repeated = Resume {
            interrupt_id: "int_1".into(),
            status: ResumeStatus::Resolved,
            payload: None,
        };
        let unknown = Resume {
            interrupt_id: "int_x".into(),
            status: ResumeStatus::Resolved,
            payload: None,
        };
        let mut turn = Turn {
            messages: vec![answer("int_1", "Paris")],
            resume: vec![repeated, unknown.clone()],
            ..Turn::default()
        };

        take_interrupt_answers(&mut turn, &mut record);

        assert_eq!(
            turn.resume,
            [unknown],
            "only answers to interrupts not closed yet go upstream"
        );
        assert!(turn.messages.is_empty());
    }
}
