//! The protocol registry: one [`Row`] per protocol, and what a route's pair makes of the two rows it joins.
//! Loading a routes file warns about what a pair will not use or cannot carry (DESIGN.md §4: never dropped
//! silently); the lossy crossings themselves are in docs/translation.md.

use super::{a2a, ag_kit, ag_ui, agentscope, cmdc};
use crate::config::{Config, Outbound, Protocol, RouteConfig};
use crate::face::Row;

/// The `[routes.translate]` options the hub reads on every route, whatever its pair.
const HUB_OPTIONS: &[&str] = &["approval_words", "rejection_words"];

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

/// What loading `config` warns about, each as `file:line: key path: what`: the `[routes.translate]` options a
/// route sets that its pair does not read (they are ignored), and what each pair cannot carry.
pub fn warnings(config: &Config) -> Vec<String> {
    let mut warnings = Vec::new();
    for (index, route) in config.routes.iter().enumerate() {
        let pair = format!("a route from {} to {}", route.inbound, route.outbound);
        for (key, line) in unread_options(route) {
            let at = config.location(index, &["translate", key], line);
            warnings.push(format!("{at}: not read by {pair}; ignored"));
        }
        let at = config.location(index, &["outbound"], route.written.outbound_line);
        for loss in losses(route) {
            warnings.push(format!("{at}: {pair}: {loss} (docs/translation.md)"));
        }
    }
    warnings
}

/// The options the route sets that neither its faces nor the hub read.
fn unread_options(route: &RouteConfig) -> impl Iterator<Item = (&str, usize)> {
    let inbound = row(route.inbound).inbound_options;
    let outbound = match route.outbound {
        Outbound::Protocol(protocol) => row(protocol).outbound_options,
        Outbound::Echo => &[],
    };
    route
        .written
        .translate
        .iter()
        .map(|(key, line)| (key.as_str(), *line))
        .filter(move |(key, _)| {
            ![HUB_OPTIONS, inbound, outbound]
                .iter()
                .any(|read| read.contains(key))
        })
}

/// What the route's clients and agent can say that the other side has no form for.
fn losses(route: &RouteConfig) -> Vec<String> {
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

    fn warnings_of(text: &str) -> Vec<String> {
        warnings(&Config::parse(text, "routes.toml").unwrap_or_else(|e| panic!("{e}")))
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
    fn an_unknown_option_is_still_an_error() {
        let error = Config::parse(
            &route("ag-ui", "echo", "no_such_option = 1\n"),
            "routes.toml",
        )
        .unwrap_err();
        assert_eq!(error.key(), Some("routes[0].translate.no_such_option"));
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
            let ignored: Vec<String> = warnings(&config)
                .into_iter()
                .filter(|warning| warning.ends_with("ignored"))
                .collect();
            assert!(ignored.is_empty(), "{file}: {ignored:?}");
        }
    }
}
