//! Per-event CPU cost of translating a live stream, for every pair of protocols, without any I/O: the
//! upstream's SSE bytes → [`SseDecoder`] → the upstream protocol's outbound decoder → [`Normalizer::push`] →
//! the client protocol's inbound encoder → the client's bytes.
//!
//! Two tables drive it: [`UPSTREAMS`] (per outbound protocol: a reply as its servers send it, and its
//! decoder) and [`CLIENTS`] (per inbound protocol: its encoder). Every upstream runs against every client.
//! Each reply is a streamed text of N deltas plus, where the protocol has them, a server-side tool call and its
//! result; each upstream event arrives as its own chunk (the common case for a live stream).
//!
//! Throughput is counted in upstream events, so criterion's `elem/s` inverted is the cost per upstream event.
//!
//! What is left out, being outside the protocol modules' pure steps: an A2A client's task store
//! (`Registry::apply`), and the CMDC gateway's run buffer (a mutex and a watch per event) and its closing
//! `agent_end` (written by the session's run loop).
//!
//! Run: `cargo bench --bench translation` (all of it), `cargo bench --bench translation -- 'cmdc->'` (one
//! upstream). Measured numbers are in benches/RESULTS.md.

use std::hint::black_box;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};

use agent_bridge::face::EventEncoder;
use agent_bridge::model::{Event, EventCounts, Message, Outcome, Role, Turn};
use agent_bridge::normalize::Normalizer;
use agent_bridge::protocol::{a2a, ag_kit, ag_ui, agentscope, cmdc};
use agent_bridge::sse::{SseDecoder, SseEvent};

/// The proxy's own cap on an upstream event.
const MAX_EVENT_BYTES: usize = 10 * 1024 * 1024;
/// Text deltas per reply in the 5 × 5 table.
const DELTAS: usize = 100;
/// Reply lengths for the one pair measured at several sizes (how the cost per event scales).
const SCALING_DELTAS: [usize; 3] = [10, 100, 1000];
/// Token-sized deltas, as a model streams them.
const WORDS: [&str; 10] = [
    "The", " weather", " in", " Paris", " is", " mild", " today,", " with", " light", " rain",
];
/// The server-side tool call every reply makes (where the protocol shows one).
const TOOL: &str = "get_weather";
const TOOL_ARGS: [&str; 3] = [r#"{"city":"#, r#""Paris","#, r#""unit":"c"}"#];
const TOOL_RESULT: &str = r#"{"temperature":14,"conditions":"light rain","humidity":0.82}"#;

// --- The two tables -----------------------------------------------------------------------------------------

/// An outbound protocol: what its servers send, and how the proxy reads it.
struct Upstream {
    name: &'static str,
    /// A reply of N text deltas, one SSE frame per chunk.
    stream: fn(usize) -> Vec<Bytes>,
    decoder: fn() -> Box<dyn Decode>,
}

/// An inbound protocol: how the proxy writes a run for its clients.
struct Client {
    name: &'static str,
    encoder: fn(&Turn) -> Box<dyn Encode>,
}

const UPSTREAMS: [Upstream; 5] = [
    Upstream {
        name: "ag_ui",
        stream: ag_ui_stream,
        decoder: || Box::new(ag_ui::Decoder::default()),
    },
    Upstream {
        name: "a2a",
        stream: a2a_stream,
        decoder: || Box::new(a2a::Decoder::new()),
    },
    Upstream {
        name: "agentscope",
        stream: agentscope_stream,
        decoder: || Box::new(agentscope::Decoder::new()),
    },
    Upstream {
        name: "ag_kit",
        stream: ag_kit_stream,
        decoder: || Box::new(ag_kit::Decoder::default()),
    },
    Upstream {
        name: "cmdc",
        stream: cmdc_stream,
        decoder: || Box::new(CmdcDecoder::default()),
    },
];

const CLIENTS: [Client; 5] = [
    Client {
        name: "ag_ui",
        encoder: |turn| {
            Box::new(Frames::of(ag_ui::Encoder::new(
                turn,
                &ag_ui::InboundOptions::default(),
            )))
        },
    },
    Client {
        name: "a2a",
        encoder: |_| Box::new(A2aEncoder::new()),
    },
    Client {
        name: "agentscope",
        encoder: |turn| Box::new(Frames::of(agentscope_encoder(turn))),
    },
    Client {
        name: "ag_kit",
        encoder: |_| Box::new(Frames::of(ag_kit::Encoder)),
    },
    Client {
        name: "cmdc",
        encoder: |_| Box::new(CmdcEncoder::new()),
    },
];

// --- Driving each protocol's pure steps ---------------------------------------------------------------------

/// An outbound decoder: one upstream SSE frame in, canonical (loose) events out.
trait Decode {
    fn decode(&mut self, frame: &SseEvent, out: &mut Vec<Event>);
    /// The upstream body ended.
    fn finish(&mut self, out: &mut Vec<Event>);
}

/// An inbound encoder: one normalized event in; returns how many bytes the client is sent.
trait Encode {
    fn encode(&mut self, event: Event) -> usize;
}

impl Decode for ag_ui::Decoder {
    fn decode(&mut self, frame: &SseEvent, out: &mut Vec<Event>) {
        self.decode(&frame.data, out).expect("valid AG-UI");
    }
    fn finish(&mut self, out: &mut Vec<Event>) {
        self.finish(out);
    }
}

impl Decode for a2a::Decoder {
    fn decode(&mut self, frame: &SseEvent, out: &mut Vec<Event>) {
        self.decode(&frame.data, out).expect("valid A2A");
    }
    fn finish(&mut self, out: &mut Vec<Event>) {
        // Only a stream that did not settle its task names one to ask about.
        assert_eq!(self.end_of_stream(out), None, "the A2A run is settled");
    }
}

impl Decode for agentscope::Decoder {
    fn decode(&mut self, frame: &SseEvent, out: &mut Vec<Event>) {
        self.decode(&frame.data, out).expect("valid AgentScope");
    }
    fn finish(&mut self, out: &mut Vec<Event>) {
        self.end_of_stream(out);
    }
}

impl Decode for ag_kit::Decoder {
    fn decode(&mut self, frame: &SseEvent, out: &mut Vec<Event>) {
        self.decode(&frame.data, out);
    }
    fn finish(&mut self, out: &mut Vec<Event>) {
        self.end_of_stream(out);
    }
}

/// The CMDC outbound's read loop: a frame is read by its `event:` name, and the end of the gateway's run ends
/// the canonical run (the outbound emits `RunFinished` itself).
#[derive(Default)]
struct CmdcDecoder(cmdc::Decoder);

impl Decode for CmdcDecoder {
    fn decode(&mut self, frame: &SseEvent, out: &mut Vec<Event>) {
        let name = frame.event.as_deref().expect("a CMDC frame is named");
        let event = cmdc::wire::Event::from_sse(name, &frame.data)
            .expect("valid CMDC")
            .expect("a known CMDC event");
        if let Some(_end) = self.0.decode(event, out).expect("a CMDC run that succeeds") {
            out.push(Event::RunFinished {
                outcome: Outcome::Completed,
                usage: None,
            });
        }
    }
    fn finish(&mut self, _: &mut Vec<Event>) {}
}

/// An inbound that streams its encoder's frames straight to the client (AG-UI, AG-Kit, AgentScope).
struct Frames<E> {
    encoder: E,
    frames: BytesMut,
}

impl<E> Frames<E> {
    fn of(encoder: E) -> Self {
        Self {
            encoder,
            frames: BytesMut::new(),
        }
    }
}

impl<E: EventEncoder<Out = BytesMut>> Encode for Frames<E> {
    fn encode(&mut self, event: Event) -> usize {
        self.encoder.encode(event, &mut self.frames);
        black_box(self.frames.split()).len()
    }
}

fn agentscope_encoder(turn: &Turn) -> agentscope::Encoder {
    let options = agentscope::EncodeOptions {
        question_tool: agentscope::InboundOptions::default().question_tool,
    };
    agentscope::Encoder::new(turn, "session_bench", options, ())
}

/// The A2A inbound's `message/stream`: the task's results, each framed as a JSON-RPC response, written into
/// one buffer as the client's stream writes them.
struct A2aEncoder {
    encoder: a2a::Encoder,
    frames: a2a::ResultFrames,
    results: Vec<a2a::wire::StreamResult>,
    buf: BytesMut,
}

impl A2aEncoder {
    fn new() -> Self {
        Self {
            encoder: a2a::Encoder::new(
                "task_bench",
                "context_bench",
                a2a::EncodeOptions::default(),
            ),
            frames: a2a::ResultFrames(a2a::wire::RequestId::String("request_bench".to_owned())),
            results: Vec::new(),
            buf: BytesMut::new(),
        }
    }
}

impl Encode for A2aEncoder {
    fn encode(&mut self, event: Event) -> usize {
        self.encoder.encode(event, &mut self.results);
        for result in self.results.drain(..) {
            self.frames.encode(Arc::new(result), &mut self.buf);
        }
        black_box(self.buf.split()).len()
    }
}

/// The CMDC inbound's `GET …/events`: the run's gateway events, each as an SSE frame.
struct CmdcEncoder {
    encoder: cmdc::Encoder,
    events: Vec<cmdc::wire::Event>,
    frames: BytesMut,
}

impl CmdcEncoder {
    fn new() -> Self {
        Self {
            encoder: cmdc::Encoder::new(Vec::new()),
            events: Vec::new(),
            frames: BytesMut::new(),
        }
    }
}

impl Encode for CmdcEncoder {
    fn encode(&mut self, event: Event) -> usize {
        self.encoder.encode(event, &mut self.events);
        for event in self.events.drain(..) {
            event.write_sse(&mut self.frames);
        }
        black_box(self.frames.split()).len()
    }
}

// --- The pipeline -------------------------------------------------------------------------------------------

/// Runs one whole upstream reply through the pipeline; returns the bytes written for the client.
fn translate(chunks: &[Bytes], decoder: &mut dyn Decode, encoder: &mut dyn Encode) -> usize {
    let mut framer = SseDecoder::new(MAX_EVENT_BYTES);
    let mut normalizer = Normalizer::new();
    let mut decoded = Vec::new();
    let mut normalized = Vec::new();
    let mut written = 0;
    for chunk in chunks {
        framer.push(chunk);
        while let Some(frame) = framer.next_event().expect("valid SSE") {
            decoder.decode(&frame, &mut decoded);
            for event in decoded.drain(..) {
                normalizer.push(event, &mut normalized);
            }
            written += encode_all(&mut normalized, encoder);
        }
    }
    decoder.finish(&mut decoded);
    for event in decoded.drain(..) {
        normalizer.push(event, &mut normalized);
    }
    normalizer.finish(Ok(()), &mut normalized);
    written + encode_all(&mut normalized, encoder)
}

fn encode_all(events: &mut Vec<Event>, encoder: &mut dyn Encode) -> usize {
    events.drain(..).map(|event| encoder.encode(event)).sum()
}

/// The turn the client sent (its ids are what some encoders write).
fn client_turn() -> Turn {
    Turn {
        conversation: "thread_bench".to_owned(),
        run_id: "run_bench".to_owned(),
        messages: vec![Message::text_message(
            "u1",
            Role::User,
            "What is the weather in Paris?",
        )],
        ..Turn::default()
    }
}

// --- The upstream replies, as each protocol's servers write them -----------------------------------------

/// A JSON string literal.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

fn words(deltas: usize) -> impl Iterator<Item = &'static str> {
    WORDS.iter().copied().cycle().take(deltas)
}

/// `data: <json>\n\n` frames, as most servers write them.
fn data_frames(payloads: impl IntoIterator<Item = String>) -> Vec<Bytes> {
    payloads
        .into_iter()
        .map(|json| Bytes::from(format!("data: {json}\n\n")))
        .collect()
}

/// The AG-UI Python SDK's `EventEncoder`: compact JSON in field order; a text message, then a tool call with
/// streamed arguments and its result, inside a run. N + 10 events.
fn ag_ui_stream(deltas: usize) -> Vec<Bytes> {
    let mut events =
        vec![r#"{"type":"RUN_STARTED","threadId":"thread_bench","runId":"run_bench"}"#.to_owned()];
    events
        .push(r#"{"type":"TEXT_MESSAGE_START","messageId":"msg_1","role":"assistant"}"#.to_owned());
    events.extend(words(deltas).map(|word| {
        format!(
            r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"msg_1","delta":{}}}"#,
            quoted(word)
        )
    }));
    events.push(r#"{"type":"TEXT_MESSAGE_END","messageId":"msg_1"}"#.to_owned());
    events.push(format!(
        r#"{{"type":"TOOL_CALL_START","toolCallId":"call_1","toolCallName":"{TOOL}","parentMessageId":"msg_1"}}"#
    ));
    events.extend(TOOL_ARGS.map(|delta| {
        format!(
            r#"{{"type":"TOOL_CALL_ARGS","toolCallId":"call_1","delta":{}}}"#,
            quoted(delta)
        )
    }));
    events.push(r#"{"type":"TOOL_CALL_END","toolCallId":"call_1"}"#.to_owned());
    events.push(format!(
        r#"{{"type":"TOOL_CALL_RESULT","messageId":"tool_msg_1","toolCallId":"call_1","content":{}}}"#,
        quoted(TOOL_RESULT)
    ));
    events.push(
        r#"{"type":"RUN_FINISHED","threadId":"thread_bench","runId":"run_bench"}"#.to_owned(),
    );
    data_frames(events)
}

/// a2a-sdk 0.2.13 `message/stream` (`specs/a2a.md` §2): JSON-RPC responses with sorted keys, CRLF framed by
/// sse-starlette; the task, `working`, N chunks of one artifact, `completed`. A2A has no tool calls on the
/// wire. N + 3 events.
fn a2a_stream(deltas: usize) -> Vec<Bytes> {
    let ids = r#""contextId":"ctx-1""#;
    let task = r#""taskId":"task-1""#;
    let mut results = vec![format!(
        r#"{{{ids},"history":[{{{ids},"kind":"message","messageId":"m1","parts":[{{"kind":"text","text":"What is the weather in Paris?"}}],"role":"user",{task}}}],"id":"task-1","kind":"task","status":{{"state":"submitted"}}}}"#
    )];
    results.push(format!(
        r#"{{{ids},"final":false,"kind":"status-update","status":{{"state":"working","timestamp":"2026-11-22T01:51:31.994383+00:00"}},{task}}}"#
    ));
    results.extend(words(deltas).enumerate().map(|(i, word)| {
        // The first chunk names the artifact and replaces; the rest append; the last says so.
        let (append, name) = match i {
            0 => ("", r#","name":"response""#),
            _ => (r#""append":true,"#, ""),
        };
        let last = if i + 1 == deltas { r#""lastChunk":true,"# } else { "" };
        format!(
            r#"{{{append}"artifact":{{"artifactId":"a1"{name},"parts":[{{"kind":"text","text":{}}}]}},{ids},"kind":"artifact-update",{last}{task}}}"#,
            quoted(word)
        )
    }));
    results.push(format!(
        r#"{{{ids},"final":true,"kind":"status-update","status":{{"state":"completed","timestamp":"2026-11-22T01:51:32.994586+00:00"}},{task}}}"#
    ));
    results
        .into_iter()
        .map(|result| {
            Bytes::from(format!(
                "data: {{\"id\":\"r1\",\"jsonrpc\":\"2.0\",\"result\":{result}}}\r\n\r\n"
            ))
        })
        .collect()
}

/// agentscope-runtime 1.1.x `/process` (`tests/fixtures/agentscope/upstream/plugin_call_tool.sse`): every
/// field written, `null`s included; a text message (N delta contents, the completed content, the completed
/// message), a `plugin_call` and its `plugin_call_output`, and the completed response repeating every
/// message. N + 15 events.
fn agentscope_stream(deltas: usize) -> Vec<Bytes> {
    let mut frames = AgentscopeFrames::default();
    frames.response("created", "null", "null");
    frames.response("in_progress", "null", "null");

    let text: String = words(deltas).collect();
    frames.message("msg_text", "message", "assistant", "in_progress", "null");
    for word in words(deltas) {
        frames.content(
            "in_progress",
            &format!(
                r#""type":"text","index":0,"delta":true,"msg_id":"msg_text","text":{}"#,
                quoted(word)
            ),
        );
    }
    let text_content = format!(
        r#""type":"text","index":0,"delta":null,"msg_id":"msg_text","text":{}"#,
        quoted(&text)
    );
    frames.completed_message("msg_text", "message", "assistant", &text_content);

    let call = |arguments: &str| {
        format!(
            r#""type":"data","index":0,"delta":false,"msg_id":"msg_call","data":{{"call_id":"call_1","name":"{TOOL}","arguments":{}}}"#,
            quoted(arguments)
        )
    };
    frames.message(
        "msg_call",
        "plugin_call",
        "assistant",
        "in_progress",
        "null",
    );
    frames.content("in_progress", &call(""));
    frames.content("in_progress", &call(&TOOL_ARGS.concat()));
    frames.completed_message(
        "msg_call",
        "plugin_call",
        "assistant",
        &call(&TOOL_ARGS.concat()),
    );

    let output = |output: &str| {
        format!(
            r#""type":"data","index":0,"delta":false,"msg_id":"msg_output","data":{{"call_id":"call_1","name":"{TOOL}","output":{}}}"#,
            quoted(output)
        )
    };
    frames.message(
        "msg_output",
        "plugin_call_output",
        "tool",
        "in_progress",
        "null",
    );
    frames.content("in_progress", &output(""));
    frames.completed_message(
        "msg_output",
        "plugin_call_output",
        "tool",
        &output(TOOL_RESULT),
    );

    let every_message = format!("[{}]", frames.completed.join(","));
    frames.response(
        "completed",
        &every_message,
        r#"{"input_tokens":12,"output_tokens":104}"#,
    );
    data_frames(frames.payloads)
}

/// The runtime's frames, numbered as it numbers them; keeps the completed messages for the response.
#[derive(Default)]
struct AgentscopeFrames {
    payloads: Vec<String>,
    completed: Vec<String>,
}

impl AgentscopeFrames {
    fn next_sequence(&self) -> usize {
        self.payloads.len()
    }

    fn response(&mut self, status: &str, output: &str, usage: &str) {
        let completed_at = if status == "completed" {
            "1795311192"
        } else {
            "null"
        };
        let payload = format!(
            r#"{{"sequence_number":{},"object":"response","status":"{status}","error":null,"id":"response_bench","created_at":1795311191,"completed_at":{completed_at},"output":{output},"usage":{usage},"session_id":"session_bench"}}"#,
            self.next_sequence()
        );
        self.payloads.push(payload);
    }

    fn message(&mut self, id: &str, kind: &str, role: &str, status: &str, content: &str) -> String {
        let payload = format!(
            r#"{{"sequence_number":{},"object":"message","status":"{status}","error":null,"id":"{id}","type":"{kind}","role":"{role}","content":{content},"code":null,"message":null,"usage":null,"metadata":{{}}}}"#,
            self.next_sequence()
        );
        self.payloads.push(payload.clone());
        payload
    }

    fn content(&mut self, status: &str, body: &str) -> String {
        let payload = format!(
            r#"{{"sequence_number":{},"object":"content","status":"{status}","error":null,{body}}}"#,
            self.next_sequence()
        );
        self.payloads.push(payload.clone());
        payload
    }

    /// The completed content, then the completed message repeating it.
    fn completed_message(&mut self, id: &str, kind: &str, role: &str, body: &str) {
        let content = self.content("completed", body);
        let message = self.message(id, kind, role, "completed", &format!("[{content}]"));
        self.completed.push(message);
    }
}

/// An AG-Kit v0 agent (`specs/ag-kit.md` §2): compact lower-case events, N `text`, a server-side tool call
/// and its `tool-result`, then `[DONE]`. N + 7 events.
fn ag_kit_stream(deltas: usize) -> Vec<Bytes> {
    let mut events: Vec<String> = words(deltas)
        .map(|word| format!(r#"{{"type":"text","content":{}}}"#, quoted(word)))
        .collect();
    events.push(format!(
        r#"{{"type":"tool-call-start","toolCallId":"call_1","toolCallName":"{TOOL}"}}"#
    ));
    events.extend(TOOL_ARGS.map(|delta| {
        format!(
            r#"{{"type":"tool-call-args","toolCallId":"call_1","delta":{}}}"#,
            quoted(delta)
        )
    }));
    events.push(r#"{"type":"tool-call-end","toolCallId":"call_1"}"#.to_owned());
    events.push(format!(
        r#"{{"type":"tool-result","toolCallId":"call_1","result":{}}}"#,
        quoted(TOOL_RESULT)
    ));
    events.push("[DONE]".to_owned());
    data_frames(events)
}

/// A CMDC gateway's `GET /v1/sessions/:id/events` (`specs/cmdc.md` §1.3, §2): `event: <name>` frames of
/// compact JSON; the prompt, N `message_delta`, one server-side tool execution, `agent_end`. N + 7 events.
fn cmdc_stream(deltas: usize) -> Vec<Bytes> {
    let mut events = vec![
        (
            "prompt_received",
            r#"{"text":"What is the weather in Paris?"}"#.to_owned(),
        ),
        ("agent_start", "{}".to_owned()),
        ("message_start", "{}".to_owned()),
    ];
    events.extend(
        words(deltas).map(|word| ("message_delta", format!(r#"{{"delta":{}}}"#, quoted(word)))),
    );
    events.push(("tool_calls", r#"{"count":1}"#.to_owned()));
    events.push((
        "tool_execution_start",
        format!(r#"{{"toolName":"{TOOL}","callId":"tc_1","args":{{"city":"Paris","unit":"c"}}}}"#),
    ));
    events.push((
        "tool_execution_end",
        format!(
            r#"{{"toolName":"{TOOL}","callId":"tc_1","status":"ok","result":{}}}"#,
            quoted(TOOL_RESULT)
        ),
    ));
    let text: String = words(deltas).collect();
    events.push((
        "agent_end",
        format!(
            r#"{{"messageCount":4,"lastMessage":{{"content":{},"role":"assistant"}},"tokenUsage":{{"promptTokens":12,"completionTokens":104,"totalTokens":116}}}}"#,
            quoted(&text)
        ),
    ));
    events
        .into_iter()
        .map(|(name, data)| Bytes::from(format!("event: {name}\ndata: {data}\n\n")))
        .collect()
}

// --- The benchmarks -----------------------------------------------------------------------------------------

/// Every upstream × every client, for a reply of [`DELTAS`] deltas: one benchmark `<upstream>-><client>`.
fn every_pair(c: &mut Criterion, turn: &Turn) {
    let mut group = c.benchmark_group(format!("translation_{DELTAS}_deltas"));
    for upstream in &UPSTREAMS {
        let chunks = (upstream.stream)(DELTAS);
        group.throughput(Throughput::Elements(chunks.len() as u64));
        for client in &CLIENTS {
            let pair = format!("{}->{}", upstream.name, client.name);
            // Sanity before measuring: the whole reply goes through, and the client is sent something.
            assert!(run_pair(&chunks, upstream, client, turn) > 0, "{pair}");
            group.bench_function(pair, |b| {
                b.iter(|| run_pair(&chunks, upstream, client, turn))
            });
        }
    }
    group.finish();
}

/// One reply through a fresh decoder and encoder, as one run of the pair; returns the bytes written.
fn run_pair(chunks: &[Bytes], upstream: &Upstream, client: &Client, turn: &Turn) -> usize {
    let mut decoder = (upstream.decoder)();
    let mut encoder = (client.encoder)(turn);
    translate(chunks, decoder.as_mut(), encoder.as_mut())
}

/// AG-UI → AG-UI at several reply lengths: how the cost per event scales.
fn scaling(c: &mut Criterion, turn: &Turn) {
    let (upstream, client) = (&UPSTREAMS[0], &CLIENTS[0]);
    let mut group = c.benchmark_group(format!("{}->{}_scaling", upstream.name, client.name));
    for deltas in SCALING_DELTAS {
        let chunks = (upstream.stream)(deltas);
        group.throughput(Throughput::Elements(chunks.len() as u64));
        group.bench_with_input(BenchmarkId::new("deltas", deltas), &chunks, |b, chunks| {
            b.iter(|| run_pair(chunks, upstream, client, turn))
        });
    }
    group.finish();
}

/// The stages on their own, [`DELTAS`] deltas: where the time per event goes. Per upstream: SSE framing, its
/// decoding, normalizing (per upstream event). Per client: its encoding of one same normalized run (the AG-UI
/// upstream's; per canonical event).
fn stages(c: &mut Criterion, turn: &Turn) {
    let mut group = c.benchmark_group("stages_upstream");
    for upstream in &UPSTREAMS {
        let chunks = (upstream.stream)(DELTAS);
        group.throughput(Throughput::Elements(chunks.len() as u64));
        let id = |stage: &str| BenchmarkId::new(stage, upstream.name);
        group.bench_function(id("1_sse_framing"), |b| b.iter(|| frames(&chunks)));
        let frames = frames(&chunks);
        group.bench_function(id("2_decode"), |b| b.iter(|| decode(&frames, upstream)));
        let decoded = decode(&frames, upstream);
        group.bench_function(id("3_normalize"), |b| {
            b.iter_batched(|| decoded.clone(), normalize, BatchSize::SmallInput)
        });
    }
    group.finish();

    let upstream = &UPSTREAMS[0];
    let normalized = normalize(decode(&frames(&(upstream.stream)(DELTAS)), upstream));
    let mut group = c.benchmark_group("stages_client");
    group.throughput(Throughput::Elements(normalized.len() as u64));
    for client in &CLIENTS {
        group.bench_function(BenchmarkId::new("4_encode", client.name), |b| {
            b.iter_batched(
                || normalized.clone(),
                |mut events| {
                    let mut encoder = (client.encoder)(turn);
                    encode_all(&mut events, encoder.as_mut())
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

/// What the metrics cost per event: the hub counts each event the outbound emits and each it hands the
/// inbound by kind, and adds the counts to the metrics once per run (issue 21's target: 0.1 µs per event).
fn counting(c: &mut Criterion) {
    let upstream = &UPSTREAMS[0];
    let normalized = normalize(decode(&frames(&(upstream.stream)(DELTAS)), upstream));
    let mut group = c.benchmark_group("metrics");
    group.throughput(Throughput::Elements(normalized.len() as u64));
    group.bench_function("count_events_in_and_out", |b| {
        b.iter(|| {
            let (mut events_in, mut events_out) = (EventCounts::default(), EventCounts::default());
            for event in &normalized {
                events_in.count(black_box(event));
                events_out.count_kind(black_box(event).kind());
            }
            (events_in, events_out)
        })
    });
    group.finish();
}

fn frames(chunks: &[Bytes]) -> Vec<SseEvent> {
    let mut framer = SseDecoder::new(MAX_EVENT_BYTES);
    let mut frames = Vec::new();
    for chunk in chunks {
        framer.push(chunk);
        while let Some(frame) = framer.next_event().expect("valid SSE") {
            frames.push(frame);
        }
    }
    frames
}

fn decode(frames: &[SseEvent], upstream: &Upstream) -> Vec<Event> {
    let mut decoder = (upstream.decoder)();
    let mut out = Vec::new();
    for frame in frames {
        decoder.decode(frame, &mut out);
    }
    decoder.finish(&mut out);
    out
}

fn normalize(events: Vec<Event>) -> Vec<Event> {
    let mut normalizer = Normalizer::new();
    let mut out = Vec::with_capacity(events.len() + 8);
    for event in events {
        normalizer.push(event, &mut out);
    }
    normalizer.finish(Ok(()), &mut out);
    out
}

fn bench(c: &mut Criterion) {
    let turn = client_turn();
    every_pair(c, &turn);
    scaling(c, &turn);
    stages(c, &turn);
    counting(c);
}

criterion_group!(benches, bench);
criterion_main!(benches);
