//! RBAC for the watched kinds: `permissions:` proposed from what their runs did.

pub mod from_history;
