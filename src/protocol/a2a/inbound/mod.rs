//! A2A inbound: we are the A2A 0.2.5 agent (`specs/a2a.md` §4).
//!
//! Under the route path P: `POST P` and `POST P/stream` take every JSON-RPC method (vendors append `/stream`
//! to the card url); `GET P/.well-known/agent.json` (0.2.5) and `GET P/.well-known/agent-card.json` (0.3.0,
//! for 1.x SDK clients) serve the card. Anything else under P is 404, a wrong HTTP method 405.
//!
//! A message becomes a [`Turn`] (`conversation` = contextId, `run_id` = task id, the one message as a delta);
//! the run's events are consumed by a spawned runner that owns the event stream, keeps the task in the
//! route's [`Registry`] and feeds the client: `message/stream` directly (a bounded channel, so a slow client
//! slows the upstream read), `tasks/resubscribe` through the run's fan-out (or, for a task another replica
//! runs, through the run's log in the store), a blocking `message/send` by waiting for the final status.
//! Dropping the event stream cancels the upstream work: `tasks/cancel` and a disconnecting `message/stream`
//! or blocking `message/send` client do that, and the task becomes `canceled`.
//!
//! Errors (choices within §4.3):
//! - HTTP-level refusals on the JSON-RPC paths carry a JSON-RPC error body (-32600, `id: null`) with the
//!   HTTP status that says what went wrong: 405 (not POST), 415 (not JSON), 413 (body larger than the
//!   route's `max_body`). The method is not known yet, so these are never SSE.
//! - Once the envelope is valid, a streaming method (`message/stream`, `tasks/resubscribe`) is always
//!   answered `200 text/event-stream`, an error as one SSE event holding the JSON-RPC error; every other
//!   answer is `200 application/json`.
//! - A message for a task that is still running: -32602 (only a paused task takes another message).
//! - `configuration.pushNotificationConfig` on a message: -32003, like the push-config methods.
//! - The card and unknown paths answer errors as `{"error":{"code","message"}}`, like the server.
//! - Auth (`[routes.api_keys]`, src/auth.rs): a JSON-RPC call without a known key (`X-API-KEY`, any case, or
//!   `Authorization: Bearer`) is HTTP 401 with `WWW-Authenticate` and the body
//!   `{"jsonrpc":"2.0","id":null,"error":{"code":-32050,"message":"Missing or invalid API key"}}`, before the
//!   body is read; over a rate limit it is HTTP 429 with `Retry-After` and code -32051. The card stays public
//!   unless the route sets `card_auth` (then 401 `{"error":{"code":"UNAUTHORIZED",…}}`).
//! - Tasks and contexts belong to the tenant whose key created them: another tenant's task id is -32001.

mod decode;
pub(super) mod encode;
mod runner;

pub use decode::Reader;
pub use encode::{EncodeOptions, Encoder};

use std::future::ready;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use super::card::{self, CardTemplate, CardVersion};
use super::rpc::{self, result_frame, Envelope, ResultFrames, RpcError};
use super::tasks::{
    self, Bounds, Cancel, Registry, Snapshot, Started, Subscription, CONTEXT_DOCUMENT, EVENTS_LOG,
    TASK_DOCUMENT,
};
use super::wire::{self, RequestId, StreamResult};
use super::InboundOptions;
use crate::auth::{self, KeySources};
use crate::body::{self, Body};
use crate::config::RouteConfig;
use crate::error::Error;
use crate::face::{encode_frames, InboundFace, RequestDecoder};
use crate::model::{Event, History, Resume, ResumeStatus, Turn};
use crate::mount::Mount;
use crate::route_state::RouteState;
use crate::sse;
use crate::store::{Admission, Documents, Followed};
use decode::{check_message, turn_for};
use encode::CancelReason;
use runner::{forward, recall_task, Runner};

/// How many results may wait for a slow `message/stream` client before the upstream read pauses.
const EVENT_BUFFER: usize = 16;
/// How long `tasks/cancel` waits for a run to stop (it stops at its next await point).
const CANCEL_WAIT: Duration = Duration::from_secs(5);

pub struct Inbound {
    card: CardTemplate,
    /// The card needs an API key too (`card_auth`).
    card_auth: bool,
    options: EncodeOptions,
    /// A client that leaves a `message/stream` or blocking `message/send` cancels the task (the design's
    /// default; `specs/a2a.md` §4.5 would offer keeping it running for `tasks/resubscribe` as a route option).
    cancel_on_disconnect: bool,
    tasks: Arc<Registry>,
    /// `[routes.quota]` tasks.
    per_tenant: Option<NonZeroUsize>,
}

/// What a path under the route is.
enum Endpoint {
    Rpc,
    Card(CardVersion),
    Unknown,
}

impl Inbound {
    /// The route's tasks are `kept` across its reloads.
    pub fn new(route: &RouteConfig, options: InboundOptions, kept: &RouteState) -> Self {
        let per_tenant = route.quota.tasks.map_or(usize::MAX, |n| n.get());
        Self {
            card: CardTemplate::new(route),
            card_auth: route.card_auth,
            options: EncodeOptions {
                status_message: options.a2a_status_message,
                tool_activity: false,
            },
            cancel_on_disconnect: true,
            per_tenant: route.quota.tasks,
            tasks: {
                let tasks = kept.keep((), Registry::new);
                tasks.rebound(Bounds {
                    per_tenant,
                    ..Bounds::default()
                });
                tasks
            },
        }
    }

    async fn card_endpoint(
        &self,
        request: &Request<Incoming>,
        mount: &Mount,
        version: CardVersion,
    ) -> Response<Body> {
        if let Err(error) = body::expect_method(request, Method::GET) {
            return plain_error(&error, "GET");
        }
        if self.card_auth {
            if let Err(error) = mount.access.admit(request, KeySources::Headers).await {
                return plain_error(&error, "GET");
            }
        }
        let url = format!("{}{}", card::origin(request), mount.path);
        let json = serde_json::to_vec(&self.card.render(url, version)).unwrap_or_default();
        body::json_response(StatusCode::OK, json)
    }

    async fn rpc_endpoint(&self, request: Request<Incoming>, mount: &Mount) -> Response<Body> {
        let caller = match mount.access.admit(&request, KeySources::Headers).await {
            Ok(caller) => caller,
            Err(error) => return http_rpc_error(&error),
        };
        if let Err(error) = body::expect_method(&request, Method::POST)
            .and_then(|()| body::expect_json(request.headers()))
        {
            return http_rpc_error(&error);
        }
        let bytes = match body::read_request(request.into_body(), mount.body_limit).await {
            Ok(bytes) => bytes,
            Err(error) => return http_rpc_error(&error),
        };
        let translator = Arc::clone(&mount.translator);
        self.call(&bytes, &caller.tenant, &mount.documents, move |turn| {
            translator.start(turn)
        })
        .await
    }

    /// Answers one JSON-RPC request body of `tenant`'s client. `start` runs a turn and returns its canonical
    /// events (RunStarted first, one terminal last; dropping the stream cancels the run): the route's
    /// translator, or a script in tests. `documents` is where tasks are kept for other replicas and restarts.
    pub async fn call<F, S>(
        &self,
        body: &[u8],
        tenant: &str,
        documents: &Documents,
        start: F,
    ) -> Response<Body>
    where
        F: FnOnce(Turn) -> S,
        S: Stream<Item = Event> + Send + Unpin + 'static,
    {
        let Envelope { id, method, params } = match Reader.decode(body) {
            Ok(envelope) => envelope,
            Err(refused) => return Reader.refuse(refused),
        };
        self.recall(documents, tenant, &method, params.as_ref())
            .await;
        match method.as_str() {
            "message/send" => match self.send(tenant, documents, params, start).await {
                Ok(task) => json_result(&id, &task),
                Err(error) => json_error(&id, &error),
            },
            "message/stream" => match self.stream(&id, tenant, documents, params, start).await {
                Ok(frames) => sse_reply(frames),
                Err(error) => sse_error(&id, &error),
            },
            "tasks/get" => {
                let task = rpc::params::<wire::TaskQueryParams>(params)
                    .and_then(|p| self.tasks.get(tenant, &p.id, p.history_length));
                match task {
                    Ok(task) => json_result(&id, &task),
                    Err(error) => json_error(&id, &error),
                }
            }
            "tasks/cancel" => match self.cancel(tenant, documents, params, start).await {
                Ok(task) => json_result(&id, &task),
                Err(error) => json_error(&id, &error),
            },
            "tasks/resubscribe" => match self.resubscribe(&id, tenant, documents, params) {
                Ok(frames) => sse_reply(frames),
                Err(error) => sse_error(&id, &error),
            },
            method if rpc::is_push_config(method) => {
                json_error(&id, &RpcError::push_not_supported())
            }
            method => json_error(&id, &RpcError::method_not_found(method)),
        }
    }

    /// Takes in, from the store, the task a request names (or the latest task of the context a message
    /// names) when another replica, or this one before a restart, kept a newer revision of it than this
    /// registry holds. A task running here is known best here.
    async fn recall(
        &self,
        documents: &Documents,
        tenant: &str,
        method: &str,
        params: Option<&Value>,
    ) {
        if !documents.kept() {
            return;
        }
        let params = params.unwrap_or(&Value::Null);
        let (task_id, context_id) = match method {
            "message/send" | "message/stream" => (
                &params["message"]["taskId"],
                &params["message"]["contextId"],
            ),
            "tasks/get" | "tasks/cancel" | "tasks/resubscribe" => (&params["id"], &Value::Null),
            _ => return,
        };
        let named = |id: &Value| id.as_str().filter(|id| !id.is_empty()).map(str::to_owned);
        let recalled = async {
            let task_id = match (named(task_id), named(context_id)) {
                (Some(task_id), _) => Some(task_id),
                (None, Some(context_id)) => {
                    documents
                        .load::<String>(CONTEXT_DOCUMENT, tenant, &context_id)
                        .await?
                }
                (None, None) => None,
            };
            match task_id {
                Some(task_id) => recall_task(&self.tasks, documents, tenant, &task_id).await,
                None => Ok(()),
            }
        };
        if let Err(error) = recalled.await {
            // Served from what this replica knows; the turn itself meets the store's failure.
            tracing::warn!("a2a: a kept task could not be read: {error}");
        }
    }

    /// Checks a message, registers its task and starts the run.
    async fn accept<F, S>(
        &self,
        tenant: &str,
        documents: &Documents,
        params: Option<Value>,
        start: F,
        primary: Option<mpsc::Sender<Arc<StreamResult>>>,
    ) -> Result<Accepted, RpcError>
    where
        F: FnOnce(Turn) -> S,
        S: Stream<Item = Event> + Send + Unpin + 'static,
    {
        let params: wire::MessageSendParams = rpc::params(params)?;
        check_message(&params.message)?;
        let configuration = params.configuration.unwrap_or_default();
        if configuration
            .push_notification_config
            .as_ref()
            .is_some_and(|config| !config.is_null())
        {
            return Err(RpcError::push_not_supported());
        }
        let mut started = self.tasks.begin(tenant, params.message.clone())?;
        if !self.count(tenant, documents, &started).await? {
            // Once more, after the tenant's tasks whose replica died were failed (and so make room).
            started = self.tasks.begin(tenant, params.message.clone())?;
            if !self.count(tenant, documents, &started).await? {
                return Err(tasks::quota_reached(
                    self.per_tenant.map_or(0, NonZeroUsize::get),
                ));
            }
        }
        let turn = turn_for(&started, params.message);
        let events = start(turn);
        let Started {
            task_id,
            context_id,
            generation,
            task,
            cancel,
            ..
        } = started;
        // A blocking `message/send` subscribes before the run starts, so that it misses nothing.
        let waits = primary.is_none() && configuration.blocking != Some(false);
        let updates = waits
            .then(|| self.tasks.subscribe(tenant, &task_id))
            .transpose()?;
        let mut runner = Runner {
            tasks: Arc::clone(&self.tasks),
            documents: documents.clone(),
            tenant: tenant.to_owned(),
            final_kept: false,
            log: None,
            encoder: Encoder::new(&task_id, &context_id, self.options),
            task_id: task_id.clone(),
            generation,
            cancel: Some(cancel),
            primary,
            cancel_on_disconnect: self.cancel_on_disconnect,
        };
        // Lent to its run: an `async fn` would hold a moved runner twice.
        tokio::spawn(async move { runner.run(events).await });
        Ok(Accepted {
            tenant: tenant.to_owned(),
            task: tasks::with_history_length(task, configuration.history_length),
            task_id,
            generation,
            updates,
            history_length: configuration.history_length,
        })
    }

    /// Where a store keeps tasks, counts the task there against its tenant's `[routes.quota]` tasks (those
    /// of every replica, and of this one before a restart; a task continued counts as used now): the
    /// tenant's task used longest ago that does not run makes room (finished before paused), and when
    /// every one of them runs a new task is withdrawn and refused (-32051), as this replica's own count
    /// does ([`Registry::begin`]). Those shown running whose replica died (or that ran here before a
    /// restart) are failed then: `Ok(false)`, the new task withdrawn, is to be begun again.
    async fn count(
        &self,
        tenant: &str,
        documents: &Documents,
        started: &Started,
    ) -> Result<bool, RpcError> {
        let Some(quota) = self.per_tenant.filter(|_| documents.kept()) else {
            return Ok(true);
        };
        let admitted = admit(tenant, documents, started, quota).await;
        if started.new && !matches!(admitted, Ok(Admission::Admitted(_))) {
            self.tasks.withdraw(&started.task_id, started.generation);
        }
        match admitted {
            Ok(Admission::Admitted(made_room)) => {
                for made_room in made_room {
                    self.tasks.forget(tenant, &made_room);
                }
                Ok(true)
            }
            // A continued task was counted already: it goes on (and, when the store failed, meets that
            // failure in its run, as a turn with no quota does).
            Ok(Admission::Refused(_)) | Err(_) if !started.new => Ok(true),
            Ok(Admission::Refused(running)) => {
                for task_id in &running {
                    if let Err(error) = recall_task(&self.tasks, documents, tenant, task_id).await {
                        tracing::warn!(%task_id, "a2a: a kept task could not be read: {error}");
                    }
                }
                Ok(false)
            }
            Err(error) => Err(RpcError::internal(error.message())),
        }
    }

    /// `message/send`: the final (or paused) task; with `blocking:false` the task as it starts.
    async fn send<F, S>(
        &self,
        tenant: &str,
        documents: &Documents,
        params: Option<Value>,
        start: F,
    ) -> Result<wire::Task, RpcError>
    where
        F: FnOnce(Turn) -> S,
        S: Stream<Item = Event> + Send + Unpin + 'static,
    {
        let accepted = self.accept(tenant, documents, params, start, None).await?;
        let Some(Subscription::Live { mut updates, .. }) = accepted.updates else {
            return Ok(accepted.task);
        };
        let mut guard = CancelOnDrop {
            tasks: &self.tasks,
            task_id: &accepted.task_id,
            generation: accepted.generation,
            armed: self.cancel_on_disconnect,
        };
        loop {
            match updates.recv().await {
                Ok(update) if update.is_final() => break,
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => break,
            }
        }
        guard.armed = false;
        self.tasks
            .get(&accepted.tenant, &accepted.task_id, accepted.history_length)
    }

    /// `message/stream`: the task as it starts, then the run's results as they come.
    async fn stream<F, S>(
        &self,
        id: &RequestId,
        tenant: &str,
        documents: &Documents,
        params: Option<Value>,
        start: F,
    ) -> Result<impl Stream<Item = Bytes> + Send + 'static, RpcError>
    where
        F: FnOnce(Turn) -> S,
        S: Stream<Item = Event> + Send + Unpin + 'static,
    {
        let (sender, mut receiver) = mpsc::channel::<Arc<StreamResult>>(EVENT_BUFFER);
        let accepted = self
            .accept(tenant, documents, params, start, Some(sender))
            .await?;
        let first = Arc::new(StreamResult::Task(accepted.task));
        let results = futures_util::stream::once(ready(first)).chain(
            futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx)),
        );
        Ok(encode_frames(results, ResultFrames(id.clone())))
    }

    /// `tasks/cancel`: the canceled task. A paused task has no run to stop, but its upstream still waits for
    /// an answer: a turn that declines the interrupt tells it (an A2A upstream gets `tasks/cancel`), waited
    /// for (bounded) so that the client's next message finds the conversation without the paused task.
    async fn cancel<F, S>(
        &self,
        tenant: &str,
        documents: &Documents,
        params: Option<Value>,
        start: F,
    ) -> Result<wire::Task, RpcError>
    where
        F: FnOnce(Turn) -> S,
        S: Stream<Item = Event> + Send + Unpin + 'static,
    {
        let wire::TaskIdParams { id } = rpc::params(params)?;
        // A run may pause or end while it is told to stop: look again (bounded).
        for _ in 0..3 {
            match self.tasks.cancel(tenant, &id) {
                Cancel::Done(result) => {
                    let task = result?;
                    runner::keep(&self.tasks, documents, tenant, &id, true).await;
                    return Ok(*task);
                }
                Cancel::Declined { task, interrupt_id } => {
                    runner::keep(&self.tasks, documents, tenant, &id, true).await;
                    let turn = Turn {
                        conversation: task.context_id.clone(),
                        tenant: tenant.to_owned(),
                        run_id: task.id.clone(),
                        history: History::Delta,
                        resume: vec![Resume {
                            interrupt_id,
                            status: ResumeStatus::Cancelled,
                            payload: None,
                        }],
                        ..Turn::default()
                    };
                    let mut events = start(turn);
                    // Read to its end (the conversation is saved by then); dropping the stream would cancel
                    // the turn itself, so past the wait it goes on in the background.
                    let declined =
                        tokio::spawn(async move { while events.next().await.is_some() {} });
                    let _ = tokio::time::timeout(CANCEL_WAIT, declined).await;
                    return Ok(*task);
                }
                Cancel::Wait(mut done) => {
                    // Resolves with an error when the run ends.
                    let _ = tokio::time::timeout(CANCEL_WAIT, done.changed()).await;
                    let task = self.tasks.get(tenant, &id, None)?;
                    match task.status.state {
                        wire::TaskState::Canceled => return Ok(task),
                        state if state.is_terminal() => {
                            return Err(RpcError::not_cancelable(&id, state))
                        }
                        _ => {}
                    }
                }
            }
        }
        Err(RpcError::internal(format!(
            "task {id} did not stop in time"
        )))
    }

    /// `tasks/resubscribe`: a running task's later results; otherwise its status as one final update. A task
    /// that runs on another replica (its lease holds in a store replicas share) is followed through its run
    /// log, from the run's first result.
    fn resubscribe(
        &self,
        id: &RequestId,
        tenant: &str,
        documents: &Documents,
        params: Option<Value>,
    ) -> Result<impl Stream<Item = Bytes> + Send + 'static, RpcError> {
        let wire::TaskIdParams { id: task_id } = rpc::params(params)?;
        let (sender, mut receiver) = mpsc::channel::<Bytes>(EVENT_BUFFER);
        match self.tasks.subscribe(tenant, &task_id)? {
            Subscription::Finished(update)
                if documents.shared() && update.status.state.is_running() =>
            {
                tokio::spawn(follow_elsewhere(
                    Arc::clone(&self.tasks),
                    documents.clone(),
                    tenant.to_owned(),
                    task_id,
                    id.clone(),
                    sender,
                ));
            }
            Subscription::Finished(update) => {
                let frame = result_frame(id, &StreamResult::StatusUpdate(*update));
                // A fresh channel has room for one.
                let _ = sender.try_send(frame);
            }
            Subscription::Live { updates, after } => {
                tokio::spawn(forward(
                    Arc::clone(&self.tasks),
                    task_id,
                    id.clone(),
                    updates,
                    after,
                    sender,
                ));
            }
        }
        Ok(futures_util::stream::poll_fn(move |cx| {
            receiver.poll_recv(cx)
        }))
    }
}

/// Feeds a `tasks/resubscribe` client the results of a run another replica drives, from its run log, until
/// the final status. A run whose replica stopped ends with the task failed, as any replica then reads it.
async fn follow_elsewhere(
    tasks: Arc<Registry>,
    documents: Documents,
    tenant: String,
    task_id: String,
    id: RequestId,
    sender: mpsc::Sender<Bytes>,
) {
    let log = documents.follow_log(EVENTS_LOG, &tenant, &task_id, 0);
    tokio::pin!(log);
    loop {
        let followed = tokio::select! {
            followed = log.next() => followed,
            () = sender.closed() => return,
        };
        let Some(Followed::Event(_, bytes)) = followed else {
            break;
        };
        let Ok(result) = serde_json::from_slice::<StreamResult>(&bytes) else {
            continue;
        };
        if sender.send(result_frame(&id, &result)).await.is_err() || tasks::is_final(&result) {
            return;
        }
    }
    // Lost, or ended without a final status kept in the log: the task as the store keeps it now.
    if let Err(error) = recall_task(&tasks, &documents, &tenant, &task_id).await {
        tracing::warn!(%task_id, "a2a: a kept task could not be read: {error}");
    }
    if let Ok(Subscription::Finished(update)) = tasks.subscribe(&tenant, &task_id) {
        let _ = sender
            .send(result_frame(&id, &StreamResult::StatusUpdate(*update)))
            .await;
    }
}

/// Counts `started`'s task against `quota` in the store, where the tenant's tasks that do not run may make
/// room ([`Inbound::count`]).
async fn admit(
    tenant: &str,
    documents: &Documents,
    started: &Started,
    quota: NonZeroUsize,
) -> crate::error::Result<Admission> {
    let rank = |kept: &Snapshot| {
        let state = kept.task.status.state;
        (!state.is_running()).then_some(u8::from(state.is_paused()))
    };
    documents
        .admit_making_room(TASK_DOCUMENT, tenant, &started.task_id, quota.get(), rank)
        .await
}

/// A message the registry took, its run started.
struct Accepted {
    tenant: String,
    /// The task as it starts, `historyLength` applied.
    task: wire::Task,
    task_id: String,
    generation: u64,
    /// A blocking send's subscription to the run.
    updates: Option<Subscription>,
    history_length: Option<u64>,
}

/// Cancels the run of a blocking `message/send` whose client left before it ended.
struct CancelOnDrop<'a> {
    tasks: &'a Registry,
    task_id: &'a str,
    generation: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.tasks
                .cancel_run(self.task_id, self.generation, CancelReason::Disconnected);
        }
    }
}

fn json_result<R: serde::Serialize>(id: &RequestId, result: &R) -> Response<Body> {
    body::json_response(StatusCode::OK, rpc::result_json(id, result))
}

fn json_error(id: &RequestId, error: &RpcError) -> Response<Body> {
    body::json_response(StatusCode::OK, rpc::error_json(id, error))
}

fn sse_reply<S>(frames: S) -> Response<Body>
where
    S: Stream<Item = Bytes> + Send + 'static,
{
    sse::stream_response(frames, sse::EVENT_STREAM, sse::PING)
}

/// A streaming method's error: one SSE event holding it, then the end.
fn sse_error(id: &RequestId, error: &RpcError) -> Response<Body> {
    let frame = rpc::error_frame(id, error);
    sse_reply(futures_util::stream::once(ready(frame)))
}

/// A refusal before the body was read, on a JSON-RPC path: the HTTP status, a JSON-RPC error body.
fn http_rpc_error(error: &Error) -> Response<Body> {
    let rpc_error = if error.is_unauthorized() {
        RpcError::unauthorized(error.message())
    } else if error.retry_after().is_some() {
        RpcError::rate_limited(error.message())
    } else if !error.is_client() {
        RpcError::internal(error.message())
    } else {
        RpcError::invalid_request(error.message())
    };
    let json = rpc::error_json(&RequestId::Null, &rpc_error);
    let response = body::with_allow(body::json_response(error.http_status(), json), "POST");
    auth::with_refusal_headers(response, error)
}

/// `{"error":{"code","message"}}` with the error's HTTP status (card and unknown paths).
fn plain_error(error: &Error, allow: &'static str) -> Response<Body> {
    let json = serde_json::json!({"error": {"code": error.code(), "message": error.message()}});
    let response = body::with_allow(
        body::json_response(error.http_status(), json.to_string().into_bytes()),
        allow,
    );
    auth::with_refusal_headers(response, error)
}

impl InboundFace for Inbound {
    async fn handle(&self, request: Request<Incoming>, mount: &Mount) -> Response<Body> {
        let endpoint = match mount.subpath(request.uri().path()) {
            Some("" | "/" | "/stream") => Endpoint::Rpc,
            Some("/.well-known/agent.json") => Endpoint::Card(CardVersion::V0_2),
            Some("/.well-known/agent-card.json") => Endpoint::Card(CardVersion::V0_3),
            _ => Endpoint::Unknown,
        };
        match endpoint {
            Endpoint::Rpc => self.rpc_endpoint(request, mount).await,
            Endpoint::Card(version) => self.card_endpoint(&request, mount, version).await,
            Endpoint::Unknown => plain_error(
                &Error::not_found(format!("no A2A endpoint at {}", request.uri().path())),
                "GET",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::face::EventEncoder;
    use serde_json::json;

    fn message(value: Value) -> wire::Message {
        serde_json::from_value(value).unwrap()
    }

    #[tokio::test]
    async fn a_lagging_subscriber_is_resynchronised_from_the_task() {
        let tasks = Arc::new(Registry::new());
        let started = tasks
            .begin(
                "",
                message(json!({"kind": "message", "role": "user", "messageId": "m",
                                   "parts": [{"kind": "text", "text": "hi"}]})),
            )
            .unwrap();
        let (task_id, context_id) = (started.task_id.clone(), started.context_id.clone());
        let Ok(Subscription::Live { updates, after }) = tasks.subscribe("", &task_id) else {
            panic!("a live run");
        };
        let mut encoder = Encoder::new(&task_id, &context_id, EncodeOptions::default());
        let mut out = Vec::new();
        encoder.encode(Event::RunStarted, &mut out);
        encoder.encode(
            Event::TextStart {
                message_id: "t".into(),
                role: crate::model::Role::Assistant,
            },
            &mut out,
        );
        for _ in 0..tasks::FANOUT + 10 {
            encoder.encode(
                Event::TextDelta {
                    message_id: "t".into(),
                    delta: "x".into(),
                },
                &mut out,
            );
        }
        encoder.encode(
            Event::RunFinished {
                outcome: crate::model::Outcome::Completed,
                usage: None,
            },
            &mut out,
        );
        for result in out {
            assert!(tasks.apply(&task_id, started.generation, &Arc::new(result), None));
        }

        let (sender, mut receiver) = mpsc::channel(1024);
        forward(
            Arc::clone(&tasks),
            task_id,
            RequestId::Number(1),
            updates,
            after,
            sender,
        )
        .await;
        let mut frames = Vec::new();
        while let Ok(frame) = receiver.try_recv() {
            let text = String::from_utf8(frame.to_vec()).unwrap();
            let data = text.strip_prefix("data: ").unwrap().trim_end();
            frames.push(serde_json::from_str::<Value>(data).unwrap()["result"].take());
        }
        assert_eq!(frames.len(), 2, "{frames:#?}");
        assert_eq!(frames[0]["kind"], "artifact-update");
        assert!(
            frames[0].get("append").is_none(),
            "replaces the subscriber's copy"
        );
        assert_eq!(
            frames[0]["artifact"]["parts"][0]["text"],
            "x".repeat(tasks::FANOUT + 10)
        );
        assert_eq!(frames[1]["status"]["state"], "completed");
        assert_eq!(frames[1]["final"], true);
    }
}
