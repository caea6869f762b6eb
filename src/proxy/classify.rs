//! What the proxy does with a request, decided from its method, path, query and headers alone
//! (no I/O): [`classify`] before it is sent (or [`classify_plan`] for a plan's run), [`settle`]
//! after a linked write was answered.

use http::{HeaderMap, Method, StatusCode, Uri, header};

use super::owner::{Link, Ownership, Write};
use super::request_info::RequestInfo;

/// How the proxy handles one request.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handling {
    /// Exec, attach, port-forward: the upgrade is forwarded, then bytes are copied both ways.
    Upgrade,
    /// A write that may create its object (create, replace, server-side apply): linked to the run's
    /// CR when `link` (`--inject-owner-ref`), logged, and recorded under `verb`.
    Write {
        /// What the request is about.
        info: RequestInfo,
        /// Which kind of write.
        write: Write,
        /// Whether the object is linked to the run's CR.
        link: bool,
        /// The verb the run history records it under.
        verb: &'static str,
    },
    /// A GET of one object: a child of the run's CR gets its kind watched again.
    ReadBack {
        /// What the request is about.
        info: RequestInfo,
    },
    /// A LIST of objects (a GET of a collection, not a watch): passed through, and recorded as a
    /// read of the run.
    List {
        /// What the request is about.
        info: RequestInfo,
    },
    /// Another write the run history records: a patch, a delete, a write of status.
    Record {
        /// What the request is about.
        info: RequestInfo,
        /// The verb the run history records it under.
        verb: &'static str,
    },
    /// Everything else (watches, discovery, logs): passed through untouched.
    Pass,
    /// A plan's request: rebuilt by [`super::dry_run::rebuild`] once its body is read, so that a
    /// write is a server-side dry run (the API server validates and defaults it and answers with what
    /// it would store, and nothing is written), or refused.
    Rebuild,
    /// Refused: a plan's run may not do this (exec, attach, port-forward act on running containers).
    Refuse,
}

/// How the proxy handles a request of a plan's run: every request is rebuilt (a write as a
/// server-side dry run); nothing is linked, recorded or watched; upgrades are refused.
pub fn classify_plan(headers: &HeaderMap) -> Handling {
    if is_upgrade(headers) { Handling::Refuse } else { Handling::Rebuild }
}

/// How the proxy handles a request with this method, URI and headers; `link` is
/// `--inject-owner-ref`.
pub fn classify(method: &Method, headers: &HeaderMap, uri: &Uri, link: bool) -> Handling {
    if is_upgrade(headers) {
        return Handling::Upgrade;
    }
    let Some(info) = RequestInfo::parse(uri.path()) else { return Handling::Pass };
    // A review or binding is a question to the API server, not an object: sent as written (a
    // review with metadata is refused), never linked, watched or recorded as the run's child.
    if info.is_virtual() {
        return Handling::Pass;
    }
    let verb = recorded_verb(method, headers, &info);
    // Every object write is one the history records.
    if let (Some(write), Some(verb)) = (object_write(method, headers, &info), verb) {
        return Handling::Write { info, write, link, verb };
    }
    if *method == Method::GET && info.name.is_some() && single_read(&info, uri.query().unwrap_or_default()) {
        return Handling::ReadBack { info };
    }
    if *method == Method::GET && info.name.is_none() && single_read(&info, uri.query().unwrap_or_default()) {
        return Handling::List { info };
    }
    match verb {
        Some(verb) => Handling::Record { info, verb },
        None => Handling::Pass,
    }
}

/// What follows the answer to a write of an object.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Nothing: the write failed or was not linked.
    Nothing,
    /// The run's child was written: its kind is watched.
    Watch(Link),
    /// The object appeared between the proxy's read and the write, so the run did not create it:
    /// the link comes off again.
    Disown(Link),
}

/// What follows the answer `code` to `write`, sent with `link` injected as `ownership` decided.
pub fn settle(write: Write, ownership: Option<Ownership>, link: Option<Link>, code: StatusCode) -> Settle {
    let Some(link) = link.filter(|_| code.is_success()) else { return Settle::Nothing };
    // A replace or apply answers 201 when it created the object and 200 when it was there.
    let lost_race = ownership == Some(Ownership::Claim) && write != Write::Create && code == StatusCode::OK;
    if lost_race { Settle::Disown(link) } else { Settle::Watch(link) }
}

/// Whether the body is a server-side apply patch (YAML or JSON).
pub fn is_apply(headers: &HeaderMap) -> bool {
    content_type(headers).starts_with("application/apply-patch")
}

/// The verb a write is recorded under in the run history: writes of objects and of their status;
/// other subresources (logs, exec, scale) are not objects the run changed.
fn recorded_verb(method: &Method, headers: &HeaderMap, info: &RequestInfo) -> Option<&'static str> {
    if info.subresource.as_deref().is_some_and(|sub| sub != "status") {
        return None;
    }
    match *method {
        Method::POST if info.name.is_none() => Some("create"),
        Method::PUT if info.name.is_some() => Some("update"),
        Method::PATCH if is_apply(headers) => Some("apply"),
        Method::PATCH => Some("patch"),
        Method::DELETE if info.name.is_some() => Some("delete"),
        Method::DELETE => Some("deletecollection"),
        _ => None,
    }
}

/// Requests that may create an object: POST to a collection, PUT of an object, and server-side
/// apply. Subresources are left alone.
fn object_write(method: &Method, headers: &HeaderMap, info: &RequestInfo) -> Option<Write> {
    if info.subresource.is_some() {
        return None;
    }
    match *method {
        Method::POST if info.name.is_none() => Some(Write::Create),
        Method::PUT if info.name.is_some() => Some(Write::Replace),
        Method::PATCH if is_apply(headers) => Some(Write::Apply),
        _ => None,
    }
}

/// GETs of objects themselves (not watches, not subresources such as logs).
fn single_read(info: &RequestInfo, query: &str) -> bool {
    info.subresource.is_none() && !query.split('&').any(|pair| pair == "watch=true" || pair == "watch=1")
}

fn content_type(headers: &HeaderMap) -> &str {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("upgrade"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(content_type: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, content_type.parse().unwrap());
        headers
    }

    fn info(path: &str) -> RequestInfo {
        RequestInfo::parse(path).unwrap()
    }

    fn classified(method: Method, content_type: &str, uri: &str) -> Handling {
        classify(&method, &headers(content_type), &uri.parse().unwrap(), true)
    }

    #[test]
    fn creates_replaces_and_applies_are_writes_of_an_object() {
        let collection = RequestInfo::parse("/api/v1/namespaces/ns/configmaps").unwrap();
        let object = RequestInfo::parse("/api/v1/namespaces/ns/configmaps/c").unwrap();
        let status = RequestInfo::parse("/apis/g/v1/namespaces/ns/things/t/status").unwrap();
        let json = headers("application/json");
        assert_eq!(object_write(&Method::POST, &json, &collection), Some(Write::Create));
        assert_eq!(object_write(&Method::PUT, &json, &object), Some(Write::Replace));
        assert_eq!(
            object_write(&Method::PATCH, &headers("application/apply-patch+yaml"), &object),
            Some(Write::Apply)
        );
        assert_eq!(object_write(&Method::PATCH, &headers("application/merge-patch+json"), &object), None);
        assert_eq!(object_write(&Method::PUT, &json, &status), None);
        assert_eq!(object_write(&Method::GET, &json, &object), None);
    }

    #[test]
    fn writes_of_objects_and_their_status_are_recorded() {
        let object = RequestInfo::parse("/api/v1/namespaces/ns/configmaps/c").unwrap();
        let status = RequestInfo::parse("/apis/g/v1/namespaces/ns/things/t/status").unwrap();
        let exec = RequestInfo::parse("/api/v1/namespaces/ns/pods/p/exec").unwrap();
        let collection = RequestInfo::parse("/api/v1/namespaces/ns/configmaps").unwrap();
        let json = headers("application/merge-patch+json");
        assert_eq!(recorded_verb(&Method::PATCH, &json, &object), Some("patch"));
        assert_eq!(
            recorded_verb(&Method::PATCH, &headers("application/apply-patch+yaml"), &object),
            Some("apply")
        );
        assert_eq!(recorded_verb(&Method::PATCH, &json, &status), Some("patch"));
        assert_eq!(recorded_verb(&Method::DELETE, &json, &object), Some("delete"));
        assert_eq!(recorded_verb(&Method::POST, &json, &collection), Some("create"));
        assert_eq!(recorded_verb(&Method::POST, &json, &exec), None);
        assert_eq!(recorded_verb(&Method::GET, &json, &object), None);
    }

    #[test]
    fn watches_are_not_single_reads() {
        let object = RequestInfo::parse("/api/v1/namespaces/ns/configmaps/c").unwrap();
        assert!(single_read(&object, ""));
        assert!(!single_read(&object, "watch=true&fieldSelector=x"));
    }

    #[test]
    fn an_upgrade_is_forwarded_as_an_upgrade_whatever_its_path() {
        let mut headers = headers("application/json");
        headers.insert(header::CONNECTION, "Upgrade".parse().unwrap());
        let exec = "/api/v1/namespaces/ns/pods/p/exec?command=ls".parse().unwrap();
        assert_eq!(classify(&Method::POST, &headers, &exec, true), Handling::Upgrade);
        assert_eq!(classify(&Method::GET, &headers, &"/version".parse().unwrap(), true), Handling::Upgrade);
    }

    #[test]
    fn a_create_replace_or_apply_is_a_write_linked_only_with_owner_references_on() {
        let create = classified(Method::POST, "application/json", "/api/v1/namespaces/ns/configmaps");
        let collection = info("/api/v1/namespaces/ns/configmaps");
        assert_eq!(
            create,
            Handling::Write { info: collection, write: Write::Create, link: true, verb: "create" }
        );
        let object = info("/apis/apps/v1/namespaces/ns/deployments/d");
        let replace =
            classified(Method::PUT, "application/json", "/apis/apps/v1/namespaces/ns/deployments/d");
        assert_eq!(
            replace,
            Handling::Write { info: object.clone(), write: Write::Replace, link: true, verb: "update" }
        );
        let uri = "/apis/apps/v1/namespaces/ns/deployments/d?fieldManager=m".parse().unwrap();
        let apply = classify(&Method::PATCH, &headers("application/apply-patch+yaml"), &uri, false);
        assert_eq!(apply, Handling::Write { info: object, write: Write::Apply, link: false, verb: "apply" });
    }

    #[test]
    fn a_get_of_one_object_is_read_back_a_list_is_a_list_and_a_watch_passes() {
        let path = "/api/v1/namespaces/ns/configmaps/c";
        assert_eq!(classified(Method::GET, "", path), Handling::ReadBack { info: info(path) });
        let watch = "/api/v1/namespaces/ns/configmaps/c?watch=1";
        assert_eq!(classified(Method::GET, "", watch), Handling::Pass);
        let list = "/api/v1/namespaces/ns/configmaps";
        assert_eq!(classified(Method::GET, "", list), Handling::List { info: info(list) });
        assert_eq!(
            classified(Method::GET, "", "/api/v1/namespaces/ns/configmaps?watch=true"),
            Handling::Pass
        );
        assert_eq!(classified(Method::GET, "", "/api/v1/namespaces/ns/pods/p/log"), Handling::Pass);
    }

    #[test]
    fn patches_deletes_and_status_writes_are_recorded_without_linking() {
        let path = "/api/v1/namespaces/ns/configmaps/c";
        let patch = classified(Method::PATCH, "application/merge-patch+json", path);
        assert_eq!(patch, Handling::Record { info: info(path), verb: "patch" });
        assert_eq!(
            classified(Method::DELETE, "", path),
            Handling::Record { info: info(path), verb: "delete" }
        );
        let status = "/apis/g/v1/namespaces/ns/things/t/status";
        let put = classified(Method::PUT, "application/json", status);
        assert_eq!(put, Handling::Record { info: info(status), verb: "update" });
    }

    #[test]
    fn discovery_and_other_subresources_pass_untouched() {
        assert_eq!(classified(Method::GET, "", "/apis"), Handling::Pass);
        assert_eq!(classified(Method::GET, "", "/version"), Handling::Pass);
        assert_eq!(classified(Method::POST, "application/json", "/api/v1/watch/pods"), Handling::Pass);
        let eviction = "/api/v1/namespaces/ns/pods/p/eviction";
        assert_eq!(classified(Method::POST, "application/json", eviction), Handling::Pass);
    }

    #[test]
    fn creates_of_virtual_resources_pass_as_sent() {
        // The virtual kinds are listed in request_info's tests; one of each sort here.
        let creates = [
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            "/api/v1/namespaces/ns/bindings",
            // Subresources the API server acts on: not objects of their own either.
            "/api/v1/namespaces/ns/serviceaccounts/sa/token",
            "/api/v1/namespaces/ns/pods/p/eviction",
            "/api/v1/namespaces/ns/pods/p/binding",
        ];
        for path in creates {
            assert_eq!(classified(Method::POST, "application/json", path), Handling::Pass, "{path}");
        }
        let role = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
        assert!(
            matches!(classified(Method::POST, "application/json", role), Handling::Write { link: true, .. }),
            "an RBAC object is stored and linked"
        );
    }

    #[test]
    fn every_request_of_a_plan_is_rebuilt_and_upgrades_are_refused() {
        assert_eq!(classify_plan(&headers("application/json")), Handling::Rebuild);
        let mut upgrade = headers("application/json");
        upgrade.insert(header::CONNECTION, "Upgrade".parse().unwrap());
        assert_eq!(classify_plan(&upgrade), Handling::Refuse);
    }

    #[test]
    fn a_successful_linked_write_watches_its_child_and_a_lost_race_disowns_it() {
        let link = Some(Link::OwnerReference);
        let claim = Some(Ownership::Claim);
        assert_eq!(
            settle(Write::Create, claim, link, StatusCode::CREATED),
            Settle::Watch(Link::OwnerReference)
        );
        assert_eq!(settle(Write::Create, claim, link, StatusCode::OK), Settle::Watch(Link::OwnerReference));
        for write in [Write::Replace, Write::Apply] {
            assert_eq!(settle(write, claim, link, StatusCode::CREATED), Settle::Watch(Link::OwnerReference));
            assert_eq!(settle(write, claim, link, StatusCode::OK), Settle::Disown(Link::OwnerReference));
            let keep = Some(Ownership::Keep);
            assert_eq!(settle(write, keep, link, StatusCode::OK), Settle::Watch(Link::OwnerReference));
        }
    }

    #[test]
    fn a_failed_or_unlinked_write_settles_nothing() {
        let claim = Some(Ownership::Claim);
        let link = Some(Link::Annotations);
        assert_eq!(settle(Write::Create, claim, link, StatusCode::CONFLICT), Settle::Nothing);
        assert_eq!(settle(Write::Apply, Some(Ownership::Leave), None, StatusCode::OK), Settle::Nothing);
        assert_eq!(settle(Write::Create, None, None, StatusCode::CREATED), Settle::Nothing);
    }
}
