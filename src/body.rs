//! HTTP plumbing every inbound shares: the response body type, and reading a request body within the
//! route's limit. Protocol-free.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use serde::Serialize;

use crate::error::{Error, Result};

/// The body of every response the proxy sends. Not `Sync`: a streamed body drives its run, whose future
/// need not be.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A whole body from bytes.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

/// A JSON response with the given status.
pub fn json_response(status: StatusCode, json: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(full(json));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// The answer to a request rejected before any stream, as the HTTP-native inbounds (AG-UI, AG-Kit) give it:
/// the error's status and `{"error":{"code","message"}}` (CloudBase's servers answer so), with `Allow:
/// allowed` on a 405, and the headers of an authentication or rate-limit refusal.
pub fn error_response(error: &Error, allowed: &'static str) -> Response<Body> {
    #[derive(Serialize)]
    struct ErrorBody<'a> {
        error: ErrorDetail<'a>,
    }
    #[derive(Serialize)]
    struct ErrorDetail<'a> {
        code: &'a str,
        message: &'a str,
    }
    let body = ErrorBody {
        error: ErrorDetail {
            code: error.code(),
            message: error.message(),
        },
    };
    let json = serde_json::to_vec(&body).unwrap_or_default();
    let response = with_allow(json_response(error.http_status(), json), allowed);
    crate::auth::with_refusal_headers(response, error)
}

/// Adds the `Allow` header a 405 answer must carry.
pub fn with_allow(mut response: Response<Body>, allowed: &'static str) -> Response<Body> {
    if response.status() == StatusCode::METHOD_NOT_ALLOWED {
        response
            .headers_mut()
            .insert(ALLOW, http::HeaderValue::from_static(allowed));
    }
    response
}

/// Checks the method of a request.
pub fn expect_method<B>(request: &Request<B>, method: Method) -> Result<()> {
    if request.method() == method {
        Ok(())
    } else {
        Err(Error::method_not_allowed(format!(
            "method {} is not allowed here; use {method}",
            request.method()
        )))
    }
}

/// Checks that a request declares a JSON body (`application/json`, or any `+json` type).
pub fn expect_json(headers: &HeaderMap) -> Result<()> {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if essence == "application/json" || essence.ends_with("+json") {
        Ok(())
    } else if content_type.is_empty() {
        Err(Error::unsupported_media_type(
            "missing Content-Type; send application/json",
        ))
    } else {
        Err(Error::unsupported_media_type(format!(
            "unsupported Content-Type `{content_type}`; send application/json"
        )))
    }
}

/// How much of a request body a route reads, and how long it waits for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimit {
    pub max_bytes: usize,
    pub timeout: Duration,
}

/// Reads a whole request body within `limit`: a larger one is refused with 413, a slower one with 408.
pub async fn read_request<B>(body: B, limit: BodyLimit) -> Result<Bytes>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::time::timeout(limit.timeout, read_limited(body, limit.max_bytes))
        .await
        .unwrap_or_else(|_| Err(Error::request_timeout(limit.timeout)))
}

/// Reads a whole body, refusing one larger than `limit` bytes.
pub async fn read_limited<B>(body: B, limit: usize) -> Result<Bytes>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(Error::payload_too_large(limit)),
        Err(error) => Err(Error::bad_request(format!(
            "reading the request body failed: {error}"
        ))),
    }
}
