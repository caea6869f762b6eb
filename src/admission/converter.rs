//! Conversion playbooks: the watch entry of a group and kind that names `convert` has its playbook
//! run once for each `ConversionReview` the API server sends for that kind, in the validation lane
//! (check mode, a dry-run proxy credential, [`CONVERT_TIMEOUT`]), with
//! `ansible_operator_conversion` its only extra var. What the run sets with `set_stats` is the
//! answer ([`conversion::converted`]). Conversions are not reconciles: no status, no run record.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::check_run::{Check, CheckRuns};
use super::conversion::{self, Request};
use crate::reconcile::inputs::Composer;
use crate::reconcile::unsafe_strings;
use crate::run::Permit;
use crate::vars;

/// Longest one conversion may take: the API server waits 30s for a conversion webhook, and a
/// read it converts for waits with it.
pub const CONVERT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an answer is given again for the same review.
pub const KEEP: Duration = Duration::from_secs(60);

/// The most answers kept; when full, the oldest are dropped.
const KEPT: usize = 256;

/// A conversion's answer: the converted objects, or why there are none.
type Converted = Result<Vec<Value>, String>;

/// The answers of recent reviews, by a keyed hash of their desired version and objects.
#[derive(Default)]
struct Answers {
    keys: RandomState,
    kept: Mutex<HashMap<u64, (Instant, Converted)>>,
}

impl Answers {
    fn key(&self, request: &Request) -> u64 {
        let objects = serde_json::to_string(&request.objects).unwrap_or_default();
        self.keys.hash_one((&request.desired_api_version, objects))
    }

    fn get(&self, key: u64) -> Option<Converted> {
        let kept = self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        kept.get(&key).filter(|(at, _)| at.elapsed() < KEEP).map(|(_, answer)| answer.clone())
    }

    fn keep(&self, key: u64, answer: &Converted) {
        let mut kept = self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        kept.retain(|_, (at, _)| at.elapsed() < KEEP);
        if kept.len() >= KEPT
            && let Some(oldest) = kept.iter().min_by_key(|(_, (at, _))| *at).map(|(key, _)| *key)
        {
            kept.remove(&oldest);
        }
        kept.insert(key, (Instant::now(), answer.clone()));
    }
}

/// Runs the conversions of the group and kinds that have one.
pub struct Converter {
    /// The composers of the entries with `convert`, with their resource (plural).
    kinds: Vec<(Arc<Composer>, String)>,
    /// Where conversions run: the door's validation lane, with a dry-run credential.
    runs: CheckRuns,
    /// Recent answers.
    answers: Answers,
}

impl std::fmt::Debug for Converter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Converter").field("kinds", &self.kinds.len()).finish_non_exhaustive()
    }
}

impl Converter {
    /// A converter for the entries among `kinds` (with their plural) that name `convert`.
    pub fn new(kinds: impl IntoIterator<Item = (Arc<Composer>, String)>, runs: CheckRuns) -> Self {
        let kinds = kinds.into_iter().filter(|(c, _)| c.watch.extensions.convert.is_some()).collect();
        Converter { kinds, runs, answers: Answers::default() }
    }

    /// Answers one ConversionReview body for `group`'s `kind`: an answer always, a failure on any
    /// error of ours. A body is read only for a kind this converter serves, and only with a slot of
    /// the validation lane: whoever reaches the port may send one.
    pub async fn review(&self, group: &str, kind: &str, body: &[u8]) -> Value {
        let fail = |message: String| conversion::answer(&conversion::uid_of(body), Err(message));
        let Some((composer, plural)) =
            self.kinds.iter().find(|(c, _)| c.watch.gvk.group == group && c.watch.gvk.kind == kind)
        else {
            return fail(format!("the operator has no convert playbook for {kind}.{group}"));
        };
        let permit = match self.runs.door().lanes().validation_permit(CONVERT_TIMEOUT / 2).await {
            Ok(permit) => permit,
            Err(busy) => {
                tracing::warn!(group, kind, limit = busy.limit, "conversion refused: the lane is full");
                return fail(busy.to_string());
            }
        };
        let request = match Request::parse(body, group, kind) {
            Ok(request) => request,
            Err(error) => {
                tracing::info!(group, kind, %error, "conversion review refused");
                return fail(error.to_string());
            }
        };
        if request.objects.is_empty() {
            return conversion::answer(&request.uid, Ok(Vec::new()));
        }
        let key = self.answers.key(&request);
        if let Some(converted) = self.answers.get(key) {
            return conversion::answer(&request.uid, converted);
        }
        let started = Instant::now();
        let converted = self.convert(composer, plural, &request, &permit).await;
        tracing::info!(
            group, kind, to = %request.desired_api_version, objects = request.objects.len(),
            converted = converted.is_ok(), elapsed_ms = started.elapsed().as_millis() as u64, "converted"
        );
        self.answers.keep(key, &converted);
        conversion::answer(&request.uid, converted)
    }

    async fn convert(
        &self,
        composer: &Composer,
        plural: &str,
        request: &Request,
        permit: &Permit,
    ) -> Converted {
        let watch = &composer.watch;
        let target = watch.extensions.convert.clone().ok_or("the entry has no convert playbook")?;
        let which = unsafe_strings(watch, composer.inputs.trust_cr_templates);
        let var = request.conversion_var(|value| vars::wrap(value, which));
        // The run is composed for the first object (its directory, environment and limits), then
        // given the conversion var alone: a review may hold many objects.
        let check = Check { composer, plural, object: &request.objects[0], target, timeout: CONVERT_TIMEOUT };
        let only = |vars: &mut Map<String, Value>| {
            *vars = Map::from_iter([(conversion::CONVERSION_VAR.to_string(), var)]);
        };
        let report = self.runs.run(permit, check, only, "conversion").await?;
        conversion::converted(&report, request)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(desired: &str, size: i64) -> Request {
        Request {
            uid: "u".into(),
            desired_api_version: desired.into(),
            objects: vec![json!({"kind": "K", "spec": {"size": size}})],
        }
    }

    #[test]
    fn an_answer_is_given_again_for_the_same_objects_and_version_only() {
        let answers = Answers::default();
        let asked = request("a.example.com/v2", 3);
        let key = answers.key(&asked);
        assert_eq!(answers.get(key), None);
        answers.keep(key, &Err("no".into()));
        assert_eq!(answers.get(answers.key(&request("a.example.com/v2", 3))), Some(Err("no".into())));
        assert_eq!(answers.get(answers.key(&request("a.example.com/v1", 3))), None);
        assert_eq!(answers.get(answers.key(&request("a.example.com/v2", 4))), None);
    }

    #[test]
    fn at_most_so_many_answers_are_kept_the_oldest_dropped() {
        let answers = Answers::default();
        let keys: Vec<u64> =
            (0..=KEPT as i64).map(|size| answers.key(&request("a.example.com/v2", size))).collect();
        for key in &keys {
            answers.keep(*key, &Ok(Vec::new()));
        }
        assert_eq!(answers.kept.lock().unwrap().len(), KEPT);
        assert_eq!(answers.get(keys[0]), None, "the oldest went");
        assert_eq!(answers.get(keys[KEPT]), Some(Ok(Vec::new())));
    }
}
