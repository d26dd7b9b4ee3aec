//! AG-UI outbound: the route's pause tools (DESIGN §4). An AG-UI agent asks for approval, or asks a question,
//! by calling a frontend tool — the route's `approval_tool` (`confirmAction`) or `question_tool` (`ask_user`)
//! — and finishing its run. A client that declared that tool answers the call itself. For any other client
//! the proxy stands in for the frontend: it offers the tool to the agent (real agents call only the tools
//! they were offered), reads the agent's call of it as the canonical approval or question, and answers it
//! in the next run as a frontend would: the assistant's call, then a `tool` message with the answer.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::config::Protocol;
use crate::model::{
    new_id, Event, Interrupt, InterruptKind, Message, Resume, ResumeStatus, Role, ToolCall, Turn,
};
use crate::protocol::ag_ui::wire;
use crate::protocol::ag_ui::OutboundOptions;

/// The route's pause tools.
pub struct PauseTools {
    approval: String,
    question: String,
    /// Offer the tools the client did not declare: every inbound but AG-UI, whose frontends declare the
    /// tools they handle (and are paused with outcome interrupts otherwise).
    offer: bool,
}

/// The pause tools' calls of one run, kept until the next turn answers them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Paused {
    /// How many messages the agent had been sent when it paused: the answers go after these and the reply
    /// the agent gave before its call.
    pub seen: usize,
    pub calls: Vec<PauseCall>,
}

impl Paused {
    /// Where the answers go in `history`: after what the agent had seen and the reply it gave (messages of
    /// the agent's own), before the user messages that came since.
    pub fn position(&self, history: &[Message]) -> usize {
        let mut at = self.seen.min(history.len());
        while history
            .get(at)
            .is_some_and(|message| message.role != Role::User)
        {
            at += 1;
        }
        at
    }
}

/// A call of a pause tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PauseCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

impl PauseTools {
    pub fn new(options: &OutboundOptions, inbound: Protocol) -> Self {
        Self {
            approval: options.approval_tool.clone(),
            question: options.question_tool.clone(),
            offer: inbound != Protocol::AgUi,
        }
    }

    /// The pause tools the proxy answers in this turn: those the client did not declare.
    fn undeclared(&self, turn: &Turn) -> Vec<&str> {
        let declared = |name: &str| turn.tools.iter().any(|tool| tool.name == name);
        [self.approval.as_str(), self.question.as_str()]
            .into_iter()
            .filter(|name| !declared(name))
            .collect()
    }

    /// The tools to add to the run's `tools`: the undeclared pause tools, when the client can be paused only
    /// through the proxy.
    pub fn offered(&self, turn: &Turn) -> Vec<wire::Tool> {
        if !self.offer {
            return Vec::new();
        }
        self.undeclared(turn)
            .into_iter()
            .map(|name| {
                let (description, parameters) = if name == self.approval {
                    (
                        "Ask the user to approve an action before you take it.",
                        json!({"type": "object", "properties": {
                            "action": {"type": "string", "description": "What you are about to do"},
                            "importance": {"type": "string"}},
                            "required": ["action"]}),
                    )
                } else {
                    (
                        "Ask the user a question and wait for the answer.",
                        json!({"type": "object", "properties": {
                            "question": {"type": "string"},
                            "options": {"type": "array", "items": {"type": "string"}}},
                            "required": ["question"]}),
                    )
                };
                wire::Tool {
                    name: name.to_owned(),
                    description: description.to_owned(),
                    parameters: Some(parameters),
                }
            })
            .collect()
    }

    /// What the decoder turns into interrupts this turn.
    pub fn diverter(&self, turn: &Turn) -> Diverter {
        let undeclared = self.undeclared(turn);
        let keep = |name: &str| undeclared.contains(&name).then(|| name.to_owned());
        Diverter {
            approval: keep(&self.approval),
            question: keep(&self.question),
            ..Diverter::default()
        }
    }

    /// The messages that answer the pause calls `resume` answers, as the frontend would have sent them: the
    /// assistant's call, then a `tool` message (an approval `{"approved": …}`, a question its answer).
    pub fn answers(&self, calls: &[PauseCall], resume: &[Resume]) -> Vec<Message> {
        let mut messages = Vec::new();
        for answer in resume {
            let Some(call) = calls.iter().find(|call| call.id == answer.interrupt_id) else {
                continue;
            };
            let mut asked = Message::new(new_id("msg"), Role::Assistant, Vec::new());
            asked.tool_calls.push(ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            let text = answer_text(answer, call.name == self.approval);
            let mut answered = Message::text_message(new_id("msg"), Role::Tool, text);
            answered.tool_call_id = Some(call.id.clone());
            messages.extend([asked, answered]);
        }
        messages
    }
}

/// A tool message's text for an answer: an approval's decision as JSON, a question's answer as its text.
fn answer_text(resume: &Resume, approval: bool) -> String {
    if approval {
        let (approved, reason) = resume.approval();
        let mut decision = json!({ "approved": approved });
        if let Some(reason) = reason {
            decision["reason"] = Value::String(reason);
        }
        return decision.to_string();
    }
    match (&resume.status, &resume.payload) {
        (ResumeStatus::Cancelled, _) => "The user cancelled the question.".to_owned(),
        (_, Some(Value::String(text))) => text.clone(),
        (_, None | Some(Value::Null)) => String::new(),
        (_, Some(other)) => other.to_string(),
    }
}

/// Turns calls of the pause tools into interrupts as the decoder produces them: the call's events are held
/// back, and its end becomes the interrupt.
#[derive(Debug, Default)]
pub struct Diverter {
    approval: Option<String>,
    question: Option<String>,
    /// The calls being held: id → (tool, arguments so far).
    open: HashMap<String, (String, String)>,
    asked: Vec<PauseCall>,
}

impl Diverter {
    /// Rewrites `out[from..]`, the events one upstream event became.
    pub fn divert(&mut self, out: &mut Vec<Event>, from: usize) {
        let is_call = |event: &Event| {
            matches!(
                event,
                Event::ToolCallStart { .. }
                    | Event::ToolCallArgs { .. }
                    | Event::ToolCallEnd { .. }
            )
        };
        // The common event (text) passes untouched, without a copy.
        let no_pause_tools = self.approval.is_none() && self.question.is_none();
        if no_pause_tools || !out[from..].iter().any(is_call) {
            return;
        }
        let produced: Vec<Event> = out.drain(from..).collect();
        for event in produced {
            match event {
                Event::ToolCallStart { call_id, name, .. } if self.is_pause_tool(&name) => {
                    self.open.insert(call_id, (name, String::new()));
                }
                Event::ToolCallArgs { call_id, delta } if self.open.contains_key(&call_id) => {
                    if let Some((_, args)) = self.open.get_mut(&call_id) {
                        args.push_str(&delta);
                    }
                }
                Event::ToolCallEnd { call_id } if self.open.contains_key(&call_id) => {
                    if let Some((name, arguments)) = self.open.remove(&call_id) {
                        out.push(Event::Interrupt(
                            self.interrupt(&call_id, &name, &arguments),
                        ));
                        self.asked.push(PauseCall {
                            id: call_id,
                            name,
                            arguments,
                        });
                    }
                }
                other => out.push(other),
            }
        }
    }

    /// The pause calls read so far.
    pub fn take_asked(&mut self) -> Vec<PauseCall> {
        std::mem::take(&mut self.asked)
    }

    fn is_pause_tool(&self, name: &str) -> bool {
        self.approval.as_deref() == Some(name) || self.question.as_deref() == Some(name)
    }

    fn interrupt(&self, id: &str, name: &str, arguments: &str) -> Interrupt {
        let args: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
        let text = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_owned);
        let kind = if self.approval.as_deref() == Some(name) {
            InterruptKind::Approval {
                tool: name.to_owned(),
                hint: text("action").map(|action| format!("Approve: {action}? Answer yes or no.")),
                args,
            }
        } else {
            let options = args
                .get("options")
                .and_then(Value::as_array)
                .map(|options| {
                    options
                        .iter()
                        .filter_map(|o| o.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            InterruptKind::Question {
                text: text("question").unwrap_or_else(|| arguments.to_owned()),
                options,
            }
        };
        Interrupt {
            id: id.to_owned(),
            kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Tool;

    fn tools() -> PauseTools {
        PauseTools::new(&OutboundOptions::default(), Protocol::A2a)
    }

    fn call(id: &str, name: &str, args: &str) -> Vec<Event> {
        vec![
            Event::ToolCallStart {
                call_id: id.into(),
                name: name.into(),
                parent_message_id: None,
            },
            Event::ToolCallArgs {
                call_id: id.into(),
                delta: args.into(),
            },
            Event::ToolCallEnd { call_id: id.into() },
        ]
    }

    #[test]
    fn the_undeclared_pause_tools_are_offered_and_their_calls_become_interrupts() {
        let mut turn = Turn::default();
        let offered: Vec<String> = tools().offered(&turn).into_iter().map(|t| t.name).collect();
        assert_eq!(offered, ["confirmAction", "ask_user"]);
        turn.tools.push(Tool {
            name: "ask_user".into(),
            description: String::new(),
            parameters: json!({}),
        });
        let offered: Vec<String> = tools().offered(&turn).into_iter().map(|t| t.name).collect();
        assert_eq!(
            offered,
            ["confirmAction"],
            "never a tool the client declared"
        );
        let agui = PauseTools::new(&OutboundOptions::default(), Protocol::AgUi);
        assert!(agui.offered(&Turn::default()).is_empty());

        let mut diverter = tools().diverter(&turn);
        let mut out = vec![Event::RunStarted];
        for event in call(
            "c1",
            "confirmAction",
            r#"{"action":"delete the temp files"}"#,
        )
        .into_iter()
        .chain(call("c2", "ask_user", r#"{"question":"Which?"}"#))
        .chain(call("c3", "search", "{}"))
        {
            let from = out.len();
            out.push(event);
            diverter.divert(&mut out, from);
        }
        assert_eq!(
            out.len(),
            8,
            "two calls pass, one became an interrupt: {out:?}"
        );
        let Event::Interrupt(approval) = &out[1] else {
            panic!("{out:?}")
        };
        assert_eq!(approval.id, "c1");
        assert_eq!(
            approval.kind.prompt(),
            "Approve: delete the temp files? Answer yes or no."
        );
        assert!(
            matches!(&out[2], Event::ToolCallStart { name, .. } if name == "ask_user"),
            "the client handles its own ask_user: {out:?}"
        );
        assert_eq!(diverter.take_asked().len(), 1);
    }

    #[test]
    fn answers_go_after_what_the_agent_saw_and_said_before_newer_user_messages() {
        let message = |role| Message::text_message(new_id("m"), role, "x");
        let history = [
            message(Role::User),
            message(Role::Assistant),
            message(Role::User),
            message(Role::Assistant),
            message(Role::User),
        ];
        let paused = |seen| Paused {
            seen,
            calls: Vec::new(),
        };
        assert_eq!(
            paused(3).position(&history),
            4,
            "after the reply, before the new message"
        );
        assert_eq!(paused(3).position(&history[..4]), 4, "at the end");
        assert_eq!(paused(1).position(&history), 2);
        assert_eq!(paused(9).position(&history), 5);
    }

    #[test]
    fn an_answer_is_the_call_and_a_tool_message_as_a_frontend_sends_them() {
        let calls = [PauseCall {
            id: "c1".into(),
            name: "confirmAction".into(),
            arguments: r#"{"action":"x"}"#.into(),
        }];
        let resume = [
            Resume {
                interrupt_id: "c1".into(),
                status: ResumeStatus::Resolved,
                payload: Some(json!({"approved": false, "reason": "no, keep them"})),
            },
            Resume {
                interrupt_id: "other".into(),
                status: ResumeStatus::Resolved,
                payload: None,
            },
        ];
        let messages = tools().answers(&calls, &resume);
        assert_eq!(
            messages.len(),
            2,
            "only the pause call is answered with messages"
        );
        assert_eq!(messages[0].tool_calls[0].id, "c1");
        assert_eq!(messages[1].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(
            messages[1].text(),
            r#"{"approved":false,"reason":"no, keep them"}"#
        );
    }
}
