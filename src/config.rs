//! `routes.toml`: parsed once into typed, validated structs (DESIGN §5); nothing after
//! [`Config::parse`] looks at TOML again.
//!
//! Every error names the file, the 1-based line and the key path (`routes[1].translate.model`).
//! Errors found while deserializing carry toml's byte span; errors found afterwards (duplicates,
//! cross-field rules) carry a key path. A second, span-only pass over the same text (`spans`) turns
//! either one into the other, so neither kind of check has to track positions by hand.
//!
//! Choices the design leaves open, made here:
//! - `${VAR}` expands from the environment in `upstream`, `upstream_headers` values and `store.url`;
//!   `$$` is an escaped `$` (so `$${X}` is the literal `${X}`); any other `$` is literal.
//! - One route may be mounted at `/` (A2A 0.2.5 clients and the TCK find the card at the origin's
//!   `/.well-known/agent.json`). It serves only its inbound's own mounts; `/healthz` and every longer
//!   route path win over it.
//! - Zero is rejected for every duration (`timeout`, `connect_timeout`, `store.idle_ttl`) and for
//!   `max_body`: each would make the proxy refuse all work.
//! - Keys that the chosen setting would ignore are errors, never dropped silently: `upstream` or
//!   `upstream_headers` on an `echo` route, `store.path` unless redb, `store.url` unless redis.
//!   `[routes.card]` is the exception: DESIGN §5's own example puts one on an ag-ui route, so it is
//!   accepted on any route and used by a2a inbound ones.
//! - Upstream headers that the proxy itself must own (framing and hop-by-hop) are rejected, and all
//!   configured header values are marked sensitive because they usually carry credentials.
//! - A file with no routes is valid (the caller decides whether to serve an embedded default).

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::{HeaderName, HeaderValue, Uri};
use serde::Deserialize;

/// The default `listen` address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// An agent protocol, spelled in routes.toml as `ag-ui`, `a2a`, `agentscope`, `ag-kit`, `cmdc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    AgUi,
    A2a,
    Agentscope,
    AgKit,
    Cmdc,
}

impl Protocol {
    /// Every protocol, in the order the design lists them.
    pub const ALL: [Protocol; 5] = [
        Protocol::AgUi,
        Protocol::A2a,
        Protocol::Agentscope,
        Protocol::AgKit,
        Protocol::Cmdc,
    ];

    /// The routes.toml spelling.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::AgUi => "ag-ui",
            Protocol::A2a => "a2a",
            Protocol::Agentscope => "agentscope",
            Protocol::AgKit => "ag-kit",
            Protocol::Cmdc => "cmdc",
        }
    }

    /// The protocol spelled `name` in routes.toml, if any.
    pub fn from_name(name: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a route talks to: an upstream speaking a protocol, or the built-in echo agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outbound {
    Protocol(Protocol),
    Echo,
}

impl Outbound {
    /// The routes.toml spelling: a protocol name or `echo`.
    pub fn name(self) -> &'static str {
        match self {
            Outbound::Protocol(protocol) => protocol.name(),
            Outbound::Echo => "echo",
        }
    }
}

impl fmt::Display for Outbound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Outbound {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        const NAMES: &[&str] = &["ag-ui", "a2a", "agentscope", "ag-kit", "cmdc", "echo"];
        let name = String::deserialize(deserializer)?;
        match name.as_str() {
            "echo" => Ok(Outbound::Echo),
            other => Protocol::from_name(other)
                .map(Outbound::Protocol)
                .ok_or_else(|| serde::de::Error::unknown_variant(other, NAMES)),
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub listen: SocketAddr,
    pub connections: ConnectionLimits,
    pub store: StoreConfig,
    pub routes: Vec<RouteConfig>,
    /// `trusted_proxies`: the peers (IPs or CIDR blocks) whose `X-Forwarded-*` and `Forwarded` headers are
    /// believed; default none, so a client cannot name its own address or the proxy's public URL.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

/// The server-wide keys at the top level that bound connections: no route is known before a request's
/// headers have arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// `header_read_timeout`: how long a connection may take to send a request's headers (default 10s).
    pub header_read_timeout: Duration,
    /// `keepalive_idle`: a connection with no bytes either way for this long is closed (default 60s).
    pub keepalive_idle: Duration,
    /// `max_connections`: open connections beyond this many are answered 503 and closed (default 10000).
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(10),
            keepalive_idle: Duration::from_secs(60),
            max_connections: 10_000,
        }
    }
}

/// `[store]`: where conversation state lives.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    pub backend: StoreBackend,
    /// The redb file; required for, and only allowed with, `backend = "redb"`.
    pub path: Option<PathBuf>,
    /// `redis://` or `rediss://`; required for, and only allowed with, `backend = "redis"`.
    #[serde(deserialize_with = "de::redis_url")]
    pub url: Option<String>,
    /// Records idle this long expire; default 24h.
    #[serde(deserialize_with = "de::duration")]
    pub idle_ttl: Duration,
    /// The largest conversation record (default 8 MiB): a larger one loses its oldest messages.
    #[serde(deserialize_with = "de::byte_size")]
    pub max_record: usize,
    /// The whole store (default 1 GiB): beyond, the oldest idle records go, never a paused run's.
    #[serde(deserialize_with = "de::byte_size")]
    pub max_bytes: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: StoreBackend::Memory,
            path: None,
            url: None,
            idle_ttl: Duration::from_secs(24 * 60 * 60),
            max_record: 8 << 20,
            max_bytes: 1 << 30,
        }
    }
}

/// `store.backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    #[default]
    Memory,
    Redb,
    Redis,
}

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

/// The file's top level as written; becomes a [`Config`] only after validation, so a `Config`
/// cannot be deserialized around the checks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default = "default_listen", deserialize_with = "de::socket_addr")]
    listen: SocketAddr,
    #[serde(
        default = "default_header_read_timeout",
        deserialize_with = "de::duration"
    )]
    header_read_timeout: Duration,
    #[serde(default = "default_keepalive_idle", deserialize_with = "de::duration")]
    keepalive_idle: Duration,
    #[serde(
        default = "default_max_connections",
        deserialize_with = "de::max_connections"
    )]
    max_connections: usize,
    #[serde(default, deserialize_with = "de::trusted_proxies")]
    trusted_proxies: Vec<ipnet::IpNet>,
    #[serde(default)]
    store: StoreConfig,
    #[serde(default)]
    routes: Vec<RouteConfig>,
}

/// [`DEFAULT_LISTEN`] as an address (a test keeps the two equal).
fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

fn default_header_read_timeout() -> Duration {
    ConnectionLimits::default().header_read_timeout
}

fn default_keepalive_idle() -> Duration {
    ConnectionLimits::default().keepalive_idle
}

fn default_max_connections() -> usize {
    ConnectionLimits::default().max_connections
}

impl Config {
    /// Reads and parses the file at `path`; errors name it as given.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError {
            file: file.clone(),
            line: None,
            key: None,
            message: format!("cannot read the file: {err}"),
        })?;
        Config::parse(&text, &file)
    }

    /// Parses and validates `text`; `file` names the source in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let document: Document =
            toml::from_str(text).map_err(|err| ConfigError::from_toml(&err, text, file))?;
        validate(document).map_err(|issue| issue.locate(text, file))
    }
}

/// A config error: where (file, line, key path) and what.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", self.location())]
pub struct ConfigError {
    file: String,
    line: Option<usize>,
    key: Option<String>,
    message: String,
}

impl ConfigError {
    /// The file as named to [`Config::load`] or [`Config::parse`].
    pub fn file(&self) -> &str {
        &self.file
    }

    /// 1-based; `None` when the file could not be read (or toml gave no position, which the
    /// tests have not seen).
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The key path, e.g. `routes[0].timeout`; `None` for TOML syntax errors and unreadable files.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// What is wrong, without the location.
    pub fn message(&self) -> &str {
        &self.message
    }

    fn location(&self) -> String {
        let mut location = self.file.clone();
        if let Some(line) = self.line {
            location.push_str(&format!(":{line}"));
        }
        if let Some(key) = &self.key {
            location.push_str(&format!(": {key}"));
        }
        location
    }

    fn from_toml(err: &toml::de::Error, text: &str, file: &str) -> ConfigError {
        let message = err.message().trim_end().to_owned();
        let offset = err.span().map(|span| span.start);
        let key = offset
            .and_then(|offset| spans::Node::parse(text)?.path_at(offset))
            .map(|path| match missing_field(&message) {
                // toml points a missing field at its table; name the field itself.
                Some(field) => path.key(field),
                None => path,
            })
            .filter(|path| !path.is_root());
        ConfigError {
            file: file.to_owned(),
            line: offset.map(|offset| line_of(text, offset)),
            key: key.map(|path| path.to_string()),
            message,
        }
    }
}

/// The field named by serde's standard "missing field `x`" message.
fn missing_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("missing field `")?
        .split_once('`')
        .map(|(field, _)| field)
}

/// The 1-based line holding byte `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    let before = &text.as_bytes()[..offset.min(text.len())];
    1 + before.iter().filter(|&&byte| byte == b'\n').count()
}

/// A validation failure before it is placed in the file.
#[derive(Debug)]
struct Issue {
    path: KeyPath,
    message: String,
}

impl Issue {
    fn new(path: KeyPath, message: impl Into<String>) -> Issue {
        Issue {
            path,
            message: message.into(),
        }
    }

    /// Places the issue at its key, or at the nearest enclosing key present in the file when the
    /// key itself is missing (e.g. a required `upstream` reports its route's `[[routes]]` line).
    fn locate(self, text: &str, file: &str) -> ConfigError {
        let offset = spans::Node::parse(text).map_or(0, |tree| tree.offset_of(&self.path));
        ConfigError {
            file: file.to_owned(),
            line: Some(line_of(text, offset)),
            key: Some(self.path.to_string()),
            message: self.message,
        }
    }
}

/// The checks that need more than one value at a time.
fn validate(document: Document) -> Result<Config, Issue> {
    check_store(&document.store)?;
    for (index, route) in document.routes.iter().enumerate() {
        check_route(route, &KeyPath::route(index))?;
    }
    check_unique(&document.routes, "name", |route| &route.name)?;
    check_unique(&document.routes, "path", |route| &route.path)?;
    Ok(Config {
        listen: document.listen,
        connections: ConnectionLimits {
            header_read_timeout: document.header_read_timeout,
            keepalive_idle: document.keepalive_idle,
            max_connections: document.max_connections,
        },
        store: document.store,
        routes: document.routes,
        trusted_proxies: document.trusted_proxies,
    })
}

fn check_jwt(jwt: &JwtConfig, at: &KeyPath) -> Result<(), Issue> {
    let Some(pem) = &jwt.public_key else {
        return match jwt.jwks_url {
            Some(_) => Ok(()),
            None => Err(Issue::new(
                at.clone().key("jwks_url"),
                "required: set jwks_url or public_key",
            )),
        };
    };
    if jwt.jwks_url.is_some() {
        return Err(Issue::new(
            at.clone().key("public_key"),
            "set jwks_url or public_key, not both",
        ));
    }
    for &algorithm in &jwt.algorithms {
        if crate::auth::decoding_key(pem, algorithm).is_none() {
            return Err(Issue::new(
                at.clone().key("public_key"),
                format!("not a PEM public key that {algorithm:?} tokens can be checked with"),
            ));
        }
    }
    Ok(())
}

fn check_store(store: &StoreConfig) -> Result<(), Issue> {
    let at = |key: &str| KeyPath::default().key("store").key(key);
    if store.max_record > store.max_bytes {
        return Err(Issue::new(
            at("max_record"),
            "larger than store.max_bytes: no record that size could be kept",
        ));
    }
    match (store.backend, &store.path) {
        (StoreBackend::Redb, None) => return Err(Issue::new(at("path"), "required for redb")),
        (StoreBackend::Redb, Some(path)) if path.as_os_str().is_empty() => {
            return Err(Issue::new(at("path"), "must not be empty"))
        }
        (StoreBackend::Memory | StoreBackend::Redis, Some(_)) => {
            return Err(Issue::new(at("path"), "only used by the redb backend"))
        }
        _ => {}
    }
    match (store.backend, &store.url) {
        (StoreBackend::Redis, None) => Err(Issue::new(at("url"), "required for redis")),
        (StoreBackend::Memory | StoreBackend::Redb, Some(_)) => {
            Err(Issue::new(at("url"), "only used by the redis backend"))
        }
        _ => Ok(()),
    }
}

fn check_route(route: &RouteConfig, at: &KeyPath) -> Result<(), Issue> {
    match (route.outbound, &route.upstream) {
        (Outbound::Echo, Some(_)) => {
            return Err(Issue::new(
                at.clone().key("upstream"),
                "echo has no upstream",
            ))
        }
        (Outbound::Protocol(protocol), None) => {
            return Err(Issue::new(
                at.clone().key("upstream"),
                format!("required for outbound {protocol}"),
            ))
        }
        _ => {}
    }
    if route.outbound == Outbound::Echo && !route.upstream_headers.is_empty() {
        return Err(Issue::new(
            at.clone().key("upstream_headers"),
            "echo has no upstream to send headers to",
        ));
    }
    if route.inbound != Protocol::Cmdc {
        if !route.callback_allow.is_empty() {
            return Err(Issue::new(
                at.clone().key("callback_allow"),
                format!(
                    "only cmdc inbound routes take callback URLs from clients, not {}",
                    route.inbound
                ),
            ));
        }
        if route.ws_idle.is_some() {
            return Err(Issue::new(
                at.clone().key("ws_idle"),
                format!(
                    "only cmdc inbound routes serve a WebSocket, not {}",
                    route.inbound
                ),
            ));
        }
        if route.run_buffer.is_some() {
            return Err(Issue::new(
                at.clone().key("run_buffer"),
                format!(
                    "only cmdc inbound routes keep a run's events for late subscribers, not {}",
                    route.inbound
                ),
            ));
        }
    }
    if route.card_auth {
        if route.inbound != Protocol::A2a {
            return Err(Issue::new(
                at.clone().key("card_auth"),
                format!(
                    "only a2a inbound routes serve an agent card, not {}",
                    route.inbound
                ),
            ));
        }
        if route.api_keys.is_empty() && route.jwt.is_none() {
            return Err(Issue::new(
                at.clone().key("card_auth"),
                "needs [routes.api_keys] or [routes.jwt]: a route without either lets every client in",
            ));
        }
    }
    let quota_of = |key: &str, set: bool, inbound: Protocol| {
        if set && route.inbound != inbound {
            return Err(Issue::new(
                at.clone().key("quota").key(key),
                format!(
                    "only {inbound} inbound routes keep {key}, not {}",
                    route.inbound
                ),
            ));
        }
        Ok(())
    };
    quota_of("sessions", route.quota.sessions.is_some(), Protocol::Cmdc)?;
    quota_of("tasks", route.quota.tasks.is_some(), Protocol::A2a)?;
    if let Some(jwt) = &route.jwt {
        check_jwt(jwt, &at.clone().key("jwt"))?;
    }
    for (index, (key, _)) in route.api_keys.iter().enumerate() {
        if route.api_keys[..index]
            .iter()
            .any(|(earlier, _)| earlier == key)
        {
            return Err(Issue::new(
                at.clone().key("api_keys"),
                "two keys are the same API key after ${VAR} expansion",
            ));
        }
    }
    let needs_model = route.outbound == Outbound::Protocol(Protocol::Cmdc);
    // Only a CMDC client names a model (when it creates its session).
    if needs_model && route.inbound != Protocol::Cmdc && route.translate.model.is_none() {
        return Err(Issue::new(
            at.clone().key("translate").key("model"),
            format!(
                "required: a CMDC gateway creates each session with a model, and {} clients name none",
                route.inbound
            ),
        ));
    }
    if let Some(card) = &route.translate.a2a_card {
        let absolute = card.parse::<http::Uri>().is_ok_and(|uri| {
            matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
        });
        if card != "auto" && !absolute {
            return Err(Issue::new(
                at.clone().key("translate").key("a2a_card"),
                format!("expected \"auto\" or an absolute http(s) URL, not {card:?}"),
            ));
        }
    }
    if let Some(card) = &route.card {
        let skills = at.clone().key("card").key("skills");
        for (index, skill) in card.skills.iter().enumerate() {
            let earlier = card.skills[..index].iter().position(|s| s.id == skill.id);
            if let Some(first) = earlier {
                return Err(Issue::new(
                    skills.clone().index(index).key("id"),
                    format!("duplicate skill id {:?} (also skills[{first}])", skill.id),
                ));
            }
        }
    }
    Ok(())
}

/// Rejects the second route whose `key` (read by `value`) repeats an earlier one.
fn check_unique(
    routes: &[RouteConfig],
    key: &str,
    value: impl Fn(&RouteConfig) -> &String,
) -> Result<(), Issue> {
    let mut seen: HashMap<&String, usize> = HashMap::new();
    for (index, route) in routes.iter().enumerate() {
        if let Some(first) = seen.insert(value(route), index) {
            return Err(Issue::new(
                KeyPath::route(index).key(key),
                format!(
                    "duplicate route {key} {:?} (also routes[{first}])",
                    value(route)
                ),
            ));
        }
    }
    Ok(())
}

/// A dotted key path such as `routes[1].upstream_headers.Authorization`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct KeyPath(Vec<Segment>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

impl KeyPath {
    fn route(index: usize) -> KeyPath {
        KeyPath::default().key("routes").index(index)
    }

    fn key(mut self, key: &str) -> KeyPath {
        self.0.push(Segment::Key(key.to_owned()));
        self
    }

    fn index(mut self, index: usize) -> KeyPath {
        self.0.push(Segment::Index(index));
        self
    }

    fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (position, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Index(index) => write!(f, "[{index}]")?,
                Segment::Key(key) => {
                    if position > 0 {
                        f.write_str(".")?;
                    }
                    // Quote as TOML would, so the path can be pasted back into the file.
                    let bare = !key.is_empty()
                        && key
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                    if bare {
                        f.write_str(key)?;
                    } else {
                        write!(f, "{key:?}")?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Value checks that run inside deserialization, so toml attaches the offending value's span.
mod de {
    use std::fmt;
    use std::net::SocketAddr;
    use std::time::Duration;

    use http::{HeaderName, HeaderValue, Uri};
    use serde::de::{Error, MapAccess, Visitor};
    use serde::{Deserialize, Deserializer};

    const DURATION_EXAMPLES: &str = r#"(expected e.g. "30s", "2m", "1h", "250ms")"#;
    const SIZE_EXAMPLES: &str = r#"(expected a number of bytes or e.g. "512KiB", "1MiB", "2MB")"#;

    /// Headers the proxy sets itself (body framing, connection management); a configured value
    /// would corrupt the upstream request.
    const MANAGED_HEADERS: &[&str] = &[
        "connection",
        "content-length",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ];

    pub(super) fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        let value = String::deserialize(d)?;
        if value.trim().is_empty() {
            return Err(D::Error::custom("must not be empty"));
        }
        Ok(value)
    }

    pub(super) fn socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        let value = String::deserialize(d)?;
        value.parse().map_err(|_| {
            D::Error::custom(format!(
                r#"invalid socket address {value:?} (expected e.g. "127.0.0.1:8080" or "[::]:8080")"#
            ))
        })
    }

    /// Answer words: each one word (an answer is read word by word).
    pub(super) fn words<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        let words = Vec::<String>::deserialize(d)?;
        match words
            .iter()
            .find(|w| w.trim().is_empty() || w.trim().contains(char::is_whitespace))
        {
            Some(word) => Err(D::Error::custom(format!(
                "{word:?} is not one word; an answer is read word by word"
            ))),
            None => Ok(words),
        }
    }

    pub(super) fn mount_path<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        let path = String::deserialize(d)?;
        check_mount_path(&path)
            .map_err(|why| D::Error::custom(format!("invalid path {path:?}: {why}")))?;
        Ok(path)
    }

    fn check_mount_path(path: &str) -> Result<(), &'static str> {
        if !path.starts_with('/') {
            return Err("must start with \"/\"");
        }
        if path == "/" {
            // One route may serve the origin's root: A2A clients find the card at `/.well-known/...`.
            return Ok(());
        }
        if path.contains(['?', '#']) {
            return Err("must not contain a query or fragment");
        }
        if path.ends_with('/') {
            return Err("must not end with \"/\"");
        }
        if path[1..]
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
        {
            return Err("must not contain empty, \".\" or \"..\" segments");
        }
        if http::uri::PathAndQuery::try_from(path).is_err() {
            return Err("contains characters not allowed in a URL path");
        }
        Ok(())
    }

    pub(super) fn upstream_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Uri>, D::Error> {
        // Messages quote the text as written, before expansion, so secrets stay out of logs.
        let raw = String::deserialize(d)?;
        let url = expand_env(&raw).map_err(D::Error::custom)?;
        let uri: Uri = url
            .parse()
            .map_err(|err| D::Error::custom(format!("invalid URL {raw:?}: {err}")))?;
        let http = matches!(uri.scheme_str(), Some("http" | "https"));
        let Some(authority) = uri.authority().filter(|_| http) else {
            return Err(D::Error::custom(format!(
                "{raw:?} is not an absolute http:// or https:// URL"
            )));
        };
        // hyper ignores user info, so credentials written there would silently not be sent.
        if authority.as_str().contains('@') {
            return Err(D::Error::custom(format!(
                "{raw:?} has credentials in the URL; send them with [routes.upstream_headers]"
            )));
        }
        Ok(Some(uri))
    }

    /// `[routes.api_keys]`: API key (expanded) → tenant, both non-empty, in file order.
    pub(super) fn api_keys<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(String, String)>, D::Error> {
        struct KeysVisitor;

        impl<'de> Visitor<'de> for KeysVisitor {
            type Value = Vec<(String, String)>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of API keys to tenant names")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut keys = Vec::new();
                while let Some(ApiKey(key)) = map.next_key()? {
                    let Tenant(tenant) = map.next_value()?;
                    keys.push((key, tenant));
                }
                Ok(keys)
            }
        }

        struct ApiKey(String);

        impl<'de> Deserialize<'de> for ApiKey {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                // Not quoted in messages: after expansion it is a secret.
                let key = expand_env(&raw).map_err(D::Error::custom)?;
                if key.trim().is_empty() || key.chars().any(char::is_control) {
                    return Err(D::Error::custom(
                        "an API key must not be empty or contain control characters",
                    ));
                }
                Ok(ApiKey(key))
            }
        }

        struct Tenant(String);

        impl<'de> Deserialize<'de> for Tenant {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let tenant = String::deserialize(d)?;
                if tenant.trim().is_empty() {
                    return Err(D::Error::custom("the tenant name must not be empty"));
                }
                Ok(Tenant(tenant))
            }
        }

        d.deserialize_map(KeysVisitor)
    }

    /// A positive number of requests per minute.
    pub(super) fn rate_limit<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<std::num::NonZeroU32>, D::Error> {
        let n = i64::deserialize(d)?;
        u32::try_from(n)
            .ok()
            .and_then(std::num::NonZeroU32::new)
            .map(Some)
            .ok_or_else(|| {
                D::Error::custom(format!(
                    "expected a positive number of requests per minute, not {n}"
                ))
            })
    }

    /// Serialized origins: `http(s)://host[:port]`, nothing after.
    pub(super) fn cors_origins<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        let origins = Vec::<String>::deserialize(d)?;
        for origin in &origins {
            let uri = origin.parse::<Uri>().ok();
            let valid = uri.as_ref().is_some_and(|uri| {
                matches!(uri.scheme_str(), Some("http" | "https"))
                    && uri.host().is_some()
                    && format!(
                        "{}://{}",
                        uri.scheme_str().unwrap_or(""),
                        uri.authority().map_or("", |a| a.as_str())
                    ) == *origin
                    && !origin.contains('@')
            });
            if !valid {
                return Err(D::Error::custom(format!(
                    "invalid origin {origin:?} (expected scheme://host[:port] as browsers send it, e.g. \"https://app.example\")"
                )));
            }
        }
        Ok(origins)
    }

    /// A positive count of things one tenant may hold.
    pub(super) fn quota<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<std::num::NonZeroUsize>, D::Error> {
        let n = i64::deserialize(d)?;
        usize::try_from(n)
            .ok()
            .and_then(std::num::NonZeroUsize::new)
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("expected a positive number, not {n}")))
    }

    /// `trusted_proxies`: IPs or CIDR blocks.
    pub(super) fn trusted_proxies<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<ipnet::IpNet>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|entry| {
                entry
                    .parse::<ipnet::IpNet>()
                    .or_else(|_| entry.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| {
                        D::Error::custom(format!(
                            "invalid trusted_proxies entry {entry:?} (expected an IP or a CIDR block)"
                        ))
                    })
            })
            .collect()
    }

    /// A string with `${VAR}` expanded; not quoted in messages (it may hold a secret).
    pub(super) fn expanded<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let raw = String::deserialize(d)?;
        expand_env(&raw).map(Some).map_err(D::Error::custom)
    }

    /// `jwks_url`: https, or http only to a loopback host (a key set read in the clear could be forged on
    /// the way).
    pub(super) fn jwks_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Uri>, D::Error> {
        let raw = String::deserialize(d)?;
        let uri: Uri = expand_env(&raw)
            .map_err(D::Error::custom)?
            .parse()
            .map_err(|err| D::Error::custom(format!("invalid URL {raw:?}: {err}")))?;
        let loopback = |host: &str| {
            host == "localhost"
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        };
        match (uri.scheme_str(), uri.host()) {
            (Some("https"), Some(_)) => Ok(Some(uri)),
            (Some("http"), Some(host)) if loopback(host) => Ok(Some(uri)),
            (Some("http"), Some(_)) => Err(D::Error::custom(format!(
                "{raw:?}: a key set must come over https (http only from a loopback host)"
            ))),
            _ => Err(D::Error::custom(format!(
                "{raw:?} is not an absolute https:// URL"
            ))),
        }
    }

    /// `algorithms`: asymmetric signatures only. `none` is no signature, and an HMAC secret would be the
    /// public key itself, which anyone can read.
    pub(super) fn jwt_algorithms<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<jsonwebtoken::Algorithm>, D::Error> {
        use jsonwebtoken::Algorithm::{HS256, HS384, HS512};
        let names = Vec::<String>::deserialize(d)?;
        if names.is_empty() {
            return Err(D::Error::custom(
                "name at least one algorithm, e.g. [\"RS256\"]",
            ));
        }
        names
            .iter()
            .map(|name| match name.parse() {
                Ok(HS256 | HS384 | HS512) | Err(_) => Err(D::Error::custom(format!(
                    "{name:?} is not accepted: expected RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384 or EdDSA"
                ))),
                Ok(algorithm) => Ok(algorithm),
            })
            .collect()
    }

    pub(super) fn callback_allow<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<crate::egress::Pattern>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|entry| entry.parse().map_err(D::Error::custom))
            .collect()
    }

    /// A positive number of connections.
    pub(super) fn max_connections<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        let n = i64::deserialize(d)?;
        usize::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| {
            D::Error::custom(format!(
                "expected a positive number of connections, not {n}"
            ))
        })
    }

    pub(super) fn redis_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let raw = String::deserialize(d)?;
        let url = expand_env(&raw).map_err(D::Error::custom)?;
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(D::Error::custom(format!(
                "{raw:?} is not a redis:// or rediss:// URL"
            )));
        }
        Ok(Some(url))
    }

    pub(super) fn headers<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, D::Error> {
        d.deserialize_map(HeadersVisitor)
    }

    struct HeadersVisitor;

    impl<'de> Visitor<'de> for HeadersVisitor {
        type Value = Vec<(HeaderName, HeaderValue)>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table of header names to values")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut headers = Vec::new();
            // Name and value are separate types so each error carries its own span.
            while let Some(Name(name)) = map.next_key()? {
                let Value(value) = map.next_value()?;
                headers.push((name, value));
            }
            Ok(headers)
        }
    }

    struct Name(HeaderName);

    impl<'de> Deserialize<'de> for Name {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let raw = String::deserialize(d)?;
            let name = HeaderName::from_bytes(raw.as_bytes())
                .map_err(|_| D::Error::custom(format!("invalid header name {raw:?}")))?;
            if MANAGED_HEADERS.contains(&name.as_str()) {
                return Err(D::Error::custom(format!(
                    "header {raw:?} is managed by the proxy and cannot be configured"
                )));
            }
            Ok(Name(name))
        }
    }

    struct Value(HeaderValue);

    impl<'de> Deserialize<'de> for Value {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let raw = String::deserialize(d)?;
            let expanded = expand_env(&raw).map_err(D::Error::custom)?;
            // The value is not quoted: after expansion it is likely a secret.
            let mut value = HeaderValue::try_from(expanded).map_err(|_| {
                D::Error::custom("invalid header value (control characters or non-visible bytes)")
            })?;
            value.set_sensitive(true);
            Ok(Value(value))
        }
    }

    /// An integer or a string, as written; durations and sizes accept both.
    enum Scalar {
        Int(i64),
        Str(String),
    }

    impl fmt::Display for Scalar {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Scalar::Int(n) => write!(f, "{n}"),
                Scalar::Str(s) => write!(f, "{s:?}"),
            }
        }
    }

    impl<'de> Deserialize<'de> for Scalar {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(ScalarVisitor)
        }
    }

    struct ScalarVisitor;

    impl Visitor<'_> for ScalarVisitor {
        type Value = Scalar;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer or a string")
        }

        fn visit_i64<E: Error>(self, n: i64) -> Result<Scalar, E> {
            Ok(Scalar::Int(n))
        }

        fn visit_u64<E: Error>(self, n: u64) -> Result<Scalar, E> {
            i64::try_from(n)
                .map(Scalar::Int)
                .map_err(|_| E::custom(format!("{n} is too large")))
        }

        fn visit_str<E: Error>(self, s: &str) -> Result<Scalar, E> {
            Ok(Scalar::Str(s.to_owned()))
        }
    }

    /// A non-zero duration: "250ms", "30s", "2m", "1h", "1d", or an integer number of seconds.
    pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let scalar = Scalar::deserialize(d)?;
        let parsed = match &scalar {
            Scalar::Int(secs) => u64::try_from(*secs).ok().map(Duration::from_secs),
            Scalar::Str(s) => parse_duration(s),
        };
        match parsed {
            None => Err(D::Error::custom(format!(
                "invalid duration {scalar} {DURATION_EXAMPLES}"
            ))),
            Some(duration) if duration.is_zero() => Err(D::Error::custom(format!(
                "duration must be greater than zero, got {scalar}"
            ))),
            Some(duration) => Ok(duration),
        }
    }

    pub(super) fn some_duration<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        duration(d).map(Some)
    }

    pub(super) fn some_byte_size<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<usize>, D::Error> {
        byte_size(d).map(Some)
    }

    pub(super) fn parse_duration(s: &str) -> Option<Duration> {
        let (count, unit) = split_number(s)?;
        let millis_per_unit: u64 = match unit {
            "ms" => 1,
            "" | "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        };
        count
            .checked_mul(millis_per_unit)
            .map(Duration::from_millis)
    }

    /// A non-zero byte count: an integer, or "512KiB", "1MiB", "2MB", ... (units case-insensitive).
    pub(super) fn byte_size<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        let scalar = Scalar::deserialize(d)?;
        let parsed = match &scalar {
            Scalar::Int(bytes) => usize::try_from(*bytes).ok(),
            Scalar::Str(s) => parse_size(s),
        };
        match parsed {
            None => Err(D::Error::custom(format!(
                "invalid size {scalar} {SIZE_EXAMPLES}"
            ))),
            Some(0) => Err(D::Error::custom("size must be greater than zero")),
            Some(bytes) => Ok(bytes),
        }
    }

    pub(super) fn parse_size(s: &str) -> Option<usize> {
        let (count, unit) = split_number(s)?;
        let bytes_per_unit: u64 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kb" => 1_000,
            "kib" => 1 << 10,
            "mb" => 1_000_000,
            "mib" => 1 << 20,
            "gb" => 1_000_000_000,
            "gib" => 1 << 30,
            _ => return None,
        };
        usize::try_from(count.checked_mul(bytes_per_unit)?).ok()
    }

    /// Splits "250ms" into (250, "ms"); `None` without leading digits or on overflow.
    fn split_number(s: &str) -> Option<(u64, &str)> {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (count, unit) = s.split_at(digits);
        Some((count.parse().ok()?, unit))
    }

    /// Expands `${VAR}` from the environment; `$$` is a literal `$`, as is `$` before anything
    /// but `{` or `$`.
    pub(super) fn expand_env(raw: &str) -> Result<String, String> {
        let mut out = String::with_capacity(raw.len());
        let mut rest = raw;
        while let Some(dollar) = rest.find('$') {
            out.push_str(&rest[..dollar]);
            let after = &rest[dollar + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                out.push('$');
                rest = tail;
            } else if let Some(tail) = after.strip_prefix('{') {
                let (name, tail) = tail
                    .split_once('}')
                    .ok_or_else(|| format!("unterminated \"${{\" in {raw:?}"))?;
                out.push_str(&env_var(name)?);
                rest = tail;
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    fn env_var(name: &str) -> Result<String, String> {
        let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return Err(format!(
                "invalid environment variable name {name:?} in \"${{...}}\""
            ));
        }
        std::env::var(name).map_err(|err| match err {
            std::env::VarError::NotPresent => format!("environment variable {name} is not set"),
            std::env::VarError::NotUnicode(_) => {
                format!("environment variable {name} is not valid UTF-8")
            }
        })
    }
}

/// Where every key and value of a parsed file sits, read in a second pass over the text only when
/// an error needs a line or a key path.
///
/// toml_edit (the parser toml itself uses) keeps the byte span of every key, value and `[table]`
/// header, so the spans in toml's errors land on the same keys and values here.
/// Tables made by dotted keys (`translate.model = ...`) or implied by a header (`[a.b]` implies `a`)
/// have no span of their own, so they are placed by their key or their first entry.
mod spans {
    use std::ops::Range;

    use toml_edit::{ImDocument, Item, Key};

    use super::{KeyPath, Segment};

    /// The parsed file: its root node.
    pub(super) struct Node<'t>(ImDocument<&'t str>);

    /// A child of an item: its path segment, its key's span (tables only), and the item.
    type Child<'a> = (Segment, Option<Range<usize>>, &'a Item);

    impl<'t> Node<'t> {
        /// `None` when the text is not valid TOML.
        pub(super) fn parse(text: &'t str) -> Option<Node<'t>> {
            ImDocument::parse(text).ok().map(Node)
        }

        /// The path of the deepest key or value whose span holds `offset`.
        pub(super) fn path_at(&self, offset: usize) -> Option<KeyPath> {
            let mut path = KeyPath::default();
            find(self.0.as_item(), offset, &mut path).then_some(path)
        }

        /// Where `path` starts, or its deepest ancestor present in the file when it is absent.
        pub(super) fn offset_of(&self, path: &KeyPath) -> usize {
            let mut item = self.0.as_item();
            let mut offset = first_offset(item);
            for segment in &path.0 {
                let Some((key_span, child)) = child(item, segment) else {
                    break;
                };
                item = child;
                offset = child
                    .span()
                    .or(key_span)
                    .map(|span| span.start)
                    .or_else(|| first_offset(child))
                    .or(offset);
            }
            offset.unwrap_or(0)
        }
    }

    fn find(item: &Item, offset: usize, path: &mut KeyPath) -> bool {
        for (segment, key_span, child) in children(item) {
            path.0.push(segment);
            if contains(key_span, offset) || find(child, offset, path) {
                return true;
            }
            path.0.pop();
        }
        contains(item.span(), offset)
    }

    fn child<'a>(item: &'a Item, segment: &Segment) -> Option<(Option<Range<usize>>, &'a Item)> {
        match segment {
            Segment::Key(name) => {
                let (key, child) = item.as_table_like()?.get_key_value(name)?;
                Some((key.span(), child))
            }
            Segment::Index(index) => item.get(*index).map(|child| (None, child)),
        }
    }

    /// The earliest position inside `item`, for items without a span of their own.
    fn first_offset(item: &Item) -> Option<usize> {
        let inner = children(item).filter_map(|(_, key_span, child)| {
            let key_start = key_span.map(|span| span.start);
            key_start.into_iter().chain(first_offset(child)).min()
        });
        item.span()
            .map(|span| span.start)
            .into_iter()
            .chain(inner)
            .min()
    }

    /// A table's entries (standard or inline), or an array's items (of values or of tables).
    fn children(item: &Item) -> impl Iterator<Item = Child<'_>> {
        let entries = item.as_table_like().into_iter().flat_map(|table| {
            table.iter().map(move |(name, child)| {
                let key_span = table.key(name).and_then(Key::span);
                (Segment::Key(name.to_owned()), key_span, child)
            })
        });
        let items = (0..).map_while(move |index| {
            item.get(index)
                .map(|child| (Segment::Index(index), None, child))
        });
        entries.chain(items)
    }

    fn contains(span: Option<Range<usize>>, offset: usize) -> bool {
        span.is_some_and(|span| span.contains(&offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = include_str!("../tests/fixtures/config/full.toml");

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, "routes.toml")
    }

    /// Parses `text`, expects an error at `line` and `key` whose message contains `fragment`,
    /// and checks the rendered form names all three.
    #[track_caller]
    fn assert_error(text: &str, line: usize, key: &str, fragment: &str) -> ConfigError {
        let err = match parse(text) {
            Ok(config) => panic!("expected an error at {key}, parsed {config:?}"),
            Err(err) => err,
        };
        let rendered = err.to_string();
        assert_eq!(err.file(), "routes.toml", "{rendered}");
        assert_eq!(err.line(), Some(line), "{rendered}");
        assert_eq!(err.key(), Some(key), "{rendered}");
        assert!(err.message().contains(fragment), "{rendered}");
        assert!(
            rendered.starts_with(&format!("routes.toml:{line}: {key}: ")),
            "{rendered}"
        );
        err
    }

    /// A one-route file with `extra` appended to the route table (which starts on line 1).
    fn route_with(extra: &str) -> String {
        format!(
            "[[routes]]\nname = \"r\"\npath = \"/r\"\ninbound = \"ag-ui\"\noutbound = \"a2a\"\n\
             upstream = \"http://127.0.0.1:9001/\"\n{extra}"
        )
    }

    /// Line 7 is the first line of `extra` in [`route_with`].
    const EXTRA: usize = 7;

    fn header(name: &'static str, value: &str) -> (HeaderName, HeaderValue) {
        (
            HeaderName::from_static(name),
            HeaderValue::from_str(value).expect("valid test header"),
        )
    }

    #[test]
    fn full_file_parses_into_expected_structs() {
        std::env::set_var("WEATHER_AGENT_KEY", "weather-secret");
        let config = Config::load(Path::new("tests/fixtures/config/full.toml"))
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(config, parse(FULL).expect("same text parses the same"));
        assert_eq!(config.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.store, StoreConfig::default());

        let weather = &config.routes[0];
        let expected = RouteConfig {
            name: "copilot-to-weather".into(),
            path: "/agents/weather".into(),
            inbound: Protocol::AgUi,
            outbound: Outbound::Protocol(Protocol::A2a),
            upstream: Some(Uri::from_static("http://127.0.0.1:9001/")),
            timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
            max_body: 1 << 20,
            upstream_headers: vec![header("authorization", "Bearer weather-secret")],
            translate: Translate {
                model: Some("deepseek:deepseek-chat".into()),
                ..Translate::default()
            },
            card: Some(Card {
                name: Some("Weather agent".into()),
                description: Some("Answers weather questions".into()),
                version: None,
                skills: vec![Skill {
                    id: "weather".into(),
                    name: "Weather".into(),
                    description: Some("Current weather by city".into()),
                    tags: vec![],
                    examples: vec![],
                }],
            }),
            api_keys: vec![],
            rate_limit: None,
            rate_limit_ip: None,
            card_auth: false,
            cors_origins: vec![],
            jwt: None,
            quota: Quota::default(),
            callback_allow: vec![],
            body_timeout: Duration::from_secs(30),
            ws_idle: None,
            run_buffer: None,
        };
        assert_eq!(*weather, expected);

        let echo = &config.routes[1];
        assert_eq!(echo.name, "try-echo");
        assert_eq!(echo.path, "/echo/a2a");
        assert_eq!(echo.inbound, Protocol::A2a);
        assert_eq!(echo.outbound, Outbound::Echo);
        assert_eq!(echo.upstream, None);
        assert_eq!(echo.timeout, Duration::from_millis(2500));
        assert_eq!(echo.connect_timeout, Duration::from_secs(3));
        assert_eq!(echo.max_body, 512 * 1024);
        assert_eq!(echo.translate.agui_interrupts, AguiInterrupts::Outcome);
        assert_eq!(echo.translate.question_tool, "askHuman");
        assert_eq!(echo.translate.agui_protocol_version.as_deref(), Some("1.0"));
        let card = echo.card.as_ref().expect("echo route has a card");
        assert_eq!(card.version.as_deref(), Some("0.1.0"));
        assert_eq!(card.skills[0].tags, ["echo", "test"]);
        assert_eq!(card.skills[0].examples, ["hello"]);
    }

    #[test]
    fn upstream_header_values_are_sensitive() {
        let config = parse(&route_with("[routes.upstream_headers]\nX-Key = \"k\"\n")).unwrap();
        assert!(config.routes[0].upstream_headers[0].1.is_sensitive());
    }

    #[test]
    fn empty_file_takes_every_default() {
        let config = parse("").unwrap();
        assert_eq!(config.listen, DEFAULT_LISTEN.parse().unwrap());
        assert_eq!(config.store.backend, StoreBackend::Memory);
        assert_eq!(config.store.idle_ttl, Duration::from_secs(86_400));
        assert!(config.routes.is_empty());
        let connections = config.connections;
        assert_eq!(connections.header_read_timeout, Duration::from_secs(10));
        assert_eq!(connections.keepalive_idle, Duration::from_secs(60));
        assert_eq!(connections.max_connections, 10_000);
    }

    #[test]
    fn connection_limits_are_read_from_the_top_level() {
        let text = "header_read_timeout = \"2s\"\nkeepalive_idle = \"90s\"\nmax_connections = 3\n";
        let connections = parse(text).unwrap().connections;
        assert_eq!(
            connections,
            ConnectionLimits {
                header_read_timeout: Duration::from_secs(2),
                keepalive_idle: Duration::from_secs(90),
                max_connections: 3,
            }
        );
    }

    #[test]
    fn bad_connection_limits_name_file_line_and_key() {
        let text = "listen = \"127.0.0.1:1\"\nheader_read_timeout = \"soon\"\n";
        assert_error(text, 2, "header_read_timeout", "invalid duration \"soon\"");
        assert_error(
            "\nkeepalive_idle = \"0s\"\n",
            2,
            "keepalive_idle",
            "greater than zero",
        );
        assert_error(
            "max_connections = 0\n",
            1,
            "max_connections",
            "positive number of connections",
        );
    }

    #[test]
    fn route_body_timeout_and_ws_idle_are_read_and_checked() {
        let cmdc = |extra: &str| route_with(extra).replace("ag-ui", "cmdc");
        let route = &parse(&cmdc("body_timeout = \"5s\"\nws_idle = \"2m\"\n"))
            .unwrap()
            .routes[0];
        assert_eq!(route.body_timeout, Duration::from_secs(5));
        assert_eq!(route.ws_idle, Some(Duration::from_secs(120)));
        assert_error(
            &route_with("body_timeout = \"-1s\"\n"),
            EXTRA,
            "routes[0].body_timeout",
            "invalid duration",
        );
        assert_error(
            &route_with("ws_idle = \"10s\"\n"),
            EXTRA,
            "routes[0].ws_idle",
            "only cmdc inbound routes serve a WebSocket",
        );
    }

    #[test]
    fn store_sizes_are_read_and_checked() {
        let store = parse("[store]\nmax_record = \"1MiB\"\nmax_bytes = \"64MiB\"\n")
            .unwrap()
            .store;
        assert_eq!((store.max_record, store.max_bytes), (1 << 20, 64 << 20));
        assert_error(
            "[store]\nmax_record = \"2MiB\"\nmax_bytes = \"1MiB\"\n",
            2,
            "store.max_record",
            "larger than store.max_bytes",
        );
        assert_error(
            "[store]\nmax_bytes = 0\n",
            2,
            "store.max_bytes",
            "greater than zero",
        );
    }

    #[test]
    fn run_buffer_is_a_cmdc_byte_size() {
        let cmdc = |extra: &str| route_with(extra).replace("ag-ui", "cmdc");
        let route = &parse(&cmdc("run_buffer = \"2MiB\"\n")).unwrap().routes[0];
        assert_eq!(route.run_buffer, Some(2 << 20));
        assert_error(
            &cmdc("run_buffer = 0\n"),
            EXTRA,
            "routes[0].run_buffer",
            "greater than zero",
        );
        assert_error(
            &route_with("run_buffer = \"1MiB\"\n"),
            EXTRA,
            "routes[0].run_buffer",
            "only cmdc inbound routes keep a run's events",
        );
    }

    #[test]
    fn route_omitting_optional_keys_takes_defaults() {
        let text =
            "[[routes]]\nname = \"e\"\npath = \"/e\"\ninbound = \"cmdc\"\noutbound = \"echo\"\n";
        let route = &parse(text).unwrap().routes[0];
        assert_eq!(route.timeout, Duration::from_secs(120));
        assert_eq!(route.connect_timeout, Duration::from_secs(10));
        assert_eq!(route.max_body, 1024 * 1024);
        assert_eq!(route.body_timeout, Duration::from_secs(30));
        assert_eq!(route.ws_idle, None);
        assert!(route.upstream_headers.is_empty());
        assert_eq!(route.translate, Translate::default());
        assert_eq!(route.translate.approval_tool, "confirmAction");
        assert_eq!(route.translate.question_tool, "ask_user");
        assert_eq!(route.translate.agui_interrupts, AguiInterrupts::Auto);
        assert_eq!(route.card, None);
    }

    #[test]
    fn default_listen_matches_the_constant() {
        assert_eq!(default_listen().to_string(), DEFAULT_LISTEN);
    }

    #[test]
    fn store_backends_take_their_settings() {
        let redb = parse("[store]\nbackend = \"redb\"\npath = \"data/c.redb\"\nidle_ttl = 90\n")
            .unwrap()
            .store;
        assert_eq!(redb.backend, StoreBackend::Redb);
        assert_eq!(redb.path, Some(PathBuf::from("data/c.redb")));
        assert_eq!(redb.idle_ttl, Duration::from_secs(90));
        let redis = parse("[store]\nbackend = \"redis\"\nurl = \"rediss://cache:6380/0\"\n")
            .unwrap()
            .store;
        assert_eq!(redis.url.as_deref(), Some("rediss://cache:6380/0"));
    }

    #[test]
    fn protocol_names_round_trip() {
        for protocol in Protocol::ALL {
            assert_eq!(Protocol::from_name(protocol.name()), Some(protocol));
            let text = route_with("").replace("\"ag-ui\"", &format!("{:?}", protocol.name()));
            assert_eq!(parse(&text).unwrap().routes[0].inbound, protocol);
        }
        assert_eq!(Outbound::Echo.name(), "echo");
        assert_eq!(Outbound::Protocol(Protocol::AgKit).to_string(), "ag-kit");
    }

    #[test]
    fn durations_accept_units_and_integer_seconds() {
        let cases = [
            ("250ms", Duration::from_millis(250)),
            ("30s", Duration::from_secs(30)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("24h", Duration::from_secs(86_400)),
            ("1d", Duration::from_secs(86_400)),
            ("45", Duration::from_secs(45)),
        ];
        for (text, expected) in cases {
            assert_eq!(de::parse_duration(text), Some(expected), "{text}");
        }
        for bad in [
            "",
            "s",
            "12x",
            "1.5s",
            "-1s",
            " 1s",
            "1 s",
            "99999999999999999999d",
        ] {
            assert_eq!(de::parse_duration(bad), None, "{bad:?}");
        }
        let route = parse(&route_with("timeout = 7\n")).unwrap();
        assert_eq!(route.routes[0].timeout, Duration::from_secs(7));
    }

    #[test]
    fn sizes_accept_units_and_integer_bytes() {
        let cases = [
            ("512KiB", 512 * 1024),
            ("1MiB", 1 << 20),
            ("2MB", 2_000_000),
            ("10kb", 10_000),
            ("1GiB", 1 << 30),
            ("100", 100),
            ("100B", 100),
        ];
        for (text, expected) in cases {
            assert_eq!(de::parse_size(text), Some(expected), "{text}");
        }
        for bad in ["", "MiB", "1.5MiB", "1 MiB", "1TB", "-1"] {
            assert_eq!(de::parse_size(bad), None, "{bad:?}");
        }
        let route = parse(&route_with("max_body = 4096\n")).unwrap();
        assert_eq!(route.routes[0].max_body, 4096);
    }

    #[test]
    fn env_vars_expand_and_dollars_stay_literal() {
        std::env::set_var("AGENT_BRIDGE_CONFIG_TEST_TOKEN", "t0k$n");
        let expand = |raw: &str| de::expand_env(raw);
        assert_eq!(
            expand("a ${AGENT_BRIDGE_CONFIG_TEST_TOKEN} b").unwrap(),
            "a t0k$n b"
        );
        assert_eq!(
            expand("$$${AGENT_BRIDGE_CONFIG_TEST_TOKEN}").unwrap(),
            "$t0k$n"
        );
        assert_eq!(expand("$${NOT_EXPANDED}").unwrap(), "${NOT_EXPANDED}");
        assert_eq!(expand("cost $5 $").unwrap(), "cost $5 $");
        assert!(expand("${UNTERMINATED")
            .unwrap_err()
            .contains("unterminated"));
        assert!(expand("${1BAD}").unwrap_err().contains("invalid"));
        assert!(expand("${}").unwrap_err().contains("invalid"));
    }

    #[test]
    fn env_vars_expand_in_upstream_headers_and_store_url() {
        std::env::set_var("AGENT_BRIDGE_CONFIG_TEST_HOST", "agent.internal:9443");
        std::env::set_var("AGENT_BRIDGE_CONFIG_TEST_KEY", "s3cret");
        let text =
            "[store]\nbackend = \"redis\"\nurl = \"redis://${AGENT_BRIDGE_CONFIG_TEST_HOST}\"\n"
                .to_owned()
                + &route_with(
                    "[routes.upstream_headers]\nX-Api-Key = \"${AGENT_BRIDGE_CONFIG_TEST_KEY}\"\n",
                )
                .replace(
                    "http://127.0.0.1:9001/",
                    "https://${AGENT_BRIDGE_CONFIG_TEST_HOST}/rpc",
                );
        let config = parse(&text).unwrap();
        assert_eq!(
            config.store.url.as_deref(),
            Some("redis://agent.internal:9443")
        );
        let route = &config.routes[0];
        assert_eq!(
            route.upstream,
            Some(Uri::from_static("https://agent.internal:9443/rpc"))
        );
        assert_eq!(route.upstream_headers, [header("x-api-key", "s3cret")]);
    }

    #[test]
    fn unset_env_var_is_an_error_naming_it() {
        let unset = "AGENT_BRIDGE_CONFIG_TEST_UNSET_7F3A";
        std::env::remove_var(unset);
        let upstream =
            route_with("").replace("http://127.0.0.1:9001/", &format!("http://${{{unset}}}/"));
        assert_error(&upstream, 6, "routes[0].upstream", unset);
        let headers = route_with(&format!(
            "[routes.upstream_headers]\nAuthorization = \"Bearer ${{{unset}}}\"\n"
        ));
        assert_error(
            &headers,
            EXTRA + 1,
            "routes[0].upstream_headers.Authorization",
            &format!("environment variable {unset} is not set"),
        );
        let store = format!("[store]\nbackend = \"redis\"\nurl = \"redis://${{{unset}}}\"\n");
        assert_error(&store, 3, "store.url", unset);
    }

    #[test]
    fn error_display_names_file_line_and_key() {
        let err = assert_error(
            &route_with("timeout = \"12x\"\n"),
            EXTRA,
            "routes[0].timeout",
            "",
        );
        assert_eq!(
            err.to_string(),
            format!(
                "routes.toml:{EXTRA}: routes[0].timeout: invalid duration \"12x\" \
                 (expected e.g. \"30s\", \"2m\", \"1h\", \"250ms\")"
            )
        );
    }

    #[test]
    fn zero_or_negative_durations_are_rejected() {
        assert_error(
            &route_with("timeout = \"0s\"\n"),
            EXTRA,
            "routes[0].timeout",
            "greater than zero",
        );
        assert_error(
            &route_with("connect_timeout = 0\n"),
            EXTRA,
            "routes[0].connect_timeout",
            "greater than zero",
        );
        assert_error(
            &route_with("timeout = -5\n"),
            EXTRA,
            "routes[0].timeout",
            "invalid duration -5",
        );
        assert_error(
            "[store]\nidle_ttl = \"0ms\"\n",
            2,
            "store.idle_ttl",
            "greater than zero",
        );
        assert_error(
            &route_with("timeout = true\n"),
            EXTRA,
            "routes[0].timeout",
            "invalid type",
        );
    }

    #[test]
    fn bad_max_body_is_rejected() {
        assert_error(
            &route_with("max_body = \"1 MiB\"\n"),
            EXTRA,
            "routes[0].max_body",
            "invalid size \"1 MiB\"",
        );
        assert_error(
            &route_with("max_body = 0\n"),
            EXTRA,
            "routes[0].max_body",
            "greater than zero",
        );
        assert_error(
            &route_with("max_body = -1\n"),
            EXTRA,
            "routes[0].max_body",
            "invalid size -1",
        );
    }

    #[test]
    fn unknown_keys_are_rejected_everywhere() {
        assert_error(
            "lissen = \"127.0.0.1:1\"\n",
            1,
            "lissen",
            "unknown field `lissen`",
        );
        assert_error(
            "[store]\nbackend = \"memory\"\nttl = \"1h\"\n",
            3,
            "store.ttl",
            "unknown field",
        );
        assert_error(
            &route_with("retries = 3\n"),
            EXTRA,
            "routes[0].retries",
            "unknown field",
        );
        let text = format!(
            "{}{}",
            route_with(""),
            route_with("[routes.translate]\napproval_tol = \"x\"\n")
        );
        assert_error(
            &text,
            6 + EXTRA + 1,
            "routes[1].translate.approval_tol",
            "unknown field `approval_tol`",
        );
        let skills = route_with("[routes.card]\nskills = [\n  { id = \"a\", name = \"A\" },\n  { id = \"b\", nme = \"B\" },\n]\n");
        assert_error(
            &skills,
            EXTRA + 3,
            "routes[0].card.skills[1].nme",
            "unknown field `nme`",
        );
    }

    #[test]
    fn errors_under_dotted_keys_name_the_full_path() {
        let text = route_with("translate.approval_tol = \"x\"\n");
        assert_error(
            &text,
            EXTRA,
            "routes[0].translate.approval_tol",
            "unknown field",
        );
        let text = route_with("translate.agui_interrupts = \"yes\"\n");
        assert_error(
            &text,
            EXTRA,
            "routes[0].translate.agui_interrupts",
            "expected \"auto\", \"tool\" or \"outcome\", not \"yes\"",
        );
        let mode = |value: &str| {
            let text = route_with(&format!("translate.agui_interrupts = {value}\n"));
            parse(&text).unwrap().routes[0].translate.agui_interrupts
        };
        assert_eq!(mode("\"tool\""), AguiInterrupts::Tool);
        assert_eq!(mode("\"outcome\""), AguiInterrupts::Outcome);
        assert_eq!(mode("true"), AguiInterrupts::Outcome, "the old boolean");
        assert_eq!(mode("false"), AguiInterrupts::Tool, "the old boolean");
    }

    #[test]
    fn missing_required_keys_name_the_key_at_its_table() {
        let text =
            "[[routes]]\nname = \"a\"\npath = \"/a\"\ninbound = \"ag-ui\"\noutbound = \"echo\"\n\
                    [[routes]]\npath = \"/b\"\ninbound = \"ag-ui\"\noutbound = \"echo\"\n";
        assert_error(text, 6, "routes[1].name", "missing field `name`");
        let first = text.replacen("name = \"a\"\n", "", 1);
        assert_error(&first, 1, "routes[0].name", "missing field `name`");
        let skill =
            route_with("[routes.card]\nskills = [{ id = \"a\" }]\n").replace("ag-ui", "a2a");
        assert_error(
            &skill,
            EXTRA + 1,
            "routes[0].card.skills[0].name",
            "missing field `name`",
        );
    }

    #[test]
    fn protocols_must_be_known_and_inbound_cannot_be_echo() {
        let text = route_with("").replace("inbound = \"ag-ui\"", "inbound = \"echo\"");
        assert_error(&text, 4, "routes[0].inbound", "unknown variant `echo`");
        let text = route_with("").replace("outbound = \"a2a\"", "outbound = \"grpc\"");
        assert_error(&text, 5, "routes[0].outbound", "unknown variant `grpc`");
    }

    #[test]
    fn upstream_is_required_unless_echo() {
        let text = route_with("").replace("upstream = \"http://127.0.0.1:9001/\"\n", "");
        assert_error(&text, 1, "routes[0].upstream", "required for outbound a2a");
    }

    #[test]
    fn echo_routes_reject_upstream_settings() {
        let text = route_with("").replace("\"a2a\"", "\"echo\"");
        assert_error(&text, 6, "routes[0].upstream", "echo has no upstream");
        let text =
            "[[routes]]\nname = \"e\"\npath = \"/e\"\ninbound = \"ag-ui\"\noutbound = \"echo\"\n\
                    [routes.upstream_headers]\nX-A = \"b\"\n";
        assert_error(
            text,
            6,
            "routes[0].upstream_headers",
            "echo has no upstream",
        );
    }

    #[test]
    fn upstream_must_be_an_absolute_http_url() {
        for bad in [
            "ftp://host/x",
            "/relative",
            "127.0.0.1:9001",
            "http://",
            "not a url",
        ] {
            let text = route_with("").replace("http://127.0.0.1:9001/", bad);
            assert_error(&text, 6, "routes[0].upstream", bad);
        }
        let text = route_with("").replace("http://", "http://user:pw@");
        assert_error(&text, 6, "routes[0].upstream", "credentials");
    }

    #[test]
    fn header_names_and_values_must_be_valid() {
        let name = route_with("[routes.upstream_headers]\n\"Bad Name\" = \"x\"\n");
        assert_error(
            &name,
            EXTRA + 1,
            "routes[0].upstream_headers.\"Bad Name\"",
            "invalid header name",
        );
        let value = route_with("[routes.upstream_headers]\nX-Ok = \"line\\nbreak\"\n");
        assert_error(
            &value,
            EXTRA + 1,
            "routes[0].upstream_headers.X-Ok",
            "invalid header value",
        );
        let managed = route_with("[routes.upstream_headers]\nContent-Length = \"5\"\n");
        assert_error(
            &managed,
            EXTRA + 1,
            "routes[0].upstream_headers.Content-Length",
            "managed by the proxy",
        );
    }

    #[test]
    fn route_names_must_be_unique_and_non_empty() {
        let text = route_with("").replace("name = \"r\"", "name = \" \"");
        assert_error(&text, 2, "routes[0].name", "must not be empty");
        let twice = format!("{}{}", route_with(""), route_with("").replace("/r", "/s"));
        assert_error(
            &twice,
            8,
            "routes[1].name",
            "duplicate route name \"r\" (also routes[0])",
        );
    }

    #[test]
    fn route_paths_must_be_well_formed_and_unique() {
        let cases = [
            ("agents", "must start with"),
            ("/agents/", "must not end with"),
            ("/a?x=1", "query"),
            ("/a#frag", "fragment"),
            ("/a//b", "empty"),
            ("/a/../b", "\"..\""),
            ("/a b", "characters"),
        ];
        for (path, fragment) in cases {
            let text = route_with("").replace("\"/r\"", &format!("{path:?}"));
            assert_error(&text, 3, "routes[0].path", fragment);
        }
        let twice = format!(
            "{}{}",
            route_with(""),
            route_with("").replace("\"r\"", "\"s\"")
        );
        assert_error(&twice, 9, "routes[1].path", "duplicate route path \"/r\"");
        let root = route_with("").replace("\"/r\"", "\"/\"");
        assert_eq!(Config::parse(&root, "t.toml").unwrap().routes[0].path, "/");
    }

    #[test]
    fn store_backends_require_and_reject_their_keys() {
        assert_error(
            "[store]\nbackend = \"redb\"\n",
            1,
            "store.path",
            "required for redb",
        );
        assert_error(
            "[store]\nbackend = \"redis\"\n",
            1,
            "store.url",
            "required for redis",
        );
        assert_error(
            "[store]\nbackend = \"redis\"\nurl = \"http://cache\"\n",
            3,
            "store.url",
            "redis://",
        );
        assert_error(
            "[store]\nurl = \"redis://cache\"\n",
            2,
            "store.url",
            "only used by the redis backend",
        );
        assert_error(
            "[store]\npath = \"x.redb\"\n",
            2,
            "store.path",
            "only used by the redb backend",
        );
        assert_error(
            "[store]\nbackend = \"sqlite\"\n",
            2,
            "store.backend",
            "unknown variant `sqlite`",
        );
        assert_error(
            "store.backend = \"redb\"\n",
            1,
            "store.path",
            "required for redb",
        );
    }

    #[test]
    fn listen_must_be_a_socket_address() {
        assert_error(
            "listen = \"localhost:8080\"\n",
            1,
            "listen",
            "invalid socket address",
        );
    }

    #[test]
    fn every_inbound_takes_api_keys_bound_to_tenants_and_rate_limits() {
        std::env::set_var("AGENT_BRIDGE_CONFIG_TEST_CMDC_KEY", "sk-from-env");
        let text = route_with(
            "rate_limit = 30\nrate_limit_ip = 120\n[routes.api_keys]\n\"sk-a\" = \"acme\"\n\"${AGENT_BRIDGE_CONFIG_TEST_CMDC_KEY}\" = \"globex\"\n",
        );
        let route = &parse(&text).unwrap_or_else(|e| panic!("{e}")).routes[0];
        assert_eq!(
            route.api_keys,
            [
                ("sk-a".to_owned(), "acme".to_owned()),
                ("sk-from-env".to_owned(), "globex".to_owned())
            ]
        );
        assert_eq!(route.rate_limit.map(|n| n.get()), Some(30));
        assert_eq!(route.rate_limit_ip.map(|n| n.get()), Some(120));
        let plain = parse(&route_with("")).unwrap();
        assert!(plain.routes[0].api_keys.is_empty());
        assert_eq!(plain.routes[0].rate_limit, None);
        assert_eq!(plain.routes[0].rate_limit_ip, None);
        assert!(!plain.routes[0].card_auth);
    }

    #[test]
    fn cors_origins_and_callback_allow_are_read_and_checked() {
        let text = route_with(
            "cors_origins = [\"https://app.example\", \"http://localhost:3000\"]\n\
             callback_allow = [\"127.0.0.1\", \"10.0.0.0/8\", \"tools.internal:443\"]\n",
        )
        .replace("ag-ui", "cmdc");
        let route = &parse(&text).unwrap_or_else(|e| panic!("{e}")).routes[0];
        assert_eq!(
            route.cors_origins,
            ["https://app.example", "http://localhost:3000"]
        );
        let allowed: Vec<String> = route.callback_allow.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            allowed,
            ["127.0.0.1/32", "10.0.0.0/8", "tools.internal:443"]
        );
        for bad in [
            "*",
            "https://app.example/",
            "app.example",
            "https://u@app.example",
        ] {
            assert_error(
                &route_with(&format!("cors_origins = [{bad:?}]\n")),
                EXTRA,
                "routes[0].cors_origins",
                "invalid origin",
            );
        }
        let cmdc = |extra: &str| route_with(extra).replace("ag-ui", "cmdc");
        assert_error(
            &cmdc("callback_allow = [\"10.0.0.0/33\"]\n"),
            EXTRA,
            "routes[0].callback_allow",
            "invalid callback_allow entry \"10.0.0.0/33\"",
        );
        assert_error(
            &route_with("callback_allow = [\"127.0.0.1\"]\n"),
            EXTRA,
            "routes[0].callback_allow",
            "only cmdc inbound routes",
        );
    }

    const RSA_PUBLIC_KEY: &str = include_str!("../tests/fixtures/jwt/rsa1.pub.pem");

    #[test]
    fn jwt_is_read_with_its_defaults() {
        let text = route_with(&format!(
            "[routes.jwt]\nissuer = \"https://auth.example\"\naudience = \"agent-bridge\"\n\
             algorithms = [\"RS256\", \"PS256\"]\npublic_key = '''\n{RSA_PUBLIC_KEY}'''\n"
        ));
        let jwt = parse(&text).unwrap_or_else(|e| panic!("{e}")).routes[0]
            .jwt
            .clone()
            .expect("[routes.jwt]");
        assert_eq!(jwt.tenant_claim, "sub");
        assert_eq!(jwt.jwks_refresh, Duration::from_secs(60));
        assert_eq!(
            jwt.algorithms,
            [
                jsonwebtoken::Algorithm::RS256,
                jsonwebtoken::Algorithm::PS256
            ]
        );
        let jwks = route_with(
            "[routes.jwt]\nissuer = \"i\"\naudience = \"a\"\nalgorithms = [\"ES256\"]\n\
             jwks_url = \"http://127.0.0.1:9/jwks\"\ntenant_claim = \"org\"\n",
        );
        let jwt = parse(&jwks).unwrap_or_else(|e| panic!("{e}")).routes[0]
            .jwt
            .clone()
            .expect("[routes.jwt]");
        assert_eq!(jwt.tenant_claim, "org");
        assert!(jwt.public_key.is_none());
    }

    #[test]
    fn jwt_configs_that_would_accept_forgeries_are_refused_at_load() {
        let jwt = |body: &str| {
            route_with(&format!(
                "[routes.jwt]\nissuer = \"i\"\naudience = \"a\"\n{body}"
            ))
        };
        let key = EXTRA + 3;
        for algorithms in ["[\"none\"]", "[\"HS256\"]", "[\"RS256\", \"HS512\"]", "[]"] {
            assert_error(
                &jwt(&format!(
                    "algorithms = {algorithms}\njwks_url = \"https://auth.example/jwks\"\n"
                )),
                key,
                "routes[0].jwt.algorithms",
                "",
            );
        }
        assert_error(
            &jwt("algorithms = [\"RS256\"]\njwks_url = \"http://auth.example/jwks\"\n"),
            key + 1,
            "routes[0].jwt.jwks_url",
            "https",
        );
        assert_error(
            &jwt("algorithms = [\"RS256\"]\n"),
            EXTRA,
            "routes[0].jwt.jwks_url",
            "set jwks_url or public_key",
        );
        // An RSA key cannot check ES256 signatures.
        assert_error(
            &jwt(&format!(
                "algorithms = [\"ES256\"]\npublic_key = '''\n{RSA_PUBLIC_KEY}'''\n"
            )),
            key + 1,
            "routes[0].jwt.public_key",
            "ES256",
        );
        assert_error(
            &jwt("algorithms = [\"RS256\"]\npublic_key = \"x\"\njwks_url = \"https://a/j\"\n"),
            key + 1,
            "routes[0].jwt.public_key",
            "not both",
        );
    }

    #[test]
    fn quotas_are_read_for_the_inbounds_that_keep_them() {
        let cmdc = |extra: &str| route_with(extra).replace("ag-ui", "cmdc");
        let route = &parse(&cmdc("[routes.quota]\nsessions = 3\n"))
            .unwrap()
            .routes[0];
        assert_eq!(route.quota.sessions.map(|n| n.get()), Some(3));
        assert_eq!(route.quota.tasks, None);
        assert_error(
            &cmdc("[routes.quota]\nsessions = 0\n"),
            EXTRA + 1,
            "routes[0].quota.sessions",
            "positive",
        );
        assert_error(
            &cmdc("[routes.quota]\ntasks = 3\n"),
            EXTRA + 1,
            "routes[0].quota.tasks",
            "only a2a inbound routes keep tasks",
        );
        assert_error(
            &cmdc("[routes.quota]\nrequests = 3\n"),
            EXTRA + 1,
            "routes[0].quota.requests",
            "unknown field",
        );
        let route = &parse(&route_with(
            "[routes.quota]\nconversations = 5\nstreams = 2\n",
        ))
        .unwrap()
        .routes[0];
        assert_eq!(route.quota.conversations.map(|n| n.get()), Some(5));
        assert_eq!(route.quota.streams.map(|n| n.get()), Some(2));
    }

    #[test]
    fn trusted_proxies_take_ips_and_cidr_blocks() {
        let config = parse(&format!(
            "trusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\", \"::1\"]\n{}",
            route_with("")
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        let proxies: Vec<String> = config
            .trusted_proxies
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(proxies, ["127.0.0.1/32", "10.0.0.0/8", "::1/128"]);
        assert!(parse(&route_with("")).unwrap().trusted_proxies.is_empty());
        assert_error(
            &format!("trusted_proxies = [\"10.0.0.0/33\"]\n{}", route_with("")),
            1,
            "trusted_proxies",
            "invalid trusted_proxies entry",
        );
    }

    #[test]
    fn api_keys_rate_limits_and_card_auth_are_checked() {
        assert_error(
            &route_with("rate_limit_ip = -1\n"),
            EXTRA,
            "routes[0].rate_limit_ip",
            "positive number",
        );
        assert_error(
            &route_with("card_auth = true\n[routes.api_keys]\n\"sk-a\" = \"acme\"\n"),
            EXTRA,
            "routes[0].card_auth",
            "only a2a inbound routes",
        );
        let a2a = |extra: &str| route_with(extra).replace("ag-ui", "a2a");
        assert_error(
            &a2a("card_auth = true\n"),
            EXTRA,
            "routes[0].card_auth",
            "needs [routes.api_keys]",
        );
        let route = &parse(&a2a(
            "card_auth = true\n[routes.api_keys]\n\"sk-a\" = \"acme\"\n",
        ))
        .unwrap_or_else(|e| panic!("{e}"))
        .routes[0];
        assert!(route.card_auth);
        let cmdc = |extra: &str| route_with(extra).replace("ag-ui", "cmdc");
        assert_error(
            &cmdc("rate_limit = 0\n"),
            EXTRA,
            "routes[0].rate_limit",
            "positive number",
        );
        assert_error(
            &cmdc("[routes.api_keys]\n\"sk-a\" = \"\"\n"),
            EXTRA + 1,
            "routes[0].api_keys.sk-a",
            "tenant name must not be empty",
        );
        assert_error(
            &cmdc("[routes.api_keys]\n\"sk-a\" = \"acme\"\nbogus_key = 3\n"),
            EXTRA + 2,
            "routes[0].api_keys.bogus_key",
            "invalid type",
        );
    }

    #[test]
    fn card_skill_ids_are_unique() {
        let skills = route_with("[routes.card]\nskills = [\n{ id = \"a\", name = \"A\" },\n{ id = \"a\", name = \"B\" },\n]\n")
            .replace("ag-ui", "a2a");
        assert_error(
            &skills,
            EXTRA + 3,
            "routes[0].card.skills[1].id",
            "duplicate skill id",
        );
    }

    #[test]
    fn translate_tool_names_must_not_be_empty() {
        let text = route_with("[routes.translate]\napproval_tool = \"\"\n");
        assert_error(
            &text,
            EXTRA + 1,
            "routes[0].translate.approval_tool",
            "must not be empty",
        );
    }

    #[test]
    fn a_route_toward_a_cmdc_gateway_needs_a_model_unless_its_clients_name_one() {
        let toward_cmdc = |inbound: &str| {
            format!(
                "[[routes]]\nname = \"r\"\npath = \"/r\"\ninbound = \"{inbound}\"\noutbound = \"cmdc\"\n\
                 upstream = \"http://127.0.0.1:9001/\"\n"
            )
        };
        assert_error(
            &toward_cmdc("ag-ui"),
            1,
            "routes[0].translate.model",
            "required: a CMDC gateway creates each session with a model, and ag-ui clients name none",
        );
        assert!(
            parse(&toward_cmdc("cmdc")).is_ok(),
            "a CMDC client names its model"
        );
        let with_model = format!("{}[routes.translate]\nmodel = \"m\"\n", toward_cmdc("a2a"));
        assert!(parse(&with_model).is_ok());
    }

    #[test]
    fn answer_words_are_single_words() {
        let text = route_with("[routes.translate]\napproval_words = [\"sure\", \"ship it\"]\n");
        assert_error(
            &text,
            EXTRA + 1,
            "routes[0].translate.approval_words",
            "\"ship it\" is not one word",
        );
        let text = route_with("[routes.translate]\nrejection_words = [\"nope\", \"不干\"]\n");
        let config = parse(&text).unwrap();
        assert_eq!(config.routes[0].translate.rejection_words, ["nope", "不干"]);
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let err = parse("listen = \"127.0.0.1:1\"\n[[routes]\n").unwrap_err();
        assert_eq!(
            (err.file(), err.line(), err.key()),
            ("routes.toml", Some(2), None)
        );
        assert!(err.to_string().starts_with("routes.toml:2: "), "{err}");
    }

    #[test]
    fn unreadable_file_names_the_file() {
        let err = Config::load(Path::new("tests/fixtures/config/missing.toml")).unwrap_err();
        assert_eq!(err.file(), "tests/fixtures/config/missing.toml");
        assert_eq!((err.line(), err.key()), (None, None));
        assert!(err
            .to_string()
            .starts_with("tests/fixtures/config/missing.toml: cannot read"));
    }

    #[test]
    fn spans_locate_keys_in_dotted_and_implicit_tables() {
        let text = "a.b.c = 1\n[x.y]\nz = 1979-05-27\n[[t]]\nv = [1, { w = 2 }]\n";
        let tree = spans::Node::parse(text).expect("valid TOML");
        let at = |needle: &str| {
            let offset = text.find(needle).expect("needle in text");
            tree.path_at(offset).map(|path| path.to_string())
        };
        assert_eq!(at("c =").as_deref(), Some("a.b.c"));
        assert_eq!(at("1979").as_deref(), Some("x.y.z"));
        assert_eq!(at("w =").as_deref(), Some("t[0].v[1].w"));
        let path = KeyPath::default().key("x").key("y");
        assert_eq!(line_of(text, tree.offset_of(&path)), 2);
        assert_eq!(line_of(text, tree.offset_of(&path.key("missing"))), 2);
    }
}
