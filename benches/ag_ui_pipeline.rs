//! Per-event CPU cost of the AG-UI → AG-UI hot path, without any I/O:
//! upstream SSE bytes → [`SseDecoder`] → [`ag_ui::Decoder::decode`] → [`Normalizer::push`] →
//! [`ag_ui::Encoder::encode`] → SSE bytes for the client.
//!
//! The upstream stream is what a chatty agent sends: `RUN_STARTED`, a text message of N deltas, a tool call
//! with streamed arguments and its result, `RUN_FINISHED`. Each upstream event arrives as its own read (the
//! common case for a live stream), so the framer sees one chunk per event.
//!
//! Throughput is counted in upstream events, so criterion's `elem/s` inverted is the cost per event.
//!
//! Run: `cargo bench --bench ag_ui_pipeline` (see benches/RESULTS.md for measured numbers).

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::json;

use agent_bridge::config::Translate;
use agent_bridge::model::{Event, Turn};
use agent_bridge::normalize::Normalizer;
use agent_bridge::protocol::ag_ui;
use agent_bridge::sse::SseDecoder;

/// The proxy's own cap on an upstream AG-UI event.
const MAX_EVENT_BYTES: usize = 10 * 1024 * 1024;

/// Text deltas per message in the streams measured.
const DELTAS: [usize; 3] = [10, 100, 1000];

/// One upstream run as the chunks it arrives in: one SSE frame per chunk.
fn upstream_stream(deltas: usize) -> Vec<Bytes> {
    let mut events = vec![
        json!({"type": "RUN_STARTED", "threadId": "thread_bench", "runId": "run_bench"}),
        json!({"type": "TEXT_MESSAGE_START", "messageId": "msg_1", "role": "assistant"}),
    ];
    // Token-sized deltas, as a model streams them.
    let words = [
        "The", " weather", " in", " Paris", " is", " mild", " today,", " with", " light", " rain",
    ];
    for i in 0..deltas {
        events.push(json!({
            "type": "TEXT_MESSAGE_CONTENT",
            "messageId": "msg_1",
            "delta": words[i % words.len()],
        }));
    }
    events.push(json!({"type": "TEXT_MESSAGE_END", "messageId": "msg_1"}));
    events.push(json!({
        "type": "TOOL_CALL_START",
        "toolCallId": "call_1",
        "toolCallName": "get_weather",
        "parentMessageId": "msg_1",
    }));
    for delta in [r#"{"city":"#, r#""Paris","#, r#""unit":"c"}"#] {
        events.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": "call_1", "delta": delta}));
    }
    events.push(json!({"type": "TOOL_CALL_END", "toolCallId": "call_1"}));
    events.push(json!({
        "type": "TOOL_CALL_RESULT",
        "messageId": "tool_msg_1",
        "toolCallId": "call_1",
        "content": r#"{"temperature":14,"conditions":"light rain","humidity":0.82}"#,
    }));
    events.push(json!({"type": "RUN_FINISHED", "threadId": "thread_bench", "runId": "run_bench"}));
    events
        .iter()
        .map(|event| Bytes::from(format!("data: {event}\n\n")))
        .collect()
}

/// The turn the client sent, which the encoder takes its thread and run ids from.
fn client_turn() -> Turn {
    let input = json!({
        "threadId": "thread_bench",
        "runId": "run_bench",
        "messages": [{"id": "u1", "role": "user", "content": "What is the weather in Paris?"}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    });
    ag_ui::decode_request(input.to_string().as_bytes()).expect("a valid RunAgentInput")
}

/// Runs one whole upstream stream through the pipeline; returns the bytes written for the client.
fn pipeline(chunks: &[Bytes], turn: &Turn, translate: &Translate) -> usize {
    let mut framer = SseDecoder::new(MAX_EVENT_BYTES);
    let mut decoder = ag_ui::Decoder::default();
    let mut normalizer = Normalizer::new();
    let mut encoder = ag_ui::Encoder::new(turn, translate);
    let mut decoded = Vec::new();
    let mut normalized = Vec::new();
    let mut written = 0;
    let mut emit = |normalized: &mut Vec<Event>, encoder: &mut ag_ui::Encoder| {
        for event in normalized.drain(..) {
            written += black_box(encoder.encode(event)).len();
        }
    };
    for chunk in chunks {
        framer.push(chunk);
        while let Some(frame) = framer.next_event().expect("valid SSE") {
            decoder
                .decode(&frame.data, &mut decoded)
                .expect("valid AG-UI");
            for event in decoded.drain(..) {
                normalizer.push(event, &mut normalized);
            }
            emit(&mut normalized, &mut encoder);
        }
    }
    decoder.finish(&mut decoded);
    for event in decoded.drain(..) {
        normalizer.push(event, &mut normalized);
    }
    normalizer.finish(Ok(()), &mut normalized);
    emit(&mut normalized, &mut encoder);
    written
}

/// The stages on their own, for one stream of 100 deltas: where the per-event time goes.
fn stages(c: &mut Criterion, turn: &Turn, translate: &Translate) {
    let chunks = upstream_stream(100);
    let mut group = c.benchmark_group("ag_ui_stages_100_deltas");
    group.throughput(Throughput::Elements(chunks.len() as u64));

    group.bench_function("1_sse_framing", |b| {
        b.iter(|| {
            let mut framer = SseDecoder::new(MAX_EVENT_BYTES);
            let mut n = 0;
            for chunk in &chunks {
                framer.push(chunk);
                while let Some(frame) = framer.next_event().expect("valid SSE") {
                    n += black_box(frame).data.len();
                }
            }
            n
        })
    });

    let frames: Vec<String> = {
        let mut framer = SseDecoder::new(MAX_EVENT_BYTES);
        let mut frames = Vec::new();
        for chunk in &chunks {
            framer.push(chunk);
            while let Some(frame) = framer.next_event().expect("valid SSE") {
                frames.push(frame.data);
            }
        }
        frames
    };
    group.bench_function("2_ag_ui_decode", |b| {
        b.iter(|| {
            let mut decoder = ag_ui::Decoder::default();
            let mut out = Vec::new();
            for data in &frames {
                decoder.decode(data, &mut out).expect("valid AG-UI");
            }
            decoder.finish(&mut out);
            black_box(out)
        })
    });

    let decoded: Vec<Event> = {
        let mut decoder = ag_ui::Decoder::default();
        let mut out = Vec::new();
        for data in &frames {
            decoder.decode(data, &mut out).expect("valid AG-UI");
        }
        decoder.finish(&mut out);
        out
    };
    group.bench_function("3_normalize", |b| {
        b.iter_batched(
            || decoded.clone(),
            |events| {
                let mut normalizer = Normalizer::new();
                let mut out = Vec::with_capacity(events.len() + 8);
                for event in events {
                    normalizer.push(event, &mut out);
                }
                normalizer.finish(Ok(()), &mut out);
                out
            },
            criterion::BatchSize::SmallInput,
        )
    });

    let normalized: Vec<Event> = {
        let mut normalizer = Normalizer::new();
        let mut out = Vec::new();
        for event in decoded.clone() {
            normalizer.push(event, &mut out);
        }
        normalizer.finish(Ok(()), &mut out);
        out
    };
    group.bench_function("4_ag_ui_encode", |b| {
        b.iter_batched(
            || normalized.clone(),
            |events| {
                let mut encoder = ag_ui::Encoder::new(turn, translate);
                let mut n = 0;
                for event in events {
                    n += black_box(encoder.encode(event)).len();
                }
                n
            },
            criterion::BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn bench(c: &mut Criterion) {
    let turn = client_turn();
    let translate = Translate::default();

    let mut group = c.benchmark_group("ag_ui_to_ag_ui_pipeline");
    for deltas in DELTAS {
        let chunks = upstream_stream(deltas);
        // Sanity: the whole stream goes through and produces output.
        assert!(pipeline(&chunks, &turn, &translate) > 0);
        group.throughput(Throughput::Elements(chunks.len() as u64));
        group.bench_with_input(BenchmarkId::new("deltas", deltas), &chunks, |b, chunks| {
            b.iter(|| pipeline(chunks, &turn, &translate))
        });
    }
    group.finish();

    stages(c, &turn, &translate);
}

criterion_group!(benches, bench);
criterion_main!(benches);
