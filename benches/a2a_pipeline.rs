//! Per-event CPU cost of the AG-UI → A2A hot path (the flagship pair), without any I/O: the A2A agent's SSE
//! bytes → [`SseDecoder`] → [`a2a::Decoder::decode`] → [`Normalizer::push`] → [`ag_ui::Encoder::encode`] →
//! SSE bytes for the AG-UI client.
//!
//! The upstream stream is what a2a-sdk 0.2.13 sends for a streamed reply: the `Task`, a `working` status,
//! N `artifact-update` text chunks of one artifact (the first replacing, the rest appending, the last one
//! `lastChunk`), and the final `completed` status — CRLF framed, as sse-starlette writes it.
//!
//! Throughput is counted in upstream events: criterion's `elem/s` inverted is the cost per event.
//!
//! Run: `cargo bench --bench a2a_pipeline`.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::{json, Value};

use agent_bridge::config::Translate;
use agent_bridge::model::{Event, Turn};
use agent_bridge::normalize::Normalizer;
use agent_bridge::protocol::{a2a, ag_ui};
use agent_bridge::sse::SseDecoder;

const MAX_EVENT_BYTES: usize = 10 * 1024 * 1024;
const CHUNKS: [usize; 3] = [10, 100, 1000];

fn response(result: Value) -> Bytes {
    Bytes::from(format!(
        "data: {}\r\n\r\n",
        json!({"jsonrpc": "2.0", "id": "r1", "result": result})
    ))
}

/// One streamed A2A reply as the chunks it arrives in: one SSE frame per chunk.
fn upstream_stream(chunks: usize) -> Vec<Bytes> {
    let ids = json!({"taskId": "task-1", "contextId": "ctx-1"});
    let with_ids = |mut value: Value| {
        value
            .as_object_mut()
            .unwrap()
            .extend(ids.as_object().unwrap().clone());
        value
    };
    let words = [
        "The", " weather", " in", " Paris", " is", " mild", " today,", " with", " light", " rain",
    ];
    let mut frames = vec![
        response(
            json!({"kind": "task", "id": "task-1", "contextId": "ctx-1", "status": {"state": "submitted"}}),
        ),
        response(with_ids(
            json!({"kind": "status-update", "status": {"state": "working"}, "final": false}),
        )),
    ];
    for i in 0..chunks {
        frames.push(response(with_ids(json!({
            "kind": "artifact-update",
            "artifact": {"artifactId": "a1", "parts": [{"kind": "text", "text": words[i % words.len()]}]},
            "append": i > 0,
            "lastChunk": i + 1 == chunks,
        }))));
    }
    frames.push(response(with_ids(
        json!({"kind": "status-update", "status": {"state": "completed"}, "final": true}),
    )));
    frames
}

fn client_turn() -> Turn {
    let input = json!({
        "threadId": "thread_bench", "runId": "run_bench",
        "messages": [{"id": "u1", "role": "user", "content": "What is the weather in Paris?"}],
        "tools": [], "context": [], "state": {}, "forwardedProps": {},
    });
    ag_ui::decode_request(input.to_string().as_bytes()).expect("a valid RunAgentInput")
}

/// Runs one whole upstream stream through the pipeline; returns the bytes written for the client.
fn pipeline(chunks: &[Bytes], turn: &Turn, translate: &Translate) -> usize {
    let mut framer = SseDecoder::new(MAX_EVENT_BYTES);
    let mut decoder = a2a::Decoder::new();
    let mut normalizer = Normalizer::new();
    let mut encoder = ag_ui::Encoder::new(turn, translate);
    let mut decoded: Vec<Event> = Vec::new();
    let mut normalized = Vec::new();
    let mut written = 0;
    for chunk in chunks {
        framer.push(chunk);
        while let Some(frame) = framer.next_event().expect("valid SSE") {
            decoder
                .decode(&frame.data, &mut decoded)
                .expect("valid A2A");
            for event in decoded.drain(..) {
                normalizer.push(event, &mut normalized);
            }
            for event in normalized.drain(..) {
                written += black_box(encoder.encode(event)).len();
            }
        }
    }
    normalizer.finish(Ok(()), &mut normalized);
    for event in normalized.drain(..) {
        written += black_box(encoder.encode(event)).len();
    }
    written
}

fn bench(c: &mut Criterion) {
    let turn = client_turn();
    let translate = Translate::default();
    let mut group = c.benchmark_group("agui_to_a2a_pipeline");
    for chunks in CHUNKS {
        let stream = upstream_stream(chunks);
        group.throughput(Throughput::Elements(stream.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(chunks), &stream, |b, stream| {
            b.iter(|| pipeline(stream, &turn, &translate))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
