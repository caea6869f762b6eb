//! A finished run's artifacts with its secret values masked: the `stdout` the API serves once the run
//! has ended, `stderr`, and the events in `job_events/`, rewritten in place when they held any.

use std::io;
use std::path::Path;

use serde_json::Value;

use super::fs::write_private;
use crate::mask::Masker;

/// Masks the artifacts of one run in `artifact_dir`. Returns how many files were rewritten.
pub fn mask_artifacts(artifact_dir: &Path, masker: &mut Masker) -> io::Result<usize> {
    let mut files = vec![artifact_dir.join("stdout"), artifact_dir.join("stderr")];
    match std::fs::read_dir(artifact_dir.join("job_events")) {
        Ok(entries) => {
            for entry in entries {
                files.push(entry?.path());
            }
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let mut rewritten = 0;
    for file in files {
        let text = match std::fs::read(&file) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        if let Some(masked) = mask_lines(&text, masker) {
            write_private(&file, masked)?;
            rewritten += 1;
        }
    }
    Ok(rewritten)
}

/// The text with each line masked (a JSON line keeps its structure), or `None` when nothing was.
fn mask_lines(text: &str, masker: &mut Masker) -> Option<String> {
    let mut changed = false;
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        let masked = masker.mask(body);
        if masked == body {
            out.push_str(line);
            continue;
        }
        changed = true;
        match serde_json::from_str::<Value>(body) {
            Ok(mut value) => {
                masker.mask_value(&mut value);
                out.push_str(&value.to_string());
            }
            Err(_) => out.push_str(&masked),
        }
        out.push_str(end);
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::mask::Secrets;

    #[test]
    fn event_lines_keep_their_json_and_text_lines_are_masked_in_every_artifact() {
        let dir = std::env::temp_dir().join(format!("masked-artifacts-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("job_events")).unwrap();
        let event = r#"{"uuid":"1","event":"runner_on_ok","stdout":"ok: \"msg\": \"p\\\"w hunter22\""}"#;
        std::fs::write(dir.join("stdout"), format!("{event}\nplain hunter22\nclean\n")).unwrap();
        std::fs::write(
            dir.join("job_events").join("1-1.json"),
            r#"{"event_data":{"res":{"msg":"hunter22"}}}"#,
        )
        .unwrap();
        std::fs::write(dir.join("job_events").join("2-2.json"), r#"{"event_data":{}}"#).unwrap();
        let secrets = Arc::new(Secrets::default());
        secrets.add(b"hunter22");
        let rewritten = mask_artifacts(&dir, &mut Masker::new(secrets)).unwrap();
        assert_eq!(rewritten, 2, "the event without the value is left alone");
        let stdout = std::fs::read_to_string(dir.join("stdout")).unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        let first: Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(first["stdout"], "ok: \"msg\": \"p\\\"w ********\"");
        assert_eq!(lines[1..], ["plain ********", "clean"]);
        let event = std::fs::read_to_string(dir.join("job_events").join("1-1.json")).unwrap();
        assert_eq!(event, r#"{"event_data":{"res":{"msg":"********"}}}"#);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
