//! Why a watches file was rejected, each reason naming the file, entry, GVK, field and value.

use std::fmt;
use std::path::PathBuf;

use super::Gvk;
use crate::go_duration;

/// Where in the watches file a problem is: the file, the entry (counted from 1) and its GVK once known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRef {
    /// The watches file as it was given.
    pub file: PathBuf,
    /// Position of the entry in the top-level list, counted from 1.
    pub number: usize,
    /// The entry's GVK, when it was read far enough to know it.
    pub gvk: Option<Gvk>,
}

impl EntryRef {
    /// A boxed copy, as stored in [`Error`] variants (keeps `Result<_, Error>` small).
    pub(super) fn boxed(&self) -> Box<Self> {
        Box::new(self.clone())
    }
}

/// Formats as `watches.yaml: entry 2 (cache.example.com/v1alpha1, Kind=Memcached)`.
impl fmt::Display for EntryRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: entry {}", self.file.display(), self.number)?;
        match &self.gvk {
            Some(gvk) => write!(f, " ({gvk})"),
            None => Ok(()),
        }
    }
}

/// The first problem that stopped a watches file from loading.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("{}: cannot read the watches file", file.display())]
    Read {
        /// The watches file.
        file: PathBuf,
        /// What the operating system reported.
        #[source]
        source: std::io::Error,
    },
    /// The text (after variable expansion) is not valid YAML.
    #[error("{}: invalid yaml", file.display())]
    Yaml {
        /// The watches file.
        file: PathBuf,
        /// What the YAML parser reported, with line and column.
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// The document is not a list of watches.
    #[error("{}: the top level must be a list of watches, found {found}", file.display())]
    NotAList {
        /// The watches file.
        file: PathBuf,
        /// What was there instead.
        found: String,
    },
    /// An entry of the list is not a mapping.
    #[error("{at}: a watch must be a mapping, found {found}")]
    NotAMapping {
        /// The entry.
        at: Box<EntryRef>,
        /// What was there instead.
        found: String,
    },
    /// A field holds a value of the wrong type.
    #[error("{at}: field {field:?}: expected {expected}, found {found}")]
    FieldType {
        /// The entry.
        at: Box<EntryRef>,
        /// The field, with its path inside the entry (`finalizer.name`, `blacklist[0].kind`).
        field: String,
        /// What the field takes.
        expected: &'static str,
        /// The value found.
        found: String,
    },
    /// `version` is missing or empty.
    #[error("{at}: invalid gvk: field \"version\" must not be empty")]
    VersionEmpty {
        /// The entry.
        at: Box<EntryRef>,
    },
    /// `kind` is missing or empty.
    #[error("{at}: invalid gvk: field \"kind\" must not be empty")]
    KindEmpty {
        /// The entry.
        at: Box<EntryRef>,
    },
    /// Two entries watch the same GVK.
    #[error("{at}: duplicate gvk: entry {first} already watches it")]
    DuplicateGvk {
        /// The later entry.
        at: Box<EntryRef>,
        /// The number of the earlier entry.
        first: usize,
    },
    /// A `playbook` path does not exist.
    #[error("{at}: field {field:?}: playbook {} was not found", path.display())]
    PlaybookNotFound {
        /// The entry.
        at: Box<EntryRef>,
        /// `playbook` or `finalizer.playbook`.
        field: &'static str,
        /// The absolute path that was checked.
        path: PathBuf,
    },
    /// A `role` was found in none of the places Ansible would look.
    #[error("{at}: field {field:?}: role {role:?} was not found (looked in {})", list(tried))]
    RoleNotFound {
        /// The entry.
        at: Box<EntryRef>,
        /// `role` or `finalizer.role`.
        field: &'static str,
        /// The role as written.
        role: String,
        /// Every path that was checked, in order.
        tried: Vec<PathBuf>,
    },
    /// The entry has neither `playbook` nor `role`.
    #[error("{at}: must specify role or playbook")]
    NoTarget {
        /// The entry.
        at: Box<EntryRef>,
    },
    /// `reconcilePeriod` is not a Go duration.
    #[error("{at}: field \"reconcilePeriod\": {reason}")]
    ReconcilePeriod {
        /// The entry.
        at: Box<EntryRef>,
        /// Why the duration was rejected; names the value.
        reason: go_duration::Error,
    },
    /// `runTimeout` is not a Go duration.
    #[error("{at}: field \"runTimeout\": {reason}")]
    RunTimeout {
        /// The entry.
        at: Box<EntryRef>,
        /// Why the duration was rejected; names the value.
        reason: go_duration::Error,
    },
    /// `selector` is not a valid label selector.
    #[error("{at}: field {field:?}: {problem}")]
    Selector {
        /// The entry.
        at: Box<EntryRef>,
        /// The offending part, e.g. `selector.matchExpressions[0].operator`.
        field: String,
        /// What is wrong, naming the value.
        problem: String,
    },
    /// A watch filter (`watchFields`, `fieldSelector`) cannot be used.
    #[error("{at}: field {field:?}: {value}: {reason}")]
    Filter {
        /// The entry.
        at: Box<EntryRef>,
        /// The field, e.g. `watchFields[1]`.
        field: String,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An extension template (`inventory`, `sshKeySecret`) does not parse.
    #[error("{at}: field {:?}: {}", template.field, template_text(template))]
    Template {
        /// The entry.
        at: Box<EntryRef>,
        /// The template error, with its line.
        template: crate::template::Error,
    },
    /// `hostKeyChecking` is not a policy this project knows.
    #[error(
        "{at}: field \"hostKeyChecking\": {value:?} is not one of \"strict\", \"accept-new\" (host keys are always checked)"
    )]
    HostKeyChecking {
        /// The entry.
        at: Box<EntryRef>,
        /// The value as written.
        value: String,
    },
    /// A rule of `permissions` is not one.
    #[error("{at}: field \"{field}\": {reason}")]
    Permissions {
        /// The entry.
        at: Box<EntryRef>,
        /// The field, as `permissions[N].key`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// `executor` is neither `warm` nor `cold`.
    #[error("{at}: field \"executor\": {value:?} is not one of \"warm\", \"cold\"")]
    Executor {
        /// The entry.
        at: Box<EntryRef>,
        /// The value as written.
        value: String,
    },
    /// Two entries of one group and kind name a `convert` playbook: the kind has one conversion.
    #[error("{at}: field \"convert\": entry {first} already names the conversion of {group}/{kind}")]
    DuplicateConvert {
        /// The later entry.
        at: Box<EntryRef>,
        /// The number of the earlier entry.
        first: usize,
        /// The group.
        group: String,
        /// The kind.
        kind: String,
    },
    /// `precheck`, `validate` or `convert` names neither a playbook nor a role.
    #[error("{at}: field {field:?}: must be a playbook path or a mapping with playbook or role")]
    PrecheckTarget {
        /// The entry.
        at: Box<EntryRef>,
        /// `precheck`, `validate` or `convert`.
        field: &'static str,
    },
    /// `validateFailurePolicy` is neither `Fail` nor `Ignore`.
    #[error("{at}: field \"validateFailurePolicy\": {value:?} is not one of \"Fail\", \"Ignore\"")]
    FailurePolicy {
        /// The entry.
        at: Box<EntryRef>,
        /// The value as written.
        value: String,
    },
    /// `validateTimeout` is not a Go duration between 1s and 30s.
    #[error("{at}: field \"validateTimeout\": {reason}")]
    ValidateTimeout {
        /// The entry.
        at: Box<EntryRef>,
        /// Why it was rejected; names the value.
        reason: String,
    },
    /// `finalizer` has no `name`.
    #[error("{at}: field \"finalizer.name\": finalizer must have a name")]
    FinalizerName {
        /// The entry.
        at: Box<EntryRef>,
    },
    /// `finalizer` has neither a playbook, a role nor non-empty vars, so there is nothing to run.
    #[error("{at}: field \"finalizer\": finalizer {name:?} must specify role, playbook or non-empty vars")]
    FinalizerAction {
        /// The entry.
        at: Box<EntryRef>,
        /// The finalizer's name.
        name: String,
    },
}

/// A `Result` whose error is a watches [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A template error without its field (the message names the field already).
fn template_text(error: &crate::template::Error) -> String {
    match error.line {
        Some(line) => format!("template line {line}: {}", error.reason),
        None => error.reason.clone(),
    }
}

fn list(paths: &[PathBuf]) -> String {
    paths.iter().map(|path| path.display().to_string()).collect::<Vec<_>>().join(", ")
}
