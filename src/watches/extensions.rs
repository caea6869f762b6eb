//! This project's watch keys (`inventory`, `sshKeySecret`, `hostKeyChecking`, `precheck`,
//! `executor`, `runHistoryLimit`, `trustCRTemplates`, `trustCRVariables`, `runTimeout`,
//! `readyConditions`, `watchReadResources`): read,
//! type-checked and, for templates, parsed at load so a typo stops start-up.

use std::time::Duration;

use serde_json::Value;

use super::error::{EntryRef, Error};
use super::fields::Fields;
use super::paths;
use super::{Environment, Extensions, HostKeyChecking};
use crate::executor_mode::Executor;
use crate::{go_duration, template};

/// Keys this project adds beyond upstream's.
pub(super) const KEYS: [&str; 11] = [
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
];

const PRECHECK_KEYS: [&str; 2] = ["playbook", "role"];

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
    let precheck = match fields.raw("precheck") {
        None => None,
        Some(Value::String(playbook)) => Some(resolve(&playbook, "", ("precheck", "precheck"), at, env)?),
        Some(Value::Object(map)) => {
            let (mut precheck, extra) = Fields::split(map, &PRECHECK_KEYS, "precheck.");
            unknown.extend(extra);
            let playbook = precheck.string("playbook").map_err(|e| e.at(at))?.unwrap_or_default();
            let role = precheck.string("role").map_err(|e| e.at(at))?.unwrap_or_default();
            Some(resolve(&playbook, &role, ("precheck.playbook", "precheck.role"), at, env)?)
        }
        Some(other) => {
            return Err(fields
                .mismatch("precheck", "a playbook path or {playbook: ...} / {role: ...}", &other)
                .at(at));
        }
    };
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
    Ok(Extensions {
        inventory,
        ssh_key_secret,
        host_key_checking,
        precheck,
        executor,
        run_history_limit,
        trust_cr_templates,
        trust_cr_variables,
        run_timeout,
        ready_conditions,
        watch_read_resources,
    })
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
        paths::Unresolved::Neither => Error::PrecheckTarget { at: at.boxed() },
        unresolved => unresolved.into_error(at, field_names),
    })
}
