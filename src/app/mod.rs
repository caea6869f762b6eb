//! The program: dispatches subcommands, runs the operator as named steps (wire, serve, take the
//! Lease, run until stopped), and maps failures to upstream's exit codes (1 for every fatal error,
//! 0 after a clean shutdown).

mod lifecycle;
mod plan;
mod rbac;
mod replay;
mod servers;
mod test;
mod version;
mod wiring;

pub use version::{COMMIT, VERSION};

use std::process::ExitCode;

use crate::cli::{Cli, Command, RunArgs};
use crate::watches::Watch;
use wiring::Wiring;

/// Runs the parsed command line and returns the process exit code.
pub fn main(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Version => {
            version::print();
            ExitCode::SUCCESS
        }
        Command::Replay(args) => replay::main(*args),
        Command::Plan(args) => plan::main(&args),
        Command::Rbac(args) => rbac::main(&args),
        Command::Test(args) => test::main(*args),
        Command::Run(args) => {
            crate::logging::init(&args.log);
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("error: start the async runtime: {error}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(run(*args)) {
                Ok(()) => {
                    tracing::info!("exiting");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    // One plain line on stderr, readable with or without a log collector.
                    eprintln!("error: {error:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `ansible-operator run`: wire the parts from the flags, serve until a signal or a lost Lease,
/// and stop the warm worker last (runs in flight may finish during the graceful shutdown).
async fn run(args: RunArgs) -> anyhow::Result<()> {
    let (wired, watches) = wiring::wire(&args).await?;
    let result = serve(&args, &wired, watches, |_| {}).await;
    wired.launcher.stop().await;
    tokio::task::spawn_blocking(crate::telemetry::shutdown).await.ok();
    result
}

/// Starts what every replica runs (metrics, probes, proxy, API), then the controllers once this
/// replica holds its Lease, and runs until a signal or a lost Lease. `built` is handed the kinds as
/// the API serves them once their controllers are built (`ansible-operator test` plans with them).
async fn serve(
    args: &RunArgs,
    wired: &Wiring,
    watches: Vec<Watch>,
    built: impl FnOnce(Vec<crate::api::Kind>),
) -> anyhow::Result<()> {
    servers::serve_endpoints(args, wired).await?;
    tokio::spawn(wired.history.clone().recheck(wired.shutdown.clone()));
    let dependents = wiring::dependents(args, wired);
    let proxy = servers::serve_proxy(args, wired, dependents.clone()).await?;
    let admits = |watch: &&Watch| watch.extensions.validate.is_some() || watch.extensions.convert.is_some();
    let admitting: Vec<Watch> = watches.iter().filter(admits).cloned().collect();
    let controllers = wiring::controllers(wired, watches, &proxy, &dependents).await?;
    built(controllers.iter().map(|controller| controller.kind()).collect());
    servers::serve_api(args, wired, &controllers, &admitting, &proxy).await?;
    if args.max_runner_artifacts_total > 0 {
        tokio::spawn(servers::prune_artifacts(args.runner_dir.clone(), args.max_runner_artifacts_total));
    }
    let Some(lease) = lifecycle::take_lease(wired, &controllers).await? else {
        return Ok(()); // A signal came before the Lease.
    };
    let tasks = lifecycle::start_controllers(wired, controllers);
    lifecycle::run_until_stopped(args, wired, lease, tasks).await
}
