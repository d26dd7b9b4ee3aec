//! CMDC inbound, the requests: each endpoint's JSON body, read as that endpoint's wire type.

use std::marker::PhantomData;

use http::Response;
use serde::de::DeserializeOwned;

use super::ApiError;
use crate::body::Body;
use crate::face::RequestDecoder;

/// Reads an endpoint's body as `T`, as the gateway does: a blank body is `{}`; a refusal is the gateway's
/// `{"error", "message"}` with its status. The session's runner makes the turn of a prompt.
pub struct Reader<T>(PhantomData<fn() -> T>);

impl<T> Reader<T> {
    pub fn new() -> Self {
        Reader(PhantomData)
    }
}

impl<T> Default for Reader<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: DeserializeOwned> RequestDecoder for Reader<T> {
    type Request = T;
    type Refusal = ApiError;

    fn decode(&self, body: &[u8]) -> Result<T, ApiError> {
        let body: &[u8] = if is_blank(body) { b"{}" } else { body };
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }

    fn refuse(&self, refusal: ApiError) -> Response<Body> {
        refusal.into_response()
    }
}

pub(super) fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}
