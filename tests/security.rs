//! A hostile client against the proxy, over real sockets: request forgery through CMDC callback tools, forged
//! calls of the CMDC outbound's callback endpoint, cross-origin browsers, and secrets in error messages.
//!
//! Every target here is on 127.0.0.0/8: addresses elsewhere (169.254.169.254, 10.x, ...) are only ever handed
//! to the proxy to be refused by its policy before any socket opens (src/egress.rs has the unit tests that
//! prove it with an injected resolver); this machine never sends them traffic.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};
use support::cmdc::{self as gateway, all, names, Gate, Gateway, KEY};
use support::{ag_ui, send, Proxy, Reply, Response, Upstream};

// --- A CMDC client --------------------------------------------------------------------------------------------

/// An open CMDC echo gateway at `/gw`, with `extra` route keys.
async fn cmdc_gateway(extra: &str) -> Proxy {
    Proxy::start(&format!(
        "[[routes]]\nname = \"cmdc\"\npath = \"/gw\"\ninbound = \"cmdc\"\noutbound = \"echo\"\n{extra}"
    ))
    .await
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

async fn post(proxy: &Proxy, path: &str, body: Value) -> Response {
    call_as(
        proxy,
        Method::POST,
        path,
        Some("application/json"),
        &body.to_string(),
    )
    .await
}

async fn new_session(proxy: &Proxy) -> String {
    let created = post(proxy, "/v1/sessions", json!({"model": "m"})).await;
    assert_eq!(created.status, StatusCode::CREATED);
    created.json().await["sessionId"]
        .as_str()
        .expect("a sessionId")
        .to_owned()
}

async fn register(proxy: &Proxy, session: &str, callback_url: &str) -> Response {
    post(
        proxy,
        &format!("/v1/sessions/{session}/tools"),
        json!({"name": "lookup", "callbackUrl": callback_url}),
    )
    .await
}

/// Prompts the echo agent to call `lookup` and returns the run's events.
async fn call_lookup(proxy: &Proxy, session: &str) -> Vec<(String, Value)> {
    let prompted = post(
        proxy,
        &format!("/v1/sessions/{session}/prompt"),
        json!({"text": "/tool lookup {\"q\":\"x\"}"}),
    )
    .await;
    assert_eq!(prompted.status, StatusCode::ACCEPTED);
    let events = call_as(
        proxy,
        Method::GET,
        &format!("/v1/sessions/{session}/events"),
        None,
        "",
    )
    .await;
    all(&mut events.sse()).await
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
    let proxy = cmdc_gateway("").await;
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
    let proxy = cmdc_gateway("").await;
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
    let proxy = cmdc_gateway("callback_allow = [\"127.0.0.1\"]\n").await;
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
        let proxy = cmdc_gateway("callback_allow = [\"127.0.0.1\"]\n").await;
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
    let proxy = Proxy::start(&format!(
        "[[routes]]\nname = \"pair\"\npath = \"{OUTBOUND_PATH}\"\ninbound = \"ag-ui\"\noutbound = \"cmdc\"\n\
         upstream = \"{}\"\n[routes.upstream_headers]\nX-API-Key = \"{KEY}\"\n\
         [routes.translate]\nmodel = \"m\"\n",
        cmdc.url()
    ))
    .await;
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
    let proxy = cmdc_gateway("").await;
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
    let proxy = cmdc_gateway("cors_origins = [\"https://app.example\"]\n").await;
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
    let proxy = cmdc_gateway("").await;
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

// --- Secrets in errors --------------------------------------------------------------------------------------

/// Everything the proxy logged in this test binary, at every level.
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    Arc::clone(LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&logs);
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || LogWriter(Arc::clone(&sink)))
            .init();
        logs
    }))
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
    let logs = captured_logs();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    std::env::set_var("AGENT_BRIDGE_SECURITY_TEST_KEY", "secret");
    let proxy = Proxy::start(&format!(
        "[[routes]]\nname = \"pair\"\npath = \"/agents/pair\"\ninbound = \"ag-ui\"\noutbound = \"ag-ui\"\n\
         upstream = \"http://127.0.0.1:{port}/run?api_key=${{AGENT_BRIDGE_SECURITY_TEST_KEY}}\"\n"
    ))
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
