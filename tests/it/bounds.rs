//! What a client cannot hold forever: a connection that sends too little (`header_read_timeout`), an idle
//! connection (`keepalive_idle`), a request head beyond 32 KiB, a request body that never comes
//! (`body_timeout`), more connections than `max_connections`, a stream it stops reading over HTTP/1.1 or
//! HTTP/2 (the proxy stops reading the agent), a CMDC WebSocket that is silent (`ws_idle`) or sends too
//! much (`max_body`); and the binary under a full file table and on SIGHUP.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::support::ag_ui::{finished, input, started, text, user};
use crate::support::agentscope;
use crate::support::binary::{agent_bridge, AgentBridge, TempConfig};
use crate::support::{within, within_for, CmdcClient, Proxy, Reply, Route, Routes};

/// Longer than any bound these tests set (1 s), with room for a busy machine.
const CLOSED_WITHIN: Duration = Duration::from_secs(5);

/// Echo routes at `/ag-ui` and `/a2a` that wait 1 s for a request body.
fn echo_routes() -> Routes {
    ["ag-ui", "a2a"]
        .into_iter()
        .fold(Routes::default(), |routes, face| {
            routes.route(Route::new(face, &format!("/{face}"), face, "echo").body_timeout("1s"))
        })
}

/// Reads whatever the proxy sends until it closes the connection (an end or a reset); fails the test if it
/// is still open after [`CLOSED_WITHIN`].
async fn closed_by_the_proxy(stream: &mut TcpStream) -> Vec<u8> {
    within_for(CLOSED_WITHIN, "the proxy to close the connection", async {
        let mut received = Vec::new();
        let mut buf = [0; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return received,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
}

/// Reads one HTTP/1.1 response with a `Content-Length` body: its status, and its body as JSON.
async fn read_response(stream: &mut TcpStream) -> (u16, Value) {
    let (head, body) = within_for(CLOSED_WITHIN, "a response", read_message(stream)).await;
    assert!(
        content_length(&head).is_some(),
        "a Content-Length in {head}"
    );
    let status = head[9..12].parse().expect("a status code");
    let json = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("the body is not JSON ({e}): {body}"));
    (status, json)
}

/// Reads one HTTP/1.1 message: its head, and its `Content-Length` body (none without one).
async fn read_message(stream: &mut TcpStream) -> (String, String) {
    let mut received = Vec::new();
    let mut buf = [0; 4096];
    loop {
        let n = stream.read(&mut buf).await.expect("reading a message");
        assert!(n > 0, "closed before a whole message: {received:?}");
        received.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&received);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let length = content_length(head).unwrap_or(0);
        if body.len() >= length {
            return (head.to_owned(), body[..length].to_owned());
        }
    }
}

/// The `Content-Length` of a message's head.
fn content_length(head: &str) -> Option<usize> {
    head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}

/// An HTTP/1.1 connection of its own, kept alive between requests.
async fn connection(proxy: &Proxy) -> (SendRequest<Full<Bytes>>, tokio::task::JoinHandle<()>) {
    let stream = TcpStream::connect(proxy.addr()).await.expect("connect");
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("the HTTP/1.1 handshake");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    (sender, driver)
}

async fn healthz(sender: &mut SendRequest<Full<Bytes>>) -> StatusCode {
    within("the connection to take a request", sender.ready())
        .await
        .expect("the connection is still open");
    let request = Request::get("/healthz")
        .header("host", "proxy")
        .body(Full::default())
        .expect("a request");
    let response = within("GET /healthz", sender.send_request(request))
        .await
        .expect("an answer to GET /healthz");
    let status = response.status();
    within("the /healthz body", response.into_body().collect())
        .await
        .expect("the /healthz body");
    status
}

/// `GET /healthz` on a fresh connection: the status, or `None` if it failed or took longer than `limit`.
async fn healthz_at(address: &str, limit: Duration) -> Option<u16> {
    let exchange = async {
        let mut stream = TcpStream::connect(address).await.ok()?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: proxy\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        String::from_utf8_lossy(&answer).get(9..12)?.parse().ok()
    };
    tokio::time::timeout(limit, exchange).await.ok().flatten()
}

#[tokio::test]
async fn a_connection_that_sends_one_byte_is_closed_after_header_read_timeout() {
    let proxy = Proxy::start("header_read_timeout = \"1s\"\n").await;
    let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");

    stream.write_all(b"G").await.expect("one byte");

    closed_by_the_proxy(&mut stream).await;
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_header_read_timeout() {
    let proxy = Proxy::start("header_read_timeout = \"1s\"\n").await;
    let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");

    closed_by_the_proxy(&mut stream).await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_keepalive_idle() {
    // The header timeout is longer: what closes the connection is keepalive_idle.
    let proxy = Proxy::start("header_read_timeout = \"30s\"\nkeepalive_idle = \"1s\"\n").await;
    let (mut sender, driver) = connection(&proxy).await;

    assert_eq!(healthz(&mut sender).await, StatusCode::OK);

    within_for(CLOSED_WITHIN, "the idle connection to be closed", driver)
        .await
        .expect("the connection's driver");
}

#[tokio::test]
async fn a_bare_http2_preface_is_closed() {
    let proxy = Proxy::start("header_read_timeout = \"30s\"\nkeepalive_idle = \"1s\"\n").await;
    let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");

    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .expect("the preface");

    closed_by_the_proxy(&mut stream).await;
}

#[tokio::test]
async fn a_request_head_beyond_32_kib_is_refused_with_431_and_one_within_is_served() {
    let proxy = Proxy::start("").await;
    let status = |cookie: usize| {
        let address = proxy.addr();
        async move {
            let mut stream = TcpStream::connect(address).await.expect("connect");
            let request = format!(
                "GET /healthz HTTP/1.1\r\nhost: proxy\r\ncookie: {}\r\nconnection: close\r\n\r\n",
                "c".repeat(cookie)
            );
            // The proxy may answer before it read the whole head: what it sent is all that counts.
            let _ = stream.write_all(request.as_bytes()).await;
            let answer = closed_by_the_proxy(&mut stream).await;
            String::from_utf8_lossy(&answer)
                .get(9..12)
                .map(str::to_owned)
        }
    };

    assert_eq!(status(40 * 1024).await.as_deref(), Some("431"));
    assert_eq!(status(30 * 1024).await.as_deref(), Some("200"));
}

/// Sends a POST's headers announcing a body, and no body.
async fn headers_without_a_body(proxy: &Proxy, path: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n\
         content-length: 100\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("the head");
    read_response(&mut stream).await
}

#[tokio::test]
async fn ag_ui_body_that_never_arrives_is_refused_with_408_after_body_timeout() {
    let proxy = Proxy::start(echo_routes()).await;

    let (status, body) = headers_without_a_body(&proxy, "/ag-ui").await;

    assert_eq!(status, 408);
    assert_eq!(body["error"]["code"], "REQUEST_TIMEOUT", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not arrive within 1s"), "{body}");
}

#[tokio::test]
async fn a2a_body_that_never_arrives_is_refused_with_408_as_a_json_rpc_error() {
    let proxy = Proxy::start(echo_routes()).await;

    let (status, body) = headers_without_a_body(&proxy, "/a2a").await;

    assert_eq!(status, 408);
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["id"], Value::Null, "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not arrive within 1s"), "{body}");
}

#[tokio::test]
async fn a_stream_that_keeps_writing_outlives_keepalive_idle_and_keeps_its_connection() {
    // Ten deltas 300 ms apart: three times keepalive_idle in all, never quiet for as long.
    let mut reply = Reply::sse().event(started());
    for delta in text(
        "m1",
        &["0 ", "1 ", "2 ", "3 ", "4 ", "5 ", "6 ", "7 ", "8 ", "9"],
    ) {
        reply = reply.delay(300).event(delta);
    }
    let upstream = reply.event(finished()).serve().await;
    let routes = Routes::default()
        .set("keepalive_idle", "1s")
        .route(Route::new("pair", "/pair", "ag-ui", "ag-ui").upstream(&upstream.url()));
    let proxy = Proxy::start(routes).await;
    let (mut sender, _driver) = connection(&proxy).await;

    let run = input("t1", "r1", json!([user("u1", "count")]));
    let request = Request::builder()
        .method(Method::POST)
        .uri("/pair")
        .header("host", "proxy")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(run.to_string())))
        .expect("a request");
    let response = within("the run's head", sender.send_request(request))
        .await
        .expect("the run's response");
    assert_eq!(response.status(), StatusCode::OK);
    let body = within("the whole run", response.into_body().collect())
        .await
        .expect("the whole run")
        .to_bytes();

    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains("\"delta\":\"9\""),
        "every delta arrived: {body}"
    );
    assert!(body.contains("RUN_FINISHED"), "{body}");
    // Asked to close, the connection would have ended with the response.
    assert_eq!(healthz(&mut sender).await, StatusCode::OK);
}

#[tokio::test]
async fn beyond_max_connections_a_connection_gets_503_until_one_closes() {
    let proxy = Proxy::start("max_connections = 2\n").await;
    let (mut first, _first_driver) = connection(&proxy).await;
    let (mut second, _second_driver) = connection(&proxy).await;
    assert_eq!(healthz(&mut first).await, StatusCode::OK);
    assert_eq!(healthz(&mut second).await, StatusCode::OK);

    let mut third = TcpStream::connect(proxy.addr()).await.expect("connect");
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: proxy\r\n\r\n")
        .await
        .expect("the request");
    let (status, body) = read_response(&mut third).await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "TOO_MANY_CONNECTIONS", "{body}");
    closed_by_the_proxy(&mut third).await;

    drop(first);
    let address = proxy.addr().to_string();
    within("a place to free up", async {
        while healthz_at(&address, CLOSED_WITHIN).await != Some(200) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

// --- CMDC WebSocket ---------------------------------------------------------------------------------------

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A CMDC echo route as `configure` makes it, a session on it, and a WebSocket to that session.
async fn cmdc_socket(configure: impl FnOnce(Route) -> Route) -> (Proxy, Ws) {
    let proxy = Proxy::start(configure(Route::new("gw", "/gw", "cmdc", "echo"))).await;
    let session = CmdcClient::new(proxy.url("/gw"))
        .create(json!({"model": "echo"}))
        .await;
    let url = format!("ws://{}/gw/v1/sessions/{session}/ws", proxy.addr());
    let (ws, _) = within(
        "the WebSocket handshake",
        tokio_tungstenite::connect_async(url),
    )
    .await
    .expect("the WebSocket connects");
    (proxy, ws)
}

/// The close code the proxy sent, once it closed the socket (`None` if it closed without one).
async fn close_code(ws: &mut Ws) -> Option<CloseCode> {
    within_for(CLOSED_WITHIN, "the proxy to close the WebSocket", async {
        loop {
            match ws.next().await {
                Some(Ok(WsMessage::Close(frame))) => return frame.map(|frame| frame.code),
                Some(Ok(_)) => continue,
                None | Some(Err(_)) => return None,
            }
        }
    })
    .await
}

#[tokio::test]
async fn cmdc_websocket_message_larger_than_max_body_closes_it_with_1009() {
    let (_proxy, mut ws) = cmdc_socket(|route| route.max_body("1KiB")).await;

    let prompt = json!({"action": "prompt", "text": "x".repeat(4096)});
    let _ = ws.send(WsMessage::text(prompt.to_string())).await;

    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Size));
}

#[tokio::test]
async fn cmdc_websocket_message_within_max_body_is_acked() {
    let (_proxy, mut ws) = cmdc_socket(|route| route.max_body("1KiB")).await;

    let prompt = json!({"action": "prompt", "text": "x".repeat(512)});
    ws.send(WsMessage::text(prompt.to_string()))
        .await
        .expect("sent");

    let ack = within("the ack", ws.next()).await;
    let Some(Ok(WsMessage::Text(ack))) = ack else {
        panic!("expected the ack, got {ack:?}");
    };
    let ack: Value = serde_json::from_str(ack.as_str()).expect("a JSON ack");
    assert_eq!(ack, json!({"ok": true, "action": "prompt"}));
}

#[tokio::test]
async fn cmdc_websocket_silent_for_ws_idle_is_closed() {
    let (_proxy, mut ws) = cmdc_socket(|route| route.ws_idle("1s")).await;

    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Normal));
}

// --- the binary -------------------------------------------------------------------------------------------

/// `agent-bridge` with `routes` (a routes file's text) on one serving thread, its files limited to `files`.
#[cfg(unix)]
fn start_binary(routes: &str, files: Option<libc::rlim_t>) -> (AgentBridge, TempConfig) {
    use std::os::unix::process::CommandExt;

    let config = TempConfig::new("bounds", routes);
    let mut command = agent_bridge();
    command
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--threads", "1", "--config"])
        .arg(&config.0);
    if let Some(files) = files {
        let limit = libc::rlimit {
            rlim_cur: files,
            rlim_max: files,
        };
        // SAFETY: setrlimit(2) is async-signal-safe, and `limit` is a plain value copied into the child.
        unsafe {
            command.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
    (AgentBridge::start(command), config)
}

#[cfg(unix)]
#[tokio::test]
async fn with_the_file_table_full_healthz_waits_then_answers_once_idle_connections_time_out() {
    let (process, _config) = start_binary("header_read_timeout = \"1s\"\n", Some(64));
    let address = process.address.clone();
    assert_eq!(healthz_at(&address, CLOSED_WITHIN).await, Some(200));

    // Twice as many one-byte connections as the process can hold files.
    let mut attackers = Vec::new();
    for _ in 0..128 {
        let mut stream = TcpStream::connect(&address).await.expect("connect");
        stream.write_all(b"G").await.expect("one byte");
        attackers.push(stream);
    }

    assert_eq!(
        healthz_at(&address, Duration::from_millis(300)).await,
        None,
        "no answer while the one-byte connections hold every file"
    );
    within("/healthz to answer again", async {
        while healthz_at(&address, Duration::from_secs(1)).await != Some(200) {}
    })
    .await;
    let log = process.log();
    let warnings = log.matches("accept failed").count();
    assert!(
        (1..=3).contains(&warnings),
        "the file table filled up, and was reported in a line or so, not one per failure: \
         {warnings} lines\n{log}"
    );
    drop(attackers);
}

// --- a client that stops reading --------------------------------------------------------------------------

/// An agent (AG-UI) that streams 1 KB text deltas for as long as its connection takes them, and counts the
/// bytes it wrote. Its answer has no length: it ends when the connection does.
struct EndlessAgent {
    url: String,
    written: Arc<AtomicUsize>,
    streaming: tokio::task::JoinHandle<()>,
}

impl EndlessAgent {
    async fn serve() -> EndlessAgent {
        let socket = TcpSocket::new_v4().expect("a socket");
        socket
            .set_send_buffer_size(SOCKET_BUFFER)
            .expect("SO_SNDBUF");
        socket
            .bind("127.0.0.1:0".parse().expect("an address"))
            .expect("bind");
        let listener = socket.listen(1).expect("listen");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let written = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&written);
        let streaming = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("the proxy's connection");
            read_message(&mut stream).await;
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            let opening = [
                started(),
                json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
            ];
            let delta = json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "x".repeat(1000)});
            let frames = opening.iter().map(|event| format!("data: {event}\n\n"));
            let opening: String = std::iter::once(head.to_owned()).chain(frames).collect();
            let delta = format!("data: {delta}\n\n");
            if stream.write_all(opening.as_bytes()).await.is_err() {
                return;
            }
            while stream.write_all(delta.as_bytes()).await.is_ok() {
                counter.fetch_add(delta.len(), Ordering::Relaxed);
            }
        });
        EndlessAgent {
            url,
            written,
            streaming,
        }
    }

    fn written(&self) -> usize {
        self.written.load(Ordering::Relaxed)
    }

    /// Waits until the agent has written nothing for [`STALLED_FOR`] and returns what it wrote by then;
    /// fails the test once it wrote more than `limit` (nothing holds it back), or if it never stalls.
    /// Checks that the agent wrote something, then was held back while the run stayed open.
    async fn held_back(&self) {
        let held = self.stalled(held_at_most()).await;
        assert!(held > 0, "the agent wrote nothing");
        assert!(
            !self.streaming.is_finished(),
            "the proxy ended the run instead of holding it"
        );
    }

    async fn stalled(&self, limit: usize) -> usize {
        within("the agent's writes to stall", async {
            let mut last = (self.written(), tokio::time::Instant::now());
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let written = self.written();
                assert!(
                    written <= limit,
                    "the agent wrote {written} bytes to a client that reads nothing: nothing holds it back"
                );
                if written != last.0 {
                    last = (written, tokio::time::Instant::now());
                } else if last.1.elapsed() >= STALLED_FOR {
                    return written;
                }
            }
        })
        .await
    }
}

/// The agent's send buffer and the client's receive buffer, kept small (Linux doubles what is asked) so that
/// what the stream holds is mostly the proxy's.
const SOCKET_BUFFER: u32 = 16 * 1024;

/// How long an agent's writes must make no progress to count as held back.
const STALLED_FOR: Duration = Duration::from_millis(500);

/// What a stream may hold between an agent and a client that reads nothing: the proxy's two sockets at their
/// largest (Linux's autotuning stops at `tcp_rmem`'s and `tcp_wmem`'s maximum), the two small ones of the
/// test (doubled by Linux), and 1 MiB for what the proxy holds itself (`src/server/mod.rs` tests its share
/// without sockets). An agent held back by nothing goes past it, or never stalls and the test times out.
fn held_at_most() -> usize {
    let largest = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}"))
            .ok()
            .and_then(|sizes| sizes.split_whitespace().nth(2)?.parse::<usize>().ok())
            .unwrap_or(32 << 20)
    };
    largest("tcp_rmem") + largest("tcp_wmem") + 4 * SOCKET_BUFFER as usize + (1 << 20)
}

/// Posts `body` to `path` on a connection of its own, reads the answer's head and first bytes, then reads
/// nothing more, and checks that the agent is held back: the proxy stops reading from it instead of holding
/// what it streams. Once the client leaves, the agent's connection is closed.
async fn a_client_that_reads_nothing_holds_the_agent_back(inbound: &str, path: &str, body: Value) {
    let (agent, proxy) = endless_agent_behind(inbound).await;
    let mut client = small_window_connection(&proxy).await;
    let body = body.to_string();
    let request = format!(
        "POST /pair{path} HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n\
         accept: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    client
        .write_all(request.as_bytes())
        .await
        .expect("the request");
    let mut first = [0; 4096];
    let n = within("the answer's first bytes", client.read(&mut first))
        .await
        .expect("the answer");
    let head = String::from_utf8_lossy(&first[..n]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    agent.held_back().await;

    drop(client);
    within("the agent's connection to close", agent.streaming)
        .await
        .expect("the agent's task");
}

/// An endless AG-UI agent, and a proxy with a route to it at `/pair` for `inbound` clients.
async fn endless_agent_behind(inbound: &str) -> (EndlessAgent, Proxy) {
    let agent = EndlessAgent::serve().await;
    let routes =
        Routes::default().route(Route::new("pair", "/pair", inbound, "ag-ui").upstream(&agent.url));
    (agent, Proxy::start(routes).await)
}

/// A connection to the proxy whose receive buffer is small.
async fn small_window_connection(proxy: &Proxy) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .set_recv_buffer_size(SOCKET_BUFFER)
        .expect("SO_RCVBUF");
    socket.connect(proxy.addr()).await.expect("connect")
}

/// HTTP/2 sends a stream's data only as far as the client's windows let it: a client that reads nothing
/// holds the proxy's writes, and the proxy must hold the agent back in turn. A stream the client resets
/// (`RST_STREAM`, its connection kept) is a client gone: the agent's connection closes.
#[tokio::test]
async fn an_http2_client_that_reads_nothing_holds_the_agent_back_and_its_reset_stream_ends_the_run()
{
    let (agent, proxy) = endless_agent_behind("ag-ui").await;
    let io = TokioIo::new(small_window_connection(&proxy).await);
    // The smallest windows HTTP/2 starts with, never grown for what was not read.
    let (mut sender, connection) = http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .adaptive_window(false)
        .handshake::<_, Full<Bytes>>(io)
        .await
        .expect("the HTTP/2 handshake");
    let connection = tokio::spawn(connection);
    let body = input("t1", "r1", json!([user("u1", "go on")])).to_string();
    let request = Request::post("http://proxy/pair")
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(Full::new(Bytes::from(body)))
        .expect("a request");
    let response = within("the answer's head", sender.send_request(request))
        .await
        .expect("the answer");
    assert_eq!(response.status(), StatusCode::OK);

    agent.held_back().await;

    drop(response);
    within("the agent's connection to close", agent.streaming)
        .await
        .expect("the agent's task");
    assert!(
        !connection.is_finished(),
        "the client's connection closed: only its stream was to end"
    );
    connection.abort();
}

#[tokio::test]
async fn an_ag_ui_client_that_reads_nothing_holds_the_agent_back() {
    let body = input("t1", "r1", json!([user("u1", "go on")]));
    a_client_that_reads_nothing_holds_the_agent_back("ag-ui", "", body).await;
}

#[tokio::test]
async fn an_a2a_client_that_reads_nothing_holds_the_agent_back() {
    let message = json!({"kind": "message", "messageId": "m1", "role": "user",
                         "parts": [{"kind": "text", "text": "go on"}]});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/stream",
                      "params": {"message": message}});
    a_client_that_reads_nothing_holds_the_agent_back("a2a", "", body).await;
}

#[tokio::test]
async fn an_agentscope_client_that_reads_nothing_holds_the_agent_back() {
    let body = agentscope::request("s1", json!([agentscope::user("u1", "go on")]));
    a_client_that_reads_nothing_holds_the_agent_back("agentscope", "/process", body).await;
}

#[tokio::test]
async fn an_ag_kit_client_that_reads_nothing_holds_the_agent_back() {
    let body = json!({"messages": [{"role": "user", "content": "go on"}], "conversationId": "c1"});
    a_client_that_reads_nothing_holds_the_agent_back("ag-kit", "/send-message", body).await;
}
