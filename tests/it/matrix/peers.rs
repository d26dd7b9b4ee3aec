//! The matrix's vocabulary, shared by every protocol's client and scripted agent: what a client sends
//! ([`Input`]), what it saw ([`Seen`], [`Pause`]), what a scripted agent plays ([`Script`]) and the fixed words
//! of each script, so that one scenario can assert the same outcome through any pair.
//!
//! [`Client`], [`Run`] and [`Agent`] dispatch to the protocol modules; everything protocol-specific lives there.

use serde_json::{json, Value};

use super::{a2a, ag_kit, ag_ui, agentscope, cmdc};

pub use agent_bridge::config::Protocol;
use agent_bridge::protocol::registry;

/// What each protocol can carry, and the route settings its peers need.
pub trait Capabilities {
    fn has_client_tools(self) -> bool;
    fn has_server_tools(self) -> bool;
    fn has_approvals(self) -> bool;
    fn has_questions(self) -> bool;
    fn has_pause_cancel(self) -> bool;
    /// Whether this protocol's errors carry a code its client is shown (AG-UI `RUN_ERROR.code`, AgentScope
    /// `error.code`).
    fn has_error_codes(self) -> bool;
    /// The code a client is shown when this protocol's agent fails mid-stream ([`Script::FailMidStream`]):
    /// the agent's own, or the proxy's where the agent's protocol has none.
    fn failure_code(self) -> &'static str;
    fn inbound_translate(self) -> &'static [(&'static str, &'static str)];
    fn outbound_translate(self) -> &'static [(&'static str, &'static str)];
    fn upstream_headers(self) -> &'static [(&'static str, &'static str)];
}

impl Capabilities for Protocol {
    /// What each capability means, and why a protocol lacks one, is on its registry row (`face::Row`).
    fn has_client_tools(self) -> bool {
        registry::row(self).client_tools
    }

    fn has_server_tools(self) -> bool {
        registry::row(self).server_tools
    }

    fn has_approvals(self) -> bool {
        registry::row(self).approvals
    }

    fn has_questions(self) -> bool {
        registry::row(self).questions
    }

    fn has_pause_cancel(self) -> bool {
        registry::row(self).pause_cancel
    }

    fn has_error_codes(self) -> bool {
        matches!(self, Protocol::AgUi | Protocol::Agentscope)
    }

    fn failure_code(self) -> &'static str {
        match self {
            Protocol::AgUi => ag_ui::FAILURE_CODE,
            Protocol::A2a => a2a::FAILURE_CODE,
            Protocol::Agentscope => agentscope::FAILURE_CODE,
            Protocol::AgKit => ag_kit::FAILURE_CODE,
            Protocol::Cmdc => cmdc::FAILURE_CODE,
        }
    }

    /// `[routes.translate]` options (key, text value) this protocol needs when it is the inbound face.
    fn inbound_translate(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Protocol::AgUi => ag_ui::INBOUND_TRANSLATE,
            Protocol::A2a => a2a::INBOUND_TRANSLATE,
            Protocol::Agentscope => agentscope::INBOUND_TRANSLATE,
            Protocol::AgKit => ag_kit::INBOUND_TRANSLATE,
            Protocol::Cmdc => cmdc::INBOUND_TRANSLATE,
        }
    }

    /// `[routes.translate]` keys this protocol needs when it is the outbound face.
    fn outbound_translate(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Protocol::AgUi => ag_ui::OUTBOUND_TRANSLATE,
            Protocol::A2a => a2a::OUTBOUND_TRANSLATE,
            Protocol::Agentscope => agentscope::OUTBOUND_TRANSLATE,
            Protocol::AgKit => ag_kit::OUTBOUND_TRANSLATE,
            Protocol::Cmdc => cmdc::OUTBOUND_TRANSLATE,
        }
    }

    /// `[routes.upstream_headers]` this protocol's agent needs (an API key, say).
    fn upstream_headers(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Protocol::AgUi => ag_ui::UPSTREAM_HEADERS,
            Protocol::A2a => a2a::UPSTREAM_HEADERS,
            Protocol::Agentscope => agentscope::UPSTREAM_HEADERS,
            Protocol::AgKit => ag_kit::UPSTREAM_HEADERS,
            Protocol::Cmdc => cmdc::UPSTREAM_HEADERS,
        }
    }
}

/// What a client sends in one exchange; each protocol's client sends it in its own native form.
#[derive(Clone, Debug)]
pub enum Input {
    /// A new user message in the conversation.
    Say(String),
    /// Approves (`true`) or rejects the pending approval.
    Approve(bool),
    /// Answers the pending question. Where the question came as an approval request (AgentScope), approves
    /// it with this text as the reason.
    Answer(String),
    /// The result of the pending client tool call.
    ToolResult(String),
    /// Dismisses the pending pause without answering it, the protocol's own way (see
    /// [`Capabilities::has_pause_cancel`]).
    Cancel,
}

/// What a client saw in one exchange, in protocol-neutral terms.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// All assistant text, concatenated in arrival order.
    pub text: String,
    /// Tool calls made on the agent's side that the client was shown, each with its result.
    pub tools: Vec<ToolSeen>,
    /// Where the run stopped to wait for the client, if it did.
    pub pause: Option<Pause>,
    /// Each error the client was told of, once per error event (or failed HTTP answer), as its message.
    pub errors: Vec<String>,
    /// The code of each error event, where the client's protocol gives one
    /// ([`Capabilities::has_error_codes`]).
    pub codes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ToolSeen {
    pub name: String,
    pub arguments: Value,
    pub result: String,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Pause {
    /// An approval request; `text` is everything the client was shown about what is to be approved (the
    /// tool's name and arguments, a message), joined.
    Approval { text: String },
    /// A free-text question.
    Question { text: String },
    /// A call of one of the client's own tools.
    ClientTool { name: String, arguments: Value },
}

impl Pause {
    /// The words shown to the client with the pause (a client tool's name and arguments).
    pub fn text(&self) -> String {
        match self {
            Pause::Approval { text } | Pause::Question { text } => text.clone(),
            Pause::ClientTool { name, arguments } => format!("{name} {arguments}"),
        }
    }
}

/// What a scripted agent was told, read back from the requests (or CMDC actions) it received: one entry per
/// request that told it something, in order. A protocol that resends the whole conversation tells only its
/// newest part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heard {
    /// A new user message.
    Said(String),
    /// A decision on its approval request (CMDC approve/reject, AgentScope `approve`, `{"approved": …}`).
    Decision(bool),
    /// Words answering its pause: a question's answer, or an A2A agent's approval asked in words.
    Answer(String),
    /// Its pause dismissed: A2A `tasks/cancel`, AG-UI `resume` status `cancelled`, CMDC `abort`, AG-Kit a
    /// `resume` whose payload is `null` (a dismissed question; a dismissed approval reaches an AG-Kit agent as
    /// a decline, `{"approved": false}`).
    Cancelled,
}

/// What a scripted agent does with every request it gets. Each protocol's agent plays it in its native form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Script {
    /// Streams [`HELLO`], waits for [`Agent::release`], then streams the rest of [`GREETING`].
    Text,
    /// Calls [`WEATHER_TOOL`] with [`weather_arguments`] on its own side, gets [`WEATHER_RESULT`], then says
    /// [`WEATHER_TEXT`].
    ServerTool,
    /// Says [`you_said`] of every user message it knows in this conversation: from the request's history
    /// where its protocol sends the whole conversation, from its own memory of the conversation where the
    /// protocol sends only what is new.
    Memory,
    /// Asks approval to call [`APPROVAL_TOOL`] with [`approval_arguments`]; then says [`APPROVED_TEXT`] or
    /// [`REJECTED_TEXT`].
    Approval,
    /// Asks [`QUESTION`]; then says [`answered`] of the answer.
    Question,
    /// Calls the client's [`CLIENT_TOOL`] with [`client_tool_arguments`]; then says [`tool_returned`] of the
    /// result. Offered no such tool, says [`NO_TOOLS`] instead.
    ClientTool,
    /// Streams [`HELLO`], then fails with [`FAILURE`] in its protocol's own error form.
    FailMidStream,
    /// Streams [`HELLO`], then never ends until the request is cancelled.
    Hang,
}

pub const HELLO: &str = "Hello";
pub const GREETING: &str = "Hello, world!";

pub const WEATHER_TOOL: &str = "weather";
pub const WEATHER_RESULT: &str = "sunny";
pub const WEATHER_TEXT: &str = "It is sunny in Paris.";
pub fn weather_arguments() -> Value {
    json!({"city": "Paris"})
}

pub const APPROVAL_TOOL: &str = "delete_file";
pub const APPROVED_TEXT: &str = "Deleted /tmp/x.";
pub const REJECTED_TEXT: &str = "Kept /tmp/x.";
pub fn approval_arguments() -> Value {
    json!({"path": "/tmp/x"})
}

pub const QUESTION: &str = "Which city?";

pub const CLIENT_TOOL: &str = "get_time";
pub const CLIENT_TOOL_DESCRIPTION: &str = "The current time in a time zone";
pub const NO_TOOLS: &str = "No tools offered.";
pub fn client_tool_arguments() -> Value {
    json!({"zone": "UTC"})
}
pub fn client_tool_parameters() -> Value {
    json!({"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]})
}

pub const FAILURE: &str = "disk on fire";

/// The Memory script's answer, given the user messages it knows, oldest first.
pub fn you_said(user_messages: &[impl AsRef<str>]) -> String {
    let said: Vec<&str> = user_messages.iter().map(AsRef::as_ref).collect();
    format!("You said: {}", said.join(" | "))
}

/// What the Question script (and the echo agent) says after an answer.
pub fn answered(answer: &str) -> String {
    format!("You answered: {answer}")
}

/// What the ClientTool script (and the echo agent) says after the tool's result.
pub fn tool_returned(result: &str) -> String {
    format!("Tool `{CLIENT_TOOL}` returned: {result}")
}

/// What an answer an agent got in words decides (A2A asks approvals in words), read as a person would by its
/// first word: `Some(true)` for a yes, `Some(false)` for a no, `None` when it says neither.
pub fn decides(words: &str) -> Option<bool> {
    let lowercase = words.to_lowercase();
    let first = lowercase
        .split(|c: char| !c.is_alphanumeric())
        .find(|word| !word.is_empty())
        .unwrap_or_default();
    match first {
        "yes" | "y" | "ok" | "approve" | "approved" | "true" => Some(true),
        "no" | "n" | "reject" | "false" => Some(false),
        _ => None,
    }
}

// --- Dispatch to the protocol modules ----------------------------------------------------------------------

macro_rules! dispatch {
    ($enum:ident, $value:expr, $inner:ident => $body:expr) => {
        match $value {
            $enum::AgUi($inner) => $body,
            $enum::A2a($inner) => $body,
            $enum::AgentScope($inner) => $body,
            $enum::AgKit($inner) => $body,
            $enum::Cmdc($inner) => $body,
        }
    };
}

/// A client of one protocol, talking to the proxy, holding its side of one conversation.
pub enum Client {
    AgUi(ag_ui::Client),
    A2a(a2a::Client),
    AgentScope(agentscope::Client),
    AgKit(ag_kit::Client),
    Cmdc(cmdc::Client),
}

impl Client {
    /// A client of `protocol` for the route served at `url`, in a conversation of its own.
    pub fn new(protocol: Protocol, url: String) -> Client {
        match protocol {
            Protocol::AgUi => Client::AgUi(ag_ui::Client::new(url)),
            Protocol::A2a => Client::A2a(a2a::Client::new(url)),
            Protocol::Agentscope => Client::AgentScope(agentscope::Client::new(url)),
            Protocol::AgKit => Client::AgKit(ag_kit::Client::new(url)),
            Protocol::Cmdc => Client::Cmdc(cmdc::Client::new(url)),
        }
    }

    /// The same conversation, now through the route served at `url` (another replica, a restarted proxy).
    pub fn retarget(&mut self, url: String) {
        match self {
            Client::AgUi(client) => client.retarget(url),
            Client::A2a(client) => client.retarget(url),
            Client::AgentScope(client) => client.retarget(url),
            Client::AgKit(client) => client.retarget(url),
            Client::Cmdc(client) => client.retarget(url),
        }
    }

    /// Sends `input` and starts reading what comes back.
    pub async fn start(&mut self, input: Input) -> Run<'_> {
        dispatch!(Client, self, client => client.start(input).await.into())
    }

    /// Sends `input` and reads everything that comes back.
    pub async fn exchange(&mut self, input: Input) -> Seen {
        self.start(input).await.finish().await
    }
}

/// One exchange being read.
pub enum Run<'a> {
    AgUi(ag_ui::Run<'a>),
    A2a(a2a::Run<'a>),
    AgentScope(agentscope::Run<'a>),
    AgKit(ag_kit::Run<'a>),
    Cmdc(cmdc::Run<'a>),
}

impl Run<'_> {
    /// Reads until the first assistant text arrives; returns it.
    pub async fn until_text(&mut self) -> String {
        dispatch!(Run, self, run => run.until_text().await)
    }

    /// Reads to the end of the exchange.
    pub async fn finish(self) -> Seen {
        dispatch!(Run, self, run => run.finish().await)
    }

    /// Goes away mid-run the protocol's own way: closes the connection, or where the protocol has a cancel
    /// (A2A `tasks/cancel`, CMDC `abort`), sends it.
    pub async fn leave(self) {
        dispatch!(Run, self, run => run.leave().await)
    }
}

macro_rules! run_from {
    ($($variant:ident: $module:ident),*) => {$(
        impl<'a> From<$module::Run<'a>> for Run<'a> {
            fn from(run: $module::Run<'a>) -> Self {
                Run::$variant(run)
            }
        }
    )*};
}

run_from!(AgUi: ag_ui, A2a: a2a, AgentScope: agentscope, AgKit: ag_kit, Cmdc: cmdc);

/// A scripted agent of one protocol on a real socket. Dropping it stops it.
#[allow(clippy::enum_variant_names)] // named after the protocols, as in the other two enums
pub enum Agent {
    AgUi(ag_ui::Agent),
    A2a(a2a::Agent),
    AgentScope(agentscope::Agent),
    AgKit(ag_kit::Agent),
    Cmdc(cmdc::Agent),
}

impl Agent {
    pub async fn serve(protocol: Protocol, script: Script) -> Agent {
        match protocol {
            Protocol::AgUi => Agent::AgUi(ag_ui::Agent::serve(script).await),
            Protocol::A2a => Agent::A2a(a2a::Agent::serve(script).await),
            Protocol::Agentscope => Agent::AgentScope(agentscope::Agent::serve(script).await),
            Protocol::AgKit => Agent::AgKit(ag_kit::Agent::serve(script).await),
            Protocol::Cmdc => Agent::Cmdc(cmdc::Agent::serve(script).await),
        }
    }

    /// The route's `upstream`.
    pub fn url(&self) -> String {
        dispatch!(Agent, self, agent => agent.url())
    }

    /// Lets a [`Script::Text`] agent stream the rest of its text.
    pub fn release(&self) {
        dispatch!(Agent, self, agent => agent.release())
    }

    /// What the agent was told so far.
    pub fn heard(&self) -> Vec<Heard> {
        dispatch!(Agent, self, agent => agent.heard())
    }

    /// What the agent was told, once it was told at least `count` things (waiting at most
    /// [`crate::support::WAIT`]).
    pub async fn hears(&self, count: usize) -> Vec<Heard> {
        let what = format!("the agent to be told {count} things");
        crate::support::within(&what, async {
            loop {
                let heard = self.heard();
                if heard.len() >= count {
                    return heard;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await
    }

    /// Whether the agent's work was cancelled within [`crate::support::WAIT`]: its request closed, or where
    /// its protocol has a cancel (A2A `tasks/cancel`, CMDC `abort`), that cancel received.
    pub async fn cancelled(&self) -> bool {
        let wait = crate::support::WAIT;
        dispatch!(Agent, self, agent => agent.cancelled(wait).await)
    }

    /// Whether the agent's work still goes on a moment later (its request open, no cancel sent).
    pub async fn still_working(&self) -> bool {
        let moment = std::time::Duration::from_millis(200);
        !dispatch!(Agent, self, agent => agent.cancelled(moment).await)
    }
}
