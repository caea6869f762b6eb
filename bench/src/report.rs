//! The Markdown report, rendered from the results JSON.

use std::fmt::Write;

use serde_json::Value;

const MIB: f64 = 1024.0 * 1024.0;

fn f(value: &Value) -> f64 {
    value.as_f64().unwrap_or(f64::NAN)
}

fn secs(value: &Value) -> String {
    let v = f(value);
    if v.is_finite() { format!("{v:.2}") } else { "–".into() }
}

fn mib(value: &Value) -> String {
    let v = f(value);
    if v.is_finite() && v > 0.0 { format!("{:.1}", v / MIB) } else { "–".into() }
}

fn ms(value: &Value) -> String {
    let v = f(value);
    if v.is_finite() { format!("{v:.0}") } else { "–".into() }
}

fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 { format!("{:.2}×", a / b) } else { "–".into() }
}

fn secs3(value: &Value) -> String {
    let v = f(value);
    if v.is_finite() { format!("{v:.3}") } else { "–".into() }
}

fn error(row: &Value) -> Option<String> {
    row["error"]
        .as_str()
        .or(row["skipped"].as_str())
        .map(|e| e.lines().next().unwrap_or_default().to_string())
}

fn binary(row: &Value) -> &str {
    row["binary"].as_str().unwrap_or_default()
}

/// Finds the row of flavor `binary` matching `row` in `rows` on `keys`.
fn row_of<'a>(rows: &'a [Value], binary: &str, row: &Value, keys: &[&str]) -> Option<&'a Value> {
    rows.iter().find(|r| r["binary"] == binary && keys.iter().all(|k| r[*k] == row[*k]))
}

/// The ratio columns a table gets: "baseline ÷ this" when a baseline ran, "cold ÷ warm" when both
/// of our executors ran. Each compares `metric` (a time: larger is slower) of the matching rows.
struct Ratios {
    baseline: bool,
    cold_warm: bool,
}

impl Ratios {
    fn of(r: &Value) -> Self {
        let ran = |label: &str| r["versions"]["binaries"][label].is_string();
        Self { baseline: ran("baseline"), cold_warm: ran("warm") && ran("cold") }
    }

    /// Header cells and separator cells, each ending in `|`.
    fn header(&self, what: &str) -> (String, String) {
        let mut head = String::new();
        let mut sep = String::new();
        if self.baseline {
            let _ = write!(head, " baseline ÷ this{what} |");
            sep.push_str("---|");
        }
        if self.cold_warm {
            let _ = write!(head, " cold ÷ warm{what} |");
            sep.push_str("---|");
        }
        (head, sep)
    }

    /// The cells for `row`, matching the other flavors' rows on `keys`.
    fn cells(&self, rows: &[Value], row: &Value, keys: &[&str], metric: impl Fn(&Value) -> f64) -> String {
        let mut cells = String::new();
        let this = metric(row);
        let other = |label: &str| row_of(rows, label, row, keys).map_or(f64::NAN, &metric);
        if self.baseline {
            let cell = if binary(row) == "baseline" { String::new() } else { ratio(other("baseline"), this) };
            let _ = write!(cells, " {cell} |");
        }
        if self.cold_warm {
            let cell = if binary(row) == "warm" { ratio(other("cold"), this) } else { String::new() };
            let _ = write!(cells, " {cell} |");
        }
        cells
    }
}

/// The flavors that ran, in order: our executors, then the baseline.
fn flavors(r: &Value) -> String {
    let ours = r["settings"]["executors"].as_array().into_iter().flatten().filter_map(Value::as_str);
    let baseline = r["versions"]["binaries"]["baseline"].is_string().then_some("baseline");
    ours.chain(baseline).map(|label| format!("`{label}`")).collect::<Vec<_>>().join(", ")
}

/// KiB with one decimal, or "–".
fn kib(value: &Value) -> String {
    let v = f(value);
    if v.is_finite() { format!("{v:.1}") } else { "–".into() }
}

/// Scenario 4: one table per size (flavors as rows; the largest size's with the growth per CR),
/// then the at-rest and restart details.
fn scale_tables(md: &mut String, r: &Value, rows: &[Value], ratios: &Ratios) {
    let s = &r["settings"];
    let mut sizes: Vec<u64> = rows.iter().filter_map(|row| row["n"].as_u64()).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let largest = sizes.last().copied();
    let growth = r["scale_growth"].as_array().cloned().unwrap_or_default();
    let growth_of = |label: &str| growth.iter().find(|g| g["binary"] == label).cloned().unwrap_or_default();
    let from_to =
        growth.iter().find(|g| g["from_n"].is_u64()).map(|g| (g["from_n"].clone(), g["to_n"].clone()));
    let playbook = if s["scale_runner"] == "stub" {
        "stub runner".to_string()
    } else {
        format!("playbook `{}`", s["scale_playbook"].as_str().unwrap_or("debug"))
    };
    for n in &sizes {
        let _ = writeln!(
            md,
            "### 4. Scale: {n} CRs from a cold start, max-concurrent-reconciles {}, runner `{}`, {playbook}\n",
            s["scale_concurrency"],
            s["scale_runner"].as_str().unwrap_or_default(),
        );
        let with_growth = Some(*n) == largest && from_to.is_some();
        let (head, sep) = ratios.header(" (time)");
        let (growth_head, growth_sep) = match (&from_to, with_growth) {
            (Some((from, to)), true) => (
                format!(
                    " s per extra CR ({from}→{to}) | operator RSS KiB per extra CR | tree PSS KiB per extra CR |"
                ),
                "---|---|---|",
            ),
            _ => (String::new(), ""),
        };
        let _ = writeln!(
            md,
            "| flavor | operator start → all Successful s | runs/s | operator RSS at rest MiB | tree PSS at rest MiB |{growth_head}{head}\n|---|---|---|---|---|{growth_sep}{sep}"
        );
        let same_n: Vec<Value> = rows.iter().filter(|row| row["n"].as_u64() == Some(*n)).cloned().collect();
        for row in &same_n {
            if let Some(e) = error(row) {
                let _ = writeln!(md, "| {} | {e} | | | |", binary(row));
                continue;
            }
            let growth = if with_growth {
                let g = growth_of(binary(row));
                format!(
                    " {} | {} | {} |",
                    secs3(&g["seconds_per_extra_cr"]),
                    kib(&g["operator_rss_kib_per_extra_cr"]),
                    kib(&g["tree_pss_kib_per_extra_cr"])
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                md,
                "| {} | {} | {:.2} | {} | {} |{growth}{}",
                binary(row),
                secs(&row["first_start_to_all_successful_seconds"]),
                f(&row["runs_per_second"]),
                mib(&row["at_rest"]["operator_rss_bytes"]),
                mib(&row["at_rest"]["tree_pss_bytes"]),
                ratios.cells(&same_n, row, &["n"], |r| f(&r["first_start_to_all_successful_seconds"])),
            );
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "At rest: {} s after all were `Successful`. With 0 CRs: the operator on the empty namespace, once its memory is steady (for `warm`, with its worker up). Restart: the operator stopped and started again, every CR reconciled once more (\"restart scenario\" when the restart scenario took over that namespace).\n",
        s["scale_idle_seconds"]
    );
    let _ = writeln!(
        md,
        "| CRs | flavor | 0 CRs: operator RSS / tree PSS MiB | idle operator RSS MiB (start → end) | idle CPU % operator / below it | runs while idle | restart → first / all Successful s |\n|---|---|---|---|---|---|---|"
    );
    for row in rows {
        if let Some(e) = error(row) {
            let _ = writeln!(md, "| {} | {} | {e} | | | | |", row["n"], binary(row));
            continue;
        }
        let idle = &row["idle"];
        let restart = if row["restart"].is_string() {
            "restart scenario".to_string()
        } else {
            format!(
                "{} / {}",
                secs(&row["restart_to_first_successful_seconds"]),
                secs(&row["restart_to_all_successful_seconds"])
            )
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} / {} | {} → {} | {} / {} | {} | {restart} |",
            row["n"],
            binary(row),
            mib(&row["no_crs"]["operator_rss_bytes"]),
            mib(&row["no_crs"]["tree_pss_bytes"]),
            mib(&idle["operator_rss_start_bytes"]),
            mib(&idle["operator_rss_end_bytes"]),
            secs(&idle["operator_cpu_percent"]),
            secs(&idle["descendants_cpu_percent"]),
            idle["reconciles_during_idle"],
        );
    }
    md.push('\n');
}

/// The restart table's new-CR cell: its seconds, or how long it was waited for in vain.
fn new_cr(row: &Value) -> String {
    let seconds = f(&row["new_cr_to_successful_seconds"]);
    match row["new_cr_limit_seconds"].as_f64() {
        Some(limit) if !seconds.is_finite() => format!("not yet after {limit:.0}"),
        _ => secs(&row["new_cr_to_successful_seconds"]),
    }
}

/// The restart scenario: one row per flavor and `--startup-resync` mode.
fn restart_table(md: &mut String, s: &Value, rows: &[Value]) {
    let window = f(&s["restart_window_seconds"]);
    let _ = writeln!(
        md,
        "### Restart: {} converged CRs, the operator restarted, a new CR created {} s after its start; window {window:.0} s\n",
        s["restart_crs"], s["restart_new_cr_after_seconds"],
    );
    let _ = writeln!(
        md,
        "Runs started: `Running` became True with reason `Running` on a converged CR within the window. API req/s: the kube-apiserver's `apiserver_request_total` (all clients) over the window; in brackets over {} s with no operator just before. CPU over the window; memory at its end. Settled: the last run after the start `Successful`.\n",
        s["restart_background_seconds"]
    );
    let _ = writeln!(
        md,
        "| flavor | startup resync | new CR create → Successful s | runs started in window (% of converged) | API req/s (no operator) | operator CPU s | tree CPU s | operator RSS MiB | tree PSS MiB | settled after s |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for row in rows {
        let mode = row["mode"].as_str().unwrap_or_default();
        if let Some(e) = error(row) {
            let _ = writeln!(md, "| {} | {mode} | {e} | | | | | | | |", binary(row));
            continue;
        }
        let memory = &row["memory_at_window_end"];
        let _ = writeln!(
            md,
            "| {} | {mode} | {} | {} ({:.1} %) | {:.1} ({:.1}) | {} | {} | {} | {} | {} |",
            binary(row),
            new_cr(row),
            row["runs_started"],
            f(&row["runs_started_percent"]),
            f(&row["api_requests_per_second"]),
            f(&row["api_requests_per_second_background"]),
            secs(&row["operator_cpu_seconds"]),
            secs(&row["tree_cpu_seconds"]),
            mib(&memory["operator_rss_bytes"]),
            mib(&memory["tree_pss_bytes"]),
            if row["settled"] == false {
                "not waited for (last restart)".into()
            } else {
                secs(&row["last_run_done_seconds"])
            },
        );
    }
    md.push('\n');
    for row in rows.iter().filter(|row| row["note"].is_string()) {
        let _ = writeln!(
            md,
            "> `{}` / `{}`: {}.\n",
            binary(row),
            row["mode"].as_str().unwrap_or_default(),
            row["note"].as_str().unwrap_or_default()
        );
    }
}

/// Renders the report.
pub fn markdown(r: &Value) -> String {
    let mut md = String::new();
    let m = &r["machine"];
    let load = |v: &Value| {
        v.as_array()
            .map(|a| a.iter().map(|x| format!("{:.2}", f(x))).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    let v = &r["versions"];
    let _ = writeln!(md, "## ansible-operator benchmark ({})\n", r["started"].as_str().unwrap_or_default());
    let _ = writeln!(
        md,
        "Machine: **{} CPUs** ({}), {:.1} GiB, kernel {}. Load average (1/5/15 min) at start: **{}**, at end: **{}**.  ",
        m["cpus"],
        m["cpu_model"].as_str().unwrap_or_default(),
        f(&m["mem_total_bytes"]) / 1024.0 / MIB,
        m["kernel"].as_str().unwrap_or_default(),
        load(&r["machine"]["loadavg"]),
        load(&r["load_end"]),
    );
    let _ = writeln!(
        md,
        "Operator at git {}{}; {}; ansible-core {}. Flavors: {}. Total wall time {:.0} s.\n",
        v["git"].as_str().unwrap_or_default(),
        if v["git_dirty"] == true { " (with local changes)" } else { "" },
        v["ansible_runner"].as_str().unwrap_or_default().replace('\n', " "),
        v["ansible_core"].as_str().unwrap_or_default(),
        flavors(r),
        f(&r["wall_seconds"]),
    );
    // The load at the end includes the benchmark's own runs; only the start says whether other work
    // was competing.
    let cpus = f(&m["cpus"]);
    let before = f(&r["machine"]["loadavg"][0]);
    if before > cpus / 2.0 {
        let _ = writeln!(
            md,
            "> **The machine was busy** (1-minute load {before:.2} on {cpus} CPUs before the benchmark started): \
             other work competed for the CPUs, so times are inflated and noisy.\n"
        );
    }
    let s = &r["settings"];
    let ratios = Ratios::of(r);

    if r["floor"].is_object() {
        let _ =
            writeln!(md, "### 1. Floor: bare `ansible-runner run` ({} runs after a warm-up)\n", s["runs"]);
        let _ = writeln!(md, "| playbook | median s | p95 s | min s | max s |\n|---|---|---|---|---|");
        for (playbook, row) in r["floor"].as_object().into_iter().flatten() {
            match error(row) {
                Some(e) => {
                    let _ = writeln!(md, "| {playbook} | error: {e} | | | |");
                }
                None => {
                    let w = &row["wall"];
                    let _ = writeln!(
                        md,
                        "| {playbook} | {} | {} | {} | {} |",
                        secs(&w["median"]),
                        secs(&w["p95"]),
                        secs(&w["min"]),
                        secs(&w["max"])
                    );
                }
            }
        }
        md.push('\n');
    }

    if let Some(rows) = r["single"].as_array() {
        let _ = writeln!(
            md,
            "### 2. Single CR: create → `Successful` seen by a watch ({} CRs one after another, after a warm-up)\n",
            s["runs"]
        );
        let _ = writeln!(md, "Task adds: this playbook's median minus the same flavor's `debug` median.\n");
        let (head, sep) = ratios.header("");
        let _ = writeln!(
            md,
            "| playbook | flavor | median s | p95 s | median ÷ floor median | task adds s |{head}\n|---|---|---|---|---|---|{sep}"
        );
        let median = |row: &Value| f(&row["latency"]["median"]);
        for row in rows {
            let playbook = row["playbook"].as_str().unwrap_or_default();
            if let Some(e) = error(row) {
                let _ = writeln!(md, "| {playbook} | {} | error: {e} | | | |", binary(row));
                continue;
            }
            let floor = f(&r["floor"][playbook]["wall"]["median"]);
            let adds = if playbook == "debug" {
                String::new()
            } else {
                let debug = rows.iter().find(|d| d["playbook"] == "debug" && d["binary"] == row["binary"]);
                secs3(&debug.map_or(Value::Null, |d| (median(row) - median(d)).into()))
            };
            let _ = writeln!(
                md,
                "| {playbook} | {} | {} | {} | {} | {adds} |{}",
                binary(row),
                secs3(&row["latency"]["median"]),
                secs3(&row["latency"]["p95"]),
                ratio(median(row), floor),
                ratios.cells(rows, row, &["playbook"], median),
            );
        }
        md.push('\n');
        for row in rows.iter().filter(|row| row["follow_up_runs"].as_u64().is_some_and(|n| n > 0)) {
            let _ = writeln!(
                md,
                "> `{}` / `{}`: the watch saw {} follow-up runs (a CR reconciled again after `Successful`), \
                 which overlapped later measurements and may have moved its runner-file milestones.\n",
                row["playbook"].as_str().unwrap_or_default(),
                binary(row),
                row["follow_up_runs"],
            );
        }

        let _ = writeln!(
            md,
            "### Memory at rest: 2 s after each single-CR operator's last run (operator, and for `warm` its worker)\n"
        );
        let _ = writeln!(
            md,
            "| playbook | flavor | operator RSS MiB | tree RSS MiB | tree PSS MiB | processes |\n|---|---|---|---|---|---|"
        );
        for row in rows {
            let rest = &row["at_rest"];
            if !rest.is_object() {
                continue;
            }
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} |",
                row["playbook"].as_str().unwrap_or_default(),
                binary(row),
                mib(&rest["operator_rss_bytes"]),
                mib(&rest["tree_rss_bytes"]),
                mib(&rest["tree_pss_bytes"]),
                rest["tree_processes"],
            );
        }
        md.push('\n');
    }

    if let Some(rows) = r["burst"].as_array() {
        let _ = writeln!(
            md,
            "### 3. Burst: {} CRs created at once, playbook `{}`\n",
            s["burst"],
            s["burst_playbook"].as_str().unwrap_or_default()
        );
        let (head, sep) = ratios.header(" (time)");
        let _ = writeln!(
            md,
            "| max-concurrent-reconciles | flavor | time to all Successful s | runs/s | p95 completion s | peak operator RSS MiB | peak tree RSS MiB | peak tree PSS MiB | operator CPU s | Ansible CPU s (tree − operator) |{head}\n|---|---|---|---|---|---|---|---|---|---|{sep}"
        );
        for row in rows {
            if let Some(e) = error(row) {
                let _ =
                    writeln!(md, "| {} | {} | error: {e} | | | | | | | |", row["concurrency"], binary(row));
                continue;
            }
            let mem = &row["memory"];
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} |{}",
                row["concurrency"],
                binary(row),
                secs(&row["wall_seconds"]),
                f(&row["runs_per_second"]),
                secs(&row["completion_latency"]["p95"]),
                mib(&mem["operator_rss_peak_bytes"]),
                mib(&mem["tree_rss_peak_bytes"]),
                mib(&mem["tree_pss_peak_bytes"]),
                secs(&row["operator_cpu_seconds"]),
                secs(&row["descendants_cpu_seconds"]),
                ratios.cells(rows, row, &["concurrency"], |r| f(&r["wall_seconds"])),
            );
        }
        md.push('\n');
    }

    if let Some(rows) = r["scale"].as_array() {
        scale_tables(&mut md, r, rows, &ratios);
    }

    if let Some(rows) = r["restart"].as_array() {
        restart_table(&mut md, s, rows);
    }

    if let Some(rows) = r["test_command"].as_array() {
        test_command_table(&mut md, rows);
    }

    if let Some(rows) = r["admission"].as_array() {
        let _ = writeln!(md, "### 7. Admission: a three-task validate playbook as a validating webhook\n");
        let _ = writeln!(
            md,
            "Each request a server-side dry-run create (`dryRun=All`) of a valid CR, one at a time after three warm-up ones, timed as the client sees it (the API server, the webhook call, the check-mode run).\n"
        );
        let _ = writeln!(
            md,
            "| binary | requests | median ms | p95 ms | p99 ms | max ms |\n|---|---|---|---|---|---|"
        );
        for row in rows {
            let binary = row["binary"].as_str().unwrap_or_default();
            if let Some(e) = error(row) {
                let _ = writeln!(md, "| {binary} | {e} | | | | |");
                continue;
            }
            let ms = &row["milliseconds"];
            let _ = writeln!(
                md,
                "| {binary} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
                row["requests"],
                f(&ms["median"]),
                f(&ms["p95"]),
                f(&row["p99_ms"]),
                f(&ms["max"])
            );
        }
        let _ = writeln!(md);
    }

    if let Some(rows) = r["sharding"].as_array() {
        let _ = writeln!(
            md,
            "### 5. Sharding: operator processes with `--sharding`, max-concurrent-reconciles {} each\n",
            s["scale_concurrency"]
        );
        let _ = writeln!(
            md,
            "Workload `stub`: the stub runner, `cold` (the runtime alone); `sleep`: one task waiting 2 s, `warm`. Recovery: the last replica SIGKILLed, until its CRs have run on the others (15 s leases).\n"
        );
        let _ = writeln!(
            md,
            "| workload | CRs | replicas | first create → all Successful s | runs/s | CRs per replica | operator RSS MiB per replica | tree RSS MiB per replica | SIGKILLed replica's CRs ran elsewhere after s |\n|---|---|---|---|---|---|---|---|---|"
        );
        for row in rows {
            let workload = row["workload"].as_str().unwrap_or_default();
            if let Some(e) = error(row) {
                let _ = writeln!(md, "| {workload} | {} | {} | {e} | | | | | |", row["crs"], row["replicas"]);
                continue;
            }
            let per_replica = |key: &str, show: fn(&Value) -> String| {
                let values = row[key].as_object().map(|m| m.values().map(show).collect::<Vec<_>>());
                values.unwrap_or_default().join(" / ")
            };
            let recovery = &row["recovery"];
            let recovered = if recovery.is_null() {
                String::new()
            } else {
                format!("{} ({} CRs)", secs(&recovery["seconds"]), recovery["crs"])
            };
            let _ = writeln!(
                md,
                "| {workload} | {} | {} | {} | {:.1} | {} | {} | {} | {recovered} |",
                row["crs"],
                row["replicas"],
                secs(&row["all_successful_seconds"]),
                f(&row["runs_per_second"]),
                per_replica("crs_per_replica", |v| v.to_string()),
                per_replica("operator_rss_bytes", mib),
                per_replica("tree_rss_bytes", mib),
            );
        }
        md.push('\n');
    }

    if let Some(breakdown) = r["overhead_breakdown_ms"].as_array() {
        let _ = writeln!(
            md,
            "### Where a single CR's time goes (medians, ms; runtime = create→spawn + runner done→Successful)\n"
        );
        let _ = writeln!(
            md,
            "For `warm`, \"spawn\" is the request to the worker and \"runner up\" the forked run's ansible-runner code writing its command file.\n"
        );
        let _ = writeln!(
            md,
            "| playbook | flavor | create→watch event | create→Running seen | create→runner spawn | spawn→runner up | runner up→first event | play | stats→runner done | runner done→Successful seen | **runtime** | Ansible | total | floor total |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for b in breakdown {
            let o = &b["operator"];
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | **{}** | {} | {} | {} |",
                b["playbook"].as_str().unwrap_or_default(),
                binary(b),
                ms(&o["create_to_watch_event"]),
                ms(&o["create_to_running_status_seen"]),
                ms(&o["create_to_runner_spawn"]),
                ms(&o["spawn_to_runner_started"]),
                ms(&o["runner_started_to_first_event"]),
                ms(&o["first_event_to_stats"]),
                ms(&o["stats_to_runner_done"]),
                ms(&o["runner_done_to_successful_seen"]),
                ms(&o["runtime_overhead"]),
                ms(&o["ansible"]),
                ms(&o["total"]),
                ms(&b["floor"]["total"]),
            );
        }
        md.push('\n');
    }
    md
}

/// `ansible-operator test` on the memcached scenario, start to verdict.
fn test_command_table(md: &mut String, rows: &[Value]) {
    let _ = writeln!(md, "### 8. `ansible-operator test`: start to verdict\n");
    let _ = writeln!(
        md,
        "The operator in the command's process, memcached's Pods on the local node. `memcached`: tests/scenarios/memcached.yaml (create, assert the Deployment ready, idempotent, scale to 2, runs, delete, absent); goal under 10 s. `molecule`: upstream's scaffold test project (tests/fixtures/memcached-molecule-operator) through `--molecule molecule/default` (a Memcached, a Foo and a Memfin created and `Successful`, the Deployment available, the Memcached deleted through its finalizer).\n"
    );
    let _ = writeln!(md, "| scenario | runs | passed | median s | min s | max s |\n|---|---|---|---|---|---|");
    for row in rows {
        let seconds = &row["seconds"];
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.1} | {:.1} | {:.1} |",
            row["name"].as_str().unwrap_or_default(),
            row["runs"],
            row["passed"],
            f(&seconds["median"]),
            f(&seconds["min"]),
            f(&seconds["max"])
        );
    }
    for failure in rows.iter().flat_map(|row| row["failures"].as_array().into_iter().flatten()) {
        let _ = writeln!(md, "\nfailed: {}", failure.as_str().unwrap_or_default());
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::markdown;

    fn single(playbook: &str, binary: &str, median: f64) -> Value {
        json!({"playbook": playbook, "binary": binary, "latency": {"median": median, "p95": median}})
    }

    fn results() -> Value {
        json!({
            "settings": {"executors": ["warm", "cold"], "runs": 2},
            "versions": {"binaries": {"warm": "/o", "cold": "/o", "baseline": "/u"}},
            "floor": {"debug": {"wall": {"median": 1.0}}, "k8s": {"wall": {"median": 2.0}}},
            "single": [
                single("debug", "warm", 0.25), single("debug", "cold", 1.0), single("debug", "baseline", 1.5),
                single("k8s", "warm", 0.375), single("k8s", "cold", 2.0), single("k8s", "baseline", 3.0),
            ],
        })
    }

    fn line<'a>(md: &'a str, start: &str) -> &'a str {
        md.lines().find(|l| l.starts_with(start)).unwrap_or_default()
    }

    #[test]
    fn single_cr_rows_show_task_cost_and_ratios_to_baseline_and_cold() {
        let md = markdown(&results());
        assert!(
            line(&md, "| playbook | flavor |").ends_with("| task adds s | baseline ÷ this | cold ÷ warm |")
        );
        assert_eq!(
            line(&md, "| k8s | warm |"),
            "| k8s | warm | 0.375 | 0.375 | 0.19× | 0.125 | 8.00× | 5.33× |"
        );
        assert_eq!(line(&md, "| k8s | cold |"), "| k8s | cold | 2.000 | 2.000 | 1.00× | 1.000 | 1.50× |  |");
        assert_eq!(
            line(&md, "| debug | baseline |"),
            "| debug | baseline | 1.500 | 1.500 | 1.50× |  |  |  |"
        );
    }

    #[test]
    fn sharding_rows_list_each_replica_and_the_recovery() {
        let r = json!({
            "settings": {"scale_concurrency": 4},
            "sharding": [
                {"workload": "sleep", "crs": 60, "replicas": 1, "all_successful_seconds": 40.0,
                 "runs_per_second": 1.5, "crs_per_replica": {"replica-0": 60},
                 "operator_rss_bytes": {"replica-0": 20971520}, "tree_rss_bytes": {"replica-0": 125829120}},
                {"workload": "sleep", "crs": 60, "replicas": 3, "all_successful_seconds": 15.0,
                 "runs_per_second": 4.0, "crs_per_replica": {"replica-0": 20, "replica-1": 21, "replica-2": 19},
                 "operator_rss_bytes": {"replica-0": 20971520, "replica-1": 20971520, "replica-2": 20971520},
                 "tree_rss_bytes": {"replica-0": 0, "replica-1": null, "replica-2": 0},
                 "recovery": {"replica": "replica-2", "crs": 19, "seconds": 17.25}},
                {"workload": "stub", "crs": 300, "replicas": 3, "error": "stalled"},
            ],
        });
        let md = markdown(&r);
        assert_eq!(
            line(&md, "| sleep | 60 | 1 |"),
            "| sleep | 60 | 1 | 40.00 | 1.5 | 60 | 20.0 | 120.0 |  |"
        );
        assert_eq!(
            line(&md, "| sleep | 60 | 3 |"),
            "| sleep | 60 | 3 | 15.00 | 4.0 | 20 / 21 / 19 | 20.0 / 20.0 / 20.0 | – / – / – | 17.25 (19 CRs) |"
        );
        assert_eq!(line(&md, "| stub | 300 | 3 |"), "| stub | 300 | 3 | stalled | | | | | |");
    }

    #[test]
    fn without_a_baseline_or_cold_run_there_are_no_ratio_columns() {
        let mut r = results();
        r["versions"]["binaries"] = json!({"warm": "/o"});
        r["single"] = json!([single("debug", "warm", 0.25)]);
        let md = markdown(&r);
        assert!(line(&md, "| playbook | flavor |").ends_with("| task adds s |"));
        assert_eq!(line(&md, "| debug | warm |"), "| debug | warm | 0.250 | 0.250 | 0.25× |  |");
    }

    #[test]
    fn the_largest_scale_size_has_the_growth_per_cr_and_restart_rows_are_flavor_by_mode() {
        let scale = |binary: &str, n: u64, seconds: f64| {
            json!({"binary": binary, "n": n, "first_start_to_all_successful_seconds": seconds,
                   "runs_per_second": n as f64 / seconds,
                   "at_rest": {"operator_rss_bytes": 41943040, "tree_pss_bytes": 136314880},
                   "no_crs": {"operator_rss_bytes": 31457280, "tree_pss_bytes": 125829120}, "idle": {}})
        };
        let r = json!({
            "settings": {"executors": ["warm"], "scale_concurrency": 4, "scale_runner": "real",
                         "scale_playbook": "dependents", "scale_idle_seconds": 60, "restart_crs": 2000,
                         "restart_window_seconds": 300, "restart_new_cr_after_seconds": 2.0,
                         "restart_background_seconds": 10.0},
            "versions": {"binaries": {"warm": "/o", "baseline": "/u"}},
            "scale": [scale("warm", 500, 50.0), scale("baseline", 500, 400.0),
                      scale("warm", 2000, 200.0), scale("baseline", 2000, 1600.0)],
            "scale_growth": [
                {"binary": "warm", "from_n": 500, "to_n": 2000, "seconds_per_extra_cr": 0.1,
                 "operator_rss_kib_per_extra_cr": 4.25, "tree_pss_kib_per_extra_cr": 6.5},
                {"binary": "baseline", "from_n": 500, "to_n": 2000, "seconds_per_extra_cr": 0.8,
                 "operator_rss_kib_per_extra_cr": 30.0, "tree_pss_kib_per_extra_cr": 30.0},
            ],
            "restart": [
                {"binary": "warm", "mode": "all", "new_cr_to_successful_seconds": 3.5, "runs_started": 2000,
                 "runs_started_percent": 100.0, "api_requests_per_second": 120.0,
                 "api_requests_per_second_background": 2.0, "operator_cpu_seconds": 12.0,
                 "tree_cpu_seconds": 250.0, "last_run_done_seconds": 210.0,
                 "memory_at_window_end": {"operator_rss_bytes": 41943040, "tree_pss_bytes": 136314880}},
                {"binary": "warm", "mode": "due", "error": "no --startup-resync"},
                {"binary": "baseline", "mode": "all", "new_cr_to_successful_seconds": null,
                 "new_cr_limit_seconds": 600.0, "settled": false, "runs_started": 300,
                 "runs_started_percent": 15.0, "api_requests_per_second": 20.0,
                 "api_requests_per_second_background": 2.0, "operator_cpu_seconds": 3.0,
                 "tree_cpu_seconds": 500.0, "last_run_done_seconds": null,
                 "memory_at_window_end": {"operator_rss_bytes": 41943040, "tree_pss_bytes": 136314880}},
            ],
        });
        let md = markdown(&r);
        let headers: Vec<&str> = md.lines().filter(|l| l.starts_with("| flavor | operator start")).collect();
        assert_eq!(headers.len(), 2);
        assert!(!headers[0].contains("per extra CR"));
        assert!(headers[1].contains("| s per extra CR (500→2000) | operator RSS KiB per extra CR | tree PSS KiB per extra CR | baseline ÷ this (time) |"));
        assert_eq!(line(&md, "| warm | 50.00 |"), "| warm | 50.00 | 10.00 | 40.0 | 130.0 | 8.00× |");
        assert_eq!(
            line(&md, "| warm | 200.00 |"),
            "| warm | 200.00 | 10.00 | 40.0 | 130.0 | 0.100 | 4.2 | 6.5 | 8.00× |"
        );
        assert_eq!(
            line(&md, "| 2000 | baseline |"),
            "| 2000 | baseline | 30.0 / 120.0 | – → – | – / – | null | – / – |"
        );
        assert_eq!(
            line(&md, "| warm | all |"),
            "| warm | all | 3.50 | 2000 (100.0 %) | 120.0 (2.0) | 12.00 | 250.00 | 40.0 | 130.0 | 210.00 |"
        );
        assert_eq!(line(&md, "| warm | due |"), "| warm | due | no --startup-resync | | | | | | | |");
        assert_eq!(
            line(&md, "| baseline | all |"),
            "| baseline | all | not yet after 600 | 300 (15.0 %) | 20.0 (2.0) | 3.00 | 500.00 | 40.0 | 130.0 | not waited for (last restart) |"
        );
    }
}
