//! One error type for the whole proxy. It records where a failure came from (the client, the upstream, the
//! configuration, or the proxy itself) and what went wrong, so each protocol can map it to its own native
//! error (an HTTP status, a `RUN_ERROR`, a JSON-RPC error, ...) in one place.

use std::fmt;

/// Where an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The inbound client sent something we cannot serve.
    Client,
    /// The upstream agent failed, or answered something we cannot read.
    Upstream,
    /// The configuration is wrong.
    Config,
    /// A bug or resource failure inside the proxy, or the proxy shutting down.
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    BadRequest,
    NotFound,
    MethodNotAllowed,
    /// No API key, or one the route does not know; `presented`: one was sent.
    Unauthorized {
        presented: bool,
    },
    /// A URL the client handed over leads where the route's policy does not let the proxy go.
    Forbidden,
    UnsupportedMediaType,
    PayloadTooLarge,
    RequestTimeout,
    /// Over the route's rate limit; the client may try again after this many seconds.
    RateLimited {
        retry_after: u64,
    },
    /// What decides whether a client is let in (the identity provider's key set) cannot be reached.
    AuthUnavailable,
    /// The conversation store (Redis) cannot be reached: a turn cannot read or keep its conversation.
    StoreUnavailable,
    Unreachable,
    Timeout,
    Status(u16),
    Malformed,
    Eof,
    /// The upstream agent reported a failure of its own, with its own code.
    Agent(String),
    Cancelled,
    /// The proxy is shutting down and ended the run.
    ShuttingDown,
    Config,
    Internal,
}

/// An error with its source. Opaque: ask it with the `is_*` queries, [`Error::code`] and
/// [`Error::http_status`].
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    inner: Box<Inner>,
}

#[derive(Clone, PartialEq, Eq)]
struct Inner {
    kind: Kind,
    message: String,
}

impl Error {
    fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
            }),
        }
    }

    /// The client's request is malformed (bad JSON, wrong types, missing fields).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Kind::BadRequest, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Kind::NotFound, message)
    }
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(Kind::MethodNotAllowed, message)
    }
    /// The client sent no API key (`presented: false`) or one the route does not know.
    pub fn unauthorized(presented: bool) -> Self {
        Self::new(
            Kind::Unauthorized { presented },
            "Missing or invalid API key",
        )
    }
    /// The client made more requests than the route allows; it may try again after `retry_after` seconds.
    pub fn rate_limited(retry_after: u64) -> Self {
        Self::new(Kind::RateLimited { retry_after }, "Rate limit exceeded")
    }
    /// The proxy holds as much conversation state as it may, all of it runs waiting on their users: a new
    /// conversation must wait (answered as each protocol answers "too many").
    pub fn store_full() -> Self {
        Self::too_many(
            "The conversation store is full of paused runs; try again later",
            60,
        )
    }
    /// The client holds as much as the route lets one tenant hold (`[routes.quota]`), or the proxy as much as
    /// it may: answered as each protocol answers "too many", to try again after `retry_after` seconds.
    pub fn too_many(message: impl Into<String>, retry_after: u64) -> Self {
        Self::new(Kind::RateLimited { retry_after }, message)
    }
    /// The client asked the proxy to reach somewhere the route's policy does not allow.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(Kind::Forbidden, message)
    }
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(Kind::UnsupportedMediaType, message)
    }
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            Kind::PayloadTooLarge,
            format!("request body is larger than the limit of {limit} bytes"),
        )
    }
    /// The client did not send its whole request body within `limit`.
    pub fn request_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            Kind::RequestTimeout,
            format!("the request body did not arrive within {limit:?}"),
        )
    }
    /// The proxy cannot tell whether the client may come in (its identity provider is unreachable).
    pub fn auth_unavailable(message: impl Into<String>) -> Self {
        Self::new(Kind::AuthUnavailable, message)
    }
    /// The conversation store cannot be reached; the client may try again (the proxy reconnects by itself).
    pub fn store_unavailable(message: impl Into<String>) -> Self {
        Self::new(Kind::StoreUnavailable, message)
    }
    /// The upstream could not be reached (refused, DNS, TLS, connect timeout).
    pub fn upstream_unreachable(message: impl Into<String>) -> Self {
        Self::new(Kind::Unreachable, message)
    }
    /// The upstream run took longer than the route allows.
    pub fn upstream_timeout(message: impl Into<String>) -> Self {
        Self::new(Kind::Timeout, message)
    }
    /// The upstream answered with a non-success HTTP status.
    pub fn upstream_status(status: u16, body: &str) -> Self {
        let body = crate::logging::char_prefix(body.trim(), 512);
        let message = if body.is_empty() {
            format!("upstream answered HTTP {status}")
        } else {
            format!("upstream answered HTTP {status}: {body}")
        };
        Self::new(Kind::Status(status), message)
    }
    /// The upstream sent something that is not its protocol.
    pub fn upstream_malformed(message: impl Into<String>) -> Self {
        Self::new(Kind::Malformed, message)
    }
    /// The upstream stream ended before the run did.
    pub fn upstream_eof() -> Self {
        Self::new(Kind::Eof, "upstream stream ended before the run finished")
    }
    /// The upstream agent reported a failure of its own; `code` is its code (or a generic one).
    pub fn upstream_agent(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Kind::Agent(code.into()), message)
    }
    /// The run was cancelled (by the client, or by the upstream).
    pub fn cancelled(message: impl Into<String>) -> Self {
        Self::new(Kind::Cancelled, message)
    }
    /// The proxy is shutting down: a run still going at the end of its grace is ended with this.
    pub fn shutting_down() -> Self {
        Self::new(
            Kind::ShuttingDown,
            "the proxy is shutting down; the run was ended before it finished",
        )
    }
    /// A run another replica (or this process before a restart) drove stopped being driven before its end,
    /// or outgrew what the store keeps of one: its follower cannot read the rest.
    pub fn run_lost() -> Self {
        Self::internal(
            "the rest of this run cannot be read: the proxy running it stopped, or the run outgrew what \
             the store keeps of one",
        )
    }
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(Kind::Config, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Kind::Internal, message)
    }

    pub fn source(&self) -> Source {
        match self.inner.kind {
            Kind::BadRequest
            | Kind::NotFound
            | Kind::MethodNotAllowed
            | Kind::Unauthorized { .. }
            | Kind::Forbidden
            | Kind::UnsupportedMediaType
            | Kind::PayloadTooLarge
            | Kind::RequestTimeout
            | Kind::RateLimited { .. } => Source::Client,
            Kind::Unreachable
            | Kind::Timeout
            | Kind::Status(_)
            | Kind::Malformed
            | Kind::Eof
            | Kind::Agent(_)
            | Kind::Cancelled => Source::Upstream,
            Kind::Config => Source::Config,
            Kind::Internal
            | Kind::AuthUnavailable
            | Kind::StoreUnavailable
            | Kind::ShuttingDown => Source::Internal,
        }
    }

    pub fn is_client(&self) -> bool {
        self.source() == Source::Client
    }
    pub fn is_upstream(&self) -> bool {
        self.source() == Source::Upstream
    }
    pub fn is_unauthorized(&self) -> bool {
        matches!(self.inner.kind, Kind::Unauthorized { .. })
    }
    /// Whether a refused client sent a key at all (the challenge then names the error, RFC 6750 §3.1).
    pub fn presented_credentials(&self) -> bool {
        matches!(self.inner.kind, Kind::Unauthorized { presented: true })
    }
    /// For a rate-limited client: after how many seconds it may try again.
    pub fn retry_after(&self) -> Option<u64> {
        match self.inner.kind {
            Kind::RateLimited { retry_after } => Some(retry_after),
            _ => None,
        }
    }
    /// Whether something the proxy needs for every turn (the identity provider, the store) is unreachable:
    /// a 503, never a 401 or a 500.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self.inner.kind,
            Kind::AuthUnavailable | Kind::StoreUnavailable
        )
    }
    pub fn is_forbidden(&self) -> bool {
        self.inner.kind == Kind::Forbidden
    }
    pub fn is_timeout(&self) -> bool {
        self.inner.kind == Kind::Timeout
    }
    pub fn is_cancelled(&self) -> bool {
        self.inner.kind == Kind::Cancelled
    }
    /// The HTTP status of an upstream's non-success answer.
    pub fn upstream_status_code(&self) -> Option<u16> {
        match self.inner.kind {
            Kind::Status(status) => Some(status),
            _ => None,
        }
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// A stable, protocol-neutral code (`INVALID_REQUEST`, `UPSTREAM_TIMEOUT`, ...). For an error the
    /// upstream agent reported itself, its own code.
    pub fn code(&self) -> &str {
        match &self.inner.kind {
            Kind::Agent(code) => code,
            _ => self.code_label(),
        }
    }

    /// The code as metrics label it: [`Error::code`], except `AGENT_ERROR` for every code an agent reported
    /// itself (those are the agent's to choose, so there is no bound on how many there are).
    pub fn code_label(&self) -> &'static str {
        match &self.inner.kind {
            Kind::BadRequest => "INVALID_REQUEST",
            Kind::NotFound => "NOT_FOUND",
            Kind::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Kind::Unauthorized { .. } => "UNAUTHORIZED",
            Kind::Forbidden => "FORBIDDEN",
            Kind::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Kind::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Kind::RequestTimeout => "REQUEST_TIMEOUT",
            Kind::RateLimited { .. } => "RATE_LIMITED",
            Kind::AuthUnavailable => "AUTH_UNAVAILABLE",
            Kind::StoreUnavailable => "STORE_UNAVAILABLE",
            Kind::Unreachable => "UPSTREAM_UNREACHABLE",
            Kind::Timeout => "UPSTREAM_TIMEOUT",
            Kind::Status(_) => "UPSTREAM_HTTP_ERROR",
            Kind::Malformed => "UPSTREAM_MALFORMED",
            Kind::Eof => "UPSTREAM_EOF",
            Kind::Agent(_) => "AGENT_ERROR",
            Kind::Cancelled => "cancelled",
            Kind::ShuttingDown => "SHUTTING_DOWN",
            Kind::Config => "CONFIG_ERROR",
            Kind::Internal => "INTERNAL_ERROR",
        }
    }

    /// The HTTP status an inbound answers with when the error happens before any stream starts.
    pub fn http_status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self.inner.kind {
            Kind::BadRequest => S::BAD_REQUEST,
            Kind::NotFound => S::NOT_FOUND,
            Kind::MethodNotAllowed => S::METHOD_NOT_ALLOWED,
            Kind::Unauthorized { .. } => S::UNAUTHORIZED,
            Kind::Forbidden => S::FORBIDDEN,
            Kind::UnsupportedMediaType => S::UNSUPPORTED_MEDIA_TYPE,
            Kind::PayloadTooLarge => S::PAYLOAD_TOO_LARGE,
            Kind::RequestTimeout => S::REQUEST_TIMEOUT,
            Kind::RateLimited { .. } => S::TOO_MANY_REQUESTS,
            Kind::Timeout => S::GATEWAY_TIMEOUT,
            Kind::Unreachable | Kind::Status(_) | Kind::Malformed | Kind::Eof | Kind::Agent(_) => {
                S::BAD_GATEWAY
            }
            Kind::Cancelled
            | Kind::AuthUnavailable
            | Kind::StoreUnavailable
            | Kind::ShuttingDown => S::SERVICE_UNAVAILABLE,
            Kind::Config | Kind::Internal => S::INTERNAL_SERVER_ERROR,
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("source", &self.source())
            .field("code", &self.code())
            .field("message", &self.inner.message)
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_and_codes() {
        let e = Error::bad_request("missing field `threadId`");
        assert!(e.is_client());
        assert_eq!(e.code(), "INVALID_REQUEST");
        assert_eq!(e.http_status(), http::StatusCode::BAD_REQUEST);

        let e = Error::upstream_status(503, "  overloaded ");
        assert!(e.is_upstream());
        assert_eq!(e.message(), "upstream answered HTTP 503: overloaded");

        let e = Error::upstream_agent("boom", "agent crashed");
        assert_eq!(e.code(), "boom");
        assert_eq!(e.source(), Source::Upstream);
    }

    #[test]
    fn long_upstream_bodies_are_cut_on_a_char_boundary() {
        let body = "北".repeat(400);
        let e = Error::upstream_status(500, &body);
        assert!(e.message().len() < 600);
        assert!(e.message().ends_with('北'));
    }
}
