//! The built-in `echo` agent: an outbound with no upstream, so that every inbound protocol can be tried on
//! a fresh machine.
//!
//! - Any text: streamed back word by word.
//! - `/tool NAME {json args}` (or `/tool` alone): calls the client tool NAME (default: the first tool the
//!   client offered) with those arguments; the run ends and waits for the client to send the result, which
//!   the next turn reports back.
//! - `/ask QUESTION`: pauses on a question (human in the loop); the next turn reports the answer.

use serde_json::Value;

use crate::error::Result;
use crate::face::OutboundFace;
use crate::model::{
    new_id, Event, History, Interrupt, InterruptKind, Outcome, ResumeStatus, Role, Turn,
};
use crate::translate::RunContext;

pub struct Echo;

impl OutboundFace for Echo {
    fn history(&self) -> History {
        History::Full
    }

    async fn run(&self, turn: &Turn, context: &mut RunContext) -> Result<()> {
        context.emit(Event::RunStarted).await?;
        match reply_for(turn) {
            Reply::Text(text) => stream_text(&text, context).await?,
            Reply::ToolCall { name, arguments } => {
                let call_id = new_id("call");
                context
                    .emit(Event::ToolCallStart {
                        call_id: call_id.clone(),
                        name,
                        parent_message_id: None,
                    })
                    .await?;
                context
                    .emit(Event::ToolCallArgs {
                        call_id: call_id.clone(),
                        delta: arguments,
                    })
                    .await?;
                context.emit(Event::ToolCallEnd { call_id }).await?;
            }
            Reply::Question(text) => {
                let interrupt = Interrupt {
                    id: new_id("int"),
                    kind: InterruptKind::Question {
                        text,
                        options: Vec::new(),
                    },
                };
                context.emit(Event::Interrupt(interrupt)).await?;
                return context
                    .emit(Event::RunFinished {
                        outcome: Outcome::Interrupted,
                        usage: None,
                    })
                    .await;
            }
        }
        context
            .emit(Event::RunFinished {
                outcome: Outcome::Completed,
                usage: None,
            })
            .await
    }
}

enum Reply {
    Text(String),
    ToolCall { name: String, arguments: String },
    Question(String),
}

fn reply_for(turn: &Turn) -> Reply {
    if let Some(answer) = turn.resume.first() {
        return Reply::Text(match (answer.status, &answer.payload) {
            (ResumeStatus::Cancelled, _) => "You cancelled the question.".to_owned(),
            (_, Some(Value::String(text))) => format!("You answered: {text}"),
            (_, Some(payload)) => format!("You answered: {payload}"),
            (_, None) => "You answered nothing.".to_owned(),
        });
    }
    match turn.messages.last() {
        Some(last) if last.role == Role::Tool => Reply::Text(tool_result_reply(
            turn,
            &last.text(),
            last.tool_call_id.as_deref(),
        )),
        Some(last) if last.role == Role::User => command_reply(turn, &last.text()),
        _ => Reply::Text("Say something and I will echo it.".to_owned()),
    }
}

fn tool_result_reply(turn: &Turn, result: &str, call_id: Option<&str>) -> String {
    let name = turn
        .messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .find(|call| Some(call.id.as_str()) == call_id)
        .map_or("the tool", |call| call.name.as_str());
    format!("Tool `{name}` returned: {result}")
}

fn command_reply(turn: &Turn, text: &str) -> Reply {
    if let Some(rest) = command(text, "/ask") {
        let question = if rest.is_empty() {
            "What should I do next?"
        } else {
            rest
        };
        return Reply::Question(question.to_owned());
    }
    let Some(rest) = command(text, "/tool") else {
        return Reply::Text(text.to_owned());
    };
    let (name, arguments) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let tool = if name.is_empty() {
        turn.tools.first()
    } else {
        turn.tools.iter().find(|t| t.name == name)
    };
    let Some(tool) = tool else {
        let offered: Vec<&str> = turn.tools.iter().map(|t| t.name.as_str()).collect();
        return Reply::Text(format!(
            "I can only call a tool you offer; you offered: [{}]",
            offered.join(", ")
        ));
    };
    let arguments = arguments.trim();
    if serde_json::from_str::<Value>(arguments).is_err() && !arguments.is_empty() {
        return Reply::Text(format!("The arguments must be JSON, not `{arguments}`"));
    }
    let arguments = if arguments.is_empty() {
        "{}"
    } else {
        arguments
    };
    Reply::ToolCall {
        name: tool.name.clone(),
        arguments: arguments.to_owned(),
    }
}

/// The rest of `text` after the command word, if `text` is that command.
fn command<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let rest = text.trim().strip_prefix(word)?;
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then(|| rest.trim())
}

/// Streams the text as one assistant message, a delta per word (each word keeps its trailing space).
async fn stream_text(text: &str, context: &mut RunContext) -> Result<()> {
    let message_id = new_id("msg");
    context
        .emit(Event::TextStart {
            message_id: message_id.clone(),
            role: Role::Assistant,
        })
        .await?;
    for word in text.split_inclusive(' ') {
        context
            .emit(Event::TextDelta {
                message_id: message_id.clone(),
                delta: word.to_owned(),
            })
            .await?;
    }
    context.emit(Event::TextEnd { message_id }).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, Tool};

    fn turn_saying(text: &str, tools: &[&str]) -> Turn {
        Turn {
            messages: vec![Message::text_message("u1", Role::User, text)],
            tools: tools
                .iter()
                .map(|name| Tool {
                    name: (*name).into(),
                    description: String::new(),
                    parameters: Value::Null,
                })
                .collect(),
            ..Turn::default()
        }
    }

    #[test]
    fn tool_command_calls_the_named_client_tool() {
        match reply_for(&turn_saying(
            r#"/tool search {"q":"x"}"#,
            &["confirm", "search"],
        )) {
            Reply::ToolCall { name, arguments } => {
                assert_eq!(name, "search");
                assert_eq!(arguments, r#"{"q":"x"}"#);
            }
            _ => panic!("expected a tool call"),
        }
    }

    #[test]
    fn bare_tool_command_calls_the_first_tool_with_empty_arguments() {
        assert!(matches!(reply_for(&turn_saying("/tool", &["confirm"])),
            Reply::ToolCall { name, arguments } if name == "confirm" && arguments == "{}"));
    }

    #[test]
    fn tool_command_without_tools_explains() {
        assert!(
            matches!(reply_for(&turn_saying("/tool", &[])), Reply::Text(t) if t.contains("only call a tool you offer"))
        );
    }

    #[test]
    fn words_that_merely_start_like_a_command_are_echoed() {
        assert!(
            matches!(reply_for(&turn_saying("/toolbox", &["x"])), Reply::Text(t) if t == "/toolbox")
        );
    }
}
