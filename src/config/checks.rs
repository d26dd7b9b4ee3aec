//! The checks that need more than one value at a time, and the key paths their errors name.

use std::collections::HashMap;
use std::fmt;

use super::{
    Config, ConnectionLimits, Document, Issue, JwtConfig, Outbound, Protocol, RouteConfig,
    StoreBackend, StoreConfig,
};

/// The checks that need more than one value at a time.
pub(super) fn validate(document: Document) -> Result<Config, Issue> {
    check_store(&document.store)?;
    for (index, route) in document.routes.iter().enumerate() {
        check_route(route, &KeyPath::route(index))?;
    }
    check_unique(&document.routes, "name", |route| &route.name)?;
    check_unique(&document.routes, "path", |route| &route.path)?;
    Ok(Config {
        source: String::new(),
        listen: document.listen,
        connections: ConnectionLimits {
            header_read_timeout: document.header_read_timeout,
            keepalive_idle: document.keepalive_idle,
            max_connections: document.max_connections,
        },
        store: document.store,
        routes: document.routes,
        trusted_proxies: document.trusted_proxies,
        log_format: document.log_format,
        admin_listen: document.admin_listen,
        telemetry: document.telemetry,
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
        if super::decoding_key(pem, algorithm).is_none() {
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
        if route.run_buffer.is_some() && route.detach_grace.is_zero() {
            return Err(Issue::new(
                at.clone().key("run_buffer"),
                format!(
                    "a {} route keeps a run's events only with detach_grace above zero",
                    route.inbound
                ),
            ));
        }
    }
    if !route.detach_grace.is_zero() && matches!(route.inbound, Protocol::A2a | Protocol::Cmdc) {
        return Err(Issue::new(
            at.clone().key("detach_grace"),
            format!(
                "{} clients pick a run up again their own way ({}); detach_grace is for ag-ui, \
                 agentscope and ag-kit routes",
                route.inbound,
                if route.inbound == Protocol::A2a {
                    "tasks/resubscribe"
                } else {
                    "a CMDC run outlives its subscribers"
                }
            ),
        ));
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
pub(super) struct KeyPath(pub(super) Vec<Segment>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Segment {
    Key(String),
    Index(usize),
}

impl KeyPath {
    pub(super) fn route(index: usize) -> KeyPath {
        KeyPath::default().key("routes").index(index)
    }

    pub(super) fn key(mut self, key: &str) -> KeyPath {
        self.0.push(Segment::Key(key.to_owned()));
        self
    }

    pub(super) fn index(mut self, index: usize) -> KeyPath {
        self.0.push(Segment::Index(index));
        self
    }

    pub(super) fn is_root(&self) -> bool {
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
