use serde_json::{json, Map, Value};

use super::decode::{common_prefix, result_text, usage};
use super::encode::input_messages;
use super::*;
use crate::model::{
    ContextItem, GenerationOptions, Interrupt, InterruptKind, Media, MediaKind, MediaSource,
    Message, Outcome, Part, Resume, ResumeStatus, Role, Tool, ToolCall, Usage,
};

fn identity() -> Identity {
    Identity {
        session_id: "session_1".into(),
        user_id: "user_1".into(),
    }
}

fn turn(messages: Vec<Message>) -> Turn {
    Turn {
        conversation: "thread-1".into(),
        run_id: "run-1".into(),
        messages,
        ..Turn::default()
    }
}

fn decode_all(decoder: &mut Decoder, frames: &[Value]) -> Vec<Event> {
    let mut out = Vec::new();
    for frame in frames {
        decoder.decode(&frame.to_string(), &mut out).unwrap();
    }
    out
}

fn call_snapshot(message: &str, index: u32, status: &str, arguments: &str) -> Value {
    json!({"object": "content", "status": status, "type": "data", "index": index, "delta": false,
           "msg_id": message, "data": {"call_id": format!("call_{index}"), "name": "search",
           "arguments": arguments}})
}

fn args_of(events: &[Event], call: &str) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallArgs { call_id, delta } if call_id == call => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn history_becomes_typed_messages_with_content_lists() {
    let mut user = Message::text_message("u1", Role::User, "What is this?");
    user.content.push(Part::Media(Media {
        kind: MediaKind::Image,
        source: MediaSource::Data("iVBOR".into()),
        mime_type: Some("image/png".into()),
        filename: None,
    }));
    let mut assistant = Message::text_message("a1", Role::Assistant, "Let me look.");
    assistant.tool_calls.push(ToolCall {
        id: "call_1".into(),
        name: "lookup".into(),
        arguments: r#"{"q":"x"}"#.into(),
    });
    let mut result = Message::text_message("t1", Role::Tool, "found");
    result.tool_call_id = Some("call_1".into());
    let developer = Message::text_message("d1", Role::Developer, "Be brief.");
    let input =
        serde_json::to_value(input_messages(&[developer, user, assistant, result])).unwrap();

    assert_eq!(input[0]["role"], "system");
    assert_eq!(input[0]["type"], "message");
    assert_eq!(input[1]["role"], "user");
    assert_eq!(input[1]["status"], "completed");
    assert_eq!(input[1]["content"][0]["type"], "text");
    assert_eq!(input[1]["content"][0]["text"], "What is this?");
    assert_eq!(input[1]["content"][1]["type"], "image");
    assert_eq!(
        input[1]["content"][1]["image_url"],
        "data:image/png;base64,iVBOR"
    );
    assert_eq!(input[2]["type"], "message");
    assert_eq!(input[2]["content"][0]["text"], "Let me look.");
    assert_eq!(input[3]["type"], "function_call");
    assert_eq!(input[3]["role"], "assistant");
    assert_eq!(
        input[3]["content"][0]["data"],
        json!({"call_id": "call_1", "name": "lookup", "arguments": r#"{"q":"x"}"#})
    );
    assert_eq!(input[4]["type"], "function_call_output");
    assert_eq!(input[4]["role"], "tool");
    assert_eq!(
        input[4]["content"][0]["data"],
        json!({"call_id": "call_1", "name": "lookup", "output": "found"})
    );
    assert_eq!(input.as_array().unwrap().len(), 5);
    // Every message has the fields the runtime requires non-null.
    for message in input.as_array().unwrap() {
        assert_eq!(message["object"], "message");
        assert!(message["id"].as_str().is_some_and(|id| !id.is_empty()));
    }
}

#[test]
fn request_has_identity_tools_options_and_streams() {
    let mut turn = turn(vec![Message::text_message("u1", Role::User, "hi")]);
    turn.tools = vec![Tool {
        name: "change_background".into(),
        description: "Change it".into(),
        parameters: json!({"type": "object", "properties": {"color": {"type": "string"}}}),
    }];
    turn.options = GenerationOptions {
        model: None,
        temperature: Some(0.2),
        max_tokens: Some(100),
    };
    turn.extra.insert("top_p".into(), json!(0.9));
    turn.extra.insert("stop".into(), json!(["END"]));
    turn.context = vec![ContextItem {
        description: "d".into(),
        value: "v".into(),
    }];
    let body = serde_json::to_value(request(&turn, &identity(), Some("qwen-max"), &[])).unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(body["id"], "run-1");
    assert_eq!(body["session_id"], "session_1");
    assert_eq!(body["user_id"], "user_1");
    assert_eq!(body["model"], "qwen-max");
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["max_tokens"], 100);
    assert_eq!(body["top_p"], 0.9);
    assert_eq!(body["stop"], json!(["END"]));
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "change_background",
            "description": "Change it",
            "parameters": {"type": "object", "properties": {"color": {"type": "string"}}}}}])
    );
    assert!(body.get("n").is_none());

    turn.options.model = Some("client-model".into());
    turn.tools.clear();
    let body = serde_json::to_value(request(&turn, &identity(), Some("qwen-max"), &[])).unwrap();
    assert_eq!(body["model"], "client-model", "the turn's model wins");
    assert!(body.get("tools").is_none());
}

#[test]
fn identity_is_kept_per_conversation_and_fresh_without_one() {
    let mut record = Record::default();
    let first = identity_of(&turn(Vec::new()), &mut record);
    let again = identity_of(&turn(Vec::new()), &mut record);
    assert_eq!(first, again);
    assert_ne!(first.session_id, first.user_id);
    assert_ne!(
        first,
        identity_of(&turn(Vec::new()), &mut Record::default())
    );

    let mut anonymous = turn(Vec::new());
    anonymous.conversation.clear();
    let mut shared = Record::default();
    let a = identity_of(&anonymous, &mut shared);
    let b = identity_of(&anonymous, &mut shared);
    assert_ne!(a, b, "turns without a conversation never share a session");
    assert_eq!(shared, Record::default(), "and keep nothing");
}

fn identity_of(turn: &Turn, record: &mut Record) -> Identity {
    super::identity(turn, record)
}

fn resume(status: ResumeStatus, payload: Option<Value>) -> Resume {
    Resume {
        interrupt_id: "apr_1".into(),
        status,
        payload,
    }
}

#[test]
fn an_answered_approval_sends_the_request_and_the_response() {
    let pending = PendingApproval {
        message_id: "msg_apr1".into(),
        request: wire::McpApprovalRequest {
            id: "apr_1".into(),
            name: "Shell".into(),
            arguments: r#"{"command":"ls"}"#.into(),
            server_label: "agent-bridge".into(),
        },
    };
    let mut turn = turn(vec![Message::text_message("u1", Role::User, "clean up")]);
    turn.resume = vec![
        resume(ResumeStatus::Resolved, Some(json!("yes"))),
        Resume {
            interrupt_id: "someone-else".into(),
            status: ResumeStatus::Resolved,
            payload: None,
        },
    ];
    let body = serde_json::to_value(request(&turn, &identity(), None, &[pending])).unwrap();
    let input = body["input"].as_array().unwrap();
    assert_eq!(input.len(), 3, "{input:#?}");
    assert_eq!(input[1]["type"], "mcp_approval_request");
    assert_eq!(input[1]["id"], "msg_apr1");
    assert_eq!(input[1]["content"][0]["data"]["id"], "apr_1");
    assert_eq!(input[2]["type"], "mcp_approval_response");
    assert_eq!(input[2]["role"], "user");
    assert_eq!(
        input[2]["content"][0]["data"],
        json!({"approval_request_id": "apr_1", "approve": true, "id": null, "reason": null})
    );
}

#[test]
fn approvals_are_kept_until_the_next_turn_takes_them() {
    let mut decoder = Decoder::new();
    let events = decode_all(
        &mut decoder,
        &[
            json!({"object": "message", "status": "completed", "id": "m", "type": "mcp_approval_request",
            "content": [{"type": "data", "data": {"id": "apr_9", "name": "rm", "arguments": "not json",
            "server_label": "s"}}]}),
        ],
    );
    assert_eq!(
        events,
        [Event::Interrupt(Interrupt {
            id: "apr_9".into(),
            kind: InterruptKind::Approval {
                tool: "rm".into(),
                args: json!("not json"),
                hint: None
            }
        })]
    );
    let mut record = Record::default();
    remember_approvals(decoder.take_approvals(), &mut record);
    assert!(decoder.take_approvals().is_empty());
    let taken = take_approvals(&mut record);
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].message_id, "m");
    assert!(take_approvals(&mut record).is_empty());
}

#[test]
fn rewritten_arguments_keep_the_streamed_text_and_add_only_an_extension() {
    let mut decoder = Decoder::new();
    let message =
        json!({"object": "message", "status": "in_progress", "id": "m", "type": "plugin_call"});
    let events = decode_all(
        &mut decoder,
        &[
            message,
            call_snapshot("m", 0, "in_progress", r#"{"a": 1}"#),
            call_snapshot("m", 0, "in_progress", r#"{"a": 12}"#),
            call_snapshot("m", 0, "in_progress", r#"{"a": 123}"#),
            // Rewrites "{\"a\": 12" which was already sent.
            call_snapshot("m", 0, "completed", r#"{"b": 2}"#),
        ],
    );
    assert_eq!(args_of(&events, "call_0"), r#"{"a": 12"#);
    assert!(matches!(events.last(), Some(Event::ToolCallEnd { .. })));
}

#[test]
fn parallel_calls_of_one_message_are_kept_apart_and_ended_by_the_response() {
    let mut decoder = Decoder::new();
    let events = decode_all(
        &mut decoder,
        &[
            json!({"object": "message", "status": "in_progress", "id": "m", "type": "function_call"}),
            call_snapshot("m", 0, "in_progress", r#"{"q": "a"}"#),
            call_snapshot("m", 1, "in_progress", r#"{"q": "b"}"#),
            json!({"object": "response", "status": "completed"}),
        ],
    );
    assert_eq!(args_of(&events, "call_0"), r#"{"q": "a"}"#);
    assert_eq!(args_of(&events, "call_1"), r#"{"q": "b"}"#);
    assert!(matches!(
        events.last(),
        Some(Event::RunFinished {
            outcome: Outcome::Completed,
            usage: None
        })
    ));
}

#[test]
fn two_results_of_one_message_get_distinct_message_ids() {
    let mut decoder = Decoder::new();
    let output = |index: u32| {
        json!({"type": "data", "index": index, "status": "completed",
               "data": {"call_id": format!("c{index}"), "output": "ok"}})
    };
    let events = decode_all(
        &mut decoder,
        &[
            json!({"object": "message", "status": "completed", "id": "m",
                 "type": "function_call_output", "content": [output(0), output(1)]}),
        ],
    );
    let ids: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolResult { message_id, .. } => Some(message_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["m", "m:1"]);
}

#[test]
fn error_frames_with_a_type_and_non_json_payloads() {
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    assert!(decoder
        .decode(r#"{"error": "boom", "error_type": "ValueError", "message": "Error in streaming generator"}"#, &mut out)
        .unwrap());
    let Some(Event::RunError(error)) = out.last() else {
        panic!("{out:?}")
    };
    assert_eq!(error.code(), "AGENTSCOPE_ERROR");
    assert_eq!(error.message(), "boom (ValueError)");

    let mut decoder = Decoder::new();
    assert!(!decoder.decode("[DONE]", &mut out).unwrap());
    let error = decoder.decode("<html>", &mut out).unwrap_err();
    assert_eq!(error.code(), "UPSTREAM_MALFORMED");
}

#[test]
fn heartbeats_are_ignored_and_unknown_messages_are_custom() {
    let mut decoder = Decoder::new();
    let events = decode_all(
        &mut decoder,
        &[
            json!({"object": "message", "status": "completed", "id": "h", "type": "heartbeat"}),
            json!({"object": "message", "status": "completed", "id": "x", "type": "a2ui_response",
                   "content": [{"type": "data", "data": {"ui": 1}}]}),
        ],
    );
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(matches!(&events[0], Event::Custom { name, .. } if name == "agentscope.a2ui_response"));
}

#[test]
fn helpers() {
    assert_eq!(
        common_prefix("{\"a\": \"北京\"}", "{\"a\": \"北海\"}"),
        "{\"a\": \"北"
    );
    assert_eq!(common_prefix("abc", "abcdef"), "abc");
    assert_eq!(
        result_text(r#"[{"type": "text", "text": "sun"}, {"type": "text", "text": "ny"}]"#),
        "sunny"
    );
    assert_eq!(
        result_text(r#"[{"type": "image", "url": "x"}]"#),
        r#"[{"type": "image", "url": "x"}]"#
    );
    assert_eq!(result_text("plain"), "plain");
    let mut map = Map::new();
    map.insert("input_tokens".into(), json!(3));
    assert_eq!(
        usage(&map),
        Some(Usage {
            input_tokens: Some(3),
            output_tokens: None,
            total_tokens: None
        })
    );
    assert_eq!(usage(&Map::new()), None);
}
