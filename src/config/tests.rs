use http::{HeaderName, HeaderValue, Uri};

use super::error::line_of;
use super::*;

const FULL: &str = include_str!("../../tests/fixtures/config/full.toml");

/// `[routes.translate]` as `text` writes it.
fn table(text: &str) -> Translate {
    Translate(toml::from_str(text).unwrap())
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, "routes.toml")
}

/// Parses `text`, expects an error at `line` and `key` whose message contains `fragment`,
/// and checks the rendered form names all three.
#[track_caller]
fn assert_error(text: &str, line: usize, key: &str, fragment: &str) -> ConfigError {
    let err = match parse(text) {
        Ok(config) => panic!("expected an error at {key}, parsed {config:?}"),
        Err(err) => err,
    };
    let rendered = err.to_string();
    assert_eq!(err.file(), "routes.toml", "{rendered}");
    assert_eq!(err.line(), Some(line), "{rendered}");
    assert_eq!(err.key(), Some(key), "{rendered}");
    assert!(err.message().contains(fragment), "{rendered}");
    assert!(
        rendered.starts_with(&format!("routes.toml:{line}: {key}: ")),
        "{rendered}"
    );
    err
}

/// A one-route file with `extra` appended to the route table (which starts on line 1).
fn route_with(extra: &str) -> String {
    format!(
        "[[routes]]\nname = \"r\"\npath = \"/r\"\ninbound = \"ag-ui\"\noutbound = \"a2a\"\n\
         upstream = \"http://127.0.0.1:9001/\"\n{extra}"
    )
}

/// Line 7 is the first line of `extra` in [`route_with`].
const EXTRA: usize = 7;

fn header(name: &'static str, value: &str) -> (HeaderName, HeaderValue) {
    (
        HeaderName::from_static(name),
        HeaderValue::from_str(value).expect("valid test header"),
    )
}

#[test]
fn full_file_parses_into_expected_structs() {
    std::env::set_var("WEATHER_AGENT_KEY", "weather-secret");
    let file = "tests/fixtures/config/full.toml";
    let config = Config::load(Path::new(file)).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(config.source, file);
    assert_eq!(
        config,
        Config::parse(FULL, file).expect("same text parses the same")
    );
    assert_eq!(config.listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(config.store, StoreConfig::default());

    let weather = &config.routes[0];
    let expected = RouteConfig {
        name: "copilot-to-weather".into(),
        path: "/agents/weather".into(),
        inbound: Protocol::AgUi,
        outbound: Outbound::Protocol(Protocol::A2a),
        upstream: Some(Uri::from_static("http://127.0.0.1:9001/")),
        timeout: Duration::from_secs(120),
        connect_timeout: Duration::from_secs(10),
        max_body: 1 << 20,
        upstream_headers: vec![header("authorization", "Bearer weather-secret")],
        translate: table("approval_tool = \"confirmAction\"\nmodel = \"deepseek:deepseek-chat\""),
        card: Some(Card {
            name: Some("Weather agent".into()),
            description: Some("Answers weather questions".into()),
            version: None,
            skills: vec![Skill {
                id: "weather".into(),
                name: "Weather".into(),
                description: Some("Current weather by city".into()),
                tags: vec![],
                examples: vec![],
            }],
        }),
        api_keys: vec![],
        rate_limit: None,
        rate_limit_ip: None,
        card_auth: false,
        cors_origins: vec![],
        jwt: None,
        quota: Quota::default(),
        callback_allow: vec![],
        body_timeout: Duration::from_secs(30),
        ws_idle: None,
        detach_grace: Duration::ZERO,
        run_buffer: None,
        written: Written {
            route_line: 10,
            outbound_line: 14,
            translate: vec![("approval_tool".into(), 20), ("model".into(), 21)],
        },
    };
    assert_eq!(*weather, expected);

    let echo = &config.routes[1];
    assert_eq!(echo.name, "try-echo");
    assert_eq!(echo.path, "/echo/a2a");
    assert_eq!(echo.inbound, Protocol::A2a);
    assert_eq!(echo.outbound, Outbound::Echo);
    assert_eq!(echo.upstream, None);
    assert_eq!(echo.timeout, Duration::from_millis(2500));
    assert_eq!(echo.connect_timeout, Duration::from_secs(3));
    assert_eq!(echo.max_body, 512 * 1024);
    assert_eq!(
        echo.translate,
        table("question_tool = \"askHuman\"\nagui_interrupts = \"outcome\"\nagui_protocol_version = \"1.0\"")
    );
    let card = echo.card.as_ref().expect("echo route has a card");
    assert_eq!(card.version.as_deref(), Some("0.1.0"));
    assert_eq!(card.skills[0].tags, ["echo", "test"]);
    assert_eq!(card.skills[0].examples, ["hello"]);
}

#[test]
fn upstream_header_values_are_sensitive() {
    let config = parse(&route_with("[routes.upstream_headers]\nX-Key = \"k\"\n")).unwrap();
    assert!(config.routes[0].upstream_headers[0].1.is_sensitive());
}

#[test]
fn empty_file_takes_every_default() {
    let config = parse("").unwrap();
    assert_eq!(config.listen, DEFAULT_LISTEN.parse().unwrap());
    assert_eq!(config.store.backend, StoreBackend::Memory);
    assert_eq!(config.store.idle_ttl, Duration::from_secs(86_400));
    assert!(config.routes.is_empty());
    let connections = config.connections;
    assert_eq!(connections.header_read_timeout, Duration::from_secs(10));
    assert_eq!(connections.keepalive_idle, Duration::from_secs(60));
    assert_eq!(connections.max_connections, 10_000);
}

#[test]
fn connection_limits_are_read_from_the_top_level() {
    let text = "header_read_timeout = \"2s\"\nkeepalive_idle = \"90s\"\nmax_connections = 3\n";
    let connections = parse(text).unwrap().connections;
    assert_eq!(
        connections,
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(2),
            keepalive_idle: Duration::from_secs(90),
            max_connections: 3,
        }
    );
}

#[test]
fn bad_connection_limits_name_file_line_and_key() {
    let text = "listen = \"127.0.0.1:1\"\nheader_read_timeout = \"soon\"\n";
    assert_error(text, 2, "header_read_timeout", "invalid duration \"soon\"");
    assert_error(
        "\nkeepalive_idle = \"0s\"\n",
        2,
        "keepalive_idle",
        "greater than zero",
    );
    assert_error(
        "max_connections = 0\n",
        1,
        "max_connections",
        "positive number of connections",
    );
}

#[test]
fn route_body_timeout_and_ws_idle_are_read_and_checked() {
    let cmdc = |extra: &str| route_with(extra).replace("ag-ui", "cmdc");
    let route = &parse(&cmdc("body_timeout = \"5s\"\nws_idle = \"2m\"\n"))
        .unwrap()
        .routes[0];
    assert_eq!(route.body_timeout, Duration::from_secs(5));
    assert_eq!(route.ws_idle, Some(Duration::from_secs(120)));
    assert_error(
        &route_with("body_timeout = \"-1s\"\n"),
        EXTRA,
        "routes[0].body_timeout",
        "invalid duration",
    );
    assert_error(
        &route_with("ws_idle = \"10s\"\n"),
        EXTRA,
        "routes[0].ws_idle",
        "only cmdc inbound routes serve a WebSocket",
    );
}

#[test]
fn store_sizes_are_read_and_checked() {
    let store = parse("[store]\nmax_record = \"1MiB\"\nmax_bytes = \"64MiB\"\n")
        .unwrap()
        .store;
    assert_eq!((store.max_record, store.max_bytes), (1 << 20, 64 << 20));
    assert_error(
        "[store]\nmax_record = \"2MiB\"\nmax_bytes = \"1MiB\"\n",
        2,
        "store.max_record",
        "larger than store.max_bytes",
    );
    assert_error(
        "[store]\nmax_bytes = 0\n",
        2,
        "store.max_bytes",
        "greater than zero",
    );
}

#[test]
fn run_buffer_is_a_cmdc_byte_size() {
    let cmdc = |extra: &str| route_with(extra).replace("ag-ui", "cmdc");
    let route = &parse(&cmdc("run_buffer = \"2MiB\"\n")).unwrap().routes[0];
    assert_eq!(route.run_buffer, Some(2 << 20));
    assert_error(
        &cmdc("run_buffer = 0\n"),
        EXTRA,
        "routes[0].run_buffer",
        "greater than zero",
    );
    assert_error(
        &route_with("run_buffer = \"1MiB\"\n"),
        EXTRA,
        "routes[0].run_buffer",
        "only with detach_grace above zero",
    );
}

#[test]
fn detach_grace_is_off_by_default_may_be_zero_and_is_for_the_inbounds_that_resume_by_last_event_id()
{
    let route = &parse(&route_with("")).unwrap().routes[0];
    assert_eq!(route.detach_grace, Duration::ZERO);
    let kept = "detach_grace = \"30s\"\nrun_buffer = \"1MiB\"\n";
    let route = &parse(&route_with(kept)).unwrap().routes[0];
    assert_eq!(
        (route.detach_grace, route.run_buffer),
        (Duration::from_secs(30), Some(1 << 20))
    );
    assert_eq!(
        parse(&route_with("detach_grace = \"0s\"\n"))
            .unwrap()
            .routes[0]
            .detach_grace,
        Duration::ZERO
    );
    assert_error(
        &route_with("detach_grace = \"30s\"\n").replace("ag-ui", "a2a"),
        EXTRA,
        "routes[0].detach_grace",
        "tasks/resubscribe",
    );
}

#[test]
fn route_omitting_optional_keys_takes_defaults() {
    let text = "[[routes]]\nname = \"e\"\npath = \"/e\"\ninbound = \"cmdc\"\noutbound = \"echo\"\n";
    let route = &parse(text).unwrap().routes[0];
    assert_eq!(route.timeout, Duration::from_secs(120));
    assert_eq!(route.connect_timeout, Duration::from_secs(10));
    assert_eq!(route.max_body, 1024 * 1024);
    assert_eq!(route.body_timeout, Duration::from_secs(30));
    assert_eq!(route.ws_idle, None);
    assert!(route.upstream_headers.is_empty());
    assert_eq!(route.translate, Translate::default());
    assert_eq!(route.card, None);
}

#[test]
fn default_listen_matches_the_constant() {
    assert_eq!(default_listen().to_string(), DEFAULT_LISTEN);
    assert_eq!(default_admin_listen().to_string(), DEFAULT_ADMIN_LISTEN);
}

#[test]
fn store_backends_take_their_settings() {
    let redb = parse("[store]\nbackend = \"redb\"\npath = \"data/c.redb\"\nidle_ttl = 90\n")
        .unwrap()
        .store;
    assert_eq!(redb.backend, StoreBackend::Redb);
    assert_eq!(redb.path, Some(PathBuf::from("data/c.redb")));
    assert_eq!(redb.idle_ttl, Duration::from_secs(90));
    let redis = parse("[store]\nbackend = \"redis\"\nurl = \"rediss://cache:6380/0\"\n")
        .unwrap()
        .store;
    assert_eq!(redis.url.as_deref(), Some("rediss://cache:6380/0"));
}

#[test]
fn protocol_names_round_trip() {
    for protocol in Protocol::ALL {
        assert_eq!(Protocol::from_name(protocol.name()), Some(protocol));
        let text = route_with("").replace("\"ag-ui\"", &format!("{:?}", protocol.name()));
        assert_eq!(parse(&text).unwrap().routes[0].inbound, protocol);
    }
    assert_eq!(Outbound::Echo.name(), "echo");
    assert_eq!(Outbound::Protocol(Protocol::AgKit).to_string(), "ag-kit");
}

#[test]
fn durations_accept_units_and_integer_seconds() {
    let cases = [
        ("250ms", Duration::from_millis(250)),
        ("30s", Duration::from_secs(30)),
        ("2m", Duration::from_secs(120)),
        ("1h", Duration::from_secs(3600)),
        ("24h", Duration::from_secs(86_400)),
        ("1d", Duration::from_secs(86_400)),
        ("45", Duration::from_secs(45)),
    ];
    for (text, expected) in cases {
        assert_eq!(de::parse_duration(text), Some(expected), "{text}");
    }
    for bad in [
        "",
        "s",
        "12x",
        "1.5s",
        "-1s",
        " 1s",
        "1 s",
        "99999999999999999999d",
    ] {
        assert_eq!(de::parse_duration(bad), None, "{bad:?}");
    }
    let route = parse(&route_with("timeout = 7\n")).unwrap();
    assert_eq!(route.routes[0].timeout, Duration::from_secs(7));
}

#[test]
fn sizes_accept_units_and_integer_bytes() {
    let cases = [
        ("512KiB", 512 * 1024),
        ("1MiB", 1 << 20),
        ("2MB", 2_000_000),
        ("10kb", 10_000),
        ("1GiB", 1 << 30),
        ("100", 100),
        ("100B", 100),
    ];
    for (text, expected) in cases {
        assert_eq!(de::parse_size(text), Some(expected), "{text}");
    }
    for bad in ["", "MiB", "1.5MiB", "1 MiB", "1TB", "-1"] {
        assert_eq!(de::parse_size(bad), None, "{bad:?}");
    }
    let route = parse(&route_with("max_body = 4096\n")).unwrap();
    assert_eq!(route.routes[0].max_body, 4096);
}

#[test]
fn env_vars_expand_and_dollars_stay_literal() {
    std::env::set_var("AGENT_BRIDGE_CONFIG_TEST_TOKEN", "t0k$n");
    let expand = |raw: &str| de::expand_env(raw);
    assert_eq!(
        expand("a ${AGENT_BRIDGE_CONFIG_TEST_TOKEN} b").unwrap(),
        "a t0k$n b"
    );
    assert_eq!(
        expand("$$${AGENT_BRIDGE_CONFIG_TEST_TOKEN}").unwrap(),
        "$t0k$n"
    );
    assert_eq!(expand("$${NOT_EXPANDED}").unwrap(), "${NOT_EXPANDED}");
    assert_eq!(expand("cost $5 $").unwrap(), "cost $5 $");
    assert!(expand("${UNTERMINATED")
        .unwrap_err()
        .contains("unterminated"));
    assert!(expand("${1BAD}").unwrap_err().contains("invalid"));
    assert!(expand("${}").unwrap_err().contains("invalid"));
}

#[test]
fn env_vars_expand_in_upstream_headers_and_store_url() {
    std::env::set_var("AGENT_BRIDGE_CONFIG_TEST_HOST", "agent.internal:9443");
    std::env::set_var("AGENT_BRIDGE_CONFIG_TEST_KEY", "s3cret");
    let text = "[store]\nbackend = \"redis\"\nurl = \"redis://${AGENT_BRIDGE_CONFIG_TEST_HOST}\"\n"
        .to_owned()
        + &route_with(
            "[routes.upstream_headers]\nX-Api-Key = \"${AGENT_BRIDGE_CONFIG_TEST_KEY}\"\n",
        )
        .replace(
            "http://127.0.0.1:9001/",
            "https://${AGENT_BRIDGE_CONFIG_TEST_HOST}/rpc",
        );
    let config = parse(&text).unwrap();
    assert_eq!(
        config.store.url.as_deref(),
        Some("redis://agent.internal:9443")
    );
    let route = &config.routes[0];
    assert_eq!(
        route.upstream,
        Some(Uri::from_static("https://agent.internal:9443/rpc"))
    );
    assert_eq!(route.upstream_headers, [header("x-api-key", "s3cret")]);
}

#[test]
fn unset_env_var_is_an_error_naming_it() {
    let unset = "AGENT_BRIDGE_CONFIG_TEST_UNSET_7F3A";
    std::env::remove_var(unset);
    let upstream =
        route_with("").replace("http://127.0.0.1:9001/", &format!("http://${{{unset}}}/"));
    assert_error(&upstream, 6, "routes[0].upstream", unset);
    let headers = route_with(&format!(
        "[routes.upstream_headers]\nAuthorization = \"Bearer ${{{unset}}}\"\n"
    ));
    assert_error(
        &headers,
        EXTRA + 1,
        "routes[0].upstream_headers.Authorization",
        &format!("environment variable {unset} is not set"),
    );
    let store = format!("[store]\nbackend = \"redis\"\nurl = \"redis://${{{unset}}}\"\n");
    assert_error(&store, 3, "store.url", unset);
}

#[test]
fn error_display_names_file_line_and_key() {
    let err = assert_error(
        &route_with("timeout = \"12x\"\n"),
        EXTRA,
        "routes[0].timeout",
        "",
    );
    assert_eq!(
        err.to_string(),
        format!(
            "routes.toml:{EXTRA}: routes[0].timeout: invalid duration \"12x\" \
             (expected e.g. \"30s\", \"2m\", \"1h\", \"250ms\")"
        )
    );
}

#[test]
fn zero_or_negative_durations_are_rejected() {
    assert_error(
        &route_with("timeout = \"0s\"\n"),
        EXTRA,
        "routes[0].timeout",
        "greater than zero",
    );
    assert_error(
        &route_with("connect_timeout = 0\n"),
        EXTRA,
        "routes[0].connect_timeout",
        "greater than zero",
    );
    assert_error(
        &route_with("timeout = -5\n"),
        EXTRA,
        "routes[0].timeout",
        "invalid duration -5",
    );
    assert_error(
        "[store]\nidle_ttl = \"0ms\"\n",
        2,
        "store.idle_ttl",
        "greater than zero",
    );
    assert_error(
        &route_with("timeout = true\n"),
        EXTRA,
        "routes[0].timeout",
        "invalid type",
    );
}

#[test]
fn bad_max_body_is_rejected() {
    assert_error(
        &route_with("max_body = \"1 MiB\"\n"),
        EXTRA,
        "routes[0].max_body",
        "invalid size \"1 MiB\"",
    );
    assert_error(
        &route_with("max_body = 0\n"),
        EXTRA,
        "routes[0].max_body",
        "greater than zero",
    );
    assert_error(
        &route_with("max_body = -1\n"),
        EXTRA,
        "routes[0].max_body",
        "invalid size -1",
    );
}

#[test]
fn unknown_keys_are_rejected_everywhere() {
    assert_error(
        "lissen = \"127.0.0.1:1\"\n",
        1,
        "lissen",
        "unknown field `lissen`",
    );
    assert_error(
        "[store]\nbackend = \"memory\"\nttl = \"1h\"\n",
        3,
        "store.ttl",
        "unknown field",
    );
    assert_error(
        &route_with("retries = 3\n"),
        EXTRA,
        "routes[0].retries",
        "unknown field",
    );
    let skills = route_with("[routes.card]\nskills = [\n  { id = \"a\", name = \"A\" },\n  { id = \"b\", nme = \"B\" },\n]\n");
    assert_error(
        &skills,
        EXTRA + 3,
        "routes[0].card.skills[1].nme",
        "unknown field `nme`",
    );
}

#[test]
fn errors_under_dotted_keys_name_the_full_path() {
    let text = route_with("card.nme = \"x\"\n");
    assert_error(&text, EXTRA, "routes[0].card.nme", "unknown field");
}

#[test]
fn missing_required_keys_name_the_key_at_its_table() {
    let text =
        "[[routes]]\nname = \"a\"\npath = \"/a\"\ninbound = \"ag-ui\"\noutbound = \"echo\"\n\
                [[routes]]\npath = \"/b\"\ninbound = \"ag-ui\"\noutbound = \"echo\"\n";
    assert_error(text, 6, "routes[1].name", "missing field `name`");
    let first = text.replacen("name = \"a\"\n", "", 1);
    assert_error(&first, 1, "routes[0].name", "missing field `name`");
    let skill = route_with("[routes.card]\nskills = [{ id = \"a\" }]\n").replace("ag-ui", "a2a");
    assert_error(
        &skill,
        EXTRA + 1,
        "routes[0].card.skills[0].name",
        "missing field `name`",
    );
}

#[test]
fn protocols_must_be_known_and_inbound_cannot_be_echo() {
    let text = route_with("").replace("inbound = \"ag-ui\"", "inbound = \"echo\"");
    assert_error(&text, 4, "routes[0].inbound", "unknown variant `echo`");
    let text = route_with("").replace("outbound = \"a2a\"", "outbound = \"grpc\"");
    assert_error(&text, 5, "routes[0].outbound", "unknown variant `grpc`");
}

#[test]
fn upstream_is_required_unless_echo() {
    let text = route_with("").replace("upstream = \"http://127.0.0.1:9001/\"\n", "");
    assert_error(&text, 1, "routes[0].upstream", "required for outbound a2a");
}

#[test]
fn echo_routes_reject_upstream_settings() {
    let text = route_with("").replace("\"a2a\"", "\"echo\"");
    assert_error(&text, 6, "routes[0].upstream", "echo has no upstream");
    let text =
        "[[routes]]\nname = \"e\"\npath = \"/e\"\ninbound = \"ag-ui\"\noutbound = \"echo\"\n\
                [routes.upstream_headers]\nX-A = \"b\"\n";
    assert_error(
        text,
        6,
        "routes[0].upstream_headers",
        "echo has no upstream",
    );
}

#[test]
fn upstream_must_be_an_absolute_http_url() {
    for bad in [
        "ftp://host/x",
        "/relative",
        "127.0.0.1:9001",
        "http://",
        "not a url",
    ] {
        let text = route_with("").replace("http://127.0.0.1:9001/", bad);
        assert_error(&text, 6, "routes[0].upstream", bad);
    }
    let text = route_with("").replace("http://", "http://user:pw@");
    assert_error(&text, 6, "routes[0].upstream", "credentials");
}

#[test]
fn header_names_and_values_must_be_valid() {
    let name = route_with("[routes.upstream_headers]\n\"Bad Name\" = \"x\"\n");
    assert_error(
        &name,
        EXTRA + 1,
        "routes[0].upstream_headers.\"Bad Name\"",
        "invalid header name",
    );
    let value = route_with("[routes.upstream_headers]\nX-Ok = \"line\\nbreak\"\n");
    assert_error(
        &value,
        EXTRA + 1,
        "routes[0].upstream_headers.X-Ok",
        "invalid header value",
    );
    let managed = route_with("[routes.upstream_headers]\nContent-Length = \"5\"\n");
    assert_error(
        &managed,
        EXTRA + 1,
        "routes[0].upstream_headers.Content-Length",
        "managed by the proxy",
    );
}

#[test]
fn route_names_must_be_unique_and_non_empty() {
    let text = route_with("").replace("name = \"r\"", "name = \" \"");
    assert_error(&text, 2, "routes[0].name", "must not be empty");
    let twice = format!("{}{}", route_with(""), route_with("").replace("/r", "/s"));
    assert_error(
        &twice,
        8,
        "routes[1].name",
        "duplicate route name \"r\" (also routes[0])",
    );
}

#[test]
fn route_paths_must_be_well_formed_and_unique() {
    let cases = [
        ("agents", "must start with"),
        ("/agents/", "must not end with"),
        ("/a?x=1", "query"),
        ("/a#frag", "fragment"),
        ("/a//b", "empty"),
        ("/a/../b", "\"..\""),
        ("/a b", "characters"),
    ];
    for (path, fragment) in cases {
        let text = route_with("").replace("\"/r\"", &format!("{path:?}"));
        assert_error(&text, 3, "routes[0].path", fragment);
    }
    let twice = format!(
        "{}{}",
        route_with(""),
        route_with("").replace("\"r\"", "\"s\"")
    );
    assert_error(&twice, 9, "routes[1].path", "duplicate route path \"/r\"");
    let root = route_with("").replace("\"/r\"", "\"/\"");
    assert_eq!(Config::parse(&root, "t.toml").unwrap().routes[0].path, "/");
}

#[test]
fn store_backends_require_and_reject_their_keys() {
    assert_error(
        "[store]\nbackend = \"redb\"\n",
        1,
        "store.path",
        "required for redb",
    );
    assert_error(
        "[store]\nbackend = \"redis\"\n",
        1,
        "store.url",
        "required for redis",
    );
    assert_error(
        "[store]\nbackend = \"redis\"\nurl = \"http://cache\"\n",
        3,
        "store.url",
        "redis://",
    );
    assert_error(
        "[store]\nurl = \"redis://cache\"\n",
        2,
        "store.url",
        "only used by the redis backend",
    );
    assert_error(
        "[store]\npath = \"x.redb\"\n",
        2,
        "store.path",
        "only used by the redb backend",
    );
    assert_error(
        "[store]\nbackend = \"sqlite\"\n",
        2,
        "store.backend",
        "unknown variant `sqlite`",
    );
    assert_error(
        "store.backend = \"redb\"\n",
        1,
        "store.path",
        "required for redb",
    );
}

#[test]
fn listen_must_be_a_socket_address() {
    assert_error(
        "listen = \"localhost:8080\"\n",
        1,
        "listen",
        "invalid socket address",
    );
}

#[test]
fn every_inbound_takes_api_keys_bound_to_tenants_and_rate_limits() {
    std::env::set_var("AGENT_BRIDGE_CONFIG_TEST_CMDC_KEY", "sk-from-env");
    let text = route_with(
        "rate_limit = 30\nrate_limit_ip = 120\n[routes.api_keys]\n\"sk-a\" = \"acme\"\n\"${AGENT_BRIDGE_CONFIG_TEST_CMDC_KEY}\" = \"globex\"\n",
    );
    let route = &parse(&text).unwrap_or_else(|e| panic!("{e}")).routes[0];
    assert_eq!(
        route.api_keys,
        [
            ("sk-a".to_owned(), "acme".to_owned()),
            ("sk-from-env".to_owned(), "globex".to_owned())
        ]
    );
    assert_eq!(route.rate_limit.map(|n| n.get()), Some(30));
    assert_eq!(route.rate_limit_ip.map(|n| n.get()), Some(120));
    let plain = parse(&route_with("")).unwrap();
    assert!(plain.routes[0].api_keys.is_empty());
    assert_eq!(plain.routes[0].rate_limit, None);
    assert_eq!(plain.routes[0].rate_limit_ip, None);
    assert!(!plain.routes[0].card_auth);
}

#[test]
fn cors_origins_and_callback_allow_are_read_and_checked() {
    let text = route_with(
        "cors_origins = [\"https://app.example\", \"http://localhost:3000\"]\n\
         callback_allow = [\"127.0.0.1\", \"10.0.0.0/8\", \"tools.internal:443\"]\n",
    )
    .replace("ag-ui", "cmdc");
    let route = &parse(&text).unwrap_or_else(|e| panic!("{e}")).routes[0];
    assert_eq!(
        route.cors_origins,
        ["https://app.example", "http://localhost:3000"]
    );
    let allowed: Vec<String> = route.callback_allow.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        allowed,
        ["127.0.0.1/32", "10.0.0.0/8", "tools.internal:443"]
    );
    for bad in [
        "*",
        "https://app.example/",
        "app.example",
        "https://u@app.example",
    ] {
        assert_error(
            &route_with(&format!("cors_origins = [{bad:?}]\n")),
            EXTRA,
            "routes[0].cors_origins",
            "invalid origin",
        );
    }
    let cmdc = |extra: &str| route_with(extra).replace("ag-ui", "cmdc");
    assert_error(
        &cmdc("callback_allow = [\"10.0.0.0/33\"]\n"),
        EXTRA,
        "routes[0].callback_allow",
        "invalid callback_allow entry \"10.0.0.0/33\"",
    );
    assert_error(
        &route_with("callback_allow = [\"127.0.0.1\"]\n"),
        EXTRA,
        "routes[0].callback_allow",
        "only cmdc inbound routes",
    );
}

const RSA_PUBLIC_KEY: &str = include_str!("../../tests/fixtures/jwt/rsa1.pub.pem");

#[test]
fn jwt_is_read_with_its_defaults() {
    let text = route_with(&format!(
        "[routes.jwt]\nissuer = \"https://auth.example\"\naudience = \"agent-bridge\"\n\
         algorithms = [\"RS256\", \"PS256\"]\npublic_key = '''\n{RSA_PUBLIC_KEY}'''\n"
    ));
    let jwt = parse(&text).unwrap_or_else(|e| panic!("{e}")).routes[0]
        .jwt
        .clone()
        .expect("[routes.jwt]");
    assert_eq!(jwt.tenant_claim, "sub");
    assert_eq!(jwt.jwks_refresh, Duration::from_secs(60));
    assert_eq!(
        jwt.algorithms,
        [
            jsonwebtoken::Algorithm::RS256,
            jsonwebtoken::Algorithm::PS256
        ]
    );
    let jwks = route_with(
        "[routes.jwt]\nissuer = \"i\"\naudience = \"a\"\nalgorithms = [\"ES256\"]\n\
         jwks_url = \"http://127.0.0.1:9/jwks\"\ntenant_claim = \"org\"\n",
    );
    let jwt = parse(&jwks).unwrap_or_else(|e| panic!("{e}")).routes[0]
        .jwt
        .clone()
        .expect("[routes.jwt]");
    assert_eq!(jwt.tenant_claim, "org");
    assert!(jwt.public_key.is_none());
}

#[test]
fn jwt_configs_that_would_accept_forgeries_are_refused_at_load() {
    let jwt = |body: &str| {
        route_with(&format!(
            "[routes.jwt]\nissuer = \"i\"\naudience = \"a\"\n{body}"
        ))
    };
    let key = EXTRA + 3;
    for algorithms in ["[\"none\"]", "[\"HS256\"]", "[\"RS256\", \"HS512\"]", "[]"] {
        assert_error(
            &jwt(&format!(
                "algorithms = {algorithms}\njwks_url = \"https://auth.example/jwks\"\n"
            )),
            key,
            "routes[0].jwt.algorithms",
            "",
        );
    }
    assert_error(
        &jwt("algorithms = [\"RS256\"]\njwks_url = \"http://auth.example/jwks\"\n"),
        key + 1,
        "routes[0].jwt.jwks_url",
        "https",
    );
    assert_error(
        &jwt("algorithms = [\"RS256\"]\n"),
        EXTRA,
        "routes[0].jwt.jwks_url",
        "set jwks_url or public_key",
    );
    // An RSA key cannot check ES256 signatures.
    assert_error(
        &jwt(&format!(
            "algorithms = [\"ES256\"]\npublic_key = '''\n{RSA_PUBLIC_KEY}'''\n"
        )),
        key + 1,
        "routes[0].jwt.public_key",
        "ES256",
    );
    assert_error(
        &jwt("algorithms = [\"RS256\"]\npublic_key = \"x\"\njwks_url = \"https://a/j\"\n"),
        key + 1,
        "routes[0].jwt.public_key",
        "not both",
    );
}

#[test]
fn quotas_are_read_for_the_inbounds_that_keep_them() {
    let cmdc = |extra: &str| route_with(extra).replace("ag-ui", "cmdc");
    let route = &parse(&cmdc("[routes.quota]\nsessions = 3\n"))
        .unwrap()
        .routes[0];
    assert_eq!(route.quota.sessions.map(|n| n.get()), Some(3));
    assert_eq!(route.quota.tasks, None);
    assert_error(
        &cmdc("[routes.quota]\nsessions = 0\n"),
        EXTRA + 1,
        "routes[0].quota.sessions",
        "positive",
    );
    assert_error(
        &cmdc("[routes.quota]\ntasks = 3\n"),
        EXTRA + 1,
        "routes[0].quota.tasks",
        "only a2a inbound routes keep tasks",
    );
    assert_error(
        &cmdc("[routes.quota]\nrequests = 3\n"),
        EXTRA + 1,
        "routes[0].quota.requests",
        "unknown field",
    );
    let route = &parse(&route_with(
        "[routes.quota]\nconversations = 5\nstreams = 2\n",
    ))
    .unwrap()
    .routes[0];
    assert_eq!(route.quota.conversations.map(|n| n.get()), Some(5));
    assert_eq!(route.quota.streams.map(|n| n.get()), Some(2));
}

#[test]
fn trusted_proxies_take_ips_and_cidr_blocks() {
    let config = parse(&format!(
        "trusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\", \"::1\"]\n{}",
        route_with("")
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let proxies: Vec<String> = config
        .trusted_proxies
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(proxies, ["127.0.0.1/32", "10.0.0.0/8", "::1/128"]);
    assert!(parse(&route_with("")).unwrap().trusted_proxies.is_empty());
    assert_error(
        &format!("trusted_proxies = [\"10.0.0.0/33\"]\n{}", route_with("")),
        1,
        "trusted_proxies",
        "invalid trusted_proxies entry",
    );
}

#[test]
fn api_keys_rate_limits_and_card_auth_are_checked() {
    assert_error(
        &route_with("rate_limit_ip = -1\n"),
        EXTRA,
        "routes[0].rate_limit_ip",
        "positive number",
    );
    assert_error(
        &route_with("card_auth = true\n[routes.api_keys]\n\"sk-a\" = \"acme\"\n"),
        EXTRA,
        "routes[0].card_auth",
        "only a2a inbound routes",
    );
    let a2a = |extra: &str| route_with(extra).replace("ag-ui", "a2a");
    assert_error(
        &a2a("card_auth = true\n"),
        EXTRA,
        "routes[0].card_auth",
        "needs [routes.api_keys]",
    );
    let route = &parse(&a2a(
        "card_auth = true\n[routes.api_keys]\n\"sk-a\" = \"acme\"\n",
    ))
    .unwrap_or_else(|e| panic!("{e}"))
    .routes[0];
    assert!(route.card_auth);
    let cmdc = |extra: &str| route_with(extra).replace("ag-ui", "cmdc");
    assert_error(
        &cmdc("rate_limit = 0\n"),
        EXTRA,
        "routes[0].rate_limit",
        "positive number",
    );
    assert_error(
        &cmdc("[routes.api_keys]\n\"sk-a\" = \"\"\n"),
        EXTRA + 1,
        "routes[0].api_keys.sk-a",
        "tenant name must not be empty",
    );
    assert_error(
        &cmdc("[routes.api_keys]\n\"sk-a\" = \"acme\"\nbogus_key = 3\n"),
        EXTRA + 2,
        "routes[0].api_keys.bogus_key",
        "invalid type",
    );
}

#[test]
fn card_skill_ids_are_unique() {
    let skills = route_with("[routes.card]\nskills = [\n{ id = \"a\", name = \"A\" },\n{ id = \"a\", name = \"B\" },\n]\n")
        .replace("ag-ui", "a2a");
    assert_error(
        &skills,
        EXTRA + 3,
        "routes[0].card.skills[1].id",
        "duplicate skill id",
    );
}

#[test]
fn syntax_errors_name_the_line() {
    let err = parse("listen = \"127.0.0.1:1\"\n[[routes]\n").unwrap_err();
    assert_eq!(
        (err.file(), err.line(), err.key()),
        ("routes.toml", Some(2), None)
    );
    assert!(err.to_string().starts_with("routes.toml:2: "), "{err}");
}

#[test]
fn unreadable_file_names_the_file() {
    let err = Config::load(Path::new("tests/fixtures/config/missing.toml")).unwrap_err();
    assert_eq!(err.file(), "tests/fixtures/config/missing.toml");
    assert_eq!((err.line(), err.key()), (None, None));
    assert!(err
        .to_string()
        .starts_with("tests/fixtures/config/missing.toml: cannot read"));
}

#[test]
fn spans_locate_keys_in_dotted_and_implicit_tables() {
    let text = "a.b.c = 1\n[x.y]\nz = 1979-05-27\n[[t]]\nv = [1, { w = 2 }]\n";
    let tree = spans::Node::parse(text).expect("valid TOML");
    let at = |needle: &str| {
        let offset = text.find(needle).expect("needle in text");
        tree.path_at(offset).map(|path| path.to_string())
    };
    assert_eq!(at("c =").as_deref(), Some("a.b.c"));
    assert_eq!(at("1979").as_deref(), Some("x.y.z"));
    assert_eq!(at("w =").as_deref(), Some("t[0].v[1].w"));
    let path = KeyPath::default().key("x").key("y");
    assert_eq!(line_of(text, tree.offset_of(&path)), 2);
    assert_eq!(line_of(text, tree.offset_of(&path.key("missing"))), 2);
}

#[test]
fn log_format_is_text_or_json() {
    assert_eq!(parse(&route_with("")).unwrap().log_format, LogFormat::Text);
    let json = parse(&format!("log_format = \"json\"\n{}", route_with(""))).unwrap();
    assert_eq!(json.log_format, LogFormat::Json);
    assert_error(
        &format!("log_format = \"xml\"\n{}", route_with("")),
        1,
        "log_format",
        "unknown variant `xml`",
    );
    assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
    assert!("xml".parse::<LogFormat>().is_err());
}
