//! Client-tool callbacks across replicas that share a store. The gateway calls a client tool back through
//! the balancer, so the call may reach a replica other than the one whose step reads the session's run, and
//! the client's result may reach a third:
//! - a step that listens says so in the store (the session's [`LISTENER_DOCUMENT`]: what it accepts), and
//!   follows the session's [`CALLS_LOG`];
//! - a replica that gets a call no step of its own awaits checks it against that document, hands it over
//!   through the calls log, and holds the gateway's request until the answer comes through the call's
//!   [`ANSWER_LOG`] (or to itself);
//! - a replica that gets the client's result for a call it does not hold hands it over through that log.

use std::collections::BTreeSet;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::wire;
use crate::store::{Documents, Followed, LogWriter};

/// The kind of the document saying which calls the step reading a session's run accepts (by gateway session).
const LISTENER_DOCUMENT: &str = "cmdc-callback-listener";
/// The kind of the log through which calls reach the step reading a session's run (by gateway session).
const CALLS_LOG: &str = "cmdc-callback-calls";
/// The kind of the log through which the client's result reaches the replica holding a call (by call id).
const ANSWER_LOG: &str = "cmdc-callback-answer";
/// Gateway sessions are the proxy's own: no tenant names them.
const NO_TENANT: &str = "";

/// Which calls a step accepts: those of the session's callback tools, made with the session's token.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Accepts {
    /// The token of the session's callback URLs; `None` while it has no callback tools.
    pub token: Option<String>,
    pub tools: BTreeSet<String>,
}

impl Accepts {
    /// Whether `call`, made with `token`, is one to take. The token is compared in constant time: a guess
    /// learns nothing from how long the refusal took.
    pub fn takes(&self, token: &str, call: &wire::ToolCallback) -> bool {
        let token_matches = self
            .token
            .as_ref()
            .is_some_and(|expected| bool::from(expected.as_bytes().ct_eq(token.as_bytes())));
        token_matches && self.tools.contains(&call.tool_name)
    }
}

/// The store the replicas share, for callbacks.
pub(super) struct Elsewhere {
    documents: Documents,
}

/// The calls other replicas hand to a step; while it lives, the step listens in the store.
pub(super) struct HandedCalls {
    _log: LogWriter,
    calls: Pin<Box<dyn Stream<Item = Followed> + Send>>,
    documents: Documents,
    session: String,
}

/// What the replica holding a call hears of the client's result.
pub(super) struct HandedAnswer {
    _log: LogWriter,
    answers: Pin<Box<dyn Stream<Item = Followed> + Send>>,
}

impl Elsewhere {
    pub fn new(documents: Documents) -> Option<Self> {
        documents.shared().then_some(Self { documents })
    }

    /// Says in the store that a step reads `session`'s run and accepts `accepts`, and follows the calls
    /// other replicas hand over.
    pub async fn listen(&self, session: &str, accepts: &Accepts) -> Option<HandedCalls> {
        let documents = &self.documents;
        let log = documents.open_log(CALLS_LOG, NO_TENANT, session).await?;
        let said = documents
            .save(LISTENER_DOCUMENT, NO_TENANT, session, accepts)
            .await;
        if let Err(error) = said {
            tracing::warn!(%session, "cmdc: callbacks reaching other replicas cannot be taken: {error}");
        }
        Some(HandedCalls {
            _log: log,
            calls: Box::pin(documents.follow_log(CALLS_LOG, NO_TENANT, session, 0)),
            documents: documents.clone(),
            session: session.to_owned(),
        })
    }

    /// Hands `call`, made with `token`, to the step that listens on another replica, if one accepts it:
    /// then what will tell the client's result.
    pub async fn hand_call(&self, token: &str, call: &wire::ToolCallback) -> Option<HandedAnswer> {
        let documents = &self.documents;
        let session = &call.session_id;
        let accepts = documents
            .load::<Accepts>(LISTENER_DOCUMENT, NO_TENANT, session)
            .await;
        if !accepts.ok().flatten()?.takes(token, call) {
            return None;
        }
        let log = documents
            .open_log(ANSWER_LOG, NO_TENANT, &call.call_id)
            .await?;
        let bytes = Bytes::from(serde_json::to_vec(call).unwrap_or_default());
        match documents
            .push_to_log(CALLS_LOG, NO_TENANT, session, bytes)
            .await
        {
            Ok(true) => {}
            // The replica whose run made the call no longer listens for callbacks.
            Ok(false) => return None,
            Err(error) => {
                tracing::warn!(%session, "cmdc: a callback could not be handed over: {error}");
                return None;
            }
        }
        Some(HandedAnswer {
            _log: log,
            answers: Box::pin(documents.follow_log(ANSWER_LOG, NO_TENANT, &call.call_id, 0)),
        })
    }

    /// Hands the client's result for `call_id` to the replica that holds the call.
    pub async fn answer(&self, call_id: &str, answer: &wire::CallbackAnswer) {
        let bytes = Bytes::from(serde_json::to_vec(answer).unwrap_or_default());
        let handed = self
            .documents
            .push_to_log(ANSWER_LOG, NO_TENANT, call_id, bytes)
            .await;
        match handed {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(call = %call_id, "cmdc: a tool's result came after its call stopped waiting")
            }
            Err(error) => {
                tracing::warn!(call = %call_id, "cmdc: a tool's result could not be handed over: {error}")
            }
        }
    }
}

impl HandedCalls {
    /// The next call handed over; never, once the log can no longer be read.
    pub async fn next(&mut self) -> wire::ToolCallback {
        while let Some(Followed::Event(_, bytes)) = self.calls.next().await {
            if let Ok(call) = serde_json::from_slice(&bytes) {
                return call;
            }
        }
        std::future::pending().await
    }
}

impl Drop for HandedCalls {
    fn drop(&mut self) {
        let (documents, session) = (self.documents.clone(), std::mem::take(&mut self.session));
        tokio::spawn(async move {
            let _ = documents
                .delete(LISTENER_DOCUMENT, NO_TENANT, &session)
                .await;
        });
    }
}

impl HandedAnswer {
    /// The client's result, handed over by another replica; never, once the log can no longer be read.
    pub async fn next(&mut self) -> wire::CallbackAnswer {
        while let Some(Followed::Event(_, bytes)) = self.answers.next().await {
            if let Ok(answer) = serde_json::from_slice(&bytes) {
                return answer;
            }
        }
        std::future::pending().await
    }
}
