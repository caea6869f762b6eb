//! What a run read: the object a proxied GET names, or the set a LIST selects, kept when the run does
//! not own it (not the CR itself, not one of its children). Decided from the request and its answer
//! alone (no I/O).

use http::StatusCode;
use serde_json::Value;

use super::owner::Owner;
use super::request_info::RequestInfo;
use crate::history::Read;

/// The read a GET of an object (or a LIST, `info.name` `None`) with this query and answer adds to
/// the run's read-set, or `None`: the request failed, or the object is the run's own. A GET that
/// found nothing is kept: the run read that the object is absent, and its creation is a change.
#[must_use]
pub fn read_of(
    info: &RequestInfo,
    query: &str,
    code: StatusCode,
    answer: &Value,
    owner: &Owner,
) -> Option<Read> {
    if info.subresource.is_some() || !(code.is_success() || code == StatusCode::NOT_FOUND) {
        return None;
    }
    let found = code.is_success();
    if info.name.is_some() && found && owns(owner, info, answer) {
        return None;
    }
    let parameter = |key: &str| query_parameter(query, key).filter(|value| !value.is_empty());
    let listed = info.name.is_none();
    let kind = answer["kind"].as_str().filter(|_| found);
    let kind = match (listed, kind) {
        (false, Some(kind)) => Some(kind.to_string()),
        (true, Some(kind)) => kind.strip_suffix("List").map(str::to_string),
        (_, None) => None,
    };
    Some(Read {
        group: info.group.clone(),
        version: info.version.clone(),
        resource: info.resource.clone(),
        kind,
        namespace: info.namespace.clone(),
        name: info.name.clone(),
        label_selector: parameter("labelSelector").filter(|_| listed),
        field_selector: parameter("fieldSelector").filter(|_| listed),
    })
}

/// Whether the object a GET answered is the run's CR or a child of it.
fn owns(owner: &Owner, info: &RequestInfo, object: &Value) -> bool {
    let itself = object["metadata"]["uid"] == owner.uid.as_str()
        || (info.group == owner.gvk.group
            && object["kind"] == owner.gvk.kind.as_str()
            && info.name.as_deref() == Some(owner.name.as_str())
            && info.namespace == owner.namespace);
    itself || owner.is_linked(object)
}

/// The decoded value of `key` in a URL query (`a=b&c=d`), the first one when repeated.
fn query_parameter(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(name) == key).then(|| percent_decode(value))
    })
}

/// `%XX` escapes and `+` (a space in a query) decoded; a malformed escape is kept as written.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes[i..] {
            [b'%', high, low, ..] => hex(high).zip(hex(low)).map(|(high, low)| high * 16 + low),
            _ => None,
        };
        match (bytes[i], escaped) {
            (_, Some(byte)) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (b'+', None) => out.push(b' '),
            (byte, None) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(digit: u8) -> Option<u8> {
    (digit as char).to_digit(16).and_then(|value| u8::try_from(value).ok())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::watches::Gvk;

    fn owner() -> Owner {
        Owner {
            gvk: Gvk::new("app.example.com", "v1", "App"),
            plural: "apps".into(),
            name: "app".into(),
            uid: "owner-uid".into(),
            namespace: Some("ns".into()),
            shard_label: None,
        }
    }

    fn read(path: &str, query: &str, code: u16, answer: Value) -> Option<Read> {
        let info = RequestInfo::parse(path).unwrap();
        read_of(&info, query, StatusCode::from_u16(code).unwrap(), &answer, &owner())
    }

    fn config_map(metadata: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"a": "1"}})
    }

    #[test]
    fn a_get_of_a_users_object_is_read_with_its_kind() {
        let got = read(
            "/api/v1/namespaces/ns/configmaps/settings",
            "",
            200,
            config_map(json!({"name": "settings"})),
        );
        assert_eq!(
            got,
            Some(crate::history::record::tests::read("configmaps", Some("ConfigMap"), "settings"))
        );
    }

    #[test]
    fn a_get_that_found_nothing_is_a_read_of_an_absent_object() {
        let status = json!({"kind": "Status", "code": 404});
        let got = read("/api/v1/namespaces/ns/secrets/later", "", 404, status).unwrap();
        assert_eq!((got.name.as_deref(), got.kind), (Some("later"), None));
    }

    #[test]
    fn failed_reads_and_subresources_are_not_reads() {
        assert_eq!(read("/api/v1/namespaces/ns/secrets/s", "", 403, json!({"kind": "Status"})), None);
        assert_eq!(read("/api/v1/namespaces/ns/pods/p/log", "", 200, json!({})), None);
    }

    #[test]
    fn the_cr_itself_and_its_children_are_not_part_of_the_read_set() {
        let itself =
            json!({"kind": "App", "metadata": {"name": "app", "namespace": "ns", "uid": "owner-uid"}});
        assert_eq!(read("/apis/app.example.com/v1/namespaces/ns/apps/app", "", 200, itself), None);
        let child =
            config_map(json!({"name": "c", "ownerReferences": [{"uid": "owner-uid", "name": "app"}]}));
        assert_eq!(read("/api/v1/namespaces/ns/configmaps/c", "", 200, child), None);
        let across = config_map(json!({"name": "c", "annotations": {
            "operator-sdk/primary-resource": "ns/app",
            "operator-sdk/primary-resource-type": "App.app.example.com"}}));
        assert_eq!(read("/api/v1/namespaces/other/configmaps/c", "", 200, across), None);
        let sibling = json!({"kind": "App", "metadata": {"name": "other", "namespace": "ns", "uid": "x"}});
        assert!(read("/apis/app.example.com/v1/namespaces/ns/apps/other", "", 200, sibling).is_some());
    }

    #[test]
    fn a_list_keeps_its_decoded_selectors_and_the_kind_of_its_items() {
        let answer = json!({"kind": "ConfigMapList", "items": []});
        let got = read(
            "/api/v1/namespaces/ns/configmaps",
            "labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&fieldSelector=metadata.name%21%3Dx&limit=500",
            200,
            answer,
        )
        .unwrap();
        assert_eq!(got.kind.as_deref(), Some("ConfigMap"));
        assert_eq!(got.label_selector.as_deref(), Some("app=web,tier in (a,b)"));
        assert_eq!(got.field_selector.as_deref(), Some("metadata.name!=x"));
        assert_eq!(got.name, None);
        let all =
            read("/api/v1/configmaps", "labelSelector=", 200, json!({"kind": "ConfigMapList"})).unwrap();
        assert_eq!((all.namespace, all.label_selector), (None, None));
    }

    #[test]
    fn malformed_escapes_are_kept_as_written() {
        assert_eq!(percent_decode("a%3Db%2"), "a=b%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}
