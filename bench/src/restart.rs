//! The restart scenario: converged CRs, the operator stopped and started again, and one new CR
//! created 2 s after the start. Per flavor and `--startup-resync` mode: the new CR's create →
//! `Successful`, the runs started in the first `window`, the API server's requests per second over
//! the window, the CPU of the operator and of its tree, and their memory at the end of the window.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use crate::cluster;
use crate::now;
use crate::operator::{Flavor, Launch, Operator};
use crate::procfs::{TreeCpu, TreeMemory};
use crate::scenarios::{Ctx, await_all, last_successful};
use crate::watch::Tracker;

/// Our operator's `--startup-resync` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Every CR is reconciled on start (upstream's contract).
    All,
    /// Only CRs that are not converged run on start; converged ones at their next period.
    Due,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::All => "all",
            Mode::Due => "due",
        }
    }
}

/// The operator flag the modes are passed as.
pub const STARTUP_RESYNC_FLAG: &str = "--startup-resync";

/// What the scenario measures.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Our operator's modes, in order (the baseline has upstream's behaviour only: `all`).
    pub modes: Vec<Mode>,
    /// The window after the start over which runs, API requests and CPU are counted.
    pub window: Duration,
    /// How long the new CR is waited for after its create before it is reported as not yet
    /// `Successful` (upstream queues it behind every start-up reconcile).
    pub new_cr_limit: Duration,
}

/// How long after the operator's start the new CR is created.
pub const NEW_CR_AFTER: Duration = Duration::from_secs(2);
/// How long the API server's request rate is sampled with no operator running, before each start.
pub const BACKGROUND: Duration = Duration::from_secs(10);
/// How long nothing may progress before the scenario gives up.
const STALL: Duration = Duration::from_secs(120);

/// A namespace whose CRs are all `Successful`, with the watch on it and how its operator runs.
pub struct Converged<'a> {
    pub api: &'a Api<DynamicObject>,
    pub tracker: &'a Tracker,
    /// The converged CRs (the new CR of each mode joins them once `Successful`).
    pub crs: Vec<String>,
    pub launch: &'a Launch<'a>,
    /// Log name prefix.
    pub label: &'a str,
}

/// How `flavor` runs `mode`: the flags to add, or why it cannot; and a note for the report.
pub fn mode_args(flavor: &Flavor, mode: Mode) -> Result<(Vec<String>, Option<&'static str>), String> {
    if flavor.executor.is_none() {
        return match mode {
            Mode::All => Ok((Vec::new(), Some("upstream's behaviour: every CR is reconciled on start"))),
            Mode::Due => Err("the baseline has only upstream's behaviour (all)".into()),
        };
    }
    if flavor.knows(STARTUP_RESYNC_FLAG) {
        return Ok((vec![format!("{STARTUP_RESYNC_FLAG}={}", mode.as_str())], None));
    }
    match mode {
        Mode::All => Ok((Vec::new(), Some("binary without --startup-resync: its only behaviour, all"))),
        Mode::Due => Err(format!(
            "{} has no {STARTUP_RESYNC_FLAG} flag (not in `run --help`): build the operator with it",
            flavor.binary.display()
        )),
    }
}

/// The modes `flavor` runs: ours each of `plan.modes`, the baseline `all` only.
fn modes(flavor: &Flavor, plan: &Plan) -> Vec<Mode> {
    if flavor.executor.is_some() { plan.modes.clone() } else { vec![Mode::All] }
}

/// Runs every mode of `plan` for `flavor` on `converged`, whose operator is `operator` (stopped
/// first). Returns one row per mode.
pub async fn restarts(
    ctx: &Ctx,
    flavor: &Flavor,
    plan: &Plan,
    mut converged: Converged<'_>,
    operator: Operator,
) -> Value {
    let mut previous = Some((operator, format!("{}-first", converged.label)));
    let mut rows = Vec::new();
    let modes = modes(flavor, plan);
    for (i, &mode) in modes.iter().enumerate() {
        let last = i + 1 == modes.len();
        if let Some((mut operator, log)) = previous.take() {
            operator.stop(Duration::from_secs(30));
            ctx.keep_log(&operator, &log);
        }
        let label = format!("{}-restart-{}", converged.label, mode.as_str());
        let mut row = match mode_args(flavor, mode) {
            Err(reason) => json!({"error": reason}),
            Ok((args, note)) => {
                let mut launch = converged.launch.clone();
                launch.args.extend(args);
                match restart_once(ctx, flavor, plan, &mut converged, &launch, mode, last).await {
                    Ok((row, operator)) => {
                        previous = Some((operator, label));
                        let mut row = row;
                        row["note"] = json!(note);
                        row
                    }
                    Err((error, operator)) => {
                        if let Some(mut operator) = operator {
                            operator.stop(Duration::from_secs(30));
                            ctx.keep_log(&operator, &label);
                        }
                        json!({"error": format!("{error:#}")})
                    }
                }
            }
        };
        row["binary"] = json!(flavor.label);
        row["mode"] = json!(mode.as_str());
        row["window_seconds"] = json!(plan.window.as_secs_f64());
        rows.push(row);
    }
    if let Some((mut operator, log)) = previous.take() {
        operator.stop(Duration::from_secs(30));
        ctx.keep_log(&operator, &log);
    }
    Value::Array(rows)
}

type Failed = (anyhow::Error, Option<Operator>);

/// One restart with `launch`: the background API rate with no operator, then the start, the new
/// CR 2 s later, the window, the new CR (for at most `plan.new_cr_limit`), and, unless this is
/// the `last` restart on these CRs, the wait until they are settled again (every one `Successful`
/// again for `all`, none running for `due`). Returns the row and the running operator.
async fn restart_once(
    ctx: &Ctx,
    flavor: &Flavor,
    plan: &Plan,
    converged: &mut Converged<'_>,
    launch: &Launch<'_>,
    mode: Mode,
    last: bool,
) -> Result<(Value, Operator), Failed> {
    let fail = |error: anyhow::Error| (error, None);
    let client: &Client = &ctx.client;
    let total = |counts: &BTreeMap<String, f64>| counts.values().sum::<f64>();
    let background_start = cluster::api_requests(client).await.map_err(fail)?;
    let background_at = now();
    tokio::time::sleep(BACKGROUND).await;
    let before = cluster::api_requests(client).await.map_err(fail)?;
    let background = (total(&before) - total(&background_start)) / (now() - background_at);

    let mut operator = Operator::start(flavor, launch, &ctx.kubeconfig, &ctx.repo).map_err(fail)?;
    let started = operator.started;
    let cpu_before = TreeCpu::read(operator.pid());
    let result = async {
        tokio::time::sleep_until(instant_at(started + NEW_CR_AFTER.as_secs_f64())).await;
        operator.check_alive()?;
        let fresh = format!("fresh-{}-{}", mode.as_str(), converged.crs.len());
        let created = now();
        cluster::create_cr(converged.api, &fresh, converged.crs.len()).await?;
        let end = started + plan.window.as_secs_f64();
        while now() < end {
            operator.check_alive()?;
            tokio::time::sleep_until(instant_at(end.min(now() + 1.0))).await;
        }
        let after = cluster::api_requests(client).await?;
        let requests = total(&after) - total(&before);
        let top: Vec<Value> = cluster::counter_deltas(&before, &after, 10)
            .into_iter()
            .map(|(labels, requests)| json!({"labels": labels, "requests": requests}))
            .collect();
        let window = now() - started;
        let cpu = TreeCpu::read(operator.pid()).since(cpu_before);
        let memory = TreeMemory::read(operator.pid(), true).unwrap_or_default();
        let tracks = converged.tracker.get_all(&converged.crs);
        let runs: usize = tracks.iter().map(|t| t.runs_between(started, end)).sum();
        let completions: usize =
            tracks.iter().map(|t| t.completions.iter().filter(|at| (started..=end).contains(*at)).count()).sum();
        let fresh_done = await_new_cr(converged.tracker, &fresh, created, plan.new_cr_limit, &mut operator).await?;
        let fresh_seconds = converged.tracker.get(&fresh).successful_since(created).unwrap_or(f64::NAN) - created;
        let operators = std::slice::from_mut(&mut operator);
        match mode {
            _ if last => {}
            Mode::All => await_all(converged.tracker, &converged.crs, started, operators, STALL).await.map(drop)?,
            Mode::Due => settle(converged.tracker, &converged.crs, &mut operators[0]).await?,
        };
        let done = if last { f64::NAN } else { last_successful(converged.tracker, &converged.crs, started) };
        let n = converged.crs.len();
        eprintln!(
            "bench: restart ({} {}): new CR Successful in {fresh_seconds:.2} s; {runs} runs started in {:.0} s; {:.1} API req/s",
            flavor.label,
            mode.as_str(),
            plan.window.as_secs_f64(),
            requests / window
        );
        if fresh_done {
            converged.crs.push(fresh);
        }
        Ok(json!({
            "new_cr_limit_seconds": plan.new_cr_limit.as_secs_f64(),
            "settled": !last,
            "converged_crs": n,
            "new_cr_to_successful_seconds": fresh_seconds,
            "runs_started": runs,
            "runs_started_percent": runs as f64 / n as f64 * 100.0,
            "completions": completions,
            "api_requests_per_second": requests / window,
            "api_requests_per_second_background": background,
            "api_requests": requests,
            "api_requests_top": top,
            "operator_cpu_seconds": cpu.root,
            "tree_cpu_seconds": cpu.root + cpu.descendants,
            "memory_at_window_end": memory.json(),
            "last_run_done_seconds": if done.is_finite() { done - started } else { f64::NAN },
        }))
    }
    .await;
    match result {
        Ok(row) => Ok((row, operator)),
        Err(error) => Err((error, Some(operator))),
    }
}

/// Waits until the new CR `name` is `Successful`, for at most `limit` after `created`; false when it
/// is not by then.
async fn await_new_cr(
    tracker: &Tracker,
    name: &String,
    created: f64,
    limit: Duration,
    operator: &mut Operator,
) -> anyhow::Result<bool> {
    let names = std::slice::from_ref(name);
    while now() < created + limit.as_secs_f64() {
        if tracker.wait_successful(names, created, Duration::from_millis(500)).await == 1 {
            return Ok(true);
        }
        operator.check_alive()?;
    }
    Ok(false)
}

/// Waits until no CR of `names` has a run in progress.
async fn settle(tracker: &Tracker, names: &[String], operator: &mut Operator) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + STALL;
    while tracker.count_running(names) > 0 {
        operator.check_alive()?;
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("{} CRs still running after {STALL:?}", tracker.count_running(names));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// The tokio instant at Unix time `at` (now when it has passed).
fn instant_at(at: f64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs_f64((at - now()).max(0.0))
}

/// The rows of one flavor's restart scenario for the report: `rows` from [`restarts`], each with
/// where its CRs converged (`converged_by`) and how long that took (from `scale_row`); an error
/// row when the CRs never converged.
pub fn rows_for(label: &str, scale_row: &Value, rows: Value, converged_by: &str) -> Vec<Value> {
    let Value::Array(rows) = rows else {
        let error = scale_row["error"].as_str().unwrap_or("no restart ran");
        return vec![json!({"binary": label, "error": format!("converging: {error}")})];
    };
    rows.into_iter()
        .map(|mut row| {
            row["converged_by"] = json!(converged_by);
            row["converge_seconds"] = scale_row["first_start_to_all_successful_seconds"].clone();
            row
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::json;

    use super::{Mode, mode_args, rows_for};
    use crate::operator::{Executor, Flavor};

    fn flavor(executor: Option<Executor>, flags: &[&str]) -> Flavor {
        Flavor {
            label: executor.map_or("baseline", Executor::as_str).into(),
            executor,
            binary: PathBuf::from("/bin/op"),
            venv: PathBuf::new(),
            proxy_port: 0,
            runner_dir_flag: true,
            flags: flags.iter().map(|f| f.to_string()).collect(),
            extra_args: Vec::new(),
        }
    }

    #[test]
    fn startup_resync_is_passed_only_to_a_binary_of_ours_that_lists_it() {
        let new = flavor(Some(Executor::Warm), &["--startup-resync"]);
        assert_eq!(mode_args(&new, Mode::Due), Ok((vec!["--startup-resync=due".to_string()], None)));
        assert_eq!(mode_args(&new, Mode::All), Ok((vec!["--startup-resync=all".to_string()], None)));
        let old = flavor(Some(Executor::Cold), &[]);
        assert!(mode_args(&old, Mode::All).is_ok_and(|(args, note)| args.is_empty() && note.is_some()));
        assert!(mode_args(&old, Mode::Due).is_err_and(|e| e.contains("/bin/op has no --startup-resync")));
        let baseline = flavor(None, &["--startup-resync"]);
        assert!(mode_args(&baseline, Mode::All).is_ok_and(|(args, _)| args.is_empty()));
        assert!(mode_args(&baseline, Mode::Due).is_err());
    }

    #[test]
    fn restart_rows_say_where_the_crs_converged_or_why_they_did_not() {
        let scale = json!({"first_start_to_all_successful_seconds": 12.5});
        let rows = rows_for("warm", &scale, json!([{"mode": "all"}, {"mode": "due"}]), "scale");
        assert_eq!(rows.len(), 2);
        assert_eq!((&rows[1]["converged_by"], &rows[1]["converge_seconds"]), (&json!("scale"), &json!(12.5)));
        let failed =
            rows_for("cold", &json!({"error": "stalled at 3/40"}), serde_json::Value::Null, "restart");
        assert_eq!(failed, vec![json!({"binary": "cold", "error": "converging: stalled at 3/40"})]);
    }
}
