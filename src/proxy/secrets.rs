//! The Secret values a run sees through the proxy: taken from the API server's answers to its
//! requests on Secrets (GET, LIST, WATCH, and writes, which answer with the object) as they stream to
//! the run, so that its output can be masked (see [`crate::mask`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use base64::Engine;
use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use serde_json::Value;

use super::request_info::RequestInfo;
use crate::mask::Secrets;

/// Most of one answer (or one watch event) held to read its Secrets; a larger one is passed on
/// unread, with a warning that its values cannot be masked.
const MAX_DOCUMENT: usize = 64 << 20;

/// Whether a request's answer may carry Secret values: any request on core `secrets` objects
/// (the deprecated `/api/v1/watch/...` paths included), not on their subresources.
pub fn carries_secrets(path: &str) -> bool {
    if !path.contains("/secrets") {
        return false;
    }
    let path = match path.strip_prefix("/api/v1/watch/") {
        Some(rest) => format!("/api/v1/{rest}"),
        None => path.to_string(),
    };
    RequestInfo::parse(&path)
        .is_some_and(|info| info.group.is_empty() && info.resource == "secrets" && info.subresource.is_none())
}

/// Adds the values of the Secrets in one JSON document to `secrets`: a Secret, a SecretList, or a
/// watch event holding one. Anything else (a `Status`, a Table, protobuf) adds nothing.
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

/// An answer's body passed on as it streams, its Secrets learned from each complete document
/// (each line of a watch; the whole of any other answer) before the bytes that end it are passed on.
pub struct Tap<B> {
    inner: B,
    secrets: Arc<Secrets>,
    pending: Vec<u8>,
    overflowed: bool,
}

impl<B> Tap<B> {
    /// Taps `inner`, adding what it carries to `secrets`.
    pub fn new(inner: B, secrets: Arc<Secrets>) -> Self {
        Tap { inner, secrets, pending: Vec::new(), overflowed: false }
    }

    /// Takes in a chunk: learns each line it completes.
    fn take(&mut self, mut chunk: &[u8]) {
        while let Some(at) = chunk.iter().position(|byte| *byte == b'\n') {
            self.hold(&chunk[..at]);
            self.flush();
            chunk = &chunk[at + 1..];
        }
        self.hold(chunk);
    }

    fn hold(&mut self, part: &[u8]) {
        if self.overflowed || self.pending.len() + part.len() > MAX_DOCUMENT {
            if !self.overflowed {
                tracing::warn!(
                    limit = MAX_DOCUMENT,
                    "an answer about Secrets is too large to read: its values are not masked"
                );
            }
            self.overflowed = true;
            self.pending.clear();
            return;
        }
        self.pending.extend_from_slice(part);
    }

    /// Learns what is held (a complete document) and starts over.
    fn flush(&mut self) {
        if !self.overflowed && !self.pending.iter().all(u8::is_ascii_whitespace) {
            learn(&self.secrets, &self.pending);
        }
        self.pending.clear();
        self.overflowed = false;
    }
}

impl<B> Body for Tap<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.take(data.chunk());
                }
                if this.inner.is_end_stream() {
                    this.flush();
                }
            }
            Poll::Ready(None) => this.flush(),
            Poll::Ready(Some(Err(_))) | Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
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
    async fn a_whole_answer_without_a_newline_is_learned_before_its_last_bytes_pass() {
        let secrets = Arc::new(Secrets::default());
        let body = Full::new(Bytes::from_static(br#"{"kind":"Secret","data":{"a":"aHVudGVyMjI="}}"#));
        let mut tap = Tap::new(body, secrets.clone());
        let _ = tap.frame().await.unwrap().unwrap();
        assert_eq!(masked(&secrets, "hunter22"), "********");
    }
}
