//! Loading a watches file: read, expand variables, parse YAML, decode every entry in order.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::error::{Error, Result};
use super::expand::expand;
use super::fields::describe;
use super::{Defaults, Environment, Gvk, Loaded, entry};

/// Reads and parses the watches file at `path` (see [`parse`]).
pub fn load(path: &Path, defaults: &Defaults, env: &Environment) -> Result<Loaded> {
    let text =
        std::fs::read_to_string(path).map_err(|source| Error::Read { file: path.to_path_buf(), source })?;
    parse(&text, path, defaults, env)
}

/// Parses watches-file text as upstream does: `$VAR`/`${VAR}` expanded from `env` first, then a YAML
/// list of entries, each with defaults applied, GVK checked, duplicates rejected and the playbook or
/// role resolved against `env`. `file` is only used in messages. The first problem is the error.
pub fn parse(text: &str, file: &Path, defaults: &Defaults, env: &Environment) -> Result<Loaded> {
    let expanded = expand(text, |name| env.var(name));
    let document: Value = serde_saphyr::from_str_with_options(&expanded, yaml_options())
        .map_err(|source| Error::Yaml { file: file.to_path_buf(), source: Box::new(source) })?;
    let items = match document {
        Value::Array(items) => items,
        // An empty file decodes to an empty list upstream.
        Value::Null => Vec::new(),
        other => {
            return Err(Error::NotAList { file: file.to_path_buf(), found: describe(&other) });
        }
    };

    let mut seen: HashMap<Gvk, usize> = HashMap::new();
    let mut converted: HashMap<(String, String), usize> = HashMap::new();
    let mut loaded = Loaded { watches: Vec::with_capacity(items.len()), warnings: Vec::new() };
    for (index, item) in items.into_iter().enumerate() {
        let entry = entry::read(file, index + 1, item)?;
        if let Some(first) = seen.get(entry.gvk()) {
            return Err(Error::DuplicateGvk { at: entry.at().boxed(), first: *first });
        }
        seen.insert(entry.gvk().clone(), index + 1);
        let at = entry.at().boxed();
        let (watch, warnings) = entry.into_watch(defaults, env)?;
        if watch.extensions.convert.is_some() {
            let (group, kind) = (watch.gvk.group.clone(), watch.gvk.kind.clone());
            if let Some(first) = converted.insert((group.clone(), kind.clone()), index + 1) {
                return Err(Error::DuplicateConvert { at, first, group, kind });
            }
        }
        loaded.watches.push(watch);
        loaded.warnings.extend(warnings);
    }
    Ok(loaded)
}

fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    // Upstream's YAML decoding lets a repeated key overwrite the earlier one.
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::LastWins;
    // One-line messages ("... at line 3, column 5"); the file name is added by our error.
    options.with_snippet = false;
    options
}
