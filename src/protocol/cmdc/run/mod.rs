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
    self, control_log, run_id, Control, Counted, CreateError, Kept, Pending, Queued,
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
        // Spawned before anything is awaited: a client that leaves now does not leave the session busy.
        let (kept, started) = tokio::sync::oneshot::channel();
        let runner = Arc::clone(self);
        let session = Arc::clone(session);
        let drive = async move {
            let control = runner.take_control(&session).await;
            runner.start(&session, &run).await;
            let _ = kept.send(());
            runner.drive(session, run, queued, control).await;
        };
        // The run continues the trace of the request that started it (a REST prompt's `traceparent`).
        let drive = opentelemetry::context::FutureExt::with_current_context(drive);
        match runtime {
            Some(runtime) => runtime.spawn(drive),
            None => tokio::spawn(drive),
        };
        let _ = started.await;
        false
    }

    /// Runs prompts one after the other until the queue is empty. Meanwhile, in a store replicas share,
    /// what other replicas' clients ask of the session reaches it through its control log.
    async fn drive(
        self: Arc<Self>,
        session: Arc<Session>,
        first: Arc<sessions::Run>,
        prompt: Queued,
        mut control: Option<ControlGuard>,
    ) {
        let mut next = Some((first, prompt));
        while let Some((run, prompt)) = next.take() {
            self.run(&session, &run, prompt).await;
            // Ended (its lease let go) before the next run's log takes the same name.
            run.end_log().await;
            session.expire_unread(&run, FINISHED_RUN_TTL);
            next = match Self::next_prompt(&session, false) {
                Some(next) => Some(next),
                None => self.hand_back(&session, &mut control).await,
            };
            if let Some((run, _)) = &next {
                self.start(&session, run).await;
            }
        }
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
    /// is over, and the session is kept so. `None`: no such session (or it expired).
    pub async fn recall(&self, tenant: &str, id: &str) -> crate::error::Result<Option<Kept>> {
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

    async fn run(&self, session: &Arc<Session>, run: &sessions::Run, prompt: Queued) {
        tracing::debug!(session = %session.id, model = %session.model, "CMDC run started");
        run.push(Cmdc::PromptReceived {
            text: prompt.text.clone(),
        });
        run.push(Cmdc::AgentStart {});
        let (answers, mut answered) = mpsc::unbounded_channel();
        let mut turn = {
            let mut state = session.state();
            state.answers = Some(answers);
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
        };
        let mut usage = wire::TokenUsage::default();
        let mut last_text = None;
        let end = loop {
            let tools: Vec<String> = turn.tools.iter().map(|t| t.name.clone()).collect();
            let mut encoder = Encoder::new(tools);
            let mut encoded = Vec::new();
            let mut events = self.translator.start(turn);
            let mut end = None;
            let mut stop = End::Closed;
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
                        // Any replica may take the answer: kept pending before anyone is asked.
                        self.keep(session).await;
                        run.push(interrupt_event(&interrupt.id, interrupt.kind));
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
            sessions::add(&mut usage, encoder.usage);
            self.log_turn(session, &mut encoder);
            if encoder.last_text.is_some() {
                last_text = encoder.last_text.take();
            }
            match end {
                End::Interrupted if !encoder.asked.is_empty() => {
                    match self
                        .wait_for_answers(session, run, &encoder.asked, &mut answered)
                        .await
                    {
                        Ok(resume) => {
                            session.state().status = Status::Working;
                            self.keep(session).await;
                            let tools = session.state().tools.clone();
                            turn = self.turn(session, &tools, Vec::new(), resume);
                        }
                        Err(stop) => {
                            self.dismiss(session, &encoder.asked);
                            break stop;
                        }
                    }
                }
                End::Completed | End::Interrupted if !encoder.client_calls.is_empty() => {
                    let calls = std::mem::take(&mut encoder.client_calls);
                    let results = match self.call_back(session, run, calls).await {
                        Ok(results) => results,
                        Err(stop) => break stop,
                    };
                    let tools = session.state().tools.clone();
                    turn = self.turn(session, &tools, results, Vec::new());
                }
                end => break end,
            }
        };
        self.sessions.add_usage(&prompt.api_key, usage);
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
