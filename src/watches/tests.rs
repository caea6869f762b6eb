//! Behaviour of loading whole watches files, end to end through `parse` and `load`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::test_support::TempDir;
use super::*;

const DEFAULTS: Defaults = Defaults { max_concurrent_reconciles: 4, ansible_verbosity: 2 };

/// A project directory with `playbook.yml`, `roles/memcached` and `finalize.yml`.
fn project() -> (TempDir, Environment) {
    let dir = TempDir::new();
    dir.file("playbook.yml");
    dir.file("finalize.yml");
    dir.dir("roles/memcached");
    let env = Environment::new(dir.path());
    (dir, env)
}

fn parse_ok(text: &str, env: &Environment) -> Loaded {
    match parse(text, Path::new("watches.yaml"), &DEFAULTS, env) {
        Ok(loaded) => loaded,
        Err(error) => panic!("expected {text:?} to load, got: {error}"),
    }
}

fn parse_err(text: &str, env: &Environment) -> String {
    match parse(text, Path::new("watches.yaml"), &DEFAULTS, env) {
        Ok(loaded) => panic!("expected {text:?} to fail, got {loaded:?}"),
        Err(error) => error.to_string(),
    }
}

fn one(text: &str, env: &Environment) -> Watch {
    let mut loaded = parse_ok(text, env);
    assert_eq!(loaded.watches.len(), 1);
    loaded.watches.remove(0)
}

const MEMCACHED: &str = "- group: cache.example.com\n  version: v1alpha1\n  kind: Memcached\n";

fn memcached(extra: &str) -> String {
    format!("{MEMCACHED}{extra}")
}

#[test]
fn minimal_entry_gets_upstream_defaults() {
    let (dir, env) = project();
    let watch = one(&memcached("  role: memcached\n"), &env);
    assert_eq!(watch.gvk, Gvk::new("cache.example.com", "v1alpha1", "Memcached"));
    assert_eq!(watch.target, Target::Role(dir.path().join("roles/memcached")));
    assert!(watch.vars.is_empty());
    assert_eq!(watch.reconcile_period, None);
    assert!(watch.manage_status);
    assert!(watch.watch_dependent_resources);
    assert!(!watch.watch_cluster_scoped_resources);
    assert!(!watch.watch_annotations_changes);
    assert!(watch.snake_case_parameters);
    assert!(!watch.mark_unsafe);
    assert_eq!(watch.max_runner_artifacts, 20);
    assert!(watch.blacklist.is_empty());
    assert_eq!(watch.selector, Default::default());
    assert_eq!(watch.finalizer, None);
    assert_eq!(watch.max_concurrent_reconciles, 4);
    assert_eq!(watch.ansible_verbosity, 2);
    assert_eq!(watch.extensions, Extensions::default());
}

#[test]
fn every_field_is_read() {
    let (dir, env) = project();
    let watch = one(
        &memcached(
            "  playbook: playbook.yml
  vars: {state: present, meta: '{{ ansible_operator_meta }}'}
  reconcilePeriod: 1h30m
  manageStatus: false
  watchDependentResources: false
  watchClusterScopedResources: true
  watchAnnotationsChanges: true
  snakeCaseParameters: false
  markUnsafe: true
  maxRunnerArtifacts: 5
  blacklist:
    - {group: apps, version: v1, kind: Deployment}
    - {version: v1, kind: ConfigMap}
  selector:
    matchLabels: {tier: cache}
  finalizer:
    name: cache.example.com/finalizer
    playbook: finalize.yml
    vars: {state: absent}
",
        ),
        &env,
    );
    assert_eq!(watch.target, Target::Playbook(dir.path().join("playbook.yml")));
    assert_eq!(
        serde_json::Value::Object(watch.vars),
        json!({"state": "present", "meta": "{{ ansible_operator_meta }}"})
    );
    assert_eq!(watch.reconcile_period, Some(Duration::from_secs(5400)));
    assert!(!watch.manage_status && !watch.watch_dependent_resources && !watch.snake_case_parameters);
    assert!(watch.watch_cluster_scoped_resources && watch.watch_annotations_changes && watch.mark_unsafe);
    assert_eq!(watch.max_runner_artifacts, 5);
    assert_eq!(watch.blacklist, [Gvk::new("apps", "v1", "Deployment"), Gvk::new("", "v1", "ConfigMap")]);
    assert_eq!(watch.selector.match_labels.expect("labels")["tier"], "cache");
    let finalizer = watch.finalizer.expect("finalizer");
    assert_eq!(finalizer.name, "cache.example.com/finalizer");
    assert_eq!(finalizer.target, Some(Target::Playbook(dir.path().join("finalize.yml"))));
    assert_eq!(serde_json::Value::Object(finalizer.vars), json!({"state": "absent"}));
}

#[test]
fn keys_are_matched_case_insensitively_like_upstream() {
    let (_dir, env) = project();
    let text = "- Group: cache.example.com\n  VERSION: v1alpha1\n  Kind: Memcached\n  Role: memcached\n  \
                ManageStatus: false\n  markunsafe: true\n  MaxRunnerArtifacts: 3\n";
    let loaded = parse_ok(text, &env);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let watch = &loaded.watches[0];
    assert!(!watch.manage_status);
    assert!(watch.mark_unsafe);
    assert_eq!(watch.max_runner_artifacts, 3);
}

#[test]
fn yaml_1_1_booleans_are_accepted_for_bool_fields() {
    let (_dir, env) = project();
    let watch = one(
        &memcached(
            "  role: memcached\n  manageStatus: no\n  markUnsafe: yes\n  watchAnnotationsChanges: True\n  snakeCaseParameters: off\n",
        ),
        &env,
    );
    assert!(
        !watch.manage_status
            && watch.mark_unsafe
            && watch.watch_annotations_changes
            && !watch.snake_case_parameters
    );
}

#[test]
fn quoted_string_in_a_bool_field_is_an_error_naming_field_and_value() {
    let (_dir, env) = project();
    let message = parse_err(&memcached("  role: memcached\n  manageStatus: \"maybe\"\n"), &env);
    assert_eq!(
        message,
        "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"manageStatus\": expected a boolean, found \"maybe\""
    );
}

#[test]
fn ready_conditions_that_is_not_a_boolean_is_an_error_naming_the_field_and_value() {
    let (_dir, env) = project();
    let message = parse_err(&memcached("  role: memcached\n  readyConditions: \"on\"\n"), &env);
    assert_eq!(
        message,
        "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"readyConditions\": expected a boolean, found \"on\""
    );
}

#[test]
fn null_fields_count_as_absent() {
    let (_dir, env) = project();
    let watch = one(&memcached("  role: memcached\n  playbook:\n  manageStatus: ~\n  vars:\n"), &env);
    assert!(watch.manage_status);
    assert!(matches!(watch.target, Target::Role(_)));
}

#[test]
fn environment_variables_are_expanded_before_parsing() {
    let (dir, env) = project();
    let env = env
        .with_var("WATCH_VERSION", "v1")
        .with_var("WATCH_PLAYBOOK", dir.path().join("playbook.yml").display().to_string())
        .with_var("WATCH_MATCH_LABEL_VAR_NAME", "app")
        .with_var("WATCH_MATCH_LABEL_VAR_VALUE", "memcached")
        .with_var("WATCH_MATCH_EXPRESSIONS_KEY", "tier");
    // Upstream's testdata/env-vars.yaml, less its label from an unset variable (tested below).
    let text = r#"---
- version: "${WATCH_VERSION}"
  group: "app.example.com"
  kind: "AnsibleSelectorTest"
  playbook: ${WATCH_PLAYBOOK}
  selector:
    matchLabels:
      ${WATCH_MATCH_LABEL_VAR_NAME}: "${WATCH_MATCH_LABEL_VAR_VALUE}"
    matchExpressions:
      - {key: ${WATCH_MATCH_EXPRESSIONS_KEY}, operator: In, values: [a, b]}
"#;
    let watch = one(text, &env);
    assert_eq!(watch.gvk.version, "v1");
    assert_eq!(watch.target, Target::Playbook(dir.path().join("playbook.yml")));
    assert_eq!(watch.selector.match_labels.as_ref().expect("labels")["app"], "memcached");
    assert_eq!(watch.selector.match_expressions.as_ref().expect("expressions")[0].key, "tier");
    let env = env.with_var("WATCH_VERSION", "");
    assert!(parse_err(text, &env).contains("invalid gvk: field \"version\" must not be empty"));
}

#[test]
fn label_from_an_unset_variable_is_an_invalid_selector() {
    // Upstream loads this and then exits at controller setup; we stop at load with the reason.
    let (_dir, env) = project();
    let message =
        parse_err(&memcached("  role: memcached\n  selector:\n    matchLabels: {a: \"${UNSET}\"}\n"), &env);
    assert!(
        message.contains("field \"selector.matchLabels.a\": label value \"${UNSET}\" is invalid"),
        "{message}"
    );
}

#[test]
fn unset_variable_is_kept_literally_in_vars() {
    let (_dir, env) = project();
    let watch = one(&memcached("  role: memcached\n  vars:\n    image: \"$IMAGE\"\n"), &env);
    assert_eq!(watch.vars["image"], json!("${IMAGE}"));
}

#[test]
fn reconcile_period_zero_means_use_the_flag() {
    let (_dir, env) = project();
    assert_eq!(one(&memcached("  role: memcached\n  reconcilePeriod: 0s\n"), &env).reconcile_period, None);
    assert_eq!(one(&memcached("  role: memcached\n  reconcilePeriod: \"0\"\n"), &env).reconcile_period, None);
}

#[test]
fn reconcile_period_must_be_a_go_duration() {
    let (_dir, env) = project();
    let message = parse_err(&memcached("  role: memcached\n  reconcilePeriod: 5 minutes\n"), &env);
    assert!(
        message.starts_with(
            "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"reconcilePeriod\": invalid duration \"5 minutes\""
        ),
        "{message}"
    );
}

#[test]
fn reconcile_period_as_a_bare_number_is_an_error() {
    let (_dir, env) = project();
    let message = parse_err(&memcached("  role: memcached\n  reconcilePeriod: 30\n"), &env);
    assert!(
        message
            .ends_with("field \"reconcilePeriod\": expected a go duration string such as \"30s\", found 30"),
        "{message}"
    );
}

#[test]
fn max_runner_artifacts_zero_means_twenty() {
    let (_dir, env) = project();
    assert_eq!(
        one(&memcached("  role: memcached\n  maxRunnerArtifacts: 0\n"), &env).max_runner_artifacts,
        20
    );
}

#[test]
fn max_runner_artifacts_must_be_a_non_negative_integer() {
    let (_dir, env) = project();
    let message = parse_err(&memcached("  role: memcached\n  maxRunnerArtifacts: -1\n"), &env);
    assert!(
        message.ends_with("field \"maxRunnerArtifacts\": expected a non-negative integer, found -1"),
        "{message}"
    );
}

#[test]
fn unknown_keys_produce_warnings_naming_key_entry_and_gvk() {
    let (_dir, env) = project();
    let loaded = parse_ok(
        &memcached(
            "  role: memcached\n  manageStauts: false\n  finalizer: {name: x, vars: {a: 1}, playbok: p.yml}\n",
        ),
        &env,
    );
    assert_eq!(
        loaded.warnings,
        [
            "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): unknown key \"manageStauts\" ignored",
            "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): unknown key \"finalizer.playbok\" ignored",
        ]
    );
    assert!(loaded.watches[0].manage_status, "the misspelt key must not take effect");
}

#[test]
fn settings_upstream_ignores_in_watches_yaml_warn_with_where_to_set_them() {
    let (_dir, env) = project();
    let loaded = parse_ok(&memcached("  role: memcached\n  maxWorkers: 9\n  ansibleVerbosity: 5\n"), &env);
    assert_eq!(loaded.watches[0].max_concurrent_reconciles, 4);
    assert_eq!(loaded.watches[0].ansible_verbosity, 2);
    assert_eq!(loaded.warnings.len(), 2);
    assert!(loaded.warnings.iter().any(|warning| warning.ends_with(
        "unknown key \"maxWorkers\" ignored; set --max-concurrent-reconciles or MAX_CONCURRENT_RECONCILES_MEMCACHED_CACHE_EXAMPLE_COM instead"
    )));
    assert!(loaded.warnings.iter().any(|warning| warning.ends_with(
        "unknown key \"ansibleVerbosity\" ignored; set --ansible-verbosity or ANSIBLE_VERBOSITY_MEMCACHED_CACHE_EXAMPLE_COM instead"
    )));
}

#[test]
fn extension_keys_are_read_without_warnings() {
    let (dir, env) = project();
    let loaded = parse_ok(
        &memcached(
            "  role: memcached\n  inventory: |\n    all:\n      hosts: {{ spec.hosts }}\n  SSHKeySecret: '{{ spec.keySecret }}'\n  hostKeyChecking: accept-new\n  precheck: {playbook: playbook.yml}\n  executor: cold\n  runHistoryLimit: 3\n  trustCRTemplates: true\n  trustCRVariables: true\n  runTimeout: 15m\n  readyConditions: true\n",
        ),
        &env,
    );
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let extensions = &loaded.watches[0].extensions;
    assert_eq!(extensions.inventory.as_deref(), Some("all:\n  hosts: {{ spec.hosts }}\n"));
    assert_eq!(extensions.ssh_key_secret.as_deref(), Some("{{ spec.keySecret }}"));
    assert_eq!(extensions.host_key_checking, HostKeyChecking::AcceptNew);
    assert_eq!(extensions.precheck, Some(Target::Playbook(dir.path().join("playbook.yml"))));
    assert_eq!(extensions.executor, Some(crate::executor_mode::Executor::Cold));
    assert_eq!(extensions.run_history_limit, Some(3));
    assert_eq!(extensions.trust_cr_templates, Some(true));
    assert_eq!(extensions.trust_cr_variables, Some(true));
    assert_eq!(extensions.run_timeout, Some(Duration::from_secs(900)));
    assert_eq!(extensions.ready_conditions, Some(true));
    assert!(extensions.uses_ssh());
}

#[test]
fn watch_read_resources_is_off_by_default_and_must_be_a_boolean() {
    let (_dir, env) = project();
    assert!(!one(&memcached("  role: memcached\n"), &env).extensions.watch_read_resources);
    let on = one(&memcached("  role: memcached\n  watchReadResources: true\n"), &env);
    assert!(on.extensions.watch_read_resources);
    let message = parse_err(&memcached("  role: memcached\n  watchReadResources: secrets\n"), &env);
    assert_eq!(
        message,
        "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"watchReadResources\": expected a boolean, found \"secrets\""
    );
}

#[test]
fn run_timeout_follows_the_flag_unless_the_watch_sets_one() {
    let (_dir, env) = project();
    let flag = Duration::from_secs(600);
    let absent = one(&memcached("  role: memcached\n"), &env).extensions;
    assert_eq!(absent.run_timeout(flag), Some(flag), "the flag applies");
    assert_eq!(absent.run_timeout(Duration::ZERO), None, "neither sets a limit");
    let own = one(&memcached("  role: memcached\n  runTimeout: 3s\n"), &env).extensions;
    assert_eq!(own.run_timeout(flag), Some(Duration::from_secs(3)), "the watch wins");
    let off = one(&memcached("  role: memcached\n  runTimeout: 0s\n"), &env).extensions;
    assert_eq!(off.run_timeout(flag), None, "0s lifts the flag's limit for this kind");
}

#[test]
fn run_timeout_must_be_a_go_duration_string() {
    let (_dir, env) = project();
    let message = parse_err(&memcached("  role: memcached\n  runTimeout: ten minutes\n"), &env);
    assert_eq!(
        message,
        "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"runTimeout\": invalid duration \"ten minutes\": expected a Go duration such as \"30s\", \"1h30m\" or \"0s\""
    );
    let message = parse_err(&memcached("  role: memcached\n  runTimeout: 600\n"), &env);
    assert!(
        message.ends_with("field \"runTimeout\": expected a go duration string such as \"10m\", found 600"),
        "{message}"
    );
    let message = parse_err(&memcached("  role: memcached\n  runTimeout: -5s\n"), &env);
    assert!(message.contains("field \"runTimeout\": "), "{message}");
}

#[test]
fn an_executor_other_than_warm_or_cold_stops_the_load() {
    let (_dir, env) = project();
    assert_eq!(
        one(&memcached("  role: memcached\n  executor: warm\n"), &env).extensions.executor,
        Some(crate::executor_mode::Executor::Warm)
    );
    assert_eq!(one(&memcached("  role: memcached\n"), &env).extensions.executor, None);
    let err = parse_err(&memcached("  role: memcached\n  executor: hot\n"), &env);
    assert!(err.contains("field \"executor\": \"hot\" is not one of \"warm\", \"cold\""), "{err}");
}

#[test]
fn extensions_default_to_none_and_strict_host_keys() {
    let (_dir, env) = project();
    let watch = one(&memcached("  role: memcached\n  precheck: playbook.yml\n"), &env);
    assert_eq!(watch.extensions.host_key_checking, HostKeyChecking::Strict);
    assert!(!watch.extensions.uses_ssh());
    assert!(matches!(watch.extensions.precheck, Some(Target::Playbook(_))));
}

#[test]
fn a_template_that_does_not_parse_stops_the_load_naming_field_and_line() {
    let (_dir, env) = project();
    let err =
        parse_err(&memcached("  role: memcached\n  inventory: \"all:\\n  hosts: {{ spec.hosts\\n\"\n"), &env);
    assert!(
        err.starts_with(
            "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"inventory\": template line 2: syntax error"
        ),
        "{err}"
    );
}

#[test]
fn host_key_checking_cannot_be_switched_off() {
    let (_dir, env) = project();
    for value in ["false", "no", "'off'"] {
        let err = parse_err(&memcached(&format!("  role: memcached\n  hostKeyChecking: {value}\n")), &env);
        assert!(err.contains("field \"hostKeyChecking\""), "{err}");
    }
    let err = parse_err(&memcached("  role: memcached\n  hostKeyChecking: ignore\n"), &env);
    assert!(
        err.ends_with("\"ignore\" is not one of \"strict\", \"accept-new\" (host keys are always checked)"),
        "{err}"
    );
}

#[test]
fn precheck_paths_are_resolved_like_the_target() {
    let (dir, env) = project();
    let err = parse_err(&memcached("  role: memcached\n  precheck: {playbook: missing.yml}\n"), &env);
    let missing = dir.path().join("missing.yml");
    assert!(
        err.ends_with(&format!("field \"precheck.playbook\": playbook {} was not found", missing.display())),
        "{err}"
    );
    let err = parse_err(&memcached("  role: memcached\n  precheck: {}\n"), &env);
    assert!(
        err.ends_with("field \"precheck\": must be a playbook path or a mapping with playbook or role"),
        "{err}"
    );
    let watch = one(&memcached("  role: memcached\n  precheck: {role: memcached}\n"), &env);
    assert_eq!(watch.extensions.precheck, Some(Target::Role(dir.path().join("roles/memcached"))));
}

#[test]
fn validate_is_resolved_like_precheck_and_defaults_to_fail_within_five_seconds() {
    let (dir, env) = project();
    let watch = one(&memcached("  role: memcached\n  validate: playbook.yml\n"), &env);
    let validate = watch.extensions.validate.expect("a validate");
    assert_eq!(validate.target, Target::Playbook(dir.path().join("playbook.yml")));
    assert_eq!(validate.failure_policy, crate::watches::FailurePolicy::Fail);
    assert_eq!(validate.timeout, std::time::Duration::from_secs(5));
    let watch = one(
        &memcached(
            "  role: memcached\n  validate: {role: memcached}\n  validateFailurePolicy: Ignore\n  validateTimeout: 2500ms\n",
        ),
        &env,
    );
    let validate = watch.extensions.validate.expect("a validate");
    assert_eq!(validate.target, Target::Role(dir.path().join("roles/memcached")));
    assert_eq!(validate.failure_policy, crate::watches::FailurePolicy::Ignore);
    assert_eq!(validate.timeout, std::time::Duration::from_millis(2500));
    assert_eq!(one(&memcached("  role: memcached\n"), &env).extensions.validate, None);
}

#[test]
fn convert_is_resolved_like_validate_and_one_entry_of_a_kind_may_name_it() {
    let (dir, env) = project();
    let watch = one(&memcached("  role: memcached\n  convert: {role: memcached}\n"), &env);
    assert_eq!(watch.extensions.convert, Some(Target::Role(dir.path().join("roles/memcached"))));
    assert_eq!(one(&memcached("  role: memcached\n"), &env).extensions.convert, None);
    let two = format!(
        "{}- {{group: cache.example.com, version: v1beta1, kind: Memcached, role: memcached, convert: playbook.yml}}\n",
        memcached("  role: memcached\n  convert: playbook.yml\n")
    );
    let err = parse_err(&two, &env);
    assert!(
        err.ends_with(
            "field \"convert\": entry 1 already names the conversion of cache.example.com/Memcached"
        ),
        "{err}"
    );
    let err = parse_err(&memcached("  role: memcached\n  convert: {playbook: missing.yml}\n"), &env);
    assert!(err.contains("field \"convert.playbook\": playbook"), "{err}");
}

#[test]
fn a_bad_validate_key_stops_the_load_naming_field_and_value() {
    let (dir, env) = project();
    let err = parse_err(&memcached("  role: memcached\n  validate: {playbook: missing.yml}\n"), &env);
    let missing = dir.path().join("missing.yml");
    assert!(
        err.ends_with(&format!("field \"validate.playbook\": playbook {} was not found", missing.display())),
        "{err}"
    );
    let err = parse_err(&memcached("  role: memcached\n  validate: {}\n"), &env);
    assert!(
        err.ends_with("field \"validate\": must be a playbook path or a mapping with playbook or role"),
        "{err}"
    );
    let err = parse_err(
        &memcached("  role: memcached\n  validate: playbook.yml\n  validateFailurePolicy: fail\n"),
        &env,
    );
    assert!(
        err.ends_with("field \"validateFailurePolicy\": \"fail\" is not one of \"Fail\", \"Ignore\""),
        "{err}"
    );
    let err =
        parse_err(&memcached("  role: memcached\n  validate: playbook.yml\n  validateTimeout: 45s\n"), &env);
    assert!(
        err.starts_with("watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"validateTimeout\": \"45s\""),
        "{err}"
    );
}

#[test]
fn top_level_must_be_a_list() {
    let (_dir, env) = project();
    assert_eq!(
        parse_err("group: a\nversion: v1\nkind: B\n", &env),
        "watches.yaml: the top level must be a list of watches, found a mapping"
    );
}

#[test]
fn empty_file_loads_no_watches() {
    let (_dir, env) = project();
    assert!(parse_ok("", &env).watches.is_empty());
    assert!(parse_ok("---\n# nothing yet\n", &env).watches.is_empty());
}

#[test]
fn invalid_yaml_is_an_error_with_the_position() {
    let (_dir, env) = project();
    let error = parse("- group: [\n", Path::new("watches.yaml"), &DEFAULTS, &env).expect_err("invalid yaml");
    assert_eq!(error.to_string(), "watches.yaml: invalid yaml");
    let source = std::error::Error::source(&error).expect("parser error").to_string();
    assert!(source.contains("line 1"), "{source}");
}

#[test]
fn repeated_key_keeps_the_last_value() {
    let (_dir, env) = project();
    assert!(
        !one(&memcached("  role: memcached\n  manageStatus: true\n  manageStatus: false\n"), &env)
            .manage_status
    );
}

#[test]
fn entry_must_be_a_mapping() {
    let (_dir, env) = project();
    assert_eq!(
        parse_err("- just a string\n", &env),
        "watches.yaml: entry 1: a watch must be a mapping, found \"just a string\""
    );
}

#[test]
fn version_and_kind_must_not_be_empty() {
    let (_dir, env) = project();
    assert_eq!(
        parse_err("- group: cache.example.com\n  kind: Memcached\n  role: memcached\n", &env),
        "watches.yaml: entry 1 (cache.example.com/, Kind=Memcached): invalid gvk: field \"version\" must not be empty"
    );
    assert_eq!(
        parse_err("- group: cache.example.com\n  version: v1\n  kind: ''\n  role: memcached\n", &env),
        "watches.yaml: entry 1 (cache.example.com/v1, Kind=): invalid gvk: field \"kind\" must not be empty"
    );
}

#[test]
fn gvk_fields_must_be_strings() {
    let (_dir, env) = project();
    assert_eq!(
        parse_err("- version: 1\n  kind: Memcached\n", &env),
        "watches.yaml: entry 1: field \"version\": expected a string, found 1"
    );
}

#[test]
fn core_group_may_be_omitted() {
    let (_dir, env) = project();
    let watch = one("- version: v1\n  kind: Secret\n  role: memcached\n", &env);
    assert_eq!(watch.gvk.to_string(), "/v1, Kind=Secret");
}

#[test]
fn duplicate_gvk_is_an_error_naming_both_entries() {
    let (_dir, env) = project();
    let text = format!("{}{}", memcached("  role: memcached\n"), memcached("  playbook: playbook.yml\n"));
    assert_eq!(
        parse_err(&text, &env),
        "watches.yaml: entry 2 (cache.example.com/v1alpha1, Kind=Memcached): duplicate gvk: entry 1 already watches it"
    );
}

#[test]
fn same_kind_in_another_version_is_not_a_duplicate() {
    let (_dir, env) = project();
    let text = format!(
        "{}- group: cache.example.com\n  version: v1beta1\n  kind: Memcached\n  role: memcached\n",
        memcached("  role: memcached\n")
    );
    assert_eq!(parse_ok(&text, &env).watches.len(), 2);
}

#[test]
fn missing_playbook_is_an_error_with_its_absolute_path() {
    let (dir, env) = project();
    let message = parse_err(&memcached("  playbook: missing.yml\n"), &env);
    let expected = format!(
        "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"playbook\": playbook {} was not found",
        dir.path().join("missing.yml").display()
    );
    assert_eq!(message, expected);
}

#[test]
fn missing_role_is_an_error_listing_where_it_was_looked_for() {
    let (dir, env) = project();
    let message = parse_err(&memcached("  role: nginx\n"), &env);
    let expected = format!(
        "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"role\": role \"nginx\" was not found (looked in {})",
        dir.path().join("roles/nginx").display()
    );
    assert_eq!(message, expected);
}

#[test]
fn entry_without_playbook_or_role_is_an_error() {
    let (_dir, env) = project();
    assert_eq!(
        parse_err(&memcached("  vars: {a: 1}\n"), &env),
        "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): must specify role or playbook"
    );
}

#[test]
fn role_is_resolved_through_ansible_roles_path() {
    let (dir, env) = project();
    dir.dir("shared/roles/nginx");
    let env = env.with_var("ANSIBLE_ROLES_PATH", dir.path().join("shared").display().to_string());
    let watch = one(&memcached("  role: nginx\n"), &env);
    assert_eq!(watch.target, Target::Role(dir.path().join("shared/roles/nginx")));
}

#[test]
fn invalid_selector_is_an_error_naming_the_field() {
    let (_dir, env) = project();
    let message = parse_err(
        &memcached(
            "  role: memcached\n  selector:\n    matchExpressions:\n      - {key: tier, operator: Equals, values: [a]}\n",
        ),
        &env,
    );
    assert_eq!(
        message,
        "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"selector.matchExpressions[0].operator\": \
         \"Equals\" is not a valid label selector operator (use In, NotIn, Exists or DoesNotExist)"
    );
}

#[test]
fn finalizer_must_have_a_name() {
    let (_dir, env) = project();
    assert_eq!(
        parse_err(&memcached("  role: memcached\n  finalizer:\n    vars: {state: absent}\n"), &env),
        "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"finalizer.name\": finalizer must have a name"
    );
}

#[test]
fn finalizer_needs_a_playbook_a_role_or_vars() {
    let (_dir, env) = project();
    for block in ["{name: x}", "{name: x, vars: {}}"] {
        assert_eq!(
            parse_err(&memcached(&format!("  role: memcached\n  finalizer: {block}\n")), &env),
            "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"finalizer\": \
             finalizer \"x\" must specify role, playbook or non-empty vars"
        );
    }
}

#[test]
fn finalizer_with_only_vars_reruns_the_watch_target() {
    let (_dir, env) = project();
    let finalizer =
        one(&memcached("  role: memcached\n  finalizer: {name: x, vars: {state: absent}}\n"), &env)
            .finalizer
            .expect("finalizer");
    assert_eq!(finalizer.target, None);
    assert_eq!(finalizer.vars["state"], json!("absent"));
}

#[test]
fn finalizer_role_is_resolved_like_the_watch_role() {
    let (dir, env) = project();
    dir.dir("roles/cleanup");
    let finalizer =
        one(&memcached("  playbook: playbook.yml\n  finalizer: {name: x, role: cleanup}\n"), &env)
            .finalizer
            .expect("finalizer");
    assert_eq!(finalizer.target, Some(Target::Role(dir.path().join("roles/cleanup"))));
}

#[test]
fn missing_finalizer_playbook_without_vars_is_an_error() {
    let (dir, env) = project();
    let message =
        parse_err(&memcached("  role: memcached\n  finalizer: {name: x, playbook: gone.yml}\n"), &env);
    assert!(
        message.ends_with(&format!(
            "field \"finalizer.playbook\": playbook {} was not found",
            dir.path().join("gone.yml").display()
        )),
        "{message}"
    );
}

#[test]
fn missing_finalizer_role_with_vars_loads_with_a_warning_as_upstream() {
    let (dir, env) = project();
    let loaded = parse_ok(
        &memcached("  role: memcached\n  finalizer: {name: x, role: gone, vars: {state: absent}}\n"),
        &env,
    );
    let finalizer = loaded.watches[0].finalizer.clone().expect("finalizer");
    assert_eq!(finalizer.target, Some(Target::Role(dir.path().join("roles/gone"))));
    let expected = format!(
        "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"finalizer.role\": role \"gone\" \
         was not found (looked in {}); finalizer \"x\" will fail until it exists",
        dir.path().join("roles/gone").display()
    );
    assert_eq!(loaded.warnings, [expected]);
}

#[test]
fn blacklist_items_must_be_mappings() {
    let (_dir, env) = project();
    assert!(
        parse_err(&memcached("  role: memcached\n  blacklist: [Deployment]\n"), &env)
            .ends_with("field \"blacklist[0]\": expected a mapping, found \"Deployment\"")
    );
}

#[test]
fn per_kind_env_overrides_apply_and_their_warnings_name_the_entry() {
    let (_dir, env) = project();
    let env = env
        .with_var("WORKER_MEMCACHED_CACHE_EXAMPLE_COM", "6")
        .with_var("ANSIBLE_VERBOSITY_MEMCACHED_CACHE_EXAMPLE_COM", "5");
    let loaded = parse_ok(&memcached("  role: memcached\n"), &env);
    assert_eq!(loaded.watches[0].max_concurrent_reconciles, 6);
    assert_eq!(loaded.watches[0].ansible_verbosity, 5);
    assert_eq!(
        loaded.warnings,
        ["watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): environment variable \
          WORKER_MEMCACHED_CACHE_EXAMPLE_COM is deprecated, use MAX_CONCURRENT_RECONCILES_MEMCACHED_CACHE_EXAMPLE_COM instead"]
    );
}

#[test]
fn watches_keep_file_order() {
    let (_dir, env) = project();
    let text = "- {version: v1, kind: B, role: memcached}\n- {version: v1, kind: A, role: memcached}\n";
    let kinds: Vec<String> = parse_ok(text, &env).watches.into_iter().map(|watch| watch.gvk.kind).collect();
    assert_eq!(kinds, ["B", "A"]);
}

#[test]
fn load_reads_the_file_and_names_it_in_errors() {
    let (dir, env) = project();
    dir.write("watches.yaml", &memcached("  role: memcached\n"));
    let loaded = load(&dir.path().join("watches.yaml"), &DEFAULTS, &env).expect("loads");
    assert_eq!(loaded.watches.len(), 1);

    let missing: PathBuf = dir.path().join("nope.yaml");
    let error = load(&missing, &DEFAULTS, &env).expect_err("missing file");
    assert_eq!(error.to_string(), format!("{}: cannot read the watches file", missing.display()));
    assert!(matches!(error, Error::Read { .. }));
}

#[test]
fn error_is_send_and_sync_for_anyhow() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Error>();
}

#[test]
fn the_sample_watches_keep_commands_and_paths_in_watch_vars_shared_through_a_merge_key() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let env = Environment::new(repo);
    let loaded = load(&repo.join("watches.yaml"), &DEFAULTS, &env).expect("the sample watches.yaml loads");
    let vars = |kind: &str| {
        let watch = loaded.watches.iter().find(|w| w.gvk.kind == kind).expect("a watch of the kind");
        watch.vars.clone()
    };
    let (cluster, restore) = (vars("EtcdCluster"), vars("EtcdRestore"));
    assert!(!cluster.contains_key("<<"), "the merge key is resolved: {:?}", cluster.keys());
    for name in ["etcd_dir", "release_dir", "etcdctl", "running_check", "stop_member", "start_member"] {
        assert!(cluster.contains_key(name), "EtcdCluster: {name}");
        assert_eq!(restore.get(name), cluster.get(name), "EtcdRestore shares {name}");
    }
    assert!(cluster.contains_key("cluster_id"));
    assert!(!restore.contains_key("cluster_id"), "the restore sets cluster_id itself (set_fact)");
    assert!(vars("EtcdBackup").contains_key("backup_dir"));
    for name in ["kube_dir", "kube_stop", "etcd_dir", "kube_releases_dir", "etcd_releases_dir", "cluster_id"]
    {
        assert!(vars("KubernetesCluster").contains_key(name), "KubernetesCluster: {name}");
    }
}

#[test]
fn watch_filters_load_as_written() {
    let (_dir, env) = project();
    let watch = one(
        &memcached(
            "  role: memcached\n  watchFields: [.spec, \"$.metadata.labels\"]\n  fieldSelector: metadata.name!=skip,status.phase==Ready\n",
        ),
        &env,
    );
    assert_eq!(
        watch.extensions.watch_fields,
        Some(WatchFields::from_queries(&[".spec", "$.metadata.labels"]))
    );
    assert_eq!(watch.extensions.field_selector.as_deref(), Some("metadata.name!=skip,status.phase==Ready"));
    let plain = one(&memcached("  role: memcached\n"), &env);
    assert_eq!((plain.extensions.watch_fields, plain.extensions.field_selector), (None, None));
}

#[test]
fn bad_watch_filters_name_the_field_and_value() {
    let (_dir, env) = project();
    let prefix = "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): ";
    let cases = [
        ("  watchFields: []\n", "field \"watchFields\": []: list at least one field"),
        (
            "  watchFields: [$.spec, \"$.spec[\"]\n",
            "field \"watchFields[1]\": \"$.spec[\": not a JSONPath query",
        ),
        ("  watchFields: [$.spec, 3]\n", "field \"watchFields[1]\": expected a string, found 3"),
        ("  watchFields: $.spec\n", "field \"watchFields\": expected a list, found \"$.spec\""),
        ("  fieldSelector: metadata.name\n", "field \"fieldSelector\": \"metadata.name\": expected terms"),
        ("  fieldSelector: \"a=b,=c\"\n", "field \"fieldSelector\": \"a=b,=c\": expected terms"),
        ("  fieldSelector: \" \"\n", "field \"fieldSelector\": \" \": expected terms"),
    ];
    for (field, expected) in cases {
        let err = parse_err(&memcached(&format!("  role: memcached\n{field}")), &env);
        assert!(err.starts_with(&format!("{prefix}{expected}")), "{field}: {err}");
    }
    for accepted in ["a=", "a==b", "a!=b", "metadata.namespace!=kube-system,metadata.name=x"] {
        let watch = one(&memcached(&format!("  role: memcached\n  fieldSelector: \"{accepted}\"\n")), &env);
        assert_eq!(watch.extensions.field_selector.as_deref(), Some(accepted));
    }
}

#[test]
fn status_progress_is_off_by_default_and_must_be_a_boolean() {
    let (_dir, env) = project();
    assert!(!one(&memcached("  role: memcached\n"), &env).extensions.status_progress);
    assert!(one(&memcached("  role: memcached\n  statusProgress: yes\n"), &env).extensions.status_progress);
    let message = parse_err(&memcached("  role: memcached\n  statusProgress: often\n"), &env);
    assert_eq!(
        message,
        "watches.yaml: entry 1 (cache.example.com/v1alpha1, Kind=Memcached): field \"statusProgress\": expected a boolean, found \"often\""
    );
}
