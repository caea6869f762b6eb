//! One scenario step against the cluster: each action, its wait, and what it reports when the
//! wait runs out.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::context::{LOG_LINES, failed, record_name, tail};
use super::stage::{Miss, Stage, in_object, until};
use crate::reconcile::annotations::{RECONCILE_REQUESTED, ReconcileRequest};
use crate::scenario::cel::{self, Verdict};
use crate::scenario::matching::differences;
use crate::scenario::{Action, Plan, Runs, Step, name_of};

/// The field manager of what scenarios apply.
const FIELD_MANAGER: &str = "ansible-operator-test";
/// Who asks for the runs of `idempotent` steps, in the run records.
const REQUESTER: &str = "ansible-operator test";
impl Stage<'_> {
    /// Runs `step`; `change` is when the newest step that changes something started (for `runs`).
    pub async fn run(&self, step: &Step, change: Timestamp) -> Result<(), String> {
        let timeout = step.timeout;
        match &step.action {
            Action::Apply(objects) => {
                for object in objects {
                    until(timeout, || self.apply(object)).await?;
                }
                Ok(())
            }
            Action::Assert { objects, cel } => until(timeout, || self.assert(objects, cel)).await,
            Action::Absent(objects) => until(timeout, || self.absent(objects)).await,
            Action::Patch(objects) => {
                for object in objects {
                    until(timeout, || self.patch(object)).await?;
                }
                Ok(())
            }
            Action::Delete(objects) => {
                for object in objects {
                    until(timeout, || self.delete(object)).await?;
                }
                until(timeout, || self.absent(objects)).await
            }
            Action::Idempotent(objects) => {
                for object in objects {
                    self.idempotent(object, timeout).await?;
                }
                Ok(())
            }
            Action::Runs(runs) => until(timeout, || self.runs(runs, change)).await,
            Action::Plan(plan) => self.plan(plan, timeout).await,
            Action::Verify(playbook) => self.verify(playbook, timeout).await,
            Action::Molecule(molecule) => self.molecule(molecule, timeout).await,
            // Reported as skipped, not run.
            Action::NotHere(_) => Ok(()),
        }
    }

    pub(super) async fn apply(&self, object: &Value) -> Result<(), Miss> {
        let (api, name) = self.api(object).await?;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(&name, &params, &Patch::Apply(object)).await.map_err(|error| in_object(object, error))?;
        Ok(())
    }

    async fn patch(&self, object: &Value) -> Result<(), Miss> {
        let (api, name) = self.api(object).await?;
        api.patch(&name, &PatchParams::default(), &Patch::Merge(object))
            .await
            .map_err(|error| in_object(object, error))?;
        Ok(())
    }

    pub(super) async fn delete(&self, object: &Value) -> Result<(), Miss> {
        let (api, name) = self.api(object).await?;
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(in_object(object, error)),
        }
    }

    pub(super) async fn assert(&self, objects: &[Value], expressions: &[String]) -> Result<(), Miss> {
        let mut seen = Vec::new();
        for object in objects {
            let (api, name) = self.api(object).await?;
            match api.get_opt(&name).await.map_err(|error| in_object(object, error))? {
                None => seen.push(format!("{}: not found", name_of(object))),
                Some(actual) => {
                    let actual = serde_json::to_value(actual).unwrap_or_default();
                    let mut lines: Vec<String> =
                        differences(object, &actual).iter().map(|d| format!("  {d}")).collect();
                    for expression in expressions {
                        match cel::evaluate(expression, &actual) {
                            Verdict::Holds => {}
                            Verdict::NotYet(why) => lines.push(format!("  {why}")),
                            Verdict::NotBool(why) => return Err(Miss::Fatal(why)),
                        }
                    }
                    if !lines.is_empty() {
                        seen.push(format!("{} differs:\n{}", name_of(object), lines.join("\n")));
                    }
                }
            }
        }
        match seen.is_empty() {
            true => Ok(()),
            false => Err(Miss::Again(seen.join("\n"))),
        }
    }

    async fn absent(&self, objects: &[Value]) -> Result<(), Miss> {
        let mut present = Vec::new();
        for object in objects {
            let (api, name) = self.api(object).await?;
            if let Some(found) = api.get_opt(&name).await.map_err(|error| in_object(object, error))? {
                let finalizers = found.metadata.finalizers.unwrap_or_default();
                present.push(match finalizers.is_empty() {
                    true => format!("{} still exists", name_of(object)),
                    false => {
                        format!("{} still exists (finalizers: {})", name_of(object), finalizers.join(", "))
                    }
                });
            }
        }
        match present.is_empty() {
            true => Ok(()),
            false => Err(Miss::Again(present.join("\n"))),
        }
    }

    /// Asks for a run of the CR now; that run must succeed and change nothing.
    async fn idempotent(&self, object: &Value, timeout: Duration) -> Result<(), String> {
        let cr = until(timeout, || async {
            let (api, name) = self.api(object).await?;
            let found = api.get_opt(&name).await.map_err(|error| in_object(object, error))?;
            found.map(|cr| (api, cr)).ok_or_else(|| Miss::Again(format!("{}: not found", name_of(object))))
        })
        .await?;
        let (api, cr) = cr;
        let uid = cr.metadata.uid.clone().unwrap_or_default();
        let namespace = cr.metadata.namespace.clone();
        let before: Vec<String> =
            self.records(&uid, namespace.as_deref()).await?.iter().map(record_name).collect();
        let request = ReconcileRequest { at: Timestamp::now().to_string(), by: REQUESTER.to_string() };
        let value = serde_json::to_string(&request).unwrap_or_default();
        let patch = json!({"metadata": {"annotations": {(RECONCILE_REQUESTED): value}}});
        let name = name_of(object);
        api.patch(
            cr.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(|error| format!("{name}: ask for a run: {error}"))?;
        let record = until(timeout, || async {
            let records = self.records(&uid, namespace.as_deref()).await.map_err(Miss::Again)?;
            records
                .into_iter()
                .find(|record| {
                    !before.contains(&record_name(record)) && record["spec"]["trigger"]["by"] == REQUESTER
                })
                .ok_or_else(|| Miss::Again(format!("{name}: the run asked for has not ended")))
        })
        .await?;
        let spec = &record["spec"];
        if spec["result"] != "Successful" {
            return Err(format!("{name}: the run asked for ended {}{}", spec["result"], failed(&record)));
        }
        let changed: Vec<String> = spec["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|task| task["status"] == "changed")
            .map(|task| {
                format!(
                    "  {} ({})",
                    task["name"].as_str().unwrap_or_default(),
                    task["host"].as_str().unwrap_or_default()
                )
            })
            .collect();
        match (spec["ansibleResult"]["changed"].as_u64().unwrap_or(0), changed.is_empty()) {
            (0, true) => Ok(()),
            (count, _) => Err(format!(
                "{name} is not idempotent: its next run changed {count} task(s):\n{}",
                changed.join("\n")
            )),
        }
    }

    /// The CR's runs since `change`, against what the step expects.
    async fn runs(&self, runs: &Runs, change: Timestamp) -> Result<(), Miss> {
        let (api, name) = self.api(&runs.object).await?;
        let Some(cr) = api.get_opt(&name).await.map_err(|error| in_object(&runs.object, error))? else {
            return Err(Miss::Again(format!("{}: not found", name_of(&runs.object))));
        };
        let uid = cr.metadata.uid.unwrap_or_default();
        let records = self.records(&uid, cr.metadata.namespace.as_deref()).await.map_err(Miss::Again)?;
        let since: Vec<&Value> = records
            .iter()
            .filter(|record| {
                record["spec"]["startTime"]
                    .as_str()
                    .and_then(|t| t.parse::<Timestamp>().ok())
                    .is_some_and(|t| t >= change)
            })
            .collect();
        let results: Vec<&str> = since.iter().map(|r| r["spec"]["result"].as_str().unwrap_or("?")).collect();
        let seen =
            format!("{}: {} run(s) since the last change: {results:?}", name_of(&runs.object), since.len());
        let wanted = runs.count.unwrap_or(1) as usize;
        if since.len() < wanted {
            return Err(Miss::Again(seen));
        }
        if runs.count.is_some_and(|count| since.len() as u64 != count) {
            return Err(Miss::Fatal(format!("{seen}; wanted {wanted}")));
        }
        match &runs.result {
            Some(result) if results.iter().any(|r| r != result) => {
                let last = since
                    .iter()
                    .find(|r| r["spec"]["result"] != result.as_str())
                    .map(|r| failed(r))
                    .unwrap_or_default();
                Err(Miss::Fatal(format!("{seen}; wanted each {result}{last}")))
            }
            _ => Ok(()),
        }
    }

    /// Plans the proposed CR's spec against the live CR and matches the plan with what is expected.
    async fn plan(&self, plan: &Plan, timeout: Duration) -> Result<(), String> {
        let name = name_of(&plan.object);
        let api_version = plan.object["apiVersion"].as_str().unwrap_or_default();
        let kind = self
            .kinds
            .iter()
            .find(|kind| {
                kind.resource.api_version == api_version && kind.resource.kind == plan.object["kind"]
            })
            .ok_or_else(|| format!("{name} ({api_version}) is not a kind the operator watches"))?;
        let api = self.kind_api(kind);
        let cr_name = plan.object["metadata"]["name"].as_str().unwrap_or_default();
        let live = until(timeout, || async {
            let found = api.get_opt(cr_name).await.map_err(|error| in_object(&plan.object, error))?;
            found.ok_or_else(|| Miss::Again(format!("{name}: not found")))
        })
        .await?;
        let spec = plan.object.get("spec").cloned().unwrap_or_else(|| json!({}));
        let planned =
            tokio::time::timeout(timeout, kind.planner.plan(&live, spec, REQUESTER)).await.map_err(|_| {
                format!("the plan of {name} did not end in {}", crate::go_duration::format(timeout))
            })?;
        let found = differences(&plan.expect, &serde_json::to_value(&planned).unwrap_or_default());
        if found.is_empty() {
            return Ok(());
        }
        let lines: Vec<String> = found.iter().map(|d| format!("  {d}")).collect();
        let message = planned.message.as_deref().map(|m| format!("\n{m}")).unwrap_or_default();
        Err(format!(
            "the plan of {name} differs:\n{}\nthe plan ({}):\n{}{message}",
            lines.join("\n"),
            planned.result,
            crate::plan::render(&planned.plan).trim_end()
        ))
    }

    /// Runs the playbook with `ansible-playbook` on localhost, given the scenario's namespace.
    async fn verify(&self, playbook: &Path, timeout: Duration) -> Result<(), String> {
        // The playbook's own interpreter on localhost, as the operator's runs have it.
        let vars = json!({
            "namespace": self.namespace,
            "scenario_dir": self.dir,
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        });
        let args = ["-i", "localhost,", "-c", "local", "-e", &vars.to_string()].map(OsString::from);
        ansible_playbook(playbook, &args, &[], timeout).await
    }

    async fn records(&self, uid: &str, namespace: Option<&str>) -> Result<Vec<Value>, String> {
        self.history.runs(uid, namespace).await.map_err(|error| format!("read the run records: {error}"))
    }
}

/// Runs `ansible-playbook PLAYBOOK ARGS` with `env` added to this process's, for at most `timeout`;
/// when it fails, the tail of what it printed.
pub(super) async fn ansible_playbook(
    playbook: &Path,
    args: &[OsString],
    env: &[(String, String)],
    timeout: Duration,
) -> Result<(), String> {
    let mut command = tokio::process::Command::new("ansible-playbook");
    command
        .arg(playbook)
        .args(args)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .env("ANSIBLE_FORCE_COLOR", "false")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(timeout, command.output())
        .await
        .map_err(|_| {
            format!("{} did not end in {}", playbook.display(), crate::go_duration::format(timeout))
        })?
        .map_err(|error| format!("start ansible-playbook: {error}"))?;
    match output.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{} failed ({}):\n{}",
            playbook.display(),
            output.status,
            tail(&String::from_utf8_lossy(&output.stdout), LOG_LINES)
        )),
    }
}
