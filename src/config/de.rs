//! Value checks that run inside deserialization, so toml attaches the offending value's span.

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

pub fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
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
pub(super) fn api_keys<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
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
    let (duration, scalar) = any_duration(d)?;
    if duration.is_zero() {
        return Err(D::Error::custom(format!(
            "duration must be greater than zero, got {scalar}"
        )));
    }
    Ok(duration)
}

/// A duration that may be zero (`detach_grace = "0s"`: off).
pub(super) fn duration_or_zero<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    any_duration(d).map(|(duration, _)| duration)
}

fn any_duration<'de, D: Deserializer<'de>>(d: D) -> Result<(Duration, Scalar), D::Error> {
    let scalar = Scalar::deserialize(d)?;
    let parsed = match &scalar {
        Scalar::Int(secs) => u64::try_from(*secs).ok().map(Duration::from_secs),
        Scalar::Str(s) => parse_duration(s),
    };
    match parsed {
        None => Err(D::Error::custom(format!(
            "invalid duration {scalar} {DURATION_EXAMPLES}"
        ))),
        Some(duration) => Ok((duration, scalar)),
    }
}

pub(super) fn some_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

pub(super) fn some_byte_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
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
