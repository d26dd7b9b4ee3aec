//! A2A inbound, the agent card (`specs/a2a.md` §4.1): generated from the route's `[routes.card]`, with its
//! `url` pointing back at the route as the client reached the proxy.
//!
//! Defaults when the route says nothing: the route name as the card name, a description naming the route,
//! version `1.0.0`, and one skill named after the route. A skill without a description gets its name; a
//! skill without tags gets its id as the one tag (the seed vendor shows tags; the schema requires the field).
//!
//! A route with `[routes.api_keys]` advertises the vendor's scheme (§4.1): `securitySchemes: {"apiKey":
//! {"type":"apiKey","in":"header","name":"X-API-KEY"}}` and `security: [{"apiKey": []}]`; one with
//! `[routes.jwt]` `"bearer": {"type":"http","scheme":"bearer","bearerFormat":"JWT"}`, and with both either
//! serves (two alternatives in `security`); an open route says `security: []`.

use http::header::HOST;
use http::{HeaderMap, Request};
use serde_json::{json, Map};

use super::wire;
use crate::config::RouteConfig;
use crate::connection::LocalAddr;

/// The version a card says when the route gives none.
const DEFAULT_VERSION: &str = "1.0.0";

/// Which card a path serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardVersion {
    /// `/.well-known/agent.json`: `protocolVersion "0.2.5"`.
    V0_2,
    /// `/.well-known/agent-card.json`: `protocolVersion "0.3.0"`, which 1.x SDK clients accept; the wire
    /// is the same.
    V0_3,
}

impl CardVersion {
    fn protocol_version(self) -> &'static str {
        match self {
            Self::V0_2 => wire::PROTOCOL_VERSION,
            Self::V0_3 => "0.3.0",
        }
    }
}

/// Everything of the card but its url, built once per route.
#[derive(Debug, Clone)]
pub struct CardTemplate {
    name: String,
    description: String,
    version: String,
    skills: Vec<wire::AgentSkill>,
    /// The route takes clients with an API key.
    api_key: bool,
    /// The route takes clients with a JWT bearer token.
    bearer: bool,
}

/// The names of the card's security schemes.
const API_KEY_SCHEME: &str = "apiKey";
const BEARER_SCHEME: &str = "bearer";

impl CardTemplate {
    pub fn new(route: &RouteConfig) -> Self {
        let card = route.card.clone().unwrap_or_default();
        let name = card
            .name
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| route.name.clone());
        let description = card
            .description
            .filter(|d| !d.trim().is_empty())
            .unwrap_or_else(|| {
                format!(
                    "The agent of route `{}`, served by agent-bridge",
                    route.name
                )
            });
        let version = card
            .version
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_VERSION.to_owned());
        let mut skills: Vec<wire::AgentSkill> = card
            .skills
            .into_iter()
            .map(|skill| wire::AgentSkill {
                description: skill.description.unwrap_or_else(|| skill.name.clone()),
                tags: if skill.tags.is_empty() {
                    vec![skill.id.clone()]
                } else {
                    skill.tags
                },
                id: skill.id,
                name: skill.name,
                examples: skill.examples,
            })
            .collect();
        if skills.is_empty() {
            skills.push(wire::AgentSkill {
                id: route.name.clone(),
                name: name.clone(),
                description: description.clone(),
                tags: vec![route.name.clone()],
                examples: Vec::new(),
            });
        }
        Self {
            name,
            description,
            version,
            skills,
            api_key: !route.api_keys.is_empty(),
            bearer: route.jwt.is_some(),
        }
    }

    /// The card, with `url` the route's JSON-RPC endpoint.
    pub fn render(&self, url: String, version: CardVersion) -> wire::AgentCard {
        wire::AgentCard {
            name: self.name.clone(),
            description: self.description.clone(),
            url,
            version: self.version.clone(),
            protocol_version: version.protocol_version().to_owned(),
            capabilities: wire::AgentCapabilities {
                streaming: Some(true),
                push_notifications: Some(false),
                state_transition_history: None,
            },
            default_input_modes: vec!["text/plain".to_owned()],
            default_output_modes: vec!["text/plain".to_owned()],
            skills: self.skills.clone(),
            preferred_transport: Some("JSONRPC".to_owned()),
            security_schemes: (self.api_key || self.bearer).then(|| Map::from_iter(self.schemes())),
            security: Some(
                self.schemes()
                    .map(|(name, _)| json!({ name: [] }))
                    .collect(),
            ),
        }
    }

    /// The route's security schemes by name; any one admits a client.
    fn schemes(&self) -> impl Iterator<Item = (String, serde_json::Value)> {
        let api_key = self.api_key.then(|| {
            let scheme = json!({"type": "apiKey", "in": "header", "name": "X-API-KEY"});
            (API_KEY_SCHEME.to_owned(), scheme)
        });
        let bearer = self.bearer.then(|| {
            let scheme = json!({"type": "http", "scheme": "bearer", "bearerFormat": "JWT"});
            (BEARER_SCHEME.to_owned(), scheme)
        });
        api_key.into_iter().chain(bearer)
    }
}

/// `scheme://host` as the client reached the proxy: `X-Forwarded-Proto`/`X-Forwarded-Host` (which the server
/// keeps only from `trusted_proxies`, src/auth.rs), else
/// `Forwarded` (RFC 7239), else the request's own scheme and `Host` (or HTTP/2 authority), else the
/// connection's local address. Values that are not a plausible scheme or host are ignored.
pub fn origin<B>(request: &Request<B>) -> String {
    let headers = request.headers();
    let forwarded = forwarded(headers);
    let scheme = first_value(headers, "x-forwarded-proto")
        .or(forwarded.proto)
        .or_else(|| request.uri().scheme_str().map(str::to_owned))
        .map(|s| s.to_ascii_lowercase())
        .filter(|s| s == "http" || s == "https")
        .unwrap_or_else(|| "http".to_owned());
    let host = first_value(headers, "x-forwarded-host")
        .filter(|h| plausible_host(h))
        .or(forwarded.host.filter(|h| plausible_host(h)))
        .or_else(|| {
            headers
                .get(HOST)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                .filter(|h| plausible_host(h))
        })
        .or_else(|| request.uri().authority().map(|a| a.to_string()))
        .or_else(|| {
            request
                .extensions()
                .get::<LocalAddr>()
                .map(|local| local.0.to_string())
        })
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{scheme}://{host}")
}

/// The first of a comma-separated header's values, trimmed.
fn first_value(headers: &HeaderMap, name: &str) -> Option<String> {
    let value = headers.get(name)?.to_str().ok()?;
    let first = value.split(',').next()?.trim();
    (!first.is_empty()).then(|| first.to_owned())
}

#[derive(Default)]
struct Forwarded {
    proto: Option<String>,
    host: Option<String>,
}

/// `proto` and `host` of the first element of `Forwarded`.
fn forwarded(headers: &HeaderMap) -> Forwarded {
    let mut found = Forwarded::default();
    let Some(element) = first_value(headers, "forwarded") else {
        return found;
    };
    for pair in element.split(';') {
        let Some((key, value)) = pair.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"').to_owned();
        match key.trim().to_ascii_lowercase().as_str() {
            "proto" => found.proto = Some(value),
            "host" => found.host = Some(value),
            _ => {}
        }
    }
    found
}

/// A host, optionally with a port: letters, digits, `.-_:%[]`, nothing else.
fn plausible_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:%[]".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::net::SocketAddr;

    fn route(extra: &str) -> RouteConfig {
        let text = format!(
            "[[routes]]\nname = \"weather\"\npath = \"/agents/weather\"\ninbound = \"a2a\"\noutbound = \"echo\"\n{extra}"
        );
        Config::parse(&text, "test.toml").unwrap().routes.remove(0)
    }

    fn request(headers: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::builder().uri("/agents/weather/.well-known/agent.json");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn defaults_come_from_the_route() {
        let card = CardTemplate::new(&route(""))
            .render("http://h/agents/weather".into(), CardVersion::V0_2);
        let json = serde_json::to_value(&card).unwrap();
        assert_eq!(json["name"], "weather");
        assert_eq!(json["version"], "1.0.0");
        assert_eq!(json["protocolVersion"], "0.2.5");
        assert_eq!(
            json["capabilities"],
            serde_json::json!({"streaming": true, "pushNotifications": false})
        );
        assert_eq!(json["security"], serde_json::json!([]));
        assert_eq!(json["defaultInputModes"], serde_json::json!(["text/plain"]));
        assert_eq!(json["skills"][0]["id"], "weather");
        assert_eq!(json["skills"][0]["tags"], serde_json::json!(["weather"]));
    }

    #[test]
    fn configured_card_is_used() {
        let template = CardTemplate::new(&route(
            "[routes.card]\nname = \"Weather agent\"\ndescription = \"Answers\"\nversion = \"2.1\"\n\
             skills = [{ id = \"w\", name = \"W\", tags = [\"a\", \"b\"], examples = [\"rain?\"] }, { id = \"x\", name = \"X\", description = \"Ex\" }]\n",
        ));
        let card = template.render("u".into(), CardVersion::V0_3);
        assert_eq!(card.name, "Weather agent");
        assert_eq!(card.description, "Answers");
        assert_eq!(card.version, "2.1");
        assert_eq!(card.protocol_version, "0.3.0");
        assert_eq!(card.skills.len(), 2);
        assert_eq!(card.skills[0].description, "W");
        assert_eq!(card.skills[0].tags, ["a", "b"]);
        assert_eq!(card.skills[0].examples, ["rain?"]);
        assert_eq!(card.skills[1].tags, ["x"]);
    }

    #[test]
    fn origin_prefers_forwarded_headers_then_host() {
        assert_eq!(
            origin(&request(&[("host", "proxy:8080")])),
            "http://proxy:8080"
        );
        assert_eq!(
            origin(&request(&[
                ("host", "proxy:8080"),
                ("x-forwarded-proto", "HTTPS, http"),
                ("x-forwarded-host", "agents.example.com, inner")
            ])),
            "https://agents.example.com"
        );
        assert_eq!(
            origin(&request(&[
                ("host", "proxy"),
                (
                    "forwarded",
                    "for=1.2.3.4;proto=https;host=\"ex.com:8443\", for=5.6.7.8"
                )
            ])),
            "https://ex.com:8443"
        );
        assert_eq!(
            origin(&request(&[
                ("host", "proxy"),
                ("x-forwarded-host", "bad host/x"),
                ("x-forwarded-proto", "ftp")
            ])),
            "http://proxy"
        );
        let mut bare = request(&[]);
        assert_eq!(origin(&bare), "http://localhost");
        bare.extensions_mut()
            .insert(LocalAddr(SocketAddr::from(([127, 0, 0, 1], 9))));
        assert_eq!(origin(&bare), "http://127.0.0.1:9");
    }
}
