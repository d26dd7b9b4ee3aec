//! The `[routes.translate]` options of A2A's two faces.

use serde::Deserialize;

use crate::config::{OptionError, Protocol};
use crate::face::FaceOptions;

/// What an A2A inbound reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct InboundOptions {
    /// Also put the whole reply text in the final `status.message`, for clients that ignore artifacts
    /// (`@ag-ui/a2a`).
    pub a2a_status_message: bool,
}

impl FaceOptions for InboundOptions {}

/// What an A2A outbound reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct OutboundOptions {
    /// `"auto"` reads the agent card at the upstream's `/.well-known/agent-card.json` (then `agent.json`) to
    /// learn whether it streams; an absolute URL reads the card there. Absent: the upstream is taken to
    /// stream (`message/stream`).
    pub a2a_card: Option<String>,
}

impl FaceOptions for OutboundOptions {
    fn check(&self, _inbound: Protocol) -> Result<(), OptionError> {
        let Some(card) = &self.a2a_card else {
            return Ok(());
        };
        let absolute = card.parse::<http::Uri>().is_ok_and(|uri| {
            matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
        });
        if card == "auto" || absolute {
            return Ok(());
        }
        Err(OptionError::new(
            "a2a_card",
            format!("expected \"auto\" or an absolute http(s) URL, not {card:?}"),
        ))
    }
}
