//! The request checks of the real runtime, and its words for them.
//!
//! agentscope-runtime 1.1.6.post2 hands the JSON body to pydantic (`AgentRequest(**body)`) inside the stream
//! generator, so a body that is JSON but does not fit the model is answered `200 text/event-stream` with one
//! frame `data: {"error": "<str(ValidationError)>"}` (`specs/agentscope.md` §1.5). This module checks a body
//! against the same model, with pydantic's lax-mode coercions (`"5"` is an int, `1` a bool, `5.0` an int),
//! and renders what fails as pydantic does:
//!
//! ```text
//! 1 validation error for AgentRequest
//! input.0.content
//!   Input should be a valid list [type=list_type, input_value='hi', input_type=str]
//! ```
//!
//! Values pydantic coerces are rewritten in place to their strict JSON form (`"5"` → `5`, `"yes"` → `true`),
//! so that a body that passes reads into the strict wire types. Every error is reported, in the model's
//! field order. Two differences, both harmless to clients: the
//! `For further information visit https://errors.pydantic.dev/<version>/…` line is left out (it names the
//! pydantic version of the server), and `input_value` shows object keys sorted rather than in request order.
//!
//! The model (fields in declaration order; every one may be absent; `Optional` ones may be `null`):
//!
//! | model | fields |
//! | --- | --- |
//! | `AgentRequest` | `input: List[Message]` (required), `stream: bool`, `id`, `model: Optional[str]`, `top_p`, `temperature`, `frequency_penalty`, `presence_penalty: Optional[float]`, `max_tokens: Optional[int]`, `stop: Optional[str \| List[str]]`, `n: Optional[int]` (1..=5), `seed: Optional[int]`, `tools: Optional[List[Tool \| Dict]]`, `session_id`, `user_id: Optional[str]` |
//! | `Message` | `sequence_number: Optional[int]`, `object: str`, `status: str`, `error: Optional[Error]`, `id: str`, `type: str`, `role: Optional['assistant' \| 'system' \| 'user' \| 'tool']`, `content: Optional[List[Content]]`, `code`, `message: Optional[str]`, `usage`, `metadata: Optional[Dict]` |
//! | `Content` (by `type`) | `sequence_number: Optional[int]`, `object: str`, `status: Optional[str]`, `error: Optional[Error]`, `index: Optional[int]`, `delta: Optional[bool]`, `msg_id: Optional[str]`, then `text` / `image_url` / `data: Optional[Dict]` / `data`, `format` (audio) / `file_url`, `file_id`, `filename`, `file_data` / `refusal` / `video_url`, all `Optional[str]` unless said |
//! | `Error` | `code: str`, `message: str` (both required) |
//!
//! Unknown fields are allowed everywhere, as in the model. A message's `type` is any string (the runtime
//! does not check it against its enum); a content's `type` must be one of the content kinds.

use std::fmt::Write;

use serde_json::{Map, Value};

/// The content kinds, in the order of the runtime's discriminated union.
const CONTENT_TYPES: &[&str] = &["text", "image", "data", "audio", "file", "refusal", "video"];

/// Checks a request body (a JSON object) against `AgentRequest`, coercing what pydantic coerces; the error
/// text of pydantic when it does not fit.
pub fn check_request(body: &mut Map<String, Value>) -> Result<(), String> {
    let mut check = Checker::default();
    check.request(body);
    if check.errors.is_empty() {
        Ok(())
    } else {
        Err(render("AgentRequest", &check.errors))
    }
}

/// One failed check.
#[derive(Debug)]
struct Failure {
    loc: Vec<String>,
    kind: &'static str,
    message: String,
    input: Value,
}

#[derive(Default)]
struct Checker {
    loc: Vec<String>,
    errors: Vec<Failure>,
}

/// How a scalar field is typed.
#[derive(Clone, Copy)]
enum Scalar {
    Str,
    Int,
    Float,
    Bool,
    Dict,
}

impl Checker {
    fn fail(&mut self, kind: &'static str, message: impl Into<String>, input: &Value) {
        self.errors.push(Failure {
            loc: self.loc.clone(),
            kind,
            message: message.into(),
            input: input.clone(),
        });
    }

    /// Runs `f` one location deeper.
    fn at<R>(&mut self, key: impl Into<String>, f: impl FnOnce(&mut Self) -> R) -> R {
        self.loc.push(key.into());
        let result = f(self);
        self.loc.pop();
        result
    }

    fn request(&mut self, body: &mut Map<String, Value>) {
        if !body.contains_key("input") {
            let whole = Value::Object(body.clone());
            self.at("input", |c| c.fail("missing", "Field required", &whole));
        }
        if let Some(input) = body.get_mut("input") {
            self.at("input", |c| c.messages(input));
        }
        self.field(body, "stream", Scalar::Bool, false);
        self.field(body, "id", Scalar::Str, true);
        self.field(body, "model", Scalar::Str, true);
        for name in [
            "top_p",
            "temperature",
            "frequency_penalty",
            "presence_penalty",
        ] {
            self.field(body, name, Scalar::Float, true);
        }
        self.field(body, "max_tokens", Scalar::Int, true);
        if let Some(stop) = body.get("stop") {
            self.at("stop", |c| c.stop(stop));
        }
        if let Some(n) = body.get_mut("n") {
            self.at("n", |c| c.n(n));
        }
        self.field(body, "seed", Scalar::Int, true);
        if let Some(tools) = body.get("tools") {
            self.at("tools", |c| c.tools(tools));
        }
        self.field(body, "session_id", Scalar::Str, true);
        self.field(body, "user_id", Scalar::Str, true);
    }

    /// An optional field of `object`, if present.
    fn field(&mut self, object: &mut Map<String, Value>, name: &str, kind: Scalar, nullable: bool) {
        if let Some(value) = object.get_mut(name) {
            self.at(name, |c| c.scalar(value, kind, nullable));
        }
    }

    /// Checks a scalar, rewriting a coerced value in its strict form.
    fn scalar(&mut self, value: &mut Value, kind: Scalar, nullable: bool) {
        if value.is_null() && nullable {
            return;
        }
        let result = match kind {
            Scalar::Str => match value.is_string() {
                true => Ok(None),
                false => Err(("string_type", "Input should be a valid string")),
            },
            Scalar::Dict => match value.is_object() {
                true => Ok(None),
                false => Err(("dict_type", "Input should be a valid dictionary")),
            },
            Scalar::Int if value.is_i64() || value.is_u64() => Ok(None),
            Scalar::Int => lax_int(value).map(|n| Some(Value::from(n))),
            Scalar::Float if value.is_number() => Ok(None),
            Scalar::Float => lax_float(value).map(|n| Some(Value::from(n))),
            Scalar::Bool => lax_bool(value).map(|b| Some(Value::Bool(b))),
        };
        match result {
            Ok(Some(strict)) => *value = strict,
            Ok(None) => {}
            Err((kind, message)) => self.fail(kind, message, value),
        }
    }

    fn messages(&mut self, input: &mut Value) {
        let Some(items) = input.as_array_mut() else {
            return self.fail("list_type", "Input should be a valid list", input);
        };
        for (index, item) in items.iter_mut().enumerate() {
            self.at(index.to_string(), |c| c.message(item));
        }
    }

    fn message(&mut self, item: &mut Value) {
        let Some(message) = item.as_object_mut() else {
            return self.fail(
                "model_type",
                "Input should be a valid dictionary or instance of Message",
                item,
            );
        };
        self.field(message, "sequence_number", Scalar::Int, true);
        self.field(message, "object", Scalar::Str, false);
        self.field(message, "status", Scalar::Str, false);
        self.error_field(message);
        self.field(message, "id", Scalar::Str, false);
        self.field(message, "type", Scalar::Str, false);
        if let Some(role) = message.get("role") {
            self.at("role", |c| {
                let known = role.is_null()
                    || matches!(
                        role.as_str(),
                        Some("assistant" | "system" | "user" | "tool")
                    );
                if !known {
                    c.fail(
                        "literal_error",
                        "Input should be 'assistant', 'system', 'user' or 'tool'",
                        role,
                    );
                }
            });
        }
        if let Some(content) = message.get_mut("content") {
            self.at("content", |c| c.contents(content));
        }
        self.field(message, "code", Scalar::Str, true);
        self.field(message, "message", Scalar::Str, true);
        self.field(message, "usage", Scalar::Dict, true);
        self.field(message, "metadata", Scalar::Dict, true);
    }

    /// `error: Optional[Error]` of a message or a content.
    fn error_field(&mut self, object: &mut Map<String, Value>) {
        let Some(error) = object.get_mut("error") else {
            return;
        };
        self.at("error", |c| {
            if error.is_null() {
                return;
            }
            let whole = error.clone();
            let Some(fields) = error.as_object_mut() else {
                return c.fail(
                    "model_type",
                    "Input should be a valid dictionary or instance of Error",
                    &whole,
                );
            };
            for name in ["code", "message"] {
                match fields.get_mut(name) {
                    Some(value) => c.at(name, |c| c.scalar(value, Scalar::Str, false)),
                    None => c.at(name, |c| c.fail("missing", "Field required", &whole)),
                }
            }
        });
    }

    fn contents(&mut self, content: &mut Value) {
        if content.is_null() {
            return;
        }
        let Some(items) = content.as_array_mut() else {
            return self.fail("list_type", "Input should be a valid list", content);
        };
        for (index, item) in items.iter_mut().enumerate() {
            self.at(index.to_string(), |c| c.content(item));
        }
    }

    fn content(&mut self, item: &mut Value) {
        let whole = item.clone();
        let Some(content) = item.as_object_mut() else {
            return self.fail(
                "model_attributes_type",
                "Input should be a valid dictionary or object to extract fields from",
                item,
            );
        };
        let Some(tag) = content.get("type") else {
            return self.fail(
                "union_tag_not_found",
                "Unable to extract tag using discriminator 'type'",
                &whole,
            );
        };
        let Some(kind) = tag
            .as_str()
            .and_then(|t| CONTENT_TYPES.iter().copied().find(|known| *known == t))
        else {
            let expected: Vec<String> = CONTENT_TYPES.iter().map(|t| format!("'{t}'")).collect();
            return self.fail(
                "union_tag_invalid",
                format!(
                    "Input tag {} found using 'type' does not match any of the expected tags: {}",
                    python_repr(tag),
                    expected.join(", ")
                ),
                &whole,
            );
        };
        self.at(kind, |c| {
            c.field(content, "sequence_number", Scalar::Int, true);
            c.field(content, "object", Scalar::Str, false);
            c.field(content, "status", Scalar::Str, true);
            c.error_field(content);
            c.field(content, "index", Scalar::Int, true);
            c.field(content, "delta", Scalar::Bool, true);
            c.field(content, "msg_id", Scalar::Str, true);
            let own: &[(&str, Scalar)] = match kind {
                "text" => &[("text", Scalar::Str)],
                "image" => &[("image_url", Scalar::Str)],
                "data" => &[("data", Scalar::Dict)],
                "audio" => &[("data", Scalar::Str), ("format", Scalar::Str)],
                "file" => &[
                    ("file_url", Scalar::Str),
                    ("file_id", Scalar::Str),
                    ("filename", Scalar::Str),
                    ("file_data", Scalar::Str),
                ],
                "refusal" => &[("refusal", Scalar::Str)],
                _ => &[("video_url", Scalar::Str)],
            };
            for (name, scalar) in own {
                c.field(content, name, *scalar, true);
            }
        });
    }

    /// `stop: Optional[Union[Optional[str], List[str]]]`: a failure names both members of the union.
    fn stop(&mut self, stop: &Value) {
        if stop.is_null() || stop.is_string() {
            return;
        }
        let items_ok = stop
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string));
        if items_ok {
            return;
        }
        self.at("str", |c| {
            c.fail("string_type", "Input should be a valid string", stop)
        });
        self.at("list[str]", |c| match stop.as_array() {
            None => c.fail("list_type", "Input should be a valid list", stop),
            Some(items) => {
                for (index, item) in items.iter().enumerate() {
                    if !item.is_string() {
                        c.at(index.to_string(), |c| {
                            c.fail("string_type", "Input should be a valid string", item)
                        });
                    }
                }
            }
        });
    }

    /// `n: Optional[int] = Field(default=1, ge=1, le=5)`.
    fn n(&mut self, n: &mut Value) {
        if n.is_null() {
            return;
        }
        match lax_int(n) {
            Err((kind, message)) => self.fail(kind, message, n),
            Ok(value) if value < 1 => self.fail(
                "greater_than_equal",
                "Input should be greater than or equal to 1",
                n,
            ),
            Ok(value) if value > 5 => self.fail(
                "less_than_equal",
                "Input should be less than or equal to 5",
                n,
            ),
            Ok(value) => *n = Value::from(value),
        }
    }

    /// `tools: Optional[List[Union[Tool, Dict]]]`: any object fits (as a `Dict` if not as a `Tool`).
    fn tools(&mut self, tools: &Value) {
        if tools.is_null() {
            return;
        }
        let Some(items) = tools.as_array() else {
            return self.fail("list_type", "Input should be a valid list", tools);
        };
        for (index, item) in items.iter().enumerate() {
            if item.is_object() {
                continue;
            }
            self.at(index.to_string(), |c| {
                c.at("Tool", |c| {
                    c.fail(
                        "model_type",
                        "Input should be a valid dictionary or instance of Tool",
                        item,
                    )
                });
                c.at("dict[str,any]", |c| {
                    c.fail("dict_type", "Input should be a valid dictionary", item)
                });
            });
        }
    }
}

type Failed = (&'static str, &'static str);

/// pydantic's lax `int`: integers, floats without a fraction, numeric strings, booleans.
pub fn lax_int(value: &Value) -> Result<i64, Failed> {
    const NOT_INT: Failed = ("int_type", "Input should be a valid integer");
    match value {
        Value::Number(number) => {
            if let Some(int) = number.as_i64() {
                return Ok(int);
            }
            if number.as_u64().is_some() {
                return Ok(i64::MAX);
            }
            let float = number.as_f64().unwrap_or(f64::NAN);
            if float.fract() == 0.0 && float.is_finite() {
                // Saturates; only the sign matters to the range checks.
                Ok(float as i64)
            } else {
                Err((
                    "int_from_float",
                    "Input should be a valid integer, got a number with a fractional part",
                ))
            }
        }
        Value::Bool(flag) => Ok(i64::from(*flag)),
        Value::String(text) => text.trim().parse::<i64>().map_err(|_| {
            (
                "int_parsing",
                "Input should be a valid integer, unable to parse string as an integer",
            )
        }),
        _ => Err(NOT_INT),
    }
}

/// pydantic's lax `float`: numbers, numeric strings, booleans.
pub fn lax_float(value: &Value) -> Result<f64, Failed> {
    match value {
        Value::Number(number) => Ok(number.as_f64().unwrap_or_default()),
        Value::Bool(flag) => Ok(f64::from(u8::from(*flag))),
        Value::String(text) => text.trim().parse::<f64>().map_err(|_| {
            (
                "float_parsing",
                "Input should be a valid number, unable to parse string as a number",
            )
        }),
        _ => Err(("float_type", "Input should be a valid number")),
    }
}

/// pydantic's lax `bool`: booleans, 0 and 1, and the strings it knows.
pub fn lax_bool(value: &Value) -> Result<bool, Failed> {
    const UNREADABLE: Failed = (
        "bool_parsing",
        "Input should be a valid boolean, unable to interpret input",
    );
    match value {
        Value::Bool(flag) => Ok(*flag),
        Value::Number(number) => match number.as_f64() {
            Some(0.0) => Ok(false),
            Some(1.0) => Ok(true),
            _ => Err(UNREADABLE),
        },
        Value::String(text) => match text.trim().to_ascii_lowercase().as_str() {
            "0" | "off" | "f" | "false" | "n" | "no" => Ok(false),
            "1" | "on" | "t" | "true" | "y" | "yes" => Ok(true),
            _ => Err(UNREADABLE),
        },
        _ => Err(("bool_type", "Input should be a valid boolean")),
    }
}

/// `str(ValidationError)`, without the documentation link.
fn render(model: &str, errors: &[Failure]) -> String {
    let count = errors.len();
    let mut text = format!(
        "{count} validation error{} for {model}",
        if count == 1 { "" } else { "s" }
    );
    for error in errors {
        let _ = write!(
            text,
            "\n{}\n  {} [type={}, input_value={}, input_type={}]",
            error.loc.join("."),
            error.message,
            error.kind,
            truncate(&python_repr(&error.input)),
            python_type(&error.input),
        );
    }
    text
}

/// pydantic shows at most 50 characters of an input: the first and last 25 around `...`.
fn truncate(repr: &str) -> String {
    let chars: Vec<char> = repr.chars().collect();
    if chars.len() <= 50 {
        return repr.to_owned();
    }
    let head: String = chars[..25].iter().collect();
    let tail: String = chars[chars.len() - 24..].iter().collect();
    format!("{head}...{tail}")
}

fn python_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Python's `repr` of a parsed JSON value.
fn python_repr(value: &Value) -> String {
    let mut out = String::new();
    repr_into(value, &mut out);
    out
}

fn repr_into(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e16 => {
                let _ = write!(out, "{f:.1}");
            }
            _ => {
                let _ = write!(out, "{n}");
            }
        },
        Value::String(s) => string_repr(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr_into(item, out);
            }
            out.push(']');
        }
        Value::Object(fields) => {
            out.push('{');
            for (i, (key, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                string_repr(key, out);
                out.push_str(": ");
                repr_into(item, out);
            }
            out.push('}');
        }
    }
}

/// Python's string repr: single quotes unless the text holds one and no double quote.
fn string_repr(text: &str, out: &mut String) {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for ch in text.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(mut body: Value) -> Result<(), String> {
        check_request(body.as_object_mut().expect("an object"))
    }

    #[test]
    fn the_shipped_clients_request_fits() {
        let body = json!({"input":[{"object":"message","status":"created","id":"msg_1","type":"message","role":"user","content":[{"object":"content","type":"text","delta":false,"text":"hi"}]}],"stream":true,"n":1,"session_id":"s1","user_id":"u1"});
        assert_eq!(check(body), Ok(()));
    }

    #[test]
    fn input_not_a_list_reads_like_pydantic() {
        assert_eq!(
            check(json!({"input": "hi"})).unwrap_err(),
            "1 validation error for AgentRequest\ninput\n  Input should be a valid list [type=list_type, input_value='hi', input_type=str]"
        );
    }

    #[test]
    fn missing_input_shows_the_whole_body() {
        assert_eq!(
            check(json!({"stream": true})).unwrap_err(),
            "1 validation error for AgentRequest\ninput\n  Field required [type=missing, input_value={'stream': True}, input_type=dict]"
        );
    }

    #[test]
    fn content_as_a_string_and_an_unknown_content_type_are_both_reported() {
        let body = json!({"input": [
            {"role": "user", "content": "hello"},
            {"role": "user", "content": [{"type": "html", "html": "<b>"}]},
        ]});
        let text = check(body).unwrap_err();
        assert!(
            text.starts_with("2 validation errors for AgentRequest\n"),
            "{text}"
        );
        assert!(text.contains("\ninput.0.content\n  Input should be a valid list [type=list_type, input_value='hello', input_type=str]"), "{text}");
        assert!(text.contains("\ninput.1.content.0\n  Input tag 'html' found using 'type' does not match any of the expected tags: 'text', 'image', 'data', 'audio', 'file', 'refusal', 'video' [type=union_tag_invalid"), "{text}");
    }

    #[test]
    fn typed_content_fields_are_located_under_their_tag() {
        let body = json!({"input": [{"content": [{"type": "text", "text": 5}]}]});
        assert_eq!(
            check(body).unwrap_err(),
            "1 validation error for AgentRequest\ninput.0.content.0.text.text\n  Input should be a valid string [type=string_type, input_value=5, input_type=int]"
        );
    }

    #[test]
    fn n_is_bounded_and_lax() {
        assert!(check(json!({"input": [], "n": 0}))
            .unwrap_err()
            .contains("n\n  Input should be greater than or equal to 1 [type=greater_than_equal, input_value=0, input_type=int]"));
        assert!(check(json!({"input": [], "n": 6}))
            .unwrap_err()
            .contains("Input should be less than or equal to 5"));
        assert_eq!(check(json!({"input": [], "n": "3"})), Ok(()));
        assert_eq!(check(json!({"input": [], "n": 2.0})), Ok(()));
        assert_eq!(check(json!({"input": [], "n": null})), Ok(()));
        assert!(check(json!({"input": [], "n": 2.5}))
            .unwrap_err()
            .contains("[type=int_from_float, input_value=2.5, input_type=float]"));
    }

    #[test]
    fn wrong_scalar_types_are_named() {
        let text = check(json!({"input": [], "stream": "maybe", "session_id": 7, "temperature": "hot", "stop": 3}))
            .unwrap_err();
        assert!(text.starts_with("5 validation errors"), "{text}");
        assert!(text.contains("stream\n  Input should be a valid boolean, unable to interpret input [type=bool_parsing"));
        assert!(text.contains("session_id\n  Input should be a valid string [type=string_type, input_value=7, input_type=int]"));
        assert!(text.contains(
            "temperature\n  Input should be a valid number, unable to parse string as a number"
        ));
        assert!(text.contains("stop.str\n  Input should be a valid string"));
        assert!(text.contains("stop.list[str]\n  Input should be a valid list"));
        assert_eq!(
            check(json!({"input": [], "stream": "yes", "stop": ["a"]})),
            Ok(())
        );
    }

    #[test]
    fn message_shapes() {
        let text = check(
            json!({"input": ["hi", {"role": "bot", "id": null, "content": [{"text": "x"}]}]}),
        )
        .unwrap_err();
        assert!(text.contains("input.0\n  Input should be a valid dictionary or instance of Message [type=model_type"), "{text}");
        assert!(text.contains("input.1.id\n  Input should be a valid string [type=string_type, input_value=None, input_type=NoneType]"), "{text}");
        assert!(text.contains("input.1.role\n  Input should be 'assistant', 'system', 'user' or 'tool' [type=literal_error, input_value='bot'"), "{text}");
        assert!(text.contains("input.1.content.0\n  Unable to extract tag using discriminator 'type' [type=union_tag_not_found, input_value={'text': 'x'}, input_type=dict]"), "{text}");
    }

    #[test]
    fn tools_take_any_object_only() {
        assert_eq!(
            check(json!({"input": [], "tools": [{"anything": 1}]})),
            Ok(())
        );
        let text = check(json!({"input": [], "tools": ["search"]})).unwrap_err();
        assert!(
            text.contains("tools.0.Tool\n  Input should be a valid dictionary or instance of Tool"),
            "{text}"
        );
        assert!(
            text.contains("tools.0.dict[str,any]\n  Input should be a valid dictionary"),
            "{text}"
        );
    }

    #[test]
    fn long_inputs_are_cut_in_the_middle() {
        let text = check(json!({"input": "a".repeat(100)})).unwrap_err();
        let expected = format!(
            "input_value='{}...{}', input_type=str",
            "a".repeat(24),
            "a".repeat(23)
        );
        assert!(text.contains(&expected), "{text}");
    }

    #[test]
    fn coerced_values_are_rewritten_in_their_strict_form() {
        let mut body = json!({
            "input": [{"content": [{"type": "text", "index": "0", "delta": 1}]}],
            "stream": "yes", "n": "2", "max_tokens": 5.0, "temperature": "0.5", "seed": 7
        });
        check_request(body.as_object_mut().unwrap()).unwrap();
        assert_eq!(body["stream"], json!(true));
        assert_eq!(body["n"], json!(2));
        assert_eq!(body["max_tokens"], json!(5));
        assert_eq!(body["temperature"], json!(0.5));
        assert_eq!(body["seed"], json!(7));
        assert_eq!(body["input"][0]["content"][0]["index"], json!(0));
        assert_eq!(body["input"][0]["content"][0]["delta"], json!(true));
    }

    #[test]
    fn python_reprs() {
        assert_eq!(python_repr(&json!("it's")), "\"it's\"");
        assert_eq!(python_repr(&json!("a\nb")), "'a\\nb'");
        assert_eq!(
            python_repr(&json!([1, 2.0, 2.5, null, false])),
            "[1, 2.0, 2.5, None, False]"
        );
        assert_eq!(python_repr(&json!({"b": {"c": []}})), "{'b': {'c': []}}");
    }
}
