//! A molecule scenario's step: its directory copied (with the tasks that cannot run here replaced,
//! [`crate::scenario::molecule`]), the inventory and environment molecule would give it, and its
//! `verify.yml` run against the scenario's namespace, where the operator in this process watches
//! (or, with `--image`, the manager deployed there).

use std::ffi::OsString;
use std::time::Duration;

use serde_json::json;

use super::stage::Stage;
use super::steps::ansible_playbook;
use crate::scenario::molecule::{Molecule, Place, inventory, provisioner_env};

impl Stage<'_> {
    /// Runs the scenario's `verify.yml` as molecule's `verify` would.
    /// With `--image`, the manager is deployed in the scenario's namespace first.
    pub async fn molecule(&self, molecule: &Molecule, timeout: Duration) -> Result<(), String> {
        if let Some(image) = &molecule.image {
            self.deploy_manager(&molecule.project, image, timeout).await?;
        }
        let root = self.work.join("molecule").join(self.namespace);
        let (copy, ephemeral) = (root.join("scenario"), root.join("ephemeral"));
        for (path, bytes) in &molecule.files {
            let file = copy.join(path);
            let written = match file.parent() {
                Some(parent) => std::fs::create_dir_all(parent).and_then(|()| std::fs::write(&file, bytes)),
                None => std::fs::write(&file, bytes),
            };
            written.map_err(|error| format!("copy the scenario to {}: {error}", file.display()))?;
        }
        std::fs::create_dir_all(&ephemeral)
            .map_err(|error| format!("create {}: {error}", ephemeral.display()))?;
        let place = Place { copy: &copy, ephemeral: &ephemeral, namespace: self.namespace };
        let mut env = molecule.environment(&place);
        let config = molecule.config(&env).map_err(|error| error.to_string())?;
        env.extend(provisioner_env(&config));
        let inventory_file = ephemeral.join("inventory.json");
        std::fs::write(&inventory_file, inventory(&config, &place).to_string())
            .map_err(|error| format!("write {}: {error}", inventory_file.display()))?;
        // The scenario's namespace wins over what molecule.yml says: the operator watches only it.
        let vars = json!({"namespace": self.namespace});
        let args = [OsString::from("-i"), inventory_file.into(), "-e".into(), vars.to_string().into()];
        // What it prints names the scenario's own files (the copy keeps their lines).
        let named =
            |text: String| text.replace(&copy.display().to_string(), &molecule.dir.display().to_string());
        ansible_playbook(&copy.join("verify.yml"), &args, &env, timeout).await.map_err(named)
    }
}
