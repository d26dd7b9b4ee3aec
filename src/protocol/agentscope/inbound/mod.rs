//! AgentScope inbound: we are the runtime (`specs/agentscope.md` §4). `POST P/process` and `POST P` take an
//! `AgentRequest`; the run streams back as the runtime streams it ([`encode`]).
//!
//! Answers, as agentscope-runtime 1.1.6.post2 gives them (§1.5):
//! - a body that is not a JSON object: HTTP 422, FastAPI's `{"detail":[…]}` (`json_invalid`, `dict_type`,
//!   `missing`); a `Content-Type` that is not JSON counts as not a JSON object, as in FastAPI;
//! - a JSON object that does not fit `AgentRequest`: HTTP 200 `text/event-stream` with one frame
//!   `data: {"error": "<pydantic's text>"}` ([`crate::protocol::agentscope::validate`]), then the end;
//! - a request for a `user_id:session_id` whose run is still streaming: the same frame with
//!   `Task <user_id>:<session_id> is already in RUNNING state.` (the runtime's run lock, held until the run's
//!   event stream ends, so a client that read to the end may go on at once; our key is taken after the
//!   defaults, so anonymous requests, each with a fresh session, never collide);
//! - `"stream": false` streams all the same, as the runtime does.
//!
//! The proxy's own refusals use FastAPI's shape too: an unknown path 404 `{"detail":"Not Found"}`, a method
//! other than POST 405 `{"detail":"Method Not Allowed"}` (with `Allow: POST`), a body larger than the route's
//! `max_body` 413 `{"detail":"<why>"}` (the runtime has no limit), a missing or wrong API key 401
//! `{"detail":"Missing or invalid API key"}` (with `WWW-Authenticate`), too many requests 429
//! `{"detail":"Rate limit exceeded"}` (with `Retry-After`).
//!
//! The run lock is per tenant: another tenant's `user_id:session_id` is another conversation.

mod decode;
mod encode;

pub use decode::Reader;
pub use encode::{EncodeOptions, Encoder};

use std::collections::HashSet;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use futures_util::Stream;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::InboundOptions;
use crate::auth::{self, KeySources};
use crate::body::{self, Body};
use crate::detach::{self, Detached};
use crate::face::{encode_frames, lost_run_frames, InboundFace, RequestDecoder};
use crate::model::{Event, History, Turn};
use crate::mount::Mount;
use crate::route_state::RouteState;
use crate::sse;
use decode::Refusal;

pub struct Inbound {
    options: EncodeOptions,
    /// What `input` holds: the whole conversation, or only what is new in the session.
    history: History,
    running: Arc<Running>,
}

impl Inbound {
    /// Which sessions have a run going is `kept` across the route's reloads.
    pub fn new(options: InboundOptions, kept: &RouteState) -> Self {
        Self {
            history: if options.agentscope_session_memory {
                History::Delta
            } else {
                History::Full
            },
            options: EncodeOptions {
                question_tool: options.question_tool,
            },
            running: kept.keep((), Running::default),
        }
    }

    /// Answers one request body of `tenant`'s client. `start` runs a turn and returns its canonical events
    /// (RunStarted first, one terminal last; dropping the stream cancels the run): the route's translator,
    /// or a script in tests. `resumed`: the route's runs that outlive their clients and the request's
    /// `Last-Event-ID`, with `detach_grace`.
    pub async fn serve<F, S>(
        &self,
        body: &[u8],
        tenant: &str,
        resumed: Option<(&Arc<Detached>, Option<u64>)>,
        start: F,
    ) -> Response<Body>
    where
        F: FnOnce(Turn) -> S,
        S: Stream<Item = Event> + Send + Unpin + 'static,
    {
        let reader = Reader {
            question_tool: &self.options.question_tool,
        };
        let mut accepted = match reader.decode(body) {
            Ok(accepted) => accepted,
            Err(refused) => return reader.refuse(refused),
        };
        accepted.turn.history = self.history;
        accepted.turn.tenant = tenant.to_owned();
        // A run is named by its session: the session's live run, or the one the client read from
        // (`Last-Event-ID`), is picked up instead of refused as running.
        let key = detach::RunKey::new(tenant, &[&accepted.user_id, &accepted.session_id]);
        let kept = match resumed {
            Some((runs, last_event_id)) => {
                let (options, session_id) = (self.options.clone(), accepted.session_id.clone());
                let lost = Box::new(move |first: &[u8], last: &[u8]| {
                    lost_run_frames(Encoder::after(first, last, &session_id, options))
                });
                runs.resume(&key, last_event_id, lost).await
            }
            None => None,
        };
        if let Some(frames) = kept {
            return sse::stream_response(frames, sse::EVENT_STREAM_UTF8, sse::PING);
        }
        let run = format!("{}:{}", accepted.user_id, accepted.session_id);
        let Some(guard) = Running::enter(&self.running, (tenant.to_owned(), run.clone())) else {
            return error_frame(&format!("Task {run} is already in RUNNING state."));
        };
        let encoder = Encoder::new(
            &accepted.turn,
            &accepted.session_id,
            self.options.clone(),
            guard,
        );
        let frames = encode_frames(start(accepted.turn), encoder);
        match resumed {
            Some((runs, _)) => {
                sse::stream_response(runs.start(key, frames), sse::EVENT_STREAM_UTF8, sse::PING)
            }
            None => sse::stream_response(frames, sse::EVENT_STREAM_UTF8, sse::PING),
        }
    }
}

/// The run lock of the runtime: one streaming run per tenant and `user_id:session_id`.
#[derive(Default)]
struct Running {
    keys: Mutex<HashSet<RunKey>>,
}

/// A tenant and a `user_id:session_id`.
type RunKey = (String, String);

impl Running {
    fn enter(running: &Arc<Self>, key: RunKey) -> Option<RunGuard> {
        let mut keys = running.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.insert(key.clone()).then(|| RunGuard {
            running: Arc::clone(running),
            key,
        })
    }
}

/// Holds a key of [`Running`] until the run's event stream ends or is dropped.
pub struct RunGuard {
    running: Arc<Running>,
    key: RunKey,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let mut keys = self.running.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.remove(&self.key);
    }
}

/// FastAPI reads a body as JSON when it has no `Content-Type`, or an `application/json` or `+json` one.
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    let Some(value) = content_type else {
        return true;
    };
    let essence = value
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn refusal(refused: Refusal) -> Response<Body> {
    match refused {
        Refusal::Unprocessable(json) => body::json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::to_vec(&json).unwrap_or_default(),
        ),
        Refusal::Frame(text) => error_frame(&text),
    }
}

/// `{"detail": <message>}` with a status.
fn detail(status: StatusCode, message: &str) -> Response<Body> {
    let json = serde_json::to_vec(&json!({ "detail": message })).unwrap_or_default();
    body::json_response(status, json)
}

/// The runtime's bare error frame, `data: {"error": "<text>"}`, written as Python's `json.dumps` writes it,
/// then the end of the stream.
fn error_frame(text: &str) -> Response<Body> {
    let mut data = String::from("{\"error\": ");
    python_json_string(text, &mut data);
    data.push('}');
    let mut buf = bytes::BytesMut::new();
    sse::write_event(&mut buf, None, &data);
    sse::response(body::full(buf.freeze()), sse::EVENT_STREAM_UTF8)
}

/// A JSON string as Python's `json.dumps` writes it (`ensure_ascii`: everything outside printable ASCII
/// escaped, astral characters as surrogate pairs).
fn python_json_string(text: &str, out: &mut String) {
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(ch),
            _ => {
                let mut units = [0u16; 2];
                for unit in ch.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

impl InboundFace for Inbound {
    async fn handle(&self, request: Request<Incoming>, mount: &Mount) -> Response<Body> {
        if !matches!(mount.subpath(request.uri().path()), Some("" | "/process")) {
            return detail(StatusCode::NOT_FOUND, "Not Found");
        }
        let caller = match mount.access.admit(&request, KeySources::Headers).await {
            Ok(caller) => caller,
            Err(error) => {
                let refused = detail(error.http_status(), error.message());
                return auth::with_refusal_headers(refused, &error);
            }
        };
        if request.method() != Method::POST {
            return body::with_allow(
                detail(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed"),
                "POST",
            );
        }
        let json = is_json(request.headers().get(CONTENT_TYPE));
        let last_event_id = detach::last_event_id(request.headers());
        let bytes = match body::read_request(request.into_body(), mount.body_limit).await {
            Ok(bytes) => bytes,
            Err(error) => return detail(error.http_status(), error.message()),
        };
        if !json && !bytes.is_empty() {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            return refusal(decode::not_a_dict(Value::String(text)));
        }
        let translator = Arc::clone(&mount.translator);
        let resumed = mount.detached.as_ref().map(|runs| (runs, last_event_id));
        self.serve(&bytes, &caller.tenant, resumed, move |turn| {
            translator.start(turn)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Outcome;
    use futures_util::stream;
    use http_body_util::BodyExt;

    fn inbound() -> Inbound {
        Inbound::new(InboundOptions::default(), &RouteState::default())
    }

    async fn body_text(response: Response<Body>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn python_json_escapes_like_json_dumps() {
        let mut out = String::new();
        python_json_string("a\"b\\c\n北 😀\u{1}", &mut out);
        assert_eq!(out, r#""a\"b\\c\n\u5317 \ud83d\ude00\u0001""#);
    }

    #[test]
    fn json_content_types() {
        assert!(is_json(None));
        assert!(is_json(Some(&HeaderValue::from_static(
            "application/json; charset=utf-8"
        ))));
        assert!(is_json(Some(&HeaderValue::from_static(
            "application/vnd.x+json"
        ))));
        assert!(!is_json(Some(&HeaderValue::from_static("text/plain"))));
    }

    #[tokio::test]
    async fn a_second_run_of_the_same_session_is_refused_until_the_first_ends() {
        let inbound = inbound();
        let body = br#"{"input":[],"session_id":"s1","user_id":"u1"}"#;
        let first = inbound
            .serve(body, "acme", None, |_| stream::pending::<Event>())
            .await;
        let second = inbound
            .serve(body, "acme", None, |_| stream::empty::<Event>())
            .await;
        assert_eq!(
            second.headers()[CONTENT_TYPE],
            "text/event-stream; charset=utf-8"
        );
        assert_eq!(
            body_text(second).await,
            "data: {\"error\": \"Task u1:s1 is already in RUNNING state.\"}\n\n"
        );
        let finished = || {
            stream::iter([
                Event::RunStarted,
                Event::RunFinished {
                    outcome: Outcome::Completed,
                    usage: None,
                },
            ])
        };
        // Another tenant's same user and session is another run.
        let tenants = inbound.serve(body, "globex", None, |_| finished()).await;
        assert!(body_text(tenants)
            .await
            .contains("\"status\":\"completed\""));
        // Another user of the same session is another key.
        let other_user = br#"{"input":[],"session_id":"s1","user_id":"u2"}"#;
        let other = inbound
            .serve(other_user, "acme", None, |_| finished())
            .await;
        assert!(body_text(other).await.contains("\"status\":\"completed\""));
        drop(first);
        let third = inbound.serve(body, "acme", None, |_| finished()).await;
        assert!(body_text(third).await.contains("\"status\":\"completed\""));
    }
}
