//! Scenarios for `ansible-operator test`: a YAML file of steps (apply, assert, absent, patch,
//! delete, idempotent, runs, verify), read into typed steps with errors that name the file, the step
//! and the field; the partial match that `assert` uses ([`matching`]); and molecule scenarios read
//! as scenarios ([`molecule`]).
//!
//! ```yaml
//! timeout: 2m               # each step's, unless the step sets its own
//! steps:
//!   - apply: ../../deploy/samples/memcached.yaml   # a file (paths are relative to this one)
//!   - assert:                                       # or inline objects, one or a list
//!       apiVersion: apps/v1
//!       kind: Deployment
//!       metadata: {name: memcached-sample-memcached}
//!       spec: {replicas: 1}
//!   - idempotent: {apiVersion: cache.example.com/v1alpha1, kind: Memcached, metadata: {name: memcached-sample}}
//! ```

pub mod cel;
pub mod matching;
pub mod molecule;
pub mod record;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::go_duration;

/// A step's timeout when neither it nor its scenario sets one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The step kinds, as written.
pub const ACTIONS: [&str; 9] =
    ["apply", "assert", "absent", "patch", "delete", "idempotent", "runs", "plan", "verify"];

/// A scenario file, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Its name: the file name without `.yaml`.
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// Its steps, in order.
    pub steps: Vec<Step>,
}

/// One step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Its `name`, else the action and what it names (`apply memcached.yaml`).
    pub name: String,
    /// How long it may take.
    pub timeout: Duration,
    /// What it does.
    pub action: Action,
}

/// What a step does. Objects are Kubernetes objects (`apiVersion`, `kind`, `metadata.name`); those
/// without a namespace are in the scenario's.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Server-side apply of the objects.
    Apply(Vec<Value>),
    /// Waits until each object exists, holds every field given ([`matching`]) and makes each CEL
    /// expression true ([`cel`]).
    Assert {
        /// The objects.
        objects: Vec<Value>,
        /// The expressions, each with the object as `self`.
        cel: Vec<String>,
    },
    /// Waits until none of the objects exists.
    Absent(Vec<Value>),
    /// A JSON merge patch of each object with the fields given.
    Patch(Vec<Value>),
    /// Deletes the objects and waits until they are gone (their finalizers ran).
    Delete(Vec<Value>),
    /// Asks each CR for a run now; that run must succeed with `changed=0`.
    Idempotent(Vec<Value>),
    /// The CR's runs since the newest step that changes something started.
    Runs(Runs),
    /// What a proposed change of a CR would do (check mode, nothing written), matched as `assert`
    /// matches an object.
    Plan(Plan),
    /// Runs an Ansible playbook (its `assert` tasks) against the scenario's namespace.
    Verify(PathBuf),
    /// Runs a molecule scenario's `verify.yml` as molecule would ([`molecule`]).
    Molecule(Box<molecule::Molecule>),
    /// A molecule task that cannot run against the operator in this process: why.
    NotHere(String),
}

/// What a `runs` step expects.
#[derive(Debug, Clone, PartialEq)]
pub struct Runs {
    /// The CR.
    pub object: Value,
    /// How many runs started since the newest step that changes something did.
    pub count: Option<u64>,
    /// How each of them ended (`Successful`, `Failure`, `TimedOut`).
    pub result: Option<String>,
}

impl Scenario {
    /// Whether it is a molecule scenario (its `path` is then the scenario's directory).
    pub fn is_molecule(&self) -> bool {
        self.steps.iter().any(|step| matches!(step.action, Action::Molecule(_)))
    }

    /// Whether it deploys the manager in its namespace (a molecule scenario with `--image`): the
    /// operator in the command's process leaves that namespace to it.
    pub fn deploys_manager(&self) -> bool {
        self.steps
            .iter()
            .any(|step| matches!(&step.action, Action::Molecule(molecule) if molecule.image.is_some()))
    }
}

impl Action {
    /// The objects the step names.
    pub fn objects(&self) -> Vec<&Value> {
        match self {
            Action::Apply(objects)
            | Action::Assert { objects, .. }
            | Action::Absent(objects)
            | Action::Patch(objects)
            | Action::Delete(objects)
            | Action::Idempotent(objects) => objects.iter().collect(),
            Action::Runs(runs) => vec![&runs.object],
            Action::Plan(plan) => vec![&plan.object],
            Action::Verify(_) | Action::Molecule(_) | Action::NotHere(_) => Vec::new(),
        }
    }

    /// Whether the step changes something in the cluster (and so may cause runs).
    pub fn changes(&self) -> bool {
        matches!(
            self,
            Action::Apply(_)
                | Action::Patch(_)
                | Action::Delete(_)
                | Action::Idempotent(_)
                | Action::Molecule(_)
        )
    }
}

/// What a `plan` step proposes and expects.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The CR as proposed: its `spec` is planned against the live CR.
    pub object: Value,
    /// What the plan must hold (`result`, `summary`, `tasks` with `name`, `verdict`, `diff`).
    pub expect: Value,
}

/// Why a scenario file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file (or one it names) could not be read.
    #[error("{file}: {error}")]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// Not YAML.
    #[error("{file}: not YAML: {message}")]
    Yaml {
        /// The file.
        file: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A field has a value the scenario format does not take.
    #[error("{file}: {place}: {message}")]
    Invalid {
        /// The scenario file.
        file: PathBuf,
        /// Where in it: `steps[2].apply`.
        place: String,
        /// What is wrong, with the value.
        message: String,
    },
}

/// Reads a scenario file.
pub fn load(path: &Path) -> Result<Scenario, Error> {
    let text = std::fs::read(path).map_err(|error| Error::Read { file: path.to_path_buf(), error })?;
    let document: Value = serde_saphyr::from_slice(&text)
        .map_err(|error| Error::Yaml { file: path.to_path_buf(), message: error.to_string() })?;
    Reader { file: path }.scenario(&document)
}

/// Reads the documents of an objects file: every YAML document that is a mapping.
pub fn objects_file(path: &Path) -> Result<Vec<Value>, Error> {
    let text =
        std::fs::read_to_string(path).map_err(|error| Error::Read { file: path.to_path_buf(), error })?;
    let documents: Vec<Value> = serde_saphyr::from_str_multiple(&text)
        .map_err(|error| Error::Yaml { file: path.to_path_buf(), message: error.to_string() })?;
    Ok(documents.into_iter().filter(Value::is_object).collect())
}

/// The scenario file being read, for errors and relative paths.
struct Reader<'a> {
    file: &'a Path,
}

impl Reader<'_> {
    fn invalid(&self, place: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Invalid { file: self.file.to_path_buf(), place: place.into(), message: message.into() }
    }

    fn scenario(&self, document: &Value) -> Result<Scenario, Error> {
        let Some(top) = document.as_object() else {
            return Err(self.invalid("top level", format!("a mapping with `steps`, not {}", shown(document))));
        };
        self.only_keys(top, "top level", &["timeout", "steps"])?;
        let timeout = match top.get("timeout") {
            Some(value) => self.duration(value, "timeout")?,
            None => DEFAULT_TIMEOUT,
        };
        let steps = match top.get("steps") {
            Some(Value::Array(steps)) if !steps.is_empty() => steps,
            Some(other) => {
                return Err(self.invalid("steps", format!("a non-empty list, not {}", shown(other))));
            }
            None => return Err(self.invalid("top level", "no `steps`")),
        };
        let steps = steps
            .iter()
            .enumerate()
            .map(|(index, step)| self.step(index, step, timeout))
            .collect::<Result<_, _>>()?;
        let name = self.file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(Scenario { name, path: self.file.to_path_buf(), steps })
    }

    fn step(&self, index: usize, step: &Value, timeout: Duration) -> Result<Step, Error> {
        let place = format!("steps[{index}]");
        let Some(fields) = step.as_object() else {
            return Err(self.invalid(
                place,
                format!("a mapping with one of {}, not {}", ACTIONS.join(", "), shown(step)),
            ));
        };
        let mut allowed = vec!["name", "timeout", "cel"];
        allowed.extend(ACTIONS);
        self.only_keys(fields, &place, &allowed)?;
        let actions: Vec<&str> = ACTIONS.into_iter().filter(|action| fields.contains_key(*action)).collect();
        let [action] = actions[..] else {
            return Err(self.invalid(
                place,
                format!("exactly one of {} (found {})", ACTIONS.join(", "), found(&actions)),
            ));
        };
        let timeout = match fields.get("timeout") {
            Some(value) => self.duration(value, &format!("{place}.timeout"))?,
            None => timeout,
        };
        if action != "assert" && fields.contains_key("cel") {
            return Err(self.invalid(
                format!("{place}.cel"),
                format!("only an `assert` step takes `cel`, not `{action}`"),
            ));
        }
        let value = &fields[action];
        let place = format!("{place}.{action}");
        let (action, about) = match action {
            "apply" => (Action::Apply(self.objects(value, &place)?), what(value)),
            "assert" => {
                let cel = self.cel(fields.get("cel"), &format!("steps[{index}].cel"))?;
                (Action::Assert { objects: self.objects(value, &place)?, cel }, what(value))
            }
            "absent" => (Action::Absent(self.objects(value, &place)?), what(value)),
            "patch" => (Action::Patch(self.objects(value, &place)?), what(value)),
            "delete" => (Action::Delete(self.objects(value, &place)?), what(value)),
            "idempotent" => (Action::Idempotent(self.objects(value, &place)?), what(value)),
            "runs" => {
                let runs = self.runs(value, &place)?;
                let about = name_of(&runs.object);
                (Action::Runs(runs), about)
            }
            "plan" => {
                let plan = self.plan(value, &place)?;
                let about = name_of(&plan.object);
                (Action::Plan(plan), about)
            }
            _ => {
                let Some(path) = value.as_str() else {
                    return Err(self.invalid(place, format!("a playbook's path, not {}", shown(value))));
                };
                (Action::Verify(self.relative(path)), path.to_string())
            }
        };
        let name = match fields.get("name") {
            Some(Value::String(name)) => name.clone(),
            Some(other) => {
                return Err(
                    self.invalid(format!("steps[{index}].name"), format!("a string, not {}", shown(other)))
                );
            }
            None => format!("{} {about}", kind_of(&action)),
        };
        Ok(Step { name, timeout, action })
    }

    /// A file's path, one object, or a list of objects; each with `apiVersion`, `kind` and
    /// `metadata.name`.
    fn objects(&self, value: &Value, place: &str) -> Result<Vec<Value>, Error> {
        let objects = match value {
            Value::String(path) => objects_file(&self.relative(path))?,
            Value::Object(_) => vec![value.clone()],
            Value::Array(items) => items.clone(),
            other => {
                return Err(self.invalid(
                    place,
                    format!("a file's path, an object or a list of objects, not {}", shown(other)),
                ));
            }
        };
        if objects.is_empty() {
            return Err(self.invalid(place, "no objects"));
        }
        let mut objects = objects;
        for (index, object) in objects.iter_mut().enumerate() {
            let place = match value {
                Value::Array(_) => format!("{place}[{index}]"),
                Value::String(path) => format!("{place} ({path}, document {})", index + 1),
                _ => place.to_string(),
            };
            fill_in(object, &|name| std::env::var(name).ok())
                .map_err(|message| self.invalid(&place, message))?;
            for field in ["/apiVersion", "/kind", "/metadata/name"] {
                if object.pointer(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                    let field = field[1..].replace('/', ".");
                    return Err(self.invalid(place, format!("the object has no `{field}`")));
                }
            }
        }
        Ok(objects)
    }

    /// An `assert` step's CEL expressions: one, or a list; each must compile.
    fn cel(&self, value: Option<&Value>, place: &str) -> Result<Vec<String>, Error> {
        let expressions = match value {
            None => return Ok(Vec::new()),
            Some(Value::String(one)) => vec![(place.to_string(), one)],
            Some(Value::Array(items)) if !items.is_empty() => {
                let mut expressions = Vec::new();
                for (index, item) in items.iter().enumerate() {
                    let Value::String(expression) = item else {
                        let message = format!("a CEL expression, not {}", shown(item));
                        return Err(self.invalid(format!("{place}[{index}]"), message));
                    };
                    expressions.push((format!("{place}[{index}]"), expression));
                }
                expressions
            }
            Some(other) => {
                let message = format!("a CEL expression or a non-empty list of them, not {}", shown(other));
                return Err(self.invalid(place, message));
            }
        };
        expressions
            .into_iter()
            .map(|(place, expression)| match cel::compile(expression) {
                Ok(()) => Ok(expression.clone()),
                Err(message) => Err(self.invalid(place, format!("not CEL: {message}"))),
            })
            .collect()
    }

    fn runs(&self, value: &Value, place: &str) -> Result<Runs, Error> {
        let Some(fields) = value.as_object() else {
            return Err(self.invalid(
                place,
                format!("a mapping with `object` and `count` or `result`, not {}", shown(value)),
            ));
        };
        self.only_keys(fields, place, &["object", "count", "result"])?;
        let object = self.one_object(fields.get("object"), place, "the CR whose runs are counted")?;
        let count = match fields.get("count") {
            Some(count) => Some(count.as_u64().ok_or_else(|| {
                self.invalid(format!("{place}.count"), format!("a number of runs, not {}", shown(count)))
            })?),
            None => None,
        };
        let result = match fields.get("result") {
            Some(Value::String(result))
                if ["Successful", "Failure", "TimedOut"].contains(&result.as_str()) =>
            {
                Some(result.clone())
            }
            Some(other) => {
                return Err(self.invalid(
                    format!("{place}.result"),
                    format!("Successful, Failure or TimedOut, not {}", shown(other)),
                ));
            }
            None => None,
        };
        if count.is_none() && result.is_none() {
            return Err(self.invalid(place, "neither `count` nor `result`: nothing to check"));
        }
        Ok(Runs { object, count, result })
    }

    fn plan(&self, value: &Value, place: &str) -> Result<Plan, Error> {
        let Some(fields) = value.as_object() else {
            return Err(
                self.invalid(place, format!("a mapping with `object` and `expect`, not {}", shown(value)))
            );
        };
        self.only_keys(fields, place, &["object", "expect"])?;
        let object = self.one_object(fields.get("object"), place, "the proposed CR")?;
        let expect = match fields.get("expect") {
            Some(expect @ Value::Object(_)) => expect.clone(),
            Some(other) => {
                return Err(
                    self.invalid(format!("{place}.expect"), format!("a mapping, not {}", shown(other)))
                );
            }
            None => return Err(self.invalid(place, "no `expect`: what the plan must hold")),
        };
        Ok(Plan { object, expect })
    }

    /// The one object a field names (`what` says which, when it is missing).
    fn one_object(&self, value: Option<&Value>, place: &str, what: &str) -> Result<Value, Error> {
        let Some(value) = value else {
            return Err(self.invalid(place, format!("no `object`: {what}")));
        };
        let place = format!("{place}.object");
        match &self.objects(value, &place)?[..] {
            [object] => Ok(object.clone()),
            _ => Err(self.invalid(place, "one object, not a list")),
        }
    }

    fn duration(&self, value: &Value, place: &str) -> Result<Duration, Error> {
        let text = value.as_str().unwrap_or_default();
        go_duration::parse(text)
            .ok()
            .filter(|duration| !duration.is_zero())
            .ok_or_else(|| self.invalid(place, format!("a duration such as 90s or 2m, not {}", shown(value))))
    }

    fn only_keys(&self, fields: &Map<String, Value>, place: &str, allowed: &[&str]) -> Result<(), Error> {
        match fields.keys().find(|key| !allowed.contains(&key.as_str())) {
            Some(key) => {
                Err(self.invalid(place, format!("unknown field `{key}` (known: {})", allowed.join(", "))))
            }
            None => Ok(()),
        }
    }

    fn relative(&self, path: &str) -> PathBuf {
        self.file.parent().unwrap_or(Path::new(".")).join(path)
    }
}

/// A value as the user wrote it, shortened.
/// Fills in the environment's variables in every string value of an object (not in its keys):
/// `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `${NAME:?error}` as molecule.yml's are
/// ([`molecule::interpolate`]), while a lone `$` (a shell script's `$HOME`) is kept as written and
/// `$${` is a literal `${`. A value filled in stays a string, so a key or a token kept in a CI
/// secret keeps its newlines.
fn fill_in(value: &mut Value, var: &impl Fn(&str) -> Option<String>) -> Result<(), String> {
    match value {
        Value::String(text) if text.contains("${") => *text = fill_in_text(text, var)?,
        Value::Array(items) => items.iter_mut().try_for_each(|item| fill_in(item, var))?,
        Value::Object(fields) => fields.values_mut().try_for_each(|field| fill_in(field, var))?,
        _ => {}
    }
    Ok(())
}

fn fill_in_text(text: &str, var: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        if rest[..at].ends_with('$') {
            out.push_str(&rest[..at]);
            out.push('{');
            rest = &rest[at + 2..];
            continue;
        }
        out.push_str(&rest[..at]);
        let braced = &rest[at + 2..];
        let end = braced.find('}').ok_or_else(|| format!("`${{{braced}`: no closing `}}`"))?;
        out.push_str(&molecule::expand(&braced[..end], var)?);
        rest = &braced[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(80) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

fn found(actions: &[&str]) -> String {
    match actions {
        [] => "none".to_string(),
        _ => actions.join(" and "),
    }
}

/// What an objects field names, for a step's default name.
fn what(value: &Value) -> String {
    match value {
        Value::String(path) => path.clone(),
        Value::Array(items) => items.iter().map(name_of).collect::<Vec<_>>().join(", "),
        object => name_of(object),
    }
}

/// `Kind/name`.
pub fn name_of(object: &Value) -> String {
    format!(
        "{}/{}",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The action's word, as written in the file.
pub fn kind_of(action: &Action) -> &'static str {
    match action {
        Action::Apply(_) => "apply",
        Action::Assert { .. } => "assert",
        Action::Absent(_) => "absent",
        Action::Patch(_) => "patch",
        Action::Delete(_) => "delete",
        Action::Idempotent(_) => "idempotent",
        Action::Runs(_) => "runs",
        Action::Plan(_) => "plan",
        Action::Verify(_) => "verify",
        Action::Molecule(_) => "molecule",
        Action::NotHere(_) => "skipped",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Scenario, Error> {
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let count = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("scenario-test-{}-{count}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("create.yaml");
        std::fs::write(&path, text).unwrap();
        std::fs::write(dir.join("cr.yaml"), "apiVersion: a/v1\nkind: A\nmetadata: {name: one}\n---\napiVersion: a/v1\nkind: A\nmetadata: {name: two}\n").unwrap();
        let read = load(&path).map(|mut scenario| {
            scenario.path = PathBuf::from("create.yaml");
            for step in &mut scenario.steps {
                if let Action::Verify(path) = &mut step.action {
                    *path = path.strip_prefix(&dir).unwrap().to_path_buf();
                }
            }
            scenario
        });
        std::fs::remove_dir_all(&dir).unwrap();
        read
    }

    fn message(text: &str) -> String {
        let error = read(text).unwrap_err().to_string();
        error.split_once(": ").unwrap().1.to_string()
    }

    #[test]
    fn a_scenario_reads_files_inline_objects_and_each_steps_timeout() {
        let scenario = read(
            "timeout: 30s\nsteps:\n- apply: cr.yaml\n- name: scaled\n  timeout: 2m\n  assert: {apiVersion: apps/v1, kind: Deployment, metadata: {name: d}, spec: {replicas: 2}}\n  cel: [self.status.readyReplicas == 2]\n- runs: {object: {apiVersion: a/v1, kind: A, metadata: {name: one}}, count: 1, result: Successful}\n- verify: verify.yml\n",
        )
        .unwrap();
        assert_eq!(scenario.name, "create");
        let names: Vec<&str> = scenario.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["apply cr.yaml", "scaled", "runs A/one", "verify verify.yml"]);
        let timeouts: Vec<u64> = scenario.steps.iter().map(|s| s.timeout.as_secs()).collect();
        assert_eq!(timeouts, [30, 120, 30, 30]);
        let Action::Apply(objects) = &scenario.steps[0].action else { panic!() };
        assert_eq!(objects.iter().map(name_of).collect::<Vec<_>>(), ["A/one", "A/two"]);
        let Action::Assert { cel, .. } = &scenario.steps[1].action else { panic!() };
        assert_eq!(cel, &["self.status.readyReplicas == 2"]);
        let Action::Runs(runs) = &scenario.steps[2].action else { panic!() };
        assert_eq!((runs.count, runs.result.as_deref()), (Some(1), Some("Successful")));
        assert_eq!(scenario.steps[3].action, Action::Verify(PathBuf::from("verify.yml")));
    }

    #[test]
    fn objects_string_values_take_the_environments_variables() {
        let var = |name: &str| match name {
            "KEY" => Some("-----BEGIN KEY-----\nabc\n-----END KEY-----\n".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let mut object = serde_json::json!({
            "metadata": {"name": "keys", "labels": {"${KEY}": "key names are kept"}},
            "stringData": {"key": "${KEY}", "host": "${HOST:-127.0.0.11}", "empty": "${EMPTY-unused}"},
            "data": {"script": "echo $HOME $$HOME", "literal": "$${KEY}", "port": 2222, "list": ["a${EMPTY}b"]}
        });
        fill_in(&mut object, &var).unwrap();
        assert_eq!(object["stringData"]["key"], "-----BEGIN KEY-----\nabc\n-----END KEY-----\n");
        assert_eq!(object["stringData"]["host"], "127.0.0.11");
        assert_eq!(object["stringData"]["empty"], "");
        assert_eq!(object["data"]["script"], "echo $HOME $$HOME", "a lone `$` stays as written");
        assert_eq!(object["data"]["literal"], "${KEY}");
        assert_eq!(object["data"]["port"], 2222);
        assert_eq!(object["data"]["list"][0], "ab");
        assert!(object["metadata"]["labels"]["${KEY}"].is_string());
        let mut missing = serde_json::json!({"data": {"key": "${SSH_KEY:?the test hosts' key}"}});
        assert_eq!(fill_in(&mut missing, &var).unwrap_err(), "SSH_KEY: the test hosts' key");
    }

    #[test]
    fn an_unset_variable_asked_for_names_the_step_and_the_object() {
        assert_eq!(
            message(
                "steps:\n- apply: [{apiVersion: v1, kind: Secret, metadata: {name: s}, stringData: {k: '${ANSIBLE_OPERATOR_UNSET_FOR_TEST:?set it to the key}'}}]\n"
            ),
            "steps[0].apply[0]: ANSIBLE_OPERATOR_UNSET_FOR_TEST: set it to the key"
        );
    }

    #[test]
    fn errors_name_the_step_the_field_and_the_value() {
        assert_eq!(
            message("steps:\n- aply: cr.yaml\n"),
            "steps[0]: unknown field `aply` (known: name, timeout, cel, apply, assert, absent, patch, delete, idempotent, runs, plan, verify)"
        );
        assert_eq!(
            message("steps:\n- apply: cr.yaml\n  assert: cr.yaml\n"),
            "steps[0]: exactly one of apply, assert, absent, patch, delete, idempotent, runs, plan, verify (found apply and assert)"
        );
        assert_eq!(
            message("steps:\n- apply: cr.yaml\n- timeout: 3 minutes\n  absent: cr.yaml\n"),
            "steps[1].timeout: a duration such as 90s or 2m, not \"3 minutes\""
        );
        assert_eq!(
            message("steps:\n- assert: [{apiVersion: v1, kind: ConfigMap, metadata: {}}]\n"),
            "steps[0].assert[0]: the object has no `metadata.name`"
        );
        assert_eq!(
            message(
                "steps:\n- runs: {object: {apiVersion: a/v1, kind: A, metadata: {name: x}}, result: Done}\n"
            ),
            "steps[0].runs.result: Successful, Failure or TimedOut, not \"Done\""
        );
        assert_eq!(message("steps: []\n"), "steps: a non-empty list, not []");
        assert_eq!(
            message("steps:\n- plan: {object: {apiVersion: a/v1, kind: A, metadata: {name: x}}}\n"),
            "steps[0].plan: no `expect`: what the plan must hold"
        );
        assert_eq!(
            message("steps:\n- delete: 3\n"),
            "steps[0].delete: a file's path, an object or a list of objects, not 3"
        );
        assert_eq!(
            message("steps:\n- apply: cr.yaml\n  cel: self.spec.size == 1\n"),
            "steps[0].cel: only an `assert` step takes `cel`, not `apply`"
        );
        let bad_cel =
            message("steps:\n- assert: cr.yaml\n  cel: [\"has(self.status)\", \"self.status.(\"]\n");
        assert!(bad_cel.starts_with("steps[0].cel[1]: not CEL: 1:13: Syntax error"), "{bad_cel}");
        let error = read("steps:\n- apply: missing.yaml\n").unwrap_err().to_string();
        assert!(error.contains("missing.yaml: No such file"), "{error}");
    }
}
