//! The `[routes.translate]` options of a CMDC outbound (its inbound reads none: a CMDC client names its
//! own model when it creates a session).

use serde::Deserialize;

use crate::config::{OptionError, Protocol};
use crate::face::FaceOptions;

/// What a CMDC outbound reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct OutboundOptions {
    /// The model each session is created with, for clients that name none.
    pub model: Option<String>,
    /// The proxy's own base URL as the gateway reaches it, to call the client's tools back. Default: the
    /// address the proxy listens on (127.0.0.1 for an unspecified address).
    pub proxy_url: Option<String>,
}

impl FaceOptions for OutboundOptions {
    fn check(&self, inbound: Protocol) -> Result<(), OptionError> {
        // Only a CMDC client names a model (when it creates its session).
        if self.model.is_none() && inbound != Protocol::Cmdc {
            return Err(OptionError::new(
                "model",
                format!(
                    "required: a CMDC gateway creates each session with a model, and {inbound} clients name none"
                ),
            ));
        }
        Ok(())
    }
}
