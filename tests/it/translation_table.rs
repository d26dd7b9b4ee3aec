//! `docs/translation.md` checked against the code, so that the translation table cannot drift (issue 7); and
//! every pair the code has run by `tests/it/matrix.rs`.
//!
//! Every rule reads its facts from the code (the protocols, the canonical `Event` variants, the record keys the
//! outbounds keep, the `[routes.translate]` options) and its claims from the documents, with plain string
//! handling. Each failure says what is missing and where. The `drift_*` tests feed each rule a document with a
//! piece removed, to show that the rule does fail on real drift.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use agent_bridge::config::Protocol;
use agent_bridge::protocol::registry;

const DOC: &str = "docs/translation.md";
const README: &str = "README.md";
const MODEL: &str = "src/model.rs";
const PROTOCOLS_DIR: &str = "src/protocol";

/// The echo agent: an outbound that is no protocol.
const ECHO: &str = "echo";

/// How the document spells a protocol. The match is exhaustive: a new protocol does not compile until it is
/// named here, and then every rule below asks the document about it.
fn doc_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::AgUi => "AG-UI",
        Protocol::A2a => "A2A",
        Protocol::Agentscope => "AgentScope",
        Protocol::AgKit => "AG-Kit",
        Protocol::Cmdc => "CMDC",
    }
}

/// Protocols whose section is one set of tables rather than `### Inbound` and `### Outbound` subsections.
const WITHOUT_SUBSECTIONS: &[Protocol] = &[Protocol::AgUi];

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn report(rule: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{rule}:\n  - {}",
        problems.join("\n  - ")
    );
}

// --- Markdown, by hand ----------------------------------------------------------------------------------------

/// The headings starting with `marker` (`"## "`, `"### "`) and the text under each, up to the next heading of
/// the same or a higher level. Fenced code blocks are skipped.
fn sections<'a>(text: &'a str, marker: &str) -> Vec<(&'a str, String)> {
    let level = marker.trim_end().len();
    let mut found: Vec<(&str, String)> = Vec::new();
    let mut fenced = false;
    let mut open = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        let heading = !fenced && hashes > 0 && line[hashes..].starts_with(' ');
        if heading && hashes == level {
            found.push((line[marker.len()..].trim(), String::new()));
            open = true;
            continue;
        }
        if heading && hashes < level {
            open = false;
            continue;
        }
        if open {
            let body = &mut found.last_mut().expect("an open section").1;
            body.push_str(line);
            body.push('\n');
        }
    }
    found
}

/// The text of every code span (`` `x` ``, ``` ``x `y` z`` ```), trimmed, across line breaks.
fn code_spans(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let run_at = |i: usize| chars[i..].iter().take_while(|&&c| c == '`').count();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let n = run_at(i);
        let start = i + n;
        let mut j = start;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let m = run_at(j);
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                spans.push(
                    chars[start..end]
                        .iter()
                        .collect::<String>()
                        .trim()
                        .to_owned(),
                );
                i = end + n;
            }
            None => i = start,
        }
    }
    spans
}

/// The leading run of `allowed` characters of a string.
fn leading(text: &str, allowed: impl Fn(char) -> bool) -> &str {
    let end = text.find(|c| !allowed(c)).unwrap_or(text.len());
    &text[..end]
}

/// The header cells of every Markdown table in `text`.
fn table_headers(text: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[0].starts_with('|') && w[1].replace(' ', "").starts_with("|---"))
        .map(|w| {
            w[0].trim()
                .trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect()
}

fn is_snake(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

// --- Rule 1: a section per protocol ---------------------------------------------------------------------------

/// Where `text` (a section or subsection of `name`) lacks a table in one direction.
fn missing_directions(name: &str, text: &str, place: &str) -> Vec<String> {
    let headers = table_headers(text);
    let names = |cell: &String| cell == name || cell.starts_with(&format!("{name} "));
    let from = headers
        .iter()
        .any(|h| h.len() >= 2 && names(&h[0]) && h[1] == "canonical");
    let to = headers
        .iter()
        .any(|h| h.len() >= 2 && h[0] == "canonical" && names(&h[1]));
    let mut problems = Vec::new();
    if !from {
        problems.push(format!(
            "{place} has no table from {name} to the canonical model (a header `| {name} … | canonical |`)"
        ));
    }
    if !to {
        problems.push(format!(
            "{place} has no table from the canonical model to {name} (a header `| canonical | {name} … |`)"
        ));
    }
    problems
}

fn missing_protocol_sections(doc: &str) -> Vec<String> {
    let top = sections(doc, "## ");
    let mut problems = Vec::new();
    for protocol in Protocol::ALL {
        let name = doc_name(protocol);
        let section = top.iter().find(|(heading, _)| {
            heading.starts_with(&format!("{name} ")) && heading.ends_with("↔ canonical")
        });
        let Some((heading, body)) = section else {
            problems.push(format!(
                "{DOC} has no `## {name} … ↔ canonical` section for protocol `{}`",
                protocol.name()
            ));
            continue;
        };
        if WITHOUT_SUBSECTIONS.contains(&protocol) {
            problems.extend(missing_directions(
                name,
                body,
                &format!("{DOC} `## {heading}`"),
            ));
            continue;
        }
        let subsections = sections(body, "### ");
        for face in ["Inbound", "Outbound"] {
            match subsections.iter().find(|(h, _)| h.starts_with(face)) {
                None => problems.push(format!(
                    "{DOC} `## {heading}` has no `### {face} …` subsection"
                )),
                Some((sub, text)) => problems.extend(missing_directions(
                    name,
                    text,
                    &format!("{DOC} `## {heading}` / `### {sub}`"),
                )),
            }
        }
    }
    problems
}

#[test]
fn every_protocol_has_a_canonical_section_with_both_directions() {
    report(
        "protocol sections missing or incomplete",
        &missing_protocol_sections(&read(DOC)),
    );
}

// --- Rule 2: record keys --------------------------------------------------------------------------------------

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries =
        fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The protocol modules: the directories of `src/protocol` (`a2a`, `ag_kit`, …).
fn protocol_modules() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(PROTOCOLS_DIR);
    fs::read_dir(&dir)
        .expect("src/protocol")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_dir())
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// Whether `text` is a record key: `<protocol module>.<snake_case field>`.
fn is_record_key(text: &str, modules: &BTreeSet<String>) -> bool {
    text.split_once('.')
        .is_some_and(|(module, name)| modules.contains(module) && is_snake(name))
}

/// The record keys the outbounds keep, with where: `<owner>.<field>` for every field of each outbound's
/// `struct Conversation` (the type with `impl UpstreamState for Conversation { const OWNER: &'static str =
/// "<owner>"; }`) in src/protocol.
fn code_record_keys(modules: &BTreeSet<String>) -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(PROTOCOLS_DIR),
        &mut files,
    );
    files.sort();
    let mut keys = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("a source file");
        let shown = file
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(&file)
            .display()
            .to_string();
        let Some(owner) = state_owner(&text) else {
            continue;
        };
        for (field, line) in state_fields(&text) {
            let key = format!("{owner}.{field}");
            if is_record_key(&key, modules) {
                keys.push((key, format!("{shown}:{line}")));
            }
        }
    }
    keys
}

/// The `OWNER` of the `UpstreamState` a source file implements.
fn state_owner(text: &str) -> Option<&str> {
    let implemented = text.find("impl UpstreamState for ")?;
    let rest = &text[implemented..];
    let value = rest[rest.find("const OWNER: &'static str = \"")?..]
        .split('"')
        .nth(1)?;
    Some(value)
}

/// The fields of the `UpstreamState` a source file implements, each with its line number.
fn state_fields(text: &str) -> Vec<(&str, usize)> {
    let name = text
        .split("impl UpstreamState for ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the type that implements UpstreamState");
    let header = format!("struct {name} {{");
    let mut fields = Vec::new();
    let mut inside = false;
    for (n, line) in text.lines().enumerate() {
        if line.ends_with(&header) {
            inside = true;
        } else if inside && line == "}" {
            break;
        } else if inside {
            let field = line
                .trim_start_matches("    ")
                .trim_start_matches("pub(super) ");
            if let Some((field, _)) = field.split_once(": ") {
                if is_snake(field) {
                    fields.push((field, n + 1));
                }
            }
        }
    }
    fields
}

/// The record keys the document names in code spans (`a2a.context_id`, `cmdc.waiting`).
fn doc_record_keys(doc: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    code_spans(doc)
        .iter()
        .map(|span| leading(span, |c| c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter(|key| is_record_key(key, modules))
        .map(str::to_owned)
        .collect()
}

fn record_key_problems(doc: &str) -> Vec<String> {
    let modules = protocol_modules();
    let code = code_record_keys(&modules);
    assert!(
        code.iter().any(|(key, _)| key == "a2a.context_id"),
        "the record key parser found no `a2a.context_id` in src/protocol: it is broken, or the key moved"
    );
    let documented = doc_record_keys(doc, &modules);
    let mut problems = Vec::new();
    for (key, place) in &code {
        if !documented.contains(key) {
            problems.push(format!(
                "record key `{key}` ({place}) is not named in {DOC} (in backticks, in its protocol's Outbound table)"
            ));
        }
    }
    let known: BTreeSet<&str> = code.iter().map(|(key, _)| key.as_str()).collect();
    for key in &documented {
        if !known.contains(key.as_str()) {
            problems.push(format!(
                "{DOC} names record key `{key}`, which no outbound's `struct Conversation` in {PROTOCOLS_DIR} has"
            ));
        }
    }
    problems
}

#[test]
fn every_record_key_of_an_outbound_is_documented_and_every_documented_key_exists() {
    report("record keys out of step", &record_key_problems(&read(DOC)));
}

// --- Rule 3: [routes.translate] options -----------------------------------------------------------------------

/// The keys under `[routes.translate]` in the README's "routes.toml reference" block.
fn readme_translate_keys(readme: &str) -> Result<Vec<String>, String> {
    let section = readme
        .find("## routes.toml reference")
        .ok_or_else(|| format!("{README} has no `## routes.toml reference` section"))?;
    let rest = &readme[section..];
    let open = rest
        .find("```toml")
        .ok_or_else(|| format!("{README} `## routes.toml reference` has no ```toml block"))?;
    let block = &rest[open + "```toml".len()..];
    let block = &block[..block.find("```").unwrap_or(block.len())];
    let mut keys = Vec::new();
    let mut inside = false;
    for line in block.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line.starts_with("[routes.translate]");
            continue;
        }
        if !inside || line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((key, _)) = line.split_once('=') {
            keys.push(key.trim().to_owned());
        }
    }
    if keys.is_empty() {
        return Err(format!(
            "{README} `## routes.toml reference` block has no `[routes.translate]` keys"
        ));
    }
    Ok(keys)
}

/// What is out of step between the options the registry knows (`fields`) and the README's `readme`.
fn translate_option_problems(fields: &[&str], readme: &str) -> Vec<String> {
    let keys = match readme_translate_keys(readme) {
        Ok(keys) => keys,
        Err(problem) => return vec![problem],
    };
    let mut problems = Vec::new();
    for field in fields {
        if !keys.iter().any(|key| key == field) {
            problems.push(format!(
                "`[routes.translate]` option `{field}` (an options type in src/protocol or src/answers.rs) is \
                 not in {README}'s `## routes.toml reference` block"
            ));
        }
    }
    for key in &keys {
        if !fields.contains(&key.as_str()) {
            problems.push(format!(
                "{README}'s `## routes.toml reference` block documents `[routes.translate]` `{key}`, which no \
                 options type reads (registry::option_keys)"
            ));
        }
    }
    problems
}

#[test]
fn every_translate_option_is_in_the_readme_routes_toml_reference() {
    report(
        "[routes.translate] options out of step",
        &translate_option_problems(&registry::option_keys(), &read(README)),
    );
}

// --- Rule 4: every pair -----------------------------------------------------------------------------------------

/// The pairs a `### ` heading under `## Pairs` names: `A → B, C → D`, and `A → B, C, D` (all from A).
fn heading_pairs(heading: &str) -> Result<Vec<(String, String)>, String> {
    let names = heading.split(" (").next().unwrap_or(heading);
    let mut pairs = Vec::new();
    let mut from: Option<String> = None;
    for segment in names.split(',') {
        let segment = segment.trim();
        let to = match segment.split_once('→') {
            Some((a, b)) => {
                from = Some(a.trim().to_owned());
                b.trim()
            }
            None => segment,
        };
        let from = from
            .clone()
            .ok_or_else(|| format!("`{segment}` comes before any `X → Y`"))?;
        pairs.push((from, to.to_owned()));
    }
    Ok(pairs)
}

fn missing_pairs(doc: &str) -> Vec<String> {
    let inbounds: Vec<&str> = Protocol::ALL.into_iter().map(doc_name).collect();
    let mut outbounds = inbounds.clone();
    outbounds.push(ECHO);
    let top = sections(doc, "## ");
    let Some((_, pairs)) = top.iter().find(|(heading, _)| *heading == "Pairs") else {
        return vec![format!("{DOC} has no `## Pairs` section")];
    };
    let mut problems = Vec::new();
    let mut covered = BTreeSet::new();
    for (heading, _) in sections(pairs, "### ") {
        if !heading.contains('→') {
            continue;
        }
        match heading_pairs(heading) {
            Err(why) => problems.push(format!("{DOC} `### {heading}`: {why}")),
            Ok(found) => {
                for (from, to) in found {
                    if !inbounds.contains(&from.as_str()) {
                        problems.push(format!(
                            "{DOC} `### {heading}` names inbound `{from}`, which is no protocol ({})",
                            inbounds.join(", ")
                        ));
                    }
                    if !outbounds.contains(&to.as_str()) {
                        problems.push(format!(
                            "{DOC} `### {heading}` names outbound `{to}`, which is no outbound ({})",
                            outbounds.join(", ")
                        ));
                    }
                    covered.insert((from, to));
                }
            }
        }
    }
    for from in &inbounds {
        for to in &outbounds {
            if !covered.contains(&(from.to_string(), to.to_string())) {
                problems.push(format!(
                    "pair `{from} → {to}` has no `### ` heading under `## Pairs` in {DOC}"
                ));
            }
        }
    }
    problems
}

#[test]
fn every_inbound_outbound_pair_has_a_section_under_pairs() {
    report("pairs without a section", &missing_pairs(&read(DOC)));
}

/// The pairs `tests/it/matrix.rs` runs: its `<inbound>_to_<outbound>` entries, protocols in snake case.
const MATRIX: &str = "tests/it/matrix.rs";

fn snake(name: &str) -> String {
    name.replace('-', "_")
}

/// Every inbound × (outbound and echo) pair the code has, missing from the matrix's pair lists.
fn pairs_missing_from_the_matrix(matrix: &str) -> Vec<String> {
    let outbounds: Vec<&str> = Protocol::ALL
        .iter()
        .map(|p| p.name())
        .chain([ECHO])
        .collect();
    Protocol::ALL
        .iter()
        .flat_map(|from| outbounds.iter().map(move |to| (from.name(), *to)))
        .map(|(from, to)| format!("{}_to_{}", snake(from), snake(to)))
        .filter(|entry| !matrix.contains(&format!("{entry}:")))
        .map(|entry| format!("{MATRIX} does not run the pair `{entry}`"))
        .collect()
}

#[test]
fn every_pair_is_run_by_the_matrix() {
    report(
        "pairs the matrix does not run",
        &pairs_missing_from_the_matrix(&read(MATRIX)),
    );
}

// --- Rule 5: every canonical event ------------------------------------------------------------------------------

/// The variant names of `pub enum Event` in src/model.rs.
fn event_variants(model: &str) -> Vec<String> {
    let start = model
        .find("pub enum Event {")
        .expect("src/model.rs has no `pub enum Event {`");
    let mut variants = Vec::new();
    let mut depth = 0usize;
    for line in model[start..].lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("//") {
            continue;
        }
        if depth == 1 && trimmed.starts_with(|c: char| c.is_ascii_uppercase()) {
            variants.push(leading(trimmed, |c| c.is_ascii_alphanumeric() || c == '_').to_owned());
        }
        for c in trimmed.chars() {
            match c {
                '{' | '(' => depth += 1,
                '}' | ')' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        if depth == 0 {
            break;
        }
    }
    variants
}

fn missing_events(doc: &str, model: &str) -> Vec<String> {
    let variants = event_variants(model);
    assert!(
        variants.iter().any(|v| v == "RunStarted") && variants.iter().any(|v| v == "Raw"),
        "the Event parser did not find `RunStarted` and `Raw` in {MODEL}: it is broken ({variants:?})"
    );
    let named: BTreeSet<String> = code_spans(doc)
        .iter()
        .map(|span| leading(span, |c| c.is_ascii_alphanumeric() || c == '_').to_owned())
        .collect();
    variants
        .into_iter()
        .filter(|variant| !named.contains(variant))
        .map(|variant| {
            format!(
                "canonical event `{variant}` ({MODEL}, enum Event) is not named in backticks in {DOC}: add it to \
                 the table of the protocol that maps it, or where it is dropped"
            )
        })
        .collect()
}

#[test]
fn every_canonical_event_is_named_in_the_translation_table() {
    report(
        "canonical events not documented",
        &missing_events(&read(DOC), &read(MODEL)),
    );
}

// --- The rules fail on drift ------------------------------------------------------------------------------------

#[test]
fn drift_a_removed_protocol_section_or_subsection_is_reported() {
    let doc = read(DOC);
    let without = doc.replace("## AgentScope ↔ canonical", "## AgentScope notes");
    let problems = missing_protocol_sections(&without);
    assert!(
        problems.iter().any(|p| p.contains("`agentscope`")),
        "{problems:?}"
    );
    let without = doc.replace("### Outbound (we are the v0 client)", "### Client side");
    let problems = missing_protocol_sections(&without);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("AG-Kit") && p.contains("### Outbound")),
        "{problems:?}"
    );
}

#[test]
fn drift_an_undocumented_or_unknown_record_key_is_reported() {
    let doc = read(DOC).replace("`a2a.task_id`", "the task id");
    let problems = record_key_problems(&doc);
    assert!(
        problems.iter().any(|p| p.contains("`a2a.task_id`")),
        "{problems:?}"
    );
    let doc = format!("{}\nrecord `cmdc.no_such_key`\n", read(DOC));
    let problems = record_key_problems(&doc);
    assert!(
        problems.iter().any(|p| p.contains("`cmdc.no_such_key`")),
        "{problems:?}"
    );
}

#[test]
fn drift_an_undocumented_translate_option_is_reported() {
    let mut fields = registry::option_keys();
    fields.push("brand_new_option");
    let problems = translate_option_problems(&fields, &read(README));
    assert!(
        problems.iter().any(|p| p.contains("`brand_new_option`")),
        "{problems:?}"
    );
}

#[test]
fn drift_a_pair_without_a_heading_is_reported() {
    let doc = read(DOC).replace("### A2A → A2A", "### Between two A2A peers");
    let problems = missing_pairs(&doc);
    assert!(
        problems.iter().any(|p| p.contains("`A2A → A2A`")),
        "{problems:?}"
    );
    assert_eq!(
        heading_pairs("CMDC → AG-UI, A2A, echo (any agent)").unwrap(),
        [("CMDC", "AG-UI"), ("CMDC", "A2A"), ("CMDC", "echo")]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
}

#[test]
fn drift_a_new_event_variant_is_reported() {
    let model = read(MODEL).replace(
        "pub enum Event {",
        "pub enum Event {\n    BrandNewEvent { id: String },",
    );
    let problems = missing_events(&read(DOC), &model);
    assert!(
        problems.iter().any(|p| p.contains("`BrandNewEvent`")),
        "{problems:?}"
    );
}

#[test]
fn drift_a_pair_missing_from_the_matrix_is_reported() {
    let matrix = read(MATRIX).replace("cmdc_to_ag_kit:", "");
    let problems = pairs_missing_from_the_matrix(&matrix);
    assert!(
        problems.iter().any(|p| p.contains("`cmdc_to_ag_kit`")),
        "{problems:?}"
    );
}
