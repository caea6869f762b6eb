//! `ansible-operator`: a Rust implementation of the Operator SDK's ansible operator.
//!
//! The modules follow the data flow in DESIGN.md: `watches` → `controller` → `reconcile` →
//! `vars` → `runner` → `outcome` → `status`.

pub mod access;
pub mod admission;
pub mod api;
pub mod app;
pub mod cached;
pub mod cgroup;
pub mod cli;
pub mod controller;
pub mod decoded;
pub mod executor;
pub mod executor_mode;
pub mod go_duration;
pub mod health;
pub mod history;
pub mod http_server;
pub mod ident;
pub mod job_event;
pub mod kubeapi;
pub mod leader;
pub mod logging;
pub mod mask;
pub mod metrics;
pub mod outcome;
pub mod plan;
#[cfg(test)]
mod proptest_support;
pub mod proxy;
pub mod rate;
pub mod rbac;
pub mod reconcile;
pub mod recorder;
pub mod remote;
pub mod run;
pub mod runner;
pub mod scenario;
pub mod sharding;
pub mod status;
pub mod telemetry;
pub mod template;
pub mod tls;
pub mod toolchain;
pub mod vars;
pub mod watch_errors;
pub mod watches;
