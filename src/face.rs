//! The contracts a protocol's faces implement, and the driver of the inbound one. The hub drives them and
//! knows no protocol; each protocol's module implements them and knows no other protocol.
//!
//! - An inbound's [`EventEncoder`]: one run's canonical events into its protocol's output, appended to a
//!   buffer the caller owns. [`encode_frames`] serves every inbound that streams frames straight to its
//!   client: it encodes every event that is ready into one buffer, so everything one upstream read produced
//!   goes out as one write.
//! - An inbound's [`RequestDecoder`]: a client's request body into what it asks for, or its protocol's
//!   refusal.
//! - An outbound's [`UpstreamDecoder`]: one upstream frame into canonical events, and what the end of the
//!   body means in its protocol. `relay::relay` drives it.
//! - The faces themselves, [`InboundFace`] and [`OutboundFace`], written with plain `async fn`s and boxed once
//!   here ([`DynInbound`], [`DynOutbound`]) for the route that holds them; every outbound face is an `Agent`
//!   to the hub.
//! - A protocol's [`Row`]: what it can carry, the [`FaceOptions`] each of its faces reads, and how to build
//!   each face, for the registry (`protocol::registry`).
//! - What an outbound remembers between turns is `store::UpstreamState`; what the hub runs a turn
//!   against is `translate::Agent`.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::future::BoxFuture;
use futures_util::Stream;
use http::{Request, Response};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;

use crate::body::{self, Body};
use crate::config::{OptionError, Protocol, RouteConfig, Translate};
use crate::error::{Error, Result};
use crate::model::{Event, History, Turn};
use crate::mount::Mount;
use crate::route_state::RouteState;
use crate::sse::SseEvent;
use crate::store::{Documents, Record, UpstreamId};
use crate::translate::{Agent, RunContext};
use crate::upstream::Upstream;

/// A protocol's row in the registry: what it can carry, and the `[routes.translate]` options each of its
/// faces reads.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// The history its agents want: the whole conversation, or what is new (they keep their own).
    pub history: History,
    /// A client can offer its own tools, and an agent can be offered them.
    pub client_tools: bool,
    /// The calls of an agent's own tools can be shown to a client.
    pub server_tools: bool,
    /// It has an approval pause of its own (not only a question asked in words).
    pub approvals: bool,
    /// It has a free-text question pause.
    pub questions: bool,
    /// A client can dismiss a pause without answering it (A2A `tasks/cancel`, an AG-UI 1.0 `resume` entry
    /// `cancelled`, CMDC `POST …/abort`); others can only go away.
    pub pause_cancel: bool,
    /// The canonical events (families of [`crate::model::Event::KINDS`] names, [`crate::model::kinds`]) it
    /// has no form for: its clients are not shown them (docs/translation.md), and each one is counted as a
    /// downgrade.
    pub unshown: &'static [&'static [&'static str]],
    /// The parts of a turn its agents cannot be sent (`client_tools`, `system_messages`, `context`,
    /// `state`), each counted as a downgrade when a turn has them.
    pub unsent: &'static [&'static str],
    /// The `[routes.translate]` options its inbound face reads.
    pub inbound_options: Options,
    /// The `[routes.translate]` options its outbound face reads.
    pub outbound_options: Options,
    /// Builds its inbound face for a route; the address is the one the proxy listens on, and its state is
    /// kept across the route's reloads.
    pub inbound: BuildInbound,
    /// Builds its outbound face for a route, toward the route's upstream.
    pub outbound: BuildOutbound,
}

pub type BuildInbound = fn(&RouteConfig, SocketAddr, &RouteState) -> Result<Box<dyn DynInbound>>;
pub type BuildOutbound =
    fn(Upstream, &RouteConfig, SocketAddr, &RouteState) -> Result<Arc<dyn DynOutbound>>;

/// An inbound's reading of a client's request body: what the client asks for, or the refusal its protocol
/// answers with, in that protocol's own shape and status. The handler reads the HTTP request around the body
/// (the route's path, access, method, size) with the hub's helpers.
pub trait RequestDecoder {
    /// What a readable request asks for: a canonical turn, or what the protocol routes on before there is one
    /// (an A2A JSON-RPC call, the body of a CMDC endpoint).
    type Request;
    /// A request the protocol refuses.
    type Refusal;

    fn decode(&self, body: &[u8]) -> std::result::Result<Self::Request, Self::Refusal>;

    /// The answer a client gets for `refusal`.
    fn refuse(&self, refusal: Self::Refusal) -> Response<Body>;
}

/// An inbound face: serves every request addressed to its route (its path or below it). A route holds it as a
/// [`DynInbound`].
pub trait InboundFace: Send + Sync + 'static {
    fn handle(
        &self,
        request: Request<Incoming>,
        mount: &Mount,
    ) -> impl Future<Output = Response<Body>> + Send;
}

/// An [`InboundFace`] as its route holds it, behind a pointer, its answer boxed.
pub trait DynInbound: Send + Sync {
    fn handle<'a>(
        &'a self,
        request: Request<Incoming>,
        mount: &'a Mount,
    ) -> BoxFuture<'a, Response<Body>>;
}

impl<F: InboundFace> DynInbound for F {
    fn handle<'a>(
        &'a self,
        request: Request<Incoming>,
        mount: &'a Mount,
    ) -> BoxFuture<'a, Response<Body>> {
        Box::pin(InboundFace::handle(self, request, mount))
    }
}

/// An outbound face: the agent behind a route, which the hub runs turns against (as an [`Agent`]), and where
/// its upstream calls back into the proxy. A route holds it as a [`DynOutbound`].
pub trait OutboundFace: Send + Sync + 'static {
    /// The history its agents want: its registry row's.
    fn history(&self) -> History;

    /// Runs one turn, emitting its events into `context`; returns when the agent is done.
    fn run(&self, turn: &Turn, context: &mut RunContext)
        -> impl Future<Output = Result<()>> + Send;

    /// What identifies the conversation upstream in `record` (for the log line and span of a finished run).
    fn upstream_ids(&self, _record: &Record) -> Vec<UpstreamId> {
        Vec::new()
    }

    /// Whether `path` is where the upstream calls back into the proxy (CMDC callback tools).
    fn serves_callback(&self, _path: &str) -> bool {
        false
    }

    /// Hands it the route's documents, where what it holds between the upstream's calls must reach
    /// another replica (CMDC callbacks).
    fn keep_in(&self, _documents: &Documents) {}

    /// Answers a call of the upstream back into the proxy, at a path it [serves](Self::serves_callback).
    fn serve_callback(
        &self,
        _request: Request<Incoming>,
    ) -> impl Future<Output = Response<Body>> + Send {
        async { body::error_response(&Error::not_found("no callback here"), "POST") }
    }
}

impl<F: OutboundFace> Agent for F {
    fn history(&self) -> History {
        OutboundFace::history(self)
    }

    fn run<'a>(&'a self, turn: &'a Turn, context: &'a mut RunContext) -> BoxFuture<'a, Result<()>> {
        Box::pin(OutboundFace::run(self, turn, context))
    }

    fn upstream_ids(&self, record: &Record) -> Vec<UpstreamId> {
        OutboundFace::upstream_ids(self, record)
    }
}

/// An [`OutboundFace`] as its route holds it, behind a pointer, its answers boxed.
pub trait DynOutbound: Agent {
    fn serves_callback(&self, path: &str) -> bool;

    fn keep_in(&self, documents: &Documents);

    fn serve_callback(&self, request: Request<Incoming>) -> BoxFuture<'_, Response<Body>>;
}

impl<F: OutboundFace> DynOutbound for F {
    fn serves_callback(&self, path: &str) -> bool {
        OutboundFace::serves_callback(self, path)
    }

    fn keep_in(&self, documents: &Documents) {
        OutboundFace::keep_in(self, documents);
    }

    fn serve_callback(&self, request: Request<Incoming>) -> BoxFuture<'_, Response<Body>> {
        Box::pin(OutboundFace::serve_callback(self, request))
    }
}

/// The options `T` (a face's, or the hub's) of `route`'s `[routes.translate]`, which the registry checked
/// when the file loaded.
pub fn read_options<T: DeserializeOwned>(route: &RouteConfig) -> Result<T> {
    route.translate.read().map_err(|error| {
        Error::config(format!(
            "route `{}`: translate.{}: {}",
            route.name, error.key, error.message
        ))
    })
}

/// A face's `[routes.translate]` options: a serde struct beside the face (`options.rs`) whose field names are
/// the keys it reads. It does not deny unknown fields: the table holds the other face's options too, and the
/// registry tells an unknown key from one the pair does not read.
pub trait FaceOptions: DeserializeOwned + Default {
    /// What the options say about the pair that their types cannot: the key at fault and why.
    fn check(&self, _inbound: Protocol) -> std::result::Result<(), OptionError> {
        Ok(())
    }
}

/// What the registry needs of a face's options type, as a value a [`Row`] can hold.
#[derive(Clone, Copy)]
pub struct Options {
    /// The keys the type reads.
    pub keys: fn() -> &'static [&'static str],
    /// Reads the options from a route's table and checks them against the route's inbound.
    pub check: fn(&Translate, Protocol) -> std::result::Result<(), OptionError>,
}

impl Options {
    /// A face that reads no option.
    pub const NONE: Options = Options {
        keys: || &[],
        check: |_, _| Ok(()),
    };

    /// The options `T` reads.
    pub const fn of<T: FaceOptions>() -> Options {
        Options {
            keys: fields::<T>,
            check: |table, inbound| table.read::<T>()?.check(inbound),
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries((self.keys)()).finish()
    }
}

/// The field names a derived `Deserialize` struct hands its deserializer: the keys it reads, as written.
fn fields<T: DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{Deserializer, Error, Visitor};

    /// A deserializer that only learns the fields asked of it, then refuses.
    struct Fields<'a>(&'a mut &'static [&'static str]);

    #[derive(Debug)]
    struct Learned;

    impl std::fmt::Display for Learned {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("fields learned")
        }
    }

    impl std::error::Error for Learned {}

    impl Error for Learned {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Learned
        }
    }

    impl<'de> Deserializer<'de> for Fields<'_> {
        type Error = Learned;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> std::result::Result<V::Value, Learned> {
            Err(Learned)
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> std::result::Result<V::Value, Learned> {
            *self.0 = fields;
            Err(Learned)
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    // The refusal is the point: only the fields were wanted.
    let _ = T::deserialize(Fields(&mut fields));
    fields
}

/// An inbound's encoding of one run's canonical events (normalized: one `RunStarted` first, exactly one
/// terminal event last); or, with `I`, of the protocol's own items that a run was encoded into first.
pub trait EventEncoder<I = Event> {
    /// Where the output goes: frames (`BytesMut`), or the protocol's wire items when the inbound keeps them
    /// for more than one reader (A2A tasks, CMDC runs).
    type Out;

    /// Appends what `event` is in the protocol (often one item; none for events it has no form for).
    fn encode(&mut self, event: I, out: &mut Self::Out);

    /// Appends what the end of the run's events says (nothing, once the terminal event was encoded).
    fn finish(&mut self, _out: &mut Self::Out) {}
}

/// What `encoder` (a fresh one, for the request's turn) tells a client that follows a run whose rest was
/// lost ([`Error::run_lost`]): the protocol's own error, as a run failing mid-stream gets it.
pub fn lost_run_frames<E: EventEncoder<Out = BytesMut>>(mut encoder: E) -> Bytes {
    let mut out = BytesMut::new();
    encoder.encode(Event::RunError(Error::run_lost()), &mut out);
    encoder.finish(&mut out);
    out.freeze()
}

/// The largest buffer [`encode_frames`] fills before it hands it on, even with more items ready.
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// The frames of a run: its `items` (canonical events, or the protocol's own results) through `encoder`,
/// every item already waiting encoded into one frame buffer. It never waits for an item to fill a buffer: an
/// item that is alone goes out alone.
pub fn encode_frames<S, E>(items: S, encoder: E) -> EncodedFrames<S, E>
where
    S: Stream + Unpin,
    E: EventEncoder<S::Item, Out = BytesMut> + Unpin,
{
    EncodedFrames {
        items,
        encoder,
        buf: BytesMut::new(),
        ended: false,
    }
}

/// The stream [`encode_frames`] returns.
pub struct EncodedFrames<S, E> {
    items: S,
    encoder: E,
    buf: BytesMut,
    ended: bool,
}

impl<S, E> Stream for EncodedFrames<S, E>
where
    S: Stream + Unpin,
    E: EventEncoder<S::Item, Out = BytesMut> + Unpin,
{
    type Item = Bytes;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let this = self.get_mut();
        while !this.ended && this.buf.len() < MAX_BATCH_BYTES {
            match Pin::new(&mut this.items).poll_next(cx) {
                Poll::Ready(Some(item)) => this.encoder.encode(item, &mut this.buf),
                Poll::Ready(None) => {
                    this.encoder.finish(&mut this.buf);
                    this.ended = true;
                }
                Poll::Pending => break,
            }
        }
        if !this.buf.is_empty() {
            Poll::Ready(Some(this.buf.split().freeze()))
        } else if this.ended {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}

/// How an upstream body ended.
#[derive(Debug)]
pub enum StreamEnd {
    /// After a whole event (or with nothing at all).
    Whole,
    /// Inside an event: fields arrived after the last blank line. The cut event, when it had data, is
    /// here; whether it counts is the protocol's call (an end marker is whole without its blank line).
    InsideEvent(Option<SseEvent>),
    /// The connection failed mid-body (reset, or cut before the last chunk).
    BrokeOff,
}

/// An outbound's reading of its upstream's frames.
pub trait UpstreamDecoder {
    /// Appends the events one frame stands for; whether the run is over. An error ends the run with it.
    fn frame(&mut self, frame: &SseEvent, out: &mut Vec<Event>) -> Result<bool>;

    /// Appends what the end of the body means for the run (its last events, or nothing when the run stays
    /// unfinished and the hub reports the stream cut short); an error ends the run with it.
    fn end(&mut self, end: StreamEnd, out: &mut Vec<Event>) -> Result<()>;

    /// How long to wait for the next frame before taking the stream as ended whole; `None`: as long as the
    /// route allows.
    fn patience(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Outcome, Role};
    use futures_util::StreamExt;

    /// Writes each event's name on a line; the end of the events as `end`.
    struct Names;

    impl EventEncoder for Names {
        type Out = BytesMut;

        fn encode(&mut self, event: Event, out: &mut BytesMut) {
            let name = match event {
                Event::RunStarted => "started",
                Event::TextDelta { .. } => "delta",
                Event::RunFinished { .. } => "finished",
                _ => return,
            };
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\n");
        }

        fn finish(&mut self, out: &mut BytesMut) {
            out.extend_from_slice(b"end\n");
        }
    }

    fn delta() -> Event {
        Event::TextDelta {
            message_id: "m".into(),
            delta: "hi".into(),
        }
    }

    #[tokio::test]
    async fn the_events_waiting_go_out_as_one_frame_and_a_lone_event_alone() {
        let (sender, receiver) = tokio::sync::mpsc::channel(8);
        let events = tokio_stream_of(receiver);
        let mut frames = encode_frames(events, Names);
        sender.send(Event::RunStarted).await.unwrap();
        sender.send(delta()).await.unwrap();
        assert_eq!(frames.next().await.unwrap(), "started\ndelta\n");

        sender
            .send(Event::TextStart {
                message_id: "m".into(),
                role: Role::Assistant,
            })
            .await
            .unwrap();
        sender.send(delta()).await.unwrap();
        assert_eq!(
            frames.next().await.unwrap(),
            "delta\n",
            "an event without a form adds nothing"
        );

        sender
            .send(Event::RunFinished {
                outcome: Outcome::Completed,
                usage: None,
            })
            .await
            .unwrap();
        drop(sender);
        assert_eq!(frames.next().await.unwrap(), "finished\nend\n");
        assert_eq!(frames.next().await, None);
    }

    fn tokio_stream_of(
        mut receiver: tokio::sync::mpsc::Receiver<Event>,
    ) -> impl Stream<Item = Event> + Unpin {
        futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx))
    }
}
