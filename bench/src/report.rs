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

fn error(row: &Value) -> Option<String> {
    row["error"]
        .as_str()
        .or(row["skipped"].as_str())
        .map(|e| e.lines().next().unwrap_or_default().to_string())
}

/// Finds the baseline row matching `row` in `rows` on `keys`.
fn baseline_of<'a>(rows: &'a [Value], row: &Value, keys: &[&str]) -> Option<&'a Value> {
    rows.iter().find(|r| r["binary"] == "baseline" && keys.iter().all(|k| r[*k] == row[*k]))
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
        "Operator at git {}{}; {}; ansible-core {}. Total wall time {:.0} s.\n",
        v["git"].as_str().unwrap_or_default(),
        if v["git_dirty"] == true { " (with local changes)" } else { "" },
        v["ansible_runner"].as_str().unwrap_or_default().replace('\n', " "),
        v["ansible_core"].as_str().unwrap_or_default(),
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
    let has_baseline = r["versions"]["binaries"]["baseline"].is_string();

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
        let extra = if has_baseline { " baseline ÷ ours |" } else { "" };
        let _ = writeln!(
            md,
            "| playbook | binary | median s | p95 s | median ÷ floor median |{extra}\n|---|---|---|---|---|{}",
            if has_baseline { "---|" } else { "" }
        );
        for row in rows {
            let playbook = row["playbook"].as_str().unwrap_or_default();
            if let Some(e) = error(row) {
                let _ = writeln!(
                    md,
                    "| {playbook} | {} | error: {e} | | |",
                    row["binary"].as_str().unwrap_or_default()
                );
                continue;
            }
            let median = f(&row["latency"]["median"]);
            let floor = f(&r["floor"][playbook]["wall"]["median"]);
            let mut line = format!(
                "| {playbook} | {} | {} | {} | {} |",
                row["binary"].as_str().unwrap_or_default(),
                secs(&row["latency"]["median"]),
                secs(&row["latency"]["p95"]),
                ratio(median, floor)
            );
            if has_baseline && row["binary"] == "ours" {
                let b = baseline_of(rows, row, &["playbook"]).map(|b| f(&b["latency"]["median"]));
                let _ = write!(line, " {} |", ratio(b.unwrap_or(f64::NAN), median));
            } else if has_baseline {
                line.push_str(" |");
            }
            let _ = writeln!(md, "{line}");
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
        let extra = if has_baseline { " baseline ÷ ours (time) |" } else { "" };
        let _ = writeln!(
            md,
            "| max-concurrent-reconciles | binary | time to all Successful s | runs/s | p95 completion s | peak operator RSS MiB | peak tree RSS MiB | peak tree PSS MiB | operator CPU s | Ansible CPU s |{extra}\n|---|---|---|---|---|---|---|---|---|---|{}",
            if has_baseline { "---|" } else { "" }
        );
        for row in rows {
            if let Some(e) = error(row) {
                let _ = writeln!(
                    md,
                    "| {} | {} | error: {e} | | | | | | | |",
                    row["concurrency"],
                    row["binary"].as_str().unwrap_or_default()
                );
                continue;
            }
            let mem = &row["memory"];
            let mut line = format!(
                "| {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} |",
                row["concurrency"],
                row["binary"].as_str().unwrap_or_default(),
                secs(&row["wall_seconds"]),
                f(&row["runs_per_second"]),
                secs(&row["completion_latency"]["p95"]),
                mib(&mem["operator_rss_peak_bytes"]),
                mib(&mem["tree_rss_peak_bytes"]),
                mib(&mem["tree_pss_peak_bytes"]),
                secs(&row["operator_cpu_seconds"]),
                secs(&row["children_cpu_seconds"]),
            );
            if has_baseline && row["binary"] == "ours" {
                let b = baseline_of(rows, row, &["concurrency"]).map(|b| f(&b["wall_seconds"]));
                let _ = write!(line, " {} |", ratio(b.unwrap_or(f64::NAN), f(&row["wall_seconds"])));
            } else if has_baseline {
                line.push_str(" |");
            }
            let _ = writeln!(md, "{line}");
        }
        md.push('\n');
    }

    if let Some(rows) = r["scale"].as_array() {
        let _ = writeln!(
            md,
            "### 4. Scale at rest: {} CRs, max-concurrent-reconciles {}, runner `{}`\n",
            s["scale"],
            s["scale_concurrency"],
            s["scale_runner"].as_str().unwrap_or_default()
        );
        let _ = writeln!(
            md,
            "| binary | operator start → all Successful s | operator RSS MiB with no CRs | idle operator RSS MiB (start → end of {} s) | idle operator CPU % | runs while idle | restart → first / all Successful s | peak operator RSS during restart MiB |\n|---|---|---|---|---|---|---|---|",
            s["scale_idle_seconds"]
        );
        for row in rows {
            if let Some(e) = error(row) {
                let _ = writeln!(md, "| {} | {e} | | | | | | |", row["binary"].as_str().unwrap_or_default());
                continue;
            }
            let idle = &row["idle"];
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} → {} | {:.2} | {} | {} / {} | {} |",
                row["binary"].as_str().unwrap_or_default(),
                secs(&row["cold_start_to_all_successful_seconds"]),
                mib(&row["operator_rss_no_crs_bytes"]),
                mib(&idle["operator_rss_start_bytes"]),
                mib(&idle["operator_rss_end_bytes"]),
                f(&idle["operator_cpu_percent"]),
                idle["reconciles_during_idle"],
                secs(&row["restart_to_first_successful_seconds"]),
                secs(&row["restart_to_all_successful_seconds"]),
                mib(&row["restart_memory"]["operator_rss_peak_bytes"]),
            );
        }
        md.push('\n');
    }

    if let Some(breakdown) = r["overhead_breakdown_ms"].as_object() {
        let _ = writeln!(
            md,
            "### Where a single CR's time goes (medians, ms; runtime = create→spawn + runner done→Successful)\n"
        );
        let _ = writeln!(
            md,
            "| playbook | create→watch event | create→Running seen | create→runner spawn | spawn→runner up | runner up→first event | play | stats→runner done | runner done→Successful seen | **runtime** | Ansible | total | floor total |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for (playbook, b) in breakdown {
            let o = &b["operator"];
            let _ = writeln!(
                md,
                "| {playbook} | {} | {} | {} | {} | {} | {} | {} | {} | **{}** | {} | {} | {} |",
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
