//! The values a secret value holds that a run may print on their own: the leaves of a JSON or YAML
//! document (a kubeconfig's `token`, `client-key-data`, `password`; a `.dockerconfigjson`'s
//! `username`, `password`, `auth`), what a base64 leaf decodes to (a PEM key, `user:pass`, more
//! JSON), the two halves of a decoded `user:pass`, and the values of `NAME=value` lines.
//!
//! Every leaf is derived, whatever its key, except the few keys in [`STRUCTURE_KEYS`], whose values
//! name a document's shape and are printed all the time (`kind: Config`, a context's `name`): the
//! rule fails closed, so a key no one listed is masked. Values shorter than [`super::MIN_LEN`] are
//! derived but have no spellings, so they are not masked (see there).

use std::collections::HashSet;

use base64::Engine;
use serde_json::Value;

/// How many times one value is unwrapped (a leaf, then its base64, then its leaves, ...).
const MAX_DEPTH: usize = 4;

/// Most values derived from one secret value: a Secret a tenant wrote cannot make the proxy do
/// unbounded work, or the masker hold unbounded patterns.
const MAX_DERIVED: usize = 256;

/// Keys whose string values are structure, not data: kinds, API versions and the names a
/// kubeconfig gives its clusters, users and contexts. Masking `Config`, `v1` or `default` wherever
/// a run prints them would leave its output unreadable; none of them is a credential.
pub const STRUCTURE_KEYS: [&str; 6] =
    ["apiVersion", "kind", "name", "namespace", "cluster", "current-context"];

/// `value` and every value derived from it, `value` first, each once.
pub fn derive(value: &[u8]) -> Vec<Vec<u8>> {
    let mut seen: HashSet<Vec<u8>> = HashSet::from([value.to_vec()]);
    let mut out = vec![value.to_vec()];
    let mut queue = vec![(value.to_vec(), 0, Origin::Given)];
    while let Some((item, depth, origin)) = queue.pop() {
        if depth >= MAX_DEPTH {
            continue;
        }
        let Ok(text) = std::str::from_utf8(&item) else { continue };
        for (derived, from) in unwrap(text, origin) {
            if out.len() >= MAX_DERIVED {
                return out;
            }
            if seen.insert(derived.clone()) {
                out.push(derived.clone());
                queue.push((derived, depth + 1, from));
            }
        }
    }
    out
}

/// Where a value came from, for the rules that apply to one kind only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The secret value itself, or a leaf of a document.
    Given,
    /// A base64 leaf, decoded.
    Decoded,
}

/// The values one step inside `text`.
fn unwrap(text: &str, origin: Origin) -> Vec<(Vec<u8>, Origin)> {
    let mut found: Vec<(Vec<u8>, Origin)> = Vec::new();
    if let Some(document) = document(text) {
        let mut leaves = Vec::new();
        collect_leaves(&document, None, &mut leaves);
        found.extend(leaves.into_iter().map(|leaf| (leaf.into_bytes(), Origin::Given)));
    }
    if let Some(decoded) = base64_text(text) {
        found.push((decoded.into_bytes(), Origin::Decoded));
    }
    if origin == Origin::Decoded {
        // Basic credentials (a registry's `auth`): `user:pass`, one line, no spaces, not a URL.
        let trimmed = text.trim();
        if let Some((user, pass)) = trimmed.split_once(':')
            && !trimmed.contains(char::is_whitespace)
            && !pass.starts_with("//")
        {
            found.extend([user, pass].map(|part| (part.as_bytes().to_vec(), Origin::Given)));
        }
    }
    for line in text.lines() {
        if let Some((name, value)) = line.trim().split_once('=')
            && is_variable_name(name)
            && !value.is_empty()
            && !value.starts_with('=')
        {
            let value = value.trim_matches(|c| c == '"' || c == '\'');
            found.push((value.as_bytes().to_vec(), Origin::Given));
        }
    }
    found
}

/// `text` read as a JSON or YAML document, when it is a map or a list (a scalar is the text itself).
fn document(text: &str) -> Option<Value> {
    let trimmed = text.trim_start();
    let parsed = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        serde_json::from_str::<Value>(text).ok()
    } else {
        None
    };
    let parsed = match parsed {
        Some(value) => value,
        // YAML only where it can be a map or a list: a word parses as a YAML string.
        None if text.contains(": ") || text.contains(":\n") || trimmed.starts_with("- ") => {
            serde_saphyr::from_str::<Value>(text).ok()?
        }
        None => return None,
    };
    matches!(parsed, Value::Object(_) | Value::Array(_)).then_some(parsed)
}

/// The string and number leaves of a document, but those under [`STRUCTURE_KEYS`].
fn collect_leaves(value: &Value, key: Option<&str>, leaves: &mut Vec<String>) {
    match value {
        Value::Object(map) => map.iter().for_each(|(key, value)| collect_leaves(value, Some(key), leaves)),
        Value::Array(items) => items.iter().for_each(|item| collect_leaves(item, key, leaves)),
        Value::String(_) | Value::Number(_) if key.is_some_and(|key| STRUCTURE_KEYS.contains(&key)) => {}
        Value::String(text) => leaves.push(text.clone()),
        Value::Number(number) => leaves.push(number.to_string()),
        Value::Bool(_) | Value::Null => {}
    }
}

/// What `text` decodes to when it is base64 (standard or URL-safe, padded or not) of printable text.
fn base64_text(text: &str) -> Option<String> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let text = text.trim();
    if text.len() < 8 || !text.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/-_=".contains(&b)) {
        return None;
    }
    let bytes = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())?;
    let decoded = String::from_utf8(bytes).ok()?;
    let printable = decoded.chars().all(|c| !c.is_control() || matches!(c, '\n' | '\r' | '\t'));
    (printable && decoded != text).then_some(decoded)
}

/// A shell or dotenv variable name.
fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    fn derived(value: &str) -> Vec<String> {
        derive(value.as_bytes()).into_iter().map(|v| String::from_utf8(v).unwrap()).collect()
    }

    fn assert_derives(value: &str, wanted: &[&str]) {
        let got = derived(value);
        for want in wanted {
            assert!(got.iter().any(|g| g == want), "{want:?} not derived from {value:?}: {got:?}");
        }
    }

    fn assert_not_derived(value: &str, unwanted: &[&str]) {
        let got = derived(value);
        for unwanted in unwanted {
            assert!(!got.iter().any(|g| g == unwanted), "{unwanted:?} derived from {value:?}");
        }
    }

    pub(crate) const KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n";
    pub(crate) const CERT_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIDBTCCAe2gAwIBAgIIYmFzZTY0Y2VydGlmaWNhdGU\n-----END CERTIFICATE-----\n";

    pub(crate) fn kubeconfig() -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n    server: https://10.0.0.1:6443\n    certificate-authority-data: {ca}\ncontexts:\n- name: default\n  context:\n    cluster: kubernetes\n    user: admin-user\n    namespace: default\ncurrent-context: default\nusers:\n- name: admin-user\n  user:\n    token: eyJhbGciOiJSUzI1NiJ9.kubeconfig-token-value\n    client-certificate-data: {cert}\n    client-key-data: {key}\n    username: basic-user\n    password: basic-pass-123\n",
            ca = b64(CERT_PEM),
            cert = b64(CERT_PEM),
            key = b64(KEY_PEM),
        )
    }

    #[test]
    fn a_kubeconfig_gives_its_token_keys_certificates_and_password() {
        let config = kubeconfig();
        assert_derives(
            &config,
            &[
                "eyJhbGciOiJSUzI1NiJ9.kubeconfig-token-value",
                &b64(KEY_PEM),
                KEY_PEM,
                &b64(CERT_PEM),
                CERT_PEM,
                "basic-user",
                "basic-pass-123",
                "admin-user",
                "https://10.0.0.1:6443",
            ],
        );
        assert_not_derived(&config, &["Config", "v1", "kubernetes", "default"]);
        assert_eq!(derived(&config)[0], config, "the value itself comes first");
    }

    #[test]
    fn a_docker_config_gives_its_auth_decoded_and_both_halves_of_it() {
        let auth = b64("robot$ci:dckr-pass-9f2");
        let config = format!(
            r#"{{"auths":{{"registry.example.com":{{"username":"robot$ci","password":"dckr-pass-9f2","auth":"{auth}","email":"ci@example.com"}}}}}}"#
        );
        assert_derives(
            &config,
            &[&auth, "robot$ci:dckr-pass-9f2", "robot$ci", "dckr-pass-9f2", "ci@example.com"],
        );
        let only_auth =
            format!(r#"{{"auths":{{"r.example.com":{{"auth":"{}"}}}}}}"#, b64("someone:only-in-auth"));
        assert_derives(&only_auth, &["only-in-auth", "someone"]);
    }

    #[test]
    fn json_and_yaml_blobs_give_every_leaf_at_any_depth_numbers_included() {
        let json = r#"{"db":{"hosts":["db-1.internal","db-2.internal"],"password":"json-pass-1","port":54321,"tls":true}}"#;
        assert_derives(json, &["db-1.internal", "db-2.internal", "json-pass-1", "54321"]);
        assert_not_derived(json, &["true"]);
        let yaml = "database:\n  user: app\n  secret: yaml-secret-value\nlist:\n  - first-item-x\n";
        assert_derives(yaml, &["yaml-secret-value", "first-item-x", "app"]);
    }

    #[test]
    fn base64_holding_json_is_decoded_and_read() {
        let inner = r#"{"api_key":"b64-json-api-key"}"#;
        assert_derives(&b64(inner), &[inner, "b64-json-api-key"]);
        assert_derives(&b64(&b64(inner)), &[inner, "b64-json-api-key"]);
        let url_safe = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(inner);
        assert_derives(&url_safe, &["b64-json-api-key"]);
    }

    #[test]
    fn env_file_lines_give_their_values() {
        assert_derives("DB_HOST=db\nDB_PASSWORD=\"env-pass-42\"\n# comment\n", &["env-pass-42", "db"]);
    }

    #[test]
    fn plain_words_urls_and_binary_give_nothing_more() {
        assert_eq!(derived("hunter22-plain"), ["hunter22-plain"]);
        assert_eq!(derived("https://example.com/path"), ["https://example.com/path"]);
        assert_eq!(derive(&[0xff, 0x00, 0xfe, 0x01]), [vec![0xff, 0x00, 0xfe, 0x01]]);
        assert_eq!(derived("deadbeefdeadbeef"), ["deadbeefdeadbeef"], "base64 of no text");
    }

    #[test]
    fn derivation_is_bounded_in_count_and_depth() {
        let many: Vec<String> = (0..10_000).map(|i| format!("\"value-number-{i}\"")).collect();
        assert_eq!(derive(format!("[{}]", many.join(",")).as_bytes()).len(), MAX_DERIVED);
        let mut nested = "deep-secret-value".to_string();
        for _ in 0..10 {
            nested = b64(&nested);
        }
        let got = derived(&nested);
        assert!(!got.contains(&"deep-secret-value".to_string()));
        assert!(got.len() <= MAX_DEPTH + 1, "{got:?}");
    }
}
