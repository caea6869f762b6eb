//! `--record`: after a scenario, its CRs and the objects their runs wrote (from the run records),
//! read again and written beside the scenario as an `assert` step ([`crate::scenario::record`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::discovery::{ApiGroup, Scope};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::stage::Stage;
use crate::reconcile::annotations::RECONCILE_REQUESTED;
use crate::scenario::{Scenario, record};

/// How long the CRs' runs in flight are waited for before they are recorded as they are.
const SETTLE: Duration = Duration::from_secs(60);

impl Stage<'_> {
    /// Writes the file; where it went and how many objects it holds.
    pub async fn record(&self, scenario: &Scenario) -> Result<(PathBuf, usize), String> {
        let mut objects = self.settled_crs().await;
        for cr in &mut objects {
            // When the scenario last asked for a run: a time, new each time.
            if let Some(annotations) = cr["metadata"]["annotations"].as_object_mut() {
                annotations.remove(RECONCILE_REQUESTED);
            }
        }
        let runs = self.history.all_runs(Some(self.namespace)).await.map_err(|error| error.to_string())?;
        // Each object written (group, kind or resource, namespace, name), oldest run first.
        let mut written = BTreeSet::new();
        for run in runs.iter().rev() {
            for object in run["spec"]["objects"].as_array().into_iter().flatten() {
                let text = |key: &str| object[key].as_str().unwrap_or_default().to_string();
                let key = (
                    text("group"),
                    text("kind"),
                    object["namespace"].as_str().map(String::from),
                    text("name"),
                );
                match object["verb"] == "delete" {
                    true => written.remove(&key),
                    false => written.insert(key),
                };
            }
        }
        let mut groups: BTreeMap<String, Option<ApiGroup>> = BTreeMap::new();
        let mut gone = Vec::new();
        for (group, kind, namespace, name) in written {
            if objects.iter().any(|known| known["kind"] == kind && known["metadata"]["name"] == name) {
                continue;
            }
            if !groups.contains_key(&group) {
                groups.insert(group.clone(), kube::discovery::group(self.client, &group).await.ok());
            }
            let found = groups[&group].as_ref().and_then(|api_group| {
                let resources = api_group.recommended_resources();
                resources.into_iter().find(|(resource, _)| resource.kind == kind || resource.plural == kind)
            });
            let Some((resource, capabilities)) = found else { continue };
            let api: Api<DynamicObject> = match (&capabilities.scope, &namespace) {
                (Scope::Namespaced, Some(namespace)) => {
                    Api::namespaced_with(self.client.clone(), namespace, &resource)
                }
                _ => Api::all_with(self.client.clone(), &resource),
            };
            match api.get_opt(&name).await {
                Ok(Some(object)) => {
                    let mut object = serde_json::to_value(object).unwrap_or_default();
                    object["apiVersion"] = json!(resource.api_version);
                    object["kind"] = json!(resource.kind);
                    objects.push(object);
                }
                Ok(None) => gone.push(format!("{}/{name}", resource.kind)),
                Err(error) => return Err(format!("read {}/{name}: {error}", resource.kind)),
            }
        }
        let cleaned: Vec<Value> =
            objects.iter().map(|object| record::clean(object, self.namespace)).collect();
        let file = match scenario.is_molecule() {
            true => scenario.path.join("recorded.yaml"),
            false => scenario.path.with_extension("recorded.yaml"),
        };
        std::fs::write(&file, record::render(&scenario.name, self.namespace, &cleaned, &gone))
            .map_err(|error| format!("write {}: {error}", file.display()))?;
        Ok((file, cleaned.len()))
    }

    /// The CRs once none has a run in flight (`Running` with reason `Running`), or as they are
    /// after [`SETTLE`].
    async fn settled_crs(&self) -> Vec<Value> {
        let deadline = Instant::now() + SETTLE;
        loop {
            let crs = self.crs().await;
            let running = crs.iter().any(|cr| {
                let conditions = cr["status"]["conditions"].as_array().into_iter().flatten();
                conditions.into_iter().any(|c| c["type"] == "Running" && c["reason"] == "Running")
            });
            if !running || Instant::now() >= deadline {
                return crs;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
