//! The routes.toml loader: `Config::parse` on any text, every error rendered as `agent-bridge check` prints
//! it, and every route of a file that parses built as the server builds it (with a memory store, so that
//! no input opens files or connections).
#![no_main]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_bridge::config::Config;
use agent_bridge::route::Route;
use agent_bridge::store::MemoryStore;
use agent_bridge::translate::Runs;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    let config = match Config::parse(text, "routes.toml") {
        Ok(config) => config,
        Err(error) => {
            let _ = error.to_string();
            return;
        }
    };
    let store = Arc::new(MemoryStore::new(Duration::from_secs(3600)));
    let local = SocketAddr::from(([127, 0, 0, 1], 8080));
    let runs = Runs::unowned();
    for route in &config.routes {
        if let Err(error) = Route::from_config(route, store.clone(), local, &runs) {
            let _ = error.to_string();
        }
    }
});
