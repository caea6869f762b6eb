//! This project's watch keys (`inventory`, `sshKeySecret`, `hostKeyChecking`, `precheck`,
//! `executor`, `runHistoryLimit`, `trustCRTemplates`, `trustCRVariables`, `runTimeout`,
//! `readyConditions`, `watchReadResources`, `validate`, `validateFailurePolicy`, `validateTimeout`,
//! `convert`, `permissions`, `watchFields`, `fieldSelector`, `statusProgress`): read,
//! type-checked and, for templates, parsed at load so a typo stops start-up.

use std::time::Duration;

use serde_json::Value;

use super::error::{EntryRef, Error};
use super::fields::Fields;
use super::paths;
use super::{Environment, Extensions, FailurePolicy, HostKeyChecking, Target, Validate};
use crate::executor_mode::Executor;
use crate::{go_duration, template};

/// Keys this project adds beyond upstream's.
pub(super) const KEYS: [&str; 19] = [
    "inventory",
    "sshKeySecret",
    "hostKeyChecking",
    "precheck",
    "executor",
    "runHistoryLimit",
    "trustCRTemplates",
    "trustCRVariables",
    "runTimeout",
    "readyConditions",
    "watchReadResources",
    "validate",
    "validateFailurePolicy",
    "validateTimeout",
    "convert",
    "permissions",
    "watchFields",
    "fieldSelector",
    "statusProgress",
];

/// `validateTimeout` when absent.
pub const DEFAULT_VALIDATE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest `validateTimeout`: the API server waits at most 30s for a webhook.
pub const MAX_VALIDATE_TIMEOUT: Duration = Duration::from_secs(30);

const TARGET_KEYS: [&str; 2] = ["playbook", "role"];

/// Reads the extension keys of one entry; unknown keys inside `precheck` go to `unknown`.
pub(super) fn read(
    fields: &mut Fields,
    at: &EntryRef,
    env: &Environment,
    unknown: &mut Vec<String>,
) -> Result<Extensions, Error> {
    let mut template_field = |key: &'static str| -> Result<Option<String>, Error> {
        let Some(source) = fields.string(key).map_err(|e| e.at(at))? else {
            return Ok(None);
        };
        template::check(key, &source).map_err(|template| Error::Template { at: at.boxed(), template })?;
        Ok(Some(source))
    };
    let inventory = template_field("inventory")?;
    let ssh_key_secret = template_field("sshKeySecret")?;
    let host_key_checking = match fields.string("hostKeyChecking").map_err(|e| e.at(at))?.as_deref() {
        None | Some("strict") => HostKeyChecking::Strict,
        Some("accept-new") => HostKeyChecking::AcceptNew,
        Some(other) => return Err(Error::HostKeyChecking { at: at.boxed(), value: other.to_string() }),
    };
    let precheck = target_key(fields, "precheck", at, env, unknown)?;
    let validate = validate(fields, at, env, unknown)?;
    let convert = target_key(fields, "convert", at, env, unknown)?;
    let executor = match fields.string("executor").map_err(|e| e.at(at))?.as_deref() {
        None => None,
        Some("warm") => Some(Executor::Warm),
        Some("cold") => Some(Executor::Cold),
        Some(other) => return Err(Error::Executor { at: at.boxed(), value: other.to_string() }),
    };
    let run_history_limit = fields.count("runHistoryLimit").map_err(|e| e.at(at))?.map(|n| n as usize);
    let trust_cr_templates = fields.boolean("trustCRTemplates").map_err(|e| e.at(at))?;
    let trust_cr_variables = fields.boolean("trustCRVariables").map_err(|e| e.at(at))?;
    let run_timeout = run_timeout(fields, at)?;
    let ready_conditions = fields.boolean("readyConditions").map_err(|e| e.at(at))?;
    let watch_read_resources = fields.boolean("watchReadResources").map_err(|e| e.at(at))?.unwrap_or(false);
    let permissions = super::permissions::read(fields, at)?;
    let watch_fields = super::filters::watch_fields(fields, at)?;
    let field_selector = super::filters::field_selector(fields, at)?;
    let status_progress = fields.boolean("statusProgress").map_err(|e| e.at(at))?.unwrap_or(false);
    Ok(Extensions {
        inventory,
        ssh_key_secret,
        host_key_checking,
        precheck,
        validate,
        convert,
        executor,
        run_history_limit,
        trust_cr_templates,
        trust_cr_variables,
        run_timeout,
        ready_conditions,
        watch_read_resources,
        permissions,
        watch_fields,
        field_selector,
        status_progress,
    })
}

/// A key naming a playbook or role like `precheck`: a playbook path, or `{playbook: ...}` /
/// `{role: ...}` resolved as the watch's own target is.
fn target_key(
    fields: &mut Fields,
    key: &'static str,
    at: &EntryRef,
    env: &Environment,
    unknown: &mut Vec<String>,
) -> Result<Option<Target>, Error> {
    let names = match key {
        "validate" => ("validate.playbook", "validate.role"),
        "convert" => ("convert.playbook", "convert.role"),
        _ => ("precheck.playbook", "precheck.role"),
    };
    match fields.raw(key) {
        None => Ok(None),
        Some(Value::String(playbook)) => Some(resolve(&playbook, "", (key, key), at, env)).transpose(),
        Some(Value::Object(map)) => {
            let (mut target, extra) = Fields::split(map, &TARGET_KEYS, &format!("{key}."));
            unknown.extend(extra);
            let playbook = target.string("playbook").map_err(|e| e.at(at))?.unwrap_or_default();
            let role = target.string("role").map_err(|e| e.at(at))?.unwrap_or_default();
            Some(resolve(&playbook, &role, names, at, env)).transpose()
        }
        Some(other) => {
            Err(fields.mismatch(key, "a playbook path or {playbook: ...} / {role: ...}", &other).at(at))
        }
    }
}

/// `validate` with `validateFailurePolicy` (default `Fail`) and `validateTimeout` (default 5s).
fn validate(
    fields: &mut Fields,
    at: &EntryRef,
    env: &Environment,
    unknown: &mut Vec<String>,
) -> Result<Option<Validate>, Error> {
    let target = target_key(fields, "validate", at, env, unknown)?;
    let failure_policy = match fields.string("validateFailurePolicy").map_err(|e| e.at(at))?.as_deref() {
        None | Some("Fail") => FailurePolicy::Fail,
        Some("Ignore") => FailurePolicy::Ignore,
        Some(other) => return Err(Error::FailurePolicy { at: at.boxed(), value: other.to_string() }),
    };
    let timeout = match fields.raw("validateTimeout") {
        None => DEFAULT_VALIDATE_TIMEOUT,
        Some(Value::String(text)) => {
            let bad = |reason: String| Error::ValidateTimeout { at: at.boxed(), reason };
            let timeout = go_duration::parse(&text).map_err(|e| bad(e.to_string()))?;
            if timeout.is_zero() || timeout > MAX_VALIDATE_TIMEOUT {
                return Err(bad(format!(
                    "{text:?} is not between 1ms and 30s (the API server waits at most 30s)"
                )));
            }
            timeout
        }
        Some(other) => {
            return Err(fields
                .mismatch("validateTimeout", "a go duration string such as \"5s\"", &other)
                .at(at));
        }
    };
    Ok(target.map(|target| Validate { target, failure_policy, timeout }))
}

/// `runTimeout`: a Go duration string; `0s` means no limit for this kind, whatever the flag says.
fn run_timeout(fields: &mut Fields, at: &EntryRef) -> Result<Option<Duration>, Error> {
    match fields.raw("runTimeout") {
        None => Ok(None),
        Some(Value::String(text)) => {
            go_duration::parse(&text).map(Some).map_err(|reason| Error::RunTimeout { at: at.boxed(), reason })
        }
        Some(other) => {
            Err(fields.mismatch("runTimeout", "a go duration string such as \"10m\"", &other).at(at))
        }
    }
}

fn resolve(
    playbook: &str,
    role: &str,
    field_names: (&'static str, &'static str),
    at: &EntryRef,
    env: &Environment,
) -> Result<super::Target, Error> {
    paths::resolve(playbook, role, env).map_err(|unresolved| match unresolved {
        paths::Unresolved::Neither => Error::PrecheckTarget {
            at: at.boxed(),
            field: field_names.0.split('.').next().unwrap_or_default(),
        },
        unresolved => unresolved.into_error(at, field_names),
    })
}
