//! Each upstream event decoder (`protocol::<name>::Decoder`), fed an agent's SSE answer through the SSE
//! framer and followed by the normalizer, as an outbound reads a run.
//!
//! Input: one byte picks the protocol (its value modulo 5, in the order of [`Upstream::new`]), the rest is
//! the upstream's event stream.
//!
//! Beyond "no panic" it checks what the normalizer promises every encoder: `RunStarted` first and only
//! there, exactly one terminal event and it last. (It also promises each tool call's arguments parse as
//! JSON; they do not when the upstream's do not: see fuzz/README.md, "Findings".)
#![no_main]

use agent_bridge::error::Error;
use agent_bridge::model::Event;
use agent_bridge::normalize::Normalizer;
use agent_bridge::protocol::{a2a, ag_kit, ag_ui, agentscope, cmdc};
use agent_bridge::sse::{SseDecoder, SseEvent};
use libfuzzer_sys::fuzz_target;

const MAX_EVENT_BYTES: usize = 64 * 1024;

fuzz_target!(|input: &[u8]| {
    let Some((&selector, stream)) = input.split_first() else {
        return;
    };
    let mut upstream = Upstream::new(selector);
    let mut framer = SseDecoder::new(MAX_EVENT_BYTES);
    framer.push(stream);
    let mut normalizer = Normalizer::new();
    let mut decoded = Vec::new();
    let mut events = Vec::new();
    let result = loop {
        let over = match framer.finish() {
            Ok(Some(frame)) => upstream.decode(&frame, &mut decoded),
            Ok(None) => {
                upstream.end(&mut decoded);
                Ok(true)
            }
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

enum Upstream {
    AgUi(ag_ui::Decoder),
    A2a(a2a::Decoder),
    Agentscope(agentscope::Decoder),
    AgKit(ag_kit::Decoder),
    Cmdc(cmdc::Decoder),
}

impl Upstream {
    fn new(selector: u8) -> Self {
        match selector % 5 {
            0 => Self::AgUi(ag_ui::Decoder::default()),
            1 => Self::A2a(a2a::Decoder::new()),
            2 => Self::Agentscope(agentscope::Decoder::new()),
            3 => Self::AgKit(ag_kit::Decoder::default()),
            _ => Self::Cmdc(cmdc::Decoder::default()),
        }
    }

    /// Decodes one frame as the protocol's outbound does; true when the run is over.
    fn decode(&mut self, frame: &SseEvent, out: &mut Vec<Event>) -> Result<bool, Error> {
        match self {
            Self::AgUi(decoder) => decoder.decode(&frame.data, out),
            Self::A2a(decoder) => decoder.decode(&frame.data, out),
            Self::Agentscope(decoder) => decoder.decode(&frame.data, out),
            Self::AgKit(decoder) => Ok(decoder.decode(&frame.data, out)),
            Self::Cmdc(decoder) => {
                // The outbound drops frames without a name and events it does not translate.
                let Some(name) = frame.event.as_deref() else {
                    return Ok(false);
                };
                match cmdc::wire::Event::from_sse(name, &frame.data) {
                    Ok(Some(event)) => Ok(decoder.decode(event, out)?.is_some()),
                    Ok(None) => Ok(false),
                    Err(error) => Err(Error::upstream_malformed(error.to_string())),
                }
            }
        }
    }

    /// The stream ended before the decoder said the run is over.
    fn end(&mut self, out: &mut Vec<Event>) {
        match self {
            Self::AgUi(decoder) => decoder.finish(out),
            // The task it names would be asked with `tasks/get`: not part of this target.
            Self::A2a(decoder) => drop(decoder.end_of_stream(out)),
            Self::Agentscope(decoder) => decoder.end_of_stream(out),
            Self::AgKit(decoder) => decoder.end_of_stream(out),
            // The end of a CMDC stream is the end of the run as the normalizer sees it.
            Self::Cmdc(_) => {}
        }
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
