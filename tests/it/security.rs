//! A hostile client against the proxy, over real sockets: request forgery through CMDC callback tools, forged
//! calls of the CMDC outbound's callback endpoint, cross-origin browsers, secrets in error messages, and
//! clients without a key, with another tenant's ids, or with more requests than a route allows.
//!
//! Every target here is on 127.0.0.0/8: addresses elsewhere (169.254.169.254, 10.x, ...) are only ever handed
//! to the proxy to be refused by its policy before any socket opens (src/egress.rs has the unit tests that
//! prove it with an injected resolver); this machine never sends them traffic.

use std::io::Write;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};

use crate::support;
use crate::support::cmdc::{self as gateway, all, names, Gate, Gateway, KEY};
use crate::support::{ag_ui, send, CmdcClient, Proxy, Reply, Response, Route, Routes, Upstream};

// --- A CMDC client --------------------------------------------------------------------------------------------

/// An open CMDC echo gateway at `/gw`.
fn cmdc_route() -> Route {
    Route::new("cmdc", "/gw", "cmdc", "echo")
}

/// `method /gw<path>` with `body` declared as `content_type`.
async fn call_as(
    proxy: &Proxy,
    method: Method,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> Response {
    let mut request = Request::builder()
        .method(method)
        .uri(proxy.url(&format!("/gw{path}")));
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    let body = Full::new(Bytes::from(body.to_owned()));
    send(request.body(body).expect("a request")).await
}

/// The gateway's client (the route is open: no key).
fn client(proxy: &Proxy) -> CmdcClient {
    CmdcClient::new(proxy.url("/gw"))
}

async fn new_session(proxy: &Proxy) -> String {
    client(proxy).create(json!({"model": "m"})).await
}

async fn register(proxy: &Proxy, session: &str, callback_url: &str) -> Response {
    let tool = json!({"name": "lookup", "callbackUrl": callback_url});
    client(proxy).register(session, tool).await
}

/// Prompts the echo agent to call `lookup` and returns the run's events.
async fn call_lookup(proxy: &Proxy, session: &str) -> Vec<(String, Value)> {
    let client = client(proxy);
    client.prompt(session, "/tool lookup {\"q\":\"x\"}").await;
    all(&mut client.subscribe(session).await).await
}

fn tool_end(seen: &[(String, Value)]) -> &Value {
    &seen
        .iter()
        .find(|(name, _)| name == "tool_execution_end")
        .unwrap_or_else(|| panic!("a tool_execution_end in {seen:?}"))
        .1
}

/// A callback endpoint answering every call with `reply`.
async fn callback_answering(reply: Reply) -> Upstream {
    Upstream::serve([reply]).await
}

fn ok_result() -> Reply {
    Reply::status(200)
        .header("content-type", "application/json")
        .body(r#"{"result":"found it"}"#)
}

// --- Request forgery through callback tools ---------------------------------------------------------------

#[tokio::test]
async fn callback_urls_to_internal_addresses_are_refused_at_registration() {
    let proxy = Proxy::start(cmdc_route()).await;
    let session = new_session(&proxy).await;
    let callback = callback_answering(ok_result()).await;
    let port = callback
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    for url in [
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.0.0.1:8080/".to_owned(),
        format!("http://127.0.0.1:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://[::1]:{port}/"),
        proxy.url("/gw/v1/sessions"),
    ] {
        let refused = register(&proxy, &session, &url).await;
        assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{url}");
        let body = refused.json().await;
        assert_eq!(body["error"], "registration_failed", "{url}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("refused by the route's callback policy"),
            "{url}: {body}"
        );
    }
    assert!(callback.received().is_empty());
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_when_called_and_nothing_is_sent() {
    let proxy = Proxy::start(cmdc_route()).await;
    let session = new_session(&proxy).await;
    let callback = callback_answering(ok_result()).await;
    let by_name = callback.url().replace("127.0.0.1", "localhost");
    let registered = register(&proxy, &session, &by_name).await;
    assert_eq!(
        registered.status,
        StatusCode::CREATED,
        "a name is checked when it is resolved"
    );

    let seen = call_lookup(&proxy, &session).await;

    let end = tool_end(&seen);
    assert_eq!(end["status"], "error");
    let result = end["result"].as_str().unwrap();
    assert!(
        result.contains("refused by the route's callback policy"),
        "{result}"
    );
    assert_eq!(names(&seen).last(), Some(&"agent_end"));
    assert!(callback.received().is_empty(), "no request reached it");
}

#[tokio::test]
async fn callback_allow_opens_loopback_for_local_development() {
    let proxy = Proxy::start(cmdc_route().callback_allow(&["127.0.0.1"])).await;
    let session = new_session(&proxy).await;
    let callback = callback_answering(ok_result()).await;
    assert_eq!(
        register(&proxy, &session, &callback.url()).await.status,
        StatusCode::CREATED
    );

    let seen = call_lookup(&proxy, &session).await;

    assert_eq!(tool_end(&seen)["status"], "ok");
    assert_eq!(tool_end(&seen)["result"], "found it");
    assert_eq!(callback.only_request().body["toolName"], "lookup");
    let own = register(&proxy, &session, &proxy.url("/gw/v1/sessions")).await;
    assert_eq!(
        own.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "the proxy's own address stays closed"
    );
}

#[tokio::test]
async fn a_foreign_answer_is_not_echoed_to_the_client() {
    for (reply, expected) in [
        (
            Reply::status(500).body("INTERNAL-PAGE root:x:0:0"),
            "HTTP 500",
        ),
        (
            Reply::status(200)
                .header("content-type", "text/html")
                .body("<html>INTERNAL-PAGE root:x:0:0</html>"),
            "neither",
        ),
    ] {
        let proxy = Proxy::start(cmdc_route().callback_allow(&["127.0.0.1"])).await;
        let session = new_session(&proxy).await;
        let callback = callback_answering(reply).await;
        register(&proxy, &session, &callback.url()).await;

        let seen = call_lookup(&proxy, &session).await;

        let end = tool_end(&seen);
        assert_eq!(end["status"], "error");
        assert!(end["result"].as_str().unwrap().contains(expected), "{end}");
        let everything = serde_json::to_string(&seen).unwrap();
        assert!(!everything.contains("INTERNAL-PAGE"), "{everything}");
    }
}

// --- Forged calls of the CMDC outbound's callback endpoint ------------------------------------------------

const OUTBOUND_PATH: &str = "/agents/pair";

#[tokio::test]
async fn forged_callbacks_are_refused_and_the_client_sees_nothing() {
    let gate = Gate::default();
    let held = gate.clone();
    let cmdc = Gateway::start(move |_, _| vec![gateway::wait(&held), gateway::end("done")]).await;
    let route = Route::new("pair", OUTBOUND_PATH, "ag-ui", "cmdc")
        .upstream(&cmdc.url())
        .upstream_headers(&[("X-API-Key", KEY)])
        .translate("model", "m");
    let proxy = Proxy::start(route).await;
    let mut input = ag_ui::input("thread-1", "run-1", json!([ag_ui::user("u1", "paint it")]));
    input["tools"] = json!([ag_ui::tool("change_background")]);
    let url = proxy.url(OUTBOUND_PATH);
    let client = tokio::spawn(async move { ag_ui::run(&url, &input).await });

    let registered = cmdc.wait_for_request("POST tools").await;
    let prompted = cmdc.wait_for_request("POST prompt").await;
    let session = prompted.path.split('/').nth(3).unwrap().to_owned();
    let callback_url = registered.body["callbackUrl"].as_str().unwrap().to_owned();
    let (endpoint, token) = callback_url.split_once("?token=").expect("a token");
    assert_eq!(token.len(), 32, "128 bits as hex");
    let forge = |url: String, tool: &str, session: &str| {
        let body = json!({"callId": "tc_forged", "toolName": tool,
                          "args": {"color": "red"}, "sessionId": session});
        let request = Request::builder()
            .method(Method::POST)
            .uri(url)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        send(request)
    };
    let wrong = format!("{:0>32}", "1");
    for (what, url, tool, session) in [
        (
            "no token",
            endpoint.to_owned(),
            "change_background",
            session.as_str(),
        ),
        (
            "a wrong token",
            format!("{endpoint}?token={wrong}"),
            "change_background",
            &session,
        ),
        (
            "a tool not registered",
            callback_url.clone(),
            "delete_everything",
            &session,
        ),
        (
            "another session",
            callback_url.clone(),
            "change_background",
            "other-session",
        ),
    ] {
        let refused = forge(url, tool, session).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{what}");
        assert!(refused.json().await["error"].is_string(), "{what}");
    }
    gate.open();

    let events = support::within("the client's run", client).await.unwrap();
    assert!(ag_ui::calls(&events).is_empty(), "{events:#?}");
    assert!(ag_ui::all(&events, "TOOL_CALL_START").is_empty());
}

// --- Browsers -------------------------------------------------------------------------------------------

fn from_origin(proxy: &Proxy, method: Method, path: &str, origin: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(proxy.url(&format!("/gw{path}")))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

#[tokio::test]
async fn without_cors_origins_a_cross_origin_page_gets_no_cors_headers() {
    let proxy = Proxy::start(cmdc_route()).await;
    let read = send(from_origin(
        &proxy,
        Method::GET,
        "/healthz",
        "https://evil.example",
    ))
    .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.header("access-control-allow-origin"), "");
    let preflight = send(from_origin(
        &proxy,
        Method::OPTIONS,
        "/v1/sessions",
        "https://evil.example",
    ))
    .await;
    assert_eq!(preflight.header("access-control-allow-origin"), "");
    assert_eq!(preflight.header("access-control-allow-methods"), "");
}

#[tokio::test]
async fn a_listed_origin_is_allowed_by_name_and_others_are_not() {
    let proxy = Proxy::start(cmdc_route().cors_origins(&["https://app.example"])).await;
    let listed = send(from_origin(
        &proxy,
        Method::GET,
        "/healthz",
        "https://app.example",
    ))
    .await;
    assert_eq!(
        listed.header("access-control-allow-origin"),
        "https://app.example"
    );
    assert_eq!(listed.header("vary"), "origin");
    let preflight = send(from_origin(
        &proxy,
        Method::OPTIONS,
        "/v1/sessions",
        "https://app.example",
    ))
    .await;
    assert_eq!(preflight.status, StatusCode::NO_CONTENT);
    assert_eq!(
        preflight.header("access-control-allow-origin"),
        "https://app.example"
    );
    assert!(preflight
        .header("access-control-allow-headers")
        .contains("content-type"));
    let other = send(from_origin(
        &proxy,
        Method::GET,
        "/healthz",
        "https://evil.example",
    ))
    .await;
    assert_eq!(other.header("access-control-allow-origin"), "");
}

#[tokio::test]
async fn cmdc_posts_must_be_json() {
    let proxy = Proxy::start(cmdc_route()).await;
    let body = r#"{"model":"m"}"#;
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let refused = call_as(&proxy, Method::POST, "/v1/sessions", content_type, body).await;
        assert_eq!(
            refused.status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type:?}"
        );
        assert_eq!(refused.json().await["error"], "unsupported_media_type");
    }
    let created = call_as(
        &proxy,
        Method::POST,
        "/v1/sessions",
        Some("application/json; charset=utf-8"),
        body,
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let session = created.json().await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let tool = r#"{"name":"t","callbackUrl":"http://127.0.0.1:9999/"}"#;
    let path = format!("/v1/sessions/{session}/tools");
    let refused = call_as(&proxy, Method::POST, &path, Some("text/plain"), tool).await;
    assert_eq!(refused.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let path = format!("/v1/sessions/{session}/abort");
    let empty = call_as(&proxy, Method::POST, &path, None, "").await;
    assert_eq!(
        empty.status,
        StatusCode::ACCEPTED,
        "an empty body needs no type"
    );
}

/// Opens the CMDC WebSocket of `session` as a page of `origin` would (`None`: a client that is no browser);
/// the handshake's status.
async fn websocket_from(proxy: &Proxy, session: &str, origin: Option<&str>) -> StatusCode {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Error as WsError;
    let url = format!("ws://{}/gw/v1/sessions/{session}/ws", proxy.addr());
    let mut request = url.into_client_request().unwrap();
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("origin", origin.parse().unwrap());
    }
    match support::within("the handshake", tokio_tungstenite::connect_async(request)).await {
        Ok((_, response)) => response.status(),
        Err(WsError::Http(response)) => response.status(),
        Err(other) => panic!("the handshake failed: {other}"),
    }
}

#[tokio::test]
async fn a_cmdc_websocket_is_opened_only_by_pages_of_listed_origins_or_the_proxys_own() {
    let proxy = Proxy::start(cmdc_route().cors_origins(&["https://app.example"])).await;
    let session = new_session(&proxy).await;
    assert_eq!(
        websocket_from(&proxy, &session, Some("https://evil.example")).await,
        StatusCode::FORBIDDEN
    );
    let own = format!("http://{}", proxy.addr());
    for origin in [None, Some("https://app.example"), Some(own.as_str())] {
        assert_eq!(
            websocket_from(&proxy, &session, origin).await,
            StatusCode::SWITCHING_PROTOCOLS,
            "{origin:?}"
        );
    }
}

// --- Secrets in errors --------------------------------------------------------------------------------------

/// Everything logged on this thread, at every level, until the guard drops. The subscriber is this thread's
/// default, not the process's: every test of the one test binary shares the process, and a global one would
/// take the others' logs (at TRACE) too. A `#[tokio::test]` runs on one thread, and so does an in-process
/// [`Proxy`] it starts: everything the proxy logs is captured.
fn captured_logs() -> (Arc<Mutex<Vec<u8>>>, tracing::subscriber::DefaultGuard) {
    let logs = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&logs);
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || LogWriter(Arc::clone(&sink)))
        .finish();
    (logs, tracing::subscriber::set_default(subscriber))
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn an_unreachable_upstreams_key_in_its_url_reaches_neither_client_nor_log() {
    let (logs, _logging) = captured_logs();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    std::env::set_var("AGENT_BRIDGE_SECURITY_TEST_KEY", "secret");
    let upstream =
        format!("http://127.0.0.1:{port}/run?api_key=${{AGENT_BRIDGE_SECURITY_TEST_KEY}}");
    let proxy =
        Proxy::start(Route::new("pair", "/agents/pair", "ag-ui", "ag-ui").upstream(&upstream))
            .await;
    let input = ag_ui::input("thread-1", "run-1", json!([ag_ui::user("u1", "hi")]));

    let events = ag_ui::run(&proxy.url("/agents/pair"), &input).await;

    let error = ag_ui::all(&events, "RUN_ERROR");
    let message = error[0]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("http://127.0.0.1:{port}/run")),
        "{message}"
    );
    assert!(!message.contains("secret"), "{message}");
    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(
        logged.contains("unreachable"),
        "the failure was logged: {logged}"
    );
    assert!(!logged.contains("secret"), "{logged}");
}

// --- Who may use a route: API keys, tenants, rate limits ----------------------------------------------------

/// Two tenants, and a second key of the first.
const KEYS: &[(&str, &str)] = &[("sk-a", "acme"), ("sk-a2", "acme"), ("sk-b", "globex")];

/// An echo route at `/r` served by `inbound`.
fn echo_route(inbound: &str) -> Route {
    Route::new("r", "/r", inbound, "echo")
}

/// `method /r<path>` with a JSON body (none when null) and `headers`.
async fn call_with(
    proxy: &Proxy,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Response {
    let mut request = Request::builder()
        .method(method)
        .uri(proxy.url(&format!("/r{path}")));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = if body.is_null() {
        Bytes::new()
    } else {
        request = request.header("content-type", "application/json");
        Bytes::from(body.to_string())
    };
    send(request.body(Full::new(body)).expect("a request")).await
}

/// What one inbound's client sends to do something, and how the inbound refuses a missing key.
struct Face {
    inbound: &'static str,
    path: &'static str,
    body: Value,
    /// The status of a request that was served.
    served: StatusCode,
    /// The whole 401 body, in the inbound's own shape.
    unauthorized: Value,
}

fn faces() -> Vec<Face> {
    let http_error =
        json!({"error": {"code": "UNAUTHORIZED", "message": "Missing or invalid API key"}});
    vec![
        Face {
            inbound: "ag-ui",
            path: "",
            body: json!({"threadId": "t1", "runId": "r1",
                         "messages": [{"id": "u1", "role": "user", "content": "hi"}]}),
            served: StatusCode::OK,
            unauthorized: http_error.clone(),
        },
        Face {
            inbound: "ag-kit",
            path: "/send-message",
            body: json!({"messages": [{"role": "user", "content": "hi"}], "conversationId": "c1"}),
            served: StatusCode::OK,
            unauthorized: http_error,
        },
        Face {
            inbound: "agentscope",
            path: "/process",
            body: json!({"input": [{"type": "message", "role": "user",
                                    "content": [{"type": "text", "text": "hi"}]}], "session_id": "s1"}),
            served: StatusCode::OK,
            unauthorized: json!({"detail": "Missing or invalid API key"}),
        },
        Face {
            inbound: "a2a",
            path: "",
            body: a2a_call("message/send", json!({"message": a2a_message("hi")})),
            served: StatusCode::OK,
            unauthorized: json!({"jsonrpc": "2.0", "id": null,
                                 "error": {"code": -32050, "message": "Missing or invalid API key"}}),
        },
        Face {
            inbound: "cmdc",
            path: "/v1/sessions",
            body: json!({"model": "m"}),
            served: StatusCode::CREATED,
            unauthorized: json!({"error": "unauthorized", "message": "Missing or invalid API key"}),
        },
    ]
}

fn a2a_message(text: &str) -> Value {
    json!({"kind": "message", "role": "user", "messageId": message_id(), "parts": [{"kind": "text", "text": text}]})
}

fn a2a_call(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": "1", "method": method, "params": params})
}

fn message_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("m{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

#[tokio::test]
async fn every_inbound_refuses_a_missing_or_wrong_key_in_its_own_shape_and_serves_a_right_one() {
    for face in faces() {
        let proxy = Proxy::start(echo_route(face.inbound).api_keys(KEYS)).await;
        let post = |headers: &'static [(&'static str, &'static str)]| {
            call_with(&proxy, Method::POST, face.path, headers, &face.body)
        };

        let missing = post(&[]).await;
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED, "{}", face.inbound);
        assert_eq!(
            missing.header("www-authenticate"),
            r#"Bearer realm="agent-bridge""#,
            "{}",
            face.inbound
        );
        assert_eq!(missing.json().await, face.unauthorized, "{}", face.inbound);

        let wrong = post(&[("x-api-key", "sk-guess")]).await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{}", face.inbound);
        assert_eq!(
            wrong.header("www-authenticate"),
            r#"Bearer realm="agent-bridge", error="invalid_token""#,
            "{}",
            face.inbound
        );
        assert_eq!(wrong.json().await, face.unauthorized, "{}", face.inbound);

        // The header name in any case (A2A's vendor spells it X-API-KEY), or a bearer token.
        for right in [
            &[("X-API-KEY", "sk-a")][..],
            &[("authorization", "Bearer sk-b")],
        ] {
            let served = call_with(&proxy, Method::POST, face.path, right, &face.body).await;
            assert_eq!(served.status, face.served, "{} {right:?}", face.inbound);
            let body = String::from_utf8_lossy(&served.bytes().await).into_owned();
            assert!(
                body.contains("hi") || face.inbound == "cmdc",
                "{}: the echo agent answered: {body}",
                face.inbound
            );
        }
    }
}

/// The `data:` payloads of an SSE answer, as text.
async fn data_frames(response: Response) -> Vec<String> {
    let mut stream = response.sse();
    let mut frames = Vec::new();
    while let Some(data) = stream.next_data().await {
        frames.push(data);
    }
    frames
}

#[tokio::test]
async fn an_ag_kit_conversation_id_of_one_tenant_does_not_reach_anothers_conversation() {
    let proxy = &Proxy::start(echo_route("ag-kit").api_keys(KEYS)).await;
    let as_tenant =
        |key: &'static str, body: Value| async move { ag_kit_send(proxy, key, &body).await };
    let asked = as_tenant(
        "sk-a",
        json!({"messages": [{"role": "user", "content": "/ask Which city?"}], "conversationId": "c1"}),
    )
    .await;
    let frames = data_frames(asked).await;
    let interrupt: Value = serde_json::from_str(&frames[0]).expect("an interrupt frame");
    assert_eq!(interrupt["type"], "interrupt", "{frames:?}");
    let interrupt_id = interrupt["id"].as_str().unwrap().to_owned();
    let resume = json!({"resume": {"interruptId": interrupt_id, "payload": "{\"response\":\"Paris\"}"},
                        "conversationId": "c1"});

    // Tenant B names A's conversation and interrupt: its conversation c1 waits on nothing.
    let stolen = as_tenant("sk-b", resume.clone()).await;
    assert_eq!(stolen.status, StatusCode::BAD_REQUEST);
    let refused = stolen.json().await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is not pending"),
        "{refused}"
    );

    // A's conversation still waits, and A's other key is the same tenant.
    let answered = data_frames(as_tenant("sk-a2", resume).await).await;
    let said: String = answered
        .iter()
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|frame| frame["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(said, "You answered: Paris", "{answered:?}");
}

#[tokio::test]
async fn an_a2a_task_of_one_tenant_is_not_found_by_another() {
    let proxy = &Proxy::start(echo_route("a2a").api_keys(KEYS)).await;
    let rpc = |key: &'static str, body: Value| async move {
        call_with(proxy, Method::POST, "", &[("x-api-key", key)], &body)
            .await
            .json()
            .await
    };
    let sent = rpc(
        "sk-a",
        a2a_call("message/send", json!({"message": a2a_message("hi")})),
    )
    .await;
    let task_id = sent["result"]["id"].as_str().expect("a task").to_owned();
    let context_id = sent["result"]["contextId"].as_str().unwrap().to_owned();

    let get = a2a_call("tasks/get", json!({"id": task_id}));
    assert_eq!(rpc("sk-b", get.clone()).await["error"]["code"], -32001);
    let cancel = a2a_call("tasks/cancel", json!({"id": task_id}));
    assert_eq!(rpc("sk-b", cancel).await["error"]["code"], -32001);
    // A client-chosen id that another tenant's task holds is not B's to take either.
    let mut taken = a2a_message("again");
    taken["taskId"] = json!(task_id);
    let reuse = rpc("sk-b", a2a_call("message/send", json!({"message": taken}))).await;
    assert_eq!(reuse["error"]["code"], -32001, "{reuse}");
    // B's message in A's context is a context of B's own.
    let mut same_context = a2a_message("mine");
    same_context["contextId"] = json!(context_id);
    let own = rpc(
        "sk-b",
        a2a_call("message/send", json!({"message": same_context})),
    )
    .await;
    assert_ne!(own["result"]["id"], json!(task_id));

    let mine = rpc("sk-a2", get).await;
    assert_eq!(mine["result"]["id"], json!(task_id));
    assert_eq!(mine["result"]["status"]["state"], "completed");
}

#[tokio::test]
async fn the_a2a_card_advertises_the_api_key_scheme_only_when_keys_are_set() {
    let open = Proxy::start(echo_route("a2a")).await;
    let keyed = Proxy::start(echo_route("a2a").api_keys(KEYS)).await;
    for card in ["agent.json", "agent-card.json"] {
        let path = format!("/.well-known/{card}");
        let plain = call_with(&open, Method::GET, &path, &[], &Value::Null).await;
        let plain = plain.json().await;
        assert_eq!(plain["security"], json!([]), "{card}");
        assert!(plain.get("securitySchemes").is_none(), "{card}");

        // Public without card_auth.
        let secured = call_with(&keyed, Method::GET, &path, &[], &Value::Null).await;
        assert_eq!(secured.status, StatusCode::OK);
        let secured = secured.json().await;
        assert_eq!(
            secured["securitySchemes"],
            json!({"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-KEY"}}),
            "{card}"
        );
        assert_eq!(secured["security"], json!([{"apiKey": []}]), "{card}");
    }
}

#[tokio::test]
async fn card_auth_makes_the_a2a_card_need_a_key() {
    let proxy = Proxy::start(echo_route("a2a").set("card_auth", true).api_keys(KEYS)).await;
    let card = "/.well-known/agent-card.json";
    let refused = call_with(&proxy, Method::GET, card, &[], &Value::Null).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(refused.header("www-authenticate").starts_with("Bearer"));
    assert_eq!(refused.json().await["error"]["code"], "UNAUTHORIZED");
    let shown = call_with(
        &proxy,
        Method::GET,
        card,
        &[("x-api-key", "sk-a")],
        &Value::Null,
    )
    .await;
    assert_eq!(shown.status, StatusCode::OK);
}

#[tokio::test]
async fn rotating_keys_on_an_open_route_does_not_escape_its_rate_limit() {
    let proxy = Proxy::start(echo_route("ag-ui").rate_limit(2)).await;
    let body = &faces()[0].body;
    for key in ["k1", "k2"] {
        let served = call_with(&proxy, Method::POST, "", &[("x-api-key", key)], body).await;
        assert_eq!(served.status, StatusCode::OK);
    }
    let limited = call_with(&proxy, Method::POST, "", &[("x-api-key", "k3")], body).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = limited.header("retry-after").parse().expect("Retry-After");
    assert!(retry >= 1);
    assert_eq!(limited.json().await["error"]["code"], "RATE_LIMITED");
}

#[tokio::test]
async fn a_wrong_key_flood_is_answered_429_once_over_rate_limit_ip() {
    let proxy = Proxy::start(echo_route("a2a").rate_limit_ip(5).api_keys(KEYS)).await;
    let body = a2a_call("message/send", json!({"message": a2a_message("hi")}));
    let mut statuses = Vec::new();
    for attempt in 0..40 {
        let key = format!("sk-guess-{attempt}");
        let request = Request::builder()
            .method(Method::POST)
            .uri(proxy.url("/r"))
            .header("content-type", "application/json")
            .header("x-api-key", key)
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let answer = send(request).await;
        statuses.push(answer.status.as_u16());
        if answer.status == StatusCode::TOO_MANY_REQUESTS {
            assert!(answer.header("retry-after").parse::<u64>().unwrap() >= 1);
            let error = answer.json().await;
            assert_eq!(error["error"]["code"], -32051, "{error}");
            assert_eq!(error["id"], Value::Null);
        }
    }
    assert_eq!(statuses[..5], [401; 5]);
    assert!(statuses[5..].iter().all(|&s| s == 429), "{statuses:?}");
    // A client with a right key is not held back by the guesses.
    let served = call_with(&proxy, Method::POST, "", &[("x-api-key", "sk-a")], &body).await;
    assert_eq!(served.status, StatusCode::OK);
    assert!(served.json().await["result"]["id"].is_string());
}

/// The next frame that answers an action (an ack or an error), skipping the run's events.
async fn action_reply(ws: &mut gateway::Ws) -> Value {
    loop {
        let frame = gateway::recv_ws(ws).await;
        if frame.get("event").is_none() {
            return frame;
        }
    }
}

#[tokio::test]
async fn the_rate_limit_counts_websocket_actions_and_refuses_those_over_it() {
    use futures_util::SinkExt;
    let proxy = Proxy::start(echo_route("cmdc").rate_limit(6).api_keys(KEYS)).await;
    // The session is made with the tenant's other key, whose budget is its own.
    let other_key = CmdcClient::new(proxy.url("/r")).with_key("sk-a2");
    let session = other_key.create(json!({"model": "m"})).await;
    // The handshake is the key's first request of the minute.
    let url = format!(
        "ws://{}/r/v1/sessions/{session}/ws?api_key=sk-a",
        proxy.addr()
    );
    let (mut ws, _) = support::within("the handshake", tokio_tungstenite::connect_async(url))
        .await
        .expect("the WebSocket connects");
    let prompt = json!({"action": "prompt", "text": "hi"}).to_string();
    for n in 1..=5 {
        ws.send(tokio_tungstenite::tungstenite::Message::text(
            prompt.clone(),
        ))
        .await
        .unwrap();
        assert_eq!(
            action_reply(&mut ws).await,
            json!({"ok": true, "action": "prompt"}),
            "prompt {n}"
        );
    }
    ws.send(tokio_tungstenite::tungstenite::Message::text(prompt))
        .await
        .unwrap();
    let refused = action_reply(&mut ws).await;
    assert_eq!(refused["error"], "rate_limited", "{refused}");
    assert!(refused["retryAfter"].as_u64().unwrap() >= 1);

    // Five prompts ran; the sixth never did.
    let user_messages = || async {
        let messages = other_key.messages(&session).await;
        let users = messages["messages"].as_array().unwrap().iter();
        users.filter(|m| m["role"] == "user").count()
    };
    support::within("the five runs", async {
        while user_messages().await < 5 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(user_messages().await, 5);
}

// --- Bearer tokens ([routes.jwt]) -----------------------------------------------------------------------------

const ISSUER: &str = "https://auth.test";
const AUDIENCE: &str = "agent-bridge";

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/jwt/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Claims good for an hour for tenant `org`, with `changes` applied (a null removes a claim).
fn claims(org: &str, changes: Value) -> Value {
    let mut claims = json!({"iss": ISSUER, "aud": [AUDIENCE, "other"], "sub": "user-1", "org": org,
                            "iat": now(), "exp": now() + 3600});
    for (name, value) in changes.as_object().unwrap() {
        if value.is_null() {
            claims.as_object_mut().unwrap().remove(name);
        } else {
            claims[name] = value.clone();
        }
    }
    claims
}

/// A token signed with the private key of fixture `key` (`rsa1`, `rsa2`, `ec1`) by `algorithm`, naming `kid`.
fn token(
    key: &str,
    algorithm: jsonwebtoken::Algorithm,
    kid: Option<&str>,
    claims: &Value,
) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let pem = fixture(&format!("{key}.key.pem"));
    let key = match algorithm {
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()).unwrap(),
        _ => EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap(),
    };
    let mut header = Header::new(algorithm);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

fn rs256(org: &str) -> String {
    token(
        "rsa1",
        jsonwebtoken::Algorithm::RS256,
        Some("rsa1"),
        &claims(org, json!({})),
    )
}

/// `[routes.jwt]` for [`ISSUER`]'s tokens to [`AUDIENCE`] signed with `algorithm`, the tenant in `org`; the
/// keys (`public_key`, `jwks_url`) are the caller's to set.
fn jwt(route: Route, algorithm: &str) -> Route {
    route
        .jwt("issuer", ISSUER)
        .jwt("audience", AUDIENCE)
        .jwt("algorithms", vec![algorithm])
        .jwt("tenant_claim", "org")
}

/// [`jwt`] with the public key of the fixture `name`.
fn jwt_with_pem(route: Route, algorithm: &str, name: &str) -> Route {
    jwt(route, algorithm).jwt("public_key", fixture(&format!("{name}.pub.pem")))
}

async fn bearer(proxy: &Proxy, face: &Face, token: &str) -> Response {
    let authorization = format!("Bearer {token}");
    call_with(
        proxy,
        Method::POST,
        face.path,
        &[("authorization", authorization.as_str())],
        &face.body,
    )
    .await
}

#[tokio::test]
async fn every_inbound_admits_a_valid_token_and_refuses_a_bad_one_in_its_own_shape() {
    use jsonwebtoken::Algorithm::{ES256, HS256, RS256};
    let rsa_public = fixture("rsa1.pub.pem");
    let hmac_with_public_key = {
        let header = jsonwebtoken::Header::new(HS256);
        let key = jsonwebtoken::EncodingKey::from_secret(rsa_public.as_bytes());
        jsonwebtoken::encode(&header, &claims("acme", json!({})), &key).unwrap()
    };
    let unsigned = {
        // `{"alg":"none","typ":"JWT"}`, a good token's claims, no signature.
        let payload = rs256("acme").split('.').nth(1).unwrap().to_owned();
        format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{payload}.")
    };
    let hostile = [
        (
            "expired",
            token(
                "rsa1",
                RS256,
                None,
                &claims("acme", json!({"exp": now() - 120})),
            ),
        ),
        (
            "not yet valid",
            token(
                "rsa1",
                RS256,
                None,
                &claims("acme", json!({"nbf": now() + 120})),
            ),
        ),
        (
            "without exp",
            token("rsa1", RS256, None, &claims("acme", json!({"exp": null}))),
        ),
        (
            "wrong audience",
            token(
                "rsa1",
                RS256,
                None,
                &claims("acme", json!({"aud": "someone-else"})),
            ),
        ),
        (
            "wrong issuer",
            token(
                "rsa1",
                RS256,
                None,
                &claims("acme", json!({"iss": "https://evil.test"})),
            ),
        ),
        (
            "wrong key",
            token("rsa2", RS256, None, &claims("acme", json!({}))),
        ),
        (
            "no tenant",
            token("rsa1", RS256, None, &claims("acme", json!({"org": null}))),
        ),
        ("alg none", unsigned),
        ("HS256 signed with the public key", hmac_with_public_key),
        (
            "an ES256 token",
            token("ec1", ES256, None, &claims("acme", json!({}))),
        ),
        ("garbage", "not.a.token".to_owned()),
    ];
    for face in faces() {
        let proxy = Proxy::start(jwt_with_pem(echo_route(face.inbound), "RS256", "rsa1")).await;
        for (what, token) in &hostile {
            let refused = bearer(&proxy, &face, token).await;
            assert_eq!(
                refused.status,
                StatusCode::UNAUTHORIZED,
                "{} {what}",
                face.inbound
            );
            assert_eq!(
                refused.header("www-authenticate"),
                r#"Bearer realm="agent-bridge", error="invalid_token""#,
                "{} {what}",
                face.inbound
            );
            assert_eq!(
                refused.json().await,
                face.unauthorized,
                "{} {what}",
                face.inbound
            );
        }
        // Within the 60 s leeway both ways.
        for fresh in [
            rs256("acme"),
            token(
                "rsa1",
                RS256,
                None,
                &claims("acme", json!({"exp": now() - 30, "nbf": now() + 30})),
            ),
        ] {
            let served = bearer(&proxy, &face, &fresh).await;
            assert_eq!(served.status, face.served, "{}", face.inbound);
        }
    }
}

#[tokio::test]
async fn an_es256_key_admits_its_tokens_and_api_keys_still_work_beside_jwt() {
    let face = &faces()[0];
    let route = jwt_with_pem(echo_route(face.inbound).api_keys(KEYS), "ES256", "ec1");
    let proxy = Proxy::start(route).await;
    let es256 = token(
        "ec1",
        jsonwebtoken::Algorithm::ES256,
        None,
        &claims("acme", json!({})),
    );
    assert_eq!(bearer(&proxy, face, &es256).await.status, StatusCode::OK);
    assert_eq!(bearer(&proxy, face, "sk-a").await.status, StatusCode::OK);
    assert_eq!(
        bearer(&proxy, face, &rs256("acme")).await.status,
        StatusCode::UNAUTHORIZED
    );
    let missing = call_with(&proxy, Method::POST, "", &[], &face.body).await;
    assert_eq!(
        missing.header("www-authenticate"),
        r#"Bearer realm="agent-bridge""#
    );
}

#[tokio::test]
async fn token_tenants_are_isolated_from_each_other() {
    let proxy = &Proxy::start(jwt_with_pem(echo_route("a2a"), "RS256", "rsa1")).await;
    let rpc = |org: &'static str, body: Value| async move {
        let authorization = format!("Bearer {}", rs256(org));
        call_with(
            proxy,
            Method::POST,
            "",
            &[("authorization", authorization.as_str())],
            &body,
        )
        .await
        .json()
        .await
    };
    let sent = rpc(
        "acme",
        a2a_call("message/send", json!({"message": a2a_message("hi")})),
    )
    .await;
    let task_id = sent["result"]["id"].as_str().expect("a task").to_owned();
    let get = a2a_call("tasks/get", json!({"id": task_id}));
    assert_eq!(rpc("globex", get.clone()).await["error"]["code"], -32001);
    assert_eq!(rpc("acme", get).await["result"]["id"], json!(task_id));
}

fn jwks(keys: &[&str]) -> Reply {
    let keys: Vec<Value> = keys
        .iter()
        .map(|name| serde_json::from_str(&fixture(&format!("{name}.jwk.json"))).unwrap())
        .collect();
    Reply::status(200)
        .header("content-type", "application/json")
        .body(&json!({ "keys": keys }).to_string())
}

#[tokio::test]
async fn jwks_keys_are_fetched_cached_and_refetched_for_a_new_kid() {
    use jsonwebtoken::Algorithm::RS256;
    // The provider rotates: rsa1 first, then rsa1 and rsa2.
    let provider = Upstream::serve([jwks(&["rsa1"]), jwks(&["rsa1", "rsa2"])]).await;
    let face = &faces()[0];
    let route = jwt(echo_route(face.inbound), "RS256")
        .jwt("jwks_url", provider.url())
        .jwt("jwks_refresh", "1ms");
    let proxy = Proxy::start(route).await;
    let signed_by = |key: &str| token(key, RS256, Some(key), &claims("acme", json!({})));

    for _ in 0..3 {
        assert_eq!(
            bearer(&proxy, face, &signed_by("rsa1")).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(provider.received().len(), 1, "the key set is cached");
    assert_eq!(
        bearer(&proxy, face, &signed_by("rsa2")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        provider.received().len(),
        2,
        "a new kid fetches the set again"
    );
    // A kid the provider does not have is refused, not trusted.
    let forged = token("rsa2", RS256, Some("rsa9"), &claims("acme", json!({})));
    assert_eq!(
        bearer(&proxy, face, &forged).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn unknown_kids_refetch_the_key_set_at_most_once_per_jwks_refresh() {
    let provider = Upstream::serve([jwks(&["rsa1"])]).await;
    let face = &faces()[0];
    let route = jwt(echo_route(face.inbound), "RS256").jwt("jwks_url", provider.url());
    let proxy = Proxy::start(route).await;
    for kid in ["a", "b", "c", "d"] {
        let forged = token(
            "rsa1",
            jsonwebtoken::Algorithm::RS256,
            Some(kid),
            &claims("acme", json!({})),
        );
        assert_eq!(
            bearer(&proxy, face, &forged).await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(provider.received().len(), 1);
}

#[tokio::test]
async fn an_unreachable_jwks_is_a_503_in_each_inbounds_shape_never_acceptance() {
    let refused = Upstream::refused_url().await;
    for face in faces() {
        let route = jwt(echo_route(face.inbound), "RS256").jwt("jwks_url", refused.as_str());
        let proxy = Proxy::start(route).await;
        let answer = bearer(&proxy, &face, &rs256("acme")).await;
        assert_eq!(
            answer.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            face.inbound
        );
        let body = answer.json().await;
        let shaped = match face.inbound {
            "a2a" => body["error"]["code"] == -32603 && body["id"].is_null(),
            "agentscope" => body["detail"].is_string(),
            "cmdc" => body["error"].is_string(),
            _ => body["error"]["code"] == "AUTH_UNAVAILABLE",
        };
        assert!(shaped, "{}: {body}", face.inbound);
    }
}

#[tokio::test]
async fn the_a2a_card_advertises_the_bearer_scheme_when_jwt_is_set() {
    let jwt = jwt_with_pem(echo_route("a2a"), "RS256", "rsa1");
    let bearer_only = Proxy::start(jwt.clone()).await;
    let both = Proxy::start(jwt.api_keys(KEYS)).await;
    let card = |proxy| async move {
        call_with(
            proxy,
            Method::GET,
            "/.well-known/agent-card.json",
            &[],
            &Value::Null,
        )
        .await
        .json()
        .await
    };
    let bearer_scheme = json!({"type": "http", "scheme": "bearer", "bearerFormat": "JWT"});
    let only = card(&bearer_only).await;
    assert_eq!(only["securitySchemes"], json!({ "bearer": bearer_scheme }));
    assert_eq!(only["security"], json!([{"bearer": []}]));
    let either = card(&both).await;
    assert_eq!(either["securitySchemes"]["bearer"], bearer_scheme);
    assert_eq!(either["security"], json!([{"apiKey": []}, {"bearer": []}]));
}

// --- Forwarded headers (trusted_proxies) ----------------------------------------------------------------------

/// `route` behind `trusted_proxies = [proxy]`.
fn behind(proxy: &str, route: Route) -> Routes {
    Routes::default()
        .set("trusted_proxies", vec![proxy])
        .route(route)
}

#[tokio::test]
async fn forwarded_headers_steer_the_card_url_only_from_a_trusted_proxy() {
    let forged = [
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "evil.example"),
    ];
    let untrusted = Proxy::start(echo_route("a2a")).await;
    let card = "/.well-known/agent.json";
    let url = call_with(&untrusted, Method::GET, card, &forged, &Value::Null)
        .await
        .json()
        .await["url"]
        .clone();
    assert_eq!(url, json!(untrusted.url("/r")));
    let rfc = [("forwarded", "proto=https;host=evil.example")];
    let url = call_with(&untrusted, Method::GET, card, &rfc, &Value::Null)
        .await
        .json()
        .await["url"]
        .clone();
    assert_eq!(url, json!(untrusted.url("/r")));

    let trusted = Proxy::start(behind("127.0.0.0/8", echo_route("a2a"))).await;
    let url = call_with(&trusted, Method::GET, card, &forged, &Value::Null)
        .await
        .json()
        .await["url"]
        .clone();
    assert_eq!(url, json!("https://evil.example/r"));
}

#[tokio::test]
async fn rate_limits_count_the_forwarded_client_only_behind_a_trusted_proxy() {
    let body = &faces()[0].body;
    let from = |client: &'static str| [("x-forwarded-for", client)];
    // Untrusted: a forged X-Forwarded-For buys no fresh budget.
    let untrusted = Proxy::start(echo_route("ag-ui").rate_limit(1)).await;
    let first = call_with(&untrusted, Method::POST, "", &from("192.0.2.1"), body).await;
    assert_eq!(first.status, StatusCode::OK);
    let second = call_with(&untrusted, Method::POST, "", &from("192.0.2.2"), body).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);

    // Trusted: each forwarded client has a budget of its own, and a client cannot pose as another by
    // prepending addresses (the right-most untrusted one counts).
    let trusted = Proxy::start(behind("127.0.0.1", echo_route("ag-ui").rate_limit(1))).await;
    for client in ["192.0.2.1", "192.0.2.2"] {
        let served = call_with(&trusted, Method::POST, "", &from(client), body).await;
        assert_eq!(served.status, StatusCode::OK, "{client}");
    }
    let again = call_with(
        &trusted,
        Method::POST,
        "",
        &from("192.0.2.3, 192.0.2.1"),
        body,
    )
    .await;
    assert_eq!(again.status, StatusCode::TOO_MANY_REQUESTS);
}

// --- Quotas per tenant ([routes.quota]) -----------------------------------------------------------------------

#[tokio::test]
async fn a_tenant_over_its_session_quota_gets_cmdcs_too_many_sessions_and_others_do_not() {
    let proxy = Proxy::start(echo_route("cmdc").api_keys(KEYS).quota("sessions", 2)).await;
    let client = CmdcClient::new(proxy.url("/r"));
    let create = |key: &'static str, id: &'static str| {
        let body = json!({"model": "m", "sessionId": id});
        let client = client.with_key(key);
        async move { client.call(Method::POST, "/v1/sessions", Some(body)).await }
    };
    for id in ["a1", "a2"] {
        assert_eq!(create("sk-a", id).await.status, StatusCode::CREATED, "{id}");
    }
    // Another key of the same tenant counts against the same quota.
    let over = create("sk-a2", "a3").await;
    assert_eq!(over.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        over.json().await,
        json!({"error": "create_failed", "message": ":too_many_sessions"})
    );
    assert_eq!(create("sk-b", "b1").await.status, StatusCode::CREATED);

    let closed = client
        .with_key("sk-a")
        .call(Method::DELETE, "/v1/sessions/a1", None)
        .await;
    assert!(closed.status.is_success(), "{}", closed.status);
    assert_eq!(create("sk-a", "a3").await.status, StatusCode::CREATED);
}

/// A send-message request of the tenant of `key` to the AG-Kit route.
async fn ag_kit_send(proxy: &Proxy, key: &str, body: &Value) -> Response {
    call_with(
        proxy,
        Method::POST,
        "/send-message",
        &[("x-api-key", key)],
        body,
    )
    .await
}

/// `text` said in AG-Kit conversation `conversation` as the tenant of `key`.
async fn ag_kit_say(proxy: &Proxy, key: &str, conversation: &str, text: &str) -> Response {
    let body =
        json!({"messages": [{"role": "user", "content": text}], "conversationId": conversation});
    ag_kit_send(proxy, key, &body).await
}

/// A refusal as "too many": 429, `Retry-After`, the message naming the quota.
async fn assert_too_many(refused: Response, what: &str) {
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{what}");
    assert!(!refused.header("retry-after").is_empty(), "{what}");
    let body = refused.json().await;
    assert_eq!(body["error"]["code"], "RATE_LIMITED", "{what}: {body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("quota"),
        "{what}: {body}"
    );
}

/// Answers the pause of AG-Kit conversation `conversation` (whose interrupt frame is `asked`) with `answer`;
/// what the agent said back.
async fn ag_kit_answer(
    proxy: &Proxy,
    conversation: &str,
    asked: &[String],
    answer: &str,
) -> String {
    let interrupt: Value = serde_json::from_str(&asked[0]).expect("an interrupt frame");
    let body = json!({"resume": {"interruptId": interrupt["id"], "payload": json!({"response": answer}).to_string()},
                      "conversationId": conversation});
    data_frames(ag_kit_send(proxy, "sk-a", &body).await)
        .await
        .iter()
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|frame| frame["content"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_tenant_at_its_conversation_quota_makes_room_among_its_own_idle_ones_else_is_refused() {
    let proxy = &Proxy::start(
        echo_route("ag-kit")
            .api_keys(KEYS)
            .quota("conversations", 2),
    )
    .await;
    let mut asked = Vec::new();
    for conversation in ["paused-1", "paused-2"] {
        let frames =
            data_frames(ag_kit_say(proxy, "sk-a", conversation, "/ask Which city?").await).await;
        assert!(frames[0].contains("\"interrupt\""), "{frames:?}");
        asked.push(frames);
    }
    // Both of acme's conversations wait on their user: a third is refused, to either of its keys.
    for key in ["sk-a", "sk-a2"] {
        assert_too_many(ag_kit_say(proxy, key, "third", "hi").await, key).await;
    }
    // Another tenant's quota is its own, and its idle conversations make room for its new ones.
    for conversation in ["b-1", "b-2", "b-3"] {
        let said = ag_kit_say(proxy, "sk-b", conversation, "hi").await;
        assert_eq!(said.status, StatusCode::OK, "{conversation}");
        said.bytes().await;
    }
    // Answered, the first waits on nobody: it makes room, and the paused second is kept.
    assert_eq!(
        ag_kit_answer(proxy, "paused-1", &asked[0], "Paris").await,
        "You answered: Paris"
    );
    let third = ag_kit_say(proxy, "sk-a", "third", "hi").await;
    assert_eq!(third.status, StatusCode::OK);
    third.bytes().await;
    assert_eq!(
        ag_kit_answer(proxy, "paused-2", &asked[1], "Lyon").await,
        "You answered: Lyon"
    );
}

#[tokio::test]
async fn a_tenant_at_its_stream_quota_is_refused_until_one_of_its_runs_ends() {
    let agent = Reply::sse()
        .events([ag_ui::started()])
        .events(ag_ui::text("m1", &["slow"]))
        .gate()
        .event(ag_ui::finished())
        .serve()
        .await;
    let route = Route::new("r", "/r", "ag-kit", "ag-ui")
        .upstream(&agent.url())
        .api_keys(KEYS)
        .quota("streams", 1);
    let proxy = &Proxy::start(route).await;
    let first = ag_kit_say(proxy, "sk-a", "c1", "hi").await;
    assert_eq!(first.status, StatusCode::OK);
    let mut first = first.sse();
    assert!(first.next_data().await.unwrap().contains("slow"));

    assert_too_many(ag_kit_say(proxy, "sk-a2", "c2", "hi").await, "a second run").await;
    let other = ag_kit_say(proxy, "sk-b", "c1", "hi").await;
    assert_eq!(other.status, StatusCode::OK, "another tenant streams");

    agent.release();
    while first.next_data().await.is_some() {}
    other.bytes().await;
    let after = ag_kit_say(proxy, "sk-a", "c2", "hi").await;
    assert_eq!(after.status, StatusCode::OK, "the first run ended");
    after.bytes().await;
}

// --- Ids reused across tenants ------------------------------------------------------------------------------

#[tokio::test]
async fn an_ag_ui_thread_or_agentscope_session_of_one_tenant_is_not_anothers() {
    let agent = Reply::sse()
        .event(json!({"type": "text", "content": "ok"}))
        .frame("data: [DONE]\n\n")
        .serve()
        .await;
    let faces = [
        (
            "ag-ui",
            "",
            json!({"threadId": "same-id", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "secret of acme"}]}),
            json!({"threadId": "same-id", "runId": "r2", "messages": [{"id": "u9", "role": "user", "content": "hello from globex"}]}),
        ),
        (
            "agentscope",
            "/process",
            json!({"input": [{"type": "message", "role": "user", "content": [{"type": "text", "text": "secret of acme"}]}],
                   "session_id": "same-id", "user_id": "u"}),
            json!({"input": [{"type": "message", "role": "user", "content": [{"type": "text", "text": "hello from globex"}]}],
                   "session_id": "same-id", "user_id": "u"}),
        ),
    ];
    for (inbound, path, acme, globex) in faces {
        let route = Route::new("r", "/r", inbound, "ag-kit")
            .upstream(&agent.url())
            .api_keys(KEYS);
        let proxy = Proxy::start(route).await;
        let before = agent.received().len();
        for (key, body) in [("sk-a", &acme), ("sk-b", &globex)] {
            let said = call_with(&proxy, Method::POST, path, &[("x-api-key", key)], body).await;
            assert_eq!(said.status, StatusCode::OK, "{inbound} {key}");
            said.bytes().await;
        }
        let received = agent.received();
        let [acme_sent, globex_sent] = &received[before..] else {
            panic!(
                "{inbound}: two requests upstream, not {:?}",
                &received[before..]
            );
        };
        assert_ne!(
            acme_sent.body["conversationId"], globex_sent.body["conversationId"],
            "{inbound}: one upstream conversation for two tenants"
        );
        assert!(
            !globex_sent.body.to_string().contains("secret of acme"),
            "{inbound}: {}",
            globex_sent.body
        );
    }
}
