//! The Secret values a run sees through the proxy: taken from the API server's answers to its
//! requests on Secrets (GET, LIST, WATCH, and writes, which answer with the object) as they stream to
//! the run, so that its output can be masked (see [`crate::mask`]).
//!
//! The tap reads JSON only, so the proxy makes every answer about Secrets JSON: it asks for
//! `application/json` without compression ([`ask_for_json`]), and an answer that is still anything
//! else is not passed on ([`readable`]). A document the tap cannot hold ends the answer with an error
//! instead of reaching the run unread.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use base64::Engine;
use bytes::{Buf, Bytes};
use http::{HeaderMap, HeaderValue, header};
use http_body::{Body, Frame, SizeHint};
use serde_json::Value;

use super::request_info::RequestInfo;
use crate::mask::Secrets;

/// Most of one answer (or one watch event) held to read its Secrets; a larger one is cut off with
/// an error, since its values could not be masked.
const MAX_DOCUMENT: usize = 64 << 20;

/// Whether a request's answer may carry Secret values: any request on core `secrets` objects
/// (the deprecated `/api/v1/watch/...` paths included), not on their subresources. The path is read
/// as the API server reads it, percent-escapes decoded; one that cannot be read plainly (a bad
/// escape, a `.` or `..` segment) is taken to carry Secrets.
pub fn carries_secrets(path: &str) -> bool {
    let Some(path) = percent_decoded(path) else { return true };
    if path.split('/').any(|segment| segment == "." || segment == "..") {
        return true;
    }
    if !path.contains("/secrets") {
        return false;
    }
    let path = match path.strip_prefix("/api/v1/watch/") {
        Some(rest) => format!("/api/v1/{rest}"),
        None => path,
    };
    RequestInfo::parse(&path)
        .is_some_and(|info| info.group.is_empty() && info.resource == "secrets" && info.subresource.is_none())
}

/// `path` with its `%XX` escapes decoded; `None` when an escape is malformed or the result is not
/// UTF-8.
fn percent_decoded(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = std::str::from_utf8(bytes.get(at + 1..at + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Makes a request on Secrets ask for what the tap reads: JSON (not protobuf, YAML or a Table),
/// uncompressed.
pub fn ask_for_json(headers: &mut HeaderMap) {
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
}

/// Whether an answer about Secrets is one the tap reads: JSON, not compressed.
pub fn readable(headers: &HeaderMap) -> bool {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
    let plain = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .all(|value| value.to_str().is_ok_and(|v| v.trim().eq_ignore_ascii_case("identity")));
    json && plain
}

/// Adds the values of the Secrets in one JSON document to `secrets`: a Secret, a SecretList, or a
/// watch event holding one. Anything else (a `Status`, a bookmark) adds nothing.
pub fn learn(secrets: &Secrets, document: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(document) else { return };
    let objects: Vec<&Value> = match (&value["items"], &value["object"]) {
        (Value::Array(items), _) => items.iter().collect(),
        (_, object @ Value::Object(_)) => vec![object],
        _ => vec![&value],
    };
    for object in objects {
        if let Some(data) = object["data"].as_object() {
            let decoded = data
                .values()
                .filter_map(Value::as_str)
                .filter_map(|encoded| base64::engine::general_purpose::STANDARD.decode(encoded).ok());
            decoded.for_each(|value| secrets.add(&value));
        }
        if let Some(data) = object["stringData"].as_object() {
            data.values().filter_map(Value::as_str).for_each(|value| secrets.add(value.as_bytes()));
        }
    }
}

/// Where JSON documents end in a stream of them (one answer, or a watch's events however they are
/// framed or indented): the nesting of objects and arrays, outside strings.
#[derive(Debug, Default)]
struct Framer {
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl Framer {
    /// Reads `bytes`: the offsets just past each top-level object or array that ends in them.
    fn ends(&mut self, bytes: &[u8]) -> Vec<usize> {
        let mut ends = Vec::new();
        for (at, byte) in bytes.iter().enumerate() {
            if self.in_string {
                match (self.escaped, byte) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match byte {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        ends.push(at + 1);
                    }
                }
                _ => {}
            }
        }
        ends
    }
}

/// Why a tapped answer was cut off.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// One document about Secrets was larger than the tap holds.
    #[error(
        "an answer about Secrets is larger than {MAX_DOCUMENT} bytes: it is not passed on, as its values could not be masked"
    )]
    TooLarge,
}

/// An answer's body passed on as it streams, its Secrets learned from each complete JSON document
/// (each watch event; the whole of any other answer) before the bytes that end it are passed on.
pub struct Tap<B> {
    inner: B,
    secrets: Arc<Secrets>,
    framer: Framer,
    pending: Vec<u8>,
    failed: bool,
}

impl<B> Tap<B> {
    /// Taps `inner`, adding what it carries to `secrets`.
    pub fn new(inner: B, secrets: Arc<Secrets>) -> Self {
        Tap { inner, secrets, framer: Framer::default(), pending: Vec::new(), failed: false }
    }

    /// Takes in a chunk: learns each document it completes. Fails when one grows too large.
    fn take(&mut self, chunk: &[u8]) -> Result<(), TapError> {
        let mut start = 0;
        for end in self.framer.ends(chunk) {
            self.hold(&chunk[start..end])?;
            self.flush();
            start = end;
        }
        self.hold(&chunk[start..])
    }

    fn hold(&mut self, part: &[u8]) -> Result<(), TapError> {
        if self.pending.len() + part.len() > MAX_DOCUMENT {
            tracing::warn!(
                limit = MAX_DOCUMENT,
                "an answer about Secrets is too large to read: it is cut off"
            );
            self.pending = Vec::new();
            return Err(TapError::TooLarge);
        }
        self.pending.extend_from_slice(part);
        Ok(())
    }

    /// Learns what is held (a complete document) and starts over.
    fn flush(&mut self) {
        if !self.pending.iter().all(u8::is_ascii_whitespace) {
            learn(&self.secrets, &self.pending);
        }
        self.pending.clear();
    }
}

impl<B> Body for Tap<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(error) = this.take(data.chunk())
                {
                    this.failed = true;
                    return Poll::Ready(Some(Err(error.into())));
                }
                if this.inner.is_end_stream() {
                    this.flush();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.flush();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error.into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, Full, StreamBody};

    use super::*;
    use crate::mask::Masker;

    fn masked(secrets: &Arc<Secrets>, text: &str) -> String {
        Masker::new(secrets.clone()).mask(text).into_owned()
    }

    #[test]
    fn requests_on_secrets_objects_carry_secrets_and_others_do_not() {
        assert!(carries_secrets("/api/v1/namespaces/ns/secrets/db"));
        assert!(carries_secrets("/api/v1/namespaces/ns/secrets"));
        assert!(carries_secrets("/api/v1/secrets"));
        assert!(carries_secrets("/api/v1/watch/namespaces/ns/secrets"));
        assert!(!carries_secrets("/api/v1/namespaces/ns/configmaps/db"));
        assert!(!carries_secrets("/apis/example.com/v1/namespaces/ns/secrets/db"));
        assert!(!carries_secrets("/api/v1/namespaces/secrets"));
    }

    #[test]
    fn escaped_and_unclean_paths_are_read_as_the_api_server_reads_them_or_taken_to_carry_secrets() {
        assert!(carries_secrets("/api/v1/namespaces/ns/%73ecrets/db"));
        assert!(carries_secrets("/api/v1/namespaces/ns/secret%73"));
        assert!(carries_secrets("/api/v1/namespaces/ns/configmaps/../secrets/db"));
        assert!(carries_secrets("/api/v1/namespaces/ns/./secrets"));
        assert!(carries_secrets("/api/v1/namespaces/ns/%zz/db"), "a bad escape");
        assert!(carries_secrets("/api/v1/namespaces/ns/%ff/db"), "not UTF-8");
        assert!(carries_secrets("//api/v1//namespaces/ns/secrets//db"));
        assert!(!carries_secrets("/api/v1/namespaces/ns/configmaps/%64b"));
    }

    #[test]
    fn a_request_on_secrets_asks_for_plain_json_and_only_plain_json_is_read() {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/vnd.kubernetes.protobuf"));
        headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        ask_for_json(&mut headers);
        assert_eq!(headers[header::ACCEPT], "application/json");
        assert_eq!(headers[header::ACCEPT_ENCODING], "identity");

        let answer = |pairs: &[(&str, &str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.append(
                    http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                );
            }
            headers
        };
        assert!(readable(&answer(&[("content-type", "application/json")])));
        assert!(readable(&answer(&[("content-type", "application/json; charset=utf-8")])));
        assert!(readable(&answer(&[("content-type", "application/json"), ("content-encoding", "identity")])));
        assert!(!readable(&answer(&[("content-type", "application/json"), ("content-encoding", "gzip")])));
        assert!(!readable(&answer(&[("content-type", "application/vnd.kubernetes.protobuf")])));
        assert!(!readable(&answer(&[("content-type", "application/yaml")])));
        assert!(!readable(&answer(&[])), "no content type");
    }

    #[test]
    fn documents_end_where_their_nesting_closes_outside_strings() {
        let mut framer = Framer::default();
        let first = r#"{"a":"}{\"]\\","b":[1,{"c":2}]}"#;
        let second = r#"{"d":"]"}"#;
        let text = format!("{first} {second}\n");
        assert_eq!(framer.ends(text.as_bytes()), [first.len(), first.len() + 1 + second.len()]);
        let mut split = Framer::default();
        assert_eq!(split.ends(br#"{"a":"x\"#), Vec::<usize>::new());
        assert_eq!(split.ends(br#""}"}"#), [4], "an escape split across chunks");
    }

    #[test]
    fn data_string_data_lists_and_watch_events_are_learned_and_statuses_are_not() {
        let secrets = Arc::new(Secrets::default());
        learn(&secrets, br#"{"kind":"Secret","data":{"a":"aHVudGVyMjI="},"stringData":{"b":"plain-one"}}"#);
        learn(&secrets, br#"{"kind":"SecretList","items":[{"data":{"c":"c2Vjb25kLW9uZQ=="}}]}"#);
        learn(&secrets, br#"{"type":"ADDED","object":{"kind":"Secret","data":{"d":"dGhpcmQtb25l"}}}"#);
        learn(&secrets, br#"{"kind":"Status","message":"secrets \"x\" not found"}"#);
        assert_eq!(
            masked(&secrets, "hunter22 plain-one second-one third-one not found"),
            "******** ******** ******** ******** not found"
        );
    }

    #[tokio::test]
    async fn a_watch_streams_through_and_each_event_is_learned_when_its_line_ends() {
        let secrets = Arc::new(Secrets::default());
        let chunks = [
            r#"{"type":"ADDED","object":{"data":{"a":"aHVu"#,
            "dGVyMjI=\"}}}\n{\"type\":\"MODIFIED\",\"object\":{\"data\":{\"a\":\"c2Vjb25kLW9uZQ==\"}}}\n",
        ];
        let frames = chunks.map(|chunk| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(chunk))));
        let mut tap = Tap::new(StreamBody::new(futures::stream::iter(frames)), secrets.clone());
        let first = tap.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, chunks[0]);
        assert!(secrets.is_empty(), "half an event teaches nothing");
        let second = tap.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(second, chunks[1]);
        assert_eq!(masked(&secrets, "hunter22 second-one"), "******** ********");
    }

    #[tokio::test]
    async fn a_pretty_printed_list_and_a_watch_split_anywhere_are_learned() {
        let secrets = Arc::new(Secrets::default());
        let list = serde_json::to_string_pretty(&serde_json::json!({
            "kind": "SecretList",
            "items": [{"data": {"a": "aHVudGVyMjI="}}, {"stringData": {"b": "plain-one"}}],
        }))
        .unwrap();
        let watch = concat!(
            r#"{"type":"ADDED","object":{"data":{"a":"c2Vjb25kLW9uZQ=="}}}"#,
            "\n",
            r#"{"type":"MODIFIED","object":{"data":{"a":"dGhpcmQtb25l"}}}"#,
        );
        let stream = format!("{list}\n{watch}");
        let chunks: Vec<Result<Frame<Bytes>, std::convert::Infallible>> =
            stream.as_bytes().chunks(7).map(|chunk| Ok(Frame::data(Bytes::copy_from_slice(chunk)))).collect();
        let tap = Tap::new(StreamBody::new(futures::stream::iter(chunks)), secrets.clone());
        let passed = tap.collect().await.unwrap().to_bytes();
        assert_eq!(passed, stream.as_bytes(), "passed on unchanged");
        assert_eq!(
            masked(&secrets, "hunter22 plain-one second-one third-one"),
            "******** ******** ******** ********"
        );
    }

    #[tokio::test]
    async fn a_document_too_large_to_read_ends_the_answer_with_an_error() {
        let secrets = Arc::new(Secrets::default());
        let big = format!(r#"{{"data":{{"a":"{}"#, "A".repeat(MAX_DOCUMENT));
        let mut tap = Tap::new(Full::new(Bytes::from(big)), secrets.clone());
        let frame = tap.frame().await.unwrap();
        assert!(frame.is_err(), "cut off");
        assert!(tap.frame().await.is_none());
    }

    #[tokio::test]
    async fn a_whole_answer_without_a_newline_is_learned_before_its_last_bytes_pass() {
        let secrets = Arc::new(Secrets::default());
        let body = Full::new(Bytes::from_static(br#"{"kind":"Secret","data":{"a":"aHVudGVyMjI="}}"#));
        let mut tap = Tap::new(body, secrets.clone());
        let _ = tap.frame().await.unwrap().unwrap();
        assert_eq!(masked(&secrets, "hunter22"), "********");
    }
}
