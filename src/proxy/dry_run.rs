//! A plan's request rebuilt as the API server will read it, dry run set everywhere the API server
//! reads it from, or refused with the reason (DESIGN.md, Trust boundaries, invariant 2).
//!
//! The API server (Go's `net/http` and `net/url`) routes on the path with its percent escapes
//! decoded, reads a write's options from the query with `url.ParseQuery`, which silently drops every
//! pair it cannot parse, and reads a DELETE's options from its body, ignoring the query, whenever the
//! body is not empty. So the proxy does not look for a dry-run flag in what a run sent: it parses the
//! request by those rules and writes the request it sends afresh from what it parsed, in a form with
//! one reading: a canonical path, a canonical query that ends in exactly `dryRun=All`, and a JSON
//! body whose `dryRun` is `["All"]`. What it cannot parse with certainty, it refuses.

use bytes::Bytes;
use http::{HeaderMap, Method, header};
use serde_json::{Map, Value, json};

use super::request_info::RequestInfo;

/// Pairs a write's query may have. Clients send a handful; Go's own limit (`urlmaxqueryparams`) is
/// far higher, and past it the API server reads no pair at all, dry run included.
pub const MAX_PAIRS: usize = 64;

/// The query key the API server reads dry run from (case-sensitive, every value).
const DRY_RUN: &str = "dryRun";

/// Subresources written through their resource's own storage, which honours dry run.
const STORED_SUBRESOURCES: [&str; 2] = ["status", "scale"];

/// Subresources that reach a running workload (its processes, its HTTP server): a dry run cannot
/// hold back what they do, whatever the method.
const CONNECT_SUBRESOURCES: [&str; 4] = ["proxy", "exec", "attach", "portforward"];

/// A plan's request as the proxy sends it on.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuilt {
    /// The canonical path, and the query: for a write, rebuilt and ending in `dryRun=All`; for a
    /// read, as the run sent it.
    pub path_and_query: String,
    /// A JSON body to send instead of the run's (its options with `dryRun: ["All"]`).
    pub body: Option<Bytes>,
    /// Whether the request is a write (sent as a dry run), not a read.
    pub write: bool,
}

/// Why a plan's request is refused; its message is the answer's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a plan's run may not send this {what}: {reason}")]
pub struct Refusal {
    /// "write" or "request".
    pub what: &'static str,
    /// What the proxy could not rebuild.
    pub reason: Reason,
}

/// What the proxy could not rebuild with certainty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// A method that is neither a read nor a write the API server dry-runs.
    #[error("the method {0} is neither a read nor a write the API server can dry-run")]
    Method(String),
    /// A path segment the API server may read differently from the proxy.
    #[error("the path segment {segment:?} is ambiguous ({why})")]
    Segment {
        /// The segment as sent.
        segment: String,
        /// What makes it ambiguous.
        why: &'static str,
    },
    /// A path that does not start at the root.
    #[error("the path {0:?} does not start with \"/\"")]
    Relative(String),
    /// A write to a path that names no API resource.
    #[error("{0:?} is not a resource path, and only writes of resources can be dry-run")]
    NotAResource(String),
    /// A path with more segments than its resource, name and subresource.
    #[error("{0:?} has segments after its subresource")]
    Trailing(String),
    /// A subresource (or resource) whose effect a dry run does not hold back.
    #[error("{target} {why}")]
    Target {
        /// The resource or subresource.
        target: String,
        /// Why a dry run cannot hold it back.
        why: &'static str,
    },
    /// A query pair Go's `url.ParseQuery` rejects, so the API server would drop it unread.
    #[error("the query pair {pair:?} is not one the API server reads ({why})")]
    Pair {
        /// The pair as sent.
        pair: String,
        /// Why Go rejects it.
        why: &'static str,
    },
    /// More query pairs than a write needs.
    #[error("the query has {0} pairs, more than the {MAX_PAIRS} the proxy reads")]
    TooManyPairs(usize),
    /// A body holding options the proxy cannot read, so it cannot set dry run in them.
    #[error("its {object} body {why}")]
    Body {
        /// What the body holds: `DeleteOptions` or `Eviction`.
        object: &'static str,
        /// What is wrong with it.
        why: String,
    },
}

/// The request a plan's run may send in place of this one: a read with its path made canonical, a
/// write rebuilt as a dry run, or a refusal.
pub fn rebuild(
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Rebuilt, Refusal> {
    let write = match *method {
        Method::GET | Method::HEAD => false,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE => true,
        _ => return Err(refusal(true, Reason::Method(method.to_string()))),
    };
    let refused = |reason| refusal(write, reason);
    let (segments, trailing_slash) = segments(path).map_err(refused)?;
    let decoded = format!("/{}", segments.join("/"));
    let info = RequestInfo::parse(&decoded);
    connect(&segments, info.as_ref()).map_err(refused)?;
    let path = canonical_path(&segments, trailing_slash);
    if !write {
        let path_and_query = match query {
            Some(query) => format!("{path}?{query}"),
            None => path,
        };
        return Ok(Rebuilt { path_and_query, body: None, write });
    }
    if trailing_slash {
        let why = "a trailing \"/\" in a write";
        return Err(refused(Reason::Segment { segment: String::new(), why }));
    }
    let info = info.ok_or_else(|| refused(Reason::NotAResource(decoded.clone())))?;
    if segments.len() > expected_segments(&info) {
        return Err(refused(Reason::Trailing(decoded)));
    }
    let body = write_body(method, &info, headers, body).map_err(refused)?;
    let query = dry_run_query(query.unwrap_or_default()).map_err(refused)?;
    Ok(Rebuilt { path_and_query: format!("{path}?{query}"), body, write })
}

fn refusal(write: bool, reason: Reason) -> Refusal {
    Refusal { what: if write { "write" } else { "request" }, reason }
}

/// The path's segments, percent-decoded as Go decodes a request's path, and whether it ends in "/".
/// A segment the API server could split or resolve differently from the proxy is refused.
fn segments(path: &str) -> Result<(Vec<String>, bool), Reason> {
    let rest = path.strip_prefix('/').ok_or_else(|| Reason::Relative(path.to_string()))?;
    if rest.is_empty() {
        return Ok((Vec::new(), false));
    }
    let (rest, trailing_slash) = match rest.strip_suffix('/') {
        Some(rest) => (rest, true),
        None => (rest, false),
    };
    let segments = rest.split('/').map(segment).collect::<Result<_, _>>()?;
    Ok((segments, trailing_slash))
}

fn segment(raw: &str) -> Result<String, Reason> {
    let ambiguous = |why| Reason::Segment { segment: raw.to_string(), why };
    let bytes = unescape(raw, false).ok_or_else(|| ambiguous("a \"%\" not followed by two hex digits"))?;
    let text = String::from_utf8(bytes).map_err(|_| ambiguous("not UTF-8 once decoded"))?;
    match text.as_str() {
        "" => Err(ambiguous("an empty segment")),
        "." | ".." => Err(ambiguous("a dot segment")),
        _ if text.contains('/') => Err(ambiguous("an encoded \"/\", which the API server splits on")),
        _ => Ok(text),
    }
}

/// Refuses what reaches a running workload: its connect subresources, and the old `/proxy/` verb.
fn connect(segments: &[String], info: Option<&RequestInfo>) -> Result<(), Reason> {
    let words: Vec<&str> = segments.iter().map(String::as_str).collect();
    let why = "reaches a running workload, which a dry run cannot hold back";
    if let ["api", _, "proxy", ..] | ["apis", _, _, "proxy", ..] = words.as_slice() {
        return Err(Reason::Target { target: "the proxy verb".to_string(), why });
    }
    match info.and_then(|info| info.subresource.as_deref()) {
        Some(sub) if CONNECT_SUBRESOURCES.contains(&sub) => {
            Err(Reason::Target { target: format!("the subresource {sub:?}"), why })
        }
        _ => Ok(()),
    }
}

/// Segments of the canonical path of `info`: prefix, namespace, resource, name, subresource.
fn expected_segments(info: &RequestInfo) -> usize {
    let prefix = if info.group.is_empty() { 2 } else { 3 };
    let namespace = if info.namespace.is_some() { 2 } else { 0 };
    prefix + namespace + 1 + usize::from(info.name.is_some()) + usize::from(info.subresource.is_some())
}

/// The body a write is sent with: a DELETE's options or an eviction's with dry run set, or `None`
/// to send the run's own body (creates, updates and patches take their options from the query).
fn write_body(
    method: &Method,
    info: &RequestInfo,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Option<Bytes>, Reason> {
    let core = info.group.is_empty();
    match info.subresource.as_deref() {
        None if core && info.resource == "bindings" => Err(Reason::Target {
            target: "the resource \"bindings\"".to_string(),
            why: "schedules a pod, and the proxy cannot vouch that a dry run holds it back",
        }),
        Some("eviction") if core && info.resource == "pods" && *method == Method::POST => {
            eviction(headers, body).map(Some)
        }
        None | Some("status" | "scale") if *method == Method::DELETE && !body.is_empty() => {
            delete_options(headers, body).map(Some)
        }
        None => Ok(None),
        Some(sub) if STORED_SUBRESOURCES.contains(&sub) => Ok(None),
        Some(sub) => Err(Reason::Target {
            target: format!("the subresource {sub:?}"),
            why: "is not one the proxy can vouch a dry run holds back",
        }),
    }
}

/// A DELETE's body is the options the API server reads instead of the query: dry run goes in it.
fn delete_options(headers: &HeaderMap, body: &[u8]) -> Result<Bytes, Reason> {
    let object = "DeleteOptions";
    let mut options = json_object(headers, body, object)?;
    set_dry_run(&mut options);
    Ok(Bytes::from(Value::Object(options).to_string()))
}

/// An eviction deletes with its `deleteOptions`, whose dry run wins when set (else the query's):
/// both say `All`.
fn eviction(headers: &HeaderMap, body: &[u8]) -> Result<Bytes, Reason> {
    let object = "Eviction";
    let mut eviction = json_object(headers, body, object)?;
    let refused = |why: &str| Reason::Body { object, why: why.to_string() };
    if eviction.keys().any(|key| key != "deleteOptions" && same_field(key, "deleteOptions")) {
        return Err(refused("has a field named like \"deleteOptions\" in another case"));
    }
    let mut options = match eviction.remove("deleteOptions") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(options)) => options,
        Some(_) => return Err(refused("has a \"deleteOptions\" that is not an object")),
    };
    set_dry_run(&mut options);
    eviction.insert("deleteOptions".to_string(), Value::Object(options));
    Ok(Bytes::from(Value::Object(eviction).to_string()))
}

/// `options` with `dryRun: ["All"]` and no other field a JSON decoder could read as dry run.
fn set_dry_run(options: &mut Map<String, Value>) {
    options.retain(|key, _| !same_field(key, DRY_RUN));
    options.insert(DRY_RUN.to_string(), json!(["All"]));
}

/// Whether a JSON decoder that matches field names case-insensitively, as Go's `encoding/json`
/// does (with its Unicode folds of `s` and `k`), could read `key` as `name`.
fn same_field(key: &str, name: &str) -> bool {
    let fold = |c: char| match c {
        '\u{17f}' => 's',
        '\u{212a}' => 'k',
        c => c.to_ascii_lowercase(),
    };
    key.chars().map(fold).eq(name.chars().map(fold))
}

/// The body as a JSON object, when the API server would decode it as JSON.
fn json_object(headers: &HeaderMap, body: &[u8], object: &'static str) -> Result<Map<String, Value>, Reason> {
    let refused = |why: String| Reason::Body { object, why };
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    let content_type = match (types.next(), types.next()) {
        (None, _) => "",
        (Some(value), None) => {
            value.to_str().map_err(|_| refused("has a Content-Type that is not text".into()))?
        }
        (Some(_), Some(_)) => return Err(refused("has two Content-Type headers".into())),
    };
    // The API server decodes a body without a Content-Type as its first media type, JSON.
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if !content_type.is_empty() && essence != "application/json" {
        return Err(refused(format!("is not JSON (Content-Type {content_type:?})")));
    }
    let encoded = headers.get_all(header::CONTENT_ENCODING).iter().any(|value| value != "identity");
    if encoded {
        return Err(refused("is encoded (Content-Encoding), so its options cannot be read".into()));
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(refused("is JSON but not an object".into())),
        Err(_) => Err(refused("is not valid JSON".into())),
    }
}

/// The query parsed as Go's `url.ParseQuery` parses it, every `dryRun` pair dropped, the rest
/// written canonically in their order, and `dryRun=All` last. A pair Go would reject is refused: the
/// API server would drop it, so the proxy cannot know what the run meant by it.
fn dry_run_query(raw: &str) -> Result<String, Reason> {
    let pairs = go_query(raw)?;
    let mut rebuilt = Vec::with_capacity(pairs.len() + 1);
    for (key, value) in pairs {
        // Only `dryRun` is read, but a key that differs only in case is dropped too: no reader of
        // the request should find a second opinion on dry run in it.
        if same_field(&key, DRY_RUN) {
            continue;
        }
        rebuilt.push(format!("{}={}", escape(&key, true), escape(&value, true)));
    }
    rebuilt.push(format!("{DRY_RUN}=All"));
    Ok(rebuilt.join("&"))
}

/// A query's pairs as Go's `url.ParseQuery` reads them (`+` a space, `%XX` decoded, empty pairs
/// skipped), in order; a pair it would drop, or more than [`MAX_PAIRS`] pairs, is the reason.
pub(super) fn go_query(raw: &str) -> Result<Vec<(String, String)>, Reason> {
    let pairs: Vec<&str> = raw.split('&').collect();
    if pairs.len() > MAX_PAIRS {
        return Err(Reason::TooManyPairs(pairs.len()));
    }
    let mut decoded = Vec::with_capacity(pairs.len());
    for pair in pairs {
        let rejected = |why| Reason::Pair { pair: pair.to_string(), why };
        if pair.contains(';') {
            return Err(rejected("a \";\" in a pair"));
        }
        if pair.is_empty() {
            continue;
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |part: &str| -> Result<String, Reason> {
            let bytes =
                unescape(part, true).ok_or_else(|| rejected("a \"%\" not followed by two hex digits"))?;
            String::from_utf8(bytes).map_err(|_| rejected("not UTF-8 once decoded"))
        };
        decoded.push((decode(key)?, decode(value)?));
    }
    Ok(decoded)
}

/// `/`-joined segments, each escaped but for unreserved characters.
fn canonical_path(segments: &[String], trailing_slash: bool) -> String {
    let mut path = String::new();
    for segment in segments {
        path.push('/');
        path.push_str(&escape(segment, false));
    }
    if path.is_empty() || trailing_slash {
        path.push('/');
    }
    path
}

/// Go's `unescape`: `%XX` decoded (anything else after `%` is an error), `+` a space in a query.
fn unescape(raw: &str, plus_is_space: bool) -> Option<Vec<u8>> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let high = hex(*bytes.get(i + 1)?)?;
                let low = hex(*bytes.get(i + 2)?)?;
                out.push((high << 4) | low);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    Some(out)
}

fn hex(digit: u8) -> Option<u8> {
    char::from(digit).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Every byte but the unreserved ones (`A-Za-z0-9-._~`) as `%XX`; a query's space as `+`.
fn escape(text: &str, space_as_plus: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for &byte in text.as_bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(char::from(byte)),
            b' ' if space_as_plus => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJECT: &str = "/api/v1/namespaces/ns/configmaps/victim";

    fn headers(content_type: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(content_type) = content_type {
            headers.insert(header::CONTENT_TYPE, content_type.parse().unwrap());
        }
        headers
    }

    fn send(
        method: Method,
        path: &str,
        query: Option<&str>,
        content_type: Option<&str>,
        body: &str,
    ) -> Result<Rebuilt, Refusal> {
        rebuild(&method, path, query, &headers(content_type), body.as_bytes())
    }

    fn sent_to(method: Method, path: &str, query: Option<&str>) -> String {
        send(method, path, query, None, "").expect("rebuilt").path_and_query
    }

    fn reason(
        method: Method,
        path: &str,
        query: Option<&str>,
        content_type: Option<&str>,
        body: &str,
    ) -> Reason {
        send(method, path, query, content_type, body).expect_err("refused").reason
    }

    #[test]
    fn every_write_gets_exactly_dry_run_all_last() {
        let collection = "/api/v1/namespaces/ns/configmaps";
        assert_eq!(sent_to(Method::POST, collection, None), format!("{collection}?dryRun=All"));
        assert_eq!(sent_to(Method::PUT, OBJECT, Some("")), format!("{OBJECT}?dryRun=All"));
        assert_eq!(
            sent_to(Method::PATCH, OBJECT, Some("fieldManager=m&force=true")),
            format!("{OBJECT}?fieldManager=m&force=true&dryRun=All")
        );
        assert_eq!(sent_to(Method::DELETE, OBJECT, None), format!("{OBJECT}?dryRun=All"));
        assert_eq!(
            sent_to(Method::DELETE, collection, Some("labelSelector=a%3Db")),
            format!("{collection}?labelSelector=a%3Db&dryRun=All"),
            "a deletecollection too"
        );
        let status = "/apis/g/v1/namespaces/ns/things/t/status";
        assert_eq!(sent_to(Method::PUT, status, None), format!("{status}?dryRun=All"));
        let scale = "/apis/apps/v1/namespaces/ns/deployments/d/scale";
        assert_eq!(sent_to(Method::PATCH, scale, None), format!("{scale}?dryRun=All"));
        let namespace = "/api/v1/namespaces/ns/status";
        assert_eq!(sent_to(Method::PUT, namespace, None), format!("{namespace}?dryRun=All"));
    }

    #[test]
    fn every_dry_run_pair_of_the_run_is_dropped_whatever_it_says() {
        for query in [
            "dryRun=All",
            "dryRun=",
            "dryRun",
            "dryRun=All&dryRun=All",
            "dryRun=Nope",
            "DryRun=All",
            "dryrun=x",
            "dry%52un=x",
            "dryRun=All&DryRun=",
        ] {
            assert_eq!(
                sent_to(Method::DELETE, OBJECT, Some(query)),
                format!("{OBJECT}?dryRun=All"),
                "{query}"
            );
        }
    }

    #[test]
    fn a_pair_go_rejects_is_refused_not_forwarded() {
        let pair = |query: &str| match reason(Method::DELETE, OBJECT, Some(query), None, "") {
            Reason::Pair { pair, why } => (pair, why),
            other => panic!("{query}: {other:?}"),
        };
        assert_eq!(pair("dryRun=All;"), ("dryRun=All;".to_string(), "a \";\" in a pair"));
        assert_eq!(pair("a=b;dryRun=All").1, "a \";\" in a pair");
        assert_eq!(pair("dryRun=%41ll%").1, "a \"%\" not followed by two hex digits");
        assert_eq!(pair("x=%zz&dryRun=All").1, "a \"%\" not followed by two hex digits");
        assert_eq!(pair("x=%ff").1, "not UTF-8 once decoded");
        let message = send(Method::DELETE, OBJECT, Some("dryRun=All;"), None, "").unwrap_err().to_string();
        assert_eq!(
            message,
            "a plan's run may not send this write: the query pair \"dryRun=All;\" is not one the API server \
             reads (a \";\" in a pair)"
        );
    }

    #[test]
    fn the_query_is_rewritten_in_its_one_canonical_form() {
        // `+` is a space, a second `?` is part of a value, a pair without `=` has an empty value,
        // empty pairs are nothing.
        assert_eq!(
            sent_to(Method::PATCH, OBJECT, Some("fieldManager=a+b&&x=y?dryRun=All&pretty&k=%7e%2f")),
            format!("{OBJECT}?fieldManager=a+b&x=y%3FdryRun%3DAll&pretty=&k=~%2F&dryRun=All")
        );
        let many = vec!["a=b"; MAX_PAIRS + 1].join("&");
        assert_eq!(reason(Method::POST, OBJECT, Some(&many), None, ""), Reason::TooManyPairs(MAX_PAIRS + 1));
    }

    #[test]
    fn a_name_is_decoded_then_encoded_so_it_stays_one_segment() {
        // A name that says `?dryRun=All` is a name, and the real query still gets its own.
        assert_eq!(
            sent_to(Method::DELETE, "/api/v1/namespaces/ns/configmaps/victim%3FdryRun%3DAll", None),
            "/api/v1/namespaces/ns/configmaps/victim%3FdryRun%3DAll?dryRun=All"
        );
        assert_eq!(
            sent_to(Method::DELETE, "/api/v1/namespaces/n%73/configmaps/a:b+c", None),
            "/api/v1/namespaces/ns/configmaps/a%3Ab%2Bc?dryRun=All"
        );
    }

    #[test]
    fn a_path_the_api_server_could_split_or_resolve_otherwise_is_refused() {
        for (path, why) in [
            (
                "/api/v1/namespaces/ns/configmaps/victim%2Fstatus",
                "an encoded \"/\", which the API server splits on",
            ),
            (
                "/api/v1/namespaces/ns/configmaps/victim%2fx",
                "an encoded \"/\", which the API server splits on",
            ),
            ("/api/v1/namespaces/ns/configmaps/../secrets/s", "a dot segment"),
            ("/api/v1/namespaces/ns/configmaps/%2E", "a dot segment"),
            ("/api/v1/namespaces//configmaps/c", "an empty segment"),
            ("//api/v1/namespaces/ns/configmaps", "an empty segment"),
            ("/api/v1/namespaces/ns/configmaps/%zz", "a \"%\" not followed by two hex digits"),
            ("/api/v1/namespaces/ns/configmaps/v%", "a \"%\" not followed by two hex digits"),
            ("/api/v1/namespaces/ns/configmaps/%C0", "not UTF-8 once decoded"),
            ("/api/v1/namespaces/ns/configmaps/c/", "a trailing \"/\" in a write"),
        ] {
            match reason(Method::DELETE, path, None, None, "") {
                Reason::Segment { why: found, .. } => assert_eq!(found, why, "{path}"),
                other => panic!("{path}: {other:?}"),
            }
        }
        assert_eq!(reason(Method::GET, "api/v1", None, None, ""), Reason::Relative("api/v1".into()));
    }

    #[test]
    fn workloads_are_not_reached_by_any_method() {
        for path in [
            "/api/v1/namespaces/ns/services/s/proxy/admin/reset",
            "/api/v1/namespaces/ns/services/s:80/proxy",
            "/api/v1/namespaces/ns/pods/p/proxy/",
            "/api/v1/nodes/n/proxy/logs",
            "/api/v1/namespaces/ns/pods/p/exec",
            "/api/v1/namespaces/ns/pods/p/attach",
            "/api/v1/namespaces/ns/pods/p/portforward",
            "/api/v1/proxy/namespaces/ns/services/s",
            "/api/v1/namespaces/ns/services/s%2Fproxy",
        ] {
            for method in [Method::GET, Method::HEAD, Method::POST, Method::PUT, Method::DELETE] {
                let refused = send(method.clone(), path, None, None, "");
                assert!(refused.is_err(), "{method} {path}: {refused:?}");
            }
        }
    }

    #[test]
    fn writes_the_proxy_cannot_vouch_for_are_refused() {
        for (method, path) in [
            (Method::POST, "/api/v1/namespaces/ns/bindings"),
            (Method::POST, "/api/v1/namespaces/ns/pods/p/binding"),
            (Method::POST, "/api/v1/namespaces/ns/serviceaccounts/sa/token"),
            (Method::PUT, "/api/v1/namespaces/ns/finalize"),
            (Method::PUT, "/apis/certificates.k8s.io/v1/certificatesigningrequests/c/approval"),
            (Method::PATCH, "/api/v1/namespaces/ns/pods/p/ephemeralcontainers"),
            (Method::PUT, "/api/v1/namespaces/ns/pods/p/eviction"),
        ] {
            assert!(
                matches!(reason(method.clone(), path, None, None, ""), Reason::Target { .. }),
                "{method} {path}"
            );
        }
        for path in ["/version", "/apis", "/api/v1/watch/namespaces/ns/configmaps", "/"] {
            assert_eq!(reason(Method::POST, path, None, None, ""), Reason::NotAResource(path.to_string()));
        }
        let deep = "/api/v1/namespaces/ns/configmaps/c/status/x";
        assert_eq!(reason(Method::PUT, deep, None, None, ""), Reason::Trailing(deep.to_string()));
        assert_eq!(reason(Method::OPTIONS, OBJECT, None, None, ""), Reason::Method("OPTIONS".to_string()));
    }

    #[test]
    fn reads_keep_their_query_and_get_a_canonical_path() {
        assert_eq!(
            sent_to(Method::GET, "/api/v1/namespaces/ns/configmaps", Some("watch=1;x&labelSelector=a%3Db")),
            "/api/v1/namespaces/ns/configmaps?watch=1;x&labelSelector=a%3Db"
        );
        assert_eq!(sent_to(Method::GET, "/apis/", None), "/apis/");
        assert_eq!(sent_to(Method::GET, "/", None), "/");
        assert_eq!(
            sent_to(Method::GET, "/api/v1/namespaces/ns/secret%73", None),
            "/api/v1/namespaces/ns/secrets"
        );
        let rebuilt = send(Method::GET, "/api/v1/namespaces/ns/pods/p/log", None, None, "").unwrap();
        assert!(!rebuilt.write && rebuilt.body.is_none());
    }

    fn body_of(rebuilt: Result<Rebuilt, Refusal>) -> Value {
        serde_json::from_slice(&rebuilt.expect("rebuilt").body.expect("a body")).unwrap()
    }

    #[test]
    fn a_delete_with_a_body_gets_dry_run_in_the_body_it_is_read_from() {
        let json = Some("application/json");
        let body = r#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}"#;
        let sent = body_of(send(Method::DELETE, OBJECT, None, json, body));
        assert_eq!(
            sent,
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground", "dryRun": ["All"]})
        );
        for body in
            [r#"{"dryRun":[]}"#, r#"{"dryRun":null}"#, r#"{"DryRun":["All"],"dryrun":"x","dryRun":["x"]}"#]
        {
            assert_eq!(
                body_of(send(Method::DELETE, OBJECT, None, json, body)),
                json!({"dryRun": ["All"]}),
                "{body}"
            );
        }
        let collection = "/api/v1/namespaces/ns/configmaps";
        let rebuilt = send(
            Method::DELETE,
            collection,
            Some("labelSelector=a"),
            Some("application/JSON; charset=utf-8"),
            "{}",
        );
        assert_eq!(
            rebuilt.clone().unwrap().path_and_query,
            format!("{collection}?labelSelector=a&dryRun=All")
        );
        assert_eq!(body_of(rebuilt), json!({"dryRun": ["All"]}));
        assert_eq!(
            body_of(send(Method::DELETE, OBJECT, None, None, "{}")),
            json!({"dryRun": ["All"]}),
            "JSON by default"
        );
        let empty = send(Method::DELETE, OBJECT, None, Some("application/yaml"), "").unwrap();
        assert_eq!(empty.body, None, "an empty body leaves the options to the query");
    }

    #[test]
    fn a_delete_body_that_is_not_a_json_object_is_refused() {
        for (content_type, body) in [
            (Some("application/yaml"), "dryRun: []\n"),
            (Some("application/vnd.kubernetes.protobuf"), "k8s\u{0}\n\u{c}\n\u{2}v1"),
            (Some("application/cbor"), "\u{a1}"),
            (Some("application/json"), "not json"),
            (Some("application/json"), " "),
            (Some("application/json"), "[]"),
            (None, "dryRun: []"),
            (Some("text/plain"), "{}"),
        ] {
            assert!(
                matches!(
                    reason(Method::DELETE, OBJECT, None, content_type, body),
                    Reason::Body { object: "DeleteOptions", .. }
                ),
                "{content_type:?} {body:?}"
            );
        }
        let mut two = headers(Some("application/json"));
        two.append(header::CONTENT_TYPE, "application/yaml".parse().unwrap());
        assert!(rebuild(&Method::DELETE, OBJECT, None, &two, b"{}").is_err());
        let mut gzip = headers(Some("application/json"));
        gzip.insert(header::CONTENT_ENCODING, "gzip".parse().unwrap());
        assert!(rebuild(&Method::DELETE, OBJECT, None, &gzip, b"{}").is_err());
    }

    #[test]
    fn an_eviction_says_dry_run_in_its_query_and_its_delete_options() {
        let eviction = "/api/v1/namespaces/ns/pods/p/eviction";
        let json = Some("application/json");
        let body = r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"p"}}"#;
        let rebuilt = send(Method::POST, eviction, None, json, body);
        assert_eq!(rebuilt.clone().unwrap().path_and_query, format!("{eviction}?dryRun=All"));
        assert_eq!(
            body_of(rebuilt),
            json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}, "deleteOptions": {"dryRun": ["All"]}})
        );
        let body = r#"{"metadata":{"name":"p"},"deleteOptions":{"dryRun":[],"gracePeriodSeconds":0}}"#;
        assert_eq!(
            body_of(send(Method::POST, eviction, None, json, body))["deleteOptions"],
            json!({"dryRun": ["All"], "gracePeriodSeconds": 0})
        );
        for body in [r#"{"DeleteOptions":{}}"#, r#"{"deleteOptions":[]}"#, "metadata: {}", ""] {
            assert!(
                matches!(
                    reason(Method::POST, eviction, None, json, body),
                    Reason::Body { object: "Eviction", .. }
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn creates_updates_and_patches_keep_their_body() {
        let body = r#"{"metadata":{"name":"c"},"dryRun":"not read from here"}"#;
        let rebuilt =
            send(Method::POST, "/api/v1/namespaces/ns/configmaps", None, Some("application/yaml"), body);
        assert_eq!(rebuilt.unwrap().body, None);
    }
}

#[cfg(test)]
mod fuzz {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::proptest_support::{config, text};

    /// Go's `url.ParseQuery`, written apart from the proxy's: the pairs, or the first error.
    fn go_parse_query(query: &str) -> Result<BTreeMap<String, Vec<String>>, String> {
        let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for pair in query.split('&') {
            if pair.contains(';') {
                return Err(format!("semicolon in {pair:?}"));
            }
            if pair.is_empty() {
                continue;
            }
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| {
                unescape(s, true).and_then(|b| String::from_utf8(b).ok()).ok_or(format!("escape in {s:?}"))
            };
            values.entry(decode(key)?).or_default().push(decode(value)?);
        }
        Ok(values)
    }

    /// Pieces of paths and queries that parsers treat specially.
    fn piece() -> impl Strategy<Value = String> {
        const SPECIAL: [&str; 33] = [
            "%",
            "%2F",
            "%2f",
            "%3F",
            "%3D",
            "%26",
            "%3B",
            "%25",
            "%zz",
            "%C0",
            "%E2%80%8B",
            "+",
            ";",
            "?",
            "=",
            "&",
            "/",
            ".",
            "..",
            "dryRun",
            "DryRun",
            "dryrun",
            "dry%52un",
            "All",
            "proxy",
            "status",
            "scale",
            "eviction",
            "exec",
            "namespaces",
            "#",
            " ",
            "~",
        ];
        prop_oneof![
            3 => proptest::sample::select(&SPECIAL[..]).prop_map(str::to_string),
            2 => "[a-z0-9]{1,5}",
            1 => text().prop_map(|t| t.chars().filter(|c| c.is_ascii_graphic()).collect()),
        ]
    }

    fn joined(max: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(piece(), 0..max).prop_map(|pieces| pieces.concat())
    }

    fn path() -> impl Strategy<Value = String> {
        let prefix = prop_oneof![
            Just("/api/v1/namespaces/ns/configmaps".to_string()),
            Just("/api/v1/namespaces/ns/pods/p".to_string()),
            Just("/apis/apps/v1/namespaces/ns/deployments".to_string()),
            Just("/api/v1/namespaces".to_string()),
            Just("/api/v1".to_string()),
            Just(String::new()),
        ];
        (prefix, proptest::collection::vec(joined(4), 0..4))
            .prop_map(|(prefix, rest)| format!("{prefix}/{}", rest.join("/")))
    }

    fn method() -> impl Strategy<Value = Method> {
        proptest::sample::select(vec![Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE])
    }

    fn body() -> impl Strategy<Value = (Option<&'static str>, String)> {
        let content_type = proptest::option::of(proptest::sample::select(vec![
            "application/json",
            "application/yaml",
            "application/vnd.kubernetes.protobuf",
            "Application/Json; charset=utf-8",
        ]));
        let body = prop_oneof![
            Just(String::new()),
            Just(r#"{"dryRun":[]}"#.to_string()),
            Just(r#"{"deleteOptions":{"dryRun":["x"]},"DryRun":1}"#.to_string()),
            crate::proptest_support::json().prop_map(|v| v.to_string()),
            joined(6),
        ];
        (content_type, body)
    }

    /// A string written the way some client might escape it: each byte kept where Go reads it
    /// back unchanged, or escaped in upper or lower case hex (a query's space maybe as `+`).
    fn written(text: &str, styles: &[u8], query: bool) -> String {
        let mut out = String::new();
        for (i, &byte) in text.as_bytes().iter().enumerate() {
            let style = styles.get(i).copied().unwrap_or_default() % 3;
            let plain = byte.is_ascii_alphanumeric() || b"-._~:@!$'()*,".contains(&byte);
            match (style, byte) {
                (_, b' ') if query && style == 0 => out.push('+'),
                (0, _) if plain => out.push(char::from(byte)),
                (1, _) => out.push_str(&format!("%{byte:02x}")),
                _ => out.push_str(&format!("%{byte:02X}")),
            }
        }
        out
    }

    /// Names and values as they come from a spec: any text, dry run words included.
    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            2 => "[a-zA-Z0-9 ?=&;/%+.-]{0,8}",
            1 => proptest::sample::select(vec!["dryRun", "DryRun", "All", "victim?dryRun=All;"]).prop_map(str::to_string),
            1 => text(),
        ]
        .prop_filter("a name of one segment", |w| !w.is_empty() && !w.contains('/') && w != "." && w != "..")
    }

    proptest! {
        #![proptest_config(config(2048))]

        #[test]
        fn a_rebuilt_write_is_read_by_the_api_server_as_a_dry_run_and_rebuilds_to_itself(
            method in method(),
            path in path(),
            query in proptest::option::of(joined(8)),
            (content_type, body) in body(),
        ) {
            let mut headers = HeaderMap::new();
            if let Some(content_type) = content_type {
                headers.insert(header::CONTENT_TYPE, content_type.parse().unwrap());
            }
            let Ok(rebuilt) = rebuild(&method, &path, query.as_deref(), &headers, body.as_bytes()) else {
                return Ok(());
            };
            let (sent_path, sent_query) = match rebuilt.path_and_query.split_once('?') {
                Some((path, query)) => (path, Some(query)),
                None => (rebuilt.path_and_query.as_str(), None),
            };
            // The path has one reading: every segment decodes to itself re-encoded, none is a `/`.
            let (segments, _) = segments(sent_path).expect("the sent path parses");
            prop_assert!(segments.iter().all(|s| !s.contains('/')));
            if !rebuilt.write {
                prop_assert_eq!(sent_query, query.as_deref());
                return Ok(());
            }
            let values = go_parse_query(sent_query.unwrap_or_default());
            prop_assert!(values.is_ok(), "{:?} does not parse: {:?}", sent_query, values);
            let values = values.unwrap();
            prop_assert_eq!(values.get("dryRun"), Some(&vec!["All".to_string()]));
            prop_assert!(values.keys().filter(|k| same_field(k, "dryRun")).count() == 1);
            // What the API server reads from the run's query is what the run sent, but dry run.
            let mut sent_values = values.clone();
            sent_values.remove("dryRun");
            let mut asked = go_parse_query(query.as_deref().unwrap_or_default()).expect("a refused query was sent");
            asked.retain(|k, _| !same_field(k, "dryRun"));
            prop_assert_eq!(sent_values, asked);
            if method == Method::DELETE && !body.is_empty() {
                let sent: Value = serde_json::from_slice(rebuilt.body.as_deref().expect("a body")).unwrap();
                prop_assert_eq!(&sent["dryRun"], &json!(["All"]));
                let cased = sent.as_object().unwrap().keys().filter(|k| same_field(k, "dryRun")).count();
                prop_assert_eq!(cased, 1);
            }
            // The canonical form is a fixed point.
            let again_headers = if rebuilt.body.is_some() { HeaderMap::new() } else { headers.clone() };
            let again_body = rebuilt.body.clone().unwrap_or_else(|| Bytes::from(body.clone()));
            let again = rebuild(&method, sent_path, sent_query, &again_headers, &again_body);
            prop_assert_eq!(again.map(|a| a.path_and_query), Ok(rebuilt.path_and_query.clone()));
        }

        #[test]
        fn a_write_whose_query_go_rejects_is_refused(
            method in proptest::sample::select(vec![Method::POST, Method::PUT, Method::PATCH, Method::DELETE]),
            query in joined(8),
        ) {
            let result = rebuild(&method, "/api/v1/namespaces/ns/configmaps/c", Some(&query), &HeaderMap::new(), b"");
            if go_parse_query(&query).is_err() {
                prop_assert!(result.is_err(), "{query:?} was sent as {result:?}");
            }
        }
        #[test]
        fn a_write_go_reads_without_error_is_sent_with_the_same_pairs_and_a_dry_run(
            method in proptest::sample::select(vec![Method::POST, Method::PUT, Method::PATCH, Method::DELETE]),
            name in word(),
            pairs in proptest::collection::vec((word(), word()), 0..6),
            styles in proptest::collection::vec(any::<u8>(), 64),
        ) {
            let path = format!("/api/v1/namespaces/ns/configmaps/{}", written(&name, &styles, false));
            let query: Vec<String> = pairs
                .iter()
                .map(|(key, value)| format!("{}={}", written(key, &styles, true), written(value, &styles, true)))
                .collect();
            let query = query.join("&");
            let rebuilt = rebuild(&method, &path, Some(&query), &HeaderMap::new(), b"");
            prop_assert!(rebuilt.is_ok(), "{path}?{query} was refused: {rebuilt:?}");
            let rebuilt = rebuilt.unwrap();
            let (sent_path, sent_query) = rebuilt.path_and_query.split_once('?').expect("a query");
            let (segments, _) = segments(sent_path).expect("the sent path parses");
            prop_assert_eq!(segments.last(), Some(&name));
            let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (key, value) in pairs.iter().filter(|(key, _)| !same_field(key, DRY_RUN)) {
                expected.entry(key.clone()).or_default().push(value.clone());
            }
            expected.insert(DRY_RUN.to_string(), vec!["All".to_string()]);
            prop_assert_eq!(go_parse_query(sent_query), Ok(expected));
        }
    }
}
