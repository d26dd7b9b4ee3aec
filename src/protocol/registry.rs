//! The protocol registry: one [`Row`] per protocol, and what a route's pair makes of the two rows it joins.
//! Loading a routes file checks each route's `[routes.translate]` against the options types of its pair, and
//! warns about what a pair will not use or cannot carry (DESIGN.md §4: never dropped silently); the lossy
//! crossings themselves are in docs/translation.md.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{a2a, ag_kit, ag_ui, agentscope, cmdc, echo};
use crate::answers;
use crate::config::{Config, ConfigError, Outbound, Protocol, RouteConfig};
use crate::error::{Error, Result};
use crate::face::{DynInbound, DynOutbound, FaceOptions, Options, Row};
use crate::metrics::Metrics;
use crate::route_state::RouteState;
use crate::translate::Losses;
use crate::upstream::Upstream;

/// The `[routes.translate]` options the hub reads on every route, whatever its pair.
const HUB_OPTIONS: Options = Options::of::<answers::Options>();

/// The answer words have no rule of the pair.
impl FaceOptions for answers::Options {}

/// The protocol's row.
pub fn row(protocol: Protocol) -> &'static Row {
    match protocol {
        Protocol::AgUi => &ag_ui::ROW,
        Protocol::A2a => &a2a::ROW,
        Protocol::Agentscope => &agentscope::ROW,
        Protocol::AgKit => &ag_kit::ROW,
        Protocol::Cmdc => &cmdc::ROW,
    }
}

/// Builds the face `route` shows its clients; `local` is the address the proxy listens on.
pub fn inbound(
    route: &RouteConfig,
    local: SocketAddr,
    kept: &RouteState,
) -> Result<Box<dyn DynInbound>> {
    (row(route.inbound).inbound)(route, local, kept)
}

/// Builds how `route` reaches its agent: its upstream's protocol, or the built-in echo agent. The upstream's
/// requests are timed in `metrics`.
pub fn outbound(
    route: &RouteConfig,
    local: SocketAddr,
    kept: &RouteState,
    metrics: &Metrics,
) -> Result<Arc<dyn DynOutbound>> {
    let Outbound::Protocol(protocol) = route.outbound else {
        return Ok(Arc::new(echo::Echo));
    };
    let uri = route
        .upstream
        .clone()
        .ok_or_else(|| Error::config(format!("route `{}` needs an upstream URL", route.name)))?;
    // Kept across reloads: its connection pools live as long as it does (one per serving thread).
    let (headers, connect_timeout) = (&route.upstream_headers, route.connect_timeout);
    let upstream = kept.keep((&uri, headers, connect_timeout), || {
        Upstream::new(uri.clone(), headers.clone(), connect_timeout)
    });
    let upstream =
        Upstream::clone(&upstream).timed(metrics.upstream_first_byte(&route.name, &route.pair()));
    (row(protocol).outbound)(upstream, route, local, kept)
}

/// Every `[routes.translate]` key that the hub or some protocol's face reads, sorted.
pub fn option_keys() -> Vec<&'static str> {
    let faces = Protocol::ALL.into_iter().flat_map(|protocol| {
        [
            row(protocol).inbound_options,
            row(protocol).outbound_options,
        ]
    });
    let mut keys: Vec<&str> = std::iter::once(HUB_OPTIONS)
        .chain(faces)
        .flat_map(|options| (options.keys)().iter().copied())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Checks each route of `config` against its pair's rows: its `[routes.translate]` keys against the options
/// types of the hub and the two faces. An unknown key, a value the pair's types refuse or a rule of the pair
/// is an error, at its file, line and key. What it returns are the warnings, each as `file:line: key path:
/// what`: the options a route sets that its pair does not read (they are ignored), and what each pair cannot
/// carry (DESIGN.md §4: never dropped silently).
pub fn check(config: &Config) -> std::result::Result<Vec<String>, ConfigError> {
    let mut warnings = Vec::new();
    for (index, route) in config.routes.iter().enumerate() {
        let pair = format!("a route from {} to {}", route.inbound, route.outbound);
        let read = pair_options(route);
        for key in route.translate.keys() {
            if read.iter().any(|options| (options.keys)().contains(&key)) {
                continue;
            }
            let line = route.written.translate_line(key);
            let known = option_keys();
            if !known.contains(&key) {
                let expected = known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>();
                let message = format!(
                    "unknown field `{key}`, expected one of {}",
                    expected.join(", ")
                );
                return Err(config.error_at(index, &["translate", key], line, message));
            }
            let at = config.location(index, &["translate", key], line);
            warnings.push(format!("{at}: not read by {pair}; ignored"));
        }
        for options in read {
            (options.check)(&route.translate, route.inbound).map_err(|error| {
                let line = route.written.translate_line(&error.key);
                config.error_at(index, &["translate", &error.key], line, error.message)
            })?;
        }
        let at = config.location(index, &["outbound"], route.written.outbound_line);
        for loss in losses(route) {
            warnings.push(format!("{at}: {pair}: {loss} (docs/translation.md)"));
        }
    }
    Ok(warnings)
}

/// The options the route's hub, inbound and outbound read.
fn pair_options(route: &RouteConfig) -> [Options; 3] {
    let outbound = match route.outbound {
        Outbound::Protocol(protocol) => row(protocol).outbound_options,
        Outbound::Echo => Options::NONE,
    };
    [HUB_OPTIONS, row(route.inbound).inbound_options, outbound]
}

/// What the hub counts of the route's losses as its runs meet them.
pub fn counted_losses(route: &RouteConfig) -> Losses {
    let unsent = match route.outbound {
        Outbound::Protocol(upstream) => row(upstream).unsent,
        Outbound::Echo => &[],
    };
    Losses {
        unshown: row(route.inbound).unshown,
        unsent,
    }
}

/// What the route's clients and agent can say that the other side has no form for.
pub fn losses(route: &RouteConfig) -> Vec<String> {
    let Outbound::Protocol(upstream) = route.outbound else {
        return Vec::new();
    };
    let (inbound, client, agent) = (route.inbound, row(route.inbound), row(upstream));
    let crossings = [
        (
            client.client_tools && !agent.client_tools,
            format!("the tools {inbound} clients offer cannot be offered to an {upstream} agent, and are not sent"),
        ),
        (
            agent.server_tools && !client.server_tools,
            format!("{inbound} clients are not shown the agent's own tool calls, only the text around them"),
        ),
        (
            agent.approvals && !client.approvals,
            format!("the agent's approvals reach {inbound} clients as questions, answered in words"),
        ),
        (
            agent.questions && !client.questions,
            format!("the agent's questions reach {inbound} clients as approval requests, answered by their reason"),
        ),
    ];
    crossings
        .into_iter()
        .filter_map(|(lossy, what)| lossy.then_some(what))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(inbound: &str, outbound: &str, translate: &str) -> String {
        let upstream = match outbound {
            "echo" => String::new(),
            _ => "upstream = \"http://127.0.0.1:9/\"\n".to_owned(),
        };
        format!(
            "[[routes]]\nname = \"{inbound}-{outbound}\"\npath = \"/{inbound}/{outbound}\"\ninbound = \"{inbound}\"\noutbound = \"{outbound}\"\n{upstream}[routes.translate]\n{translate}"
        )
    }

    fn checked(text: &str) -> std::result::Result<Vec<String>, ConfigError> {
        check(&Config::parse(text, "routes.toml").unwrap_or_else(|e| panic!("{e}")))
    }

    fn warnings_of(text: &str) -> Vec<String> {
        checked(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_option_the_pair_does_not_read_is_a_warning_with_its_place() {
        let text = route(
            "ag-ui",
            "echo",
            "agui_reasoning = true\na2a_card = \"auto\"\napproval_words = [\"sure\"]\n",
        );
        assert_eq!(
            warnings_of(&text),
            ["routes.toml:8: routes[0].translate.a2a_card: not read by a route from ag-ui to echo; ignored"]
        );
    }

    #[test]
    fn each_face_reads_its_own_options() {
        let text = route(
            "a2a",
            "a2a",
            "a2a_status_message = true\na2a_card = \"auto\"\n",
        );
        assert_eq!(warnings_of(&text), Vec::<String>::new());
        let text = route("cmdc", "cmdc", "agentscope_session_memory = true\n");
        assert_eq!(
            warnings_of(&text),
            ["routes.toml:8: routes[0].translate.agentscope_session_memory: not read by a route from cmdc to cmdc; ignored"]
        );
    }

    #[test]
    fn each_rows_losses_name_canonical_kinds_and_turn_parts_and_never_text_or_the_run_brackets() {
        for protocol in Protocol::ALL {
            for kind in row(protocol).unshown.iter().copied().flatten() {
                assert!(
                    crate::model::Event::KINDS.contains(kind),
                    "{protocol}: {kind} is no canonical event kind"
                );
            }
            for part in row(protocol).unsent {
                let parts = ["client_tools", "system_messages", "context", "state"];
                assert!(
                    parts.contains(part),
                    "{protocol}: {part} is no part of a turn"
                );
            }
            for always in [
                "run_started",
                "run_finished",
                "run_error",
                "text_delta",
                "interrupt",
            ] {
                assert!(
                    !row(protocol)
                        .unshown
                        .iter()
                        .any(|family| family.contains(&always)),
                    "{protocol}: {always}"
                );
            }
        }
    }

    #[test]
    fn an_unknown_option_is_still_an_error() {
        let error = checked(&route("ag-ui", "echo", "no_such_option = 1\n")).unwrap_err();
        assert_eq!(error.key(), Some("routes[0].translate.no_such_option"));
        assert_eq!(error.line(), Some(7));
        assert!(error.message().starts_with("unknown field `no_such_option`, expected one of `a2a_card`, `a2a_status_message`, `agentscope_session_memory`, `agui_interrupts`"), "{error}");
    }

    /// How the routes file `text` is refused: the line, key and message.
    fn refusal(text: &str) -> (Option<usize>, String, String) {
        let error = checked(text).unwrap_err();
        let key = error.key().unwrap_or_default().to_owned();
        (error.line(), key, error.message().to_owned())
    }

    #[test]
    fn a_value_the_pair_refuses_is_an_error_at_its_key() {
        let (line, key, message) = refusal(&route("ag-ui", "echo", "approval_tool = \"\"\n"));
        assert_eq!(
            (line, key.as_str(), message.as_str()),
            (
                Some(7),
                "routes[0].translate.approval_tool",
                "must not be empty"
            )
        );
        let (line, key, message) = refusal(&route(
            "ag-ui",
            "echo",
            "approval_words = [\"sure\", \"ship it\"]\n",
        ));
        assert_eq!(
            (line, key.as_str()),
            (Some(7), "routes[0].translate.approval_words")
        );
        assert_eq!(
            message,
            "\"ship it\" is not one word; an answer is read word by word"
        );
        let (_, key, message) = refusal(&route("ag-ui", "echo", "agui_interrupts = \"yes\"\n"));
        assert_eq!(key, "routes[0].translate.agui_interrupts");
        assert!(message.starts_with("expected \"auto\", \"tool\" or \"outcome\", not \"yes\""));
        let (_, key, message) = refusal(&route("ag-ui", "a2a", "a2a_card = \"card.json\"\n"));
        assert_eq!(key, "routes[0].translate.a2a_card");
        assert!(message.starts_with("expected \"auto\" or an absolute http(s) URL"));
    }

    #[test]
    fn dotted_option_keys_are_found_at_their_line() {
        let text =
            "[[routes]]\nname = \"r\"\npath = \"/r\"\ninbound = \"ag-ui\"\noutbound = \"echo\"\n\
                    translate.approval_tol = \"x\"\n";
        let (line, key, message) = refusal(text);
        assert_eq!(
            (line, key.as_str()),
            (Some(6), "routes[0].translate.approval_tol")
        );
        assert!(
            message.starts_with("unknown field `approval_tol`"),
            "{message}"
        );
    }

    #[test]
    fn a_route_toward_a_cmdc_gateway_needs_a_model_unless_its_clients_name_one() {
        let (line, key, message) = refusal(&route("ag-ui", "cmdc", ""));
        assert_eq!((line, key.as_str()), (Some(1), "routes[0].translate.model"));
        assert_eq!(
            message,
            "required: a CMDC gateway creates each session with a model, and ag-ui clients name none"
        );
        assert!(
            checked(&route("cmdc", "cmdc", "")).is_ok(),
            "a CMDC client names its model"
        );
        assert!(checked(&route("a2a", "cmdc", "model = \"m\"\n")).is_ok());
    }

    #[test]
    fn every_face_option_type_is_known_by_its_keys() {
        assert_eq!(
            option_keys(),
            [
                "a2a_card",
                "a2a_status_message",
                "agentscope_session_memory",
                "agui_interrupts",
                "agui_protocol_version",
                "agui_reasoning",
                "approval_tool",
                "approval_words",
                "model",
                "proxy_url",
                "question_tool",
                "rejection_words",
            ]
        );
    }

    #[test]
    fn what_a_pair_cannot_carry_is_said_once_per_loss() {
        let tools_lost = warnings_of(&route("ag-ui", "a2a", ""));
        assert_eq!(
            tools_lost,
            ["routes.toml:5: routes[0].outbound: a route from ag-ui to a2a: the tools ag-ui clients offer cannot be offered to an a2a agent, and are not sent (docs/translation.md)"]
        );
        let toward_a2a_clients = warnings_of(&route("a2a", "cmdc", "model = \"m\"\n"));
        assert_eq!(toward_a2a_clients.len(), 2, "{toward_a2a_clients:?}");
        assert!(toward_a2a_clients[0].contains("not shown the agent's own tool calls"));
        assert!(toward_a2a_clients[1].contains("approvals reach a2a clients as questions"));
        let toward_agentscope = warnings_of(&route("agentscope", "ag-kit", ""));
        assert_eq!(toward_agentscope.len(), 1, "{toward_agentscope:?}");
        assert!(toward_agentscope[0]
            .contains("questions reach agentscope clients as approval requests"));
        assert_eq!(
            warnings_of(&route("ag-ui", "ag-ui", "")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn the_shipped_routes_and_the_examples_load_without_an_ignored_option() {
        let files = [
            "routes.toml",
            "examples/agkit-agent-as-agui/routes.toml",
            "examples/cmdc-as-ag-kit/routes.toml",
            "examples/copilotkit-to-a2a/routes.toml",
        ];
        // What the examples' walk-throughs export.
        for (name, value) in [
            ("AGKIT_PORT", "9"),
            ("CMDC_PORT", "9"),
            ("CMDC_API_KEY", "k"),
            ("A2A_PORT", "9"),
        ] {
            std::env::set_var(name, value);
        }
        for file in files {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
            let config = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
            let ignored: Vec<String> = check(&config)
                .unwrap_or_else(|e| panic!("{e}"))
                .into_iter()
                .filter(|warning| warning.ends_with("ignored"))
                .collect();
            assert!(ignored.is_empty(), "{file}: {ignored:?}");
        }
    }
}
