//! Every integration test, in one test binary: the shared `support` module and the dependencies'
//! generic code are compiled and linked once instead of once per file (44 files took 5.7 minutes to
//! build, most of it the same code again). Each file is a module: `cargo test --test suite --
//! core::` runs `tests/core.rs`, as `cargo test --test core` did; `hack/test-lanes.sh` runs the
//! modules in lanes, one module at a time in each lane.

mod support;

mod admission;
mod api;
mod console;
mod conversion;
mod core;
mod deploy_manifests;
mod endpoints;
mod etcd_cluster;
mod etcd_restore;
mod events;
mod executor;
mod extra_vars;
mod faults;
mod finalizers;
mod harness;
mod history;
mod in_cluster;
mod injection;
mod kubernetes_cluster;
mod leader;
mod least_privilege;
mod modes;
mod module_graph;
mod newest_toolchain_image;
mod node;
mod operations;
mod ownership;
mod pause;
mod plan;
mod plan_dry_run;
mod pod_modules;
mod proposed_permissions;
mod proxy;
mod read_set;
mod ready_conditions;
mod replay;
mod requeue;
mod samples;
mod scaffold;
mod secrets_masked;
mod security_access;
mod security_inventory;
mod security_vars;
mod sharding;
mod ssh;
mod startup_resync;
mod status_and_filters;
mod storm;
mod test_command;
mod toolchain;
mod traces;
mod watches_errors;
