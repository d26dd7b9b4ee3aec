//! What an operator is shown of the routes (the admin listener's `GET /routes`, `agent-bridge routes`): each
//! route's pair, its options, and the downgrades its pair implies, with every secret left out: API keys (only
//! their number), JWT keys, `upstream_headers` values, and a URL's query.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::config::{Config, JwtConfig, RouteConfig};
use crate::protocol::registry;
use crate::upstream::redacted;

/// What a secret shows as.
const REDACTED: &str = "[redacted]";

/// One route, as an operator is shown it.
#[derive(Debug, Serialize)]
pub struct RouteView {
    name: String,
    path: String,
    /// `inbound->outbound`, as the metrics label it.
    pair: String,
    upstream: Option<String>,
    timeout: String,
    connect_timeout: String,
    body_timeout: String,
    detach_grace: String,
    max_body: usize,
    run_buffer: Option<usize>,
    ws_idle: Option<String>,
    rate_limit: Option<u32>,
    rate_limit_ip: Option<u32>,
    /// Each header's name; its value redacted.
    upstream_headers: BTreeMap<String, &'static str>,
    /// How many API keys the route knows (the keys themselves never show).
    api_keys: usize,
    jwt: Option<JwtView>,
    card_auth: bool,
    cors_origins: Vec<String>,
    callback_allow: Vec<String>,
    quota: BTreeMap<&'static str, usize>,
    translate: serde_json::Value,
    /// What the pair's clients or agent can say that the other side has no form for (docs/translation.md).
    downgrades: Vec<String>,
}

#[derive(Debug, Serialize)]
struct JwtView {
    issuer: String,
    audience: String,
    jwks_url: Option<String>,
    public_key: Option<&'static str>,
    algorithms: Vec<String>,
    tenant_claim: String,
}

/// Every route of `config`, in file order.
pub fn describe(config: &Config) -> Vec<RouteView> {
    config.routes.iter().map(view).collect()
}

fn view(route: &RouteConfig) -> RouteView {
    let quota = [
        ("sessions", route.quota.sessions),
        ("tasks", route.quota.tasks),
        ("conversations", route.quota.conversations),
        ("streams", route.quota.streams),
    ];
    RouteView {
        name: route.name.clone(),
        path: route.path.clone(),
        pair: route.pair(),
        upstream: route.upstream.as_ref().map(redacted),
        timeout: duration(route.timeout),
        connect_timeout: duration(route.connect_timeout),
        body_timeout: duration(route.body_timeout),
        detach_grace: duration(route.detach_grace),
        max_body: route.max_body,
        run_buffer: route.run_buffer,
        ws_idle: route.ws_idle.map(duration),
        rate_limit: route.rate_limit.map(|limit| limit.get()),
        rate_limit_ip: route.rate_limit_ip.map(|limit| limit.get()),
        upstream_headers: route
            .upstream_headers
            .iter()
            .map(|(name, _)| (name.to_string(), REDACTED))
            .collect(),
        api_keys: route.api_keys.len(),
        jwt: route.jwt.as_ref().map(jwt),
        card_auth: route.card_auth,
        cors_origins: route.cors_origins.clone(),
        callback_allow: route
            .callback_allow
            .iter()
            .map(ToString::to_string)
            .collect(),
        quota: quota
            .into_iter()
            .filter_map(|(what, limit)| Some((what, limit?.get())))
            .collect(),
        translate: without_url_secrets(route.translate.read().unwrap_or_default()),
        downgrades: registry::losses(route),
    }
}

/// `value` with every absolute http(s) URL in it [`redacted`] (an option such as `a2a_card` or `proxy_url`
/// may carry a key in its query).
fn without_url_secrets(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(text) => match text.parse::<http::Uri>() {
            Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) => {
                Value::String(redacted(&uri))
            }
            _ => Value::String(text),
        },
        Value::Array(items) => items.into_iter().map(without_url_secrets).collect(),
        Value::Object(fields) => fields
            .into_iter()
            .map(|(key, value)| (key, without_url_secrets(value)))
            .collect(),
        other => other,
    }
}

fn jwt(jwt: &JwtConfig) -> JwtView {
    JwtView {
        issuer: jwt.issuer.clone(),
        audience: jwt.audience.clone(),
        jwks_url: jwt.jwks_url.as_ref().map(redacted),
        public_key: jwt.public_key.as_ref().map(|_| REDACTED),
        algorithms: jwt.algorithms.iter().map(|a| format!("{a:?}")).collect(),
        tenant_claim: jwt.tenant_claim.clone(),
    }
}

fn duration(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

/// The routes as a table for a terminal: one line per route, then its downgrades.
pub fn table(routes: &[RouteView]) -> String {
    let mut rows = vec![[
        "NAME".to_owned(),
        "PATH".to_owned(),
        "PAIR".to_owned(),
        "UPSTREAM".to_owned(),
        "AUTH".to_owned(),
    ]];
    for route in routes {
        rows.push([
            route.name.clone(),
            route.path.clone(),
            route.pair.clone(),
            route.upstream.clone().unwrap_or_else(|| "-".to_owned()),
            auth(route),
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|column| rows.iter().map(|row| row[column].len()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for (index, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(text, "{}", cells.join("  ").trim_end());
        let Some(route) = index.checked_sub(1).map(|index| &routes[index]) else {
            continue;
        };
        for downgrade in &route.downgrades {
            let _ = writeln!(text, "    downgrade: {downgrade}");
        }
    }
    text
}

/// How clients get in: API keys, JWTs, both, or open.
fn auth(route: &RouteView) -> String {
    match (route.api_keys, &route.jwt) {
        (0, None) => "open".to_owned(),
        (keys, None) => format!("{keys} api keys"),
        (0, Some(_)) => "jwt".to_owned(),
        (keys, Some(_)) => format!("{keys} api keys, jwt"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTES: &str = r#"
[[routes]]
name = "weather"
path = "/weather"
inbound = "ag-ui"
outbound = "a2a"
upstream = "http://127.0.0.1:9001/a2a?key=query-secret"
[routes.upstream_headers]
Authorization = "Bearer header-secret"
[routes.api_keys]
"api-key-secret" = "acme"
[routes.jwt]
issuer = "https://auth.example"
audience = "agent-bridge"
jwks_url = "https://auth.example/jwks?token=jwks-secret"
algorithms = ["RS256"]
[routes.quota]
streams = 5
[routes.translate]
approval_words = ["sure"]
a2a_card = "https://cards.example/weather.json?sig=card-secret"

[[routes]]
name = "echo"
path = "/echo"
inbound = "cmdc"
outbound = "echo"
"#;

    #[test]
    fn routes_show_their_pair_options_and_downgrades_and_no_secret() {
        let config = Config::parse(ROUTES, "routes.toml").unwrap_or_else(|e| panic!("{e}"));
        let routes = describe(&config);
        let json = serde_json::to_string(&routes).unwrap();
        for secret in [
            "query-secret",
            "header-secret",
            "api-key-secret",
            "jwks-secret",
            "card-secret",
        ] {
            assert!(!json.contains(secret), "{secret} in {json}");
        }
        let weather = serde_json::to_value(&routes[0]).unwrap();
        assert_eq!(weather["pair"], "ag-ui->a2a");
        assert_eq!(weather["upstream"], "http://127.0.0.1:9001/a2a");
        assert_eq!(weather["upstream_headers"]["authorization"], REDACTED);
        assert_eq!(weather["api_keys"], 1);
        assert_eq!(weather["jwt"]["jwks_url"], "https://auth.example/jwks");
        assert_eq!(weather["quota"], serde_json::json!({"streams": 5}));
        assert_eq!(weather["translate"]["approval_words"][0], "sure");
        let card = &weather["translate"]["a2a_card"];
        assert_eq!(card, "https://cards.example/weather.json");
        assert_eq!(weather["timeout"], "2m");
        let downgrades = weather["downgrades"].as_array().unwrap();
        assert!(
            downgrades
                .iter()
                .any(|d| d.as_str().unwrap().contains("not sent")),
            "{downgrades:?}"
        );

        let table = table(&routes);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{table}");
        assert!(
            lines[1].contains("ag-ui->a2a") && lines[1].contains("1 api keys, jwt"),
            "{table}"
        );
        assert!(lines[2].starts_with("    downgrade: "), "{table}");
        assert!(
            table.contains("cmdc->echo") && table.contains("open"),
            "{table}"
        );
        assert!(!table.contains("secret"), "{table}");
    }
}
