//! A client of a CMDC gateway's REST API (`specs/cmdc.md` §2–4): the proxy's CMDC inbound, or the scripted
//! gateway of [`super::cmdc`]. It sends what cmdc-sdk 0.1.0 sends: JSON bodies, the `Accept` of the answer
//! it reads, and its API key as `X-API-Key`. [`CmdcClient::call`] is any one call, answered as it is; the
//! named calls are the steps a test needs to succeed, and check that they did.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};

use super::{send, within, Response, SseStream};

/// A CMDC client of one gateway, with one API key (or none).
#[derive(Clone, Debug)]
pub struct CmdcClient {
    /// The gateway's URL, before `/v1/...`: the route's URL on the proxy.
    base: String,
    key: Option<String>,
}

impl CmdcClient {
    /// A client of the gateway at `base`, sending no API key.
    pub fn new(base: String) -> CmdcClient {
        CmdcClient { base, key: None }
    }

    /// This client sending `key` (another tenant's, say).
    pub fn with_key(&self, key: &str) -> CmdcClient {
        CmdcClient {
            base: self.base.clone(),
            key: Some(key.to_owned()),
        }
    }

    /// `method <base><path>` with `body` (none when `None`), as cmdc-sdk sends it.
    fn request(&self, method: Method, path: &str, body: Option<&Value>) -> Request<Full<Bytes>> {
        let accept = if path.ends_with("/events") {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .header("accept", accept);
        if let Some(key) = &self.key {
            request = request.header("x-api-key", key);
        }
        let body = body.map_or_else(Bytes::new, |body| Bytes::from(body.to_string()));
        request.body(Full::new(body)).expect("a request")
    }

    /// One call, answered as it is.
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Response {
        send(self.request(method, path, body.as_ref())).await
    }

    /// `method …/v1/sessions/<session><suffix>`.
    async fn on_session(
        &self,
        method: Method,
        session: &str,
        suffix: &str,
        body: Option<Value>,
    ) -> Response {
        let path = format!("/v1/sessions/{session}{suffix}");
        self.call(method, &path, body).await
    }

    /// `POST /v1/sessions` (201 `created`): the new session's id.
    pub async fn create(&self, body: Value) -> String {
        let response = self.call(Method::POST, "/v1/sessions", Some(body)).await;
        assert_eq!(response.status, StatusCode::CREATED);
        let body = response.json().await;
        assert_eq!(body["status"], "created");
        body["sessionId"].as_str().expect("a sessionId").to_owned()
    }

    /// `POST …/prompt {text}` (202): the answer's body.
    pub async fn prompt(&self, session: &str, text: &str) -> Value {
        let body = json!({ "text": text });
        let response = self
            .on_session(Method::POST, session, "/prompt", Some(body))
            .await;
        assert_eq!(response.status, StatusCode::ACCEPTED);
        response.json().await
    }

    /// `GET …/events` (200, SSE): the session's run events.
    pub async fn subscribe(&self, session: &str) -> SseStream {
        let response = self.on_session(Method::GET, session, "/events", None).await;
        assert_eq!(response.status, StatusCode::OK);
        assert_eq!(
            response.header("content-type"),
            "text/event-stream; charset=utf-8"
        );
        response.sse()
    }

    /// `POST …/tools`: registers a callback tool.
    pub async fn register(&self, session: &str, tool: Value) -> Response {
        self.on_session(Method::POST, session, "/tools", Some(tool))
            .await
    }

    /// `POST …/approve {approvalId}`.
    pub async fn approve(&self, session: &str, approval_id: &str) -> Response {
        let body = json!({ "approvalId": approval_id });
        self.on_session(Method::POST, session, "/approve", Some(body))
            .await
    }

    /// `POST …/reject {approvalId}`.
    pub async fn reject(&self, session: &str, approval_id: &str) -> Response {
        let body = json!({ "approvalId": approval_id });
        self.on_session(Method::POST, session, "/reject", Some(body))
            .await
    }

    /// `POST …/respond {ref, response}`.
    pub async fn respond(&self, session: &str, reference: &str, answer: &str) -> Response {
        let body = json!({"ref": reference, "response": answer});
        self.on_session(Method::POST, session, "/respond", Some(body))
            .await
    }

    /// `GET …/<session>`: the session's info.
    pub async fn info(&self, session: &str) -> Value {
        self.on_session(Method::GET, session, "", None)
            .await
            .json()
            .await
    }

    /// `GET …/messages`: the session's conversation.
    pub async fn messages(&self, session: &str) -> Value {
        self.on_session(Method::GET, session, "/messages", None)
            .await
            .json()
            .await
    }

    /// Polls the session's info until its `state` is `state`; that info.
    pub async fn wait_state(&self, session: &str, state: &str) -> Value {
        within(&format!("session state {state}"), async {
            loop {
                let info = self.info(session).await;
                if info["state"] == state {
                    return info;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
    }
}
