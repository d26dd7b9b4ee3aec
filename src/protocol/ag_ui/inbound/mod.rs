//! AG-UI inbound: we are the AG-UI agent. `POST path` with a `RunAgentInput` becomes a [`Turn`]; the run's
//! canonical events go back as an SSE stream in the conservative profile of `specs/ag-ui.md` §4.2, which
//! @ag-ui/client 1.0.0, 0.0.59 and 0.0.36 all accept.

mod decode;
mod encode;

pub use decode::Reader;
pub use encode::Encoder;

use http::{Method, Request, Response};
use hyper::body::Incoming;

use super::InboundOptions;
use crate::auth::KeySources;
use crate::body::{self, Body};
use crate::detach::{self, RunKey};
use crate::error::{Error, Result};
use crate::face::{encode_frames, lost_run_frames, InboundFace, RequestDecoder};
use crate::model::Turn;
use crate::mount::Mount;
use crate::sse;

pub struct Inbound {
    options: InboundOptions,
}

impl Inbound {
    pub fn new(options: InboundOptions) -> Self {
        Self { options }
    }

    async fn start(&self, request: Request<Incoming>, mount: &Mount) -> Result<Response<Body>> {
        if mount.subpath(request.uri().path()) != Some("") {
            return Err(Error::not_found(format!(
                "no AG-UI endpoint at {}",
                request.uri().path()
            )));
        }
        let caller = mount.access.admit(&request, KeySources::Headers).await?;
        body::expect_method(&request, Method::POST)?;
        body::expect_json(request.headers())?;
        let last_event_id = detach::last_event_id(request.headers());
        let bytes = body::read_request(request.into_body(), mount.body_limit).await?;
        let turn = Turn {
            tenant: caller.tenant,
            ..Reader.decode(&bytes)?
        };
        // A run is named by its thread and its own id: the same two posted again pick it up.
        let key = |turn: &Turn| RunKey::new(&turn.tenant, &[&turn.conversation, &turn.run_id]);
        let frames = mount
            .frames(
                turn,
                key,
                last_event_id,
                |turn| {
                    let frames = lost_run_frames(Encoder::new(turn, &self.options));
                    Box::new(move |_, _| frames)
                },
                |turn| {
                    let encoder = Encoder::new(&turn, &self.options);
                    encode_frames(mount.translator.start(turn), encoder)
                },
            )
            .await;
        Ok(sse::stream_response(frames, sse::EVENT_STREAM, sse::PING))
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
