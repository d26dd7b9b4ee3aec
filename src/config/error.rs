//! Where a config error is (file, line, key path) and what it says.

use super::{spans, KeyPath};

/// A config error: where (file, line, key path) and what.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", self.location())]
pub struct ConfigError {
    file: String,
    line: Option<usize>,
    key: Option<String>,
    message: String,
}

impl ConfigError {
    /// The file as named to [`super::Config::load`] or [`super::Config::parse`].
    pub fn file(&self) -> &str {
        &self.file
    }

    /// 1-based; `None` when the file could not be read (or toml gave no position, which the
    /// tests have not seen).
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The key path, e.g. `routes[0].timeout`; `None` for TOML syntax errors and unreadable files.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// What is wrong, without the location.
    pub fn message(&self) -> &str {
        &self.message
    }

    fn location(&self) -> String {
        let mut location = self.file.clone();
        if let Some(line) = self.line {
            location.push_str(&format!(":{line}"));
        }
        if let Some(key) = &self.key {
            location.push_str(&format!(": {key}"));
        }
        location
    }

    pub(super) fn at(file: &str, line: usize, key: KeyPath, message: String) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            line: Some(line),
            key: Some(key.to_string()),
            message,
        }
    }

    pub(super) fn unreadable(file: String, err: &std::io::Error) -> ConfigError {
        ConfigError {
            file,
            line: None,
            key: None,
            message: format!("cannot read the file: {err}"),
        }
    }

    pub(super) fn from_toml(err: &toml::de::Error, text: &str, file: &str) -> ConfigError {
        let message = err.message().trim_end().to_owned();
        let offset = err.span().map(|span| span.start);
        let key = offset
            .and_then(|offset| spans::Node::parse(text)?.path_at(offset))
            .map(|path| match missing_field(&message) {
                // toml points a missing field at its table; name the field itself.
                Some(field) => path.key(field),
                None => path,
            })
            .filter(|path| !path.is_root());
        ConfigError {
            file: file.to_owned(),
            line: offset.map(|offset| line_of(text, offset)),
            key: key.map(|path| path.to_string()),
            message,
        }
    }
}

/// The field named by serde's standard "missing field `x`" message.
fn missing_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("missing field `")?
        .split_once('`')
        .map(|(field, _)| field)
}

/// The 1-based line holding byte `offset`.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    let before = &text.as_bytes()[..offset.min(text.len())];
    1 + before.iter().filter(|&&byte| byte == b'\n').count()
}

/// A validation failure before it is placed in the file.
#[derive(Debug)]
pub(super) struct Issue {
    pub(super) path: KeyPath,
    pub(super) message: String,
}

impl Issue {
    pub(super) fn new(path: KeyPath, message: impl Into<String>) -> Issue {
        Issue {
            path,
            message: message.into(),
        }
    }

    /// Places the issue at its key, or at the nearest enclosing key present in the file when the
    /// key itself is missing (e.g. a required `upstream` reports its route's `[[routes]]` line).
    pub(super) fn locate(self, text: &str, file: &str) -> ConfigError {
        let offset = spans::Node::parse(text).map_or(0, |tree| tree.offset_of(&self.path));
        ConfigError {
            file: file.to_owned(),
            line: Some(line_of(text, offset)),
            key: Some(self.path.to_string()),
            message: self.message,
        }
    }
}
