//! Per-event CPU cost of the two AG-Kit migration shims, without any I/O:
//!
//! - `agkit_agent_as_agui`: a legacy v0 agent served to an AG-UI frontend — the agent's SSE bytes →
//!   [`SseDecoder`] → [`ag_kit::Decoder::decode`] → [`Normalizer::push`] → [`ag_ui::Encoder::encode`];
//! - `agui_agent_as_agkit`: a legacy `useChat` frontend in front of an AG-UI agent — the agent's SSE bytes →
//!   [`ag_ui::Decoder::decode`] → [`Normalizer::push`] → [`ag_kit::Encoder::encode`].
//!
//! Each upstream stream is one streamed reply of N text deltas. Throughput is counted in upstream events:
//! criterion's `elem/s` inverted is the cost per event.
//!
//! Run: `cargo bench --bench ag_kit_pipeline`.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::{json, Value};

use agent_bridge::config::Translate;
use agent_bridge::model::{Event, Turn};
use agent_bridge::normalize::Normalizer;
use agent_bridge::protocol::{ag_kit, ag_ui};
use agent_bridge::sse::SseDecoder;

const MAX_EVENT_BYTES: usize = 10 * 1024 * 1024;
const DELTAS: [usize; 3] = [10, 100, 1000];
const WORDS: [&str; 10] = [
    "The", " weather", " in", " Paris", " is", " mild", " today,", " with", " light", " rain",
];

fn frame(event: &Value) -> Bytes {
    Bytes::from(format!("data: {event}\n\n"))
}

/// A v0 agent's reply: N `text` events, then `[DONE]`.
fn v0_stream(deltas: usize) -> Vec<Bytes> {
    let mut frames: Vec<Bytes> = (0..deltas)
        .map(|i| frame(&json!({"type": "text", "content": WORDS[i % WORDS.len()]})))
        .collect();
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    frames
}

/// An AG-UI agent's reply: one text message of N deltas inside a run.
fn agui_stream(deltas: usize) -> Vec<Bytes> {
    let mut frames = vec![
        frame(&json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})),
        frame(&json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"})),
    ];
    frames.extend((0..deltas).map(|i| {
        frame(&json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": WORDS[i % WORDS.len()]}))
    }));
    frames.push(frame(
        &json!({"type": "TEXT_MESSAGE_END", "messageId": "m1"}),
    ));
    frames.push(frame(
        &json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}),
    ));
    frames
}

/// Frames, decodes, normalizes and encodes one whole stream; returns the bytes written for the client.
fn pipeline(
    chunks: &[Bytes],
    mut decode: impl FnMut(&str, &mut Vec<Event>),
    mut encode: impl FnMut(Event) -> Bytes,
) -> usize {
    let mut framer = SseDecoder::new(MAX_EVENT_BYTES);
    let mut normalizer = Normalizer::new();
    let mut decoded = Vec::new();
    let mut normalized = Vec::new();
    let mut written = 0;
    for chunk in chunks {
        framer.push(chunk);
        while let Some(frame) = framer.next_event().expect("valid SSE") {
            decode(&frame.data, &mut decoded);
            for event in decoded.drain(..) {
                normalizer.push(event, &mut normalized);
            }
            for event in normalized.drain(..) {
                written += black_box(encode(event)).len();
            }
        }
    }
    normalizer.finish(Ok(()), &mut normalized);
    for event in normalized.drain(..) {
        written += black_box(encode(event)).len();
    }
    written
}

fn agui_turn() -> Turn {
    let input = json!({
        "threadId": "thread_bench", "runId": "run_bench",
        "messages": [{"id": "u1", "role": "user", "content": "What is the weather in Paris?"}],
    });
    ag_ui::decode_request(input.to_string().as_bytes()).expect("a valid RunAgentInput")
}

fn bench(c: &mut Criterion) {
    let turn = agui_turn();
    let translate = Translate::default();
    let mut group = c.benchmark_group("agkit_agent_as_agui");
    for deltas in DELTAS {
        let stream = v0_stream(deltas);
        group.throughput(Throughput::Elements(stream.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(deltas), &stream, |b, stream| {
            b.iter(|| {
                let mut decoder = ag_kit::Decoder::default();
                let mut encoder = ag_ui::Encoder::new(&turn, &translate);
                pipeline(
                    stream,
                    |data, out| {
                        decoder.decode(data, out);
                    },
                    |event| encoder.encode(event),
                )
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("agui_agent_as_agkit");
    for deltas in DELTAS {
        let stream = agui_stream(deltas);
        group.throughput(Throughput::Elements(stream.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(deltas), &stream, |b, stream| {
            b.iter(|| {
                let mut decoder = ag_ui::Decoder::default();
                let mut encoder = ag_kit::Encoder::default();
                pipeline(
                    stream,
                    |data, out| {
                        decoder.decode(data, out).expect("valid AG-UI");
                    },
                    |event| encoder.encode(event),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
