//! Each upstream event decoder (`protocol::<name>::Decoder`), fed an agent's SSE answer through the SSE
//! framer and followed by the normalizer, as an outbound reads a run: through `face::UpstreamDecoder`,
//! `frame` for each frame and `end` when the body ends.
//!
//! Input: one byte picks the protocol (its value modulo 5, in the order of [`decoder`]), the rest is the
//! upstream's event stream.
//!
//! Beyond "no panic" it checks what the normalizer promises every encoder: `RunStarted` first and only
//! there, exactly one terminal event and it last. (It also promises each tool call's arguments parse as
//! JSON; they do not when the upstream's do not: see fuzz/README.md, "Findings".)
#![no_main]

use agent_bridge::error::Error;
use agent_bridge::face::{StreamEnd, UpstreamDecoder};
use agent_bridge::model::Event;
use agent_bridge::normalize::Normalizer;
use agent_bridge::protocol::{a2a, ag_kit, ag_ui, agentscope, cmdc};
use agent_bridge::sse::SseDecoder;
use libfuzzer_sys::fuzz_target;

const MAX_EVENT_BYTES: usize = 64 * 1024;

fuzz_target!(|input: &[u8]| {
    let Some((&selector, stream)) = input.split_first() else {
        return;
    };
    let mut decoder = decoder(selector);
    let mut framer = SseDecoder::new(MAX_EVENT_BYTES);
    framer.push(stream);
    let mut normalizer = Normalizer::new();
    let mut decoded = Vec::new();
    let mut events = Vec::new();
    let result = loop {
        let over = match framer.finish() {
            Ok(Some(frame)) => decoder.frame(&frame, &mut decoded),
            Ok(None) => decoder.end(StreamEnd::Whole, &mut decoded).map(|()| true),
            Err(error) => Err(Error::upstream_malformed(error.to_string())),
        };
        for event in decoded.drain(..) {
            normalizer.push(event, &mut events);
        }
        match over {
            Ok(false) => {}
            Ok(true) => break Ok(()),
            Err(error) => break Err(error),
        }
    };
    normalizer.finish(result, &mut events);
    assert_well_formed(&events);
});

/// The decoders, each read through the contract its outbound reads it by.
fn decoder(selector: u8) -> Box<dyn UpstreamDecoder> {
    match selector % 5 {
        0 => Box::new(ag_ui::Decoder::default()),
        1 => Box::new(a2a::Decoder::new()),
        2 => Box::new(agentscope::Decoder::new()),
        3 => Box::new(ag_kit::Decoder::default()),
        _ => Box::new(cmdc::Decoder::default()),
    }
}

fn assert_well_formed(events: &[Event]) {
    assert!(
        matches!(events.first(), Some(Event::RunStarted)),
        "{events:#?}"
    );
    let starts = events
        .iter()
        .filter(|e| matches!(e, Event::RunStarted))
        .count();
    assert_eq!(starts, 1, "{events:#?}");
    let terminals = events.iter().filter(|e| e.is_terminal()).count();
    assert_eq!(terminals, 1, "{events:#?}");
    assert!(events.last().is_some_and(Event::is_terminal), "{events:#?}");
}
