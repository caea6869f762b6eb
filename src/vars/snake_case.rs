//! Spec key conversion to snake_case, matching upstream `paramconv.ToSnake` byte for byte.

use serde_json::{Map, Value};

/// Words that upstream isolates before splitting, so `egressIPs` becomes `egress_ips`.
///
/// Upstream ranges over a Go map here, so the order is random on every call and a key holding
/// several of these words could convert differently between runs. We fix the order to HTTP, URL,
/// IP; every key upstream converts stably converts identically here.
const SPECIAL_WORDS: [&str; 3] = ["HTTP", "URL", "IP"];

/// Converts one map key to snake_case exactly as upstream `paramconv.ToSnake` does.
///
/// An empty key (or one of only spaces) yields `""`; upstream panics on it instead.
#[must_use]
pub fn to_snake(key: &str) -> String {
    let spaced = space_letter_digit_runs(key);
    let trimmed = spaced.trim_matches(' ');
    let Some(first) = trimmed.chars().next() else {
        return String::new();
    };
    let prefix = if first.is_ascii_uppercase() { "_" } else { "" };

    // Upstream skips the special words when the key is already all upper case (`SK_IP`).
    let isolated = if is_unchanged_by_go_upper(trimmed) {
        trimmed.to_owned()
    } else {
        SPECIAL_WORDS.iter().fold(trimmed.to_owned(), |value, word| isolate_special_word(value, word))
    };

    let words = split_words(&isolated);
    let joined = words.join("_");
    if matches!(words[0].as_str(), "http" | "url" | "ip") { joined } else { prefix.to_owned() + &joined }
}

/// Returns `value` with every map key converted by [`to_snake`], recursing into maps and lists.
///
/// Values are never changed. When two keys of one map convert to the same name, the one that
/// sorts last wins; upstream picks one at random (Go map order).
#[must_use]
pub fn snake_case_keys(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(snake_case_map_keys(map)),
        Value::Array(items) => Value::Array(items.iter().map(snake_case_keys).collect()),
        other => other.clone(),
    }
}

/// Converts the keys of one map (and of every map below it), as upstream `MapToSnake` does.
pub(super) fn snake_case_map_keys(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter().map(|(key, value)| (to_snake(key), snake_case_keys(value))).collect()
}

/// Lowercases like Go's `strings.ToLower`, which uses the simple one-rune Unicode mapping.
pub(super) fn go_to_lower(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            // The only rune whose full lowercase mapping (Rust) differs from the simple one (Go).
            '\u{130}' => 'i',
            _ => c.to_lowercase().next().unwrap_or(c),
        })
        .collect()
}

/// Whether Go's `strings.ToUpper(s) == s`.
fn is_unchanged_by_go_upper(s: &str) -> bool {
    s.chars().all(|c| {
        let mut upper = c.to_uppercase();
        if upper.len() == 1 {
            return upper.next() == Some(c);
        }
        // Multi-rune full mappings (ß → SS) mostly have no simple mapping, so Go leaves the rune
        // alone; only the Greek lowercase letters with ypogegrammeni have one (ᾳ → ᾼ).
        !matches!(c,
            '\u{1F80}'..='\u{1F87}'
            | '\u{1F90}'..='\u{1F97}'
            | '\u{1FA0}'..='\u{1FA7}'
            | '\u{1FB3}'
            | '\u{1FC3}'
            | '\u{1FF3}')
    })
}

/// Upstream's regex step: `([a-zA-Z])(\d+)([a-zA-Z](\d+))` replaced with `$1 $2 $3`.
///
/// So `a1b2` becomes `a 1 b2`. Matches are leftmost and non-overlapping; every character involved
/// is ASCII, so scanning bytes keeps every slice on a character boundary.
fn space_letter_digit_runs(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len() + 4);
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        match letter_digits_letter_digits(bytes, at) {
            Some((first_digits_end, end)) => {
                out.push_str(&s[copied..=at]);
                out.push(' ');
                out.push_str(&s[at + 1..first_digits_end]);
                out.push(' ');
                out.push_str(&s[first_digits_end..end]);
                copied = end;
                at = end;
            }
            None => at += 1,
        }
    }
    out.push_str(&s[copied..]);
    out
}

/// Matches letter, digits, letter, digits starting at `start`.
///
/// Returns where the first digit run ends and where the match ends. Greedy digit runs never need
/// to backtrack here, because a shorter run is always followed by a digit, not a letter.
fn letter_digits_letter_digits(bytes: &[u8], start: usize) -> Option<(usize, usize)> {
    let digits_end =
        |from: usize| from + bytes[from.min(bytes.len())..].iter().take_while(|b| b.is_ascii_digit()).count();
    if !bytes.get(start)?.is_ascii_alphabetic() {
        return None;
    }
    let first_digits_end = digits_end(start + 1);
    if first_digits_end == start + 1 || !bytes.get(first_digits_end)?.is_ascii_alphabetic() {
        return None;
    }
    let end = digits_end(first_digits_end + 1);
    (end > first_digits_end + 1).then_some((first_digits_end, end))
}

/// Surrounds the first (case-sensitive) occurrence of `word` with `_`, as upstream
/// `preprocessWordMapping` does.
///
/// A directly following `s` is taken as a plural and upper-cased with the word. No `_` is added
/// at the very start or end of the key, except before a word that ends the key.
fn isolate_special_word(value: String, word: &str) -> String {
    let Some(idx) = value.find(word) else {
        return value;
    };
    let head = &value[..idx];
    let rest = &value[idx + word.len()..];
    if rest.is_empty() {
        return format!("{head}_{word}");
    }
    if let Some(tail) = rest.strip_prefix('s') {
        return if tail.is_empty() {
            format!("{head}_{word}S")
        } else if idx == 0 {
            format!("{word}S_{tail}")
        } else {
            format!("{head}_{word}S_{tail}")
        };
    }
    if idx == 0 { format!("{word}_{rest}") } else { format!("{head}_{word}_{rest}") }
}

/// Splits at `' '`, `'_'`, `'-'` and at ASCII case changes, lowercasing every word.
///
/// At a case change (this letter and the next differ in case) with a non-empty current word, an
/// upper-case letter starts the next word (`JSONData` → `json`, `data`) and a lower-case letter
/// ends the current one (`newParameter` → `new`, `parameter`). Upstream also requires the current
/// word not to end in `_`; it never can, since `_` always splits.
fn split_words(s: &str) -> Vec<String> {
    let bytes = s.as_bytes();
    let mut words = Vec::new();
    let mut current = String::new();
    for (i, c) in s.char_indices() {
        // Upstream compares with the byte after the first byte of `c`; that is only an ASCII
        // letter when `c` is ASCII and so is the next character.
        let case_changes = bytes.get(i + 1).is_some_and(|next| {
            (c.is_ascii_uppercase() && next.is_ascii_lowercase())
                || (c.is_ascii_lowercase() && next.is_ascii_uppercase())
        });
        if case_changes && !current.is_empty() {
            if c.is_ascii_uppercase() {
                words.push(go_to_lower(&current));
                current = c.to_string();
            } else {
                current.push(c);
                words.push(go_to_lower(&current));
                current.clear();
            }
        } else if matches!(c, ' ' | '_' | '-') {
            words.push(go_to_lower(&current));
            current.clear();
        } else {
            current.push(c);
        }
    }
    words.push(go_to_lower(&current));
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assert_snake(key: &str, want: &str) {
        assert_eq!(to_snake(key), want, "to_snake({key:?})");
    }

    #[test]
    fn lowercase_word_is_kept() {
        assert_snake("var", "var");
    }

    #[test]
    fn only_digits_are_kept() {
        assert_snake("888", "888");
    }

    #[test]
    fn snake_key_with_digits_is_kept() {
        assert_snake("k8s_var", "k8s_var");
    }

    #[test]
    fn leading_underscore_is_kept() {
        assert_snake("_k8s_var", "_k8s_var");
    }

    #[test]
    fn space_becomes_underscore() {
        assert_snake("k8s var", "k8s_var");
    }

    #[test]
    fn leading_capital_gets_underscore_prefix() {
        assert_snake("ThisShouldHaveUnderscores", "_this_should_have_underscores");
    }

    #[test]
    fn camel_case_with_digits_splits_at_capitals_only() {
        assert_snake("sizeK8sBuckets", "size_k8s_buckets");
    }

    #[test]
    fn mixed_underscores_and_camel_case_are_handled() {
        assert_snake("_CanYou_Handle_mixedVars", "_can_you_handle_mixed_vars");
    }

    #[test]
    fn snake_key_is_a_noop() {
        assert_snake("this_should_be_a_noop", "this_should_be_a_noop");
    }

    #[test]
    fn special_plural_word_at_end_is_one_word() {
        assert_snake("egressIPs", "egress_ips");
    }

    #[test]
    fn special_plural_word_in_middle_is_one_word() {
        assert_snake("egressIPsEgress", "egress_ips_egress");
    }

    #[test]
    fn special_plural_word_before_lowercase_is_one_word() {
        assert_snake("egressIPsegress", "egress_ips_egress");
    }

    #[test]
    fn special_plural_word_at_start_keeps_prefix() {
        assert_snake("IPsegress", "_ips_egress");
    }

    #[test]
    fn special_word_at_end_is_one_word() {
        assert_snake("egressIP", "egress_ip");
    }

    #[test]
    fn special_word_in_middle_is_one_word() {
        assert_snake("egressIPEgress", "egress_ip_egress");
    }

    #[test]
    fn special_word_before_lowercase_is_one_word() {
        assert_snake("egressIPegress", "egress_ip_egress");
    }

    #[test]
    fn several_special_words_drop_prefix_when_first_word_is_special() {
        assert_snake("URLegressIPEgressHTTP", "url_egress_ip_egress_http");
    }

    #[test]
    fn several_plural_special_words_keep_prefix() {
        assert_snake("URLsegressIPsEgressHTTPs", "_urls_egress_ips_egress_https");
    }

    #[test]
    fn all_uppercase_key_skips_special_words() {
        assert_snake("THIS_IS_SKIP_NOT_SK_IP", "_this_is_skip_not_sk_ip");
    }

    #[test]
    fn lower_camel_case_splits_before_capital() {
        assert_snake("newParameter", "new_parameter");
    }

    #[test]
    fn acronym_is_one_word_and_leading_capital_gets_prefix() {
        // Upstream gives `_json_data`: step 3 adds `_` for the leading capital, and only
        // http/url/ip as first word suppress it.
        assert_snake("JSONData", "_json_data");
    }

    #[test]
    fn empty_key_yields_empty_string() {
        assert_snake("", "");
        assert_snake("   ", "");
    }

    #[test]
    fn letter_digit_runs_are_spaced_apart() {
        assert_eq!(space_letter_digit_runs("a1b2"), "a 1 b2");
        assert_eq!(space_letter_digit_runs("xa12b34c5"), "xa 12 b34c5");
        assert_eq!(space_letter_digit_runs("a1b2c3d4"), "a 1 b2c 3 d4");
        assert_eq!(space_letter_digit_runs("k8s"), "k8s");
        assert_snake("a1b2", "a_1_b2");
    }

    #[test]
    fn plural_special_word_alone_gets_double_underscore() {
        // Upstream: "IPs" -> "_IPS" -> words ["", "ips"], plus the capital prefix.
        assert_snake("IPs", "__ips");
    }

    #[test]
    fn dashes_split_words() {
        assert_snake("my-key", "my_key");
    }

    #[test]
    fn non_ascii_lowercase_is_lowered_like_go() {
        assert_snake("İx", "ix");
    }

    #[test]
    fn keys_are_converted_recursively_including_maps_in_lists() {
        let input = json!({
            "fooBar": {"innerKey": "someValue"},
            "listOf": [{"itemKey": 1}, "plainString", [{"deepKey": true}]],
            "plain": "camelCaseValue"
        });
        let want = json!({
            "foo_bar": {"inner_key": "someValue"},
            "list_of": [{"item_key": 1}, "plainString", [{"deep_key": true}]],
            "plain": "camelCaseValue"
        });
        assert_eq!(snake_case_keys(&input), want);
    }

    #[test]
    fn scalars_are_returned_unchanged() {
        assert_eq!(snake_case_keys(&json!("fooBar")), json!("fooBar"));
        assert_eq!(snake_case_keys(&json!(3)), json!(3));
        assert_eq!(snake_case_keys(&Value::Null), Value::Null);
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    use super::*;
    use crate::proptest_support::{config, json, key, text};

    /// Keys as CRDs write them: camelCase, acronyms (the special words too), digits, separators.
    fn spec_key() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            "[a-z]{1,6}",
            "[A-Z][a-z]{0,5}",
            proptest::sample::select(&["HTTP", "URL", "IP", "IPs", "URLs", "JSON", "K8s", "_", "-", " "][..])
                .prop_map(str::to_string),
            "[0-9]{1,3}",
        ];
        proptest::collection::vec(piece, 1..6).prop_map(|pieces| pieces.concat())
    }

    /// The scalars inside a JSON value, sorted: what conversion must keep.
    fn leaves(value: &Value) -> Vec<String> {
        let mut found = match value {
            Value::Object(map) => map.values().flat_map(leaves).collect(),
            Value::Array(items) => items.iter().flat_map(leaves).collect(),
            scalar => vec![scalar.to_string()],
        };
        found.sort();
        found
    }

    /// Whether two keys of some map inside `value` convert to the same name (one is then lost).
    fn collides(value: &Value) -> bool {
        match value {
            Value::Object(map) => {
                let mut names: Vec<String> = map.keys().map(|key| to_snake(key)).collect();
                names.sort();
                names.dedup();
                names.len() < map.len() || map.values().any(collides)
            }
            Value::Array(items) => items.iter().any(collides),
            _ => false,
        }
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn any_key_converts_to_lowercase_words_joined_by_underscores(key in prop_oneof![text(), spec_key()]) {
            let snake = to_snake(&key);
            prop_assert!(!snake.chars().any(|c| c.is_ascii_uppercase() || c == ' ' || c == '-'), "{key:?} -> {snake:?}");
        }

        #[test]
        fn converting_twice_changes_nothing_more_for_keys_without_digits(
            key in prop_oneof![text(), spec_key()].prop_map(|key| key.replace(|c: char| c.is_ascii_digit(), ""))
        ) {
            // With digits upstream's letter-digit regex can match again in the output
            // (`xa12b34c5` -> `xa_12_b34c5` -> `xa_12_b_34_c5`), so upstream is not idempotent there.
            let once = to_snake(&key);
            prop_assert_eq!(to_snake(&once), once.clone(), "{:?}", key);
        }

        #[test]
        fn lower_camel_case_words_are_joined_by_underscores(words in proptest::collection::vec("[a-z]{2,6}", 1..5)) {
            let camel: String = words
                .iter()
                .enumerate()
                .map(|(i, word)| if i == 0 { word.clone() } else { word[..1].to_uppercase() + &word[1..] })
                .collect();
            prop_assert_eq!(to_snake(&camel), words.join("_"));
        }

        #[test]
        fn lists_and_scalars_keep_their_length_and_values(value in json()) {
            let converted = snake_case_keys(&value);
            match (&value, &converted) {
                (Value::Object(_), Value::Object(_)) => {}
                (Value::Array(before), Value::Array(after)) => prop_assert_eq!(before.len(), after.len()),
                (before, after) => prop_assert_eq!(before, after),
            }
        }

        #[test]
        fn keys_that_stay_distinct_keep_their_values(map in proptest::collection::btree_map(key(), json(), 0..6)) {
            let map: Map<String, Value> = map.into_iter().collect();
            let converted = snake_case_map_keys(&map);
            let mut targets: Vec<String> = map.keys().map(|key| to_snake(key)).collect();
            targets.sort();
            targets.dedup();
            prop_assert_eq!(converted.len(), targets.len());
            for (key, value) in &map {
                let unique = map.keys().filter(|other| to_snake(other) == to_snake(key)).count() == 1;
                if unique {
                    prop_assert_eq!(&converted[&to_snake(key)], &snake_case_keys(value));
                    if !collides(value) {
                        prop_assert_eq!(leaves(&converted[&to_snake(key)]), leaves(value));
                    }
                }
            }
        }
    }
}
