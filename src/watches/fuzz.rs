//! Property-based fuzzing of watches.yaml loading: arbitrary text, structured documents that reach
//! every field, and valid entries with one field broken. Errors must name the file, the field and
//! the value; valid entries must load with what they say.

use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use serde_json::{Map, Value, json};

use super::test_support::TempDir;
use super::*;
use crate::go_duration;
use crate::proptest_support::{config, json, key, text};

const DEFAULTS: Defaults = Defaults { max_concurrent_reconciles: 4, ansible_verbosity: 2 };

/// A project with a playbook and a role, as the loader resolves them.
fn project() -> (TempDir, Environment) {
    let dir = TempDir::new();
    dir.file("playbook.yml");
    dir.dir("roles/memcached");
    let env = Environment::new(dir.path()).with_var("FUZZ_EMPTY", "");
    (dir, env)
}

fn load_text(text: &str, env: &Environment) -> Result<Loaded> {
    parse(text, Path::new("watches.yaml"), &DEFAULTS, env)
}

/// The document as YAML: JSON (flow style, a subset of YAML) or serde-saphyr's block style.
fn render(document: &Value, block: bool) -> String {
    if block {
        serde_saphyr::to_string(document).expect("a JSON value serialises as YAML")
    } else {
        document.to_string()
    }
}

/// A known key in any ASCII case (Go's decoder matches them ignoring case), or an unknown one.
fn any_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (proptest::sample::select(super::entry::known_keys()), any::<u32>()).prop_map(|(key, mask)| {
            key.chars()
                .enumerate()
                .map(|(i, c)| if mask & (1 << (i % 32)) != 0 { c.to_ascii_uppercase() } else { c })
                .collect::<String>()
        }),
        1 => key(),
    ]
}

/// Values a field may hold: plausible ones for the known keys and arbitrary JSON.
fn any_field_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        2 => json(),
        1 => proptest::sample::select(&["memcached", "playbook.yml", "30s", "-1s", "1h30m", "strict", "warm", "$FUZZ_EMPTY", "${HOME}"][..])
            .prop_map(Value::from),
        1 => Just(json!({"name": "x", "vars": {"a": 1}})),
        1 => Just(json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]})),
        1 => Just(json!([{"group": "", "version": "v1", "kind": "Secret"}])),
    ]
}

fn any_entry() -> impl Strategy<Value = Value> {
    prop_oneof![
        5 => proptest::collection::btree_map(any_key(), any_field_value(), 0..10)
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        1 => json(),
    ]
}

/// A valid entry and what it must load as.
#[derive(Debug, Clone)]
struct ValidEntry {
    group: String,
    version: String,
    kind: String,
    kind_from_env: bool,
    role: bool,
    period: Duration,
    flags: [bool; 6],
    max_runner_artifacts: u32,
    vars: Map<String, Value>,
    finalizer: Option<String>,
    unknown: Option<String>,
}

/// Map values a YAML file can hold as written: no `$` (the loader expands it before reading) and
/// only characters YAML allows in a stream (JSON does not escape DEL or C1 controls, and YAML,
/// like upstream's parser, rejects them raw).
fn plain_json() -> impl Strategy<Value = Value> {
    json().prop_filter("no $ and printable", |value| {
        let text = value.to_string();
        !text.contains('$')
            && !text.chars().any(|c| c.is_control() || matches!(c, '\u{feff}' | '\u{fffe}' | '\u{ffff}'))
    })
}

fn valid_entry() -> impl Strategy<Value = ValidEntry> {
    (
        ("([a-z]{1,8}(\\.[a-z]{1,8}){0,2})?", "v[0-9][a-z0-9]{0,5}", "[A-Z][a-zA-Z0-9]{0,10}", any::<bool>()),
        (any::<bool>(), any::<u64>(), any::<[bool; 6]>(), any::<u32>()),
        proptest::collection::btree_map("[a-z_]{1,8}", plain_json(), 0..4),
        proptest::option::of("[a-z.]{1,12}/[a-z]{1,10}"),
        proptest::option::of("x-[a-zA-Z]{1,8}"),
    )
        .prop_map(
            |((group, version, kind, kind_from_env), (role, nanos, flags, max), vars, finalizer, unknown)| {
                ValidEntry {
                    group,
                    version,
                    kind,
                    kind_from_env,
                    role,
                    period: Duration::from_nanos(nanos),
                    flags,
                    max_runner_artifacts: max,
                    vars: vars.into_iter().collect(),
                    finalizer,
                    unknown,
                }
            },
        )
}

const FLAGS: [&str; 6] = [
    "manageStatus",
    "watchDependentResources",
    "watchClusterScopedResources",
    "snakeCaseParameters",
    "watchAnnotationsChanges",
    "markUnsafe",
];

impl ValidEntry {
    fn document(&self) -> Value {
        let kind = if self.kind_from_env { "${FUZZ_KIND}".to_string() } else { self.kind.clone() };
        let mut entry = json!({
            "group": self.group,
            "version": self.version,
            "kind": kind,
            "reconcilePeriod": go_duration::format(self.period),
            "maxRunnerArtifacts": self.max_runner_artifacts,
            "vars": self.vars,
        });
        let target = if self.role { ("role", "memcached") } else { ("playbook", "playbook.yml") };
        entry[target.0] = json!(target.1);
        for (flag, value) in FLAGS.iter().zip(self.flags) {
            entry[*flag] = json!(value);
        }
        if let Some(name) = &self.finalizer {
            entry["finalizer"] = json!({"name": name, "vars": {"state": "absent"}});
        }
        if let Some(key) = &self.unknown {
            entry[key] = json!(true);
        }
        entry
    }

    fn check(&self, watch: &Watch, warnings: &[String], dir: &Path) -> Result<(), TestCaseError> {
        prop_assert_eq!(&watch.gvk, &Gvk::new(&self.group, &self.version, &self.kind));
        let target = if self.role {
            Target::Role(dir.join("roles/memcached"))
        } else {
            Target::Playbook(dir.join("playbook.yml"))
        };
        prop_assert_eq!(&watch.target, &target);
        prop_assert_eq!(watch.reconcile_period, Some(self.period).filter(|period| !period.is_zero()));
        let flags = [
            watch.manage_status,
            watch.watch_dependent_resources,
            watch.watch_cluster_scoped_resources,
            watch.snake_case_parameters,
            watch.watch_annotations_changes,
            watch.mark_unsafe,
        ];
        prop_assert_eq!(flags, self.flags);
        prop_assert_eq!(
            watch.max_runner_artifacts,
            if self.max_runner_artifacts == 0 { 20 } else { self.max_runner_artifacts }
        );
        prop_assert_eq!(&watch.vars, &self.vars);
        prop_assert_eq!(watch.finalizer.as_ref().map(|f| &f.name), self.finalizer.as_ref());
        if let Some(key) = &self.unknown {
            prop_assert!(
                warnings.iter().any(|w| w.contains(&format!("unknown key {key:?}"))),
                "{warnings:?}"
            );
        }
        Ok(())
    }
}

/// A value of the wrong type for `field`, and how the error describes it.
fn wrong_value(field: &'static str) -> impl Strategy<Value = Value> {
    let strings = "[a-zA-Z0-9 ]{1,10}".prop_map(Value::from);
    let numbers = any::<i32>().prop_map(Value::from);
    let collections = prop_oneof![Just(json!([1, "a"])), Just(json!({"a": [1]}))];
    let wrong = match field {
        "group" | "version" | "kind" | "playbook" | "role" | "inventory" | "sshKeySecret"
        | "fieldSelector" => prop_oneof![numbers, any::<bool>().prop_map(Value::from), collections].boxed(),
        "vars" | "selector" | "finalizer" => prop_oneof![strings, numbers, Just(json!([1]))].boxed(),
        "blacklist" | "watchFields" => prop_oneof![strings, numbers, Just(json!({"a": 1}))].boxed(),
        "maxRunnerArtifacts" | "runHistoryLimit" => {
            prop_oneof![strings, (i32::MIN..0).prop_map(Value::from), Just(json!(1.5)), collections].boxed()
        }
        "reconcilePeriod" => prop_oneof![numbers, collections, any::<bool>().prop_map(Value::from)].boxed(),
        // The boolean flags.
        _ => prop_oneof![strings, numbers, collections].boxed(),
    };
    wrong.prop_filter("not the value the field takes", |value| !value.is_null())
}

const TYPED_FIELDS: [&str; 24] = [
    "group",
    "version",
    "kind",
    "playbook",
    "role",
    "vars",
    "maxRunnerArtifacts",
    "reconcilePeriod",
    "manageStatus",
    "watchDependentResources",
    "snakeCaseParameters",
    "markUnsafe",
    "blacklist",
    "finalizer",
    "selector",
    "inventory",
    "runHistoryLimit",
    "trustCRTemplates",
    "trustCRVariables",
    "readyConditions",
    "watchReadResources",
    "watchFields",
    "fieldSelector",
    "statusProgress",
];

#[test]
fn arbitrary_text_loads_or_fails_naming_the_file() {
    let (_dir, env) = project();
    let mut runner = TestRunner::new(config(1024));
    let inputs = prop_oneof![text(), "(- |  |[a-zA-Z:{}\\[\\], \"'$]{0,12}\n){0,8}"];
    runner
        .run(&inputs, |text| {
            if let Err(error) = load_text(&text, &env) {
                let message = error.to_string();
                prop_assert!(message.starts_with("watches.yaml: "), "{message}");
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn structured_documents_load_or_fail_naming_the_entry_field_and_value() {
    let (_dir, env) = project();
    let mut runner = TestRunner::new(config(256));
    let documents = (proptest::collection::vec(any_entry(), 0..4), any::<bool>());
    runner
        .run(&documents, |(entries, block)| {
            let text = render(&Value::Array(entries.clone()), block);
            match load_text(&text, &env) {
                Ok(loaded) => prop_assert_eq!(loaded.watches.len(), entries.len()),
                Err(Error::FieldType { at, field, found, .. }) => {
                    // A top-level field: the entry holds it (in some case) with the value named.
                    let entry = entries[at.number - 1].as_object().expect("only mappings reach fields");
                    if !field.contains(['.', '[']) {
                        let values: Vec<String> = entry
                            .iter()
                            .filter(|(key, _)| key.eq_ignore_ascii_case(&field))
                            .map(|(_, value)| describe(value))
                            .collect();
                        prop_assert!(
                            values.contains(&found) || text.contains('$'),
                            "{field}: {found} not in {values:?}"
                        );
                    }
                }
                Err(error @ (Error::Yaml { .. } | Error::NotAList { .. } | Error::Read { .. })) => {
                    prop_assert!(error.to_string().starts_with("watches.yaml: "), "{error}");
                }
                Err(error) => {
                    // Every other error is about one entry and says which.
                    let message = error.to_string();
                    let named =
                        (1..=entries.len()).any(|n| message.starts_with(&format!("watches.yaml: entry {n}")));
                    prop_assert!(named, "{message}");
                }
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn valid_entries_load_with_what_they_say() {
    let (dir, base) = project();
    let mut runner = TestRunner::new(config(96));
    let files = (proptest::collection::vec(valid_entry(), 1..4), any::<bool>());
    runner
        .run(&files, |(mut entries, block)| {
            entries.iter_mut().enumerate().for_each(|(i, entry)| entry.kind = format!("{}{i}", entry.kind));
            for entry in &entries {
                let env = base.clone().with_var("FUZZ_KIND", &entry.kind);
                let text = render(&Value::Array(vec![entry.document()]), block);
                match load_text(&text, &env) {
                    Ok(loaded) => entry.check(&loaded.watches[0], &loaded.warnings, dir.path())?,
                    Err(error) => prop_assert!(false, "{text}\nfailed: {error}"),
                }
            }
            let all: Vec<Value> = entries
                .iter()
                .map(|entry| {
                    let mut e = entry.clone();
                    e.kind_from_env = false;
                    e.document()
                })
                .collect();
            let loaded = load_text(&render(&Value::Array(all.clone()), block), &base)
                .map_err(|error| TestCaseError::fail(error.to_string()))?;
            prop_assert_eq!(loaded.watches.len(), entries.len());
            let mut twice = all.clone();
            twice.push(all[0].clone());
            let error = load_text(&render(&Value::Array(twice), block), &base).err().map(|e| e.to_string());
            let want = format!("entry {}", entries.len() + 1);
            prop_assert!(
                error.as_deref().is_some_and(|e| e.contains(&want) && e.contains("duplicate gvk: entry 1")),
                "{error:?}"
            );
            Ok(())
        })
        .unwrap();
}

#[test]
fn one_field_of_the_wrong_type_is_named_with_its_value() {
    let (_dir, env) = project();
    let mut runner = TestRunner::new(config(96));
    let cases = (valid_entry(), proptest::sample::select(&TYPED_FIELDS[..]))
        .prop_flat_map(|(entry, field)| (Just(entry), Just(field), wrong_value(field), any::<bool>()));
    runner
        .run(&cases, |(mut entry, field, value, block)| {
            entry.kind_from_env = false;
            let mut document = entry.document();
            document[field] = value.clone();
            let text = render(&Value::Array(vec![document]), block);
            let message = match load_text(&text, &env) {
                Ok(loaded) => return Err(TestCaseError::fail(format!("{text}\nloaded: {loaded:?}"))),
                Err(error) => error.to_string(),
            };
            prop_assert!(message.starts_with("watches.yaml: entry 1"), "{message}");
            prop_assert!(message.contains(&format!("field {field:?}")), "{message}");
            prop_assert!(message.contains(&describe(&value)), "{message}");
            Ok(())
        })
        .unwrap();
}

#[test]
fn unknown_enum_values_and_bad_durations_are_named_with_their_value() {
    let (_dir, env) = project();
    let mut runner = TestRunner::new(config(96));
    let fields = proptest::sample::select(&["hostKeyChecking", "executor", "reconcilePeriod"][..]);
    let cases = (valid_entry(), fields, "[a-zA-Z0-9 .:-]{1,12}", any::<bool>());
    runner
        .run(&cases, |(mut entry, field, value, block)| {
            entry.kind_from_env = false;
            prop_assume!(!["strict", "accept-new", "warm", "cold"].contains(&value.trim()));
            prop_assume!(field != "reconcilePeriod" || go_duration::parse(value.trim()).is_err());
            let mut document = entry.document();
            document[field] = json!(value);
            let text = render(&Value::Array(vec![document]), block);
            let message = load_text(&text, &env).err().map(|error| error.to_string()).unwrap_or_default();
            prop_assert!(message.contains(&format!("field {field:?}")), "{text}: {message}");
            prop_assert!(message.contains(&format!("{value:?}")), "{text}: {message}");
            Ok(())
        })
        .unwrap();
}
