//! AG-Kit inbound: we are the v0 server that `useChat` of `@cloudbase/agent-ui-web` talks to
//! (`specs/ag-kit.md` §4). `POST path` and `POST path/send-message` take a `SendMessageInput`; its
//! `messages` are what is new in the conversation (`History::Delta`: the hub keeps the log for upstreams
//! that want it all). The run streams back as v0 events and ends with `data: [DONE]`.
//!
//! Choices where v0 says nothing (the spec note's):
//! - no `conversationId`: one is minted; the request is a conversation of its own, and the id is in the
//!   `x-conversation-id` response header so that a client may go on with it;
//! - the response head waits for the first frame (at most one heartbeat interval), so a run that fails
//!   before it produced anything is answered with an HTTP error, which `useChat` shows; later failures are an
//!   `error` frame and then `[DONE]`;
//! - bad requests are HTTP 400 `{"error":{"code":"INVALID_REQUEST","message"}}`, never forwarded: a body
//!   that does not parse, a tool whose `parameters` is not JSON text, nothing new to say, and (refused by the
//!   hub before the upstream is asked) a `resume` of an interrupt that is not pending or a tool message for
//!   a call nobody waits on.

mod decode;
mod encode;

pub use decode::Reader;
pub use encode::Encoder;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::future::Either;
use futures_util::{stream, Stream, StreamExt};
use http::header::HeaderValue;
use http::{HeaderName, Method, Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::auth::KeySources;
use crate::body::{self, Body};
use crate::detach::{self, RunKey};
use crate::error::{Error, Result};
use crate::face::{encode_frames, lost_run_frames, EventEncoder, InboundFace, RequestDecoder};
use crate::model::Event;
use crate::mount::Mount;
use crate::sse::{self, HEARTBEAT};
use decode::read_answer;

/// The conversation a request was served in (minted when the request named none).
const CONVERSATION_HEADER: HeaderName = HeaderName::from_static("x-conversation-id");

#[derive(Default)]
pub struct Inbound;

impl Inbound {
    pub fn new() -> Self {
        Self
    }

    async fn start(&self, request: Request<Incoming>, mount: &Mount) -> Result<Response<Body>> {
        if !matches!(
            mount.subpath(request.uri().path()),
            Some("" | "/send-message")
        ) {
            return Err(Error::not_found(format!(
                "no AG-Kit endpoint at {}; POST to {1} or {1}/send-message",
                request.uri().path(),
                mount.path
            )));
        }
        let caller = mount.access.admit(&request, KeySources::Headers).await?;
        body::expect_method(&request, Method::POST)?;
        body::expect_json(request.headers())?;
        let last_event_id = detach::last_event_id(request.headers());
        let bytes = body::read_request(request.into_body(), mount.body_limit).await?;
        let mut turn = Reader.decode(&bytes)?;
        turn.tenant = caller.tenant;
        let translator = Arc::clone(&mount.translator);
        for resume in &mut turn.resume {
            let asked = translator
                .pending_interrupt(&turn.tenant, &turn.conversation, &resume.interrupt_id)
                .await;
            if let (Some(asked), Some(payload)) = (asked, &mut resume.payload) {
                read_answer(&asked.kind, payload);
            }
        }
        let conversation = HeaderValue::from_str(&turn.conversation).ok();
        // A run is named by its conversation: the conversation's live run, or the one the client read
        // from (`Last-Event-ID`), is picked up instead of starting another.
        let key = RunKey::new(&turn.tenant, &[&turn.conversation]);
        let detached = mount.detached.as_ref();
        let resumed = match detached {
            Some(runs) => {
                let lost = Box::new(|_: &[u8], _: &[u8]| lost_run_frames(Encoder));
                runs.resume(&key, last_event_id, lost).await
            }
            None => None,
        };
        let frames = match resumed {
            Some(frames) => Either::Left(frames),
            None => {
                let frames = frames(translator.start(turn)).await?;
                match detached {
                    Some(runs) => Either::Left(runs.start(key, frames)),
                    None => Either::Right(frames),
                }
            }
        };
        let mut response = sse::stream_response(frames, sse::EVENT_STREAM, sse::PING);
        if let Some(conversation) = conversation {
            response
                .headers_mut()
                .insert(CONVERSATION_HEADER, conversation);
        }
        Ok(response)
    }
}

/// A run's v0 frames as the events come. It waits for the first frame (or one heartbeat interval): an error
/// before any frame is the HTTP error answer instead.
async fn frames<S>(mut events: S) -> Result<impl Stream<Item = Bytes> + Send + Unpin + 'static>
where
    S: Stream<Item = Event> + Send + Unpin + 'static,
{
    let mut encoder = Encoder;
    let first = first_frame(&mut events, &mut encoder).await?;
    Ok(stream::once(std::future::ready(first))
        .filter(|frame| std::future::ready(!frame.is_empty()))
        .chain(encode_frames(events, encoder)))
}

/// The first non-empty frame of the run, a heartbeat if none is ready within one interval, or the error the
/// run failed with before it said anything.
async fn first_frame<S>(events: &mut S, encoder: &mut Encoder) -> Result<Bytes>
where
    S: Stream<Item = Event> + Unpin,
{
    let deadline = Instant::now() + HEARTBEAT;
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Err(_) => {
                let mut ping = BytesMut::new();
                sse::write_comment(&mut ping, "ping");
                return Ok(ping.freeze());
            }
            Ok(None) => return Ok(Bytes::new()),
            Ok(Some(Event::RunError(error))) => return Err(error),
            Ok(Some(event)) => {
                let mut frame = BytesMut::new();
                encoder.encode(event, &mut frame);
                if !frame.is_empty() {
                    return Ok(frame.freeze());
                }
            }
        }
    }
}

impl InboundFace for Inbound {
    async fn handle(&self, request: Request<Incoming>, mount: &Mount) -> Response<Body> {
        match self.start(request, mount).await {
            Ok(response) => response,
            Err(error) => body::error_response(&error, "POST"),
        }
    }
}
