//! Every inbound protocol against every outbound protocol (and the built-in echo agent), in-process, over
//! real sockets, across the scenarios of issue 7:
//!
//! 1. a streamed text reply: it arrives in order, and the first words arrive while the agent is still
//!    producing the rest;
//! 2. a tool call on the agent's side with its result, then text;
//! 3. two turns of one conversation, the second needing the first (history kept across the boundary between
//!    protocols that send the whole conversation and those that send only what is new);
//! 4. human in the loop (issue 16): approval approved, approval rejected, approval answered in words ("yes,
//!    approve", "no, keep them"), an unclear answer ("maybe later") asked again, a free-text question, and a
//!    pause the client dismisses where its protocol has a cancel; each asserted on what the agent was told
//!    ([`peers::Heard`]), not only on what the client saw;
//! 5. a client-side tool offered by the client and called by the agent (CMDC's through its callback tools);
//! 6. the agent failing mid-stream, and an unreachable agent: the client's own error, once;
//! 7. the client going away mid-stream: the agent's work is cancelled;
//! 8. a conversation outliving its proxy (issue 20): two turns, an approval answered, and a question
//!    answered, with the proxy killed and restarted on its redb file in between, or with the turns served by
//!    two replicas sharing Redis, or behind nginx in front of those
//!    ([`crate::support::stores::Deployment`]). A CMDC client follows its session to the other proxy, where
//!    its paused run is replayed and carried on.
//!
//! Each pair runs the same scenario functions ([`scenario`]); each protocol's client and scripted agent live
//! in `tests/it/matrix/<protocol>.rs`, the shared vocabulary in `tests/it/matrix/peers.rs`. Where a pair
//! cannot carry a scenario (A2A has no client or server tools and asks approvals in words; an AgentScope
//! runtime asks no free-text questions; echo has no upstream), the scenario asserts the documented downgrade
//! (docs/translation.md) instead.

mod a2a;
mod ag_kit;
mod ag_ui;
mod agentscope;
mod cmdc;
mod peers;

use peers::{Agent, Capabilities, Client, Protocol, Script, Seen};

use crate::support::stores::{Deployment, Topology};
use crate::support::{within, Proxy, Route, Upstream};

/// Where a pair's route sends its turns.
#[derive(Clone, Copy, Debug)]
enum Outbound {
    /// A scripted agent speaking this protocol.
    Agent(Protocol),
    /// The built-in echo agent.
    Echo,
}

#[derive(Clone, Copy, Debug)]
struct Pair {
    inbound: Protocol,
    outbound: Outbound,
}

const PATH: &str = "/pair";

impl Pair {
    /// The pair's route toward `upstream` (none for echo).
    fn route(self, upstream: Option<&str>) -> Route {
        let inbound = self.inbound;
        let outbound = match self.outbound {
            Outbound::Agent(protocol) => protocol.name(),
            Outbound::Echo => "echo",
        };
        let mut route = Route::new("pair", PATH, inbound.name(), outbound)
            .translate_all(inbound.inbound_translate());
        // The matrix's CMDC client serves its callback tools on this machine.
        if inbound.name() == "cmdc" {
            route = route.callback_allow(&["127.0.0.1"]);
        }
        let Outbound::Agent(outbound) = self.outbound else {
            return route;
        };
        route
            .upstream(upstream.expect("a scripted pair has an upstream"))
            .upstream_headers(outbound.upstream_headers())
            .translate_all(outbound.outbound_translate())
    }

    /// The scripted agent playing `script`, and the proxy in front of it.
    async fn serve(self, script: Script) -> (Agent, Proxy) {
        let Outbound::Agent(protocol) = self.outbound else {
            panic!("{self:?} has no scripted agent");
        };
        let agent = Agent::serve(protocol, script).await;
        let proxy = Proxy::start(self.route(Some(&agent.url()))).await;
        (agent, proxy)
    }

    /// The proxy in front of the echo agent.
    async fn serve_echo(self) -> Proxy {
        Proxy::start(self.route(None)).await
    }

    fn client(self, proxy: &Proxy) -> Client {
        Client::new(self.inbound, proxy.url(PATH))
    }

    /// The protocol of the agent, `None` for echo.
    fn agent(self) -> Option<Protocol> {
        match self.outbound {
            Outbound::Agent(protocol) => Some(protocol),
            Outbound::Echo => None,
        }
    }

    /// Whether both sides carry `capability`.
    fn both(self, capability: fn(Protocol) -> bool) -> bool {
        capability(self.inbound) && self.agent().is_none_or(capability)
    }
}

/// Fails unless `seen` is a plain, complete answer saying `text`.
fn assert_said(pair: Pair, seen: &Seen, text: &str) {
    assert!(seen.errors.is_empty(), "{pair:?}: errors: {seen:#?}");
    assert_eq!(seen.pause, None, "{pair:?}: unexpected pause: {seen:#?}");
    assert_eq!(seen.text, text, "{pair:?}: {seen:#?}");
}

mod scenario {
    use super::peers::*;
    use super::*;

    fn say(text: &str) -> Input {
        Input::Say(text.to_owned())
    }

    /// (1) The text arrives in order, and its first words before the agent has produced the rest.
    pub async fn streamed_text(pair: Pair) {
        let (agent, proxy) = pair.serve(Script::Text).await;
        let mut client = pair.client(&proxy);
        let mut run = client.start(say("hi")).await;
        let first = within("the first words", run.until_text()).await;
        assert_eq!(first, HELLO, "{pair:?}: the first words");
        agent.release();
        assert_said(pair, &run.finish().await, GREETING);
    }

    /// (2) A tool call on the agent's side is shown with its result, then the text follows. Where either
    /// side has no tool calls (A2A), only the text arrives.
    pub async fn server_tool(pair: Pair) {
        let (_agent, proxy) = pair.serve(Script::ServerTool).await;
        let mut seen = pair.client(&proxy).exchange(say("weather in Paris?")).await;
        let tools = std::mem::take(&mut seen.tools);
        assert_said(pair, &seen, WEATHER_TEXT);
        let expected = pair.both(Protocol::has_server_tools).then(|| ToolSeen {
            name: WEATHER_TOOL.to_owned(),
            arguments: weather_arguments(),
            result: WEATHER_RESULT.to_owned(),
        });
        assert_eq!(
            tools,
            Vec::from_iter(expected),
            "{pair:?}: tool calls shown"
        );
    }

    /// (3) The second turn's answer needs the first turn: the agent knows both user messages, once each.
    pub async fn two_turns(pair: Pair) {
        let (_agent, proxy) = pair.serve(Script::Memory).await;
        let mut client = pair.client(&proxy);
        let first = client.exchange(say("my name is Ada")).await;
        assert_said(pair, &first, &you_said(&["my name is Ada"]));
        let second = client.exchange(say("what is my name?")).await;
        assert_said(
            pair,
            &second,
            &you_said(&["my name is Ada", "what is my name?"]),
        );
    }

    /// (8a) Two turns with the proxy killed and restarted, or replaced by another replica, in between: the
    /// second answer still needs the first turn, and the agent knows each user message once.
    pub async fn two_turns_between(pair: Pair, topology: Topology) {
        let agent = Agent::serve(pair.agent().expect("an agent"), Script::Memory).await;
        let mut deployment = Deployment::start(topology, pair.route(Some(&agent.url())));
        let mut client = Client::new(pair.inbound, deployment.url(PATH));
        let first = client.exchange(say("my name is Ada")).await;
        assert_said(pair, &first, &you_said(&["my name is Ada"]));
        deployment.between_turns();
        client.retarget(deployment.url(PATH));
        let second = client.exchange(say("what is my name?")).await;
        assert_said(
            pair,
            &second,
            &you_said(&["my name is Ada", "what is my name?"]),
        );
        deployment.assert_every_replica_served();
    }

    /// (8b) The agent asks approval; the proxy is killed and restarted, or the answer goes to the other
    /// replica; the answer still reaches the agent as the decision it waits for.
    pub async fn approval_between(pair: Pair, topology: Topology) {
        let agent = Agent::serve(pair.agent().expect("an agent"), Script::Approval).await;
        let mut deployment = Deployment::start(topology, pair.route(Some(&agent.url())));
        let mut client = Client::new(pair.inbound, deployment.url(PATH));
        let pause = paused_on_approval(pair, &mut client).await;
        deployment.between_turns();
        client.retarget(deployment.url(PATH));
        let answer = match pause {
            Pause::Approval { .. } => Input::Approve(true),
            Pause::Question { .. } => Input::Answer("yes".to_owned()),
            other => panic!("{pair:?}: an approval shown as {other:?}"),
        };
        let done = client.exchange(answer).await;
        assert_said(pair, &done, APPROVED_TEXT);
        let heard = agent.hears(2).await;
        let expected = [said(CLEAN_UP), decision_heard(pair, "yes", true)];
        assert_eq!(heard, expected, "{pair:?}: what the agent was told");
        deployment.assert_every_replica_served();
    }

    /// (8c) The agent asks a question; the proxy is killed and restarted, or the answer goes to the other
    /// replica; the answer still reaches the agent.
    pub async fn question_between(pair: Pair, topology: Topology) {
        let agent = Agent::serve(pair.agent().expect("an agent"), Script::Question).await;
        let mut deployment = Deployment::start(topology, pair.route(Some(&agent.url())));
        let mut client = Client::new(pair.inbound, deployment.url(PATH));
        let paused = client.exchange(say("weather please")).await;
        assert_asked(pair, &paused, QUESTION);
        deployment.between_turns();
        client.retarget(deployment.url(PATH));
        let done = client.exchange(Input::Answer("Paris".to_owned())).await;
        assert_said(pair, &done, &answered("Paris"));
        let heard = agent.hears(2).await;
        let expected = [said("weather please"), Heard::Answer("Paris".to_owned())];
        assert_eq!(heard, expected, "{pair:?}: what the agent was told");
        deployment.assert_every_replica_served();
    }

    /// What the client says to make the Approval script ask.
    const CLEAN_UP: &str = "clean up /tmp/x";

    /// (4a/4b) The agent asks approval in its own form; the client sees it in its own form and decides; the
    /// agent gets the decision. Where either side asks approvals in words (A2A), the client sees a
    /// question and answers "yes" or "no".
    pub async fn approval(pair: Pair, approve: bool) {
        let (agent, proxy) = pair.serve(Script::Approval).await;
        let mut client = pair.client(&proxy);
        let pause = paused_on_approval(pair, &mut client).await;
        let words = if approve { "yes" } else { "no" };
        let answer = match pause {
            Pause::Approval { .. } if !asked_in_words(pair) => Input::Approve(approve),
            Pause::Question { .. } if asked_in_words(pair) => Input::Answer(words.to_owned()),
            other => panic!("{pair:?}: an approval shown as {other:?}"),
        };
        let done = client.exchange(answer).await;
        // An approval request that stood for a question in words (AgentScope → A2A) is refused as the answer
        // "no": the agent hears it and decides, and nothing is cancelled.
        assert_said(pair, &done, decided(approve));
        let heard = agent.hears(2).await;
        let expected = [said(CLEAN_UP), decision_heard(pair, words, approve)];
        assert_eq!(heard, expected, "{pair:?}: what the agent was told");
    }

    /// (4d/4e) The client answers the approval in words ("yes, approve", "no, keep them"); the proxy reads
    /// them by the rule of README "Answering a pause in words" and the agent gets the decision in its own
    /// form. An agent that asks in words (A2A) gets the words themselves and decides.
    pub async fn approval_in_words(pair: Pair, words: &str, approve: bool) {
        assert!(
            answers_approval_in_words(pair),
            "{pair:?} cannot answer in words"
        );
        let (agent, proxy) = pair.serve(Script::Approval).await;
        let mut client = pair.client(&proxy);
        paused_on_approval(pair, &mut client).await;
        let done = client.exchange(Input::Answer(words.to_owned())).await;
        assert_said(pair, &done, decided(approve));
        let heard = agent.hears(2).await;
        let expected = [said(CLEAN_UP), decision_heard(pair, words, approve)];
        assert_eq!(heard, expected, "{pair:?}: what the agent was told");
    }

    /// (4f) An answer that is neither yes nor no ("maybe later") is asked again: the client sees the same
    /// pause, now saying "Answer yes or no.", and nothing reaches the agent; then "yes" approves. An agent
    /// that asks in words (A2A) reads answers itself: it gets the unclear words and asks again.
    pub async fn unclear_approval_asked_again(pair: Pair) {
        assert!(
            answers_approval_in_words(pair),
            "{pair:?} cannot answer in words"
        );
        let (agent, proxy) = pair.serve(Script::Approval).await;
        let mut client = pair.client(&proxy);
        let first = paused_on_approval(pair, &mut client).await;
        let again = client
            .exchange(Input::Answer("maybe later".to_owned()))
            .await;
        assert!(again.errors.is_empty(), "{pair:?}: {again:#?}");
        assert_eq!(again.text, "", "{pair:?}: {again:#?}");
        let Some(pause) = &again.pause else {
            panic!("{pair:?}: not asked again: {again:#?}");
        };
        assert_eq!(
            std::mem::discriminant(pause),
            std::mem::discriminant(&first),
            "{pair:?}: asked again as {pause:?}, first as {first:?}"
        );
        assert!(
            pause.text().contains("Answer yes or no"),
            "{pair:?}: the question asked again does not say what is expected: {pause:?}"
        );
        // The proxy's question quotes the answer it could not read (README "Answering a pause in words").
        assert!(
            !agent_asks_approvals(pair) || pause.text().contains("maybe later"),
            "{pair:?}: the question asked again does not quote the answer: {pause:?}"
        );
        let mut expected = vec![said(CLEAN_UP)];
        if !agent_asks_approvals(pair) {
            expected.push(Heard::Answer("maybe later".to_owned()));
        }
        assert_eq!(agent.heard(), expected, "{pair:?}: what the agent was told");
        let done = client.exchange(Input::Answer("yes".to_owned())).await;
        assert_said(pair, &done, APPROVED_TEXT);
        expected.push(decision_heard(pair, "yes", true));
        let heard = agent.hears(expected.len()).await;
        assert_eq!(heard, expected, "{pair:?}: what the agent was told");
    }

    /// (4g) The client dismisses the approval its protocol's own way (A2A `tasks/cancel`, AG-UI a `resume`
    /// entry `cancelled`, CMDC `abort`): the run ends without an error or a new pause, and the agent is told
    /// its own way: A2A `tasks/cancel`, AG-UI `resume` `cancelled`, CMDC `abort`; an AgentScope runtime and an
    /// AG-Kit v0 agent have no cancel of a pause, and get the decline (`approve: false`,
    /// `{"approved": false}`).
    pub async fn approval_cancelled(pair: Pair) {
        assert!(pair.inbound.has_pause_cancel(), "{pair:?} has no cancel");
        let (agent, proxy) = pair.serve(Script::Approval).await;
        let mut client = pair.client(&proxy);
        paused_on_approval(pair, &mut client).await;
        let done = client.exchange(Input::Cancel).await;
        assert!(done.errors.is_empty(), "{pair:?}: {done:#?}");
        assert_eq!(done.pause, None, "{pair:?}: {done:#?}");
        let dismissed = match pair.agent() {
            Some(agent) if agent.has_pause_cancel() => Heard::Cancelled,
            _ => Heard::Decision(false),
        };
        let heard = agent.hears(2).await;
        assert_eq!(
            heard,
            [said(CLEAN_UP), dismissed],
            "{pair:?}: what the agent was told"
        );
    }

    /// Asks the Approval script's agent to clean up; returns the pause the client saw, which says what is to
    /// be approved.
    async fn paused_on_approval(pair: Pair, client: &mut Client) -> Pause {
        let paused = client.exchange(say(CLEAN_UP)).await;
        assert!(paused.errors.is_empty(), "{pair:?}: {paused:#?}");
        let Some(pause) = paused.pause.clone() else {
            panic!("{pair:?}: no pause: {paused:#?}");
        };
        assert!(
            pause.text().contains(APPROVAL_TOOL),
            "{pair:?}: the pause does not say what is to be approved: {pause:?}"
        );
        pause
    }

    /// What the Approval script says after the decision.
    fn decided(approve: bool) -> &'static str {
        if approve {
            APPROVED_TEXT
        } else {
            REJECTED_TEXT
        }
    }

    fn said(text: &str) -> Heard {
        Heard::Said(text.to_owned())
    }

    /// Whether the pair's agent asks approvals in a form of its own (not in words, as A2A agents do).
    fn agent_asks_approvals(pair: Pair) -> bool {
        pair.agent().is_none_or(Protocol::has_approvals)
    }

    /// How the agent hears a decision the client gave in `words`: the decision the proxy read from them, or
    /// where the agent asks in words (A2A), the words themselves.
    fn decision_heard(pair: Pair, words: &str, approve: bool) -> Heard {
        if agent_asks_approvals(pair) {
            Heard::Decision(approve)
        } else {
            Heard::Answer(words.to_owned())
        }
    }

    /// Whether the client can answer the pair's approval in words. An AgentScope client answers an approval
    /// request only with `approve: true|false` (its `reason` is not read as the answer); it answers in words
    /// only a question shown as an approval request (an A2A agent's approval, asked in words), by its reason.
    /// Every other client can: A2A in its message, AG-UI in the tool message's content, AG-Kit in the
    /// `resume` payload, CMDC with `respond`.
    fn answers_approval_in_words(pair: Pair) -> bool {
        pair.inbound.has_questions() || !agent_asks_approvals(pair)
    }

    /// Whether the client sees an approval as a question: its own protocol asks only in words (A2A), or the
    /// agent's does and the client can show a question (an AgentScope client shows it as an approval).
    fn asked_in_words(pair: Pair) -> bool {
        !pair.inbound.has_approvals()
            || (!agent_asks_approvals(pair) && pair.inbound.has_questions())
    }

    /// (4c) The agent asks a free-text question; the client answers it in its own form. An AgentScope
    /// client sees the question as an approval request and answers by its reason.
    pub async fn question(pair: Pair) {
        let (agent, proxy) = pair.serve(Script::Question).await;
        answers_question(pair, &proxy, say("weather please"), QUESTION).await;
        let heard = agent.hears(2).await;
        let expected = [said("weather please"), Heard::Answer("Paris".to_owned())];
        assert_eq!(heard, expected, "{pair:?}: what the agent was told");
    }

    async fn answers_question(pair: Pair, proxy: &Proxy, opening: Input, question: &str) {
        let mut client = pair.client(proxy);
        let paused = client.exchange(opening).await;
        assert_asked(pair, &paused, question);
        let done = client.exchange(Input::Answer("Paris".to_owned())).await;
        assert_said(pair, &done, &answered("Paris"));
    }

    /// Fails unless `paused` is the client's pause asking `question`: a question, or an approval where the
    /// client has no questions.
    fn assert_asked(pair: Pair, paused: &Seen, question: &str) {
        assert!(paused.errors.is_empty(), "{pair:?}: {paused:#?}");
        match &paused.pause {
            Some(Pause::Question { text }) if pair.inbound.has_questions() => {
                assert!(text.contains(question), "{pair:?}: {text}")
            }
            Some(Pause::Approval { text }) if !pair.inbound.has_questions() => {
                assert!(text.contains(question), "{pair:?}: {text}")
            }
            other => panic!("{pair:?}: a question shown as {other:?}: {paused:#?}"),
        }
    }

    /// (5) The client offers its tool; the agent calls it; the client runs it and its result reaches the
    /// agent. Where either side has no client tools (A2A), the agent is offered none.
    pub async fn client_tool(pair: Pair) {
        let (_agent, proxy) = pair.serve(Script::ClientTool).await;
        calls_client_tool(pair, &proxy, say("what time is it?")).await;
    }

    async fn calls_client_tool(pair: Pair, proxy: &Proxy, opening: Input) {
        let mut client = pair.client(proxy);
        let paused = client.exchange(opening).await;
        if !pair.both(Protocol::has_client_tools) {
            let expected = match pair.outbound {
                Outbound::Agent(_) => NO_TOOLS.to_owned(),
                Outbound::Echo => "I can only call a tool you offer; you offered: []".to_owned(),
            };
            return assert_said(pair, &paused, &expected);
        }
        assert!(paused.errors.is_empty(), "{pair:?}: {paused:#?}");
        let expected = Pause::ClientTool {
            name: CLIENT_TOOL.to_owned(),
            arguments: client_tool_arguments(),
        };
        assert_eq!(paused.pause, Some(expected), "{pair:?}: {paused:#?}");
        let done = client.exchange(Input::ToolResult("12:00".to_owned())).await;
        assert_said(pair, &done, &tool_returned("12:00"));
    }

    /// (6a) The agent fails after its first words: the client keeps the words and is told the agent's
    /// reason, once.
    pub async fn failure_mid_stream(pair: Pair) {
        let (_agent, proxy) = pair.serve(Script::FailMidStream).await;
        let seen = pair.client(&proxy).exchange(say("hi")).await;
        assert_eq!(seen.text, HELLO, "{pair:?}: {seen:#?}");
        assert_eq!(seen.errors.len(), 1, "{pair:?}: not one error: {seen:#?}");
        assert!(seen.errors[0].contains(FAILURE), "{pair:?}: {seen:#?}");
        if pair.inbound.has_error_codes() {
            let agent = pair.agent().expect("a failing agent");
            assert_eq!(seen.codes, [agent.failure_code()], "{pair:?}: {seen:#?}");
        }
    }

    /// (6b) Nothing listens at the agent's address: the client is told so, once.
    pub async fn unreachable(pair: Pair) {
        let proxy = Proxy::start(pair.route(Some(&Upstream::refused_url().await))).await;
        let seen = pair.client(&proxy).exchange(say("hi")).await;
        assert_eq!(seen.errors.len(), 1, "{pair:?}: not one error: {seen:#?}");
        assert!(
            seen.errors[0].to_lowercase().contains("unreachable"),
            "{pair:?}: {seen:#?}"
        );
        if pair.inbound.has_error_codes() {
            assert_eq!(seen.codes, ["UPSTREAM_UNREACHABLE"], "{pair:?}: {seen:#?}");
        }
        assert_eq!(seen.text, "", "{pair:?}: {seen:#?}");
    }

    /// (7) The client goes away mid-stream: the agent's work is cancelled (its request closed, or its
    /// protocol's cancel sent).
    pub async fn client_leaves(pair: Pair) {
        let (agent, proxy) = pair.serve(Script::Hang).await;
        let mut client = pair.client(&proxy);
        let mut run = client.start(say("hi")).await;
        assert_eq!(within("the first words", run.until_text()).await, HELLO);
        assert!(
            agent.still_working().await,
            "{pair:?}: the agent's work was cancelled while the client read"
        );
        run.leave().await;
        assert!(
            agent.cancelled().await,
            "{pair:?}: the agent's work went on"
        );
    }

    /// Echo (1): Echo streams the words back in order.
    pub async fn echo_text(pair: Pair) {
        let proxy = pair.serve_echo().await;
        let seen = pair.client(&proxy).exchange(say(GREETING)).await;
        assert_said(pair, &seen, GREETING);
    }

    /// Echo (3): Each turn answers the last message: echo keeps no memory, but a second turn works.
    pub async fn echo_two_turns(pair: Pair) {
        let proxy = pair.serve_echo().await;
        let mut client = pair.client(&proxy);
        assert_said(
            pair,
            &client.exchange(say("my name is Ada")).await,
            "my name is Ada",
        );
        let second = client.exchange(say("what is my name?")).await;
        assert_said(pair, &second, "what is my name?");
    }

    /// Echo (4): `/ask` pauses on a question; the answer is reported.
    pub async fn echo_question(pair: Pair) {
        let proxy = pair.serve_echo().await;
        answers_question(pair, &proxy, say(&format!("/ask {QUESTION}")), QUESTION).await;
    }

    /// Echo (5): `/tool` calls the client's tool; its result is reported.
    pub async fn echo_client_tool(pair: Pair) {
        let proxy = pair.serve_echo().await;
        let command = format!("/tool {CLIENT_TOOL} {}", client_tool_arguments());
        calls_client_tool(pair, &proxy, say(&command)).await;
    }
}

/// One module per pair with an agent, one test per scenario.
macro_rules! agent_pairs {
    ($($name:ident: $inbound:ident -> $outbound:ident;)*) => {$(
        mod $name {
            use super::*;

            const PAIR: Pair = Pair {
                inbound: Protocol::$inbound,
                outbound: Outbound::Agent(Protocol::$outbound),
            };

            #[tokio::test]
            async fn streamed_text_arrives_in_order_as_it_is_produced() {
                scenario::streamed_text(PAIR).await
            }

            #[tokio::test]
            async fn server_tool_call_and_result_then_text() {
                scenario::server_tool(PAIR).await
            }

            #[tokio::test]
            async fn second_turn_knows_the_first() {
                scenario::two_turns(PAIR).await
            }

            #[tokio::test]
            async fn approval_approved_completes_the_run() {
                scenario::approval(PAIR, true).await
            }

            #[tokio::test]
            async fn approval_rejected_completes_the_run() {
                scenario::approval(PAIR, false).await
            }

            #[tokio::test]
            async fn client_tool_round_trip() {
                scenario::client_tool(PAIR).await
            }

            #[tokio::test]
            async fn failure_mid_stream_is_one_native_error() {
                scenario::failure_mid_stream(PAIR).await
            }

            #[tokio::test]
            async fn unreachable_agent_is_one_native_error() {
                scenario::unreachable(PAIR).await
            }

            #[tokio::test]
            async fn client_leaving_cancels_the_agents_work() {
                scenario::client_leaves(PAIR).await
            }
        }
    )*};
}

/// The question scenario, for pairs whose agent can ask one (an AgentScope runtime asks only approvals).
macro_rules! question_pairs {
    ($($name:ident: $inbound:ident -> $outbound:ident;)*) => {$(
        #[tokio::test]
        async fn $name() {
            scenario::question(Pair {
                inbound: Protocol::$inbound,
                outbound: Outbound::Agent(Protocol::$outbound),
            })
            .await
        }
    )*};
}

/// The approval answered in words, one module per pair whose client can word its answer (see
/// `scenario::answers_approval_in_words`).
macro_rules! words_pairs {
    ($($name:ident: $inbound:ident -> $outbound:ident;)*) => {$(
        mod $name {
            use super::*;

            const PAIR: Pair = Pair {
                inbound: Protocol::$inbound,
                outbound: Outbound::Agent(Protocol::$outbound),
            };

            #[tokio::test]
            async fn yes_approve_reaches_the_agent_as_an_approval() {
                scenario::approval_in_words(PAIR, "yes, approve", true).await
            }

            #[tokio::test]
            async fn no_keep_them_reaches_the_agent_as_a_rejection() {
                scenario::approval_in_words(PAIR, "no, keep them", false).await
            }

            #[tokio::test]
            async fn unclear_answer_is_asked_again_then_yes_approves() {
                scenario::unclear_approval_asked_again(PAIR).await
            }
        }
    )*};
}

/// The approval dismissed by the client, for pairs whose client has a cancel of a pause
/// ([`Capabilities::has_pause_cancel`]).
macro_rules! cancel_pairs {
    ($($name:ident: $inbound:ident -> $outbound:ident;)*) => {$(
        #[tokio::test]
        async fn $name() {
            scenario::approval_cancelled(Pair {
                inbound: Protocol::$inbound,
                outbound: Outbound::Agent(Protocol::$outbound),
            })
            .await
        }
    )*};
}

/// A conversation outliving its proxy (8): `$scenario` (two turns, an answered approval or question) for
/// pairs whose inbound keeps its side of the conversation in the store, in every [`Topology`].
macro_rules! durable_pairs {
    ($scenario:ident; $($name:ident: $inbound:ident -> $outbound:ident;)*) => {$(
        mod $name {
            use super::*;

            const PAIR: Pair = Pair {
                inbound: Protocol::$inbound,
                outbound: Outbound::Agent(Protocol::$outbound),
            };

            #[tokio::test]
            async fn across_a_kill_and_restart_on_redb() {
                scenario::$scenario(PAIR, Topology::Restarted).await
            }

            #[tokio::test]
            async fn on_two_replicas_sharing_redis() {
                scenario::$scenario(PAIR, Topology::Replicas).await
            }

            #[tokio::test]
            async fn through_nginx_in_front_of_two_replicas() {
                scenario::$scenario(PAIR, Topology::Balanced).await
            }

            #[tokio::test]
            async fn on_two_replicas_sharing_a_redis_cluster() {
                scenario::$scenario(PAIR, Topology::Clustered).await
            }
        }
    )*};
}

/// One module per pair with echo: echo has no upstream to use tools, ask approvals, fail or be cancelled.
macro_rules! echo_pairs {
    ($($name:ident: $inbound:ident;)*) => {$(
        mod $name {
            use super::*;

            const PAIR: Pair = Pair { inbound: Protocol::$inbound, outbound: Outbound::Echo };

            #[tokio::test]
            async fn streams_the_words_back_in_order() {
                scenario::echo_text(PAIR).await
            }

            #[tokio::test]
            async fn second_turn_answers_the_second_message() {
                scenario::echo_two_turns(PAIR).await
            }

            #[tokio::test]
            async fn ask_pauses_on_a_question_and_reports_the_answer() {
                scenario::echo_question(PAIR).await
            }

            #[tokio::test]
            async fn tool_command_calls_the_client_tool_and_reports_its_result() {
                scenario::echo_client_tool(PAIR).await
            }
        }
    )*};
}

agent_pairs! {
    ag_ui_to_ag_ui: AgUi -> AgUi;
    ag_ui_to_a2a: AgUi -> A2a;
    ag_ui_to_agentscope: AgUi -> Agentscope;
    ag_ui_to_ag_kit: AgUi -> AgKit;
    ag_ui_to_cmdc: AgUi -> Cmdc;
    a2a_to_ag_ui: A2a -> AgUi;
    a2a_to_a2a: A2a -> A2a;
    a2a_to_agentscope: A2a -> Agentscope;
    a2a_to_ag_kit: A2a -> AgKit;
    a2a_to_cmdc: A2a -> Cmdc;
    agentscope_to_ag_ui: Agentscope -> AgUi;
    agentscope_to_a2a: Agentscope -> A2a;
    agentscope_to_agentscope: Agentscope -> Agentscope;
    agentscope_to_ag_kit: Agentscope -> AgKit;
    agentscope_to_cmdc: Agentscope -> Cmdc;
    ag_kit_to_ag_ui: AgKit -> AgUi;
    ag_kit_to_a2a: AgKit -> A2a;
    ag_kit_to_agentscope: AgKit -> Agentscope;
    ag_kit_to_ag_kit: AgKit -> AgKit;
    ag_kit_to_cmdc: AgKit -> Cmdc;
    cmdc_to_ag_ui: Cmdc -> AgUi;
    cmdc_to_a2a: Cmdc -> A2a;
    cmdc_to_agentscope: Cmdc -> Agentscope;
    cmdc_to_ag_kit: Cmdc -> AgKit;
    cmdc_to_cmdc: Cmdc -> Cmdc;
}

/// Expands `$pairs!` (after `$scenario;`, if given) over the pairs whose agent can ask a free-text question:
/// every pair but those toward an AgentScope runtime, which asks only approvals.
macro_rules! with_question_pairs {
    ($pairs:ident $(; $scenario:ident)?) => {
        $pairs! {
            $($scenario;)?
            ag_ui_to_ag_ui: AgUi -> AgUi;
            ag_ui_to_a2a: AgUi -> A2a;
            ag_ui_to_ag_kit: AgUi -> AgKit;
            ag_ui_to_cmdc: AgUi -> Cmdc;
            a2a_to_ag_ui: A2a -> AgUi;
            a2a_to_a2a: A2a -> A2a;
            a2a_to_ag_kit: A2a -> AgKit;
            a2a_to_cmdc: A2a -> Cmdc;
            agentscope_to_ag_ui: Agentscope -> AgUi;
            agentscope_to_a2a: Agentscope -> A2a;
            agentscope_to_ag_kit: Agentscope -> AgKit;
            agentscope_to_cmdc: Agentscope -> Cmdc;
            ag_kit_to_ag_ui: AgKit -> AgUi;
            ag_kit_to_a2a: AgKit -> A2a;
            ag_kit_to_ag_kit: AgKit -> AgKit;
            ag_kit_to_cmdc: AgKit -> Cmdc;
            cmdc_to_ag_ui: Cmdc -> AgUi;
            cmdc_to_a2a: Cmdc -> A2a;
            cmdc_to_ag_kit: Cmdc -> AgKit;
            cmdc_to_cmdc: Cmdc -> Cmdc;
        }
    };
}

mod question_asked_and_answered {
    use super::*;

    with_question_pairs!(question_pairs);
}

/// Every pair but AgentScope clients with agents that ask approvals in a form of their own: an AgentScope
/// client answers those only with `approve: true|false`, which `approval_*_completes_the_run` covers.
mod approval_answered_in_words {
    use super::*;

    words_pairs! {
        ag_ui_to_ag_ui: AgUi -> AgUi;
        ag_ui_to_a2a: AgUi -> A2a;
        ag_ui_to_agentscope: AgUi -> Agentscope;
        ag_ui_to_ag_kit: AgUi -> AgKit;
        ag_ui_to_cmdc: AgUi -> Cmdc;
        a2a_to_ag_ui: A2a -> AgUi;
        a2a_to_a2a: A2a -> A2a;
        a2a_to_agentscope: A2a -> Agentscope;
        a2a_to_ag_kit: A2a -> AgKit;
        a2a_to_cmdc: A2a -> Cmdc;
        agentscope_to_a2a: Agentscope -> A2a;
        ag_kit_to_ag_ui: AgKit -> AgUi;
        ag_kit_to_a2a: AgKit -> A2a;
        ag_kit_to_agentscope: AgKit -> Agentscope;
        ag_kit_to_ag_kit: AgKit -> AgKit;
        ag_kit_to_cmdc: AgKit -> Cmdc;
        cmdc_to_ag_ui: Cmdc -> AgUi;
        cmdc_to_a2a: Cmdc -> A2a;
        cmdc_to_agentscope: Cmdc -> Agentscope;
        cmdc_to_ag_kit: Cmdc -> AgKit;
        cmdc_to_cmdc: Cmdc -> Cmdc;
    }
}

/// Pairs whose client can dismiss a pause: A2A, AG-UI and CMDC clients. An AgentScope or AG-Kit v0 client
/// can only go away, which `client_leaving_cancels_the_agents_work` covers.
mod approval_cancelled_by_the_client_reaches_the_agent {
    use super::*;

    cancel_pairs! {
        ag_ui_to_ag_ui: AgUi -> AgUi;
        ag_ui_to_a2a: AgUi -> A2a;
        ag_ui_to_agentscope: AgUi -> Agentscope;
        ag_ui_to_ag_kit: AgUi -> AgKit;
        ag_ui_to_cmdc: AgUi -> Cmdc;
        a2a_to_ag_ui: A2a -> AgUi;
        a2a_to_a2a: A2a -> A2a;
        a2a_to_agentscope: A2a -> Agentscope;
        a2a_to_ag_kit: A2a -> AgKit;
        a2a_to_cmdc: A2a -> Cmdc;
        cmdc_to_ag_ui: Cmdc -> AgUi;
        cmdc_to_a2a: Cmdc -> A2a;
        cmdc_to_agentscope: Cmdc -> Agentscope;
        cmdc_to_ag_kit: Cmdc -> AgKit;
        cmdc_to_cmdc: Cmdc -> Cmdc;
    }
}

mod two_turns_outlive_the_proxy {
    use super::*;

    durable_pairs! {
        two_turns_between;
        ag_ui_to_ag_ui: AgUi -> AgUi;
        ag_ui_to_a2a: AgUi -> A2a;
        ag_ui_to_agentscope: AgUi -> Agentscope;
        ag_ui_to_ag_kit: AgUi -> AgKit;
        ag_ui_to_cmdc: AgUi -> Cmdc;
        a2a_to_ag_ui: A2a -> AgUi;
        a2a_to_a2a: A2a -> A2a;
        a2a_to_agentscope: A2a -> Agentscope;
        a2a_to_ag_kit: A2a -> AgKit;
        a2a_to_cmdc: A2a -> Cmdc;
        agentscope_to_ag_ui: Agentscope -> AgUi;
        agentscope_to_a2a: Agentscope -> A2a;
        agentscope_to_agentscope: Agentscope -> Agentscope;
        agentscope_to_ag_kit: Agentscope -> AgKit;
        agentscope_to_cmdc: Agentscope -> Cmdc;
        ag_kit_to_ag_ui: AgKit -> AgUi;
        ag_kit_to_a2a: AgKit -> A2a;
        ag_kit_to_agentscope: AgKit -> Agentscope;
        ag_kit_to_ag_kit: AgKit -> AgKit;
        ag_kit_to_cmdc: AgKit -> Cmdc;
        cmdc_to_ag_ui: Cmdc -> AgUi;
        cmdc_to_a2a: Cmdc -> A2a;
        cmdc_to_agentscope: Cmdc -> Agentscope;
        cmdc_to_ag_kit: Cmdc -> AgKit;
        cmdc_to_cmdc: Cmdc -> Cmdc;
    }
}

mod approval_outlives_the_proxy {
    use super::*;

    durable_pairs! {
        approval_between;
        a2a_to_ag_ui: A2a -> AgUi;
        a2a_to_a2a: A2a -> A2a;
        a2a_to_agentscope: A2a -> Agentscope;
        a2a_to_ag_kit: A2a -> AgKit;
        a2a_to_cmdc: A2a -> Cmdc;
        ag_ui_to_ag_ui: AgUi -> AgUi;
        ag_ui_to_a2a: AgUi -> A2a;
        ag_ui_to_agentscope: AgUi -> Agentscope;
        ag_ui_to_ag_kit: AgUi -> AgKit;
        ag_ui_to_cmdc: AgUi -> Cmdc;
        agentscope_to_ag_ui: Agentscope -> AgUi;
        agentscope_to_a2a: Agentscope -> A2a;
        agentscope_to_agentscope: Agentscope -> Agentscope;
        agentscope_to_ag_kit: Agentscope -> AgKit;
        agentscope_to_cmdc: Agentscope -> Cmdc;
        ag_kit_to_ag_ui: AgKit -> AgUi;
        ag_kit_to_a2a: AgKit -> A2a;
        ag_kit_to_agentscope: AgKit -> Agentscope;
        ag_kit_to_ag_kit: AgKit -> AgKit;
        ag_kit_to_cmdc: AgKit -> Cmdc;
        cmdc_to_ag_ui: Cmdc -> AgUi;
        cmdc_to_a2a: Cmdc -> A2a;
        cmdc_to_agentscope: Cmdc -> Agentscope;
        cmdc_to_ag_kit: Cmdc -> AgKit;
        cmdc_to_cmdc: Cmdc -> Cmdc;
    }
}

mod question_outlives_the_proxy {
    use super::*;

    with_question_pairs!(durable_pairs; question_between);
}

echo_pairs! {
    ag_ui_to_echo: AgUi;
    a2a_to_echo: A2a;
    agentscope_to_echo: Agentscope;
    ag_kit_to_echo: AgKit;
    cmdc_to_echo: Cmdc;
}
