//! `routes.toml`: parsed once into typed, validated structs (DESIGN §5); nothing after
//! [`Config::parse`] looks at TOML text again. `[routes.translate]` stays a table ([`Translate`]): its
//! options belong to the protocols' faces, which read them with types of their own, and the protocol
//! registry checks them against each route's pair when the file loads (config knows no protocol's options).
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

mod checks;
mod de;
mod error;
mod route;
mod spans;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use checks::{validate, KeyPath, Segment};
pub use de::non_empty;
pub use error::ConfigError;
use error::Issue;
pub use route::{
    decoding_key, Card, JwtConfig, OptionError, Quota, RouteConfig, Skill, Translate, Written,
    DEFAULT_RUN_BUFFER, DEFAULT_WS_IDLE,
};

/// The default `listen` address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// The default `admin_listen` address: this machine only.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9091";

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
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file as named to [`Config::load`] or [`Config::parse`].
    pub source: String,
    pub listen: SocketAddr,
    pub connections: ConnectionLimits,
    pub store: StoreConfig,
    pub routes: Vec<RouteConfig>,
    /// `trusted_proxies`: the peers (IPs or CIDR blocks) whose `X-Forwarded-*` and `Forwarded` headers are
    /// believed; default none, so a client cannot name its own address or the proxy's public URL.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// `log_format`: how log lines are written (`--log-format` overrides).
    pub log_format: LogFormat,
    /// `admin_listen`: where `/metrics` and `/readyz` are served, never the traffic port (`--admin-listen`
    /// overrides).
    pub admin_listen: SocketAddr,
    pub telemetry: TelemetryConfig,
}

/// `log_format`: text for people, one JSON object per line for log collectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("{other:?}: expected text or json")),
        }
    }
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
    /// The redb file; required for, and only allowed with, `backend = "redb"`. Relative: to the routes
    /// file's folder (to the working folder for the built-in routes).
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
    /// The whole store (default 1 GiB): beyond, the oldest idle records go, never a paused run's. With
    /// redis, Redis's own `maxmemory` bounds it instead.
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

/// The file's top level as written; becomes a [`Config`] only after validation, so a `Config`
/// cannot be deserialized around the checks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Document {
    #[serde(default = "default_listen", deserialize_with = "de::socket_addr")]
    pub(super) listen: SocketAddr,
    #[serde(
        default = "default_header_read_timeout",
        deserialize_with = "de::duration"
    )]
    pub(super) header_read_timeout: Duration,
    #[serde(default = "default_keepalive_idle", deserialize_with = "de::duration")]
    pub(super) keepalive_idle: Duration,
    #[serde(
        default = "default_max_connections",
        deserialize_with = "de::max_connections"
    )]
    pub(super) max_connections: usize,
    #[serde(default, deserialize_with = "de::trusted_proxies")]
    pub(super) trusted_proxies: Vec<ipnet::IpNet>,
    #[serde(default)]
    pub(super) log_format: LogFormat,
    #[serde(default = "default_admin_listen", deserialize_with = "de::socket_addr")]
    pub(super) admin_listen: SocketAddr,
    #[serde(default)]
    pub(super) store: StoreConfig,
    #[serde(default)]
    pub(super) telemetry: TelemetryConfig,
    #[serde(default)]
    pub(super) routes: Vec<RouteConfig>,
}

/// `[telemetry]`: where traces go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `otlp_endpoint`: an OTLP/HTTP collector (`http://127.0.0.1:4318`); the spans go to
    /// `{otlp_endpoint}/v1/traces` as protobuf. Absent: no traces.
    #[serde(default, deserialize_with = "de::upstream_url")]
    pub otlp_endpoint: Option<http::Uri>,
}

/// [`DEFAULT_LISTEN`] as an address (a test keeps the two equal).
fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

/// [`DEFAULT_ADMIN_LISTEN`] as an address (a test keeps the two equal).
fn default_admin_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9091))
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
    /// Reads and parses the file at `path`; errors name it as given. A relative `store.path` is relative
    /// to the file's folder, so the file means the same wherever the proxy is started.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::parse_file(path, &Config::read(path)?)
    }

    /// The text of the file at `path`.
    pub fn read(path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path)
            .map_err(|err| ConfigError::unreadable(path.display().to_string(), &err))
    }

    /// Parses `text`, read from the file at `path`, as [`Config::load`] does.
    pub fn parse_file(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let mut config = Config::parse(text, &path.display().to_string())?;
        if let (Some(store), Some(folder)) = (config.store.path.as_mut(), path.parent()) {
            if store.is_relative() {
                *store = folder.join(&*store);
            }
        }
        Ok(config)
    }

    /// The keys whose value `newer` changes and that take effect only at a restart: every key but the
    /// `[[routes]]`, which a live reload applies.
    pub fn restart_keys(&self, newer: &Config) -> Vec<&'static str> {
        let connections = (self.connections, newer.connections);
        [
            ("listen", self.listen != newer.listen),
            ("admin_listen", self.admin_listen != newer.admin_listen),
            ("log_format", self.log_format != newer.log_format),
            ("[store]", self.store != newer.store),
            ("[telemetry]", self.telemetry != newer.telemetry),
            (
                "trusted_proxies",
                self.trusted_proxies != newer.trusted_proxies,
            ),
            (
                "header_read_timeout",
                connections.0.header_read_timeout != connections.1.header_read_timeout,
            ),
            (
                "keepalive_idle",
                connections.0.keepalive_idle != connections.1.keepalive_idle,
            ),
            (
                "max_connections",
                connections.0.max_connections != connections.1.max_connections,
            ),
        ]
        .into_iter()
        .filter_map(|(key, changed)| changed.then_some(key))
        .collect()
    }

    /// Parses and validates `text`; `file` names the source in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let document: Document =
            toml::from_str(text).map_err(|err| ConfigError::from_toml(&err, text, file))?;
        let mut config = validate(document).map_err(|issue| issue.locate(text, file))?;
        config.source = file.to_owned();
        if let Some(tree) = spans::Node::parse(text) {
            for (index, route) in config.routes.iter_mut().enumerate() {
                route.written = written(&tree, text, index);
            }
        }
        Ok(config)
    }

    /// Where a key of route `index` sits: `file:line: routes[index].key.…`, as config errors say it.
    pub fn location(&self, index: usize, keys: &[&str], line: usize) -> String {
        format!("{}:{line}: {}", self.source, route_key(index, keys))
    }

    /// An error found after parsing, at a key of route `index` on `line`.
    pub fn error_at(
        &self,
        index: usize,
        keys: &[&str],
        line: usize,
        message: String,
    ) -> ConfigError {
        ConfigError::at(&self.source, line, route_key(index, keys), message)
    }
}

/// The path of a key of route `index`: `routes[index].key.…`.
fn route_key(index: usize, keys: &[&str]) -> KeyPath {
    keys.iter()
        .fold(KeyPath::route(index), |path, key| path.key(key))
}

/// Where route `index`'s keys are that later warnings name.
fn written(tree: &spans::Node<'_>, text: &str, index: usize) -> Written {
    let route = KeyPath::route(index);
    let translate = tree
        .keys_at(&route.clone().key("translate"))
        .into_iter()
        .map(|(key, offset)| (key, error::line_of(text, offset)))
        .collect();
    Written {
        route_line: error::line_of(text, tree.offset_of(&route)),
        outbound_line: error::line_of(text, tree.offset_of(&route.clone().key("outbound"))),
        translate,
    }
}
