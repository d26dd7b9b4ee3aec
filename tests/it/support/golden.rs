//! Golden files: what a codec writes, compared with the file that holds what it should write.
//! `UPDATE_GOLDEN=1 cargo test --test it <module>::` rewrites the files instead of comparing; review the diff
//! before keeping it: the expected output is the assertion.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

/// Whether this run rewrites the golden files.
pub fn updating() -> bool {
    std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1")
}

/// Compares `actual` with the golden file at `path`, or rewrites the file when [`updating`].
pub fn check(path: &Path, actual: &str) {
    if updating() {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        fs::write(path, actual).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let expected = fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it, then review it)",
            path.display()
        )
    });
    if expected != actual {
        panic!(
            "{} differs (UPDATE_GOLDEN=1 rewrites it; review the diff)\n{}",
            path.display(),
            line_diff(&expected, actual)
        );
    }
}

/// The lines that differ, `-` expected and `+` actual, by position.
fn line_diff(expected: &str, actual: &str) -> String {
    let expected: Vec<&str> = expected.lines().collect();
    let actual: Vec<&str> = actual.lines().collect();
    let mut out = String::new();
    for i in 0..expected.len().max(actual.len()) {
        let (e, a) = (expected.get(i), actual.get(i));
        if e != a {
            if let Some(e) = e {
                out.push_str(&format!("{:>4} - {e}\n", i + 1));
            }
            if let Some(a) = a {
                out.push_str(&format!("{:>4} + {a}\n", i + 1));
            }
        }
    }
    out
}

/// Replaces ids the proxy minted (`<prefix>_<32 hex digits>`, for each of `prefixes`) by `<prefix>_#<n>`, numbered in order of first
/// appearance.
pub fn stable_ids(text: &str, prefixes: &[&str]) -> String {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'scan: while !rest.is_empty() {
        for prefix in prefixes {
            if let Some(after) = rest.strip_prefix(prefix) {
                let hex = after.bytes().take_while(|b| b.is_ascii_hexdigit()).count();
                if hex == 32 {
                    let id = &rest[..prefix.len() + 32];
                    let n = seen.len() + 1;
                    let n = *seen.entry(id.to_owned()).or_insert(n);
                    out.push_str(&format!("{prefix}#{n}"));
                    rest = &rest[prefix.len() + 32..];
                    continue 'scan;
                }
            }
        }
        let c = rest.chars().next().unwrap();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}
