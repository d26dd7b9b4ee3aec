//! Interop: the proxy's CMDC inbound (a CMDC gateway) driven by the real `cmdc-sdk` 0.1.0
//! (`tests/interop/cmdc/cmdc_drive.py`): health, sessions, `prompt` (POST then SSE, the SDK's order),
//! `prompt_sync`, auto-approve over SSE, info, stats, messages, the WebSocket with its acks and an approval,
//! a bad key, and the same with the async session.
//!
//! The upstream is a scripted AG-UI agent: prompts containing "danger" ask for approval first. Needs the
//! Python venv `tests/interop/.venv` that `bash .ci/run` installs; without it the test fails and says so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::Command;

use crate::support::interop::{require_installed, run_driver};
use crate::support::{Proxy, Reply, Route, Upstream};

/// The longest the whole driver may take.
const DRIVE_LIMIT: Duration = Duration::from_secs(60);

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

/// The text of the last user message of an AG-UI `RunAgentInput`.
fn last_user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The AG-UI agent behind the gateway: "danger" pauses with an approval interrupt; "which colour?" asks through
/// the `ask_user` tool the proxy offers it (as real AG-UI agents ask), and the tool's answer is echoed.
fn reply_to(body: &Value) -> Reply {
    let resumed = body["resume"].as_array().is_some_and(|r| !r.is_empty());
    let last = body["messages"].as_array().and_then(|m| m.last());
    let answered = last
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].clone());
    let text = match answered {
        Some(answer) => format!("you chose {}", answer.as_str().unwrap_or_default()),
        None => last_user_text(body),
    };
    let started = json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"});
    let offered = body["tools"].to_string().contains("\"ask_user\"");
    if text.contains("which colour?") && offered {
        return Reply::sse()
            .event(started)
            .event(json!({"type": "TOOL_CALL_START", "toolCallId": "ask_1", "toolCallName": "ask_user"}))
            .event(json!({"type": "TOOL_CALL_ARGS", "toolCallId": "ask_1",
                          "delta": "{\"question\":\"Which colour?\"}"}))
            .event(json!({"type": "TOOL_CALL_END", "toolCallId": "ask_1"}))
            .event(json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}));
    }
    if text.contains("danger") && !resumed {
        return Reply::sse().event(started).event(json!({
            "type": "RUN_FINISHED", "threadId": "t", "runId": "r",
            "outcome": {"type": "interrupt", "interrupts": [
                {"id": format!("apr_{}", uuid_like()), "reason": "tool_approval", "message": "danger"}]}
        }));
    }
    Reply::sse()
        .event(started)
        .event(json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}))
        .event(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "echo: "}))
        .event(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": text}))
        .event(json!({"type": "TEXT_MESSAGE_END", "messageId": "m"}))
        .event(json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}))
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

#[tokio::test]
async fn cmdc_sdk_drives_the_gateway_over_sse_and_websocket_sync_and_async() {
    let python = interop_dir().join(".venv/bin/python");
    require_installed(&python, "the Python venv with cmdc-sdk 0.1.0");
    let upstream = Upstream::answer_with(|request, _| reply_to(&request.body)).await;
    let route = Route::new("gw", "/gw", "cmdc", "ag-ui")
        .upstream(&upstream.url())
        .api_keys(&[("sk-interop", "acme")]);
    let proxy = Proxy::start(route).await;

    let mut command = Command::new(&python);
    command
        .arg(interop_dir().join("cmdc/cmdc_drive.py"))
        .arg(proxy.url("/gw"))
        .arg("sk-interop");
    let output = run_driver(
        command,
        DRIVE_LIMIT,
        "cmdc-sdk",
        "the CMDC gateway",
        "cannot run the cmdc-sdk driver",
        "the cmdc-sdk driver did not finish",
    )
    .await;
    assert_eq!(output.code, Some(0), "{}", output.stderr);
    let report = output.report;

    assert_eq!(
        report["health"],
        json!({"status": "ok", "version": "0.1.0"})
    );
    assert_eq!(
        report["sse_events"],
        json!([
            "prompt_received",
            "agent_start",
            "message_start",
            "message_delta",
            "message_delta",
            "agent_end"
        ])
    );
    assert_eq!(report["sync_text"], "echo: again");
    assert_eq!(
        report["hitl_events"],
        json!([
            "prompt_received",
            "agent_start",
            "approval_required",
            "approval_resolved",
            "message_start",
            "message_delta",
            "message_delta",
            "agent_end"
        ])
    );
    assert_eq!(report["info"], json!({"state": "idle", "turns": 3}));
    assert_eq!(report["stats"], json!({"prompt_count": 3, "turns": 3}));
    assert_eq!(
        report["messages"],
        json!([
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant"
        ])
    );
    // The AG-UI agent's `ask_user` call reaches cmdc-sdk as `ask_user`; its `respond` is the tool's answer.
    assert_eq!(report["asked"], json!(["Which colour?"]));
    assert_eq!(
        report["ask_events"],
        json!([
            "prompt_received",
            "agent_start",
            "ask_user",
            "message_start",
            "message_delta",
            "message_delta",
            "agent_end"
        ])
    );
    assert_eq!(report["ask_answer"], "echo: you chose blue");
    assert_eq!(report["ws_ack"], json!({"ok": true, "action": "prompt"}));
    assert_eq!(
        report["ws_approve_ack"],
        json!({"ok": true, "action": "approve"})
    );
    assert_eq!(report["ws_events"][2], "approval_required");
    assert_eq!(report["ws_events"][3], "approval_resolved");
    assert_eq!(report["bad_key"], 401);
    assert_eq!(
        report["async"]["sse_events"],
        json!([
            "prompt_received",
            "agent_start",
            "message_start",
            "message_delta",
            "message_delta",
            "agent_end"
        ])
    );
    assert_eq!(report["async"]["hitl_events"][3], "approval_resolved");
    assert_eq!(
        report["async"]["ws_ack"],
        json!({"ok": true, "action": "prompt"})
    );
    assert_eq!(
        report["async"]["ws_events"]
            .as_array()
            .and_then(|e| e.last()),
        Some(&json!("agent_end"))
    );
}
