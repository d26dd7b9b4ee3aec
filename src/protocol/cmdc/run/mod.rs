//! One CMDC run (`prompt_received … agent_end|agent_abort`) as a sequence of canonical turns.
//!
//! A prompt starts the first turn. A canonical interrupt does not end the CMDC run: the run pauses
//! (`waiting_approval` / `waiting_input`), and the answer (`approve`, `reject`, `respond`) starts the next
//! turn with `resume`, whose events continue the same run (`approval_resolved` first for approvals). Calls of
//! the session's callback tools are POSTed to their `callbackUrl`, and the result continues the run as a
//! tool message. The run ends at a canonical terminal that is not a pause (`specs/cmdc.md` §4.3).

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::StreamExt;
use http::Uri;
use http_body_util::{BodyExt, Limited};
use serde_json::{json, Value};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::sessions::{
    self, control_log, paused_claim, run_id, Control, Counted, CreateError, Kept, Pending, Queued,
    RegisteredTool, Session, Sessions, Status, CONTROL_LOG, FINISHED_RUN_TTL, RUN_CLAIM, RUN_LOG,
    SESSION_DOCUMENT,
};
use super::wire::{self, CallbackAnswer, CallbackTool, Event as Cmdc, ToolCallback};
use crate::egress::Egress;
use crate::face::EventEncoder;
use crate::model::{
    new_id, Event, GenerationOptions, History, InterruptKind, Message, Resume, ResumeStatus, Role,
    Tool, Turn,
};
use crate::store::{Admission, Documents, Followed, LEASE};
use crate::translate::Translator;

mod encode;

pub use encode::Encoder;
use encode::{interrupt_event, Call};

/// How long a request waits for the replica that claimed a paused run to carry it on, and how often it
/// looks.
const CARRIED_ON_WAIT: Duration = Duration::from_secs(2);
const CARRIED_ON_POLL: Duration = Duration::from_millis(20);
/// A callback tool's default time to answer.
const CALLBACK_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a session that went idle waits for what its control log brought before it ended.
const CONTROL_DRAIN: Duration = Duration::from_secs(5);
/// The largest callback answer read.
const CALLBACK_BODY_LIMIT: usize = 1024 * 1024;
/// `tool_execution_end.result` is cut beyond this many bytes.
const RESULT_LIMIT: usize = 4096;

/// What every run of a route shares.
pub struct Runner {
    pub sessions: Arc<Sessions>,
    pub translator: Arc<Translator>,
    /// The client for callback tools (the URL is each tool's own, checked against the route's policy).
    pub callbacks: Egress,
    /// Where sessions, their runs' events and what other replicas ask of them are kept.
    pub documents: Documents,
    /// `[routes.quota]` sessions: how many one tenant may keep.
    pub per_tenant: Option<NonZeroUsize>,
}

/// Why a session was not opened.
pub enum Opened {
    Refused(CreateError),
    /// The store could not count or keep it.
    Store(crate::error::Error),
}

impl Runner {
    /// Makes the tenant's new session and keeps it. Its quota is counted in the store where one keeps
    /// sessions (those of other replicas, or of this one before a restart, count too), else in this
    /// replica's memory.
    pub async fn open(
        &self,
        tenant: &str,
        id: &str,
        model: String,
        system_prompt: Option<String>,
    ) -> Result<Arc<Session>, Opened> {
        let counted = if self.documents.kept() {
            Counted::InStore
        } else {
            Counted::Here(self.per_tenant)
        };
        let session = self
            .sessions
            .create(tenant, id, model, system_prompt, counted)
            .map_err(Opened::Refused)?;
        if let Err(why) = self.count_and_keep(&session).await {
            self.sessions.remove(tenant, id);
            session.close();
            return Err(why);
        }
        Ok(session)
    }

    /// Counts the new session against its tenant's quota where the store keeps sessions, and keeps it.
    async fn count_and_keep(&self, session: &Session) -> Result<(), Opened> {
        let (tenant, id) = (&session.tenant, &session.id);
        if let Some(quota) = self.per_tenant.filter(|_| self.documents.kept()) {
            let admitted = self
                .documents
                .admit(SESSION_DOCUMENT, tenant, id, quota.get())
                .await;
            match admitted {
                Ok(Admission::Admitted(_)) => {}
                Ok(Admission::Refused(_)) => return Err(Opened::Refused(CreateError::Full)),
                Err(error) => return Err(Opened::Store(error)),
            }
        }
        // One the store did not keep would be this replica's alone, and would stop counting against its
        // tenant's quota once its admission lapsed.
        self.keep_as(session, &session.kept())
            .await
            .map_err(Opened::Store)
    }

    /// Accepts a prompt: runs it now, or queues it behind the running one. Returns whether it was queued.
    /// A run started is kept in the store as going on (its log's lease taken, the session's control log
    /// followed) before this returns: the client's next request may reach another replica.
    pub async fn prompt(
        self: &Arc<Self>,
        session: &Arc<Session>,
        text: String,
        api_key: &str,
    ) -> bool {
        self.sessions.count_prompt(api_key);
        let queued = Queued {
            text,
            api_key: api_key.to_owned(),
        };
        let Some((run, runtime)) = Self::begin(session, queued.clone()) else {
            return true;
        };
        self.launch(session, run, runtime, Start::Prompt(queued))
            .await;
        false
    }

    /// Drives `run` from `start` (then the prompts queued behind it) on `runtime`, else on this one, and
    /// returns once the run is kept in the store as going on.
    async fn launch(
        self: &Arc<Self>,
        session: &Arc<Session>,
        run: Arc<sessions::Run>,
        runtime: Option<Handle>,
        start: Start,
    ) {
        // Spawned before anything is awaited: a client that leaves now does not leave the session busy.
        let (kept, started) = tokio::sync::oneshot::channel();
        let runner = Arc::clone(self);
        let session = Arc::clone(session);
        let drive = async move {
            let control = runner.take_control(&session).await;
            runner.start(&session, &run).await;
            let _ = kept.send(());
            runner.drive(session, run, start, control).await;
        };
        // The run continues the trace of the request that started it (a REST prompt's `traceparent`).
        let drive = opentelemetry::context::FutureExt::with_current_context(drive);
        match runtime {
            Some(runtime) => runtime.spawn(drive),
            None => tokio::spawn(drive),
        };
        let _ = started.await;
    }

    /// Runs `first`, then the prompts queued behind it until the queue is empty. Meanwhile, in a store
    /// replicas share, what other replicas' clients ask of the session reaches it through its control log.
    async fn drive(
        self: Arc<Self>,
        session: Arc<Session>,
        first: Arc<sessions::Run>,
        start: Start,
        mut control: Option<ControlGuard>,
    ) {
        let mut next = Some((first, start));
        while let Some((run, start)) = next.take() {
            self.run(&session, &run, start).await;
            // Ended (its lease let go) before the next run's log takes the same name.
            run.end_log().await;
            session.expire_unread(&run, FINISHED_RUN_TTL);
            let queued = match Self::next_prompt(&session, false) {
                Some(next) => Some(next),
                None => self.hand_back(&session, &mut control).await,
            };
            next = queued.map(|(run, prompt)| (run, Start::Prompt(prompt)));
            if let Some((run, _)) = &next {
                self.start(&session, run).await;
            }
        }
    }

    /// Carries on here the run a proxy that stopped left paused on its user (`kept` shows the pause): its
    /// events so far from its log, then the answers it waits for, as if it had paused here. In a store
    /// replicas share, the replica that claims it does.
    async fn carry_on_paused(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
        kept: &Kept,
    ) -> crate::error::Result<Carried> {
        let claim = paused_claim(id, kept.runs);
        if self.documents.shared()
            && !self
                .documents
                .claim(RUN_CLAIM, tenant, &claim, LEASE)
                .await?
        {
            return Ok(Carried::Elsewhere);
        }
        let (events, ended) = self.read_log(RUN_LOG, tenant, id).await?;
        if ended {
            // It ended (aborted, say) before its proxy kept the session idle.
            return Ok(Carried::Ended);
        }
        let handed = self.handed_to_the_dead(tenant, id, kept).await?;
        let session = self.sessions.adopt(tenant, id, kept.clone());
        let (answers, answered) = mpsc::unbounded_channel();
        let (run, runtime) = {
            let mut state = session.state();
            if state.busy {
                return Ok(Carried::Here);
            }
            state.busy = true;
            state.elsewhere = false;
            // Taken from now on, before the run is driven: its client may answer at once.
            state.answers = Some(answers);
            (session.run_again(&state), state.subscriber_runtime.clone())
        };
        for control in handed {
            if let Control::Answer(resume) = control {
                // Not pending (any more): an answer to an earlier question of the run.
                let _ = session.answer(resume);
            }
        }
        let asked = kept.pending.clone();
        let start = Start::Paused {
            events,
            asked,
            answered,
        };
        self.launch(&session, run, runtime, start).await;
        Ok(Carried::Here)
    }

    /// In a store replicas share, what other replicas handed the proxy that stopped through its control log:
    /// an answer to a question still pending is taken here. The rest it carried out, or was handed as it
    /// stopped (lost, as to any replica that dies). The log is ended first, so that what is handed to it
    /// from now on is refused (and handed here once this replica's control log is open), and read before
    /// this replica's log (which may take the same name) starts afresh.
    async fn handed_to_the_dead(
        &self,
        tenant: &str,
        id: &str,
        kept: &Kept,
    ) -> crate::error::Result<Vec<Control>> {
        if !self.documents.shared() {
            return Ok(Vec::new());
        }
        let control = control_log(id, kept.control);
        self.documents
            .end_log(CONTROL_LOG, tenant, &control)
            .await?;
        Ok(self.read_log(CONTROL_LOG, tenant, &control).await?.0)
    }

    /// What the log `kind`/`id` of `tenant` keeps, each entry as a `T` (one that does not read as a `T` is
    /// left out), and whether it ended.
    async fn read_log<T: serde::de::DeserializeOwned>(
        &self,
        kind: &'static str,
        tenant: &str,
        id: &str,
    ) -> crate::error::Result<(Vec<T>, bool)> {
        let mut events = Vec::new();
        let mut after = 0;
        while let Some(page) = self.documents.read_log(kind, tenant, id, after).await? {
            after += page.events.len() as u64;
            let decoded = page
                .events
                .iter()
                .map(|bytes| serde_json::from_slice(bytes));
            events.extend(decoded.filter_map(Result::ok));
            if page.ended.is_some() {
                return Ok((events, true));
            }
            if page.events.is_empty() {
                break;
            }
        }
        Ok((events, false))
    }

    /// Nothing queued after a run: keeps the session idle in the store (other replicas' clients now run
    /// their prompts themselves), ends its control log, and once what came through it before its end was
    /// carried out, goes idle here too. A prompt among it (its client was told it was queued) runs here
    /// instead, under a control log of its own.
    async fn hand_back(
        self: &Arc<Self>,
        session: &Arc<Session>,
        control: &mut Option<ControlGuard>,
    ) -> Option<(Arc<sessions::Run>, Queued)> {
        let idle = Kept {
            busy: false,
            ..session.kept()
        };
        let _ = self.keep_as(session, &idle).await;
        let Some(ending) = control.take() else {
            return Self::next_prompt(session, true);
        };
        ending.finish().await;
        let next = Self::next_prompt(session, true)?;
        *control = self.take_control(session).await;
        Some(next)
    }

    /// Keeps `run`'s events in its log in the store (its lease taken), then the session as running it.
    async fn start(&self, session: &Session, run: &sessions::Run) {
        if let Some(log) = self
            .documents
            .open_log(RUN_LOG, &session.tenant, &session.id)
            .await
        {
            run.keep_in(log);
        }
        self.keep(session).await;
    }

    /// The new run of a prompt, and where to drive it; `None` when it was queued behind the running one.
    fn begin(session: &Session, queued: Queued) -> Option<(Arc<sessions::Run>, Option<Handle>)> {
        let mut state = session.state();
        if state.busy {
            state.queue.push_back(queued);
            return None;
        }
        state.busy = true;
        state.status = Status::Working;
        let run = session.new_run(&mut state);
        Some((run, state.subscriber_runtime.clone()))
    }

    /// After a run: the next queued prompt and its run; when none waits, the session is idle (and with
    /// `let_go`, no longer busy here: a prompt runs at once).
    fn next_prompt(session: &Session, let_go: bool) -> Option<(Arc<sessions::Run>, Queued)> {
        let mut state = session.state();
        state.pending.clear();
        state.answers = None;
        if session.is_closed() {
            state.queue.clear();
        }
        let Some(queued) = state.queue.pop_front() else {
            state.busy &= !let_go;
            state.status = Status::Idle;
            return None;
        };
        state.status = Status::Working;
        Some((session.new_run(&mut state), queued))
    }

    /// Keeps the session in the store, where the store keeps documents (a deleted one no more); a failure
    /// is logged.
    pub async fn keep(&self, session: &Session) {
        let _ = self.keep_as(session, &session.kept()).await;
    }

    /// Keeps `kept` as the session in the store; a failure is logged, and returned.
    async fn keep_as(&self, session: &Session, kept: &Kept) -> crate::error::Result<()> {
        if !self.documents.kept() || session.is_closed() {
            return Ok(());
        }
        let saved = self
            .documents
            .save(SESSION_DOCUMENT, &session.tenant, &session.id, kept)
            .await;
        if let Err(error) = &saved {
            tracing::warn!(session = %session.id, "cmdc: the session could not be kept: {error}");
        }
        saved
    }

    /// The session as the store keeps it; a run it shows going on whose replica is gone (its lease lapsed)
    /// is over, and the session is kept so, unless it was paused on its user: that one is carried on
    /// ([`Runner::carry_on_paused`]). `None`: no such session (or it expired).
    pub async fn recall(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
    ) -> crate::error::Result<Option<Kept>> {
        let load = || self.documents.load::<Kept>(SESSION_DOCUMENT, tenant, id);
        let Some(mut kept) = load().await? else {
            return Ok(None);
        };
        let here = self
            .sessions
            .get(tenant, id)
            .is_some_and(|session| session.state().busy);
        // The replica driving the session holds its control log's lease for as long as it does.
        let control = control_log(id, kept.control);
        if kept.busy
            && !here
            && !self
                .documents
                .run_live(CONTROL_LOG, tenant, &control)
                .await?
        {
            // The run may have ended between the read and the look at its lease: its replica kept the
            // session idle before letting the lease go.
            match load().await? {
                Some(again) if !again.busy => return Ok(Some(again)),
                None => return Ok(None),
                Some(again) => kept = again,
            }
            if !kept.pending.is_empty() {
                match self.paused_run_carried_on(tenant, id, &kept).await? {
                    Recalled::Kept(kept) => return Ok(Some(*kept)),
                    Recalled::Gone => return Ok(None),
                    Recalled::Over => {}
                }
            }
            tracing::warn!(session = %id, "cmdc: the proxy running the session's run stopped; the run is over");
            kept.busy = false;
            kept.status = Status::Idle;
            kept.pending.clear();
            self.documents
                .save(SESSION_DOCUMENT, tenant, id, &kept)
                .await?;
        }
        Ok(Some(kept))
    }

    /// The session whose run, paused on its user, a proxy that stopped left: carried on here, or by the
    /// replica that claimed it, as the store shows it once that replica keeps it (what this one's clients
    /// ask is then handed there), or after that replica found the run over.
    async fn paused_run_carried_on(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
        kept: &Kept,
    ) -> crate::error::Result<Recalled> {
        match self.carry_on_paused(tenant, id, kept).await? {
            Carried::Here => return Ok(Some(kept.clone()).into()),
            Carried::Ended => return Ok(Recalled::Over),
            Carried::Elsewhere => {}
        }
        let deadline = tokio::time::Instant::now() + CARRIED_ON_WAIT;
        while tokio::time::Instant::now() < deadline {
            let again = self.documents.load::<Kept>(SESSION_DOCUMENT, tenant, id);
            let again = again.await?;
            // Gone, or idle: that replica found the run over, or it ended since.
            let Some(busy) = again.as_ref().filter(|again| again.busy) else {
                return Ok(again.into());
            };
            if busy.control == Some(kept.runs) && self.drives(tenant, id, kept.runs).await? {
                return Ok(again.into());
            }
            tokio::time::sleep(CARRIED_ON_POLL).await;
        }
        Err(crate::error::Error::store_unavailable(
            "another replica is taking over this session's paused run; try again",
        ))
    }

    /// Whether a replica drives the session's run `run`: it holds the lease of the run's control log and of
    /// the session's run log.
    pub async fn drives(&self, tenant: &str, id: &str, run: u64) -> crate::error::Result<bool> {
        let control = control_log(id, Some(run));
        Ok(self
            .documents
            .run_live(CONTROL_LOG, tenant, &control)
            .await?
            && self.documents.run_live(RUN_LOG, tenant, id).await?)
    }

    /// Whether this replica may start the session's next run. In a store replicas share, the one that
    /// claims it does: two that both found the session idle would otherwise both run it. A run going on
    /// here takes the prompt into its queue.
    pub async fn claim_next_run(&self, session: &Session) -> crate::error::Result<bool> {
        let next = {
            let state = session.state();
            if state.busy || !self.documents.shared() {
                return Ok(true);
            }
            run_id(&session.id, state.runs + 1)
        };
        self.documents
            .claim(RUN_CLAIM, &session.tenant, &next, LEASE)
            .await
    }

    /// Hands `control` to the replica running the session's run: whether it took it, which it does not once
    /// that run ended (its control log with it).
    pub async fn hand_over(
        &self,
        session: &Session,
        control: &Control,
    ) -> crate::error::Result<bool> {
        let bytes = Bytes::from(serde_json::to_vec(control).unwrap_or_default());
        let log = control_log(&session.id, session.state().control);
        self.documents
            .push_to_log(CONTROL_LOG, &session.tenant, &log, bytes)
            .await
    }

    /// In a store replicas share: starts a control log of the latest run's own and carries out what comes
    /// through it until the returned guard drops.
    async fn take_control(self: &Arc<Self>, session: &Arc<Session>) -> Option<ControlGuard> {
        if !self.documents.shared() {
            return None;
        }
        let tenant = &session.tenant;
        let id = {
            let mut state = session.state();
            state.control = Some(state.runs);
            control_log(&session.id, state.control)
        };
        let log = self.documents.open_log(CONTROL_LOG, tenant, &id).await?;
        let requests = self.documents.follow_log(CONTROL_LOG, tenant, &id, 0);
        let (runner, session) = (Arc::clone(self), Arc::clone(session));
        let task = tokio::spawn(async move {
            tokio::pin!(requests);
            while let Some(Followed::Event(_, bytes)) = requests.next().await {
                match serde_json::from_slice::<Control>(&bytes) {
                    Ok(control) => runner.carry_out(&session, control),
                    Err(error) => tracing::warn!("cmdc: an unreadable control request: {error}"),
                }
            }
        });
        Some(ControlGuard {
            log: Some(log),
            task,
        })
    }

    /// What another replica's client asked of the session, as if asked here.
    fn carry_out(&self, session: &Session, control: Control) {
        match control {
            Control::Prompt { text, api_key } => {
                // Handed over while a run goes on here: queued behind it. The run ended meanwhile (the
                // other replica saw it going on): queued all the same, and run once the control log ended.
                self.sessions.count_prompt(&api_key);
                session.state().queue.push_back(Queued { text, api_key });
            }
            Control::Answer(resume) => {
                if let Err(why) = session.answer(resume) {
                    tracing::debug!(session = %session.id, ?why, "cmdc: a handed-over answer was not taken");
                }
            }
            Control::Tool(kept) => session.state().register(kept.registered()),
            Control::Abort => {
                if let Some(run) = session.current_run() {
                    run.abort();
                }
            }
            Control::Close => {
                self.sessions.remove(&session.tenant, &session.id);
                session.close();
            }
        }
    }

    async fn run(&self, session: &Arc<Session>, run: &sessions::Run, start: Start) {
        let (mut next, api_key, mut answered) = match start {
            Start::Prompt(prompt) => {
                tracing::debug!(session = %session.id, model = %session.model, "CMDC run started");
                let (answers, answered) = mpsc::unbounded_channel();
                session.state().answers = Some(answers);
                run.push(Cmdc::PromptReceived {
                    text: prompt.text.clone(),
                });
                run.push(Cmdc::AgentStart {});
                let turn = self.first_turn(session, &prompt);
                (Next::Turn(Box::new(turn)), Some(prompt.api_key), answered)
            }
            Start::Paused {
                events,
                asked,
                answered,
            } => {
                tracing::info!(session = %session.id, "cmdc: a run paused on its user is carried on here; the proxy that ran it stopped");
                run.replay(events).await;
                (Next::Answers(asked), None, answered)
            }
        };
        let mut usage = wire::TokenUsage::default();
        let mut last_text = None;
        let end = loop {
            let turn = match next {
                Next::Turn(turn) => *turn,
                Next::Answers(asked) => {
                    match self
                        .wait_for_answers(session, run, &asked, &mut answered)
                        .await
                    {
                        Ok(resume) => {
                            session.state().status = Status::Working;
                            self.keep(session).await;
                            let tools = session.state().tools.clone();
                            self.turn(session, &tools, Vec::new(), resume)
                        }
                        Err(stop) => {
                            self.dismiss(session, &asked);
                            break stop;
                        }
                    }
                }
            };
            let tools: Vec<String> = turn.tools.iter().map(|t| t.name.clone()).collect();
            let mut encoder = Encoder::new(tools);
            let mut encoded = Vec::new();
            let mut events = self.translator.start(turn);
            let mut end = None;
            let mut stop = End::Closed;
            let mut pauses = Vec::new();
            while end.is_none() {
                let event = tokio::select! {
                    event = events.next() => event,
                    why = stopped(session, run) => {
                        stop = why;
                        break;
                    }
                };
                match event {
                    None => {
                        end = Some(End::Error("the run ended without a result".into()));
                    }
                    Some(Event::Interrupt(interrupt)) => {
                        let approval = matches!(interrupt.kind, InterruptKind::Approval { .. });
                        {
                            let mut state = session.state();
                            state.pending.push(Pending {
                                id: interrupt.id.clone(),
                                approval,
                            });
                            state.status = if approval {
                                Status::WaitingApproval
                            } else {
                                Status::WaitingInput
                            };
                        }
                        encoder.asked.push(Pending {
                            id: interrupt.id.clone(),
                            approval,
                        });
                        pauses.push(interrupt_event(&interrupt.id, interrupt.kind));
                    }
                    Some(event) => {
                        encoder.encode(event, &mut encoded);
                        encoded.drain(..).for_each(|cmdc| run.push(cmdc));
                        end = encoder.end.take();
                    }
                }
            }
            // The turn's record is saved when its stream ends: wait for that before the next turn.
            let Some(end) = end else {
                drop(events);
                break stop;
            };
            while events.next().await.is_some() {}
            // Any replica, and this one after a restart, may take the answer: the turn's record (the
            // upstream's side of the pause) and the session are kept before anyone is asked.
            if !pauses.is_empty() {
                self.keep(session).await;
                for pause in pauses {
                    run.push_pause(pause).await;
                }
            }
            sessions::add(&mut usage, encoder.usage);
            self.log_turn(session, &mut encoder);
            if encoder.last_text.is_some() {
                last_text = encoder.last_text.take();
            }
            next = match end {
                End::Interrupted if !encoder.asked.is_empty() => Next::Answers(encoder.asked),
                End::Completed | End::Interrupted if !encoder.client_calls.is_empty() => {
                    let calls = std::mem::take(&mut encoder.client_calls);
                    let results = match self.call_back(session, run, calls).await {
                        Ok(results) => results,
                        Err(stop) => break stop,
                    };
                    let tools = session.state().tools.clone();
                    Next::Turn(Box::new(self.turn(session, &tools, results, Vec::new())))
                }
                end => break end,
            };
        };
        // A run carried on from another proxy's pause meters no API key: its prompt's was not kept.
        if let Some(api_key) = api_key {
            self.sessions.add_usage(&api_key, usage);
        }
        let mut state = session.state();
        sessions::add(&mut state.usage, usage);
        let terminal = match end {
            End::Completed | End::Interrupted => {
                state.turns += 1;
                Cmdc::AgentEnd {
                    message_count: state.messages_logged,
                    last_message: last_text.map(|content| wire::LastMessage {
                        content: Some(content),
                        role: "assistant".into(),
                    }),
                    token_usage: Some(usage),
                }
            }
            End::Cancelled => Cmdc::AgentAbort {
                reason: "user_cancelled".into(),
            },
            End::Closed => Cmdc::AgentAbort {
                reason: "aborted".into(),
            },
            End::Error(reason) => {
                run.push(Cmdc::Error { reason });
                Cmdc::AgentAbort {
                    reason: "error".into(),
                }
            }
        };
        drop(state);
        run.push(terminal);
    }

    /// The turn a prompt starts: the session's system prompt (on its first run) and the prompt, both logged.
    fn first_turn(&self, session: &Session, prompt: &Queued) -> Turn {
        let mut state = session.state();
        let mut messages = Vec::new();
        if let Some(system) = state.system_prompt.take().filter(|s| !s.is_empty()) {
            state.log_message(log_message(Role::System, Some(&system)));
            messages.push(Message::text_message(new_id("msg"), Role::System, system));
        }
        state.log_message(log_message(Role::User, Some(&prompt.text)));
        messages.push(Message::text_message(
            new_id("msg"),
            Role::User,
            &prompt.text,
        ));
        self.turn(session, &state.tools, messages, Vec::new())
    }

    /// The session closed while its run waited on the user: the upstream is told the pauses are dismissed
    /// (an A2A task is cancelled, a CMDC approval rejected, …), so that its own run does not wait forever.
    /// Nobody reads that turn's events any more; they are drained in the background.
    fn dismiss(&self, session: &Session, asked: &[Pending]) {
        let resume = asked
            .iter()
            .map(|pending| Resume {
                interrupt_id: pending.id.clone(),
                status: ResumeStatus::Cancelled,
                payload: None,
            })
            .collect();
        let mut events = self
            .translator
            .start(self.turn(session, &[], Vec::new(), resume));
        tokio::spawn(async move { while events.next().await.is_some() {} });
    }

    /// A turn of the session's conversation.
    fn turn(
        &self,
        session: &Session,
        tools: &[RegisteredTool],
        messages: Vec<Message>,
        resume: Vec<Resume>,
    ) -> Turn {
        Turn {
            conversation: session.conversation.clone(),
            tenant: session.tenant.clone(),
            run_id: new_id("run"),
            messages,
            history: History::Delta,
            tools: tools.iter().map(|t| tool_from_callback(&t.tool)).collect(),
            resume,
            // The client chose it when it created the session; it wins over the route's.
            options: GenerationOptions {
                model: Some(session.model.clone()),
                ..GenerationOptions::default()
            },
            ..Turn::default()
        }
    }

    /// Waits until every interrupt of the turn is answered; `Err` when the run was stopped first.
    async fn wait_for_answers(
        &self,
        session: &Session,
        run: &sessions::Run,
        asked: &[Pending],
        answered: &mut mpsc::UnboundedReceiver<Resume>,
    ) -> Result<Vec<Resume>, End> {
        let mut resume = Vec::new();
        while resume.len() < asked.len() {
            let answer = tokio::select! {
                answer = answered.recv() => answer.ok_or(End::Closed)?,
                why = stopped(session, run) => return Err(why),
            };
            let approval = asked
                .iter()
                .any(|p| p.id == answer.interrupt_id && p.approval);
            // An answer that says neither yes nor no resolves nothing: the approval is asked again.
            let decision = approval
                .then(|| self.translator.approval_decision(&answer))
                .flatten();
            if let Some(approved) = decision {
                run.push(Cmdc::ApprovalResolved {
                    approval_id: answer.interrupt_id.clone(),
                    status: if approved { "approved" } else { "rejected" }.into(),
                });
            }
            resume.push(answer);
        }
        Ok(resume)
    }

    /// Calls each callback tool and returns the tool messages; `Err` when the run was stopped first.
    async fn call_back(
        &self,
        session: &Session,
        run: &sessions::Run,
        calls: Vec<Call>,
    ) -> Result<Vec<Message>, End> {
        let tools = session.state().tools.clone();
        let mut messages = Vec::new();
        for call in calls {
            let args = parse_args(&call.args);
            let tool = tools.iter().find(|t| t.tool.name == call.name);
            let outcome = tokio::select! {
                outcome = self.callback(session, tool, &call, &args) => outcome,
                why = stopped(session, run) => return Err(why),
            };
            let (result, is_error) = match outcome {
                Ok(CallbackAnswer::Result(text)) => (text, false),
                Ok(CallbackAnswer::Error(text)) => (text, true),
                Err(text) => (text, true),
            };
            run.push(Cmdc::ToolExecutionEnd {
                tool_name: call.name.clone(),
                call_id: call.id.clone(),
                status: if is_error { "error" } else { "ok" }.into(),
                result: Value::String(truncate(&result, RESULT_LIMIT)),
            });
            let mut message = Message::text_message(new_id("msg"), Role::Tool, result.clone());
            message.tool_call_id = Some(call.id.clone());
            message.is_error = is_error;
            message.name = Some(call.name.clone());
            let mut state = session.state();
            state.tool_calls += 1;
            let mut logged = log_message(Role::Tool, Some(&result));
            logged["callId"] = json!(call.id);
            logged["name"] = json!(call.name);
            logged["isError"] = json!(is_error);
            state.log_message(logged);
            drop(state);
            messages.push(message);
        }
        Ok(messages)
    }

    /// Calls a callback tool. Only its declared answer reaches the client: a refused URL, a failure, a
    /// non-2xx status or an answer that is no `{"result"}`/`{"error"}` become a short error text, never the
    /// body of whatever answered.
    async fn callback(
        &self,
        session: &Session,
        registered: Option<&RegisteredTool>,
        call: &Call,
        args: &Value,
    ) -> Result<CallbackAnswer, String> {
        let registered =
            registered.ok_or_else(|| format!("tool `{}` is not registered", call.name))?;
        let tool = &registered.tool;
        let uri: Uri = tool
            .callback_url
            .parse()
            .map_err(|_| format!("the callbackUrl of `{}` is not valid", call.name))?;
        let body = ToolCallback {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            args: args.clone(),
            session_id: session.id.clone(),
        };
        let body = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        let timeout = tool
            .timeout_ms
            .map_or(CALLBACK_TIMEOUT, Duration::from_millis);
        let exchange = async {
            let response = self
                .callbacks
                .post_json(uri, body, &registered.requester)
                .await
                .map_err(|e| e.message().to_owned())?;
            let status = response.status();
            if !status.is_success() {
                return Err(format!("the callback answered HTTP {}", status.as_u16()));
            }
            let bytes = Limited::new(response.into_body(), CALLBACK_BODY_LIMIT)
                .collect()
                .await
                .map_err(|_| "reading the callback answer failed".to_owned())?
                .to_bytes();
            serde_json::from_slice::<CallbackAnswer>(&bytes).map_err(|_| {
                "the callback answered neither {\"result\"} nor {\"error\"}".to_owned()
            })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(format!(
                "the callback of `{}` did not answer within {} ms",
                call.name,
                timeout.as_millis()
            )),
        }
    }

    /// Adds the turn's assistant message and server-side tool results to the session's message log.
    fn log_turn(&self, session: &Session, encoder: &mut Encoder) {
        let mut state = session.state();
        let text = std::mem::take(&mut encoder.text);
        let calls = std::mem::take(&mut encoder.logged_calls);
        if !text.is_empty() || !calls.is_empty() {
            let mut message = log_message(Role::Assistant, (!text.is_empty()).then_some(&text));
            if !calls.is_empty() {
                message["toolCalls"] = Value::Array(calls);
            }
            state.log_message(message);
        }
        state.tool_calls += encoder.server_results.len() as u64;
        for (call_id, name, content, is_error) in std::mem::take(&mut encoder.server_results) {
            let mut message = log_message(Role::Tool, Some(&content));
            message["callId"] = json!(call_id);
            message["name"] = json!(name);
            message["isError"] = json!(is_error);
            state.log_message(message);
        }
    }
}

/// The session's control log, held open, and the task carrying out what comes through it.
struct ControlGuard {
    log: Option<crate::store::LogWriter>,
    task: tokio::task::JoinHandle<()>,
}

impl ControlGuard {
    /// Ends the control log (its lease let go: other replicas' clients now run their prompts themselves), and
    /// returns once what came through it before its end was carried out, or after `CONTROL_DRAIN` (a store
    /// that does not answer: the rest is left to the clients' retries).
    async fn finish(mut self) {
        if let Some(log) = self.log.take() {
            log.end().await;
        }
        let _ = tokio::time::timeout(CONTROL_DRAIN, &mut self.task).await;
    }
}

impl Drop for ControlGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why a run stops before its end: the session deleted, or the run aborted (`POST …/abort`).
async fn stopped(session: &Session, run: &sessions::Run) -> End {
    tokio::select! {
        () = session.closed() => End::Closed,
        () = run.aborted() => End::Cancelled,
    }
}

/// How a run of [`Runner::drive`] begins.
pub enum Start {
    Prompt(Queued),
    /// A run that a proxy which stopped left paused on its user, carried on here: its events so far (as its
    /// log kept them), then the answers to `asked`, as they come on `answered` (the session's `answers`).
    Paused {
        events: Vec<Cmdc>,
        asked: Vec<Pending>,
        answered: mpsc::UnboundedReceiver<Resume>,
    },
}

/// A session whose run's proxy stopped, as [`Runner::recall`] finds it.
enum Recalled {
    /// As the store (or this replica) keeps it now.
    Kept(Box<Kept>),
    Gone,
    /// Its run is over.
    Over,
}

impl From<Option<Kept>> for Recalled {
    fn from(kept: Option<Kept>) -> Self {
        kept.map_or(Recalled::Gone, |kept| Recalled::Kept(Box::new(kept)))
    }
}

/// Where a run paused on its user whose proxy stopped goes on.
enum Carried {
    Here,
    /// Another replica claimed it.
    Elsewhere,
    /// Its log ended: it was over after all.
    Ended,
}

/// What a run does next: a turn, or wait for the answers to what its last turn asked.
enum Next {
    Turn(Box<Turn>),
    Answers(Vec<Pending>),
}

/// How a canonical turn ended.
#[derive(Debug)]
pub enum End {
    Completed,
    Interrupted,
    Cancelled,
    Error(String),
    /// The session was deleted.
    Closed,
}

fn tool_from_callback(tool: &CallbackTool) -> Tool {
    Tool {
        name: tool.name.clone(),
        description: tool
            .description
            .clone()
            .unwrap_or_else(|| format!("External tool: {}", tool.name)),
        parameters: tool
            .parameters
            .clone()
            .filter(|p| !p.is_null())
            .unwrap_or_else(crate::model::empty_object_schema),
    }
}

/// The call's arguments as JSON (an object when the upstream sent nothing).
fn parse_args(args: &str) -> Value {
    if args.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(args).unwrap_or_else(|_| Value::String(args.to_owned()))
}

/// A CMDC message of the session log.
pub fn log_message(role: Role, content: Option<&str>) -> Value {
    let role = match role {
        Role::System | Role::Developer => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    json!({
        "id": new_id("msg"),
        "role": role,
        "content": content,
        "toolCalls": null,
        "callId": null,
        "name": null,
        "isError": false,
    })
}

/// Text cut to at most `limit` bytes, marked `...[truncated]` when cut.
fn truncate(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    format!("{}...[truncated]", crate::logging::char_prefix(text, limit))
}

/// `2026-04-08T12:00:00.000000Z` (with `micros`) or `2026-04-08T12:00:00Z`.
pub fn timestamp(time: SystemTime, micros: bool) -> String {
    if micros {
        humantime::format_rfc3339_micros(time).to_string()
    } else {
        humantime::format_rfc3339_seconds(time).to_string()
    }
}

/// The canonical answer to an approval.
pub fn approval_answer(id: &str, approved: bool) -> Resume {
    Resume {
        interrupt_id: id.to_owned(),
        status: ResumeStatus::Resolved,
        payload: Some(json!({"approved": approved})),
    }
}

/// The canonical answer to a question.
pub fn text_answer(id: &str, text: &str) -> Resume {
    Resume {
        interrupt_id: id.to_owned(),
        status: ResumeStatus::Resolved,
        payload: Some(Value::String(text.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let time = UNIX_EPOCH + Duration::from_micros(1_775_649_600_000_123);
        assert_eq!(timestamp(time, true), "2026-04-08T12:00:00.000123Z");
        assert_eq!(timestamp(time, false), "2026-04-08T12:00:00Z");
    }

    #[test]
    fn long_results_are_cut_and_marked() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abcd", 3), "abc...[truncated]");
    }
}
