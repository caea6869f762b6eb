//! watches.yaml: loading, defaults, validation and per-kind settings.
//!
//! Loading is pure: everything read from the process comes in through [`Environment`], so the
//! result depends only on the text, the flags ([`Defaults`]) and that environment (plus which
//! playbook and role paths exist). Behaviour follows upstream's `watches.go`; the one deliberate
//! difference is that unknown keys produce a warning instead of being silently ignored.

mod entry;
mod environment;
mod error;
mod expand;
mod extensions;
mod fields;
mod filters;
#[cfg(test)]
mod fuzz;
mod gvk;
mod load;
mod namespaces;
mod overrides;
mod paths;
pub mod permissions;
pub(crate) mod selector;
#[cfg(test)]
mod test_support;
mod versions;
mod watch;

#[cfg(test)]
mod tests;

pub use environment::Environment;
pub use error::{EntryRef, Error, Result};
pub use fields::describe;
pub use filters::WatchFields;
pub use gvk::Gvk;
pub use load::{load, parse};
pub use namespaces::watch_namespaces;
pub use versions::one_per_kind;
pub use watch::{
    Defaults, Extensions, FailurePolicy, Finalizer, HostKeyChecking, Loaded, Target, Validate, Watch,
};
