//! A recorded run's inputs (`GET .../runs/{run}/inputs`): the files `ansible-operator replay --run`
//! writes, composed by the same code, as one JSON bundle. No credential is in them (no proxy token,
//! no SSH key), and they hold what `get` on the CR already shows (its spec) and the watch's own
//! settings, so reading them needs what reading the run does.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State as Extract};
use http::HeaderMap;
use serde_json::{Value, json};

use super::handlers::{Found, RunPath, authorized_cr, find_run};
use super::{Error, State};
use crate::history::record::RunInput;
use crate::ident::Ident;
use crate::reconcile::inputs::{self, shell_line};
use crate::runner::fs::PrivateTempDir;
use crate::runner::ssh::control_dir;

/// `GET .../crs/{namespace}/{name}/runs/{run}/inputs`: `{name, files: {path: text}, command,
/// notes}`, paths and the command naming the directory `name` (the record's name).
pub async fn inputs(
    Extract(state): Extract<Arc<State>>,
    Path(path): Path<RunPath>,
    headers: HeaderMap,
) -> Result<Json<Value>, Error> {
    let (kind, _, object) = authorized_cr(&state, &path.cr(), &headers, "get").await?;
    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
    // `find_run` has checked the record's ident; it is still not used for anything on disk.
    let record = match find_run(&state, &path, uid).await? {
        Found::Record(record, _) => record,
        Found::Live(_) => {
            return Err(Error::NotFound(format!(
                "inputs of run {} (in flight: they are kept when it ends)",
                path.run
            )));
        }
    };
    let input = RunInput::of_record(&record)?;
    let name = record["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let composer = kind.composer.clone();
    let bundle = tokio::task::spawn_blocking(move || -> Result<Value, inputs::Error> {
        // Everything written goes into a directory made here, and the replay's ident (which names
        // its SSH control directory) is fresh: no path comes from the record.
        let private = PrivateTempDir::create("ao-inputs-")
            .map_err(|source| inputs::Error::Write { dir: std::env::temp_dir(), source })?;
        let dir = private.path().to_path_buf();
        let ident = format!("replay-{}", Ident::generate());
        let written = inputs::write(
            &composer.watch,
            &composer.inputs,
            &input.object,
            input.finalizing,
            ident.clone(),
            &dir,
        );
        let files = written.as_ref().ok().map(|_| inputs::files(&dir));
        drop(private);
        let _ = std::fs::remove_dir_all(control_dir(&ident));
        let written = written?;
        let files = files
            .transpose()
            .map_err(|source| inputs::Error::Write { dir: dir.clone(), source })?
            .unwrap_or_default();
        // The bundle is unpacked wherever its reader chooses: name the directory by the record.
        let local = dir.display().to_string();
        let files: serde_json::Map<String, Value> =
            files.into_iter().map(|(path, text)| (path, Value::from(text.replace(&local, &name)))).collect();
        let command = shell_line(&written.command).replace(&local, &name);
        let notes: Vec<String> = written.notes.iter().map(|note| note.replace(&local, &name)).collect();
        Ok(json!({"name": name, "files": files, "command": command, "notes": notes}))
    })
    .await
    .map_err(|error| {
        Error::Inputs(inputs::Error::Write { dir: Default::default(), source: std::io::Error::other(error) })
    })?
    .map_err(Error::Inputs)?;
    Ok(Json(bundle))
}
