//! Server-sent events: framing only.
//!
//! This module knows no agent protocol. It turns bytes into [`SseEvent`]s ([`SseDecoder`],
//! [`SseReader`]) and events into bytes ([`write_event`], [`write_comment`], [`SseBody`]); what the
//! `data` means is each protocol module's business.
//!
//! Decoding follows the WHATWG EventSource parsing rules with three deliberate differences, all
//! chosen because we are a proxy rather than a browser:
//! - `id` belongs to the event that carries it and is not inherited by later events (callers that
//!   resume with `Last-Event-ID` track the last one themselves);
//! - an event still open when the stream ends is delivered by [`SseDecoder::finish`] instead of
//!   being dropped, since some upstreams close without the final blank line (the decoder tells,
//!   for protocols where that cut matters);
//! - invalid UTF-8 in a field we keep is an error rather than being replaced with U+FFFD, so a
//!   corrupt upstream is reported instead of silently forwarded.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::Stream;
use http::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use memchr::{memchr, memchr2};
use tokio::time::{Instant, Sleep};

/// One decoded SSE event (the `event:` name if any, the joined `data:` lines, the `id:` if any).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
    pub id: Option<String>,
}

/// Why a byte stream could not be framed as SSE.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SseError {
    #[error("SSE event larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("SSE stream is not valid UTF-8")]
    InvalidUtf8,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Incremental decoder: push bytes as they arrive, pull complete events.
///
/// Like mini-redis's codec, it first looks for a whole line in the buffer and only then parses
/// it; "no line end yet" means "push more". Bytes already searched are remembered, so a long
/// line arriving in many small chunks is scanned once.
#[derive(Debug)]
pub struct SseDecoder {
    /// Unparsed input; always starts at the beginning of a line.
    buf: BytesMut,
    /// How many bytes at the front of `buf` are known to hold no line end.
    scanned: usize,
    max_event_bytes: usize,
    /// Bytes of the lines read since the last blank line, line ends excluded.
    event_bytes: usize,
    /// The stream may still begin with a byte order mark that has to be skipped.
    at_stream_start: bool,
    /// The last line ended with a CR that was the final buffered byte: an LF arriving next
    /// belongs to the same CRLF and must not end another (empty) line.
    after_cr: bool,
    /// `finish` was called: an unterminated last line counts as complete.
    at_eof: bool,
    /// The input ended after fields of an event but before its blank line.
    ended_inside_event: bool,
    pending: PendingEvent,
}

impl SseDecoder {
    /// A decoder that rejects any event larger than `max_event_bytes`.
    ///
    /// An event's size is the bytes of its lines as received (comments and field names included,
    /// line ends not), so the limit does not depend on how the stream is chunked, and a line that
    /// never ends is rejected as soon as it alone passes the limit.
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            scanned: 0,
            max_event_bytes,
            event_bytes: 0,
            at_stream_start: true,
            after_cr: false,
            at_eof: false,
            ended_inside_event: false,
            pending: PendingEvent::default(),
        }
    }

    /// Buffers `chunk`; nothing is parsed until [`next_event`](Self::next_event).
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, Ok(None) when more bytes are needed.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        if !self.skip_bom() {
            return Ok(None);
        }
        loop {
            self.skip_lf_after_cr();
            let Some(end) = self.find_line_end() else {
                return self.incomplete_line();
            };
            let terminator = self.terminator_len(end);
            self.count_line(end)?;
            let dispatched = self.pending.apply_line(&self.buf[..end])?;
            self.buf.advance(end + terminator);
            self.scanned = 0;
            if dispatched.is_some() {
                return Ok(dispatched);
            }
        }
    }

    /// At end of input: the last event if the stream ended without its blank line (tolerated),
    /// else None.
    ///
    /// Events still complete in the buffer come first, so calling this until it returns None
    /// drains everything.
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseError> {
        self.at_eof = true;
        self.next_event()
    }

    /// Whether the input ended inside an event: fields arrived after the last blank line. That event, if it
    /// had data, was delivered by [`finish`](Self::finish); a protocol without an end marker of its own may
    /// still read the cut as the stream breaking off.
    pub fn ended_inside_event(&self) -> bool {
        self.ended_inside_event
    }

    /// Drops a leading UTF-8 BOM. False when the buffer is a strict prefix of one and more bytes
    /// are needed to tell.
    fn skip_bom(&mut self) -> bool {
        if !self.at_stream_start {
            return true;
        }
        if self.buf.len() < BOM.len() && BOM.starts_with(&self.buf) && !self.at_eof {
            return false;
        }
        if self.buf.starts_with(BOM) {
            self.buf.advance(BOM.len());
        }
        self.at_stream_start = false;
        true
    }

    fn skip_lf_after_cr(&mut self) {
        if self.after_cr && !self.buf.is_empty() {
            if self.buf[0] == b'\n' {
                self.buf.advance(1);
            }
            self.after_cr = false;
        }
    }

    /// Offset of the first CR or LF, searching only bytes not searched before.
    fn find_line_end(&mut self) -> Option<usize> {
        match memchr2(b'\n', b'\r', &self.buf[self.scanned..]) {
            Some(i) => Some(self.scanned + i),
            None => {
                self.scanned = self.buf.len();
                None
            }
        }
    }

    /// Length of the line end at `end`: 2 for CRLF, else 1. A CR that is the last buffered byte
    /// ends the line now (a lone CR is a valid line end) and remembers to swallow a following LF.
    fn terminator_len(&mut self, end: usize) -> usize {
        if self.buf[end] != b'\r' {
            return 1;
        }
        match self.buf.get(end + 1) {
            Some(b'\n') => 2,
            Some(_) => 1,
            None => {
                self.after_cr = true;
                1
            }
        }
    }

    /// No line end is buffered: wait for more, or at end of input treat what is left as the last
    /// line and close the event.
    fn incomplete_line(&mut self) -> Result<Option<SseEvent>, SseError> {
        if !self.at_eof {
            self.check_size(self.buf.len())?;
            return Ok(None);
        }
        if !self.buf.is_empty() {
            self.count_line(self.buf.len())?;
            // Not empty, so it cannot dispatch; only its fields matter.
            self.pending.apply_line(&self.buf)?;
            self.buf.clear();
            self.scanned = 0;
        }
        self.event_bytes = 0;
        self.ended_inside_event |= self.pending.has_fields();
        Ok(self.pending.dispatch())
    }

    /// Adds a complete line to the event's size; a blank line ends the event and the count.
    fn count_line(&mut self, len: usize) -> Result<(), SseError> {
        if len == 0 {
            self.event_bytes = 0;
            return Ok(());
        }
        self.check_size(len)?;
        self.event_bytes += len;
        Ok(())
    }

    fn check_size(&self, line_len: usize) -> Result<(), SseError> {
        if self.event_bytes + line_len > self.max_event_bytes {
            return Err(SseError::TooLarge {
                limit: self.max_event_bytes,
            });
        }
        Ok(())
    }
}

/// The fields of the event being accumulated, line by line.
#[derive(Debug, Default)]
struct PendingEvent {
    event: Option<String>,
    data: String,
    /// A `data` line was seen; distinguishes `data:` (dispatch "") from no data at all.
    has_data: bool,
    id: Option<String>,
}

impl PendingEvent {
    /// Applies one line (without its line end); a blank line yields the finished event.
    fn apply_line(&mut self, line: &[u8]) -> Result<Option<SseEvent>, SseError> {
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        if line[0] == b':' {
            return Ok(None);
        }
        let (name, value) = split_field(line);
        match name {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(utf8(value)?);
                self.has_data = true;
            }
            b"event" => self.event = Some(utf8(value)?.to_owned()),
            // Per spec an id containing NUL is ignored: it could not be sent back as a header.
            b"id" if memchr(0, value).is_none() => self.id = Some(utf8(value)?.to_owned()),
            // `retry` is for browsers reconnecting on their own; unknown fields are ignored.
            _ => {}
        }
        Ok(None)
    }

    /// Whether any field of the event arrived yet (comments are no fields).
    fn has_fields(&self) -> bool {
        self.has_data || self.event.is_some() || self.id.is_some()
    }

    /// Ends the event: returns it if it had data, and starts the next one empty either way.
    fn dispatch(&mut self) -> Option<SseEvent> {
        let pending = std::mem::take(self);
        if !pending.has_data {
            return None;
        }
        Some(SseEvent {
            // An empty `event:` means the default type, the same as none.
            event: pending.event.filter(|name| !name.is_empty()),
            data: pending.data,
            id: pending.id,
        })
    }
}

/// `name:value` with one optional space after the colon; a line without a colon is a name with
/// an empty value.
fn split_field(line: &[u8]) -> (&[u8], &[u8]) {
    match memchr(b':', line) {
        Some(colon) => {
            let value = &line[colon + 1..];
            (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
        }
        None => (line, &[]),
    }
}

fn utf8(bytes: &[u8]) -> Result<&str, SseError> {
    std::str::from_utf8(bytes).map_err(|_| SseError::InvalidUtf8)
}

/// Why [`SseReader::next`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SseReadError {
    #[error(transparent)]
    Frame(#[from] SseError),
    #[error("reading the stream failed: {0}")]
    Body(String),
}

/// Reads an http_body::Body (e.g. hyper::body::Incoming) as SSE events.
#[derive(Debug)]
pub struct SseReader<B> {
    body: B,
    decoder: SseDecoder,
    body_done: bool,
    /// The body's bytes read since [`SseReader::take_bytes_read`] last took them.
    bytes_read: u64,
}

impl<B> SseReader<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    pub fn new(body: B, max_event_bytes: usize) -> Self {
        Self {
            body,
            decoder: SseDecoder::new(max_event_bytes),
            body_done: false,
            bytes_read: 0,
        }
    }

    /// How many bytes of the body were read since the last call.
    pub fn take_bytes_read(&mut self) -> u64 {
        std::mem::take(&mut self.bytes_read)
    }

    /// Next event; Ok(None) at a clean end of the body (after `finish`).
    pub async fn next(&mut self) -> Result<Option<SseEvent>, SseReadError> {
        loop {
            if let Some(event) = self.decoder.next_event()? {
                return Ok(Some(event));
            }
            if self.body_done {
                return Ok(self.decoder.finish()?);
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    // Trailers carry nothing SSE cares about.
                    if let Ok(data) = frame.into_data() {
                        self.bytes_read += data.len() as u64;
                        self.decoder.push(&data);
                    }
                }
                Some(Err(err)) => return Err(SseReadError::Body(err.to_string())),
                None => self.body_done = true,
            }
        }
    }

    /// Whether the body ended inside an event (see [`SseDecoder::ended_inside_event`]).
    pub fn ended_inside_event(&self) -> bool {
        self.decoder.ended_inside_event()
    }
}

/// Appends one event: optional `event: NAME\n`, then one `data: LINE\n` per line of `data`
/// (split on \n, \r\n, \r), then `\n`.
///
/// Only LF is written: AG-UI clients split frames on `\n\n` and reject CRLF.
pub fn write_event(buf: &mut BytesMut, event: Option<&str>, data: &str) {
    // A line break in the name would end the field early and inject whatever follows, so the
    // name stops at the first one.
    let event = event.map(first_line);
    let event_len = event.map_or(0, |name| "event: \n".len() + name.len());
    if memchr2(b'\n', b'\r', data.as_bytes()).is_none() {
        buf.reserve(event_len + "data: \n\n".len() + data.len());
        put_event_name(buf, event);
        put_line(buf, b"data: ", data);
    } else {
        put_event_name(buf, event);
        for line in Lines(Some(data)) {
            put_line(buf, b"data: ", line);
        }
    }
    buf.put_u8(b'\n');
}

/// Appends one event whose data is `value` as JSON, serialized straight into `buf`: compact JSON has no raw
/// line break (serde_json escapes them inside strings), so it is one data line, with no copy in between.
pub fn write_json_event<T: serde::Serialize + ?Sized>(buf: &mut BytesMut, value: &T) {
    buf.put_slice(b"data: ");
    // Serializing the proxy's own wire types into memory cannot fail.
    let written = serde_json::to_writer(buf.writer(), value);
    debug_assert!(written.is_ok(), "serializing an event failed: {written:?}");
    buf.put_slice(b"\n\n");
}

/// Appends a comment frame `: TEXT\n\n` (one `: ` line per line of `text`).
pub fn write_comment(buf: &mut BytesMut, text: &str) {
    for line in Lines(Some(text)) {
        put_line(buf, b": ", line);
    }
    buf.put_u8(b'\n');
}

fn put_event_name(buf: &mut BytesMut, event: Option<&str>) {
    if let Some(name) = event {
        put_line(buf, b"event: ", name);
    }
}

fn put_line(buf: &mut BytesMut, prefix: &[u8], line: &str) {
    buf.put_slice(prefix);
    buf.put_slice(line.as_bytes());
    buf.put_u8(b'\n');
}

fn first_line(text: &str) -> &str {
    memchr2(b'\n', b'\r', text.as_bytes()).map_or(text, |end| &text[..end])
}

/// The lines of a text split on `\n`, `\r\n` and `\r`; a trailing line end yields a last empty
/// line, so the text can be rebuilt by joining with `\n`.
struct Lines<'a>(Option<&'a str>);

impl<'a> Iterator for Lines<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = self.0?;
        let bytes = rest.as_bytes();
        let Some(end) = memchr2(b'\n', b'\r', bytes) else {
            self.0 = None;
            return Some(rest);
        };
        let terminator = if bytes[end] == b'\r' && bytes.get(end + 1) == Some(&b'\n') {
            2
        } else {
            1
        };
        // Line ends are ASCII, so both cuts are on character boundaries.
        self.0 = Some(&rest[end + terminator..]);
        Some(&rest[..end])
    }
}

/// The comment that keeps a quiet stream open.
pub const PING: &[u8] = b": ping\n\n";

/// The largest event read from an upstream's stream (the AG-UI 1.0 client's own cap is 10 MB): larger is
/// that upstream's malformed answer, never memory without bound.
pub const MAX_EVENT_BYTES: usize = 10 * 1024 * 1024;

/// How long a response stream may be silent before [`SseBody`] writes a comment, so that proxies do not close
/// it. Every inbound's clients ignore comments (each spec note says how its client reads a stream); the CMDC
/// gateway's own interval is 30 s.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// Once [`SseBody`] holds this many bytes it hands them on (with the frame that crossed it), more being ready
/// or not. With what the server lets hyper hold unsent (`server::MAX_UNSENT_BYTES`), it bounds what a stream
/// holds of its answer.
pub(crate) const MAX_GATHERED_BYTES: usize = 16 * 1024;

pin_project_lite::pin_project! {
    /// An SSE response body: the frames of `frames`, and a `: ping` comment after `heartbeat` of silence
    /// (the timer restarts with every real frame). Ends when `frames` ends.
    ///
    /// Frames that are ready together leave together: the body takes every frame `frames` has ready and hands
    /// them to hyper as one, which writes them in one go, up to [`MAX_GATHERED_BYTES`] (and the frame that
    /// crossed it). An agent that sends many events per read so costs one write per read, as through a
    /// pass-through proxy, instead of one per event. A frame never waits for another: the body hands on what
    /// it has as soon as `frames` has nothing more (benches/RESULTS.md §0g: waiting a few turns of the
    /// thread for more cost latency under load and saved no CPU once the agent's connection is read in the
    /// client's task).
    ///
    /// The ping keeps proxies and load balancers from closing a connection that is only waiting
    /// for a slow model or a human decision.
    pub struct SseBody<S> {
        #[pin]
        frames: S,
        #[pin]
        idle: Sleep,
        heartbeat: Duration,
        ping: Bytes,
        gathered: Gathered,
        done: bool,
    }
}

/// The frames an [`SseBody`] gathered to hand on as one.
#[derive(Default)]
enum Gathered {
    #[default]
    Nothing,
    /// Kept whole: most batches are one frame, and need no copy.
    One(Bytes),
    /// Copied together, each frame once.
    Many(BytesMut),
}

impl Gathered {
    fn push(&mut self, frame: Bytes) {
        *self = match std::mem::take(self) {
            Gathered::Nothing => Gathered::One(frame),
            Gathered::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + frame.len());
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&frame);
                Gathered::Many(joined)
            }
            Gathered::Many(mut joined) => {
                joined.extend_from_slice(&frame);
                Gathered::Many(joined)
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Gathered::Nothing => 0,
            Gathered::One(frame) => frame.len(),
            Gathered::Many(joined) => joined.len(),
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Gathered::Nothing)
    }

    /// What was gathered, as one frame (its memory goes with it); `None` when nothing was.
    fn take(&mut self) -> Option<Bytes> {
        match std::mem::take(self) {
            Gathered::Nothing => None,
            Gathered::One(frame) => Some(frame),
            Gathered::Many(joined) => Some(joined.freeze()),
        }
    }
}

impl<S: Stream<Item = Bytes>> SseBody<S> {
    pub fn new(frames: S, heartbeat: Duration) -> Self {
        Self {
            frames,
            idle: tokio::time::sleep(heartbeat),
            heartbeat,
            ping: Bytes::from_static(PING),
            gathered: Gathered::default(),
            done: false,
        }
    }

    /// Sends `comment` (a whole comment frame, e.g. `: heartbeat\n\n`) instead of `: ping`.
    pub fn with_ping(mut self, comment: &'static [u8]) -> Self {
        self.ping = Bytes::from_static(comment);
        self
    }
}

impl<S: Stream<Item = Bytes>> Body for SseBody<S> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let mut this = self.project();
        while !*this.done && this.gathered.len() < MAX_GATHERED_BYTES {
            // Real frames win over a ping that is due at the same moment.
            match this.frames.as_mut().poll_next(cx) {
                Poll::Ready(Some(frame)) => this.gathered.push(frame),
                Poll::Ready(None) => *this.done = true,
                Poll::Pending if this.gathered.is_empty() => {
                    ready!(this.idle.as_mut().poll(cx));
                    this.idle.as_mut().reset(Instant::now() + *this.heartbeat);
                    return Poll::Ready(Some(Ok(Frame::data(this.ping.clone()))));
                }
                Poll::Pending => break,
            }
        }
        let frame = this.gathered.take();
        if frame.is_some() {
            this.idle.as_mut().reset(Instant::now() + *this.heartbeat);
        }
        Poll::Ready(frame.map(|frame| Ok(Frame::data(frame))))
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.gathered.is_empty()
    }
}

/// Whether a response is an SSE stream, by its media type only (servers add `; charset=utf-8`).
pub fn is_event_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// The media type of a stream, as most servers send it.
pub const EVENT_STREAM: &str = "text/event-stream";
/// The media type of a stream with its charset, as the AgentScope runtime and the CMDC gateway send it.
pub const EVENT_STREAM_UTF8: &str = "text/event-stream; charset=utf-8";

/// The streaming answer of every inbound: `frames` flushed as they come (those ready together in one write:
/// [`SseBody`]), `ping` (a whole comment frame) after each [`HEARTBEAT`] of silence, under the
/// `content_type` the protocol's own servers send.
pub fn stream_response<S>(
    frames: S,
    content_type: &'static str,
    ping: &'static [u8],
) -> http::Response<crate::body::Body>
where
    S: Stream<Item = Bytes> + Send + 'static,
{
    let body = SseBody::new(frames, HEARTBEAT).with_ping(ping);
    response(BodyExt::boxed_unsync(body), content_type)
}

/// The response head every SSE answer uses: 200, `content_type`, cache-control no-cache, x-accel-buffering
/// no (nginx would otherwise buffer the stream).
pub fn response<B>(body: B, content_type: &'static str) -> http::Response<B> {
    let mut response = http::Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_streams_are_told_by_media_type() {
        let mut headers = http::HeaderMap::new();
        let content_type = http::header::CONTENT_TYPE;
        headers.insert(
            content_type.clone(),
            "Text/Event-Stream; charset=utf-8".parse().unwrap(),
        );
        assert!(is_event_stream(&headers));
        headers.insert(content_type, "application/json".parse().unwrap());
        assert!(!is_event_stream(&headers));
        assert!(!is_event_stream(&http::HeaderMap::new()));
    }
    use http_body_util::{Full, StreamBody};
    use tokio::sync::mpsc;

    const LIMIT: usize = 1 << 20;

    fn event(name: Option<&str>, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            event: name.map(str::to_owned),
            data: data.to_owned(),
            id: id.map(str::to_owned),
        }
    }

    fn data(data: &str) -> SseEvent {
        event(None, data, None)
    }

    /// Decodes `chunks` in order, draining after every push, then drains `finish`.
    fn decode_chunks<'a>(
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Vec<SseEvent>, SseError> {
        decode_chunks_capped(chunks, LIMIT)
    }

    fn decode_chunks_capped<'a>(
        chunks: impl IntoIterator<Item = &'a [u8]>,
        limit: usize,
    ) -> Result<Vec<SseEvent>, SseError> {
        let mut decoder = SseDecoder::new(limit);
        let mut events = Vec::new();
        for chunk in chunks {
            decoder.push(chunk);
            while let Some(event) = decoder.next_event()? {
                events.push(event);
            }
        }
        while let Some(event) = decoder.finish()? {
            events.push(event);
        }
        Ok(events)
    }

    fn decode(input: &[u8]) -> Vec<SseEvent> {
        decode_chunks([input]).expect("valid SSE")
    }

    /// Decodes `input` whole, split in two at every offset, and one byte at a time; all must
    /// agree.
    fn decode_every_split(input: &[u8]) -> Vec<SseEvent> {
        let whole = decode(input);
        for at in 0..=input.len() {
            let (head, tail) = input.split_at(at);
            assert_eq!(decode_chunks([head, tail]).unwrap(), whole, "split at {at}");
        }
        assert_eq!(
            decode_chunks(input.chunks(1)).unwrap(),
            whole,
            "byte by byte"
        );
        whole
    }

    #[test]
    fn lf_crlf_and_lone_cr_line_ends_decode_alike() {
        let expected = vec![event(Some("a"), "1\n2", None), data("3")];
        assert_eq!(
            decode(b"event: a\ndata: 1\ndata: 2\n\ndata: 3\n\n"),
            expected
        );
        assert_eq!(
            decode(b"event: a\r\ndata: 1\r\ndata: 2\r\n\r\ndata: 3\r\n\r\n"),
            expected
        );
        assert_eq!(
            decode(b"event: a\rdata: 1\rdata: 2\r\rdata: 3\r\r"),
            expected
        );
        assert_eq!(
            decode_every_split(b"event: a\rdata: 1\r\ndata: 2\n\r\ndata: 3\r\r"),
            expected
        );
    }

    #[test]
    fn cr_ending_a_chunk_then_lf_is_one_line_end() {
        let mut decoder = SseDecoder::new(LIMIT);
        decoder.push(b"data: a\r");
        assert_eq!(decoder.next_event(), Ok(None));
        decoder.push(b"\ndata: b\r\n\r");
        // The lone CR already ends the blank line, so the event is not held back for the LF.
        assert_eq!(decoder.next_event(), Ok(Some(data("a\nb"))));
        decoder.push(b"\ndata: c\n\n");
        assert_eq!(decoder.next_event(), Ok(Some(data("c"))));
        assert_eq!(decoder.next_event(), Ok(None));
        assert_eq!(decoder.finish(), Ok(None));
    }

    #[test]
    fn comments_are_ignored() {
        assert_eq!(
            decode(b": ping\n\n:\n\ndata: x\n: inside an event\ndata: y\n\n"),
            vec![data("x\ny")]
        );
    }

    #[test]
    fn only_one_space_after_the_colon_is_stripped() {
        assert_eq!(
            decode(b"data:tight\n\ndata:  two spaces\n\ndata:\ttab\n\n"),
            vec![data("tight"), data(" two spaces"), data("\ttab")]
        );
    }

    #[test]
    fn multi_line_data_is_joined_with_lf() {
        assert_eq!(
            decode(b"data: {\"a\":\ndata:  1}\ndata:\n\n"),
            vec![data("{\"a\":\n 1}\n")]
        );
    }

    #[test]
    fn event_name_and_id_belong_to_their_event() {
        assert_eq!(
            decode(b"event: error\nid: 7\ndata: boom\n\ndata: plain\n\n"),
            vec![event(Some("error"), "boom", Some("7")), data("plain")]
        );
    }

    #[test]
    fn empty_event_name_means_no_name() {
        assert_eq!(decode(b"event:\ndata: x\n\n"), vec![data("x")]);
    }

    #[test]
    fn id_containing_nul_is_ignored() {
        assert_eq!(decode(b"id: a\0b\ndata: x\n\n"), vec![data("x")]);
    }

    #[test]
    fn field_without_colon_has_an_empty_value() {
        assert_eq!(
            decode(b"data\n\ndata\ndata\n\nevent\ndata: x\n\n"),
            vec![data(""), data("\n"), data("x")]
        );
    }

    #[test]
    fn empty_data_line_dispatches_an_empty_event() {
        assert_eq!(decode(b"data:\n\n"), vec![data("")]);
    }

    #[test]
    fn event_without_data_lines_is_not_dispatched() {
        assert_eq!(
            decode(b"event: lonely\nid: 1\n\ndata: next\n\n"),
            vec![data("next")]
        );
    }

    #[test]
    fn retry_and_unknown_fields_are_ignored() {
        assert_eq!(
            decode(b"retry: 1000\nfoo: bar\ndata: x\nDATA: shouted\n\n"),
            vec![data("x")]
        );
    }

    #[test]
    fn leading_bom_is_skipped_even_when_split() {
        let input = "\u{feff}data: x\n\n".as_bytes();
        assert_eq!(decode_every_split(input), vec![data("x")]);
    }

    #[test]
    fn bom_after_stream_start_is_not_skipped() {
        // Mid-stream it is part of a field name, which makes the field unknown.
        assert_eq!(
            decode("data: a\n\n\u{feff}data: b\n\n".as_bytes()),
            vec![data("a")]
        );
    }

    #[test]
    fn finish_delivers_an_event_missing_its_blank_line() {
        assert_eq!(decode(b"data: a\n\ndata: b\n"), vec![data("a"), data("b")]);
        assert_eq!(
            decode(b"data: a\n\nevent: e\ndata: b"),
            vec![data("a"), event(Some("e"), "b", None)]
        );
        assert_eq!(decode(b"data: a\n\n: trailing comment"), vec![data("a")]);
        assert_eq!(decode(b""), vec![]);
    }

    #[test]
    fn the_decoder_tells_whether_the_input_ended_inside_an_event() {
        let ended_inside = |input: &[u8]| {
            let mut decoder = SseDecoder::new(LIMIT);
            decoder.push(input);
            while decoder.finish().expect("valid SSE").is_some() {}
            decoder.ended_inside_event()
        };
        assert!(!ended_inside(b"data: a\n\n"));
        assert!(!ended_inside(b"data: a\n\n: trailing comment"));
        assert!(!ended_inside(b""));
        assert!(ended_inside(b"data: a\n\ndata: b\n"));
        assert!(ended_inside(b"data: a\n\ndata: {\"trunc"));
        assert!(ended_inside(b"event: e\n"), "fields without data count too");
    }

    #[test]
    fn finish_also_returns_events_left_in_the_buffer() {
        let mut decoder = SseDecoder::new(LIMIT);
        decoder.push(b"data: a\n\ndata: b");
        assert_eq!(decoder.finish(), Ok(Some(data("a"))));
        assert_eq!(decoder.finish(), Ok(Some(data("b"))));
        assert_eq!(decoder.finish(), Ok(None));
    }

    #[test]
    fn event_at_the_size_cap_passes_and_beyond_fails() {
        // "data: abc" + "data: de" = 17 bytes of lines.
        let mut decoder = SseDecoder::new(17);
        decoder.push(b"data: abc\r\ndata: de\r\n\r\ndata: x\n\n");
        assert_eq!(decoder.next_event(), Ok(Some(data("abc\nde"))));
        // The blank line started a new count.
        assert_eq!(decoder.next_event(), Ok(Some(data("x"))));

        let mut decoder = SseDecoder::new(17);
        decoder.push(b"data: abc\ndata: def\n\n");
        assert_eq!(decoder.next_event(), Err(SseError::TooLarge { limit: 17 }));
    }

    #[test]
    fn size_cap_does_not_depend_on_chunking() {
        let input = b"data: abcdef\n\n";
        for at in 0..=input.len() {
            let (head, tail) = input.split_at(at);
            assert_eq!(
                decode_chunks_capped([head, tail], 12),
                Ok(vec![data("abcdef")])
            );
            assert_eq!(
                decode_chunks_capped([head, tail], 11),
                Err(SseError::TooLarge { limit: 11 }),
                "split at {at}"
            );
        }
    }

    #[test]
    fn unterminated_line_growing_past_the_cap_fails_early() {
        let mut decoder = SseDecoder::new(16);
        decoder.push(b"data: 0123456");
        assert_eq!(decoder.next_event(), Ok(None));
        decoder.push(b"789abcdef");
        assert_eq!(decoder.next_event(), Err(SseError::TooLarge { limit: 16 }));
    }

    #[test]
    fn cap_counts_complete_lines_plus_the_open_one() {
        let mut decoder = SseDecoder::new(20);
        decoder.push(b": hi\n");
        decoder.push(b"data: 1\ndata: 678");
        assert_eq!(decoder.next_event(), Ok(None));
        decoder.push(b"9");
        assert_eq!(decoder.next_event(), Err(SseError::TooLarge { limit: 20 }));
    }

    #[test]
    fn invalid_utf8_in_a_field_is_an_error() {
        assert_eq!(
            decode_chunks([&b"data: \xff\xfe\n\n"[..]]),
            Err(SseError::InvalidUtf8)
        );
        // A character cut in half by the end of the stream is invalid too.
        assert_eq!(
            decode_chunks([&b"data: \xe5\x8c"[..]]),
            Err(SseError::InvalidUtf8)
        );
    }

    #[test]
    fn multi_byte_characters_split_across_chunks_decode() {
        let input = "data: 北京 ☀️\n\n".as_bytes();
        assert_eq!(decode_every_split(input), vec![data("北京 ☀️")]);
    }

    fn golden_expected() -> Vec<SseEvent> {
        let json = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sse/mixed.expected.json"
        ));
        let values: Vec<serde_json::Value> = serde_json::from_str(json).unwrap();
        values
            .iter()
            .map(|value| SseEvent {
                event: value["event"].as_str().map(str::to_owned),
                data: value["data"].as_str().unwrap().to_owned(),
                id: value["id"].as_str().map(str::to_owned),
            })
            .collect()
    }

    #[test]
    fn golden_mixed_stream_decodes_identically_however_it_is_split() {
        let input = include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sse/mixed.sse"
        ));
        assert_eq!(decode_every_split(input), golden_expected());
    }

    fn written(event: Option<&str>, data: &str) -> BytesMut {
        let mut buf = BytesMut::new();
        write_event(&mut buf, event, data);
        buf
    }

    #[test]
    fn writer_single_line_exact_bytes() {
        assert_eq!(&written(None, "{\"a\":1}")[..], b"data: {\"a\":1}\n\n");
        assert_eq!(
            &written(Some("error"), "x")[..],
            b"event: error\ndata: x\n\n"
        );
        assert_eq!(&written(None, "")[..], b"data: \n\n");
    }

    #[test]
    fn writer_multi_line_exact_bytes() {
        assert_eq!(
            &written(Some("e"), "a\nb\r\nc\rd")[..],
            b"event: e\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
        );
        assert_eq!(&written(None, "a\n")[..], b"data: a\ndata: \n\n");
    }

    #[test]
    fn writer_cuts_an_event_name_at_its_first_line_break() {
        assert_eq!(
            &written(Some("a\ndata: injected"), "x")[..],
            b"event: a\ndata: x\n\n"
        );
    }

    #[test]
    fn writer_comment_exact_bytes() {
        let mut buf = BytesMut::new();
        write_comment(&mut buf, "ping");
        write_comment(&mut buf, "two\nlines");
        assert_eq!(&buf[..], b": ping\n\n: two\n: lines\n\n");
    }

    #[test]
    fn writer_output_decodes_back_to_the_same_events() {
        let cases = [
            (Some("RUN_STARTED"), "{\"threadId\":\"t\"}"),
            (None, "北京 ☀️"),
            (None, ""),
            (Some("error"), "line one\nline two\n"),
            (None, " leading space\n\nblank line above"),
        ];
        let mut buf = BytesMut::new();
        for (name, payload) in cases {
            write_event(&mut buf, name, payload);
            write_comment(&mut buf, "ping");
        }
        let expected: Vec<_> = cases
            .iter()
            .map(|(name, payload)| event(*name, payload, None))
            .collect();
        assert_eq!(decode_every_split(&buf), expected);
    }

    fn channel_stream(mut rx: mpsc::Receiver<Bytes>) -> impl Stream<Item = Bytes> {
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    async fn next_frame<B: Body<Data = Bytes> + Unpin>(body: &mut B) -> Option<Bytes>
    where
        B::Error: std::fmt::Debug,
    {
        let frame = body.frame().await?.expect("infallible");
        Some(frame.into_data().expect("data frame"))
    }

    // `tokio::time::pause` needs tokio's `test-util` feature, which the crate does not enable, so
    // these use short real timers and assert only bounds that a slow machine cannot break.

    /// Polls `body` once; whether it woke itself while polled.
    fn poll_once<B: Body<Data = Bytes, Error = Infallible> + Unpin>(
        body: &mut B,
    ) -> (Poll<Option<Bytes>>, bool) {
        let (waker, wakes) = crate::wake::WakeCount::waker();
        let polled = Pin::new(body)
            .poll_frame(&mut Context::from_waker(&waker))
            .map(|frame| frame.map(|frame| frame.unwrap().into_data().unwrap()));
        (polled, wakes.get() > 0)
    }

    #[tokio::test]
    async fn sse_body_hands_frames_ready_together_on_as_one_and_ends_with_the_stream() {
        let (tx, rx) = mpsc::channel(8);
        let mut body = Box::pin(SseBody::new(channel_stream(rx), Duration::from_secs(3600)));
        for frame in ["data: 1\n\n", "data: 2\n\n", "data: 3\n\n"] {
            tx.send(Bytes::from_static(frame.as_bytes())).await.unwrap();
        }
        assert_eq!(
            next_frame(&mut body).await.unwrap(),
            "data: 1\n\ndata: 2\n\ndata: 3\n\n"
        );
        tx.send(Bytes::from_static(b"data: 4\n\n")).await.unwrap();
        drop(tx);
        assert_eq!(next_frame(&mut body).await.unwrap(), "data: 4\n\n");
        assert!(body.is_end_stream());
        assert_eq!(next_frame(&mut body).await, None);
    }

    #[tokio::test]
    async fn sse_body_hands_what_it_gathered_on_as_soon_as_nothing_more_is_ready() {
        let (tx, rx) = mpsc::channel(8);
        let mut body = Box::pin(SseBody::new(channel_stream(rx), Duration::from_secs(3600)));
        tx.try_send(Bytes::from_static(b"data: 1\n\n")).unwrap();
        let one = Bytes::from_static(b"data: 1\n\n");
        assert_eq!(poll_once(&mut body), (Poll::Ready(Some(one)), false));
        // With nothing gathered, the body waits for the stream, not for itself.
        assert_eq!(poll_once(&mut body), (Poll::Pending, false));
    }

    #[tokio::test]
    async fn sse_body_hands_a_large_batch_on_while_more_is_ready() {
        let (tx, rx) = mpsc::channel(8);
        let mut body = Box::pin(SseBody::new(channel_stream(rx), Duration::from_secs(3600)));
        let large = Bytes::from(vec![b'x'; MAX_GATHERED_BYTES]);
        tx.try_send(large.clone()).unwrap();
        tx.try_send(Bytes::from_static(b"data: 2\n\n")).unwrap();
        assert_eq!(poll_once(&mut body), (Poll::Ready(Some(large)), false));
    }

    #[tokio::test]
    async fn sse_body_pings_when_idle() {
        let (tx, rx) = mpsc::channel(8);
        let mut body = Box::pin(SseBody::new(channel_stream(rx), Duration::from_millis(20)));
        assert_eq!(next_frame(&mut body).await.unwrap(), ": ping\n\n");
        assert_eq!(next_frame(&mut body).await.unwrap(), ": ping\n\n");
        tx.send(Bytes::from_static(b"data: x\n\n")).await.unwrap();
        assert_eq!(next_frame(&mut body).await.unwrap(), "data: x\n\n");
        drop(tx);
        assert_eq!(next_frame(&mut body).await, None);
    }

    #[tokio::test]
    async fn sse_body_heartbeat_restarts_after_each_frame() {
        let heartbeat = Duration::from_millis(200);
        let (tx, rx) = mpsc::channel(8);
        let mut body = Box::pin(SseBody::new(channel_stream(rx), heartbeat));
        // Most of the first heartbeat passes before a frame arrives.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let sent = Instant::now();
        tx.send(Bytes::from_static(b"data: x\n\n")).await.unwrap();
        assert_eq!(next_frame(&mut body).await.unwrap(), "data: x\n\n");
        assert_eq!(next_frame(&mut body).await.unwrap(), ": ping\n\n");
        assert!(
            sent.elapsed() >= heartbeat,
            "ping came {:?} after the frame",
            sent.elapsed()
        );
    }

    #[test]
    fn a_json_event_is_one_data_line_whatever_its_strings_hold() {
        let mut buf = BytesMut::new();
        write_json_event(&mut buf, &serde_json::json!({"text": "two\nlines\r"}));
        assert_eq!(&buf[..], b"data: {\"text\":\"two\\nlines\\r\"}\n\n");
    }

    #[test]
    fn response_has_the_sse_head() {
        let response = response((), EVENT_STREAM_UTF8);
        assert_eq!(response.status(), http::StatusCode::OK);
        let headers = response.headers();
        assert_eq!(headers[CONTENT_TYPE], "text/event-stream; charset=utf-8");
        assert_eq!(headers[CACHE_CONTROL], "no-cache");
        assert_eq!(headers["x-accel-buffering"], "no");
    }

    #[tokio::test]
    async fn reader_decodes_events_split_across_body_frames_and_skips_trailers() {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
            Ok(Frame::data(Bytes::from_static(b"event: a\r"))),
            Ok(Frame::data(Bytes::from_static(b"\ndata: \xe5\x8c"))),
            Ok(Frame::data(Bytes::from_static(
                b"\x97\n\n: ping\n\ndata: tail",
            ))),
            Ok(Frame::trailers(http::HeaderMap::new())),
        ];
        let body = StreamBody::new(futures_util::stream::iter(frames));
        let mut reader = SseReader::new(body, LIMIT);
        assert_eq!(
            reader.next().await.unwrap(),
            Some(event(Some("a"), "北", None))
        );
        assert_eq!(reader.next().await.unwrap(), Some(data("tail")));
        assert_eq!(reader.next().await.unwrap(), None);
        assert_eq!(reader.next().await.unwrap(), None);
    }

    #[tokio::test]
    async fn reader_reads_a_full_body() {
        let mut reader = SseReader::new(
            Full::new(Bytes::from_static(b"data: 1\n\ndata: 2\n\n")),
            LIMIT,
        );
        assert_eq!(reader.next().await.unwrap(), Some(data("1")));
        assert_eq!(reader.next().await.unwrap(), Some(data("2")));
        assert_eq!(reader.next().await.unwrap(), None);
    }

    #[tokio::test]
    async fn reader_reports_body_and_framing_errors() {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
            Ok(Frame::data(Bytes::from_static(b"data: 1\n\n"))),
            Err(std::io::Error::other("connection reset")),
        ];
        let mut reader = SseReader::new(StreamBody::new(futures_util::stream::iter(frames)), LIMIT);
        assert_eq!(reader.next().await.unwrap(), Some(data("1")));
        let err = reader.next().await.unwrap_err();
        assert!(matches!(&err, SseReadError::Body(msg) if msg == "connection reset"));
        assert_eq!(
            err.to_string(),
            "reading the stream failed: connection reset"
        );

        let mut reader = SseReader::new(Full::new(Bytes::from_static(b"data: 0123456789\n\n")), 4);
        assert!(matches!(
            reader.next().await,
            Err(SseReadError::Frame(SseError::TooLarge { limit: 4 }))
        ));
    }
}
