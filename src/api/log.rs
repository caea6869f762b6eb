//! A run's log: the runner's stdout. While the run is in flight it comes from the operator's memory
//! and, with `Accept: text/event-stream`, follows the run live (Server-Sent Events: one `line` event
//! per line, then `end`); afterwards it is read from the run's artifacts, as long as they exist.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path, State as Extract};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt, stream};
use http::{HeaderMap, header};

use super::handlers::{Found, RunPath, authorize_log, authorized_cr, find_run};
use super::{Error, Kind, State};
use crate::history::live::Follower;
use crate::ident::Ident;
use crate::runner::event::readable_lines;

/// The most of a finished run's log served (its end); the artifacts have the rest.
const MAX_LOG_BYTES: u64 = 8 << 20;

/// `GET .../runs/{run}/log`: plain text, or a live stream with `Accept: text/event-stream`. Needs
/// `get` on the CR and on its `log` subresource.
pub async fn log(
    Extract(state): Extract<Arc<State>>,
    Path(path): Path<RunPath>,
    headers: HeaderMap,
) -> Result<Response, Error> {
    let (kind, user, object) = authorized_cr(&state, &path.cr(), &headers, "get").await?;
    authorize_log(&state, kind, &path.cr(), &user).await?;
    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
    let streaming = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"));
    let source = match find_run(&state, &path, uid).await? {
        Found::Live(run) => Source::Live(run.follow()),
        Found::Record(_, ident) => {
            let file = artifact_log(&state, kind, &object, &ident)
                .ok_or_else(|| Error::NotFound(format!("the log of run {}", path.run)))?;
            let text = read_tail(&file).await.ok_or_else(|| {
                Error::NotFound(format!("the log of run {} (its artifacts were pruned)", path.run))
            })?;
            Source::Lines(readable(&text))
        }
    };
    if streaming {
        return Ok(Sse::new(events(source)).keep_alive(KeepAlive::default()).into_response());
    }
    let text = match source {
        Source::Live(mut follower) => follower.snapshot(),
        Source::Lines(lines) => lines.into_iter().collect(),
    };
    let mut text = text.join("\n");
    text.push('\n');
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

/// Where the lines come from.
enum Source {
    Live(Follower),
    Lines(VecDeque<String>),
}

/// The log as Server-Sent Events: each line, then `end`.
fn events(source: Source) -> impl Stream<Item = Result<Event, Infallible>> {
    let lines = stream::unfold(source, |source| async move {
        match source {
            Source::Live(mut follower) => {
                let lines = follower.next_lines().await?;
                Some((lines, Source::Live(follower)))
            }
            Source::Lines(mut lines) if !lines.is_empty() => {
                let batch: Vec<String> = lines.drain(..lines.len().min(1000)).collect();
                Some((batch, Source::Lines(lines)))
            }
            Source::Lines(_) => None,
        }
    });
    lines
        .flat_map(|batch| {
            stream::iter(batch.into_iter().map(|line| Ok(Event::default().event("line").data(line))))
        })
        .chain(stream::once(async { Ok(Event::default().event("end").data("")) }))
}

/// The stdout file in a run's artifacts (`<runner dir>/<group>/<version>/<kind>/[<ns>/]<name>/
/// artifacts/<ident>/stdout`), computed, never taken from the record: its ident is checked, and the
/// rest comes from the CR the API server served.
fn artifact_log(state: &State, kind: &Kind, object: &serde_json::Value, ident: &Ident) -> Option<PathBuf> {
    let safe = |part: &str| !part.is_empty() && part != "." && part != ".." && !part.contains('/');
    let name = object["metadata"]["name"].as_str().filter(|n| safe(n))?;
    let resource = &kind.resource;
    let mut dir = state.runner_dir.join(&resource.group).join(&resource.version).join(&resource.kind);
    if let Some(namespace) = object["metadata"]["namespace"].as_str().filter(|n| safe(n)) {
        dir.push(namespace);
    }
    Some(dir.join(name).join("artifacts").join(ident.as_str()).join("stdout"))
}

/// The log a person reads from the runner's stdout file (JSON events, one a line).
fn readable(text: &str) -> VecDeque<String> {
    readable_lines(text).collect()
}

/// The file's text, or its last [`MAX_LOG_BYTES`]; `None` when it cannot be read.
async fn read_tail(file: &std::path::Path) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut handle = tokio::fs::File::open(file).await.ok()?;
    let size = handle.metadata().await.ok()?.len();
    let start = size.saturating_sub(MAX_LOG_BYTES);
    handle.seek(std::io::SeekFrom::Start(start)).await.ok()?;
    let mut bytes = Vec::new();
    handle.read_to_end(&mut bytes).await.ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Some(match start {
        0 => text,
        _ => format!("... (the first {start} bytes are in {})\n{text}", file.display()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_finished_log_streams_as_line_events_then_end() {
        let source = Source::Lines(["PLAY [x]", "", "ok"].into_iter().map(String::from).collect());
        let events: Vec<_> = events(source).collect().await;
        assert_eq!(events.len(), 4);
    }

    #[test]
    fn the_log_is_the_events_stdout_and_the_text_around_them() {
        let file = concat!(
            "ansible-playbook [core 2.18.19]\n",
            r#"{"uuid":"1","event":"playbook_on_start","stdout":""}"#,
            "\n",
            r#"{"uuid":"2","event":"playbook_on_task_start","stdout":"\r\nTASK [a] ***"}"#,
            "\n",
            r#"{"uuid":"3","event":"runner_on_ok","stdout":"ok: [localhost]"}"#,
            "\n",
        );
        assert_eq!(
            readable(file),
            ["ansible-playbook [core 2.18.19]", "", "TASK [a] ***", "ok: [localhost]"]
        );
    }

    #[tokio::test]
    async fn only_the_tail_of_a_huge_log_is_read() {
        let dir = std::env::temp_dir().join(format!("ao-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("stdout");
        std::fs::write(&file, "x".repeat(MAX_LOG_BYTES as usize + 10)).unwrap();
        let text = read_tail(&file).await.unwrap();
        assert!(text.starts_with("... (the first 10 bytes are in"), "{}", &text[..60]);
        assert!(read_tail(&dir.join("missing")).await.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
