//! Which Events fold into one, as client-go's `EventCorrelator` deduplicates them: a repeat of the
//! same Event (involved object, type, reason, message, source) while its key is still cached adds
//! one to the recorded Event's `count` instead of creating another.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// Keys remembered, as client-go's `maxLruCacheEntries`.
pub const CACHE_SIZE: usize = 4096;

/// The namespace of an Event about a cluster-scoped object, as client-go's recorder.
const CLUSTER_EVENTS_NAMESPACE: &str = "default";

/// Normal or Warning, the two types of a core Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something may need a look.
    Warning,
}

impl EventType {
    /// The `type` field's value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What an Event says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Normal or Warning.
    pub type_: EventType,
    /// A short CamelCase reason (`ReconcileFailed`).
    pub reason: String,
    /// What happened, for people.
    pub message: String,
}

/// Who records: `source.component` and `reportingComponent`, and `reportingInstance`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    /// The component (a controller's name).
    pub component: String,
    /// This replica (the pod's name).
    pub instance: Option<String>,
}

/// A new Event about `involved` (count 1), named as client-go names it:
/// `<involvedObject.name>.<unix nanoseconds in hex>`.
pub fn draft(involved: &ObjectReference, note: &Note, reporter: &Reporter, now: Timestamp) -> Event {
    let involved_name = involved.name.clone().unwrap_or_default();
    Event {
        metadata: ObjectMeta {
            name: Some(name(&involved_name, now)),
            namespace: Some(namespace(involved)),
            ..ObjectMeta::default()
        },
        involved_object: involved.clone(),
        reason: Some(note.reason.clone()),
        message: Some(note.message.clone()),
        type_: Some(note.type_.as_str().to_string()),
        source: Some(EventSource { component: Some(reporter.component.clone()), host: None }),
        reporting_component: Some(reporter.component.clone()),
        reporting_instance: reporter.instance.clone(),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        ..Event::default()
    }
}

/// The namespace of an Event about `involved`: its own, or `default` for a cluster-scoped one.
pub fn namespace(involved: &ObjectReference) -> String {
    involved.namespace.clone().unwrap_or_else(|| CLUSTER_EVENTS_NAMESPACE.to_string())
}

/// An Event's name: the involved object's name and the time in nanoseconds, in hex (16 digits
/// for any time after 2001).
pub fn name(involved_name: &str, at: Timestamp) -> String {
    format!("{involved_name}.{:x}", at.as_nanosecond())
}

/// The fields two Events must share to be one, as client-go's `getEventKey`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Vec<String>);

/// The deduplication key of an Event.
pub fn key(event: &Event) -> Key {
    let involved = &event.involved_object;
    let source = event.source.as_ref();
    let fields = [
        source.and_then(|s| s.component.as_deref()),
        source.and_then(|s| s.host.as_deref()),
        involved.kind.as_deref(),
        involved.namespace.as_deref(),
        involved.name.as_deref(),
        involved.field_path.as_deref(),
        involved.uid.as_deref(),
        involved.api_version.as_deref(),
        event.type_.as_deref(),
        event.reason.as_deref(),
        event.message.as_deref(),
    ];
    Key(fields.into_iter().map(|field| field.unwrap_or_default().to_string()).collect())
}

/// What to write for an Event.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub enum Action {
    /// Create it: the first of its kind (in the cache's memory).
    Create(Event),
    /// Patch the recorded one (`event` carries its name, count and timestamps); should it be gone
    /// (404), create `event` as it is, as client-go does.
    Patch(Event),
}

impl Action {
    /// The Event as it will read after the write.
    pub fn event(&self) -> &Event {
        match self {
            Action::Create(event) | Action::Patch(event) => event,
        }
    }
}

/// The body of the patch that adds a repeat to a recorded Event.
pub fn repeat_patch(event: &Event) -> Value {
    json!({
        "count": event.count,
        "lastTimestamp": event.last_timestamp,
        "message": event.message,
    })
}

/// The recorded Event of a key.
#[derive(Debug, Clone)]
struct Recorded {
    name: String,
    count: i32,
    first_timestamp: Option<Time>,
    /// When it was last used, on the cache's own clock.
    used: u64,
}

/// A bounded LRU cache of recorded Events by key.
#[derive(Debug)]
pub struct Correlator {
    recorded: HashMap<Key, Recorded>,
    /// Keys by last use, oldest first.
    by_use: BTreeMap<u64, Key>,
    clock: u64,
    capacity: usize,
}

impl Default for Correlator {
    fn default() -> Self {
        Correlator::new(CACHE_SIZE)
    }
}

impl Correlator {
    /// A cache of at most `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Correlator { recorded: HashMap::new(), by_use: BTreeMap::new(), clock: 0, capacity: capacity.max(1) }
    }

    /// What to write for `event` (a [`draft`]): a repeat of a recorded Event patches it, with the
    /// count one higher, the first timestamp kept and the last one the draft's.
    pub fn correlate(&self, event: Event) -> Action {
        match self.recorded.get(&key(&event)) {
            None => Action::Create(event),
            Some(recorded) => Action::Patch(Event {
                metadata: ObjectMeta { name: Some(recorded.name.clone()), ..event.metadata },
                count: Some(recorded.count.saturating_add(1)),
                first_timestamp: recorded.first_timestamp.clone().or(event.first_timestamp),
                ..event
            }),
        }
    }

    /// Remembers an Event the API server accepted (as it answered), evicting the least recently
    /// used key beyond the capacity.
    pub fn recorded(&mut self, event: &Event) {
        let key = key(event);
        self.clock += 1;
        let entry = Recorded {
            name: event.metadata.name.clone().unwrap_or_default(),
            count: event.count.unwrap_or(1),
            first_timestamp: event.first_timestamp.clone(),
            used: self.clock,
        };
        if let Some(previous) = self.recorded.insert(key.clone(), entry) {
            self.by_use.remove(&previous.used);
        }
        self.by_use.insert(self.clock, key);
        while self.recorded.len() > self.capacity {
            let Some((_, oldest)) = self.by_use.pop_first() else { break };
            self.recorded.remove(&oldest);
        }
    }

    /// Keys remembered.
    pub fn len(&self) -> usize {
        self.recorded.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.recorded.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cr(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("cache.example.com/v1alpha1".into()),
            kind: Some("Memcached".into()),
            name: Some(name.into()),
            namespace: Some("apps".into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("7".into()),
            field_path: None,
        }
    }

    fn failed(message: &str) -> Note {
        Note { type_: EventType::Warning, reason: "ReconcileFailed".into(), message: message.into() }
    }

    fn reporter() -> Reporter {
        Reporter { component: "ansible-operator".into(), instance: Some("pod-1".into()) }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    #[test]
    fn an_event_is_named_after_its_object_and_the_time_in_sixteen_hex_digits() {
        let event = draft(&cr("web"), &failed("boom"), &reporter(), at(0));
        let name = event.metadata.name.unwrap();
        let (object, stamp) = name.split_once('.').unwrap();
        assert_eq!(object, "web");
        assert_eq!(stamp.len(), 16, "{name}");
        assert_eq!(i128::from_str_radix(stamp, 16).unwrap(), at(0).as_nanosecond());
        assert_eq!(event.metadata.namespace.as_deref(), Some("apps"));
    }

    #[test]
    fn a_draft_carries_what_controller_runtime_records() {
        let event = draft(&cr("web"), &failed("boom"), &reporter(), at(0));
        assert_eq!(event.involved_object, cr("web"));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.reason.as_deref(), Some("ReconcileFailed"));
        assert_eq!(event.message.as_deref(), Some("boom"));
        assert_eq!(event.source.unwrap().component.as_deref(), Some("ansible-operator"));
        assert_eq!(event.reporting_component.as_deref(), Some("ansible-operator"));
        assert_eq!(event.reporting_instance.as_deref(), Some("pod-1"));
        assert_eq!(event.count, Some(1));
        assert_eq!(event.first_timestamp, Some(Time(at(0))));
        assert_eq!(event.last_timestamp, Some(Time(at(0))));
    }

    #[test]
    fn an_event_about_a_cluster_scoped_object_goes_to_the_default_namespace() {
        let node = ObjectReference { namespace: None, ..cr("node-1") };
        let event = draft(&node, &failed("boom"), &reporter(), at(0));
        assert_eq!(event.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(namespace(&node), "default");
    }

    #[test]
    fn the_key_holds_object_type_reason_message_and_source_but_not_the_time() {
        let one = draft(&cr("web"), &failed("boom"), &reporter(), at(0));
        assert_eq!(key(&one), key(&draft(&cr("web"), &failed("boom"), &reporter(), at(60))));
        assert_ne!(key(&one), key(&draft(&cr("web"), &failed("bang"), &reporter(), at(0))));
        assert_ne!(key(&one), key(&draft(&cr("db"), &failed("boom"), &reporter(), at(0))));
        let succeeded =
            Note { type_: EventType::Normal, reason: "ReconcileSucceeded".into(), ..failed("boom") };
        assert_ne!(key(&one), key(&draft(&cr("web"), &succeeded, &reporter(), at(0))));
        let other = Reporter { component: "other".into(), ..reporter() };
        assert_ne!(key(&one), key(&draft(&cr("web"), &failed("boom"), &other, at(0))));
        let recreated = ObjectReference { uid: Some("new-uid".into()), ..cr("web") };
        assert_ne!(key(&one), key(&draft(&recreated, &failed("boom"), &reporter(), at(0))));
    }

    #[test]
    fn a_repeat_patches_the_recorded_event_with_count_and_last_timestamp() {
        let mut correlator = Correlator::default();
        let first = correlator.correlate(draft(&cr("web"), &failed("boom"), &reporter(), at(0)));
        let Action::Create(created) = first else { panic!("the first is created: {first:?}") };
        correlator.recorded(&created);
        let second = correlator.correlate(draft(&cr("web"), &failed("boom"), &reporter(), at(30)));
        let Action::Patch(patched) = second.clone() else { panic!("a repeat patches: {second:?}") };
        assert_eq!(patched.metadata.name, created.metadata.name);
        assert_eq!(patched.count, Some(2));
        assert_eq!(patched.first_timestamp, Some(Time(at(0))));
        assert_eq!(patched.last_timestamp, Some(Time(at(30))));
        assert_eq!(
            repeat_patch(&patched),
            json!({"count": 2, "lastTimestamp": "2023-11-14T22:13:50Z", "message": "boom"})
        );
        correlator.recorded(second.event());
        let third = correlator.correlate(draft(&cr("web"), &failed("boom"), &reporter(), at(60)));
        assert_eq!(third.event().count, Some(3));
    }

    #[test]
    fn a_different_message_is_a_new_event() {
        let mut correlator = Correlator::default();
        correlator.recorded(&draft(&cr("web"), &failed("boom"), &reporter(), at(0)));
        let other = correlator.correlate(draft(&cr("web"), &failed("bang"), &reporter(), at(1)));
        assert!(matches!(other, Action::Create(_)), "{other:?}");
    }

    #[test]
    fn nothing_is_remembered_until_the_api_server_accepted_it() {
        let correlator = Correlator::default();
        let _ = correlator.correlate(draft(&cr("web"), &failed("boom"), &reporter(), at(0)));
        let again = correlator.correlate(draft(&cr("web"), &failed("boom"), &reporter(), at(1)));
        assert!(matches!(again, Action::Create(_)), "a refused Event is not patched later: {again:?}");
    }

    #[test]
    fn the_cache_forgets_the_least_recently_used_key_beyond_its_capacity() {
        let mut correlator = Correlator::new(2);
        let web = draft(&cr("web"), &failed("boom"), &reporter(), at(0));
        correlator.recorded(&web);
        correlator.recorded(&draft(&cr("db"), &failed("boom"), &reporter(), at(1)));
        correlator.recorded(&web);
        correlator.recorded(&draft(&cr("cache"), &failed("boom"), &reporter(), at(2)));
        assert_eq!(correlator.len(), 2);
        let web_again = correlator.correlate(draft(&cr("web"), &failed("boom"), &reporter(), at(3)));
        assert!(matches!(web_again, Action::Patch(_)), "web was used last: kept");
        let db_again = correlator.correlate(draft(&cr("db"), &failed("boom"), &reporter(), at(3)));
        assert!(matches!(db_again, Action::Create(_)), "db was least recently used: forgotten");
    }
}
