//! Run records kept in the operator's memory while the `AnsibleRun` CRD is not served: each as
//! its JSON text, parsed when read. A record held as a `serde_json::Value` tree costs several
//! times its text (a map and a string allocation per field), and these are kept for every CR.

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

/// Records by owner uid, newest first.
#[derive(Debug, Default)]
pub struct Memory {
    runs: HashMap<String, VecDeque<Box<str>>>,
}

impl Memory {
    /// Adds the CR's newest record and keeps its newest `limit`.
    pub fn push(&mut self, owner_uid: &str, record: &Value, limit: usize) {
        let runs = self.runs.entry(owner_uid.to_string()).or_default();
        runs.push_front(record.to_string().into_boxed_str());
        runs.truncate(limit);
        if runs.is_empty() {
            self.runs.remove(owner_uid);
        }
    }

    /// Sets the status of the CR's newest record.
    pub fn set_latest_status(&mut self, owner_uid: &str, status: &Value) {
        let Some(latest) = self.runs.get_mut(owner_uid).and_then(VecDeque::front_mut) else { return };
        let mut record = parse(latest);
        record["status"] = status.clone();
        *latest = record.to_string().into_boxed_str();
    }

    /// The records of the CR `owner_uid` (`None`: of every CR, in no particular order across
    /// CRs), parsed.
    pub fn records(&self, owner_uid: Option<&str>) -> impl Iterator<Item = Value> + '_ {
        let runs: Box<dyn Iterator<Item = &VecDeque<Box<str>>>> = match owner_uid {
            Some(uid) => Box::new(self.runs.get(uid).into_iter()),
            None => Box::new(self.runs.values()),
        };
        runs.flatten().map(|text| parse(text))
    }

    /// Forgets every record.
    pub fn clear(&mut self) {
        self.runs.clear();
    }
}

/// The text was written from a `Value`, so it parses back.
fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_cr_keeps_its_newest_records_and_the_latest_status_is_set() {
        let mut memory = Memory::default();
        for n in 1..=4 {
            memory.push("uid-a", &json!({"n": n}), 2);
        }
        memory.push("uid-b", &json!({"n": 9}), 2);
        memory.set_latest_status("uid-a", &json!({"confirmations": 1}));
        assert_eq!(memory.records(Some("uid-b")).collect::<Vec<_>>(), vec![json!({"n": 9})]);
        let mut records: Vec<Value> = memory.records(None).collect();
        records.sort_by_key(|r| r["n"].as_i64());
        assert_eq!(
            records,
            vec![json!({"n": 3}), json!({"n": 4, "status": {"confirmations": 1}}), json!({"n": 9})]
        );
        memory.push("uid-b", &json!({"n": 10}), 0);
        assert_eq!(memory.records(None).count(), 2, "a limit of 0 keeps none of the CR's");
        memory.clear();
        assert_eq!(memory.records(None).count(), 0);
    }
}
