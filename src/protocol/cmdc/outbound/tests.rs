use serde_json::{json, Value};

use super::*;
use crate::model::{new_id, Interrupt, InterruptKind, Resume, ResumeStatus};

fn user(text: &str) -> Message {
    Message::text_message(new_id("msg"), Role::User, text)
}

fn waiting(pause: Waiting) -> Record {
    let mut record = Record::default();
    record.update_upstream(|conversation: &mut Conversation| conversation.waiting = Some(pause));
    record
}

fn answer(id: &str, payload: Value) -> Resume {
    Resume {
        interrupt_id: id.into(),
        status: ResumeStatus::Resolved,
        payload: Some(payload),
    }
}

#[test]
fn new_user_text_is_one_prompt_and_system_messages_stay_out() {
    let turn = Turn {
        messages: vec![
            Message::text_message("s", Role::System, "be brief"),
            user("hello"),
            user("and more"),
        ],
        ..Turn::default()
    };
    assert_eq!(
        plan(&turn, &mut Record::default()).unwrap(),
        [Action::Prompt("hello\n\nand more".into())]
    );
    assert!(plan(&Turn::default(), &mut Record::default())
        .unwrap_err()
        .is_client());
}

#[test]
fn answers_resolve_the_paused_run_before_anything_else() {
    let approved = Turn {
        resume: vec![answer("apr_1", json!("yes"))],
        messages: vec![user("then this")],
        ..Turn::default()
    };
    let mut record = waiting(Waiting::Approval("apr_1".into()));
    assert_eq!(
        plan(&approved, &mut record).unwrap(),
        [
            Action::Approve("apr_1".into()),
            Action::Prompt("then this".into())
        ]
    );
    assert_eq!(record.upstream_state::<Conversation>().waiting, None);

    let answered = Turn {
        resume: vec![answer("ask_1", json!("Paris"))],
        ..Turn::default()
    };
    assert_eq!(
        plan(&answered, &mut waiting(Waiting::Question("ask_1".into()))).unwrap(),
        [Action::Respond {
            reference: "ask_1".into(),
            response: "Paris".into()
        }]
    );
}

#[test]
fn a_dismissed_pause_aborts_the_run_or_else_declines_it() {
    let dismissed = Turn {
        resume: vec![Resume {
            interrupt_id: "apr_1".into(),
            status: ResumeStatus::Cancelled,
            payload: None,
        }],
        ..Turn::default()
    };
    assert_eq!(
        plan(&dismissed, &mut waiting(Waiting::Approval("apr_1".into()))).unwrap(),
        [Action::Abort {
            decline: Box::new(Action::Reject("apr_1".into()))
        }]
    );
}

#[test]
fn moving_on_without_an_answer_declines_the_pause() {
    let moved_on = Turn {
        messages: vec![user("something else")],
        ..Turn::default()
    };
    assert_eq!(
        plan(&moved_on, &mut waiting(Waiting::Approval("apr_1".into()))).unwrap(),
        [
            Action::Reject("apr_1".into()),
            Action::Prompt("something else".into())
        ]
    );
}

#[test]
fn a_held_callback_is_answered_with_the_clients_tool_message() {
    let mut result = Message::text_message("t1", Role::Tool, "blue");
    result.tool_call_id = Some("tc_1".into());
    let answered = Turn {
        messages: vec![result, user("and now?")],
        ..Turn::default()
    };
    assert_eq!(
        plan(&answered, &mut waiting(Waiting::Callback("tc_1".into()))).unwrap(),
        [
            Action::Callback {
                call_id: "tc_1".into(),
                answer: CallbackAnswer::Result("blue".into())
            },
            Action::Prompt("and now?".into())
        ],
        "the tool message answers the callback and is not also prompt text"
    );
    let moved_on = Turn {
        messages: vec![user("never mind")],
        ..Turn::default()
    };
    assert!(matches!(
        &plan(&moved_on, &mut waiting(Waiting::Callback("tc_1".into()))).unwrap()[0],
        Action::Callback {
            answer: CallbackAnswer::Error(_),
            ..
        }
    ));
}

#[test]
fn a_callback_is_taken_only_with_the_sessions_token_and_for_its_tools() {
    let token = crate::model::random_hex();
    let accepts = Accepts {
        token: Some(token.clone()),
        tools: BTreeSet::from(["paint".to_owned()]),
    };
    let call = |tool: &str| wire::ToolCallback {
        call_id: "tc_1".into(),
        tool_name: tool.into(),
        args: json!({}),
        session_id: "s1".into(),
    };
    let query = format!("a=1&token={token}");
    assert!(accepts.takes(query_token(&query), &call("paint")));
    assert!(!accepts.takes(query_token(&query), &call("rm")));
    assert!(!accepts.takes(query_token("a=1"), &call("paint")));
    assert!(!accepts.takes(&token[1..], &call("paint")));
    let without_tools = Accepts {
        token: None,
        ..accepts
    };
    assert!(!without_tools.takes("", &call("paint")));
}

#[test]
fn a_callback_tool_call_is_shown_once_whichever_comes_first() {
    let mut decoder = Decoder::default();
    let mut out = Vec::new();
    let start = wire::Event::from_sse(
        "tool_execution_start",
        r#"{"toolName":"paint","callId":"tc_1","args":{"color":"blue"}}"#,
    )
    .unwrap()
    .unwrap();
    assert!(decoder.decode(start, &mut out).unwrap().is_none());
    let waiting = decoder.callback(
        wire::ToolCallback {
            call_id: "tc_1".into(),
            tool_name: "paint".into(),
            args: json!({"color": "blue"}),
            session_id: "s1".into(),
        },
        &mut out,
    );
    assert_eq!(waiting, Waiting::Callback("tc_1".into()));
    assert_eq!(out.len(), 3, "{out:#?}");
}

fn decode_all(events: &[(&str, Value)]) -> (Vec<Event>, Option<Result<StepEnd>>) {
    let mut decoder = Decoder::default();
    let mut out = Vec::new();
    for (name, data) in events {
        let event = wire::Event::from_sse(name, &data.to_string())
            .unwrap()
            .unwrap();
        match decoder.decode(event, &mut out) {
            Ok(None) => {}
            end => return (out, Some(end.map(|end| end.unwrap()))),
        }
    }
    (out, None)
}

#[test]
fn a_run_becomes_text_tool_calls_and_its_end() {
    let (events, end) = decode_all(&[
        ("prompt_received", json!({"text": "hi"})),
        ("agent_start", json!({})),
        ("message_start", json!({})),
        ("message_delta", json!({"delta": "Let me "})),
        ("message_delta", json!({"delta": "check."})),
        ("tool_calls", json!({"count": 1})),
        (
            "tool_execution_start",
            json!({"toolName": "Shell", "callId": "tc_1", "args": {"command": "ls"}}),
        ),
        (
            "tool_execution_end",
            json!({"toolName": "Shell", "callId": "tc_1", "status": "error", "result": "denied"}),
        ),
        ("message_start", json!({})),
        ("message_delta", json!({"delta": "Done"})),
        (
            "agent_end",
            json!({"messageCount": 2, "lastMessage": null,
                   "tokenUsage": {"promptTokens": 5, "completionTokens": 3, "totalTokens": 8}}),
        ),
    ]);
    assert_eq!(events.len(), 8, "{events:#?}");
    let Event::TextDelta {
        message_id: first, ..
    } = &events[1]
    else {
        panic!("{events:?}")
    };
    let Event::TextDelta {
        message_id: second, ..
    } = &events[7]
    else {
        panic!("{events:?}")
    };
    assert_ne!(first, second, "a message_start begins a new message");
    assert!(
        matches!(&events[4], Event::ToolCallArgs { delta, .. } if delta == r#"{"command":"ls"}"#)
    );
    assert!(
        matches!(&events[6], Event::ToolResult { content, is_error: true, .. } if content == "denied")
    );
    let Some(Ok(StepEnd::Finished(Some(usage)))) = end else {
        panic!("{end:?}")
    };
    assert_eq!(usage.total_tokens, Some(8));
}

#[test]
fn pauses_are_interrupts_named_by_the_gateways_ids() {
    let (events, end) = decode_all(&[(
        "approval_required",
        json!({"approvalId": "apr_1", "toolName": "Shell", "args": {"command": "rm"},
               "hint": "", "requestedAt": null}),
    )]);
    assert!(
        matches!(&events[0], Event::Interrupt(Interrupt { id, kind: InterruptKind::Approval { tool, hint: None, .. } })
        if id == "apr_1" && tool == "Shell")
    );
    assert!(matches!(end, Some(Ok(StepEnd::Paused(Waiting::Approval(id)))) if id == "apr_1"));

    let (events, _) = decode_all(&[(
        "ask_user",
        json!({"ref": "ask_1", "question": "Which?", "options": null}),
    )]);
    assert!(
        matches!(&events[0], Event::Interrupt(Interrupt { id, kind: InterruptKind::Question { options, .. } })
        if id == "ask_1" && options.is_empty())
    );
}

#[test]
fn errors_and_aborts_end_the_step() {
    let (_, end) = decode_all(&[("error", json!({"reason": "provider down"}))]);
    assert!(matches!(end, Some(Err(e)) if e.message() == "provider down"));
    let (_, end) = decode_all(&[("agent_abort", json!({"reason": "user_cancelled"}))]);
    assert!(matches!(end, Some(Ok(StepEnd::Cancelled))));
    let (_, end) = decode_all(&[("agent_abort", json!({"reason": "max_turns_exceeded"}))]);
    assert!(matches!(end, Some(Err(e)) if e.message() == "max_turns_exceeded"));
}

#[test]
fn a_queued_prompt_skips_the_runs_before_it() {
    let mut decoder = Decoder::default();
    decoder.skip_until_prompt = Some("mine".into());
    let mut out = Vec::new();
    for (name, data) in [
        ("message_delta", json!({"delta": "someone else's"})),
        ("agent_end", json!({})),
        ("prompt_received", json!({"text": "mine"})),
        ("message_delta", json!({"delta": "ours"})),
    ] {
        let event = wire::Event::from_sse(name, &data.to_string())
            .unwrap()
            .unwrap();
        assert!(decoder.decode(event, &mut out).unwrap().is_none());
    }
    assert!(matches!(&out[..], [Event::TextDelta { delta, .. }] if delta == "ours"));
}
