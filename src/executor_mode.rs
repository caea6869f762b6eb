//! Which executor runs Ansible: the value `--ansible-executor`, the watch key `executor`, the
//! runner and the metrics share (a leaf, so none of them imports another for it).

/// Which executor runs Ansible (`--ansible-executor`, the watch key `executor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Executor {
    /// Forked from the supervised Python worker that has Ansible imported already.
    #[default]
    Warm,
    /// A new `ansible-runner` process per run.
    Cold,
}

impl Executor {
    /// The name used in flags, watches.yaml, logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Executor::Warm => "warm",
            Executor::Cold => "cold",
        }
    }
}
