//! One `[[routes]]` entry and the tables inside it.

use std::time::Duration;

use http::{HeaderName, HeaderValue, Uri};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

use super::{de, Outbound, Protocol};

/// One `[[routes]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Unique and non-empty; used in logs and metrics.
    #[serde(deserialize_with = "de::non_empty")]
    pub name: String,
    /// The inbound mount point: starts with `/`, no trailing `/`, no query or fragment, unique.
    #[serde(deserialize_with = "de::mount_path")]
    pub path: String,
    pub inbound: Protocol,
    pub outbound: Outbound,
    /// Absolute http(s) URL; `Some` exactly when `outbound` is not echo.
    #[serde(default, deserialize_with = "de::upstream_url")]
    pub upstream: Option<Uri>,
    /// The whole upstream run.
    #[serde(default = "default_timeout", deserialize_with = "de::duration")]
    pub timeout: Duration,
    #[serde(default = "default_connect_timeout", deserialize_with = "de::duration")]
    pub connect_timeout: Duration,
    /// Largest accepted request body, in bytes.
    #[serde(default = "default_max_body", deserialize_with = "de::byte_size")]
    pub max_body: usize,
    /// Sent on every upstream request, in file order; values are marked sensitive.
    #[serde(default, deserialize_with = "de::headers")]
    pub upstream_headers: Vec<(HeaderName, HeaderValue)>,
    #[serde(default)]
    pub translate: Translate,
    /// What an a2a inbound route advertises in its agent card; accepted, unused, on other inbounds.
    pub card: Option<Card>,
    /// `[routes.api_keys]`: each API key clients may send and the tenant it belongs to (`"sk-abc" =
    /// "acme"`); keys expand `${VAR}`. Absent: the route takes any key, or none, for one tenant
    /// (src/auth.rs).
    #[serde(default, deserialize_with = "de::api_keys")]
    pub api_keys: Vec<(String, String)>,
    /// Requests per minute each API key may make (a token bucket of that size), or each client address on a
    /// route without keys; absent: no limit.
    #[serde(default, deserialize_with = "de::rate_limit")]
    pub rate_limit: Option<std::num::NonZeroU32>,
    /// Requests per minute per client address: every request of a route without keys, and every refused
    /// one (no key, a wrong key) of a route with keys; absent: no limit.
    #[serde(default, deserialize_with = "de::rate_limit")]
    pub rate_limit_ip: Option<std::num::NonZeroU32>,
    /// a2a inbound only: the agent card needs an API key too (default: the card is public).
    #[serde(default)]
    pub card_auth: bool,
    /// The origins (`https://app.example`) whose web pages may call the route from a browser (CORS). Absent:
    /// no CORS headers at all, so browsers keep other origins' pages from reading the answers.
    #[serde(default, deserialize_with = "de::cors_origins")]
    pub cors_origins: Vec<String>,
    /// `[routes.jwt]`: bearer tokens signed by an identity provider admit clients too (src/auth.rs).
    pub jwt: Option<JwtConfig>,
    /// `[routes.quota]`: what one tenant may hold at once.
    #[serde(default)]
    pub quota: Quota,
    /// cmdc inbound only: where the URLs clients hand over (callback tools) may lead besides the
    /// registering client's own address (src/egress.rs): IPs, CIDR blocks or host names, each with an
    /// optional `:port`.
    #[serde(default, deserialize_with = "de::callback_allow")]
    pub callback_allow: Vec<crate::egress::Pattern>,
    /// Reading a whole request body; a slower client is refused with 408.
    #[serde(default = "default_body_timeout", deserialize_with = "de::duration")]
    pub body_timeout: Duration,
    /// cmdc inbound only: a WebSocket with no frame from the client for this long is closed; absent:
    /// [`DEFAULT_WS_IDLE`].
    #[serde(default, deserialize_with = "de::some_duration")]
    pub ws_idle: Option<Duration>,
    /// cmdc inbound only: the bytes of a run's events kept for subscribers that arrive late (or fall
    /// behind); absent: [`DEFAULT_RUN_BUFFER`].
    #[serde(default, deserialize_with = "de::some_byte_size")]
    pub run_buffer: Option<usize>,
    /// Where the file sets the keys that warnings name.
    #[serde(skip)]
    pub written: Written,
}

/// Where a route's keys sit in its file, for the warnings given once it is parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// The line of the route's `outbound`.
    pub outbound_line: usize,
    /// The `[routes.translate]` keys the file sets, each with its line.
    pub translate: Vec<(String, usize)>,
}

/// `pem` as a key for `algorithm`'s family, if it is one: how `check` reads `public_key`, and how auth uses it.
pub fn decoding_key(pem: &str, algorithm: Algorithm) -> Option<DecodingKey> {
    use Algorithm::*;
    let pem = pem.as_bytes();
    match algorithm {
        RS256 | RS384 | RS512 | PS256 | PS384 | PS512 => DecodingKey::from_rsa_pem(pem).ok(),
        ES256 | ES384 => DecodingKey::from_ec_pem(pem).ok(),
        EdDSA => DecodingKey::from_ed_pem(pem).ok(),
        HS256 | HS384 | HS512 => None,
    }
}

/// `[routes.jwt]`: which signed tokens admit a client, and which claim names its tenant.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// The `iss` every token must carry.
    #[serde(deserialize_with = "de::non_empty")]
    pub issuer: String,
    /// A value the token's `aud` (a string or a list) must hold.
    #[serde(deserialize_with = "de::non_empty")]
    pub audience: String,
    /// The identity provider's key set: https, or http to a loopback host; exactly one of this and
    /// `public_key`.
    #[serde(default, deserialize_with = "de::jwks_url")]
    pub jwks_url: Option<Uri>,
    /// One PEM public key (`${VAR}` expands).
    #[serde(default, deserialize_with = "de::expanded")]
    pub public_key: Option<String>,
    /// The signature algorithms accepted (`RS256`, `ES256`, `EdDSA`, ...); never `none` or HMAC.
    #[serde(deserialize_with = "de::jwt_algorithms")]
    pub algorithms: Vec<jsonwebtoken::Algorithm>,
    /// The claim whose string value is the caller's tenant (default `sub`).
    #[serde(default = "default_tenant_claim", deserialize_with = "de::non_empty")]
    pub tenant_claim: String,
    /// The least time between two JWKS fetches that a token with an unknown `kid` triggers (default 60s),
    /// so that forged `kid`s cannot make the proxy hammer the identity provider.
    #[serde(default = "default_jwks_refresh", deserialize_with = "de::duration")]
    pub jwks_refresh: Duration,
}

/// `[routes.quota]`: per tenant of the route; absent keys: only the route-wide bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Quota {
    /// cmdc inbound: sessions one tenant keeps (beyond: 422 `create_failed` `:too_many_sessions`).
    #[serde(deserialize_with = "de::quota")]
    pub sessions: Option<std::num::NonZeroUsize>,
    /// a2a inbound: tasks one tenant keeps; its least recently used finished task makes room, and while every
    /// one of them runs a new one is refused (-32051).
    #[serde(deserialize_with = "de::quota")]
    pub tasks: Option<std::num::NonZeroUsize>,
    /// Every inbound: conversations one tenant keeps in the store; its least recently used one that waits on
    /// nobody makes room, and while every one of them is paused a new one is refused (too many).
    #[serde(deserialize_with = "de::quota")]
    pub conversations: Option<std::num::NonZeroUsize>,
    /// Every inbound: runs one tenant streams at once (beyond: too many, until one ends).
    #[serde(deserialize_with = "de::quota")]
    pub streams: Option<std::num::NonZeroUsize>,
}

fn default_tenant_claim() -> String {
    "sub".to_owned()
}

fn default_jwks_refresh() -> Duration {
    Duration::from_secs(60)
}

/// `ws_idle` when absent: the CMDC gateway's own WebSocket `idle_timeout`.
pub const DEFAULT_WS_IDLE: Duration = Duration::from_secs(300);
/// `run_buffer` when absent.
pub const DEFAULT_RUN_BUFFER: usize = 8 << 20;

fn default_timeout() -> Duration {
    Duration::from_secs(120)
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_max_body() -> usize {
    1024 * 1024
}

fn default_body_timeout() -> Duration {
    Duration::from_secs(30)
}

/// `[routes.translate]`: the pair's options.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Translate {
    /// The AG-UI frontend tool that carries approval interrupts.
    #[serde(deserialize_with = "de::non_empty")]
    pub approval_tool: String,
    /// The AG-UI frontend tool that carries question interrupts.
    #[serde(deserialize_with = "de::non_empty")]
    pub question_tool: String,
    /// For upstreams that need one (CMDC sessions, AgentScope).
    pub model: Option<String>,
    /// How an AG-UI client is paused: a call of the approval or question tool, or `RUN_FINISHED.outcome`.
    pub agui_interrupts: AguiInterrupts,
    /// true: send reasoning as `REASONING_*` events (0.0.59+ clients; 0.0.36 rejects them) instead of
    /// `CUSTOM agent-bridge.reasoning` events.
    pub agui_reasoning: bool,
    /// e.g. "1.0": sent upstream as `protocolVersion` when the upstream is AG-UI 1.0.
    pub agui_protocol_version: Option<String>,
    /// A2A upstreams: `"auto"` reads the agent card at the upstream's `/.well-known/agent-card.json` (then
    /// `agent.json`) to learn whether it streams; an absolute URL reads the card there. Absent: the upstream
    /// is taken to stream (`message/stream`).
    pub a2a_card: Option<String>,
    /// A2A inbound: also put the whole reply text in the final `status.message`, for clients that ignore
    /// artifacts (`@ag-ui/a2a`).
    pub a2a_status_message: bool,
    /// AgentScope inbound: the client sends only its new messages and relies on `session_id` for memory (as
    /// the shipped client's `create_simple_text_request` does); the proxy keeps the session's history.
    /// Default: `input` is the whole conversation.
    pub agentscope_session_memory: bool,
    /// The proxy's own base URL as the upstream reaches it, for upstreams that call back (a CMDC gateway
    /// calling the client's tools). Default: the address the proxy listens on (127.0.0.1 for an unspecified
    /// address).
    pub proxy_url: Option<String>,
    /// Words that approve, added to the built-in English and Chinese lists (`src/answers.rs`).
    #[serde(deserialize_with = "de::words")]
    pub approval_words: Vec<String>,
    /// Words that reject, added to the built-in lists.
    #[serde(deserialize_with = "de::words")]
    pub rejection_words: Vec<String>,
}

impl Default for Translate {
    fn default() -> Self {
        Translate {
            approval_tool: "confirmAction".to_owned(),
            question_tool: "ask_user".to_owned(),
            model: None,
            agui_interrupts: AguiInterrupts::Auto,
            agui_reasoning: false,
            agui_protocol_version: None,
            a2a_card: None,
            a2a_status_message: false,
            agentscope_session_memory: false,
            proxy_url: None,
            approval_words: Vec::new(),
            rejection_words: Vec::new(),
        }
    }
}

/// `agui_interrupts`: how a pause reaches an AG-UI client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AguiInterrupts {
    /// A call of the route's approval or question tool when the client declared that tool in the run's
    /// `tools` (it has a handler for it), otherwise `outcome`.
    #[default]
    Auto,
    /// Always a call of the approval or question tool.
    Tool,
    /// Always `RUN_FINISHED.outcome.interrupt` (clients 0.0.59 and 1.0), after a text message stating the
    /// question (0.0.36 ignores `outcome`).
    Outcome,
}

impl<'de> Deserialize<'de> for AguiInterrupts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Flag(bool),
            Name(String),
        }
        match Written::deserialize(d)? {
            // Files written before the modes existed: `true` paused with the outcome, `false` with a tool.
            Written::Flag(outcome) => {
                let mode = if outcome { "outcome" } else { "tool" };
                tracing::warn!(
                    "`agui_interrupts = {outcome}` is deprecated: it reads as \"{mode}\"; \
                     write \"auto\", \"tool\" or \"outcome\""
                );
                Ok(if outcome { Self::Outcome } else { Self::Tool })
            }
            Written::Name(name) => match name.as_str() {
                "auto" => Ok(Self::Auto),
                "tool" => Ok(Self::Tool),
                "outcome" => Ok(Self::Outcome),
                other => Err(serde::de::Error::custom(format!(
                    "expected \"auto\", \"tool\" or \"outcome\", not {other:?}"
                ))),
            },
        }
    }
}

/// `[routes.card]`: what an A2A inbound route advertises in its agent card.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Card {
    pub name: Option<String>,
    pub description: Option<String>,
    pub version: Option<String>,
    pub skills: Vec<Skill>,
}

/// One entry of `skills = [{ id, name, description }]`; ids are unique within a card.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skill {
    #[serde(deserialize_with = "de::non_empty")]
    pub id: String,
    #[serde(deserialize_with = "de::non_empty")]
    pub name: String,
    pub description: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub examples: Vec<String>,
}
