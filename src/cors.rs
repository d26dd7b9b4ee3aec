//! A route's browser policy (`cors_origins`), the same for every protocol. Without the key a route sends no
//! CORS headers at all, so a web page of another origin cannot read its answers nor pass a preflight. A
//! listed origin gets `Access-Control-Allow-Origin: <that origin>` and its preflights are answered here.

use bytes::Bytes;
use http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_METHOD, HOST, ORIGIN, VARY,
};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};

use crate::body::{self, Body};
use crate::error::{Error, Result};

/// Whether `origin` (`scheme://host[:port]`) names the host the request was sent to.
fn is_same_origin(origin: &HeaderValue, host: Option<&HeaderValue>) -> bool {
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|origin| origin.parse::<http::Uri>().ok())
        .and_then(|uri| {
            uri.authority()
                .map(|authority| authority.as_str().to_owned())
        });
    match (origin_host, host.and_then(|host| host.to_str().ok())) {
        (Some(origin_host), Some(host)) => origin_host.eq_ignore_ascii_case(host),
        _ => false,
    }
}

/// What a preflight of a listed origin is allowed: every method and request header an inbound reads.
const ALLOWED_METHODS: &str = "GET, POST, DELETE, OPTIONS";
const ALLOWED_HEADERS: &str = "authorization, content-type, x-api-key, last-event-id, accept";
/// How long a browser may keep a preflight's answer, in seconds.
const PREFLIGHT_MAX_AGE: &str = "600";

#[derive(Debug, Clone, Default)]
pub struct Cors {
    origins: Vec<String>,
}

impl Cors {
    pub fn new(origins: &[String]) -> Self {
        Self {
            origins: origins.to_vec(),
        }
    }

    /// The request's `Origin`, when it is listed.
    pub fn allowed_origin(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        let origin = headers.get(ORIGIN)?;
        let text = origin.to_str().ok()?;
        self.origins
            .iter()
            .any(|listed| listed == text)
            .then(|| origin.clone())
    }

    /// Refuses a WebSocket handshake from a web page of an unlisted origin. Browsers apply no CORS to
    /// WebSockets: without this, any page could open one from its visitor's browser. A page of the proxy's
    /// own origin (the `Host` it was asked for) may; clients that are not browsers send no `Origin`.
    pub fn check_websocket(&self, headers: &HeaderMap) -> Result<()> {
        let Some(origin) = headers.get(ORIGIN) else {
            return Ok(());
        };
        if self.allowed_origin(headers).is_some() || is_same_origin(origin, headers.get(HOST)) {
            return Ok(());
        }
        Err(Error::forbidden(format!(
            "a WebSocket from origin {} is not allowed on this route (cors_origins)",
            String::from_utf8_lossy(origin.as_bytes())
        )))
    }

    /// The answer to a preflight of a listed origin; `None` for every other request, served as usual (an
    /// unlisted origin's preflight then gets no allow headers).
    pub fn preflight<B>(
        &self,
        request: &Request<B>,
        origin: Option<&HeaderValue>,
    ) -> Option<Response<Body>> {
        let is_preflight = request.method() == Method::OPTIONS
            && request
                .headers()
                .contains_key(ACCESS_CONTROL_REQUEST_METHOD);
        let origin = origin.filter(|_| is_preflight)?;
        let mut response = Response::new(body::full(Bytes::new()));
        *response.status_mut() = StatusCode::NO_CONTENT;
        let headers = response.headers_mut();
        headers.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOWED_METHODS),
        );
        headers.insert(
            ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOWED_HEADERS),
        );
        headers.insert(
            ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(PREFLIGHT_MAX_AGE),
        );
        Some(self.finish(response, Some(origin)))
    }

    /// Adds the route's CORS headers to an answer: the origin when it is listed, and `Vary: Origin` on a
    /// route that has a list (its answers differ by origin, and caches must know).
    pub fn finish(
        &self,
        mut response: Response<Body>,
        origin: Option<&HeaderValue>,
    ) -> Response<Body> {
        if self.origins.is_empty() {
            return response;
        }
        let headers = response.headers_mut();
        headers.append(VARY, HeaderValue::from_static("origin"));
        if let Some(origin) = origin {
            headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, origin: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .header(ORIGIN, origin)
            .header(ACCESS_CONTROL_REQUEST_METHOD, "POST")
            .body(())
            .unwrap()
    }

    #[test]
    fn a_websocket_is_refused_only_to_a_page_of_another_unlisted_origin() {
        let cors = Cors::new(&["https://app.example".to_owned()]);
        let handshake = |origin: Option<&str>| {
            let mut request = Request::builder().header(HOST, "proxy.example:8080");
            if let Some(origin) = origin {
                request = request.header(ORIGIN, origin);
            }
            cors.check_websocket(request.body(()).unwrap().headers())
        };
        assert!(handshake(None).is_ok());
        assert!(handshake(Some("https://app.example")).is_ok());
        assert!(handshake(Some("http://PROXY.example:8080")).is_ok());
        for foreign in ["https://evil.example", "http://proxy.example:9090", "null"] {
            let refused = handshake(Some(foreign)).unwrap_err();
            assert!(refused.is_forbidden(), "{foreign}");
        }
    }

    #[test]
    fn only_listed_origins_are_allowed_and_named() {
        let cors = Cors::new(&["https://app.example".to_owned()]);
        let listed = request(Method::POST, "https://app.example");
        let origin = cors.allowed_origin(listed.headers());
        assert_eq!(origin.as_ref().unwrap(), "https://app.example");
        let answer = cors.finish(Response::new(body::full("")), origin.as_ref());
        assert_eq!(
            answer.headers()[ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://app.example"
        );
        assert_eq!(answer.headers()[VARY], "origin");

        let other = request(Method::POST, "https://evil.example");
        assert_eq!(cors.allowed_origin(other.headers()), None);
        let answer = cors.finish(Response::new(body::full("")), None);
        assert!(!answer.headers().contains_key(ACCESS_CONTROL_ALLOW_ORIGIN));
    }

    #[test]
    fn preflights_are_answered_for_listed_origins_only() {
        let cors = Cors::new(&["https://app.example".to_owned()]);
        let listed = request(Method::OPTIONS, "https://app.example");
        let origin = cors.allowed_origin(listed.headers());
        let answer = cors.preflight(&listed, origin.as_ref()).unwrap();
        assert_eq!(answer.status(), StatusCode::NO_CONTENT);
        assert!(answer.headers()[ACCESS_CONTROL_ALLOW_METHODS]
            .to_str()
            .unwrap()
            .contains("POST"));
        let other = request(Method::OPTIONS, "https://evil.example");
        assert!(cors
            .preflight(&other, cors.allowed_origin(other.headers()).as_ref())
            .is_none());
        let closed = Cors::default();
        assert!(closed.allowed_origin(listed.headers()).is_none());
        let answer = closed.finish(Response::new(body::full("")), None);
        assert!(answer.headers().is_empty(), "no CORS headers at all");
    }
}
