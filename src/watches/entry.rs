//! Turning one entry of the watches list into a [`Watch`]: fields, defaults, targets, overrides.

use std::path::Path;

use serde_json::{Map, Value};

use super::error::{EntryRef, Error};
use super::fields::{Fields, describe};
use super::paths::{self, Unresolved};
use super::{Defaults, Environment, Finalizer, Gvk, Target, Watch, extensions, overrides, selector};
use crate::go_duration;

/// Upstream's keys: the Go field names, which `encoding/json` matches case-insensitively.
const UPSTREAM_KEYS: [&str; 17] = [
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
    "watchClusterScopedResources",
    "snakeCaseParameters",
    "watchAnnotationsChanges",
    "markUnsafe",
    "blacklist",
    "finalizer",
    "selector",
];

const FINALIZER_KEYS: [&str; 4] = ["name", "playbook", "role", "vars"];
const GVK_KEYS: [&str; 3] = ["group", "version", "kind"];

/// Upstream's `maxRunnerArtifacts` default, also used for an explicit 0.
const DEFAULT_MAX_RUNNER_ARTIFACTS: u32 = 20;

/// An entry whose GVK has been read and checked; the rest is read by [`Entry::into_watch`].
pub(super) struct Entry {
    at: EntryRef,
    gvk: Gvk,
    fields: Fields,
    unknown: Vec<String>,
}

/// Every key an entry may have: upstream's and this project's.
pub(super) fn known_keys() -> Vec<&'static str> {
    UPSTREAM_KEYS.iter().chain(&extensions::KEYS).copied().collect()
}

/// Reads the GVK of entry `number` (counted from 1) and checks that version and kind are set.
pub(super) fn read(file: &Path, number: usize, value: Value) -> Result<Entry, Error> {
    let mut at = EntryRef { file: file.to_path_buf(), number, gvk: None };
    let Value::Object(map) = value else {
        return Err(Error::NotAMapping { at: Box::new(at), found: describe(&value) });
    };
    let (mut fields, unknown) = Fields::split(map, &known_keys(), "");
    let gvk = read_gvk(&mut fields).map_err(|e| e.at(&at))?;
    at.gvk = Some(gvk.clone());
    if gvk.version.is_empty() {
        return Err(Error::VersionEmpty { at: Box::new(at) });
    }
    if gvk.kind.is_empty() {
        return Err(Error::KindEmpty { at: Box::new(at) });
    }
    Ok(Entry { at, gvk, fields, unknown })
}

fn read_gvk(fields: &mut Fields) -> Result<Gvk, super::fields::TypeMismatch> {
    Ok(Gvk {
        group: fields.string("group")?.unwrap_or_default(),
        version: fields.string("version")?.unwrap_or_default(),
        kind: fields.string("kind")?.unwrap_or_default(),
    })
}

impl Entry {
    /// Where this entry is, with its GVK.
    pub(super) fn at(&self) -> &EntryRef {
        &self.at
    }

    /// The entry's GVK.
    pub(super) fn gvk(&self) -> &Gvk {
        &self.gvk
    }

    /// Reads the remaining fields, applies upstream's defaults, resolves the playbook/role paths and
    /// the per-kind env overrides. Returns the watch and its warnings.
    pub(super) fn into_watch(
        self,
        defaults: &Defaults,
        env: &Environment,
    ) -> Result<(Watch, Vec<String>), Error> {
        let Entry { at, gvk, mut fields, mut unknown } = self;
        let mismatch = |e: super::fields::TypeMismatch| e.at(&at);

        let playbook = fields.string("playbook").map_err(mismatch)?.unwrap_or_default();
        let role = fields.string("role").map_err(mismatch)?.unwrap_or_default();
        let vars = fields.mapping("vars").map_err(mismatch)?.unwrap_or_default();
        let max_runner_artifacts = match fields.count("maxRunnerArtifacts").map_err(mismatch)? {
            None | Some(0) => DEFAULT_MAX_RUNNER_ARTIFACTS,
            Some(count) => count,
        };
        let reconcile_period = reconcile_period(&mut fields, &at)?;
        let mut flag = |key: &str, default: bool| fields.boolean(key).map(|value| value.unwrap_or(default));
        let manage_status = flag("manageStatus", true).map_err(mismatch)?;
        let watch_dependent_resources = flag("watchDependentResources", true).map_err(mismatch)?;
        let watch_cluster_scoped_resources = flag("watchClusterScopedResources", false).map_err(mismatch)?;
        let snake_case_parameters = flag("snakeCaseParameters", true).map_err(mismatch)?;
        let watch_annotations_changes = flag("watchAnnotationsChanges", false).map_err(mismatch)?;
        let mark_unsafe = flag("markUnsafe", false).map_err(mismatch)?;
        let blacklist = blacklist(&mut fields, &at, &mut unknown)?;
        let selector = match fields.mapping("selector").map_err(mismatch)? {
            Some(map) => selector::parse(map, &at, &mut unknown)?,
            None => Default::default(),
        };
        let finalizer_map = fields.mapping("finalizer").map_err(mismatch)?;
        let extensions = extensions::read(&mut fields, &at, env, &mut unknown)?;

        let target = paths::resolve(&playbook, &role, env)
            .map_err(|unresolved| unresolved.into_error(&at, ("playbook", "role")))?;
        let mut finalizer_warnings = Vec::new();
        let finalizer = match finalizer_map {
            Some(map) => Some(finalizer(map, &at, env, &mut unknown, &mut finalizer_warnings)?),
            None => None,
        };

        let workers = overrides::max_concurrent_reconciles(&gvk, defaults.max_concurrent_reconciles, env);
        let verbosity = overrides::ansible_verbosity(&gvk, defaults.ansible_verbosity, env);

        let mut warnings: Vec<String> = unknown.iter().map(|key| unknown_key(&at, &gvk, key)).collect();
        warnings.extend(finalizer_warnings);
        let env_notes = workers.warnings.into_iter().chain(verbosity.warnings);
        warnings.extend(env_notes.map(|note| format!("{at}: {note}")));
        let watch = Watch {
            gvk,
            target,
            vars,
            reconcile_period,
            manage_status,
            watch_dependent_resources,
            watch_cluster_scoped_resources,
            watch_annotations_changes,
            snake_case_parameters,
            mark_unsafe,
            max_runner_artifacts,
            blacklist,
            selector,
            finalizer,
            max_concurrent_reconciles: workers.value,
            ansible_verbosity: verbosity.value,
            extensions,
        };
        Ok((watch, warnings))
    }
}

/// `reconcilePeriod`: a Go duration string; zero means "use the flag", as upstream.
fn reconcile_period(fields: &mut Fields, at: &EntryRef) -> Result<Option<std::time::Duration>, Error> {
    match fields.raw("reconcilePeriod") {
        None => Ok(None),
        Some(Value::String(text)) => match go_duration::parse(&text) {
            Ok(period) if period.is_zero() => Ok(None),
            Ok(period) => Ok(Some(period)),
            Err(reason) => Err(Error::ReconcilePeriod { at: at.boxed(), reason }),
        },
        // metav1.Duration only unmarshals strings, so a bare number fails upstream too.
        Some(other) => {
            Err(fields.mismatch("reconcilePeriod", "a go duration string such as \"30s\"", &other).at(at))
        }
    }
}

fn blacklist(fields: &mut Fields, at: &EntryRef, unknown: &mut Vec<String>) -> Result<Vec<Gvk>, Error> {
    let Some(items) = fields.list("blacklist").map_err(|e| e.at(at))? else {
        return Ok(Vec::new());
    };
    let mut blacklist = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let prefix = format!("blacklist[{index}].");
        let mut item_fields = Fields::split_item(item, &GVK_KEYS, &prefix, at, unknown)?;
        blacklist.push(read_gvk(&mut item_fields).map_err(|e| e.at(at))?);
    }
    Ok(blacklist)
}

/// The `finalizer` block, checked as upstream's `Validate`: a name is required, and so is a playbook,
/// a role or non-empty vars. A playbook or role that is missing is only an error without vars (as
/// upstream); with vars it is kept, so deletions fail visibly, and a warning is added to `warnings`.
fn finalizer(
    map: Map<String, Value>,
    at: &EntryRef,
    env: &Environment,
    unknown: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<Finalizer, Error> {
    let (mut fields, extra) = Fields::split(map, &FINALIZER_KEYS, "finalizer.");
    unknown.extend(extra);
    let name = fields.string("name").map_err(|e| e.at(at))?.unwrap_or_default();
    let playbook = fields.string("playbook").map_err(|e| e.at(at))?.unwrap_or_default();
    let role = fields.string("role").map_err(|e| e.at(at))?.unwrap_or_default();
    let vars = fields.mapping("vars").map_err(|e| e.at(at))?.unwrap_or_default();
    if name.is_empty() {
        return Err(Error::FinalizerName { at: at.boxed() });
    }
    let target = match paths::resolve(&playbook, &role, env) {
        Ok(target) => Some(target),
        Err(Unresolved::Neither) if vars.is_empty() => {
            return Err(Error::FinalizerAction { at: at.boxed(), name });
        }
        Err(Unresolved::Neither) => None,
        Err(unresolved) if vars.is_empty() => return Err(unresolved.into_error(at, FINALIZER_FIELDS)),
        Err(unresolved) => {
            let kept = match &unresolved {
                Unresolved::PlaybookNotFound(path) => Some(Target::Playbook(path.clone())),
                Unresolved::RoleNotFound { tried, .. } => tried.last().cloned().map(Target::Role),
                Unresolved::Neither => None,
            };
            let error = unresolved.into_error(at, FINALIZER_FIELDS);
            warnings.push(format!("{error}; finalizer {name:?} will fail until it exists"));
            kept
        }
    };
    Ok(Finalizer { name, target, vars })
}

const FINALIZER_FIELDS: (&str, &str) = ("finalizer.playbook", "finalizer.role");

/// The warning for a key upstream would silently ignore, with a hint for the settings people
/// commonly try to put in watches.yaml.
fn unknown_key(at: &EntryRef, gvk: &Gvk, key: &str) -> String {
    let hint = match key.to_ascii_lowercase().as_str() {
        "maxworkers" | "maxconcurrentreconciles" | "workers" => format!(
            "; set --max-concurrent-reconciles or {} instead",
            gvk.env_var("MAX_CONCURRENT_RECONCILES")
        ),
        "ansibleverbosity" | "verbosity" => {
            format!("; set --ansible-verbosity or {} instead", gvk.env_var("ANSIBLE_VERBOSITY"))
        }
        _ => String::new(),
    };
    format!("{at}: unknown key {key:?} ignored{hint}")
}
