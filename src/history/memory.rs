//! Run records kept in the operator's memory while the `AnsibleRun` CRD is not served: each CR's as
//! one deflated block of JSON lines, newest first, inflated and parsed when read or changed. A record
//! held as a `serde_json::Value` tree costs several times its text (a map and a string allocation per
//! field), these are kept for every CR, and a CR's records repeat its name, uid and kind in every
//! one (owner, labels, owner reference): deflate keeps that once, and one record's text (about
//! 1.1 KB) takes about half.

use std::collections::HashMap;

use miniz_oxide::deflate::compress_to_vec;
use miniz_oxide::inflate::decompress_to_vec_with_limit;
use serde_json::Value;

/// Deflate's level: fast, and most of the gain on text this repetitive.
const LEVEL: u8 = 6;

/// The most a CR's block inflates to: its records are each below etcd's 1.5 MiB limit, and the
/// history keeps at most a few dozen per CR.
const MAX_INFLATED: usize = 256 * 1024 * 1024;

/// Records by owner uid, newest first.
#[derive(Debug, Default)]
pub struct Memory {
    runs: HashMap<String, Block>,
}

/// One CR's records: their JSON texts (no text has a raw newline), one a line, deflated.
#[derive(Debug)]
struct Block(Box<[u8]>);

impl Block {
    fn pack(texts: &[String]) -> Self {
        Block(compress_to_vec(texts.join("\n").as_bytes(), LEVEL).into_boxed_slice())
    }

    /// The texts, newest first (none when the block cannot be read back, which a block written
    /// here always can).
    fn texts(&self) -> Vec<String> {
        let inflated = decompress_to_vec_with_limit(&self.0, MAX_INFLATED).unwrap_or_default();
        String::from_utf8(inflated).unwrap_or_default().lines().map(str::to_string).collect()
    }
}

impl Memory {
    /// Adds the CR's newest record and keeps its newest `limit`.
    pub fn push(&mut self, owner_uid: &str, record: &Value, limit: usize) {
        let mut texts = self.runs.get(owner_uid).map(Block::texts).unwrap_or_default();
        texts.insert(0, record.to_string());
        texts.truncate(limit);
        if texts.is_empty() {
            self.runs.remove(owner_uid);
        } else {
            self.runs.insert(owner_uid.to_string(), Block::pack(&texts));
        }
    }

    /// Sets the status of the CR's newest record.
    pub fn set_latest_status(&mut self, owner_uid: &str, status: &Value) {
        let Some(block) = self.runs.get_mut(owner_uid) else { return };
        let mut texts = block.texts();
        let Some(latest) = texts.first_mut() else { return };
        let mut record = parse(latest);
        record["status"] = status.clone();
        *latest = record.to_string();
        *block = Block::pack(&texts);
    }

    /// The records of the CR `owner_uid` (`None`: of every CR, in no particular order across
    /// CRs), parsed.
    pub fn records(&self, owner_uid: Option<&str>) -> impl Iterator<Item = Value> + '_ {
        let blocks: Box<dyn Iterator<Item = &Block>> = match owner_uid {
            Some(uid) => Box::new(self.runs.get(uid).into_iter()),
            None => Box::new(self.runs.values()),
        };
        blocks.flat_map(|block| block.texts().into_iter().map(|text| parse(&text)))
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
    fn a_cr_s_records_take_a_fraction_of_their_text() {
        let mut memory = Memory::default();
        let record = |n: usize| {
            json!({"apiVersion": "ansible-operator.dev/v1alpha1", "kind": "AnsibleRun",
                   "metadata": {"name": format!("memcached-sample-{n:08x}"), "namespace": "default",
                       "labels": {"ansible-operator.dev/owner-uid": "2f9c1d2e-8a41-4b8e-9a57-0c3f2a9d1b7e",
                                  "ansible-operator.dev/owner-kind": "Memcached",
                                  "ansible-operator.dev/owner-name": "memcached-sample"}},
                   "spec": {"owner": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
                                      "name": "memcached-sample", "uid": "2f9c1d2e-8a41-4b8e-9a57-0c3f2a9d1b7e"},
                            "ident": format!("{n:08x}"), "trigger": {"reason": "Resync"},
                            "startTime": format!("2026-11-28T10:{:02}:00Z", n % 60),
                            "log": format!("/tmp/ansible-operator/runner/cache.example.com/v1alpha1/Memcached/default/memcached-sample/artifacts/{n:08x}/stdout")}})
        };
        let text: usize = (0..10).map(|n| record(n).to_string().len()).sum();
        for n in 0..10 {
            memory.push("uid", &record(n), 10);
        }
        let kept = memory.runs["uid"].0.len();
        assert!(kept * 4 < text, "{kept} bytes for {text} of text");
        assert_eq!(
            memory.records(Some("uid")).collect::<Vec<_>>(),
            (0..10).rev().map(record).collect::<Vec<_>>()
        );
    }

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
