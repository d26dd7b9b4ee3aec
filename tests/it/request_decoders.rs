//! Every inbound's request decoder through the one contract (`face::RequestDecoder`): a body it can read
//! becomes what the client asks for; a body it cannot is refused in the protocol's own shape and status, for
//! the same hostile bodies, and none of them panics.

use agent_bridge::face::RequestDecoder;
use agent_bridge::protocol::{a2a, ag_kit, ag_ui, agentscope, cmdc};
use http_body_util::BodyExt;
use serde_json::Value;

/// Bodies no protocol can read: not JSON, cut short, not UTF-8, a JSON array, nested past any parser's limit.
fn hostile_bodies() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("not JSON", b"hello".to_vec()),
        ("cut short", b"{\"messages\": [".to_vec()),
        ("not UTF-8", b"\xff\xfe{}".to_vec()),
        ("an array", b"[1, 2]".to_vec()),
        (
            "nested too deep",
            [&[b'['; 4096][..], &[b']'; 4096][..]].concat(),
        ),
    ]
}

/// The status and body the client gets for `body`, which `decoder` must refuse.
async fn refusal<D: RequestDecoder>(decoder: &D, case: &str, body: &[u8]) -> (u16, String) {
    let Err(refused) = decoder.decode(body) else {
        panic!("{case}: read, not refused");
    };
    let response = decoder.refuse(refused);
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test]
async fn ag_ui_and_ag_kit_refuse_with_400_and_an_error_object() {
    for (case, body) in hostile_bodies() {
        for (status, text) in [
            refusal(&ag_ui::Reader, case, &body).await,
            refusal(&ag_kit::Reader, case, &body).await,
        ] {
            assert_eq!(status, 400, "{case}: {text}");
            assert_eq!(
                json(&text)["error"]["code"],
                "INVALID_REQUEST",
                "{case}: {text}"
            );
        }
    }
    let turn = ag_ui::Reader
        .decode(br#"{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":"hi"}],"tools":[],"context":[],"state":{},"forwardedProps":{}}"#)
        .unwrap();
    assert_eq!(
        (turn.conversation.as_str(), turn.run_id.as_str()),
        ("t", "r")
    );
    let turn = ag_kit::Reader
        .decode(br#"{"messages":[{"role":"user","content":"hi"}],"conversationId":"c1"}"#)
        .unwrap();
    assert_eq!(turn.conversation, "c1");
}

#[tokio::test]
async fn a2a_refuses_with_a_json_rpc_error_over_http_200() {
    for (case, body) in hostile_bodies() {
        let (status, text) = refusal(&a2a::Reader, case, &body).await;
        assert_eq!(status, 200, "{case}: {text}");
        let answer = json(&text);
        assert_eq!(answer["jsonrpc"], "2.0", "{case}: {text}");
        let code = answer["error"]["code"].as_i64().unwrap();
        assert!([-32700, -32600].contains(&code), "{case}: {text}");
    }
    let call = a2a::Reader
        .decode(br#"{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"id":"t1"}}"#)
        .unwrap();
    assert_eq!(call.method, "tasks/get");
}

#[tokio::test]
async fn agentscope_refuses_as_fastapi_does() {
    let reader = agentscope::Reader {
        question_tool: "ask_user",
    };
    for (case, body) in hostile_bodies() {
        let (status, text) = refusal(&reader, case, &body).await;
        assert_eq!(status, 422, "{case}: {text}");
        assert!(
            json(&text)["detail"][0]["type"].is_string(),
            "{case}: {text}"
        );
    }
    let (status, frame) = refusal(&reader, "input not a list", br#"{"input": 5}"#).await;
    assert_eq!(status, 200, "the runtime's one error frame: {frame}");
    assert!(frame.starts_with("data: {\"error\": "), "{frame}");
    let accepted = reader
        .decode(br#"{"input":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"session_id":"s1"}"#)
        .unwrap();
    assert_eq!(accepted.session_id, "s1");
}

#[tokio::test]
async fn cmdc_refuses_with_the_gateways_error_body() {
    let reader = cmdc::Reader::<cmdc::wire::Prompt>::new();
    for (case, body) in hostile_bodies() {
        let (status, text) = refusal(&reader, case, &body).await;
        assert_eq!(status, 400, "{case}: {text}");
        let answer = json(&text);
        assert_eq!(answer["error"], "bad_request", "{case}: {text}");
        assert!(answer["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid JSON body"));
    }
    let prompt = reader.decode(br#"{"text":"hi"}"#).unwrap();
    assert_eq!(prompt.text.as_deref(), Some("hi"));
    assert_eq!(
        reader.decode(b"  ").unwrap().text,
        None,
        "a blank body is {{}}"
    );
}
