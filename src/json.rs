//! Serde helpers the protocols' wire types and request readers share. A leaf: it knows no protocol.

use serde::de::DeserializeOwned;

use crate::error::Error;

/// Reads `null` as the type's default: peers write `null` for absent fields.
pub fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    Ok(<Option<T> as serde::Deserialize>::deserialize(deserializer)?.unwrap_or_default())
}

/// A request body read as `T`; the refusal names `what` the body should be and, below its top level, where
/// it is not (``invalid RunAgentInput at `messages[0].role`: …``).
pub fn from_body<T: DeserializeOwned>(body: &[u8], what: &str) -> crate::error::Result<T> {
    let deserializer = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || inner.is_syntax() || inner.is_eof() {
            Error::bad_request(format!("invalid {what}: {inner}"))
        } else {
            Error::bad_request(format!("invalid {what} at `{path}`: {inner}"))
        }
    })
}
