//! Each inbound request decoder, reached the way a client reaches it: an HTTP/1.1 POST with a JSON body to a
//! fresh route of that protocol in front of the echo agent (see the harness in src/lib.rs), answer read to
//! the end.
//!
//! Input: one byte picks the endpoint (its value modulo the length of [`ENDPOINTS`]), the rest is the body.
//! Any answer is fine, errors included, except a 5xx: the echo agent never fails, so that would be the proxy
//! blaming itself for a client's input. A panic, or no answer in time, is a finding too.
#![no_main]

use agent_bridge_fuzz::{connect, create_session, exchange, post_json, run};
use libfuzzer_sys::fuzz_target;

/// The route and path of each endpoint; the CMDC ones are in the session of `create_session`.
const ENDPOINTS: &[(&str, &str)] = &[
    ("ag-ui", "/ag-ui"),
    ("a2a", "/a2a"),
    ("agentscope", "/agentscope/process"),
    ("ag-kit", "/ag-kit/send-message"),
    ("cmdc", "/cmdc/v1/sessions"),
    ("cmdc", "/cmdc/v1/sessions/fuzz/prompt"),
    ("cmdc", "/cmdc/v1/sessions/fuzz/tools"),
];

fuzz_target!(|input: &[u8]| {
    let Some((&selector, body)) = input.split_first() else {
        return;
    };
    let (route, path) = ENDPOINTS[usize::from(selector) % ENDPOINTS.len()];
    run(async {
        let mut sender = connect(route).await;
        if route == "cmdc" {
            create_session(&mut sender).await;
        }
        let request = post_json(path, body.to_vec());
        let (status, body) = exchange(&mut sender, request).await;
        assert!(!status.is_server_error(), "{status} {body:?}");
    });
});
