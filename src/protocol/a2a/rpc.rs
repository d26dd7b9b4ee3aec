//! A2A inbound, the JSON-RPC 2.0 layer: the envelope checks, each answered with its own error code
//! (`specs/a2a.md` §4.3), typed params with errors that name the field, and the response bytes.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::wire::{self, code, RequestId, StreamResult, TaskState};
use crate::face::EventEncoder;
use crate::sse;

/// A JSON-RPC error to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn parse_error() -> Self {
        Self::new(code::PARSE_ERROR, "Invalid JSON payload")
    }

    pub fn invalid_request(detail: impl std::fmt::Display) -> Self {
        Self::new(code::INVALID_REQUEST, format!("Invalid request: {detail}"))
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            code::METHOD_NOT_FOUND,
            format!("Method not found: `{method}`"),
        )
    }

    pub fn invalid_params(detail: impl std::fmt::Display) -> Self {
        Self::new(
            code::INVALID_PARAMS,
            format!("Invalid parameters: {detail}"),
        )
    }

    pub fn terminal(task_id: &str, state: TaskState) -> Self {
        Self::new(
            code::INVALID_PARAMS,
            format!("Task {task_id} is in terminal state: {}", state.as_str()),
        )
    }

    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(code::INTERNAL_ERROR, format!("Internal error: {detail}"))
    }

    pub fn task_not_found(task_id: &str) -> Self {
        Self::new(code::TASK_NOT_FOUND, format!("Task not found: {task_id}"))
    }

    pub fn not_cancelable(task_id: &str, state: TaskState) -> Self {
        Self::new(
            code::TASK_NOT_CANCELABLE,
            format!(
                "Task cannot be canceled: {task_id} is in terminal state: {}",
                state.as_str()
            ),
        )
    }

    /// No API key, or one the route does not know (agent-bridge's own code, HTTP 401).
    pub fn unauthorized(message: &str) -> Self {
        Self::new(code::UNAUTHORIZED, message)
    }

    /// Over the route's rate limit (agent-bridge's own code, HTTP 429 with `Retry-After`).
    pub fn rate_limited(message: &str) -> Self {
        Self::new(code::RATE_LIMITED, message)
    }

    pub fn push_not_supported() -> Self {
        Self::new(
            code::PUSH_NOTIFICATION_NOT_SUPPORTED,
            "Push Notification is not supported",
        )
    }
}

/// A request whose envelope is valid.
#[derive(Debug)]
pub struct Envelope {
    pub id: RequestId,
    pub method: String,
    /// `None` when absent or `null`.
    pub params: Option<Value>,
}

/// Checks the envelope. A rejection carries the request id when it could be read, else `null`.
pub fn envelope(bytes: &[u8]) -> Result<Envelope, (RequestId, RpcError)> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|_| (RequestId::Null, RpcError::parse_error()))?;
    let mut object = match value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return Err((
                RequestId::Null,
                RpcError::invalid_request("batch requests are not supported"),
            ))
        }
        _ => {
            return Err((
                RequestId::Null,
                RpcError::invalid_request("the request must be a JSON object"),
            ))
        }
    };
    let id = match object.get("id") {
        Some(Value::String(id)) => Ok(Some(RequestId::String(id.clone()))),
        Some(Value::Number(n)) if n.is_i64() => {
            Ok(Some(RequestId::Number(n.as_i64().unwrap_or(0))))
        }
        None => Ok(None),
        Some(_) => Err("`id` must be a string or an integer"),
    };
    let readable = id.clone().ok().flatten().unwrap_or(RequestId::Null);
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((
            readable,
            RpcError::invalid_request("`jsonrpc` must be \"2.0\""),
        ));
    }
    let method = match object.remove("method") {
        Some(Value::String(method)) => method,
        None => {
            return Err((readable, RpcError::invalid_request("`method` is required")));
        }
        Some(_) => {
            return Err((
                readable,
                RpcError::invalid_request("`method` must be a string"),
            ))
        }
    };
    let id = id.map_err(|detail| (RequestId::Null, RpcError::invalid_request(detail)))?;
    let params = object.remove("params").filter(|p| !p.is_null());
    match id {
        Some(id) => Ok(Envelope { id, method, params }),
        None => Err((
            RequestId::Null,
            notification_error(&method, params.as_ref()),
        )),
    }
}

/// The methods of A2A 0.2.5 that agent-bridge serves.
const METHODS: [&str; 5] = [
    "message/send",
    "message/stream",
    "tasks/get",
    "tasks/cancel",
    "tasks/resubscribe",
];

/// The push-notification methods of A2A 0.2.5, which it refuses with -32003 (the card says
/// `pushNotifications: false`).
const PUSH_CONFIG_METHODS: [&str; 4] = [
    "tasks/pushNotificationConfig/set",
    "tasks/pushNotificationConfig/get",
    "tasks/pushNotificationConfig/list",
    "tasks/pushNotificationConfig/delete",
];

pub fn is_push_config(method: &str) -> bool {
    PUSH_CONFIG_METHODS.contains(&method)
}

/// Why a request without `id` (a notification, which no A2A method is) is refused: what is wrong with its
/// method or params first, as the A2A TCK expects, and only then that it has no `id`.
fn notification_error(method: &str, params: Option<&Value>) -> RpcError {
    if !METHODS.contains(&method) && !is_push_config(method) {
        RpcError::method_not_found(method)
    } else if params.is_some_and(|params| !params.is_object()) {
        RpcError::invalid_params("`params` must be an object")
    } else {
        RpcError::invalid_request("`id` is required (notifications are not supported)")
    }
}

/// The typed params of a method; -32602 naming the field when they do not fit.
pub fn params<T: DeserializeOwned>(params: Option<Value>) -> Result<T, RpcError> {
    let params = match params {
        None => return Err(RpcError::invalid_params("`params` is required")),
        Some(params @ Value::Object(_)) => params,
        Some(_) => return Err(RpcError::invalid_params("`params` must be an object")),
    };
    serde_path_to_error::deserialize(params).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner().to_string();
        match (inner.strip_prefix("missing field `"), path.as_str()) {
            (Some(rest), ".") => RpcError::invalid_params(format!("missing field `{rest}")),
            (Some(rest), path) => RpcError::invalid_params(format!("missing field `{path}.{rest}")),
            (None, ".") => RpcError::invalid_params(inner),
            (None, path) => RpcError::invalid_params(format!("`{path}`: {inner}")),
        }
    })
}

/// A result response as JSON.
pub fn result_json<R: Serialize>(id: &RequestId, result: &R) -> Vec<u8> {
    to_json(&result_response(id, result))
}

/// An error response as JSON.
pub fn error_json(id: &RequestId, error: &RpcError) -> Vec<u8> {
    to_json(&error_response(id, error))
}

/// A result response as one SSE frame.
pub fn result_frame<R: Serialize>(id: &RequestId, result: &R) -> Bytes {
    frame(&result_response(id, result))
}

/// The results of a stream, each a response to `id` in an SSE frame, written into the caller's buffer: every
/// result that is ready goes out in one write ([`crate::face::encode_frames`]).
pub struct ResultFrames(pub RequestId);

impl EventEncoder<Arc<StreamResult>> for ResultFrames {
    type Out = BytesMut;

    fn encode(&mut self, result: Arc<StreamResult>, out: &mut BytesMut) {
        sse::write_json_event(out, &result_response(&self.0, &*result));
    }
}

/// An error response as one SSE frame.
pub fn error_frame(id: &RequestId, error: &RpcError) -> Bytes {
    frame(&error_response(id, error))
}

fn result_response<'a, R>(id: &'a RequestId, result: R) -> wire::Response<'a, R> {
    wire::Response {
        jsonrpc: "2.0",
        id,
        body: wire::ResponseBody::Result(result),
    }
}

fn error_response<'a>(id: &'a RequestId, error: &RpcError) -> wire::Response<'a, ()> {
    wire::Response {
        jsonrpc: "2.0",
        id,
        body: wire::ResponseBody::Error(wire::JsonRpcError {
            code: error.code,
            message: error.message.clone(),
            data: None,
        }),
    }
}

/// `response` as one SSE frame, `data: <json>\n\n`.
fn frame<T: Serialize>(response: &T) -> Bytes {
    let mut buf = BytesMut::with_capacity(256);
    sse::write_json_event(&mut buf, response);
    buf.freeze()
}

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing our own wire types cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reject(body: &str) -> (RequestId, RpcError) {
        envelope(body.as_bytes()).expect_err("rejected")
    }

    #[test]
    fn envelope_errors_have_their_codes_and_echo_readable_ids() {
        assert_eq!(reject("{").1, RpcError::parse_error());
        assert_eq!(reject("[]").1.code, code::INVALID_REQUEST);
        assert_eq!(reject("7").1.code, code::INVALID_REQUEST);
        let (id, error) = reject(r#"{"jsonrpc":"1.0","id":"r1","method":"tasks/get"}"#);
        assert_eq!((id, error.code), (RequestId::String("r1".into()), -32600));
        let (id, error) = reject(r#"{"jsonrpc":"2.0","id":4,"method":7}"#);
        assert_eq!((id, error.code), (RequestId::Number(4), -32600));
        let (id, error) = reject(r#"{"jsonrpc":"2.0","id":1.5,"method":"tasks/get"}"#);
        assert_eq!((id, error.code), (RequestId::Null, -32600));
        let (id, error) = reject(r#"{"jsonrpc":"2.0","method":"tasks/get"}"#);
        assert_eq!((id, error.code), (RequestId::Null, -32600));
        let (_, error) = reject(r#"{"jsonrpc":"2.0","id":{"bad":"type"},"method":"x/y"}"#);
        assert_eq!(
            error.code, -32600,
            "an unreadable id is refused before the method"
        );
    }

    #[test]
    fn a_request_without_id_is_refused_for_its_method_or_params_first() {
        let (id, error) = reject(r#"{"jsonrpc":"2.0","method":"nonexistent/method","params":{}}"#);
        assert_eq!((id, error.code), (RequestId::Null, code::METHOD_NOT_FOUND));
        let (id, error) =
            reject(r#"{"jsonrpc":"2.0","method":"message/send","params":"not_a_dict"}"#);
        assert_eq!((id, error.code), (RequestId::Null, code::INVALID_PARAMS));
        let (_, error) = reject(r#"{"jsonrpc":"2.0","method":"message/send","params":{}}"#);
        assert_eq!(error.code, code::INVALID_REQUEST);
        let (_, error) = reject(r#"{"jsonrpc":"2.0","params":{}}"#);
        assert_eq!(
            error.code,
            code::INVALID_REQUEST,
            "a missing method is an invalid request"
        );
    }

    #[test]
    fn valid_envelope_keeps_id_type_and_treats_null_params_as_absent() {
        let call = envelope(br#"{"jsonrpc":"2.0","id":3,"method":"m","params":null}"#).unwrap();
        assert_eq!(call.id, RequestId::Number(3));
        assert_eq!(call.method, "m");
        assert!(call.params.is_none());
    }

    #[test]
    fn params_errors_name_the_field() {
        let err = params::<wire::TaskQueryParams>(Some(json!({}))).unwrap_err();
        assert_eq!(err.message, "Invalid parameters: missing field `id`");
        let err = params::<wire::MessageSendParams>(Some(json!({"message": {
            "kind": "message", "role": "user", "parts": []}})))
        .unwrap_err();
        assert_eq!(
            err.message,
            "Invalid parameters: missing field `message.messageId`"
        );
        let err = params::<wire::TaskQueryParams>(Some(json!({"id": 5}))).unwrap_err();
        assert_eq!(err.code, code::INVALID_PARAMS);
        assert!(
            err.message.contains("`id`: invalid type"),
            "{}",
            err.message
        );
        let err = params::<wire::TaskIdParams>(Some(json!([1]))).unwrap_err();
        assert_eq!(
            err.message,
            "Invalid parameters: `params` must be an object"
        );
    }

    #[test]
    fn responses_are_compact_json_rpc() {
        let id = RequestId::String("r1".into());
        assert_eq!(
            String::from_utf8(error_json(&RequestId::Null, &RpcError::parse_error())).unwrap(),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Invalid JSON payload"}}"#
        );
        assert_eq!(
            String::from_utf8(result_json(&id, &json!({"a": 1}))).unwrap(),
            r#"{"jsonrpc":"2.0","id":"r1","result":{"a":1}}"#
        );
        assert_eq!(
            &result_frame(&id, &json!({"text": "two\nlines"}))[..],
            b"data: {\"jsonrpc\":\"2.0\",\"id\":\"r1\",\"result\":{\"text\":\"two\\nlines\"}}\n\n"
        );
    }
}
