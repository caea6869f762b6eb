//! `--image`: the manager deployed in a molecule scenario's namespace as the scaffold's converge
//! deploys it (the project's `config/testing` overlay, else `config/default`, built by `kubectl
//! kustomize` for the scenario's namespace), with the image given; its cluster-scoped objects
//! removed again after the scenario.

use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use super::stage::{Stage, until};
use crate::scenario::{name_of, objects_file};

/// The overlays the manager is deployed from, in the order looked for.
const OVERLAYS: [&str; 2] = ["config/testing", "config/default"];
/// The scaffold's name for the manager's container.
const MANAGER_CONTAINER: &str = "manager";

impl Stage<'_> {
    /// Builds the project's overlay for the scenario's namespace and applies what it makes (not
    /// the CRDs, which the command applied, nor the namespace), with `image` for the manager's
    /// container; then waits until every Deployment it made is available.
    pub(super) async fn deploy_manager(
        &self,
        project: &Path,
        image: &str,
        timeout: Duration,
    ) -> Result<(), String> {
        let mut objects = self.render(project).await?;
        objects.retain(|object| !["CustomResourceDefinition", "Namespace"].contains(&kind(object)));
        let mut given = 0;
        for deployment in objects.iter_mut().filter(|object| kind(object) == "Deployment") {
            for index in manager_containers(deployment) {
                let container = &mut deployment["spec"]["template"]["spec"]["containers"][index];
                container["image"] = json!(image);
                container["imagePullPolicy"] = json!("IfNotPresent");
                given += 1;
            }
        }
        if given == 0 {
            return Err(format!(
                "the project's overlay makes no Deployment with a container named `{MANAGER_CONTAINER}` to give {image}"
            ));
        }
        for object in &objects {
            until(timeout, || self.apply(object)).await?;
            if object["metadata"]["namespace"].is_null() {
                self.deployed().push(object.clone());
            }
        }
        for deployment in objects.iter().filter(|object| kind(object) == "Deployment") {
            let available = json!({
                "apiVersion": deployment["apiVersion"], "kind": "Deployment",
                "metadata": {"name": deployment["metadata"]["name"]},
                "status": {"conditions": [{"type": "Available", "status": "True"}]},
            });
            until(timeout, || self.assert(std::slice::from_ref(&available), &[]))
                .await
                .map_err(|seen| format!("the manager did not become available: {seen}"))?;
        }
        Ok(())
    }

    /// Deletes the cluster-scoped objects the manager's deploy made (ClusterRoles and their
    /// bindings); the rest went with the namespace.
    pub(super) async fn remove_manager(&self) -> Result<(), String> {
        let deployed = std::mem::take(&mut *self.deployed());
        let mut failed = Vec::new();
        for object in deployed.iter().rev() {
            if let Err(error) = until(Duration::from_secs(30), || self.delete(object)).await {
                failed.push(format!("{}: {error}", name_of(object)));
            }
        }
        match failed.is_empty() {
            true => Ok(()),
            false => Err(format!("not removed: {}", failed.join("; "))),
        }
    }

    /// What the project's overlay makes for the scenario's namespace: an overlay of it in the work
    /// directory that sets the namespace, built by `kubectl kustomize` (with files loaded from
    /// anywhere, as molecule's converge builds it).
    async fn render(&self, project: &Path) -> Result<Vec<Value>, String> {
        let project =
            std::path::absolute(project).map_err(|error| format!("the project's directory: {error}"))?;
        let Some(overlay) = OVERLAYS.iter().map(|dir| project.join(dir)).find(|dir| dir.is_dir()) else {
            return Err(format!(
                "{} has no {}: nothing to deploy the manager from",
                project.display(),
                OVERLAYS.join(" or ")
            ));
        };
        let dir = std::path::absolute(self.work.join("molecule").join(self.namespace).join("manager"))
            .map_err(|error| format!("the work directory: {error}"))?;
        std::fs::create_dir_all(&dir).map_err(|error| format!("create {}: {error}", dir.display()))?;
        let kustomization = json!({
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": self.namespace,
            "resources": [relative(&dir, &overlay).display().to_string()],
        });
        let file = dir.join("kustomization.yaml");
        std::fs::write(&file, kustomization.to_string())
            .map_err(|error| format!("write {}: {error}", file.display()))?;
        let output = tokio::process::Command::new("kubectl")
            .args(["kustomize", "--load-restrictor", "LoadRestrictionsNone"])
            .arg(&dir)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|error| format!("run kubectl kustomize (--image needs kubectl): {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "kubectl kustomize {} failed ({}): {}",
                overlay.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let built = dir.join("built.yaml");
        std::fs::write(&built, &output.stdout)
            .map_err(|error| format!("write {}: {error}", built.display()))?;
        objects_file(&built).map_err(|error| error.to_string())
    }
}

fn kind(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

/// The indexes of a Deployment's containers named `manager`.
fn manager_containers(deployment: &Value) -> Vec<usize> {
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_array();
    containers
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, container)| container["name"] == MANAGER_CONTAINER)
        .map(|(index, _)| index)
        .collect()
}

/// `to` as seen from `from`, both absolute (kustomize takes no absolute resource paths).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component> = from.components().collect();
    let to: Vec<Component> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path: PathBuf = from[common..].iter().map(|_| Component::ParentDir).collect();
    path.extend(&to[common..]);
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlay_is_named_from_the_work_directory() {
        let path = relative(
            Path::new("/tmp/work/molecule/ns/manager"),
            Path::new("/home/me/project/config/testing"),
        );
        assert_eq!(path, Path::new("../../../../../home/me/project/config/testing"));
        assert_eq!(
            relative(Path::new("/p/work"), Path::new("/p/config/testing")),
            Path::new("../config/testing")
        );
    }

    #[test]
    fn the_manager_is_the_container_named_manager() {
        let deployment =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "proxy"}, {"name": "manager"}]}}}});
        assert_eq!(manager_containers(&deployment), [1]);
        assert!(manager_containers(&json!({"spec": {}})).is_empty());
    }
}
