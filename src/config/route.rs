//! One `[[routes]]` entry and the tables inside it.

use std::time::Duration;

use http::{HeaderName, HeaderValue, Uri};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::{de, Outbound, Protocol};

/// One `[[routes]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
    /// How long a run outlives a client that left (ag-ui, agentscope and ag-kit inbounds); `0s`, the
    /// default: a client that leaves cancels its run. Above zero, every event carries an SSE `id:`, and the
    /// client that comes back (`Last-Event-ID`) gets the rest.
    #[serde(default, deserialize_with = "de::duration_or_zero")]
    pub detach_grace: Duration,
    /// The bytes of a run's events kept for subscribers that arrive late or fall behind (cmdc inbound), or
    /// for a client that comes back (`detach_grace`); absent: [`DEFAULT_RUN_BUFFER`].
    #[serde(default, deserialize_with = "de::some_byte_size")]
    pub run_buffer: Option<usize>,
    /// Where the file sets the keys that warnings name.
    #[serde(skip)]
    pub written: Written,
}

impl RouteConfig {
    /// `inbound->outbound` (`ag-ui->a2a`), as logs, metrics and `/routes` name the route's pair.
    pub fn pair(&self) -> String {
        format!("{}->{}", self.inbound, self.outbound)
    }
}

/// Where a route's keys sit in its file, for what the registry says of them once the file is parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// The line of the route's `[[routes]]`.
    pub route_line: usize,
    /// The line of the route's `outbound`.
    pub outbound_line: usize,
    /// The `[routes.translate]` keys the file sets, each with its line.
    pub translate: Vec<(String, usize)>,
}

impl Written {
    /// The line of the `[routes.translate]` key `key`, or the route's own when the file does not set it.
    pub fn translate_line(&self, key: &str) -> usize {
        self.translate
            .iter()
            .find(|(written, _)| written == key)
            .map_or(self.route_line, |(_, line)| *line)
    }
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
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
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

/// `[routes.translate]` as written: the options of the route's two faces and of the hub. Each face reads its
/// own with its options type (`protocol/<p>/options.rs`, a `face::FaceOptions`); the registry checks every
/// key against the pair's types when the file loads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct Translate(pub(super) toml::Table);

impl Translate {
    /// The options `T` reads (it ignores the keys it does not know); the error names the key at fault.
    pub fn read<T: DeserializeOwned>(&self) -> Result<T, OptionError> {
        serde_path_to_error::deserialize(toml::Value::Table(self.0.clone())).map_err(|error| {
            let key = error.path().iter().next().map(ToString::to_string);
            OptionError {
                key: key.unwrap_or_default(),
                message: error.into_inner().message().trim_end().to_owned(),
            }
        })
    }

    /// The keys the route sets.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

/// A `[routes.translate]` option that is wrong: its key, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError {
    pub key: String,
    pub message: String,
}

impl OptionError {
    pub fn new(key: &str, message: impl Into<String>) -> Self {
        OptionError {
            key: key.to_owned(),
            message: message.into(),
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
