//! The inventory of a run: the template's values put in as data, then the result checked the way
//! Ansible's YAML inventory plugin reads it, so a mistake becomes a `Failure` naming where it is
//! instead of a run against "only localhost".
//!
//! Nothing a CR supplies becomes YAML structure or an Ansible template. The template is rendered
//! with every `{{ … }}` value held back ([`template::render_marked`]), so the text that is parsed
//! holds only the template author's own text and markers of letters and digits: the CR cannot
//! change it. Each YAML scalar that holds a marker is then replaced, at its source span, by one
//! node written from the value: a string as an ASCII double-quoted scalar tagged `!unsafe`
//! (Ansible never templates it), a number or boolean as itself, a list or mapping as flow YAML
//! with every string in it `!unsafe`. One scalar node replaced by one node: the structure stays.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use granit_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Value};

use crate::template::Marked;
use crate::watches::describe;

/// Keys a group may have.
const GROUP_KEYS: [&str; 3] = ["hosts", "vars", "children"];

/// Why a rendered inventory is not one Ansible would read as intended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inventory: {0}")]
pub struct Error(String);

/// What a scalar of the rendered text is to its collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A mapping key: always written as a string.
    Key,
    /// A mapping value, a list item, or the document itself.
    Value,
}

/// Puts the held-back values of a rendered inventory in as data (see the module's comment).
pub fn fill(marked: &Marked) -> Result<String, Error> {
    let text = &marked.text;
    let invalid = |err: &dyn std::fmt::Display| Error(format!("rendered text is not valid YAML: {err}"));
    let mut open: Vec<Open> = Vec::new();
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|err| invalid(&err))?;
        let is_node = matches!(
            event,
            Event::Scalar(..) | Event::Alias(_) | Event::MappingStart(..) | Event::SequenceStart(..)
        );
        let place = match open.last_mut() {
            Some(Open::Mapping { key_next }) if is_node => {
                *key_next = !*key_next;
                if *key_next { Place::Value } else { Place::Key }
            }
            _ => Place::Value,
        };
        match event {
            Event::MappingStart(..) => open.push(Open::Mapping { key_next: true }),
            Event::SequenceStart(..) => open.push(Open::Sequence),
            Event::MappingEnd | Event::SequenceEnd => drop(open.pop()),
            Event::Scalar(value, style, _, tag) if value.contains(&marked.nonce) => {
                let line = span.start.line();
                let at = |why: &str| Error(format!("rendered line {line}: a {{{{ … }}}} value {why}"));
                if tag.is_some() {
                    return Err(at("must not follow a YAML tag (it is written with its own)"));
                }
                let range = span.byte_range().ok_or_else(|| at("has no position"))?;
                let source = &text[range.clone()];
                let verbatim = match style {
                    ScalarStyle::Plain => source == value,
                    ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => {
                        source.len() == value.len() + 2 && source.get(1..source.len() - 1) == Some(&*value)
                    }
                    _ => false,
                };
                if !verbatim {
                    return Err(at(
                        "must be in a one-line key or value, not in a block scalar, a multi-line or an escaped string",
                    ));
                }
                let parts = split(&value, marked)?;
                let written = match parts.as_slice() {
                    [Part::Value(value)] if style == ScalarStyle::Plain && place == Place::Value => {
                        yaml_value(value)
                    }
                    parts => {
                        let mut joined = String::new();
                        for part in parts {
                            match part {
                                Part::Text(text) => joined.push_str(text),
                                Part::Value(Value::String(text)) => joined.push_str(text),
                                Part::Value(Value::Null) => joined.push_str("none"),
                                Part::Value(other) => joined.push_str(&other.to_string()),
                            }
                        }
                        unsafe_string(&joined)
                    }
                };
                edits.push((range, written));
            }
            _ => {}
        }
    }
    let mut filled = String::with_capacity(text.len());
    let mut from = 0;
    for (range, written) in edits {
        filled.push_str(&text[from..range.start]);
        filled.push_str(&written);
        from = range.end;
    }
    filled.push_str(&text[from..]);
    if filled.contains(&marked.nonce) {
        return Err(Error(
            "a {{ … }} value is outside any YAML key or value (in a comment, tag or anchor)".into(),
        ));
    }
    Ok(filled)
}

/// An open collection in [`fill`].
enum Open {
    /// A mapping, and whether its next node is a key.
    Mapping {
        key_next: bool,
    },
    Sequence,
}

/// A piece of a scalar that holds markers.
enum Part<'a> {
    Text(&'a str),
    Value(&'a Value),
}

fn split<'a>(scalar: &'a str, marked: &'a Marked) -> Result<Vec<Part<'a>>, Error> {
    let mut parts = Vec::new();
    let mut rest = scalar;
    while let Some(at) = rest.find(&marked.nonce) {
        if at > 0 {
            parts.push(Part::Text(&rest[..at]));
        }
        let tail = &rest[at + marked.nonce.len()..];
        let index = tail
            .strip_prefix('v')
            .and_then(|tail| tail.split_once('z'))
            .and_then(|(digits, _)| digits.parse::<usize>().ok().map(|index| (index, digits.len())));
        let Some((index, digits)) = index else {
            return Err(Error("a marker of a {{ … }} value was cut".into()));
        };
        let value = marked.values.get(index).ok_or_else(|| Error("a marker of an unknown value".into()))?;
        parts.push(Part::Value(value));
        rest = &tail[1 + digits + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest));
    }
    Ok(parts)
}

/// A string as a one-line, ASCII, double-quoted YAML scalar tagged `!unsafe`: Ansible does not
/// template it, and no character of it can end the scalar.
pub fn unsafe_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 11);
    out.push_str("!unsafe \"");
    for c in text.chars() {
        let _ = match c {
            '"' => out.write_str("\\\""),
            '\\' => out.write_str("\\\\"),
            ' '..='~' => out.write_char(c),
            c if u32::from(c) <= 0xff => write!(out, "\\x{:02x}", u32::from(c)),
            c if u32::from(c) <= 0xffff => write!(out, "\\u{:04x}", u32::from(c)),
            c => write!(out, "\\U{:08x}", u32::from(c)),
        };
    }
    out.push('"');
    out
}

/// A value as one YAML node: strings `!unsafe`, numbers and booleans as themselves, lists and
/// mappings in flow style.
pub fn yaml_value(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) if number.is_f64() => format!("!!float \"{number}\""),
        Value::Number(number) => number.to_string(),
        Value::String(text) => unsafe_string(text),
        Value::Array(items) => format!("[{}]", items.iter().map(yaml_value).collect::<Vec<_>>().join(", ")),
        Value::Object(entries) => format!(
            "{{{}}}",
            entries
                .iter()
                .map(|(key, value)| format!("{}: {}", unsafe_string(key), yaml_value(value)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Whether Ansible reads `name` as one host name: no spaces or line breaks, none of the characters
/// of its host patterns and ranges (`:` `,` `[` `]` `=`), not starting with `-`.
fn host_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.starts_with('-') {
        Some("starts with '-'")
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("has a space, line break or control character")
    } else if name.contains([':', ',', '[', ']', '=']) {
        Some("has one of : , [ ] = (host patterns and ranges)")
    } else {
        None
    }
}

/// The variables that set the SSH port.
const PORT_VARS: [&str; 2] = ["ansible_port", "ansible_ssh_port"];

/// A problem with a port variable in `vars`, if any.
fn port_problem(vars: &Value) -> Option<String> {
    PORT_VARS.iter().find_map(|key| {
        let port = vars.get(*key)?;
        let number = match port {
            Value::Number(number) => number.as_u64(),
            Value::String(text) if text.bytes().all(|b| b.is_ascii_digit()) => text.parse().ok(),
            _ => None,
        };
        match number {
            Some(1..=65535) => None,
            _ => Some(format!("{key} {} is not a port (a number from 1 to 65535)", describe(port))),
        }
    })
}

/// Parses a rendered YAML inventory and returns its hosts, each once, sorted. A host name Ansible
/// would read as something else, or a port that is not one, is an error naming the host.
pub fn hosts(text: &str) -> Result<Vec<String>, Error> {
    // The parser's message shows the offending rendered lines.
    let document: Value = serde_saphyr::from_str(text)
        .map_err(|err| Error(format!("rendered text is not valid YAML: {err}")))?;
    let groups = match document {
        Value::Object(groups) => groups,
        Value::Null => return Err(Error("rendered inventory is empty".into())),
        other => {
            return Err(Error(format!(
                "the top level must be a mapping of groups, found {}",
                describe(&other)
            )));
        }
    };
    let mut hosts = BTreeSet::new();
    for (name, group) in &groups {
        read_group(name, group, &mut hosts)?;
    }
    if hosts.is_empty() {
        return Err(Error("rendered inventory has no hosts".into()));
    }
    Ok(hosts.into_iter().collect())
}

fn read_group(path: &str, group: &Value, hosts: &mut BTreeSet<String>) -> Result<(), Error> {
    let group = match group {
        Value::Null => return Ok(()),
        Value::Object(group) => group,
        other => return Err(Error(format!("group {path:?} must be a mapping, found {}", describe(other)))),
    };
    for key in group.keys() {
        if !GROUP_KEYS.contains(&key.as_str()) {
            return Err(Error(format!(
                "group {path:?}: unexpected key {key:?} (a group has hosts, vars, children)"
            )));
        }
    }
    match group.get("hosts") {
        None | Some(Value::Null) => {}
        Some(Value::Object(entries)) => {
            for (host, vars) in entries {
                if !matches!(vars, Value::Null | Value::Object(_)) {
                    return Err(Error(format!(
                        "group {path:?}: host {host:?} must map to its variables or nothing, found {}",
                        describe(vars)
                    )));
                }
                if let Some(problem) = host_name_problem(host) {
                    return Err(Error(format!("group {path:?}: host {host:?} {problem}")));
                }
                if let Some(problem) = port_problem(vars) {
                    return Err(Error(format!("group {path:?}: host {host:?}: {problem}")));
                }
                hosts.insert(host.clone());
            }
        }
        Some(other) => {
            return Err(Error(format!(
                "group {path:?}: hosts must be a mapping of host names, found {}",
                describe(other)
            )));
        }
    }
    if let Some(vars) = group.get("vars").filter(|v| !matches!(v, Value::Null | Value::Object(_))) {
        return Err(Error(format!("group {path:?}: vars must be a mapping, found {}", describe(vars))));
    }
    if let Some(problem) = group.get("vars").and_then(port_problem) {
        return Err(Error(format!("group {path:?}: {problem}")));
    }
    match group.get("children") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(children)) => children_of(path, children, hosts),
        Some(other) => {
            Err(Error(format!("group {path:?}: children must be a mapping, found {}", describe(other))))
        }
    }
}

fn children_of(path: &str, children: &Map<String, Value>, hosts: &mut BTreeSet<String>) -> Result<(), Error> {
    for (name, child) in children {
        read_group(&format!("{path}.{name}"), child, hosts)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::template;

    /// The EtcdCluster sample's inventory template (watches.yaml), shortened.
    const SAMPLE: &str = "etcd:\n  hosts:\n{% for h in spec.hosts %}\n    {{ h.name }}: {ansible_host: {{ h.address | tojson }}, ansible_port: {{ h.port | default(22) }}, ansible_user: {{ h.user | tojson }}}\n{% endfor %}\n";

    fn filled(source: &str, spec: Value) -> Result<String, String> {
        let marked = template::render_marked("inventory", source, &json!({"spec": spec}))
            .map_err(|e| e.to_string())?;
        fill(&marked).map_err(|e| e.to_string())
    }

    fn host(name: &str, address: &str, port: Value) -> Value {
        json!({"hosts": [{"name": name, "address": address, "port": port, "user": "root"}]})
    }

    #[test]
    fn cr_strings_are_written_unsafe_and_numbers_as_numbers() {
        let text =
            filled(SAMPLE, host("etcd-1", "{{ lookup('pipe', 'touch /tmp/m') }}", json!(2222))).unwrap();
        assert_eq!(
            text,
            "etcd:\n  hosts:\n\n    !unsafe \"etcd-1\": {ansible_host: !unsafe \"{{ lookup('pipe', 'touch /tmp/m') }}\", ansible_port: 2222, ansible_user: !unsafe \"root\"}\n"
        );
        assert_eq!(hosts(&text).unwrap(), ["etcd-1"]);
    }

    #[test]
    fn a_port_that_injects_variables_stays_one_value_and_is_refused_naming_the_host() {
        let text = filled(SAMPLE, host("etcd-1", "10.0.0.1", json!("1, ansible_connection: local"))).unwrap();
        assert!(
            text.contains("ansible_port: !unsafe \"1, ansible_connection: local\", ansible_user"),
            "{text}"
        );
        assert_eq!(
            hosts(&text).unwrap_err().to_string(),
            "inventory: group \"etcd\": host \"etcd-1\": ansible_port \"1, ansible_connection: local\" is not a port (a number from 1 to 65535)"
        );
        let text = filled(SAMPLE, host("etcd-1", "10.0.0.1", json!(70000))).unwrap();
        assert!(
            hosts(&text)
                .unwrap_err()
                .to_string()
                .ends_with("ansible_port 70000 is not a port (a number from 1 to 65535)")
        );
        assert_eq!(
            hosts(&filled(SAMPLE, host("a", "x", json!("22"))).unwrap()).unwrap(),
            ["a"],
            "a port in digits is one"
        );
    }

    #[test]
    fn a_name_that_injects_variables_or_hosts_is_refused_naming_it() {
        for (name, problem) in [
            ("a: {ansible_connection: local}", "has a space, line break or control character"),
            ("a,localhost", "has one of : , [ ] = (host patterns and ranges)"),
            ("web[1:3]", "has one of : , [ ] = (host patterns and ranges)"),
            ("-x", "starts with '-'"),
            ("a\nb", "has a space, line break or control character"),
        ] {
            let text = filled(SAMPLE, host(name, "10.0.0.1", json!(22))).unwrap();
            let err = hosts(&text).unwrap_err().to_string();
            assert_eq!(err, format!("inventory: group \"etcd\": host {name:?} {problem}"));
        }
    }

    #[test]
    fn values_in_quotes_or_with_text_become_one_unsafe_string() {
        let source = "all:\n  hosts:\n    h:\n      a: \"{{ spec.x }}\"\n      b: '{{ spec.x }}'\n      c: 10.{{ spec.n }}.0.1\n      d: {{ spec.n }}{{ spec.x }}\n";
        let text = filled(source, json!({"x": "'\"{{ x }}", "n": 7})).unwrap();
        assert_eq!(
            text,
            "all:\n  hosts:\n    h:\n      a: !unsafe \"'\\\"{{ x }}\"\n      b: !unsafe \"'\\\"{{ x }}\"\n      c: !unsafe \"10.7.0.1\"\n      d: !unsafe \"7'\\\"{{ x }}\""
        );
    }

    #[test]
    fn lists_and_mappings_are_flow_yaml_with_unsafe_strings() {
        let source = "all:\n  hosts:\n    h:\n      v: {{ spec.v }}\n      f: {{ spec.f }}\n      n: {{ spec.none }}\n";
        let text =
            filled(source, json!({"v": {"k: x": ["a", 1, true, null]}, "f": 1.5, "none": null})).unwrap();
        assert_eq!(
            text,
            "all:\n  hosts:\n    h:\n      v: {!unsafe \"k: x\": [!unsafe \"a\", 1, true, null]}\n      f: !!float \"1.5\"\n      n: null"
        );
    }

    #[test]
    fn every_character_is_written_in_ascii_and_no_line_break_ends_the_scalar() {
        assert_eq!(
            unsafe_string("a\nb\u{85}\u{2028}é\u{1f600}\\\t"),
            "!unsafe \"a\\x0ab\\x85\\u2028\\xe9\\U0001f600\\\\\\x09\""
        );
    }

    #[test]
    fn safe_is_the_template_authors_way_to_write_structure() {
        let source = "all:\n  hosts:\n    h: {{ spec.vars | safe }}\n";
        let text = filled(source, json!({"vars": "{ansible_user: x}"})).unwrap();
        assert_eq!(text, "all:\n  hosts:\n    h: {ansible_user: x}");
        let source = "{% macro host(h) %}{{ h.name }}: {ansible_host: {{ h.address }}}{% endmacro %}all:\n  hosts:\n    {{ host(spec.hosts[0]) }}\n";
        let text = filled(source, host("a", "b", json!(22))).unwrap();
        assert_eq!(
            text, "all:\n  hosts:\n    !unsafe \"a\": {ansible_host: !unsafe \"b\"}",
            "a macro's values are still data"
        );
    }

    #[test]
    fn values_where_no_value_can_be_written_are_errors() {
        let err = filled("all:\n  hosts:\n    h:\n      v: |\n        {{ spec.x }}\n", json!({"x": "y"}))
            .unwrap_err();
        assert_eq!(
            err,
            "inventory: rendered line 5: a {{ … }} value must be in a one-line key or value, not in a block scalar, a multi-line or an escaped string"
        );
        let err = filled("all:\n  hosts:\n    h: !!str {{ spec.x }}\n", json!({"x": "y"})).unwrap_err();
        assert!(err.ends_with("must not follow a YAML tag (it is written with its own)"), "{err}");
        let err = filled("# {{ spec.x }}\nall:\n  hosts:\n    h:\n", json!({"x": "y"})).unwrap_err();
        assert_eq!(
            err,
            "inventory: a {{ … }} value is outside any YAML key or value (in a comment, tag or anchor)"
        );
    }

    #[test]
    fn hosts_come_from_groups_and_children_each_once() {
        let text = "etcd:\n  hosts:\n    a: {ansible_host: 127.0.0.1}\n    b:\n  vars: {x: 1}\nall:\n  children:\n    extra:\n      hosts:\n        c:\n        a:\n";
        assert_eq!(hosts(text).unwrap(), ["a", "b", "c"]);
    }

    #[test]
    fn a_list_of_hosts_is_named_as_the_mistake() {
        let err = hosts("etcd:\n  hosts: [a, b]\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "inventory: group \"etcd\": hosts must be a mapping of host names, found a list"
        );
    }

    #[test]
    fn unknown_group_keys_and_bad_children_are_errors() {
        assert_eq!(
            hosts("etcd:\n  host:\n    a:\n").unwrap_err().to_string(),
            "inventory: group \"etcd\": unexpected key \"host\" (a group has hosts, vars, children)"
        );
        assert_eq!(
            hosts("all:\n  children:\n    db: [x]\n").unwrap_err().to_string(),
            "inventory: group \"all.db\" must be a mapping, found a list"
        );
    }

    #[test]
    fn empty_or_hostless_inventories_are_errors() {
        assert_eq!(hosts("").unwrap_err().to_string(), "inventory: rendered inventory is empty");
        assert_eq!(
            hosts("etcd:\n  hosts:\n").unwrap_err().to_string(),
            "inventory: rendered inventory has no hosts"
        );
    }

    #[test]
    fn yaml_errors_show_the_rendered_line() {
        let err = hosts("etcd:\n  hosts:\n    a: {ansible_host: [\n").unwrap_err().to_string();
        assert!(
            err.starts_with("inventory: rendered text is not valid YAML: error: line 3 column 23"),
            "{err}"
        );
        assert!(err.contains("3 |     a: {ansible_host: ["), "{err}");
    }
}

#[cfg(test)]
mod fuzz {
    use std::collections::BTreeSet;

    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::*;
    use crate::proptest_support::{config, json, text};
    use crate::template;

    /// A group of a valid inventory: hosts, vars and child groups.
    fn group() -> impl Strategy<Value = Value> {
        let hosts = proptest::collection::btree_map(
            "[a-z0-9][a-z0-9.-]{0,9}",
            prop_oneof![Just(Value::Null), Just(json!({"ansible_host": "127.0.0.1"}))],
            0..4,
        );
        let leaf = (hosts, any::<bool>()).prop_map(|(hosts, vars)| {
            let mut group = json!({"hosts": Value::Object(hosts.into_iter().collect())});
            if vars {
                group["vars"] = json!({"ansible_user": "x"});
            }
            group
        });
        leaf.prop_recursive(3, 16, 3, |inner| {
            (inner.clone(), proptest::collection::btree_map("[a-z]{1,6}", inner, 1..3)).prop_map(
                |(mut group, children)| {
                    group["children"] = Value::Object(children.into_iter().collect());
                    group
                },
            )
        })
    }

    fn all_hosts(group: &Value, hosts: &mut BTreeSet<String>) {
        if let Some(entries) = group["hosts"].as_object() {
            hosts.extend(entries.keys().cloned());
        }
        if let Some(children) = group["children"].as_object() {
            children.values().for_each(|child| all_hosts(child, hosts));
        }
    }

    /// Paths (`all.db`) of groups and every mapping in `inventory`, to find where a mutation went.
    fn groups(prefix: &str, map: &Map<String, Value>, out: &mut Vec<String>) {
        for (name, group) in map {
            let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
            out.push(path.clone());
            if let Some(children) = group["children"].as_object() {
                groups(&path, children, out);
            }
        }
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn any_text_yields_hosts_or_an_error_saying_what_is_wrong(text in prop_oneof![
            text(),
            json().prop_map(|value| serde_saphyr::to_string(&value).unwrap_or_default()),
        ]) {
            match hosts(&text) {
                Ok(hosts) => prop_assert!(!hosts.is_empty()),
                Err(error) => prop_assert!(error.to_string().starts_with("inventory: "), "{error}"),
            }
        }

        #[test]
        fn valid_inventories_yield_every_host_once(inventory in proptest::collection::btree_map("[a-z]{1,6}", group(), 1..4), block in any::<bool>()) {
            let inventory = Value::Object(inventory.into_iter().collect());
            let text = if block { serde_saphyr::to_string(&inventory).unwrap() } else { inventory.to_string() };
            let mut want = BTreeSet::new();
            inventory.as_object().unwrap().values().for_each(|group| all_hosts(group, &mut want));
            match hosts(&text) {
                Ok(found) => prop_assert_eq!(found, want.into_iter().collect::<Vec<_>>()),
                Err(error) => prop_assert!(want.is_empty() && error.to_string() == "inventory: rendered inventory has no hosts", "{text}: {error}"),
            }
        }

        #[test]
        fn a_wrong_value_in_a_group_is_named_with_the_group(
            inventory in proptest::collection::btree_map("[a-z]{1,6}", group(), 1..4),
            pick in any::<prop::sample::Index>(),
            key in proptest::sample::select(&["hosts", "vars", "children"][..]),
            value in prop_oneof![Just(json!([1, 2])), "[a-z]{1,6}".prop_map(Value::from), any::<i32>().prop_map(Value::from)],
        ) {
            let mut inventory: Map<String, Value> = inventory.into_iter().collect();
            let mut paths = Vec::new();
            groups("", &inventory, &mut paths);
            let path = pick.get(&paths).clone();
            let mut target = &mut inventory[path.split('.').next().unwrap()];
            for name in path.split('.').skip(1) {
                target = &mut target["children"][name];
            }
            target[key] = value.clone();
            let message = hosts(&Value::Object(inventory).to_string()).map_err(|error| error.to_string());
            let message = message.err().unwrap_or_default();
            prop_assert!(message.contains(&format!("group {path:?}")), "{message}");
            prop_assert!(message.contains(&describe(&value)), "{message}");
        }

        #[test]
        fn any_template_and_cr_render_or_fail_naming_the_field(source in text(), object in json()) {
            match template::check("inventory", &source) {
                Ok(()) => {
                    match template::render_marked("inventory", &source, &object) {
                        Ok(marked) => if let Err(error) = fill(&marked) {
                            prop_assert!(error.to_string().starts_with("inventory: "), "{error}");
                        },
                        Err(error) => prop_assert!(error.to_string().starts_with("inventory: "), "{error}"),
                    }
                }
                Err(error) => prop_assert!(error.to_string().starts_with("inventory: "), "{error}"),
            }
        }

        #[test]
        fn no_cr_string_changes_the_inventory_or_is_templated_by_ansible(
            name in text(), address in text(), port in text(), user in text(), removed in text(),
        ) {
            let object = |name: &str, address: &str, port: &str, user: &str, removed: &str| json!({
                "spec": {"hosts": [{"name": name, "address": address, "port": port, "user": user}]},
                "status": {"members": [{"name": removed, "address": address, "sshPort": port, "user": user}]},
            });
            // Names start apart, so the removed member is never in the spec.
            let benign = shape(&filled(&object("na", "b", "22", "d", "re"))?);
            let attack = filled(&object(&format!("n{name}"), &address, &port, &user, &format!("r{removed}")))?;
            prop_assert_eq!(shape(&attack), benign, "{}", attack);
            prop_assert!(attack.is_ascii());
        }

        #[test]
        fn any_cr_value_is_one_node_of_data(value in json(), quoted in any::<bool>()) {
            let source = if quoted { "all:\n  hosts:\n    h: {v: \"{{ spec.v }}\"}\n" } else { "all:\n  hosts:\n    h: {v: {{ spec.v }}}\n" };
            let text = fill(&template::render_marked("inventory", source, &json!({"spec": {"v": value}}))?)?;
            let events = shape(&text);
            // The template's own nodes, then the value's, then the template's closing ones.
            prop_assert_eq!(&events[..9], ["+doc", "{", "=all", "{", "=hosts", "{", "=h", "{", "=v"], "{}", text);
            prop_assert_eq!(&events[events.len() - 5..], ["}", "}", "}", "}", "-doc"], "{}", text);
            let inner = &events[9..events.len() - 5];
            prop_assert!(inner.iter().all(|event| !event.starts_with('=') || event == "=null" || event == "=true" || event == "=false" || event[1..].parse::<f64>().is_ok()), "{:?}", inner);
        }
    }

    /// The injection corpus every route is attacked with (`tests/injection.rs`), here in each
    /// field of a host of the sample inventory: the inventory keeps its shape, every value data.
    #[test]
    fn the_injection_corpus_in_every_host_field_changes_nothing() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpora/injection.json");
        let corpus: Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("the corpus")).unwrap();
        let object = |name: &str, address: &str, port: &str, user: &str| json!({"spec": {"hosts": [{"name": name, "address": address, "port": port, "user": user}]}});
        let benign = shape(&filled(&object("na", "b", "22", "d")).unwrap());
        for payload in corpus["payloads"].as_array().unwrap().iter().filter_map(Value::as_str) {
            let payload = payload.replace("MARKER", "/tmp/marker");
            let attack = filled(&object(&format!("n{payload}"), &payload, &payload, &payload)).unwrap();
            assert_eq!(shape(&attack), benign, "{attack}");
        }
    }

    /// The EtcdCluster sample's inventory template (watches.yaml), shortened.
    const SAMPLE: &str = "etcd:\n  hosts:\n{% for h in spec.hosts %}\n    {{ h.name }}: {ansible_host: {{ h.address | tojson }}, ansible_port: {{ h.port | default(22) }}, ansible_user: {{ h.user | tojson }}}\n{% endfor %}\netcd_removed:\n  hosts:\n{% set names = spec.hosts | map(attribute=\"name\") | list %}\n{% for m in status.members | default([]) if m.name not in names %}\n    {{ m.name }}: {ansible_host: {{ m.address | tojson }}, ansible_port: {{ m.sshPort }}, ansible_user: {{ m.user | tojson }}}\n{% endfor %}\nall:\n  vars:\n    ansible_python_interpreter: /usr/bin/python3\n";

    fn filled(object: &Value) -> Result<String, TestCaseError> {
        let marked = template::render_marked("inventory", SAMPLE, object)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        fill(&marked).map_err(|e| TestCaseError::fail(e.to_string()))
    }

    /// The YAML events of `text`: collections, and each scalar as its tag (`!unsafe`) or, untagged,
    /// `=` and its text. Panics on text that is not YAML (a filled inventory always is).
    /// An untagged scalar with Jinja delimiters would be templated by Ansible: it panics too.
    fn shape(text: &str) -> Vec<String> {
        granit_parser::Parser::new_from_str(text)
            .filter_map(|event| match event.unwrap_or_else(|err| panic!("{err}: {text}")).0 {
                granit_parser::Event::DocumentStart(..) => Some("+doc".into()),
                granit_parser::Event::DocumentEnd => Some("-doc".into()),
                granit_parser::Event::MappingStart(..) => Some("{".into()),
                granit_parser::Event::MappingEnd => Some("}".into()),
                granit_parser::Event::SequenceStart(..) => Some("[".into()),
                granit_parser::Event::SequenceEnd => Some("]".into()),
                granit_parser::Event::Scalar(_, _, _, Some(tag)) => {
                    assert!(tag.to_string() == "!unsafe" || tag.suffix() == "float", "{tag}: {text}");
                    Some(tag.to_string())
                }
                granit_parser::Event::Scalar(value, ..) => {
                    assert!(
                        !["{{", "{%", "{#"].iter().any(|d| value.contains(d)),
                        "templated: {value:?} in {text}"
                    );
                    Some(format!("={value}"))
                }
                _ => None,
            })
            .collect()
    }
}
