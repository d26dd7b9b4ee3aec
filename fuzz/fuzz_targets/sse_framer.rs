//! The SSE framer (`sse::SseDecoder`) on any bytes, pushed in chunks of a length the fuzzer picks.
//!
//! Input: one byte, the chunk length (0 reads as 1), then the stream.
//!
//! Beyond "no panic" it checks what the framer promises: the events, and the error that ends them, do not
//! depend on how the stream is chunked; and each event, written back with `sse::write_event`, reads the same.
#![no_main]

use agent_bridge::sse::{write_event, SseDecoder, SseError, SseEvent};
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

/// Small, so that the fuzzer reaches the size cap.
const MAX_EVENT_BYTES: usize = 1024;

fuzz_target!(|input: &[u8]| {
    let Some((&chunk_len, stream)) = input.split_first() else {
        return;
    };
    let whole = Framed::read([stream], MAX_EVENT_BYTES);
    let chunked = Framed::read(
        stream.chunks(usize::from(chunk_len.max(1))),
        MAX_EVENT_BYTES,
    );
    assert_eq!(
        whole, chunked,
        "the events depend on how the stream is chunked"
    );
    for event in whole.events {
        let mut written = BytesMut::new();
        write_event(&mut written, event.event.as_deref(), &event.data);
        // `write_event` writes no `id`, and adds a space after each colon: no cap for the reread.
        let expected = SseEvent { id: None, ..event };
        let reread = Framed::read([&written[..]], usize::MAX);
        assert_eq!(
            reread,
            Framed {
                events: vec![expected],
                error: None
            },
            "a written event reads differently: {written:?}"
        );
    }
});

/// What a stream frames into: its events up to the first error, and that error.
#[derive(Debug, Default, PartialEq)]
struct Framed {
    events: Vec<SseEvent>,
    error: Option<SseError>,
}

impl Framed {
    fn read<'a>(chunks: impl IntoIterator<Item = &'a [u8]>, max_event_bytes: usize) -> Self {
        let mut decoder = SseDecoder::new(max_event_bytes);
        let mut framed = Self::default();
        for chunk in chunks {
            decoder.push(chunk);
            if !framed.pull(|| decoder.next_event()) {
                return framed;
            }
        }
        framed.pull(|| decoder.finish());
        framed
    }

    /// Takes events from `next` until it needs more input (true) or fails (false).
    fn pull(&mut self, mut next: impl FnMut() -> Result<Option<SseEvent>, SseError>) -> bool {
        loop {
            match next() {
                Ok(Some(event)) => self.events.push(event),
                Ok(None) => return true,
                Err(error) => {
                    self.error = Some(error);
                    return false;
                }
            }
        }
    }
}
