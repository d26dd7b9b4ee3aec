//! How a person's free-text answer to an approval reads, by one documented rule (README, "Pauses"):
//!
//! 1. trim, lowercase, drop apostrophes (`don't` → `dont`), and turn every other punctuation mark (ASCII and
//!    CJK: `，。！？、` …) into a space; the words are what the spaces separate;
//! 2. an **approval** when the first word is an approval word and no word is a negation;
//! 3. a **rejection** when the first word is a rejection word;
//! 4. anything else is **unclear**: the proxy asks again instead of guessing.
//!
//! Chinese is written without spaces, so a Chinese word counts as a list word when it begins with one
//! (`好的删除吧` begins with `好`); the rejection list is tried first (`不好` is a rejection).
//!
//! The lists cover English and Chinese (the protocols' own documents are Chinese); a route adds its own
//! (`approval_words`, `rejection_words` in `[routes.translate]`).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// What an answer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
    Unclear,
}

const APPROVAL: &[&str] = &[
    "yes",
    "y",
    "yeah",
    "yep",
    "yup",
    "sure",
    "ok",
    "okay",
    "k",
    "fine",
    "true",
    "approve",
    "approved",
    "accept",
    "accepted",
    "allow",
    "allowed",
    "confirm",
    "confirmed",
    "agree",
    "agreed",
    "go",
    "proceed",
    "continue",
    "affirmative",
    "好",
    "好的",
    "可以",
    "同意",
    "行",
    "是",
    "是的",
    "对",
    "确认",
    "确定",
    "批准",
    "允许",
    "没问题",
    "继续",
    "嗯",
];

const REJECTION: &[&str] = &[
    "no",
    "n",
    "nope",
    "nah",
    "false",
    "deny",
    "denied",
    "reject",
    "rejected",
    "decline",
    "declined",
    "refuse",
    "refused",
    "cancel",
    "cancelled",
    "canceled",
    "stop",
    "abort",
    "never",
    "dont",
    "不",
    "不要",
    "不行",
    "不可以",
    "不同意",
    "拒绝",
    "否",
    "别",
    "取消",
    "算了",
];

/// Words that undo an approval anywhere in the answer ("yes, but do not delete them" is unclear).
const NEGATION: &[&str] = &[
    "not", "dont", "doesnt", "didnt", "cant", "cannot", "wont", "shouldnt", "wouldnt", "isnt",
    "without",
];

/// The `[routes.translate]` options the hub reads on every route, whatever its pair: the route's own answer
/// words.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Options {
    /// Words that approve, added to the built-in English and Chinese lists.
    #[serde(deserialize_with = "one_word_each")]
    pub approval_words: Vec<String>,
    /// Words that reject, added to the built-in lists.
    #[serde(deserialize_with = "one_word_each")]
    pub rejection_words: Vec<String>,
}

/// Answer words are single words: an answer is read word by word.
fn one_word_each<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let words = Vec::<String>::deserialize(d)?;
    match words
        .iter()
        .find(|w| w.trim().is_empty() || w.trim().contains(char::is_whitespace))
    {
        Some(word) => Err(D::Error::custom(format!(
            "{word:?} is not one word; an answer is read word by word"
        ))),
        None => Ok(words),
    }
}

/// The approval and rejection words of a route: the built-in lists and the route's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnswerWords {
    approval: Vec<String>,
    rejection: Vec<String>,
}

impl AnswerWords {
    /// The built-in lists plus the route's own (read by the same rule: lowercase, no punctuation).
    pub fn new(options: &Options) -> Self {
        let normalize = |words: &[String]| words.iter().map(|w| normalize(w)).collect();
        Self {
            approval: normalize(&options.approval_words),
            rejection: normalize(&options.rejection_words),
        }
    }

    /// Whether `answer` approves (`Some(true)`) or rejects (`Some(false)`); `None` when it says neither.
    pub fn approves(&self, answer: &str) -> Option<bool> {
        match self.read(answer) {
            Decision::Approve => Some(true),
            Decision::Reject => Some(false),
            Decision::Unclear => None,
        }
    }

    pub fn read(&self, answer: &str) -> Decision {
        let answer = normalize(answer);
        let mut words = answer.split_whitespace();
        let Some(first) = words.next() else {
            return Decision::Unclear;
        };
        if self.is_rejection(first) {
            return Decision::Reject;
        }
        let negated = answer
            .split_whitespace()
            .skip(1)
            .any(|word| self.is_rejection(word) || NEGATION.contains(&word));
        if self.is_approval(first) && !negated {
            Decision::Approve
        } else {
            Decision::Unclear
        }
    }

    fn is_approval(&self, word: &str) -> bool {
        is_in(word, APPROVAL, &self.approval)
    }

    fn is_rejection(&self, word: &str) -> bool {
        is_in(word, REJECTION, &self.rejection)
    }
}

/// Whether `word` is one of the built-in or the route's words (a Chinese word: begins with one).
fn is_in(word: &str, builtin: &[&str], route: &[String]) -> bool {
    let matches =
        |listed: &str| word == listed || (starts_with_cjk(listed) && word.starts_with(listed));
    builtin.iter().copied().any(matches) || route.iter().map(String::as_str).any(matches)
}

fn starts_with_cjk(word: &str) -> bool {
    word.chars()
        .next()
        .is_some_and(|c| matches!(c, '\u{3400}'..='\u{9fff}' | '\u{f900}'..='\u{faff}'))
}

/// Lowercase, apostrophes dropped, other punctuation turned into spaces.
fn normalize(text: &str) -> String {
    text.trim()
        .chars()
        .filter(|c| !matches!(c, '\'' | '’'))
        .map(|c| {
            let punctuation = c.is_ascii_punctuation()
                || matches!(c, '\u{3000}'..='\u{303f}' | '\u{ff00}'..='\u{ff0f}' | '\u{ff1a}'..='\u{ff20}' | '…' | '“' | '”');
            if punctuation {
                ' '
            } else {
                c
            }
        })
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Decision::{Approve, Reject, Unclear};

    #[test]
    fn answers_read_as_a_person_meant_them() {
        let words = AnswerWords::default();
        let cases = [
            ("yes", Approve),
            ("Yes, approve!", Approve),
            ("  OK.  ", Approve),
            ("sure thing", Approve),
            ("no, keep them", Reject),
            ("No.", Reject),
            ("don't", Reject),
            ("nope, never", Reject),
            ("yes, but don't delete them", Unclear),
            ("yes and no", Unclear),
            ("approve it, not the logs", Unclear),
            ("maybe later", Unclear),
            ("keep them", Unclear),
            ("", Unclear),
            ("?!", Unclear),
            ("好的，删除吧", Approve),
            ("好", Approve),
            ("同意。", Approve),
            ("可以", Approve),
            ("没问题", Approve),
            ("不", Reject),
            ("不要，保留它们", Reject),
            ("拒绝", Reject),
            ("不好", Reject),
            ("也许吧", Unclear),
        ];
        for (answer, expected) in cases {
            assert_eq!(words.read(answer), expected, "{answer:?}");
        }
    }

    #[test]
    fn a_route_adds_its_own_words() {
        let words = AnswerWords::new(&Options {
            approval_words: vec!["Ship".into(), "赞".into()],
            rejection_words: vec!["Nein".into()],
        });
        assert_eq!(words.read("ship, please"), Approve);
        assert_eq!(words.read("赞！"), Approve);
        assert_eq!(words.read("nein, danke"), Reject);
        assert_eq!(AnswerWords::default().read("nein"), Unclear);
    }
}
