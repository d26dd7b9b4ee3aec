//! The one read loop for upstream event streams: SSE frames in, canonical events out to the run.
//!
//! Every outbound whose agent answers with a stream of events reads it here: [`UpstreamEvents`] frames the
//! body and tells how it ended, the outbound's [`UpstreamDecoder`] turns frames into events and says what
//! each kind of ending means in its protocol, and [`relay`] drives the two and hands the events to the run.
//! The protocol knowledge stays in the decoders; this module knows SSE and the canonical model only.

use bytes::Bytes;
use http_body::Body;

use crate::error::{Error, Result};
use crate::face::{StreamEnd, UpstreamDecoder};
use crate::model::Event;
use crate::sse::{SseEvent, SseReadError, SseReader};
use crate::store::Record;
use crate::translate::RunContext;

/// What the next read of an upstream stream found.
#[derive(Debug)]
pub enum Next {
    Frame(SseEvent),
    End(StreamEnd),
}

/// An upstream's SSE body, read frame by frame.
pub struct UpstreamEvents<B> {
    reader: SseReader<B>,
    /// The upstream's protocol, for the messages.
    protocol: &'static str,
}

impl<B> UpstreamEvents<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    /// Reads `body`, holding at most `max_event_bytes` of one event.
    pub fn new(body: B, protocol: &'static str, max_event_bytes: usize) -> Self {
        Self {
            reader: SseReader::new(body, max_event_bytes),
            protocol,
        }
    }

    /// The next frame, or how the body ended; the bytes it took are counted in `context`'s run. A frame that
    /// breaks SSE (too large, not UTF-8) is `UPSTREAM_MALFORMED`.
    pub async fn next_of(&mut self, context: &mut RunContext) -> Result<Next> {
        let next = self.next().await;
        context.read_from_upstream(self.reader.take_bytes_read());
        next
    }

    /// The next frame, or how the body ended. A frame that breaks SSE (too large, not UTF-8) is
    /// `UPSTREAM_MALFORMED`.
    pub async fn next(&mut self) -> Result<Next> {
        match self.reader.next().await {
            Ok(Some(frame)) if self.reader.ended_inside_event() => {
                Ok(Next::End(StreamEnd::InsideEvent(Some(frame))))
            }
            Ok(Some(frame)) => Ok(Next::Frame(frame)),
            Ok(None) if self.reader.ended_inside_event() => {
                Ok(Next::End(StreamEnd::InsideEvent(None)))
            }
            Ok(None) => Ok(Next::End(StreamEnd::Whole)),
            Err(SseReadError::Body(cause)) => {
                tracing::debug!("the upstream {} stream broke off: {cause}", self.protocol);
                Ok(Next::End(StreamEnd::BrokeOff))
            }
            Err(SseReadError::Frame(e)) => Err(Error::upstream_malformed(format!(
                "reading the upstream {} stream failed: {e}",
                self.protocol
            ))),
        }
    }
}

/// Reads `events` through `decoder` into the run until the run is over or the body ends. `keep` sees each
/// read's events before they go out, with the conversation's record: what must outlive a client that leaves
/// while they wait for it is kept there.
pub async fn relay<B, D>(
    events: &mut UpstreamEvents<B>,
    decoder: &mut D,
    context: &mut RunContext,
    mut keep: impl FnMut(&mut D, &[Event], &mut Record),
) -> Result<()>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
    D: UpstreamDecoder,
{
    let mut out = Vec::new();
    loop {
        let next = match decoder.patience() {
            Some(patience) => tokio::time::timeout(patience, events.next_of(context))
                .await
                .unwrap_or(Ok(Next::End(StreamEnd::Whole)))?,
            None => events.next_of(context).await?,
        };
        let over = match next {
            Next::Frame(frame) => decoder.frame(&frame, &mut out)?,
            Next::End(end) => {
                decoder.end(end, &mut out)?;
                true
            }
        };
        keep(decoder, &out, &mut context.record);
        for event in out.drain(..) {
            context.emit(event).await?;
        }
        if over {
            return Ok(());
        }
    }
}
