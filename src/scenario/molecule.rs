//! Molecule scenarios for `ansible-operator test --molecule DIR`: a scaffolded project's
//! `molecule/<name>/` (its `molecule.yml`, `verify.yml` and the task files it includes) run against
//! the operator in this process instead of a deployed manager.
//!
//! What the manager's own Pod would answer cannot be asked here: a task that looks for that Pod
//! (by the labels of `config/manager/manager.yaml`'s Deployment), or that uses what such a task
//! registered or set, is replaced in the copy the run gets by a `debug` task of the same name that
//! says why, and the scenario reports it as skipped. The rest of each file is run as written, byte
//! for byte and on the same lines: tasks are found by the spans of the YAML parser's events, not by
//! reading the file into values and writing it back.
//!
//! `molecule.yml` is read as molecule reads it: `${VAR}`, `${VAR:-default}`, `${VAR-default}`,
//! `${VAR:?error}` and `$$` filled in from the environment first ([`interpolate`]).

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use granit_parser::{ErrorKind, Event, Parser, ScanError};
use serde_json::{Map, Value, json};

use super::{Action, Error, Scenario, Step};

/// How long a molecule scenario's `verify.yml` may take (upstream's scaffold waits up to 5 minutes
/// for one CR).
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The manager Pod's labels when the project has no `config/manager/manager.yaml`: the scaffold's.
const SCAFFOLD_SELECTOR: &str = "control-plane=controller-manager";

/// A molecule scenario, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Molecule {
    /// The scenario's directory (`molecule/default`).
    pub dir: PathBuf,
    /// The project's directory (molecule's `MOLECULE_PROJECT_DIRECTORY`): the watches file's.
    pub project: PathBuf,
    /// `molecule.yml` as written; its variables are filled in when it runs.
    pub config: String,
    /// Every file of the scenario's directory, as the run gets it: its path there and its bytes,
    /// with the tasks that cannot run here replaced.
    pub files: Vec<(PathBuf, Vec<u8>)>,
    /// `--image`: the manager is deployed with this image in the scenario's namespace, and no task
    /// is replaced.
    pub image: Option<String>,
}

/// A task that cannot run against the operator in this process.
#[derive(Debug, Clone, PartialEq)]
struct Skipped {
    /// Its file, in the scenario's directory.
    file: PathBuf,
    /// Its name (`unnamed task` when it has none).
    task: String,
    /// Why.
    reason: String,
}

/// Reads the molecule scenario in `dir` of the project in `project`, as a scenario: a step that
/// runs `verify.yml`, then a skipped step for each task that cannot run here (none when the
/// manager is deployed with `image`).
pub fn load(dir: &Path, project: &Path, image: Option<&str>) -> Result<Scenario, Error> {
    let invalid = |file: &Path, place: &str, message: String| Error::Invalid {
        file: file.to_path_buf(),
        place: place.to_string(),
        message,
    };
    let config_file = dir.join("molecule.yml");
    let config = std::fs::read_to_string(&config_file)
        .map_err(|error| Error::Read { file: config_file.clone(), error })?;
    if !dir.join("verify.yml").is_file() {
        let message = "no verify.yml: the playbook whose tasks are the scenario's checks".to_string();
        return Err(invalid(dir, "molecule scenario", message));
    }
    let selectors = manager_selectors(project)?;
    let mut files = Vec::new();
    read_dir(dir, Path::new(""), &mut files)?;
    let skipped = match image {
        Some(_) => Vec::new(),
        None => skip_manager_tasks(&mut files, &selectors),
    };
    let name = dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let image = image.map(str::to_string);
    let molecule = Molecule { dir: dir.to_path_buf(), project: project.to_path_buf(), config, files, image };
    // As it will be read when it runs (its variables from this environment), to stop before then.
    let place = Place { copy: dir, ephemeral: dir, namespace: "test" };
    let read = molecule.config(&molecule.environment(&place))?;
    if let Some(verifier) = read["verifier"]["name"].as_str().filter(|name| *name != "ansible") {
        let message = format!("`{verifier}`: only molecule's `ansible` verifier (verify.yml) is run");
        return Err(invalid(&config_file, "verifier.name", message));
    }
    let mut steps = vec![Step {
        name: "verify.yml".into(),
        timeout: VERIFY_TIMEOUT,
        action: Action::Molecule(molecule.into()),
    }];
    steps.extend(skipped.into_iter().map(|skipped| Step {
        name: format!("{} ({})", skipped.task, skipped.file.display()),
        timeout: Duration::ZERO,
        action: Action::NotHere(skipped.reason),
    }));
    Ok(Scenario { name: format!("molecule-{name}"), path: dir.to_path_buf(), steps })
}

/// The files under `dir` (in `at` of the scenario's directory), sorted.
fn read_dir(dir: &Path, at: &Path, files: &mut Vec<(PathBuf, Vec<u8>)>) -> Result<(), Error> {
    let read = |error| Error::Read { file: dir.to_path_buf(), error };
    let mut entries: Vec<_> =
        std::fs::read_dir(dir).map_err(read)?.collect::<Result<_, _>>().map_err(read)?;
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let path = entry.path();
        let relative = at.join(entry.file_name());
        if path.is_dir() {
            read_dir(&path, &relative, files)?;
        } else {
            let bytes = std::fs::read(&path).map_err(|error| Error::Read { file: path.clone(), error })?;
            files.push((relative, bytes));
        }
    }
    Ok(())
}

/// The label selectors (`key=value`) that find the manager's Pod: its Deployment's
/// `spec.selector.matchLabels` in `config/manager/manager.yaml`, else the scaffold's.
fn manager_selectors(project: &Path) -> Result<Vec<String>, Error> {
    let file = project.join("config/manager/manager.yaml");
    if !file.is_file() {
        return Ok(vec![SCAFFOLD_SELECTOR.to_string()]);
    }
    let documents = super::objects_file(&file)?;
    let labels = documents
        .iter()
        .find(|document| document["kind"] == "Deployment")
        .and_then(|deployment| deployment["spec"]["selector"]["matchLabels"].as_object());
    let selectors: Vec<String> = labels
        .into_iter()
        .flatten()
        .filter_map(|(key, value)| value.as_str().map(|value| format!("{key}={value}")))
        .collect();
    match selectors.is_empty() {
        true => Ok(vec![SCAFFOLD_SELECTOR.to_string()]),
        false => Ok(selectors),
    }
}

/// A YAML node with where it is in the text.
enum Node {
    Map(Vec<(Node, Node)>, Range<usize>),
    Seq(Vec<Node>),
    Scalar(String, Range<usize>),
}

impl Node {
    fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(entries, _) => entries.iter().find(|(k, _)| k.text() == Some(key)).map(|(_, v)| v),
            _ => None,
        }
    }

    fn text(&self) -> Option<&str> {
        match self {
            Node::Scalar(text, _) => Some(text),
            _ => None,
        }
    }

    fn keys(&self) -> impl Iterator<Item = &str> {
        let entries = match self {
            Node::Map(entries, _) => &entries[..],
            _ => &[],
        };
        entries.iter().filter_map(|(key, _)| key.text())
    }

    /// Moves every span with `back`.
    fn move_spans(&mut self, back: &impl Fn(usize) -> usize) {
        match self {
            Node::Map(entries, range) => {
                *range = back(range.start)..back(range.end);
                for (key, value) in entries {
                    key.move_spans(back);
                    value.move_spans(back);
                }
            }
            Node::Seq(items) => items.iter_mut().for_each(|item| item.move_spans(back)),
            Node::Scalar(_, range) => *range = back(range.start)..back(range.end),
        }
    }

    fn items(&self) -> &[Node] {
        match self {
            Node::Seq(items) => items,
            _ => &[],
        }
    }
}

/// The documents of a YAML text as nodes; `None` when it is not YAML (it is then run as it is,
/// and Ansible says what is wrong with it).
///
/// PyYAML, which Ansible reads files with, takes a quoted scalar whose continuation line is not
/// indented past its block (upstream's scaffold has one); this parser does not. Such a line is
/// indented further in a copy, which changes no value (a continuation line's leading blanks are
/// folded away), and the spans are moved back to the text.
fn parse(text: &str) -> Option<Vec<Node>> {
    const PAD: &str = "        ";
    let mut copy = text.to_string();
    // Where pads went in the copy, in order: each later one is after the earlier ones.
    let mut pads: Vec<usize> = Vec::new();
    loop {
        match parse_exact(&copy) {
            Ok(mut documents) => {
                let back = |at: usize| at - PAD.len() * pads.iter().take_while(|pad| **pad < at).count();
                documents.iter_mut().for_each(|node| node.move_spans(&back));
                return Some(documents);
            }
            Err(Some(error)) if matches!(error.kind(), ErrorKind::InvalidQuotedScalarIndent) => {
                let at = error.marker().byte_offset()?;
                if pads.last().is_some_and(|last| *last >= at) || pads.len() >= 1000 {
                    return None;
                }
                copy.insert_str(at, PAD);
                pads.push(at);
            }
            Err(_) => return None,
        }
    }
}

/// The documents as nodes, or the parser's error (none: events it cannot place).
fn parse_exact(text: &str) -> Result<Vec<Node>, Option<ScanError>> {
    // Open collections: a mapping's start and entries so far, or a sequence's items.
    enum Open {
        Map(usize, Vec<Node>),
        Seq(Vec<Node>),
    }
    let mut open: Vec<Open> = Vec::new();
    let mut documents = Vec::new();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(Some)?;
        let range = span.byte_range().ok_or(None)?;
        let node = match event {
            Event::MappingStart(..) => {
                open.push(Open::Map(range.start, Vec::new()));
                continue;
            }
            Event::SequenceStart(..) => {
                open.push(Open::Seq(Vec::new()));
                continue;
            }
            Event::MappingEnd => match open.pop() {
                Some(Open::Map(start, flat)) => {
                    let mut entries = Vec::new();
                    let mut flat = flat.into_iter();
                    while let (Some(key), Some(value)) = (flat.next(), flat.next()) {
                        entries.push((key, value));
                    }
                    Node::Map(entries, start..range.end)
                }
                _ => return Err(None),
            },
            Event::SequenceEnd => match open.pop() {
                Some(Open::Seq(items)) => Node::Seq(items),
                _ => return Err(None),
            },
            Event::Scalar(value, ..) => Node::Scalar(value.into_owned(), range),
            Event::Alias(_) => Node::Scalar(String::new(), range),
            _ => continue,
        };
        match open.last_mut() {
            Some(Open::Map(_, items) | Open::Seq(items)) => items.push(node),
            None => documents.push(node),
        }
    }
    Ok(documents)
}

/// A task without a `block`, or a variable set in a play's or a block's `vars`.
struct Use {
    /// Index of its file.
    file: usize,
    /// The task's text with its `name` and `register` values blanked (a variable: its value's).
    text: String,
    /// The task's mapping in the file (none for a variable).
    range: Option<Range<usize>>,
    /// Its name.
    name: String,
    /// The variables it sets: its `register`, the keys of its `set_fact`; a variable's name.
    sets: Vec<String>,
}

/// Finds the tasks that need the manager's Pod in every YAML file, replaces each in its file, and
/// says which they are and why.
fn skip_manager_tasks(files: &mut [(PathBuf, Vec<u8>)], selectors: &[String]) -> Vec<Skipped> {
    let mut uses = Vec::new();
    for (index, (path, bytes)) in files.iter().enumerate() {
        let yaml = path.extension().is_some_and(|ext| ext == "yml" || ext == "yaml");
        let Some(text) =
            std::str::from_utf8(bytes).ok().filter(|_| yaml && path != Path::new("molecule.yml"))
        else {
            continue;
        };
        for document in parse(text).unwrap_or_default() {
            for item in document.items() {
                if ["hosts", "import_playbook", "ansible.builtin.import_playbook"]
                    .iter()
                    .any(|key| item.get(key).is_some())
                {
                    collect_vars(item, index, text, &mut uses);
                    for list in ["pre_tasks", "tasks", "post_tasks", "handlers"] {
                        for task in item.get(list).map(Node::items).unwrap_or_default() {
                            collect_task(task, index, text, &mut uses);
                        }
                    }
                } else {
                    collect_task(item, index, text, &mut uses);
                }
            }
        }
    }
    // Until nothing changes: what mentions the manager's labels, or a variable set from them.
    let mut manager_vars: BTreeSet<String> = BTreeSet::new();
    let mut reasons: Vec<Option<String>> = vec![None; uses.len()];
    loop {
        let mut changed = false;
        for (use_, reason) in uses.iter().zip(&mut reasons) {
            if reason.is_some() {
                continue;
            }
            if let Some(why) = needs_manager(&use_.text, selectors, &manager_vars) {
                *reason = Some(why);
                manager_vars.extend(use_.sets.iter().cloned());
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut skipped = Vec::new();
    let mut replacements: Vec<(usize, Range<usize>, String)> = Vec::new();
    for (use_, reason) in uses.iter().zip(reasons) {
        let (Some(reason), Some(range)) = (reason, &use_.range) else { continue };
        let message = format!("skipped by ansible-operator test: {reason}");
        let task = json!({"name": use_.name, "ansible.builtin.debug": {"msg": message}});
        replacements.push((use_.file, range.clone(), task.to_string()));
        skipped.push(Skipped { file: files[use_.file].0.clone(), task: use_.name.clone(), reason });
    }
    // Later spans first, so earlier ones stay where they are.
    replacements.sort_by_key(|(file, range, _)| (*file, std::cmp::Reverse(range.start)));
    for (file, range, task) in replacements {
        let bytes = &mut files[file].1;
        // The span runs to the next token: keep the blank and indentation before it. As many
        // lines as the task had, so what Ansible says of a line after it is true of the original.
        let end = range.start + bytes[range.clone()].trim_ascii_end().len();
        let lines = bytes[range.start..end].iter().filter(|byte| **byte == b'\n').count();
        bytes.splice(range.start..end, (task + &"\n".repeat(lines)).into_bytes());
    }
    skipped
}

/// The variables of a play's or a block's `vars`.
fn collect_vars(node: &Node, file: usize, text: &str, uses: &mut Vec<Use>) {
    let Some(Node::Map(entries, _)) = node.get("vars") else { return };
    for (key, value) in entries {
        let Some(name) = key.text() else { continue };
        let range = match value {
            Node::Scalar(_, range) | Node::Map(_, range) => range.clone(),
            Node::Seq(_) => continue,
        };
        uses.push(Use {
            file,
            text: text[range].to_string(),
            range: None,
            name: name.to_string(),
            sets: vec![name.to_string()],
        });
    }
}

/// A task: a block's tasks, or the task itself.
fn collect_task(task: &Node, file: usize, text: &str, uses: &mut Vec<Use>) {
    let Node::Map(_, range) = task else { return };
    if task.get("block").is_some() {
        collect_vars(task, file, text, uses);
        for list in ["block", "rescue", "always"] {
            for inner in task.get(list).map(Node::items).unwrap_or_default() {
                collect_task(inner, file, text, uses);
            }
        }
        return;
    }
    let mut own = text[range.clone()].to_string();
    for key in ["name", "register"] {
        if let Some(Node::Scalar(_, value)) = task.get(key) {
            let at = value.start - range.start..value.end - range.start;
            own.replace_range(at.clone(), &" ".repeat(at.len()));
        }
    }
    let mut sets: Vec<String> =
        task.get("register").and_then(Node::text).map(String::from).into_iter().collect();
    for module in ["set_fact", "ansible.builtin.set_fact"] {
        sets.extend(task.get(module).into_iter().flat_map(Node::keys).map(String::from));
    }
    let name = task.get("name").and_then(Node::text).unwrap_or("unnamed task");
    uses.push(Use { file, text: own, range: Some(range.clone()), name: name.to_string(), sets });
}

/// Why `text` needs the manager's Pod: it names one of its selectors, or a variable set from one.
fn needs_manager(text: &str, selectors: &[String], vars: &BTreeSet<String>) -> Option<String> {
    let squeezed: String = text.chars().filter(|c| !c.is_whitespace() && *c != '"' && *c != '\'').collect();
    if let Some(selector) = selectors.iter().find(|selector| squeezed.contains(selector.as_str())) {
        return Some(format!(
            "it looks for the manager's Pod ({selector}); the operator runs in this process, not in a Pod"
        ));
    }
    let var = vars.iter().find(|var| mentions(text, var))?;
    Some(format!("it uses `{var}`, which comes from the manager's Pod"))
}

/// Whether `text` has `name` as a whole word, not as an attribute (`x.name`).
fn mentions(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(|c| word(c) || c == '.') && !after.is_some_and(word)
    })
}

/// Fills in `text`'s variables as molecule does (docker-compose's rules): `$$` is `$`; `$VAR` and
/// `${VAR}` the variable's value (empty when unset); `${VAR:-default}` the default when it is unset
/// or empty, `${VAR-default}` when it is unset; `${VAR:?error}` and `${VAR?error}` an error then.
pub fn interpolate(text: &str, var: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(braced) = rest.strip_prefix('{') {
            let end = braced.find('}').ok_or_else(|| format!("`${{{braced}`: no closing `}}`"))?;
            let (expression, after) = (&braced[..end], &braced[end + 1..]);
            out.push_str(&expand(expression, &var)?);
            rest = after;
        } else {
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            match end {
                0 => out.push('$'),
                _ => out.push_str(&var(&rest[..end]).unwrap_or_default()),
            }
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// One `${…}`'s value.
pub(super) fn expand(expression: &str, var: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let end = expression.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(expression.len());
    let (name, operator) = expression.split_at(end);
    if name.is_empty() {
        return Err(format!("`${{{expression}}}`: no variable name"));
    }
    let value = var(name);
    let (empty_counts, operator) = match operator.strip_prefix(':') {
        Some(rest) => (true, rest),
        None => (false, operator),
    };
    let missing = value.as_deref().is_none_or(|value| empty_counts && value.is_empty());
    match (operator.chars().next(), missing) {
        (None, _) => Ok(value.unwrap_or_default()),
        (Some('-'), true) => Ok(operator[1..].to_string()),
        (Some('?'), true) => Err(format!("{name}: {}", &operator[1..])),
        (Some('-' | '?'), false) => Ok(value.unwrap_or_default()),
        _ => Err(format!(
            "`${{{expression}}}`: not `${{NAME}}`, `${{NAME:-default}}`, `${{NAME-default}}`, `${{NAME:?error}}` or `${{NAME?error}}`"
        )),
    }
}

/// Where a molecule scenario runs: the copy of its directory, the work directory molecule calls
/// ephemeral, and the namespace it gets.
pub struct Place<'a> {
    /// The copy of the scenario's directory the run uses.
    pub copy: &'a Path,
    /// Molecule's ephemeral directory.
    pub ephemeral: &'a Path,
    /// The scenario's namespace (`TEST_OPERATOR_NAMESPACE`, and the `namespace` variable).
    pub namespace: &'a str,
}

impl Molecule {
    /// The variables molecule sets for its playbooks (and `molecule.yml`'s `${…}`).
    pub fn environment(&self, place: &Place<'_>) -> Vec<(String, String)> {
        let name = self.dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        [
            ("MOLECULE_PROJECT_DIRECTORY", self.project.display().to_string()),
            ("MOLECULE_SCENARIO_DIRECTORY", place.copy.display().to_string()),
            ("MOLECULE_SCENARIO_NAME", name),
            ("MOLECULE_EPHEMERAL_DIRECTORY", place.ephemeral.display().to_string()),
            ("MOLECULE_FILE", place.copy.join("molecule.yml").display().to_string()),
            ("MOLECULE_DRIVER_NAME", "delegated".to_string()),
            ("TEST_OPERATOR_NAMESPACE", place.namespace.to_string()),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect()
    }

    /// `molecule.yml` with its variables filled in from `env`, then the process's environment.
    pub fn config(&self, env: &[(String, String)]) -> Result<Value, Error> {
        let file = self.dir.join("molecule.yml");
        let lookup = |name: &str| {
            let set = env.iter().find(|(key, _)| key == name).map(|(_, value)| value.clone());
            set.or_else(|| std::env::var(name).ok())
        };
        let text = interpolate(&self.config, lookup).map_err(|message| Error::Invalid {
            file: file.clone(),
            place: "variables".into(),
            message,
        })?;
        let mut config: Value = serde_saphyr::from_str(&text)
            .map_err(|error| Error::Yaml { file: file.clone(), message: error.to_string() })?;
        if config["scenario"]["name"].is_null() {
            let name = self.dir.file_name().map(|name| name.to_string_lossy().into_owned());
            config["scenario"] = json!({"name": name});
        }
        Ok(config)
    }
}

/// The inventory molecule would write for `config` (its provisioner's `group_vars` and
/// `host_vars`, each platform in its groups) with molecule's own variables, as YAML's JSON.
pub fn inventory(config: &Value, place: &Place<'_>) -> Value {
    let inventory = &config["provisioner"]["inventory"];
    let host_vars = |host: &str| {
        let mut vars = inventory["host_vars"][host].as_object().cloned().unwrap_or_default();
        vars.entry("ansible_connection").or_insert_with(|| json!("local"));
        Value::Object(vars)
    };
    let mut hosts = Map::new();
    hosts.insert("localhost".into(), host_vars("localhost"));
    let mut children = Map::new();
    for platform in config["platforms"].as_array().into_iter().flatten() {
        let Some(name) = platform["name"].as_str() else { continue };
        hosts.insert(name.into(), host_vars(name));
        for group in platform["groups"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            let group_vars = inventory["group_vars"][group].clone();
            let child = children.entry(group).or_insert_with(|| json!({"hosts": {}, "vars": {}}));
            child["hosts"][name] = json!({});
            if group_vars.is_object() {
                child["vars"] = group_vars;
            }
        }
    }
    let mut vars = inventory["group_vars"]["all"].as_object().cloned().unwrap_or_default();
    vars.insert("molecule_yml".into(), config.clone());
    vars.insert("molecule_file".into(), json!(place.copy.join("molecule.yml")));
    vars.insert("molecule_scenario_directory".into(), json!(place.copy));
    vars.insert("molecule_ephemeral_directory".into(), json!(place.ephemeral));
    vars.insert("molecule_no_log".into(), json!(false));
    json!({"all": {"hosts": hosts, "children": children, "vars": vars}})
}

/// The provisioner's `env`, as strings.
pub fn provisioner_env(config: &Value) -> Vec<(String, String)> {
    let env = config["provisioner"]["env"].as_object().into_iter().flatten();
    env.map(|(key, value)| {
        let value = match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        (key.clone(), value)
    })
    .collect()
}

#[cfg(test)]
mod tests;
