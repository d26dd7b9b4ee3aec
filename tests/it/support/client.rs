//! An HTTP/1.1 client for the tests (HTTP/2 with prior knowledge on request): one fresh connection per
//! request (so dropping a response closes its connection), and SSE bodies read the way browser-side clients
//! read them: frames split on `\n\n`.

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Builder, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use std::time::Duration;

use super::{within, within_for, WAIT};

/// Sends a request; fails the test if no response head arrives in time.
pub async fn send(request: Request<Full<Bytes>>) -> Response {
    send_with(Client::builder(TokioExecutor::new()), request).await
}

/// Sends a request over HTTP/2 with prior knowledge (`h2c`, no upgrade).
pub async fn send_over_http2(request: Request<Full<Bytes>>) -> Response {
    let mut client = Client::builder(TokioExecutor::new());
    client.http2_only(true);
    send_with(client, request).await
}

async fn send_with(mut client: Builder, request: Request<Full<Bytes>>) -> Response {
    let client = client.pool_max_idle_per_host(0).build(HttpConnector::new());
    let what = format!("the response to {} {}", request.method(), request.uri());
    let response = within(&what, client.request(request))
        .await
        .unwrap_or_else(|error| panic!("{what} failed: {error}"));
    let (head, body) = response.into_parts();
    Response {
        status: head.status,
        headers: head.headers,
        body,
    }
}

/// `POST url` with a JSON body, as an SSE client sends it.
pub async fn post_json(url: &str, body: &Value) -> Response {
    let request = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a valid request");
    send(request).await
}

pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Incoming,
}

impl Response {
    /// A header's value as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The whole body.
    pub async fn bytes(self) -> Bytes {
        within("the response body", self.body.collect())
            .await
            .expect("reading the response body")
            .to_bytes()
    }

    /// The whole body as JSON.
    pub async fn json(self) -> Value {
        let bytes = self.bytes().await;
        serde_json::from_slice(&bytes).unwrap_or_else(|error| {
            panic!(
                "the body is not JSON ({error}): {}",
                String::from_utf8_lossy(&bytes)
            )
        })
    }

    /// The body as an SSE stream, read incrementally.
    pub fn sse(self) -> SseStream {
        SseStream {
            body: self.body,
            buf: Vec::new(),
            raw: Vec::new(),
            ended: false,
        }
    }
}

/// An SSE response being read. Each frame's `data:` lines are joined and parsed as JSON; comments are
/// skipped. `raw` keeps every byte received, for framing checks.
pub struct SseStream {
    body: Incoming,
    buf: Vec<u8>,
    pub raw: Vec<u8>,
    ended: bool,
}

impl SseStream {
    /// The next event, or `None` when the stream ended. Fails the test if none arrives in time, or if the
    /// stream ends inside a frame.
    pub async fn next(&mut self) -> Option<Value> {
        self.next_data().await.map(|data| parse(&data))
    }

    /// [`SseStream::next`], waiting up to `limit` for each part of it rather than [`WAIT`].
    pub async fn next_within(&mut self, limit: Duration) -> Option<Value> {
        self.next_data_within(limit).await.map(|data| parse(&data))
    }

    /// The joined `data:` lines of the next frame, as text (for payloads that are not JSON, such as
    /// `[DONE]`), or `None` when the stream ended.
    pub async fn next_data(&mut self) -> Option<String> {
        self.next_data_within(WAIT).await
    }

    /// [`SseStream::next_data`], waiting up to `limit` for each part of it rather than [`WAIT`].
    pub async fn next_data_within(&mut self, limit: Duration) -> Option<String> {
        loop {
            if let Some(end) = find(&self.buf, b"\n\n") {
                let frame: Vec<u8> = self.buf.drain(..end + 2).collect();
                match data_of(&frame[..end]) {
                    Some(data) => return Some(data),
                    None => continue, // a comment
                }
            }
            if self.ended {
                assert!(
                    self.buf.is_empty(),
                    "the stream ended inside a frame: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                return None;
            }
            match within_for(limit, "the next SSE bytes", self.body.frame()).await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                        self.raw.extend_from_slice(&data);
                    }
                }
                Some(Err(error)) => panic!("reading the SSE stream failed: {error}"),
                None => self.ended = true,
            }
        }
    }

    /// Reads events until one of type `kind` (by its `"type"` field) arrives; returns all read, that one
    /// last. Fails the test if the stream ends first.
    pub async fn until(&mut self, kind: &str) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let event = self
                .next()
                .await
                .unwrap_or_else(|| panic!("the stream ended before a {kind}: {events:#?}"));
            let found = event["type"] == kind;
            events.push(event);
            if found {
                return events;
            }
        }
    }

    /// Every remaining event, until the stream ends.
    pub async fn rest(&mut self) -> Vec<Value> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        events
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The joined `data:` lines of a frame (one optional space stripped), `None` for a comment-only frame.
fn data_of(frame: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(frame).expect("SSE frames are UTF-8");
    let data: Vec<&str> = text
        .split('\n')
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.strip_prefix(' ').unwrap_or(data))
        .collect();
    (!data.is_empty()).then(|| data.join("\n"))
}

fn parse(data: &str) -> Value {
    serde_json::from_str(data)
        .unwrap_or_else(|error| panic!("an SSE event is not JSON ({error}): {data}"))
}
