//! Masking a run's secret values in what it prints: the values ([`Secrets`], fed as the run learns them)
//! and the [`Masker`] that replaces each of them, its base64 and its JSON-escaped forms with `********`.
//!
//! A value shows up in the runner's output in more than one spelling: as itself; base64-encoded (a
//! Secret's `data` as the API returns it); JSON-escaped once in Ansible's own display of a result and
//! again in ansible-runner's JSON event line (`ensure_ascii`, so non-ASCII becomes `\uXXXX`); and,
//! when it has several lines, line by line in plain text. Every spelling is a pattern.
//!
//! A value also holds values a run may print on their own (a kubeconfig's token, a registry's
//! password): [`Secrets::add`] masks each of them too, as [`derive`] finds them.
//!
//! What is not masked, by length: a value (or a derived one) shorter than [`MIN_LEN`] bytes, a line
//! of a multi-line value shorter than [`MIN_LINE_LEN`], and a value longer than [`MAX_LEN`].

pub mod derive;

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine;
use serde_json::{Map, Value};

/// What a masked value is replaced with.
pub const MASK: &str = "********";

/// Values shorter than this many bytes are not masked, anywhere: masking `1`, `a` or `yes` wherever
/// they occur would leave nothing readable, and a value of three bytes or fewer is not a secret worth
/// the name (there are fewer than 2^24 of them). The rule is the same for a Secret's own values and
/// for the values derived from them (a kubeconfig's fields, the halves of `user:pass`).
pub const MIN_LEN: usize = 4;

/// Lines of a multi-line value shorter than this are not masked on their own: a kubeconfig's
/// `kind: Config` or `users:` would be masked wherever the output says so.
pub const MIN_LINE_LEN: usize = 16;

/// Values longer than this are not masked (a Helm release, a bundle of certificates): they are not
/// printed whole, and the matcher's memory grows with its patterns.
pub const MAX_LEN: usize = 64 << 10;

/// The secret values one run has seen, in every spelling to mask. Shared between whoever learns them
/// (the proxy, the runner) and the run's maskers; it only grows while the run lasts.
#[derive(Default)]
pub struct Secrets {
    patterns: Mutex<HashSet<String>>,
    /// `patterns.len()`, readable without the lock: a run without secrets costs one load per line.
    count: AtomicUsize,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({} patterns)", self.len())
    }
}

impl Secrets {
    /// Adds a value (a Secret's decoded data, a key) and every value [`derive`]d from it, each
    /// unless it is too short or too long to mask.
    pub fn add(&self, value: &[u8]) {
        let forms: Vec<String> = derive::derive(value).iter().flat_map(|value| spellings(value)).collect();
        if forms.is_empty() {
            return;
        }
        let mut patterns = self.patterns.lock().unwrap_or_else(|p| p.into_inner());
        patterns.extend(forms);
        self.count.store(patterns.len(), Ordering::Release);
    }

    /// How many patterns there are to mask.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// True while nothing is to be masked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn snapshot(&self) -> Vec<String> {
        self.patterns.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }
}

/// Every spelling of `value` to mask; none when it is shorter than [`MIN_LEN`] or longer than
/// [`MAX_LEN`].
pub fn spellings(value: &[u8]) -> Vec<String> {
    if value.len() < MIN_LEN || value.len() > MAX_LEN {
        return Vec::new();
    }
    let mut bases = vec![base64::engine::general_purpose::STANDARD.encode(value)];
    if let Ok(text) = std::str::from_utf8(value) {
        bases.push(text.to_string());
        if text.contains('\n') {
            let lines = text.lines().map(|line| line.trim_end_matches('\r'));
            bases.extend(lines.filter(|line| line.len() >= MIN_LINE_LEN).map(str::to_string));
        }
    }
    let mut forms: Vec<String> = Vec::new();
    for base in bases {
        let once_ascii = json_escape(&base, true);
        let once = json_escape(&base, false);
        let twice = [json_escape(&once, true), json_escape(&once_ascii, true)];
        for form in [base, once_ascii, once].into_iter().chain(twice) {
            if !forms.contains(&form) {
                forms.push(form);
            }
        }
    }
    forms
}

/// The inside of a JSON string holding `text`, as Python's `json.dumps` writes it (`ascii`: with
/// `ensure_ascii`, its default, which ansible-runner uses; without: as Ansible's display does).
fn json_escape(text: &str, ascii: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ascii && !c.is_ascii()) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Masks text with a run's [`Secrets`], its matcher rebuilt when they have grown.
pub struct Masker {
    secrets: Arc<Secrets>,
    built: usize,
    matcher: Matcher,
}

/// What a masker replaces.
enum Matcher {
    /// Nothing: no values are known.
    Nothing,
    /// Every spelling of the known values.
    Values(AhoCorasick),
    /// The whole text: the values could not be compiled into a matcher (fails closed).
    Everything,
}

impl fmt::Debug for Masker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Masker").field("secrets", &self.secrets).finish_non_exhaustive()
    }
}

impl Masker {
    /// A masker of `secrets`' values, as they are now and as they grow.
    pub fn new(secrets: Arc<Secrets>) -> Self {
        Masker { secrets, built: 0, matcher: Matcher::Nothing }
    }

    /// A masker with nothing to mask, ever.
    pub fn none() -> Self {
        Masker::new(Arc::default())
    }

    /// The matcher for the values known now.
    fn matcher(&mut self) -> &Matcher {
        let known = self.secrets.len();
        if known != self.built {
            let patterns = self.secrets.snapshot();
            self.built = patterns.len();
            let built = AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(&patterns);
            self.matcher = match built {
                Ok(matcher) => Matcher::Values(matcher),
                Err(error) => {
                    tracing::warn!(%error, "could not build the secret masker: the run's output is withheld");
                    Matcher::Everything
                }
            };
        }
        &self.matcher
    }

    /// `text` with every known secret spelling replaced by [`MASK`].
    pub fn mask<'a>(&mut self, text: &'a str) -> Cow<'a, str> {
        let matcher = match self.matcher() {
            Matcher::Nothing => return Cow::Borrowed(text),
            Matcher::Everything => return Cow::Borrowed(MASK),
            Matcher::Values(matcher) => matcher,
        };
        if !matcher.is_match(text) {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        matcher.replace_all_with(text, &mut out, |_, _, out| {
            out.push_str(MASK);
            true
        });
        Cow::Owned(out)
    }

    /// Masks `text` in place.
    pub fn mask_string(&mut self, text: &mut String) {
        let masked = match self.mask(text) {
            Cow::Borrowed(same) if std::ptr::eq(same, text.as_str()) => return,
            masked => masked.into_owned(),
        };
        *text = masked;
    }

    /// Masks every string in a JSON object, in place; its structure stays as it was. Keys are left
    /// alone: they are structure (the play recap's counters are keyed by host) and never shown.
    pub fn mask_map(&mut self, map: &mut Map<String, Value>) {
        if matches!(self.matcher(), Matcher::Nothing) {
            return;
        }
        for value in map.values_mut() {
            self.mask_value(value);
        }
    }

    /// Masks every string in a JSON value, in place.
    pub fn mask_value(&mut self, value: &mut Value) {
        match value {
            Value::String(text) => self.mask_string(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.mask_value(item)),
            Value::Object(map) => self.mask_map(map),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn masker(values: &[&str]) -> Masker {
        let secrets = Arc::new(Secrets::default());
        for value in values {
            secrets.add(value.as_bytes());
        }
        Masker::new(secrets)
    }

    #[test]
    fn a_value_and_its_base64_are_masked_wherever_they_appear() {
        let mut masker = masker(&["hunter22"]);
        assert_eq!(masker.mask("password is hunter22!"), "password is ********!");
        assert_eq!(masker.mask("data: aHVudGVyMjI="), "data: ********");
        assert_eq!(masker.mask("nothing here"), "nothing here");
    }

    #[test]
    fn a_masker_without_values_leaves_text_untouched_and_borrowed() {
        let mut none = Masker::none();
        assert!(matches!(none.mask("hunter22"), Cow::Borrowed("hunter22")));
        let mut empty = masker(&["abc", ""]);
        assert!(matches!(empty.mask("abc"), Cow::Borrowed("abc")), "short values are not masked");
    }

    #[test]
    fn values_learned_later_are_masked_from_then_on() {
        let secrets = Arc::new(Secrets::default());
        let mut masker = Masker::new(secrets.clone());
        assert_eq!(masker.mask("token s3cr3t-token"), "token s3cr3t-token");
        secrets.add(b"s3cr3t-token");
        assert_eq!(masker.mask("token s3cr3t-token"), "token ********");
    }

    #[test]
    fn json_escaped_spellings_of_quotes_newlines_and_non_ascii_are_masked() {
        let value = "p\"ss\nwörd";
        let mut masker = masker(&[value]);
        // As ansible-runner prints it in an event line, and as Ansible's display inside that line.
        let once = serde_json::to_string(&json!({ "msg": value })).unwrap();
        assert!(!masker.mask(&once).contains("ss"), "{}", masker.mask(&once));
        assert_eq!(masker.mask(r#"{"msg": "p\"ss\nw\u00f6rd"}"#), r#"{"msg": "********"}"#);
        assert_eq!(
            masker.mask(r#""stdout": "\"msg\": \"p\\\"ss\\nw\u00f6rd\"""#),
            r#""stdout": "\"msg\": \"********\"""#
        );
    }

    #[test]
    fn each_line_of_a_multi_line_value_is_masked_when_printed_line_by_line() {
        let key = "-----BEGIN KEY-----\r\nAAAAB3NzaC1yc2EAAAADAQAB\nQABAAABAQC7\n-----END KEY-----\n";
        let mut masker = masker(&[key]);
        assert_eq!(masker.mask("read AAAAB3NzaC1yc2EAAAADAQAB"), "read ********");
        assert_eq!(masker.mask(key), "********");
        assert_eq!(masker.mask("QABAAABAQC7"), "QABAAABAQC7", "a short line is not masked on its own");
    }

    #[test]
    fn the_longest_spelling_wins_where_spellings_overlap() {
        let mut masker = masker(&["abcd", "abcdefgh"]);
        assert_eq!(masker.mask("xabcdefghx abcdx"), "x********x ********x");
    }

    #[test]
    fn values_too_short_or_too_long_have_no_spellings() {
        assert!(spellings(b"abc").is_empty());
        assert!(spellings(&vec![b'a'; MAX_LEN + 1]).is_empty());
        assert_eq!(spellings(b"abcd"), ["YWJjZA==", "abcd"]);
        assert_eq!(spellings(&[0xff, 0xfe, 0x00, 0x01]), ["//4AAQ=="], "binary: only its base64");
    }

    #[test]
    fn json_keeps_its_structure_and_keys_when_its_strings_are_masked() {
        let mut masker = masker(&["hunter22"]);
        let mut value = json!({"res": {"msg": "pw hunter22", "list": ["hunter22", 1, true]}, "n": null});
        masker.mask_value(&mut value);
        assert_eq!(value, json!({"res": {"msg": "pw ********", "list": ["********", 1, true]}, "n": null}));
        let mut counters = json!({"ok": {"hunter22.example.com": 3}});
        masker.mask_value(&mut counters);
        assert_eq!(counters, json!({"ok": {"hunter22.example.com": 3}}), "keys are structure");
    }

    #[test]
    fn a_value_shorter_than_the_minimum_is_not_masked_and_one_of_the_minimum_is() {
        let short = "x".repeat(MIN_LEN - 1);
        let mut masker = masker(&[&short, "pin1"]);
        assert_eq!(masker.mask(&format!("{short} pin1")), format!("{short} ********"));
    }

    #[test]
    fn the_fields_of_a_kubeconfig_are_masked_where_a_task_prints_them_alone() {
        use super::derive::tests::{CERT_PEM, KEY_PEM, kubeconfig};
        let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        let mut masker = masker(&[&kubeconfig()]);
        for field in [
            "eyJhbGciOiJSUzI1NiJ9.kubeconfig-token-value".to_string(),
            b64(KEY_PEM),
            b64(CERT_PEM),
            "basic-pass-123".to_string(),
            "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7".to_string(),
        ] {
            let printed = serde_json::to_string(&json!({"msg": field})).unwrap();
            assert_eq!(masker.mask(&printed), r#"{"msg":"********"}"#, "{field}");
        }
        assert_eq!(masker.mask("kind: Config, context default"), "kind: Config, context default");
    }

    #[test]
    fn a_docker_configs_decoded_auth_and_its_halves_are_masked() {
        let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        let config =
            format!(r#"{{"auths":{{"r.example.com":{{"auth":"{}"}}}}}}"#, b64("robot:dckr-pass-9f2"));
        let mut masker = masker(&[&config]);
        assert_eq!(
            masker.mask("login robot:dckr-pass-9f2 then dckr-pass-9f2 as robot"),
            "login ******** then ******** as ********"
        );
    }

    #[test]
    fn the_debug_form_never_shows_values() {
        let masker = masker(&["hunter22"]);
        assert!(!format!("{masker:?}").contains("hunter22"));
    }
}
