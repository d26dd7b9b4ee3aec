//! Who may use a route, and how often: `[routes.api_keys]`, `[routes.jwt]`, `rate_limit` and
//! `rate_limit_ip`, the same for every inbound; and who the client is behind `trusted_proxies`. Protocol-free:
//! a refusal is an [`Error`] (`unauthorized`, `rate_limited`, `auth_unavailable`) that each inbound answers
//! in its own shape, with the headers [`refusal_headers`] adds.
//!
//! - The key: `X-API-Key` (header names are case-insensitive, so A2A's `X-API-KEY` too), else
//!   `Authorization: Bearer <key>`, else, where the inbound reads it (the CMDC WebSocket), `?api_key=`.
//! - A route with `[routes.jwt]` takes a bearer token its identity provider signed as well (src/auth/jwt.rs):
//!   either an API key or a valid token admits; a token whose key set cannot be fetched is a 503.
//! - A route with keys: a missing or unknown key is a 401, and counts against `rate_limit_ip` of the client's
//!   address (a 429 once over, so guessing keys is slow); a known key counts against `rate_limit` of that key.
//! - An open route (no keys): every request counts against `rate_limit_ip` and `rate_limit`, both per client
//!   address, so that sending a different key each time buys nothing.
//! - The client's address is the socket peer, or, when that peer is one of `trusted_proxies`, the right-most
//!   address of `X-Forwarded-For` (else `Forwarded: for=`) that is not a trusted proxy ([`TrustedProxies`]);
//!   IPv6 clients count per /64, which one host usually holds whole.
//! - A 401 says `WWW-Authenticate: Bearer realm="agent-bridge"`, with `error="invalid_token"` when a key was
//!   sent (RFC 6750 §3); a 429 says `Retry-After: <seconds>`.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use http::header::{AUTHORIZATION, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, Request, Response};

use crate::config::RouteConfig;
use crate::connection::PeerAddr;
use crate::error::{Error, Result};
use crate::route_state::RouteState;

mod jwt;

const CHALLENGE: &str = r#"Bearer realm="agent-bridge""#;
const CHALLENGE_INVALID: &str = r#"Bearer realm="agent-bridge", error="invalid_token""#;
/// Every this many checks, a limiter forgets the clients whose budget is whole again: its memory follows
/// the clients of the last minute, not every address ever seen.
const FORGET_EVERY: usize = 4096;

/// A route's gate: its API keys, its token verifier and its rate limits.
pub struct Access {
    /// API key → tenant.
    keys: HashMap<String, String>,
    /// `[routes.jwt]`; with no keys either, the route is open.
    jwt: Option<Arc<jwt::Verifier>>,
    /// `rate_limit`: per known key, or per address on an open route.
    per_client: Option<Arc<Limiter<Client>>>,
    /// `rate_limit_ip`: per address, for every request of an open route and every refused one otherwise.
    per_address: Option<Arc<Limiter<IpAddr>>>,
}

/// Where a route reads a key besides the headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySources {
    Headers,
    /// Also `?api_key=` (browsers cannot set headers on a WebSocket).
    HeadersAndQuery,
}

/// An admitted request's client.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The API key it sent, if any (never a token: a token is no name to meter under).
    pub key: Option<String>,
    /// Its tenant; empty on an open route. Conversations, sessions and tasks are kept per tenant.
    pub tenant: String,
    /// Whose `rate_limit` budget its requests take.
    client: Client,
    address: IpAddr,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Client {
    Key(String),
    /// A token's tenant: a client's tokens change, its tenant does not.
    Tenant(String),
    Address(IpAddr),
}

impl Access {
    /// The rate-limit buckets and the fetched key set are `kept` across the route's reloads while the
    /// limits and `[routes.jwt]` stay the same.
    pub fn new(route: &RouteConfig, kept: &RouteState) -> Self {
        if route.api_keys.is_empty() && route.jwt.is_none() {
            tracing::info!(route = %route.name, "no [routes.api_keys] or [routes.jwt]: every client is let in");
        }
        Self {
            keys: route.api_keys.iter().cloned().collect(),
            jwt: route.jwt.as_ref().map(|config| {
                kept.keep((config, route.connect_timeout), || {
                    jwt::Verifier::new(config, route.connect_timeout)
                })
            }),
            per_client: route
                .rate_limit
                .map(|limit| kept.keep(limit, || Limiter::new(limit))),
            per_address: route
                .rate_limit_ip
                .map(|limit| kept.keep(limit, || Limiter::new(limit))),
        }
    }

    /// Whether the route takes every client (it has no API keys and no `[routes.jwt]`).
    pub fn is_open(&self) -> bool {
        self.keys.is_empty() && self.jwt.is_none()
    }

    /// The client of `request`, counted as one request: 401 without a key or token the route knows, 429 over
    /// a limit, 503 when the token's key set cannot be had.
    pub async fn admit<B>(&self, request: &Request<B>, sources: KeySources) -> Result<Caller> {
        let key = key_in_headers(request.headers()).or_else(|| match sources {
            KeySources::Headers => None,
            KeySources::HeadersAndQuery => key_in_query(request.uri().query().unwrap_or("")),
        });
        let address = request
            .extensions()
            .get::<PeerAddr>()
            .map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |peer| {
                client_address(peer.0.ip())
            });
        let caller = if self.is_open() {
            Caller {
                key,
                tenant: String::new(),
                client: Client::Address(address),
                address,
            }
        } else {
            let known = key.as_ref().and_then(|key| self.keys.get(key));
            match (known, &self.jwt, key) {
                (Some(tenant), _, key) => Caller {
                    tenant: tenant.clone(),
                    client: Client::Key(key.clone().unwrap_or_default()),
                    key,
                    address,
                },
                (None, Some(jwt), Some(token)) => {
                    let tenant = jwt.tenant(&token).await.or_else(|error| {
                        check(self.per_address.as_deref(), &address)?;
                        Err(error)
                    })?;
                    Caller {
                        client: Client::Tenant(tenant.clone()),
                        tenant,
                        key: None,
                        address,
                    }
                }
                (None, _, key) => {
                    check(self.per_address.as_deref(), &address)?;
                    return Err(Error::unauthorized(key.is_some()));
                }
            }
        };
        self.charge(&caller)?;
        Ok(caller)
    }

    /// Counts one more request of an admitted caller (a WebSocket action): 429 over a limit.
    pub fn charge(&self, caller: &Caller) -> Result<()> {
        if self.is_open() {
            check(self.per_address.as_deref(), &caller.address)?;
        }
        check(self.per_client.as_deref(), &caller.client)
    }
}

/// `trusted_proxies`: the peers whose forwarding headers (`X-Forwarded-For`, `-Proto`, `-Host`,
/// `Forwarded`) say who the client is and how it reached the proxy.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<ipnet::IpNet>);

/// The headers only a trusted proxy may set.
const FORWARDING_HEADERS: [&str; 4] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "forwarded",
];

impl TrustedProxies {
    pub fn new(proxies: Vec<ipnet::IpNet>) -> Self {
        Self(proxies)
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// Puts the request's client in its extensions as [`PeerAddr`]: the socket `peer`, or, when `peer` is a
    /// trusted proxy, the right-most forwarded address that is not one. From any other peer the forwarding
    /// headers are removed, so that nothing further in (the A2A card's url) can be steered by a client.
    pub fn resolve<B>(&self, request: &mut Request<B>, peer: SocketAddr) {
        let client = if self.trusts(peer.ip()) {
            forwarded_for(request.headers())
                .into_iter()
                .rev()
                .find(|ip| !self.trusts(*ip))
                .map_or(peer, |ip| SocketAddr::new(ip, 0))
        } else {
            for name in FORWARDING_HEADERS {
                request.headers_mut().remove(name);
            }
            peer
        };
        request.extensions_mut().insert(PeerAddr(client));
    }
}

/// The addresses a request passed through, client first: `X-Forwarded-For`, else the `for=` of each
/// `Forwarded` element. An entry that is no address (`unknown`, an obfuscated name) ends the list there: what
/// stands left of it cannot be placed.
fn forwarded_for(headers: &HeaderMap) -> Vec<IpAddr> {
    let values = |name| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|value: &HeaderValue| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .collect::<Vec<_>>()
    };
    let mut entries = values("x-forwarded-for");
    if entries.is_empty() {
        entries = values("forwarded")
            .into_iter()
            .filter_map(|element| {
                element.split(';').find_map(|pair| {
                    let (key, value) = pair.split_once('=')?;
                    key.trim().eq_ignore_ascii_case("for").then(|| value.trim())
                })
            })
            .collect();
    }
    let mut chain = Vec::new();
    for entry in entries.iter().rev() {
        match parse_node(entry) {
            Some(ip) => chain.push(ip),
            None => break,
        }
    }
    chain.reverse();
    chain
}

/// `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`, `"[2001:db8::1]:80"`.
fn parse_node(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim_matches('"');
    if let Ok(ip) = entry.parse() {
        return Some(ip);
    }
    if let Ok(socket) = entry.parse::<SocketAddr>() {
        return Some(socket.ip());
    }
    entry
        .strip_prefix('[')
        .and_then(|rest| rest.split(']').next())
        .and_then(|ip| ip.parse().ok())
}

/// Adds what a refusal of [`Access`] carries besides its body, whatever the inbound's shape: the challenge on
/// a 401, `Retry-After` on a 429.
pub fn refusal_headers(headers: &mut HeaderMap, error: &Error) {
    if error.is_unauthorized() {
        let challenge = if error.presented_credentials() {
            CHALLENGE_INVALID
        } else {
            CHALLENGE
        };
        headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    }
    if let Some(seconds) = error.retry_after() {
        headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
}

/// [`refusal_headers`] on a whole response.
pub fn with_refusal_headers<B>(mut response: Response<B>, error: &Error) -> Response<B> {
    refusal_headers(response.headers_mut(), error);
    response
}

/// A token bucket of `per_minute` requests per key, refilled evenly over the minute.
struct Limiter<K: Hash + Eq + Clone> {
    buckets: DefaultKeyedRateLimiter<K>,
    checks: AtomicUsize,
}

impl<K: Hash + Eq + Clone> Limiter<K> {
    fn new(per_minute: NonZeroU32) -> Self {
        Self {
            buckets: RateLimiter::keyed(Quota::per_minute(per_minute)),
            checks: AtomicUsize::new(0),
        }
    }
}

fn check<K: Hash + Eq + Clone>(limiter: Option<&Limiter<K>>, key: &K) -> Result<()> {
    let Some(limiter) = limiter else {
        return Ok(());
    };
    if limiter.checks.fetch_add(1, Ordering::Relaxed) % FORGET_EVERY == FORGET_EVERY - 1 {
        limiter.buckets.retain_recent();
    }
    limiter.buckets.check_key(key).map_err(|not_until| {
        let wait = not_until.wait_time_from(DefaultClock::default().now());
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        Error::rate_limited(seconds.max(1))
    })
}

/// The address a client is counted by: IPv4 (an IPv4-mapped IPv6 address too) as it is, IPv6 by its /64.
fn client_address(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        v4 => v4,
    }
}

/// `X-API-Key`, else `Authorization: Bearer`; empty values count as absent.
fn key_in_headers(headers: &HeaderMap) -> Option<String> {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if let Some(key) = header("x-api-key").map(str::trim).filter(|k| !k.is_empty()) {
        return Some(key.to_owned());
    }
    let (scheme, token) = header(AUTHORIZATION.as_str())?.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

fn key_in_query(query: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        (name == "api_key" && !value.is_empty()).then(|| percent_decode(value))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn access(extra: &str) -> Access {
        let text = format!(
            "[[routes]]\nname = \"r\"\npath = \"/r\"\ninbound = \"ag-ui\"\noutbound = \"echo\"\n{extra}"
        );
        Access::new(
            &Config::parse(&text, "t.toml").unwrap().routes[0],
            &RouteState::default(),
        )
    }

    fn request(from: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut request = Request::builder().uri("/r?api_key=sk-q");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut request = request.body(()).unwrap();
        let peer: SocketAddr = from.parse().unwrap();
        request.extensions_mut().insert(PeerAddr(peer));
        request
    }

    #[tokio::test]
    async fn keys_come_from_either_header_or_the_query_where_allowed() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer sk-1"));
        assert_eq!(key_in_headers(&headers).as_deref(), Some("sk-1"));
        headers.insert("X-API-KEY", HeaderValue::from_static("sk-2"));
        assert_eq!(key_in_headers(&headers).as_deref(), Some("sk-2"));
        assert_eq!(key_in_query("a=1&api_key=sk%2D3").as_deref(), Some("sk-3"));
        assert_eq!(key_in_query("api_key="), None);

        let gate = access("[routes.api_keys]\n\"sk-q\" = \"acme\"\n");
        let by_query = request("127.0.0.1:1", &[]);
        assert!(gate.admit(&by_query, KeySources::Headers).await.is_err());
        let caller = gate
            .admit(&by_query, KeySources::HeadersAndQuery)
            .await
            .unwrap();
        assert_eq!(caller.tenant, "acme");
    }

    #[tokio::test]
    async fn missing_and_wrong_keys_are_told_apart_in_the_challenge() {
        let gate = access("[routes.api_keys]\n\"sk-a\" = \"acme\"\n");
        let missing = gate
            .admit(&request("127.0.0.1:1", &[]), KeySources::Headers)
            .await
            .unwrap_err();
        let wrong = gate
            .admit(
                &request("127.0.0.1:1", &[("x-api-key", "sk-b")]),
                KeySources::Headers,
            )
            .await
            .unwrap_err();
        let challenge = |error: &Error| {
            let mut headers = HeaderMap::new();
            refusal_headers(&mut headers, error);
            headers[WWW_AUTHENTICATE].to_str().unwrap().to_owned()
        };
        assert_eq!(missing.http_status(), http::StatusCode::UNAUTHORIZED);
        assert_eq!(challenge(&missing), CHALLENGE);
        assert_eq!(challenge(&wrong), CHALLENGE_INVALID);
    }

    #[tokio::test]
    async fn an_open_route_counts_per_address_whatever_key_is_sent() {
        let gate = access("rate_limit = 2\n");
        for key in ["k1", "k2"] {
            let caller = gate
                .admit(
                    &request("10.0.0.1:5", &[("x-api-key", key)]),
                    KeySources::Headers,
                )
                .await
                .unwrap();
            assert_eq!(caller.tenant, "");
        }
        let third = gate
            .admit(
                &request("10.0.0.1:6", &[("x-api-key", "k3")]),
                KeySources::Headers,
            )
            .await
            .unwrap_err();
        assert!(third.retry_after().is_some_and(|s| s >= 1));
        assert!(gate
            .admit(&request("10.0.0.2:5", &[]), KeySources::Headers)
            .await
            .is_ok());
    }

    #[test]
    fn ipv6_clients_count_per_slash_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        assert_eq!(client_address(a), client_address(b));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(
            client_address(mapped),
            "192.0.2.7".parse::<IpAddr>().unwrap()
        );
    }

    #[tokio::test]
    async fn failed_keys_are_limited_per_address_and_known_keys_are_not() {
        let gate = access("rate_limit_ip = 2\n[routes.api_keys]\n\"sk-a\" = \"acme\"\n");
        let wrong = || request("10.0.0.1:5", &[("x-api-key", "guess")]);
        for _ in 0..2 {
            let error = gate.admit(&wrong(), KeySources::Headers).await.unwrap_err();
            assert!(error.is_unauthorized());
        }
        let limited = gate.admit(&wrong(), KeySources::Headers).await.unwrap_err();
        assert!(limited.retry_after().is_some());
        let right = request("10.0.0.1:5", &[("authorization", "Bearer sk-a")]);
        assert_eq!(
            gate.admit(&right, KeySources::Headers)
                .await
                .unwrap()
                .tenant,
            "acme"
        );
    }

    fn resolved(proxies: &[&str], from: &str, headers: &[(&str, &str)]) -> (IpAddr, HeaderMap) {
        let proxies = proxies.iter().map(|net| net.parse().unwrap()).collect();
        let mut request = request("127.0.0.9:1", headers);
        TrustedProxies::new(proxies).resolve(&mut request, from.parse().unwrap());
        let PeerAddr(client) = request.extensions().get::<PeerAddr>().copied().unwrap();
        (client.ip(), request.headers().clone())
    }

    #[test]
    fn forwarded_headers_count_only_from_trusted_proxies() {
        let chain = [
            ("x-forwarded-for", "203.0.113.9, 198.51.100.7, 10.0.0.2"),
            ("x-forwarded-host", "agents.example"),
        ];
        // An untrusted peer: its own address, and its forwarding headers are gone.
        let (client, headers) = resolved(&[], "192.0.2.1:5", &chain);
        assert_eq!(client, "192.0.2.1".parse::<IpAddr>().unwrap());
        assert!(headers.get("x-forwarded-host").is_none());
        assert!(headers.get("x-forwarded-for").is_none());
        // A trusted one: the right-most address that is not a trusted proxy; the left ones are the client's
        // own claims.
        let (client, headers) = resolved(&["10.0.0.0/8"], "10.0.0.1:5", &chain);
        assert_eq!(client, "198.51.100.7".parse::<IpAddr>().unwrap());
        assert_eq!(headers["x-forwarded-host"], "agents.example");
        // Only proxies in the chain: the left-most.
        let (client, _) = resolved(
            &["10.0.0.0/8"],
            "10.0.0.1:5",
            &[("x-forwarded-for", "10.1.1.1, 10.0.0.2")],
        );
        assert_eq!(client, "10.0.0.1".parse::<IpAddr>().unwrap());
        // `Forwarded` when there is no X-Forwarded-For, with ports and IPv6 brackets.
        let (client, _) = resolved(
            &["10.0.0.1/32"],
            "10.0.0.1:5",
            &[(
                "forwarded",
                r#"for=192.0.2.60;proto=https, for="[2001:db8::1]:4711""#,
            )],
        );
        assert_eq!(client, "2001:db8::1".parse::<IpAddr>().unwrap());
        // Nothing readable: the proxy itself.
        let (client, _) = resolved(
            &["10.0.0.1/32"],
            "10.0.0.1:5",
            &[("x-forwarded-for", "unknown")],
        );
        assert_eq!(client, "10.0.0.1".parse::<IpAddr>().unwrap());
    }
}
