//! Shared settings and input generators for the property-based fuzz tests of the parsers of
//! untrusted input (`mod fuzz` beside each parser).

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Number, Value};

/// A bounded run of `cases` cases, or of `PROPTEST_CASES` when it is set (for a longer session).
/// No persistence files: a case that fails becomes an explicit regression test beside the parser.
pub(crate) fn config(cases: u32) -> Config {
    // `Config::default()` already reads PROPTEST_CASES and the other PROPTEST_* variables.
    let mut config = Config { failure_persistence: None, ..Config::default() };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config
}

/// Pieces that parsers treat specially: Jinja and `$VAR` delimiters, YAML indicators, quotes,
/// separators, line breaks and characters whose case mapping is unusual.
const FRAGMENTS: [&str; 28] = [
    "{{", "}}", "{%", "%}", "{#", "#}", "{", "}", "$", "${", "$$", ":", ": ", "- ", "-", "\n", "\t", "'",
    "\"", "/", ".", "_", " ", "#", "µ", "İ", "ß", "\u{0}",
];

/// Arbitrary text that often contains the fragments parsers treat specially.
pub(crate) fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => proptest::sample::select(&FRAGMENTS[..]).prop_map(str::to_string),
        3 => "[a-zA-Z0-9]{1,6}",
        1 => any::<char>().prop_map(String::from),
    ];
    prop_oneof![
        4 => proptest::collection::vec(piece, 0..10).prop_map(|pieces| pieces.concat()),
        1 => any::<String>(),
    ]
}

/// Map keys: mostly identifier-like (camelCase, snake_case, acronyms), sometimes arbitrary.
pub(crate) fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z_][a-zA-Z0-9_-]{0,12}",
        1 => text(),
    ]
}

/// An arbitrary JSON scalar; numbers are finite (JSON has no NaN).
pub(crate) fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        text().prop_map(Value::String),
    ]
}

/// An arbitrary JSON value of bounded depth and size (a CR's spec, an event's payload).
pub(crate) fn json() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(key(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// An arbitrary JSON mapping (a spec, a metadata block, a watch's vars).
pub(crate) fn json_map() -> impl Strategy<Value = Map<String, Value>> {
    proptest::collection::btree_map(key(), json(), 0..6).prop_map(|map| map.into_iter().collect())
}
