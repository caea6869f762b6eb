//! Plurals and scopes of the watched kinds, read from CRD files (`--crds DIR`): RBAC names a kind
//! by its plural, which only its CRD knows for sure.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{Error, Result};
use crate::watches::Gvk;

/// What RBAC needs to know of a kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindInfo {
    /// Its resource name (`spec.names.plural`).
    pub plural: String,
    /// Whether its objects live in namespaces (`spec.scope: Namespaced`).
    pub namespaced: bool,
}

/// Kinds by `(group, kind)`, from CRD files.
#[derive(Debug, Clone, Default)]
pub struct Kinds {
    known: BTreeMap<(String, String), KindInfo>,
}

impl Kinds {
    /// Adds what a CRD says of its kind.
    pub fn insert(&mut self, group: &str, kind: &str, info: KindInfo) {
        self.known.insert((group.to_string(), kind.to_string()), info);
    }

    /// The kind's plural and scope from its CRD, or, without one, kube's guess of the plural
    /// (`ApiResource::from_gvk`: lowercase, English plural rules) and namespaced. The second value
    /// says whether it was guessed.
    pub fn info(&self, gvk: &Gvk) -> (KindInfo, bool) {
        match self.known.get(&(gvk.group.clone(), gvk.kind.clone())) {
            Some(info) => (info.clone(), false),
            None => {
                let plural = kube::api::ApiResource::from_gvk(&gvk.to_kube()).plural;
                (KindInfo { plural, namespaced: true }, true)
            }
        }
    }
}

/// Reads every `.yaml`, `.yml` and `.json` file directly in `dir` and keeps the CRDs among their
/// documents; other objects are skipped.
pub fn read(dir: &Path) -> Result<Kinds> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::ReadCrds { dir: dir.into(), source })?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.map_err(|source| Error::ReadCrds { dir: dir.into(), source })?.path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json") {
            paths.push(path);
        }
    }
    paths.sort();
    let mut kinds = Kinds::default();
    for path in paths {
        let text =
            std::fs::read_to_string(&path).map_err(|source| Error::ReadCrd { file: path.clone(), source })?;
        parse(&text, &path, &mut kinds)?;
    }
    Ok(kinds)
}

/// Adds the CRDs among the YAML documents of `text` (read from `file`) to `kinds`.
pub fn parse(text: &str, file: &Path, kinds: &mut Kinds) -> Result<()> {
    let documents: Vec<Value> = serde_saphyr::from_str_multiple(text)
        .map_err(|error| Error::Crd { file: file.into(), reason: error.to_string() })?;
    for (index, document) in documents.iter().enumerate() {
        if document["kind"] != "CustomResourceDefinition" {
            continue;
        }
        let field = |path: &[&str]| -> Result<String> {
            let mut value = document;
            for key in path {
                value = &value[key];
            }
            value.as_str().map(str::to_string).ok_or_else(|| Error::Crd {
                file: file.into(),
                reason: format!("document {}: {} is missing or not a string", index + 1, path.join(".")),
            })
        };
        let group = field(&["spec", "group"])?;
        let kind = field(&["spec", "names", "kind"])?;
        let plural = field(&["spec", "names", "plural"])?;
        let namespaced = match field(&["spec", "scope"])?.as_str() {
            "Namespaced" => true,
            "Cluster" => false,
            other => {
                return Err(Error::Crd {
                    file: file.into(),
                    reason: format!(
                        "document {}: spec.scope {other:?} is not Namespaced or Cluster",
                        index + 1
                    ),
                });
            }
        };
        kinds.insert(&group, &kind, KindInfo { plural, namespaced });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
        metadata: {name: octopi.sea.example.com}\n\
        spec:\n  group: sea.example.com\n  scope: Cluster\n  names: {kind: Octopus, plural: octopi}\n";

    #[test]
    fn a_crd_gives_the_plural_and_scope_and_without_one_kube_guesses() {
        let mut kinds = Kinds::default();
        parse(&format!("---\napiVersion: v1\nkind: Namespace\n---\n{CRD}"), Path::new("c.yaml"), &mut kinds)
            .unwrap();
        let octopus = Gvk::new("sea.example.com", "v1", "Octopus");
        assert_eq!(kinds.info(&octopus), (KindInfo { plural: "octopi".into(), namespaced: false }, false));
        let policy = Gvk::new("sea.example.com", "v1", "Policy");
        assert_eq!(kinds.info(&policy), (KindInfo { plural: "policies".into(), namespaced: true }, true));
    }

    #[test]
    fn a_crd_without_a_plural_is_named_with_its_file_and_field() {
        let text = CRD.replace(", plural: octopi", "");
        let error = parse(&text, Path::new("deploy/crds/o.yaml"), &mut Kinds::default()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "deploy/crds/o.yaml: document 1: spec.names.plural is missing or not a string"
        );
    }
}
