//! The integration tests: one test binary (`cargo test --test it`), one module per area, all sharing
//! [`support`]. One binary links the library and the dependencies once instead of once per test file, and
//! runs every test in one process, so no test may change process-wide state that another test reads:
//! environment variables are set only under names no other test uses (`AGENT_BRIDGE_<AREA>_TEST_*`), and
//! logs are captured by a subscriber that is the test thread's default (`security::captured_logs`), never a
//! global one.
//!
//! Run one area with a filter: `cargo test --test it matrix::`, `cargo test --test it interop_`.

mod support;

mod a2a_inbound;
mod a2a_inbound_codec;
mod a2a_outbound_codec;
mod a2a_pairs;
mod admin;
mod ag_kit_a2a_pairs;
mod ag_kit_agentscope_pairs;
mod ag_kit_agui_pairs;
mod ag_kit_inbound;
mod ag_ui_codec;
mod ag_ui_pairs;
mod agentscope_inbound;
mod agentscope_inbound_codec;
mod agentscope_outbound;
mod agentscope_outbound_codec;
mod agentscope_pairs;
mod bounds;
mod cmdc_inbound;
mod cmdc_inbound_pairs;
mod cmdc_outbound_pairs;
mod detach;
mod encoder_golden;
mod examples;
mod faults;
mod http_errors;
mod interop_a2a;
mod interop_ag_kit;
mod interop_ag_ui;
mod interop_agentscope;
mod interop_cmdc;
mod logs;
mod matrix;
mod reload;
mod request_decoders;
mod security;
mod shutdown;
mod stores;
mod telemetry;
mod translation_table;
