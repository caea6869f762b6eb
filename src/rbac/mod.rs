//! `ansible-operator rbac`: the Kubernetes RBAC an operator needs, rendered from its watches. The
//! operator's own needs (derived from what it does: controllers, finalizers, status, Events, the
//! Lease, the run history, the API's reviews, dependent watches, SSH key Secrets, the webhook
//! configuration) and each kind's declared `permissions`, as kustomize files a scaffold's
//! `config/rbac` takes.
//!
//! [`render`] decides purely; [`crds`] reads plurals and scopes from CRD files; [`files`] writes
//! the result as YAML; [`from_history`] proposes each kind's `permissions:` from what its runs did.

pub mod crds;
pub mod files;
pub mod from_history;
pub mod render;

pub use crds::Kinds;
pub use render::{Document, File, Rendered, Settings, render};

use std::path::PathBuf;

/// Why RBAC could not be rendered or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `--crds` directory could not be listed.
    #[error("read the CRD directory {}", dir.display())]
    ReadCrds {
        /// The directory.
        dir: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A CRD file could not be read.
    #[error("read the CRD file {}", file.display())]
    ReadCrd {
        /// The file.
        file: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A CRD file is not YAML, or a CRD in it lacks a field.
    #[error("{}: {reason}", file.display())]
    Crd {
        /// The file.
        file: PathBuf,
        /// What is wrong, naming the field.
        reason: String,
    },
    /// An object could not be written as YAML.
    #[error("write {file} as YAML: {reason}")]
    Yaml {
        /// The output file it belongs to.
        file: String,
        /// Cause.
        reason: String,
    },
    /// An output file could not be written (or an old one removed).
    #[error("write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// The result of this module's steps.
pub type Result<T, E = Error> = std::result::Result<T, E>;
