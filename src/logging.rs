//! The proxy's log: written to stderr as text or as one JSON object per line ([`init`]), and values from
//! clients and upstreams in it cut to [`LOG_VALUE_LIMIT`] bytes with their length noted, so that one large
//! frame or message never becomes one large log line.
//!
//! Secrets stay out of it: configured header values and API keys are never logged, and a request's headers
//! are not logged at all (only its route, path and outcome).

use std::fmt;
use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Logs to stderr in `format`, at the level `RUST_LOG` sets (default `info`). Text is colored only on a
/// terminal: a file or a collector gets no escape codes.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// The most bytes of one value a log line shows.
pub const LOG_VALUE_LIMIT: usize = 512;

/// `text` for a log line: whole up to [`LOG_VALUE_LIMIT`] bytes, else its start and `…[<len> bytes]`.
pub fn clipped(text: &str) -> Clipped<'_> {
    Clipped(text)
}

/// See [`clipped`].
pub struct Clipped<'a>(&'a str);

impl fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() <= LOG_VALUE_LIMIT {
            return f.write_str(self.0);
        }
        let start = char_prefix(self.0, LOG_VALUE_LIMIT);
        write!(f, "{start}…[{} bytes]", self.0.len())
    }
}

/// The longest start of `text` of at most `max` bytes (cut on a char boundary).
pub fn char_prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_value_is_cut_with_its_length_noted() {
        assert_eq!(clipped("short").to_string(), "short");
        let frame = format!("é{}", "x".repeat(9_000_000));
        let line = clipped(&frame).to_string();
        assert!(line.len() < LOG_VALUE_LIMIT + 32, "{} bytes", line.len());
        assert!(line.ends_with("…[9000002 bytes]"), "{line}");
        assert_eq!(char_prefix("éa", 1), "", "never half a char");
    }
}
