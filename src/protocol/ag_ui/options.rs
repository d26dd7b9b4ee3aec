//! The `[routes.translate]` options of AG-UI's two faces.

use serde::{Deserialize, Deserializer};

use crate::config::non_empty;
use crate::face::FaceOptions;
use crate::model::QUESTION_TOOL;

/// `approval_tool` when a route names none.
const APPROVAL_TOOL: &str = "confirmAction";

/// What an AG-UI inbound reads: how a pause reaches its clients, and how reasoning does.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct InboundOptions {
    /// The frontend tool that carries approval interrupts.
    #[serde(deserialize_with = "non_empty")]
    pub approval_tool: String,
    /// The frontend tool that carries question interrupts.
    #[serde(deserialize_with = "non_empty")]
    pub question_tool: String,
    /// How a client is paused: a call of the approval or question tool, or `RUN_FINISHED.outcome`.
    pub agui_interrupts: AguiInterrupts,
    /// true: send reasoning as `REASONING_*` events (0.0.59+ clients; 0.0.36 rejects them) instead of
    /// `CUSTOM agent-bridge.reasoning` events.
    pub agui_reasoning: bool,
}

impl Default for InboundOptions {
    fn default() -> Self {
        InboundOptions {
            approval_tool: APPROVAL_TOOL.to_owned(),
            question_tool: QUESTION_TOOL.to_owned(),
            agui_interrupts: AguiInterrupts::Auto,
            agui_reasoning: false,
        }
    }
}

impl FaceOptions for InboundOptions {}

/// What an AG-UI outbound reads: the tools its agent pauses with, and the protocol version it speaks.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct OutboundOptions {
    /// The frontend tool whose call the agent makes to ask for an approval.
    #[serde(deserialize_with = "non_empty")]
    pub approval_tool: String,
    /// The frontend tool whose call the agent makes to ask a question.
    #[serde(deserialize_with = "non_empty")]
    pub question_tool: String,
    /// e.g. "1.0": sent upstream as `protocolVersion` when the upstream is AG-UI 1.0.
    pub agui_protocol_version: Option<String>,
}

impl Default for OutboundOptions {
    fn default() -> Self {
        OutboundOptions {
            approval_tool: APPROVAL_TOOL.to_owned(),
            question_tool: QUESTION_TOOL.to_owned(),
            agui_protocol_version: None,
        }
    }
}

impl FaceOptions for OutboundOptions {}

/// `agui_interrupts`: how a pause reaches an AG-UI client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AguiInterrupts {
    /// A call of the route's approval or question tool when the client declared that tool in the run's
    /// `tools` (it has a handler for it), otherwise `outcome`.
    #[default]
    Auto,
    /// Always a call of the approval or question tool.
    Tool,
    /// Always `RUN_FINISHED.outcome.interrupt` (clients 0.0.59 and 1.0), after a text message stating the
    /// question (0.0.36 ignores `outcome`).
    Outcome,
}

impl<'de> Deserialize<'de> for AguiInterrupts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Flag(bool),
            Name(String),
        }
        match Written::deserialize(d)? {
            // Files written before the modes existed: `true` paused with the outcome, `false` with a tool.
            Written::Flag(outcome) => {
                let mode = if outcome { "outcome" } else { "tool" };
                tracing::warn!(
                    "`agui_interrupts = {outcome}` is deprecated: it reads as \"{mode}\"; \
                     write \"auto\", \"tool\" or \"outcome\""
                );
                Ok(if outcome { Self::Outcome } else { Self::Tool })
            }
            Written::Name(name) => match name.as_str() {
                "auto" => Ok(Self::Auto),
                "tool" => Ok(Self::Tool),
                "outcome" => Ok(Self::Outcome),
                other => Err(serde::de::Error::custom(format!(
                    "expected \"auto\", \"tool\" or \"outcome\", not {other:?}"
                ))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbound(text: &str) -> InboundOptions {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_pause_reaches_a_client_by_the_mode_written_or_the_old_boolean() {
        assert_eq!(inbound("").agui_interrupts, AguiInterrupts::Auto);
        let mode = |value: &str| inbound(&format!("agui_interrupts = {value}")).agui_interrupts;
        assert_eq!(mode("\"tool\""), AguiInterrupts::Tool);
        assert_eq!(mode("\"outcome\""), AguiInterrupts::Outcome);
        assert_eq!(mode("true"), AguiInterrupts::Outcome, "the old boolean");
        assert_eq!(mode("false"), AguiInterrupts::Tool, "the old boolean");
    }

    #[test]
    fn the_pause_tools_have_defaults_and_a_route_may_rename_them() {
        let options = inbound("");
        assert_eq!(
            (
                options.approval_tool.as_str(),
                options.question_tool.as_str()
            ),
            ("confirmAction", "ask_user")
        );
        assert_eq!(
            inbound("question_tool = \"askHuman\"").question_tool,
            "askHuman"
        );
    }
}
