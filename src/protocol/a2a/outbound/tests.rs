use super::encode::Outgoing;
use super::*;
use crate::model::{new_id, Interrupt, InterruptKind, Message, Part, Resume, ResumeStatus, Role};
use crate::model::{History, Media, MediaKind, MediaSource};
use serde_json::{json, Value};

fn user(text: &str) -> Message {
    Message::text_message(new_id("u"), Role::User, text)
}

fn turn(messages: Vec<Message>) -> Turn {
    Turn {
        conversation: "conv-1".to_owned(),
        run_id: "run-1".to_owned(),
        messages,
        history: History::Delta,
        ..Default::default()
    }
}

/// A conversation in `context`, waiting on `task` and the `interrupt` emitted for it.
fn conversation(
    context: Option<&str>,
    task: Option<&str>,
    interrupt: Option<&str>,
) -> Conversation {
    Conversation {
        context_id: context.map(str::to_owned),
        task_id: task.map(str::to_owned),
        interrupt_id: interrupt.map(str::to_owned),
        ..Conversation::default()
    }
}

fn message_json(outgoing: &Outgoing) -> Value {
    serde_json::to_value(outgoing.message.as_ref().expect("a message")).unwrap()
}

// --- The request -------------------------------------------------------------------------------------

#[test]
fn request_is_a_json_rpc_message_stream_with_a_string_id_and_no_configuration() {
    let outgoing = outgoing(&turn(vec![user("hi")]), &Conversation::default()).unwrap();
    let params = wire::MessageSendParams {
        message: outgoing.message.unwrap(),
        configuration: None,
        metadata: None,
    };
    let body: Value =
        serde_json::from_slice(&rpc_request("message/stream", &params).unwrap()).unwrap();
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["method"], "message/stream");
    assert!(body["id"].as_str().is_some_and(|id| id.starts_with("req_")));
    let params = body["params"].as_object().unwrap();
    assert_eq!(params.keys().collect::<Vec<_>>(), ["message"]);
    let message = &params["message"];
    assert_eq!(message["kind"], "message");
    assert_eq!(message["role"], "user");
    assert!(message["messageId"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));
    assert_eq!(message["parts"], json!([{"kind": "text", "text": "hi"}]));
    assert!(message.get("contextId").is_none());
    assert!(message.get("taskId").is_none());
}

#[test]
fn new_messages_become_parts_of_one_message_in_the_known_context() {
    let image = Message::new(
        "u2",
        Role::User,
        vec![
            Part::Text("and this:".to_owned()),
            Part::Media(Media {
                kind: MediaKind::Image,
                source: MediaSource::Url("https://example.com/a.png".to_owned()),
                mime_type: Some("image/png".to_owned()),
                filename: None,
            }),
            Part::Data(json!({"city": "Paris"})),
        ],
    );
    let system = Message::text_message("s1", Role::System, "Be brief.");
    let assistant = Message::text_message("a1", Role::Assistant, "Earlier answer");
    let messages = vec![system, user("look at"), assistant, image];
    let outgoing = outgoing(&turn(messages), &conversation(Some("ctx-1"), None, None)).unwrap();
    let message = message_json(&outgoing);
    assert_eq!(message["contextId"], "ctx-1");
    assert!(message.get("taskId").is_none());
    assert_eq!(
        message["parts"],
        json!([
            {"kind": "text", "text": "look at"},
            {"kind": "text", "text": "and this:"},
            {"kind": "file", "file": {"mimeType": "image/png", "uri": "https://example.com/a.png"}},
            {"kind": "data", "data": {"city": "Paris"}},
        ])
    );
}

#[test]
fn tool_results_are_sent_as_labelled_text() {
    let mut result = Message::text_message("t1", Role::Tool, "{\"temp\":21}");
    result.tool_call_id = Some("call_7".to_owned());
    let outgoing = outgoing(&turn(vec![result]), &Conversation::default()).unwrap();
    assert_eq!(
        message_json(&outgoing)["parts"],
        json!([{"kind": "text", "text": "[Result of tool call call_7]\n{\"temp\":21}"}])
    );
}

#[test]
fn resume_answers_continue_the_paused_task() {
    let paused = conversation(Some("ctx-1"), Some("task-1"), Some("int_1"));
    let mut resumed = turn(Vec::new());
    resumed.resume = vec![
        Resume {
            interrupt_id: "int_1".to_owned(),
            status: ResumeStatus::Resolved,
            payload: Some(json!("Paris, on Friday")),
        },
        Resume {
            interrupt_id: "int_old".to_owned(),
            status: ResumeStatus::Resolved,
            payload: Some(json!("stale")),
        },
    ];
    let message = message_json(&outgoing(&resumed, &paused).unwrap());
    assert_eq!(message["taskId"], "task-1");
    assert_eq!(message["contextId"], "ctx-1");
    assert_eq!(
        message["parts"],
        json!([{"kind": "text", "text": "Paris, on Friday"}])
    );

    resumed.resume = vec![Resume {
        interrupt_id: "int_1".to_owned(),
        status: ResumeStatus::Resolved,
        payload: Some(json!({"approved": true})),
    }];
    let message = message_json(&outgoing(&resumed, &paused).unwrap());
    assert_eq!(
        message["parts"],
        json!([{"kind": "text", "text": "{\"approved\":true}"}])
    );

    resumed.resume[0].payload = None;
    let message = message_json(&outgoing(&resumed, &paused).unwrap());
    assert_eq!(
        message["parts"],
        json!([{"kind": "text", "text": "yes"}]),
        "an answer without words is a go-ahead"
    );
}

#[test]
fn a_new_message_while_a_task_waits_continues_that_task() {
    let paused = conversation(Some("ctx-1"), Some("task-1"), None);
    let message = message_json(&outgoing(&turn(vec![user("Paris")]), &paused).unwrap());
    assert_eq!(message["taskId"], "task-1");
}

#[test]
fn declining_the_question_cancels_the_paused_task() {
    let paused = conversation(None, Some("task-1"), Some("int_1"));
    let mut declined = turn(Vec::new());
    declined.resume = vec![Resume {
        interrupt_id: "int_1".to_owned(),
        status: ResumeStatus::Cancelled,
        payload: None,
    }];
    let outgoing_ = outgoing(&declined, &paused).unwrap();
    assert_eq!(
        outgoing_,
        Outgoing {
            cancel: Some("task-1".to_owned()),
            message: None
        }
    );
    declined.messages = vec![user("something else")];
    let outgoing_ = outgoing(&declined, &paused).unwrap();
    assert_eq!(outgoing_.cancel.as_deref(), Some("task-1"));
    assert!(message_json(&outgoing_).get("taskId").is_none());
}

#[test]
fn a_turn_with_nothing_new_is_a_client_error() {
    let error = outgoing(&turn(Vec::new()), &Conversation::default()).unwrap_err();
    assert!(error.is_client());
    let system_only = turn(vec![Message::text_message("s", Role::System, "x")]);
    assert!(outgoing(&system_only, &Conversation::default()).is_err());
}

// --- The agent card ----------------------------------------------------------------------------------

fn dialect(card: Value) -> Result<Dialect> {
    let card: DiscoveredCard = serde_json::from_value(card).unwrap();
    card.dialect(&"http://agent/.well-known/agent.json".parse().unwrap())
}

#[test]
fn cards_say_whether_the_agent_streams() {
    let sdk_card = json!({"capabilities":{"streaming":true},"defaultInputModes":["text/plain"],
        "defaultOutputModes":["text/plain"],"description":"echo agent","name":"Echo025",
        "protocolVersion":"0.2.5","skills":[],"url":"http://127.0.0.1:9391/","version":"1.0.0"});
    assert_eq!(dialect(sdk_card).unwrap(), Dialect { streaming: true });
    let blocking = json!({"url": "http://a/", "protocolVersion": "0.2.5", "capabilities": {}});
    assert_eq!(dialect(blocking).unwrap(), Dialect { streaming: false });
    let hybrid = json!({"url": "http://a/", "protocolVersion": "0.3", "capabilities": {"streaming": true},
        "supportedInterfaces": [{"url": "http://a/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "signatures": []});
    assert_eq!(dialect(hybrid).unwrap(), Dialect { streaming: true });
    let interface_only = json!({"capabilities": {"streaming": false}, "supportedInterfaces": [
        {"url": "http://a/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]});
    assert_eq!(
        dialect(interface_only).unwrap(),
        Dialect { streaming: false }
    );
}

#[test]
fn a_1_0_only_card_is_a_configuration_error() {
    let card = json!({"name": "modern", "capabilities": {"streaming": true}, "supportedInterfaces": [
        {"url": "http://a/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "http://a/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]});
    let error = dialect(card).unwrap_err();
    assert_eq!(error.source(), Source::Config);
    assert!(error.message().contains("1.0"), "{error}");
    assert!(error.message().contains("0.2.5"), "{error}");
}

#[test]
fn well_known_card_urls_sit_under_the_upstream_path() {
    let uri = |s: &str| s.parse::<Uri>().unwrap();
    assert_eq!(
        well_known(&uri("http://h:9001/"), "agent.json").unwrap(),
        uri("http://h:9001/.well-known/agent.json")
    );
    assert_eq!(
        well_known(&uri("https://h/a2a/demo/v1/?k=1"), "agent-card.json").unwrap(),
        uri("https://h/a2a/demo/v1/.well-known/agent-card.json")
    );
}

// --- The decoder -------------------------------------------------------------------------------------

fn decode_all(decoder: &mut Decoder, results: &[Value]) -> Vec<Event> {
    let mut out = Vec::new();
    for result in results {
        let data = json!({"jsonrpc": "2.0", "id": "r", "result": result}).to_string();
        decoder.decode(&data, &mut out).unwrap();
    }
    out
}

fn status(state: &str, text: Option<&str>, is_final: bool) -> Value {
    let mut status = json!({"state": state});
    if let Some(text) = text {
        status["message"] = json!({"kind": "message", "role": "agent", "messageId": "s",
            "parts": [{"kind": "text", "text": text}]});
    }
    json!({"kind": "status-update", "taskId": "t", "contextId": "c", "status": status, "final": is_final})
}

fn chunk(id: &str, text: &str, append: Option<bool>, last: bool) -> Value {
    let mut update = json!({"kind": "artifact-update", "taskId": "t", "contextId": "c",
        "artifact": {"artifactId": id, "parts": [{"kind": "text", "text": text}]}, "lastChunk": last});
    if let Some(append) = append {
        update["append"] = json!(append);
    }
    update
}

fn texts(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::TextDelta { message_id, delta } => Some((message_id.clone(), delta.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn artifact_chunks_append_to_one_message_and_the_last_chunk_ends_it() {
    let mut decoder = Decoder::new();
    let out = decode_all(
        &mut decoder,
        &[
            chunk("a1", "Hel", Some(true), false),
            chunk("a1", "lo", Some(true), true),
        ],
    );
    let deltas = texts(&out);
    assert_eq!(deltas.len(), 2);
    assert_eq!(deltas[0].0, deltas[1].0);
    assert_eq!(
        out.last(),
        Some(&Event::TextEnd {
            message_id: deltas[0].0.clone()
        })
    );
}

#[test]
fn replacing_an_artifact_shows_the_suffix_or_starts_a_new_message() {
    let mut decoder = Decoder::new();
    let out = decode_all(
        &mut decoder,
        &[
            chunk("a1", "It is", None, false),
            chunk("a1", "It is sunny", Some(false), false),
            chunk("a1", "Actually, rain", None, false),
        ],
    );
    let deltas = texts(&out);
    assert_eq!(deltas[1], (deltas[0].0.clone(), " sunny".to_owned()));
    assert_ne!(deltas[2].0, deltas[0].0);
    assert_eq!(deltas[2].1, "Actually, rain");
}

#[test]
fn a_paused_status_without_final_settles_only_at_the_end_of_the_stream() {
    let mut decoder = Decoder::new();
    let mut out = decode_all(
        &mut decoder,
        &[status("input-required", Some("Which city?"), false)],
    );
    assert!(out.is_empty());
    assert_eq!(decoder.end_of_stream(&mut out), None);
    assert!(matches!(&out[0], Event::Interrupt(Interrupt {
        kind: InterruptKind::InputRequired { text }, ..
    }) if text == "Which city?"));
    let interrupt_id = match &out[0] {
        Event::Interrupt(interrupt) => interrupt.id.clone(),
        _ => unreachable!(),
    };
    assert_eq!(decoder.paused(), Some(("t", interrupt_id.as_str())));
    assert_eq!(decoder.context_id(), Some("c"));

    // A continued task starts out paused, then works: that is no pause.
    let mut decoder = Decoder::new();
    let mut out = decode_all(
        &mut decoder,
        &[
            status("input-required", None, false),
            status("working", None, false),
        ],
    );
    assert_eq!(decoder.running_task(), Some("t"));
    assert_eq!(decoder.end_of_stream(&mut out), Some("t".to_owned()));
    assert!(matches!(out[..], [Event::RunStarted]), "{out:?}");
}

#[test]
fn final_with_a_running_state_asks_for_the_task() {
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    let data = json!({"jsonrpc": "2.0", "id": "r", "result": status("working", None, true)});
    assert!(decoder.decode(&data.to_string(), &mut out).unwrap());
    assert_eq!(decoder.end_of_stream(&mut out), Some("t".to_owned()));
    assert!(matches!(out[..], [Event::RunStarted]), "{out:?}");
    out.clear();
    let answer = json!({"jsonrpc": "2.0", "id": "q", "result": {"kind": "task", "id": "t",
        "contextId": "c", "status": {"state": "auth-required"}}});
    decoder.decode_task_query(&answer.to_string(), &mut out);
    assert!(matches!(&out[0], Event::Interrupt(Interrupt {
        kind: InterruptKind::InputRequired { text }, ..
    }) if text.contains("authorization")));
    assert!(matches!(
        out[1],
        Event::RunFinished {
            outcome: Outcome::Interrupted,
            ..
        }
    ));
}

#[test]
fn json_rpc_errors_are_run_errors_with_their_code() {
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    let data = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"Task t is in terminal state: TaskState.canceled","data":null}}"#;
    assert!(decoder.decode(data, &mut out).unwrap());
    let Event::RunError(error) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(error.code(), "-32602");
    assert!(error.is_upstream());
    assert!(error.message().contains("terminal state"));
}

#[test]
fn what_is_not_a_json_rpc_response_is_malformed() {
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    for data in [
        "not json",
        r#"{"jsonrpc":"2.0","id":"r"}"#,
        r#"{"jsonrpc":"2.0","id":"r","result":{"task":{"id":"t"}}}"#,
    ] {
        let error = decoder.decode(data, &mut out).unwrap_err();
        assert_eq!(error.code(), "UPSTREAM_MALFORMED", "{data}");
    }
    // Keep-alive data with nothing in it is skipped.
    assert!(!decoder.decode("  ", &mut out).unwrap());
}

#[test]
fn a_continued_task_shows_only_what_it_had_not_shown() {
    let mut first = Decoder::new();
    let mut out = decode_all(
        &mut first,
        &[
            chunk("a1", "Let me book that. ", None, false),
            status("input-required", Some("Where to?"), true),
        ],
    );
    assert!(first.paused().is_some());
    let shown = first.shown_artifacts();

    let mut next = Decoder::new();
    next.seed_shown_artifacts(shown);
    out.clear();
    let blocking = json!({"kind": "task", "id": "t", "contextId": "c",
        "status": {"state": "completed"},
        "artifacts": [{"artifactId": "a1", "parts": [{"kind": "text", "text": "Let me book that. "},
                                                      {"kind": "text", "text": "Booked Paris."}]}]});
    let out = decode_all(&mut next, &[blocking]);
    assert_eq!(
        texts(&out)
            .into_iter()
            .map(|(_, delta)| delta)
            .collect::<Vec<_>>(),
        ["Booked Paris."]
    );
}

#[test]
fn data_parts_of_a_snapshot_are_emitted_once() {
    let mut decoder = Decoder::new();
    let data_chunk = json!({"kind": "artifact-update", "taskId": "t", "contextId": "c",
        "artifact": {"artifactId": "d", "parts": [{"kind": "data", "data": {"n": 1}}]}});
    let out = decode_all(&mut decoder, &[data_chunk]);
    assert!(matches!(&out[0], Event::Artifact(a) if a.id == "d" && !a.append));
    let mut out = Vec::new();
    assert_eq!(decoder.end_of_stream(&mut out), Some("t".to_owned()));
    let answer = json!({"jsonrpc": "2.0", "id": "q", "result": {"kind": "task", "id": "t",
        "contextId": "c", "status": {"state": "completed"}, "artifacts": [{"artifactId": "d",
        "parts": [{"kind": "data", "data": {"n": 1}}, {"kind": "data", "data": {"n": 2}}]}]}});
    decoder.decode_task_query(&answer.to_string(), &mut out);
    assert!(
        matches!(&out[0], Event::Artifact(a) if a.append && a.last_chunk && a.parts == [Part::Data(json!({"n": 2}))]),
        "{out:?}"
    );
}

// --- Whole runs against an in-process agent -----------------------------------------------------------

mod runs {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use futures_util::StreamExt;
    use http::header::CONTENT_TYPE;
    use http::HeaderMap;
    use http_body_util::StreamBody;
    use hyper::body::{Frame, Incoming};
    use hyper_util::rt::TokioIo;
    use tokio::net::TcpListener;

    use super::*;
    use crate::store::MemoryStore;
    use crate::translate::Translator;

    /// The longest any step waits.
    const WAIT: Duration = Duration::from_secs(10);

    /// One request the agent received.
    #[derive(Debug, Clone)]
    struct Seen {
        method: http::Method,
        path: String,
        headers: HeaderMap,
        body: Value,
    }

    impl Seen {
        fn rpc(&self) -> &str {
            self.body["method"].as_str().unwrap_or("")
        }
    }

    /// An answer: status, content type, body chunks; `hang` keeps the body open afterwards.
    struct Reply {
        status: u16,
        content_type: &'static str,
        chunks: Vec<String>,
        hang: bool,
    }

    impl Reply {
        fn sse(results: &[Value]) -> Reply {
            Reply {
                status: 200,
                content_type: "text/event-stream; charset=utf-8",
                chunks: results
                    .iter()
                    .map(|r| {
                        let response = json!({"jsonrpc": "2.0", "id": "r", "result": r});
                        format!("data: {response}\r\n\r\n")
                    })
                    .collect(),
                hang: false,
            }
        }

        fn json(status: u16, body: Value) -> Reply {
            Reply {
                status,
                content_type: "application/json",
                chunks: vec![body.to_string()],
                hang: false,
            }
        }

        fn hang(mut self) -> Reply {
            self.hang = true;
            self
        }
    }

    type Handler = dyn Fn(&Seen, usize) -> Reply + Send + Sync;

    /// An in-process agent: answers each request with `handler(request, index among its kind)`.
    struct Agent {
        url: String,
        seen: Arc<Mutex<Vec<Seen>>>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for Agent {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    impl Agent {
        async fn serve(handler: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static) -> Agent {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/a2a", listener.local_addr().unwrap());
            let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
            let handler: Arc<Handler> = Arc::new(handler);
            let state = Arc::clone(&seen);
            let task = tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let seen = Arc::clone(&state);
                    let handler = Arc::clone(&handler);
                    let service = hyper::service::service_fn(move |request| {
                        let seen = Arc::clone(&seen);
                        let handler = Arc::clone(&handler);
                        async move { Ok::<_, Infallible>(answer(request, &seen, &*handler).await) }
                    });
                    tokio::spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
            Agent { url, seen, task }
        }

        fn seen(&self) -> Vec<Seen> {
            self.seen.lock().unwrap().clone()
        }

        fn rpc_calls(&self, method: &str) -> Vec<Seen> {
            self.seen()
                .into_iter()
                .filter(|s| s.rpc() == method)
                .collect()
        }

        /// Waits until a request for `method` arrived.
        async fn wait_for(&self, method: &str) -> Seen {
            tokio::time::timeout(WAIT, async {
                loop {
                    if let Some(seen) = self.rpc_calls(method).pop() {
                        return seen;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("no {method} arrived: {:#?}", self.seen()))
        }
    }

    type ReplyBody = StreamBody<
        futures_util::stream::BoxStream<'static, std::result::Result<Frame<Bytes>, Infallible>>,
    >;

    async fn answer(
        request: http::Request<Incoming>,
        seen: &Mutex<Vec<Seen>>,
        handler: &Handler,
    ) -> http::Response<ReplyBody> {
        let (head, body) = request.into_parts();
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let request = Seen {
            method: head.method,
            path: head.uri.path().to_owned(),
            headers: head.headers,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        };
        let reply = {
            let mut seen = seen.lock().unwrap();
            let index = seen
                .iter()
                .filter(|s| s.path == request.path && s.rpc() == request.rpc())
                .count();
            seen.push(request.clone());
            handler(&request, index)
        };
        let frames = futures_util::stream::iter(
            reply
                .chunks
                .into_iter()
                .map(|chunk| Ok(Frame::data(Bytes::from(chunk)))),
        );
        let body = if reply.hang {
            frames.chain(futures_util::stream::pending()).boxed()
        } else {
            frames.boxed()
        };
        http::Response::builder()
            .status(reply.status)
            .header(CONTENT_TYPE, reply.content_type)
            .body(StreamBody::new(body))
            .unwrap()
    }

    fn translator(agent: &Agent, card: Option<String>, timeout: Duration) -> Arc<Translator> {
        let upstream = Upstream::new(agent.url.parse().unwrap(), Vec::new(), WAIT);
        let options = OutboundOptions { a2a_card: card };
        let outbound = Arc::new(Outbound::new(upstream, options));
        let store = Arc::new(MemoryStore::new(Duration::from_secs(3600)));
        Arc::new(Translator::new("r".to_owned(), outbound, store, timeout))
    }

    async fn run_turn(translator: &Arc<Translator>, turn: Turn) -> Vec<Event> {
        let stream = translator.start(turn);
        tokio::time::timeout(WAIT, stream.collect::<Vec<_>>())
            .await
            .expect("the run ends")
    }

    fn task(id: &str, context: &str, state: &str) -> Value {
        json!({"kind": "task", "id": id, "contextId": context, "status": {"state": state}})
    }

    fn update(task: &str, context: &str, state: &str, text: Option<&str>) -> Value {
        let is_final = !matches!(state, "submitted" | "working");
        let mut update = super::status(state, text, is_final);
        update["taskId"] = json!(task);
        update["contextId"] = json!(context);
        update
    }

    fn terminal(events: &[Event]) -> &Event {
        events.last().expect("events")
    }

    #[tokio::test]
    async fn turns_keep_the_context_and_an_answer_resumes_the_paused_task() {
        let agent = Agent::serve(|_, index| match index {
            0 => Reply::sse(&[
                task("task-1", "ctx-1", "submitted"),
                update("task-1", "ctx-1", "input-required", Some("Where to?")),
            ]),
            1 => Reply::sse(&[
                update("task-1", "ctx-1", "working", None),
                chunk("a1", "Booked.", None, true),
                update("task-1", "ctx-1", "completed", None),
            ]),
            _ => Reply::sse(
                &[json!({"kind": "message", "role": "agent", "messageId": "m",
                "contextId": "ctx-1", "parts": [{"kind": "text", "text": "Anything else?"}]})],
            ),
        })
        .await;
        let translator = translator(&agent, None, WAIT);

        let events = run_turn(&translator, turn(vec![user("Book a flight")])).await;
        let Some(Event::Interrupt(interrupt)) =
            events.iter().find(|e| matches!(e, Event::Interrupt(_)))
        else {
            panic!("no interrupt: {events:?}")
        };
        assert!(matches!(
            terminal(&events),
            Event::RunFinished {
                outcome: Outcome::Interrupted,
                ..
            }
        ));
        let first = agent.only_one("message/stream", 0);
        assert_eq!(first.headers["accept"], "text/event-stream");
        assert!(first.headers.get("a2a-version").is_none());
        assert!(first.body["params"]["message"].get("contextId").is_none());

        let mut answer = turn(Vec::new());
        answer.resume = vec![Resume {
            interrupt_id: interrupt.id.clone(),
            status: ResumeStatus::Resolved,
            payload: Some(json!("Paris")),
        }];
        let events = run_turn(&translator, answer).await;
        assert!(!texts(&events).is_empty(), "{events:?}");
        assert!(events.contains(&Event::TextDelta {
            message_id: texts(&events)[0].0.clone(),
            delta: "Booked.".to_owned()
        }));
        assert!(matches!(
            terminal(&events),
            Event::RunFinished {
                outcome: Outcome::Completed,
                ..
            }
        ));
        let second = &agent.only_one("message/stream", 1).body["params"]["message"];
        assert_eq!(second["taskId"], "task-1");
        assert_eq!(second["contextId"], "ctx-1");
        assert_eq!(second["parts"], json!([{"kind": "text", "text": "Paris"}]));

        let events = run_turn(&translator, turn(vec![user("Thanks")])).await;
        assert_eq!(texts(&events)[0].1, "Anything else?");
        let third = &agent.only_one("message/stream", 2).body["params"]["message"];
        assert_eq!(third["contextId"], "ctx-1");
        assert!(third.get("taskId").is_none(), "{third}");
    }

    impl Agent {
        /// The `index`-th request for `method`.
        fn only_one(&self, method: &str, index: usize) -> Seen {
            self.rpc_calls(method)
                .get(index)
                .cloned()
                .unwrap_or_else(|| panic!("no {method} #{index}: {:#?}", self.seen()))
        }
    }

    #[tokio::test]
    async fn auto_card_falls_back_to_agent_json_is_read_once_and_picks_message_send() {
        let agent = Agent::serve(|seen, _| {
            if seen.path.ends_with("/.well-known/agent-card.json") {
                return Reply::json(404, json!({"detail": "Not Found"}));
            }
            if seen.path.ends_with("/.well-known/agent.json") {
                return Reply::json(
                    200,
                    json!({"name": "Echo", "description": "echo",
                    "url": "http://elsewhere/", "version": "1", "protocolVersion": "0.2.5",
                    "capabilities": {"streaming": false}, "defaultInputModes": [],
                    "defaultOutputModes": [], "skills": []}),
                );
            }
            let result = json!({"kind": "task", "id": "t", "contextId": "c",
                "status": {"state": "completed"},
                "artifacts": [{"artifactId": "a", "parts": [{"kind": "text", "text": "echo"}]}]});
            Reply::json(200, json!({"jsonrpc": "2.0", "id": "r", "result": result}))
        })
        .await;
        let translator = translator(&agent, Some("auto".to_owned()), WAIT);
        for _ in 0..2 {
            let events = run_turn(&translator, turn(vec![user("hi")])).await;
            assert_eq!(texts(&events)[0].1, "echo");
            assert!(matches!(terminal(&events), Event::RunFinished { .. }));
        }
        let gets: Vec<String> = agent
            .seen()
            .iter()
            .filter(|s| s.method == http::Method::GET)
            .map(|s| s.path.clone())
            .collect();
        assert_eq!(
            gets,
            [
                "/a2a/.well-known/agent-card.json",
                "/a2a/.well-known/agent.json"
            ]
        );
        let send = agent.only_one("message/send", 1);
        assert_eq!(
            send.path, "/a2a",
            "the route's upstream URL, not the card's"
        );
        assert_eq!(send.headers["accept"], "application/json");
    }

    #[tokio::test]
    async fn a_1_0_only_card_fails_the_run_with_a_configuration_error() {
        let agent = Agent::serve(|_, _| {
            Reply::json(
                200,
                json!({"name": "new", "capabilities": {"streaming": true},
                "supportedInterfaces": [{"url": "http://x/", "protocolBinding": "JSONRPC",
                "protocolVersion": "1.0"}]}),
            )
        })
        .await;
        let translator = translator(&agent, Some(format!("{}/card.json", agent.url)), WAIT);
        let events = run_turn(&translator, turn(vec![user("hi")])).await;
        let Event::RunError(error) = terminal(&events) else {
            panic!("{events:?}")
        };
        assert_eq!(error.code(), "CONFIG_ERROR");
        assert!(agent.rpc_calls("message/stream").is_empty());
    }

    #[tokio::test]
    async fn http_500_with_a_json_rpc_error_body_is_the_agents_error() {
        let agent = Agent::serve(|_, _| {
            Reply::json(
                500,
                json!({"jsonrpc": "2.0", "id": "r",
                "error": {"code": -32603, "message": "executor exploded"}}),
            )
        })
        .await;
        let translator = translator(&agent, None, WAIT);
        let events = run_turn(&translator, turn(vec![user("hi")])).await;
        let Event::RunError(error) = terminal(&events) else {
            panic!("{events:?}")
        };
        assert_eq!(error.code(), "-32603");
        assert_eq!(error.message(), "executor exploded");
    }

    #[tokio::test]
    async fn a_stream_request_answered_as_json_is_read_as_one_response() {
        let agent = Agent::serve(|_, _| {
            Reply::json(
                200,
                json!({"jsonrpc": "2.0", "id": "r",
                "error": {"code": -32600, "message": "Request payload validation error"}}),
            )
        })
        .await;
        let translator = translator(&agent, None, WAIT);
        let events = run_turn(&translator, turn(vec![user("hi")])).await;
        let Event::RunError(error) = terminal(&events) else {
            panic!("{events:?}")
        };
        assert_eq!(error.code(), "-32600");
    }

    #[tokio::test]
    async fn a_stream_ending_without_final_asks_tasks_get_once() {
        let agent = Agent::serve(|seen, _| match seen.rpc() {
            "tasks/get" => Reply::json(
                200,
                json!({"jsonrpc": "2.0", "id": "q",
                "result": task("t", "c", "completed")}),
            ),
            _ => Reply::sse(&[
                task("t", "c", "working"),
                chunk("a", "partial", None, false),
            ]),
        })
        .await;
        let translator = translator(&agent, None, WAIT);
        let events = run_turn(&translator, turn(vec![user("hi")])).await;
        assert!(matches!(
            terminal(&events),
            Event::RunFinished {
                outcome: Outcome::Completed,
                ..
            }
        ));
        let query = agent.only_one("tasks/get", 0);
        assert_eq!(query.body["params"], json!({"id": "t"}));
        assert!(agent.rpc_calls("tasks/cancel").is_empty());
    }

    #[tokio::test]
    async fn a_client_that_goes_away_cancels_the_running_task() {
        let agent = Agent::serve(|seen, _| match seen.rpc() {
            "tasks/cancel" => Reply::json(
                200,
                json!({"jsonrpc": "2.0", "id": "x",
                "result": task("t", "c", "canceled")}),
            ),
            _ => Reply::sse(&[
                task("t", "c", "working"),
                chunk("a", "thinking", None, false),
            ])
            .hang(),
        })
        .await;
        let translator = translator(&agent, None, WAIT);
        let mut stream = translator.start(turn(vec![user("hi")]));
        tokio::time::timeout(WAIT, async {
            while let Some(event) = stream.next().await {
                if matches!(event, Event::TextDelta { .. }) {
                    break;
                }
            }
        })
        .await
        .expect("the text arrives");
        drop(stream);
        let cancel = agent.wait_for("tasks/cancel").await;
        assert_eq!(cancel.body["params"], json!({"id": "t"}));
        assert!(cancel.body["id"].is_string());
    }

    #[tokio::test]
    async fn the_routes_timeout_cancels_the_running_task() {
        let agent = Agent::serve(|seen, _| match seen.rpc() {
            "tasks/cancel" => Reply::json(
                200,
                json!({"jsonrpc": "2.0", "id": "x",
                "result": task("t-7", "c", "canceled")}),
            ),
            _ => Reply::sse(&[task("t-7", "c", "submitted")]).hang(),
        })
        .await;
        let translator = translator(&agent, None, Duration::from_millis(300));
        let events = run_turn(&translator, turn(vec![user("hi")])).await;
        let Event::RunError(error) = terminal(&events) else {
            panic!("{events:?}")
        };
        assert!(error.is_timeout());
        let cancel = agent.wait_for("tasks/cancel").await;
        assert_eq!(cancel.body["params"], json!({"id": "t-7"}));
    }

    #[tokio::test]
    async fn declining_the_question_cancels_the_task_and_finishes_cancelled() {
        let agent = Agent::serve(|seen, _| match seen.rpc() {
            "tasks/cancel" => Reply::json(
                200,
                json!({"jsonrpc": "2.0", "id": "x",
                "result": task("t-3", "c", "canceled")}),
            ),
            _ => Reply::sse(&[update("t-3", "c", "input-required", Some("Sure?"))]),
        })
        .await;
        let translator = translator(&agent, None, WAIT);
        let events = run_turn(&translator, turn(vec![user("delete it")])).await;
        let Some(Event::Interrupt(interrupt)) =
            events.iter().find(|e| matches!(e, Event::Interrupt(_)))
        else {
            panic!("{events:?}")
        };
        let mut declined = turn(Vec::new());
        declined.resume = vec![Resume {
            interrupt_id: interrupt.id.clone(),
            status: ResumeStatus::Cancelled,
            payload: None,
        }];
        let events = run_turn(&translator, declined).await;
        assert!(matches!(
            terminal(&events),
            Event::RunFinished {
                outcome: Outcome::Cancelled,
                ..
            }
        ));
        assert_eq!(
            agent.only_one("tasks/cancel", 0).body["params"],
            json!({"id": "t-3"})
        );
        assert_eq!(agent.rpc_calls("message/stream").len(), 1);
    }
}
