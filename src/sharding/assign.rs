//! The sharder's pure decision: which CRs to assign and which to drain, given every CR's shard
//! label, the live shards and the moves already under way.
//!
//! Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam 2018), kept sticky: a CR
//! stays on its shard while that shard lives and is not over its bound. A new CR, or one whose
//! shard is gone, goes to the first shard in its ring order that holds fewer than its even share;
//! a shard above `(1 + SLACK)` times the even share gives up the excess, and a shard below
//! `(1 - SLACK)` times it (a shard that just joined) takes CRs from the fullest ones. So a shard
//! leaving moves only its own CRs, a shard joining takes about its share and no CR moves between
//! the others, and creating CRs never moves existing ones.

use std::collections::{BTreeMap, HashMap};

use super::ring::{Ring, hash};

/// How far a shard may drift from the even share before CRs are moved back (hysteresis, so that
/// deleting a few CRs does not move others).
pub const SLACK: f64 = 0.1;

/// One CR as the sharder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current<'a> {
    /// Stable identity of the CR on the ring (`group/kind/namespace/name`).
    pub key: &'a str,
    /// Its shard label, if any.
    pub shard: Option<&'a str>,
    /// Whether its drain label is set.
    pub draining: bool,
}

/// What to do with one CR (by its index in the input).
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Label it for `shard` (it has no shard, or its shard is gone; a drain label is dropped).
    Assign {
        /// Index of the CR in the input.
        index: usize,
        /// Its new shard.
        shard: String,
    },
    /// Ask its live owner to let it go; once acknowledged it is assigned, preferably to `to`.
    Drain {
        /// Index of the CR in the input.
        index: usize,
        /// Where it should go.
        to: String,
    },
}

/// The changes that bring `objects` to a balanced assignment over `live` shards. `pending` maps a
/// CR key being drained to the shard it was meant for.
pub fn plan(objects: &[Current<'_>], ring: &Ring, pending: &HashMap<String, String>) -> Vec<Change> {
    let live = ring.shards();
    if live.is_empty() {
        return Vec::new();
    }
    let total = objects.len();
    let n = live.len();
    let even = total.div_ceil(n);
    let upper = (((total as f64) * (1.0 + SLACK) / n as f64).ceil() as usize).max(even);
    let lower = ((total as f64) * (1.0 - SLACK) / n as f64).floor() as usize;
    let is_live = |shard: &str| live.binary_search_by(|s| s.as_str().cmp(shard)).is_ok();

    let mut load: BTreeMap<&str, usize> = live.iter().map(|s| (s.as_str(), 0)).collect();
    // CRs settled on a live shard and free to move, by shard.
    let mut settled: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut unassigned = Vec::new();
    for (index, object) in objects.iter().enumerate() {
        match object.shard.filter(|s| is_live(s)) {
            Some(_) if object.draining => {
                // In transit: counted where it is going, when the sharder knows.
                if let Some(to) = pending.get(object.key).filter(|to| is_live(to)) {
                    *load.entry(to.as_str()).or_default() += 1;
                }
            }
            Some(shard) => {
                *load.entry(shard).or_default() += 1;
                settled.entry(shard).or_default().push(index);
            }
            None => unassigned.push(index),
        }
    }

    let mut changes = Vec::new();
    // New CRs and CRs of shards that are gone, in a stable order.
    unassigned.sort_by_key(|i| objects[*i].key);
    for index in unassigned {
        let key = objects[index].key;
        let target = pending
            .get(key)
            .map(String::as_str)
            .filter(|to| load.get(to).is_some_and(|l| *l < upper))
            .unwrap_or_else(|| place(ring, key, &load, even, None));
        *load.entry(target).or_default() += 1;
        changes.push(Change::Assign { index, shard: target.to_string() });
    }

    // Shards over the bound give up the excess, the CRs the ring places elsewhere first.
    for shard in live {
        let shard = shard.as_str();
        let excess = load[shard].saturating_sub(upper);
        if excess == 0 {
            continue;
        }
        let mut candidates = settled.remove(shard).unwrap_or_default();
        candidates
            .sort_by_key(|i| (ring.owner(objects[*i].key) == Some(shard), hash(objects[*i].key.as_bytes())));
        let (moving, staying) = candidates.split_at(excess.min(candidates.len()));
        for &index in moving {
            let to = place(ring, objects[index].key, &load, even, Some(shard));
            *load.entry(shard).or_default() -= 1;
            *load.entry(to).or_default() += 1;
            changes.push(Change::Drain { index, to: to.to_string() });
        }
        settled.insert(shard, staying.to_vec());
    }

    // Shards under the bound (one that just joined) take CRs from the fullest shards.
    while let Some((&low, &low_load)) = load.iter().min_by_key(|(s, l)| (**l, *s)) {
        if low_load >= lower {
            break;
        }
        let Some((&high, &high_load)) = load.iter().max_by_key(|(s, l)| (**l, std::cmp::Reverse(*s))) else {
            break;
        };
        if high_load <= low_load + 1 {
            break;
        }
        let donors = settled.entry(high).or_default();
        // The CR whose ring order puts `low` earliest moves.
        let Some(position) = (0..donors.len()).min_by_key(|p| {
            let key = objects[donors[*p]].key;
            (ring.preference(key).position(|s| s == low), hash(key.as_bytes()))
        }) else {
            break;
        };
        let index = donors.swap_remove(position);
        *load.entry(high).or_default() -= 1;
        *load.entry(low).or_default() += 1;
        changes.push(Change::Drain { index, to: low.to_string() });
    }
    changes
}

/// The first shard in `key`'s ring order that holds fewer than `even`, other than `except`;
/// failing that, the least loaded one.
fn place<'r>(
    ring: &'r Ring,
    key: &str,
    load: &BTreeMap<&str, usize>,
    even: usize,
    except: Option<&str>,
) -> &'r str {
    let allowed = |s: &&str| Some(*s) != except;
    ring.preference(key)
        .filter(allowed)
        .find(|s| load.get(s).copied().unwrap_or(0) < even)
        .or_else(|| {
            ring.preference(key).filter(allowed).min_by_key(|s| (load.get(s).copied().unwrap_or(0), *s))
        })
        .or_else(|| ring.shards().first().map(String::as_str))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// A simulated fleet: each CR's shard label and drain label, the sharder's pending moves.
    #[derive(Debug, Clone)]
    struct Fleet {
        keys: Vec<String>,
        shard: Vec<Option<String>>,
        draining: Vec<bool>,
        pending: HashMap<String, String>,
        /// Every owner change of each CR.
        moves: Vec<Vec<String>>,
    }

    impl Fleet {
        fn new(count: usize) -> Self {
            Self {
                keys: (0..count).map(|i| format!("example.com/Thing/ns/cr-{i}")).collect(),
                shard: vec![None; count],
                draining: vec![false; count],
                pending: HashMap::new(),
                moves: vec![Vec::new(); count],
            }
        }

        fn current(&self) -> Vec<Current<'_>> {
            (0..self.keys.len())
                .map(|i| Current {
                    key: &self.keys[i],
                    shard: self.shard[i].as_deref(),
                    draining: self.draining[i],
                })
                .collect()
        }

        /// Runs the sharder and acknowledges every drain until nothing changes; returns the rounds.
        fn settle(&mut self, live: &BTreeSet<String>) -> usize {
            let ring = Ring::new(live.iter().cloned());
            for round in 0..50 {
                let changes = plan(&self.current(), &ring, &self.pending);
                let acks: Vec<usize> = (0..self.keys.len()).filter(|i| self.draining[*i]).collect();
                if changes.is_empty() && acks.is_empty() {
                    return round;
                }
                for change in changes {
                    match change {
                        Change::Assign { index, shard } => {
                            self.pending.remove(&self.keys[index]);
                            self.draining[index] = false;
                            self.moves[index].push(shard.clone());
                            self.shard[index] = Some(shard);
                        }
                        Change::Drain { index, to } => {
                            assert!(!self.draining[index], "drained twice");
                            self.draining[index] = true;
                            self.pending.insert(self.keys[index].clone(), to);
                        }
                    }
                }
                // The owners acknowledge the drains they saw before this round.
                for index in acks {
                    self.draining[index] = false;
                    self.shard[index] = None;
                }
            }
            panic!("did not settle in 50 rounds");
        }

        fn counts(&self) -> BTreeMap<String, usize> {
            let mut counts = BTreeMap::new();
            for shard in self.shard.iter().flatten() {
                *counts.entry(shard.clone()).or_default() += 1;
            }
            counts
        }
    }

    fn shards(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn assert_balanced(fleet: &Fleet, live: &BTreeSet<String>, tolerance: f64) {
        let counts = fleet.counts();
        let even = fleet.keys.len() as f64 / live.len() as f64;
        for shard in live {
            let count = counts.get(shard).copied().unwrap_or(0) as f64;
            assert!((count - even).abs() <= even * tolerance, "{shard}: {count} (even {even}) in {counts:?}");
        }
    }

    #[test]
    fn nothing_is_assigned_without_live_shards() {
        let fleet = Fleet::new(3);
        assert!(plan(&fleet.current(), &Ring::default(), &HashMap::new()).is_empty());
    }

    #[test]
    fn a_cr_whose_shard_is_gone_is_assigned_directly_without_drain() {
        let objects = [
            Current { key: "a", shard: Some("gone"), draining: true },
            Current { key: "b", shard: None, draining: false },
        ];
        let changes = plan(&objects, &Ring::new(["x"]), &HashMap::new());
        assert_eq!(
            changes,
            [Change::Assign { index: 0, shard: "x".into() }, Change::Assign { index: 1, shard: "x".into() }]
        );
    }

    #[test]
    fn a_draining_cr_is_left_to_its_owner() {
        let objects = [Current { key: "a", shard: Some("x"), draining: true }];
        assert!(plan(&objects, &Ring::new(["x", "y"]), &HashMap::new()).is_empty());
    }

    #[test]
    fn creating_crs_one_by_one_never_moves_one() {
        let live = shards(&["a", "b", "c"]);
        let mut fleet = Fleet::new(0);
        for i in 0..120 {
            fleet.keys.push(format!("ns/cr-{i}"));
            fleet.shard.push(None);
            fleet.draining.push(false);
            fleet.moves.push(Vec::new());
            fleet.settle(&live);
        }
        assert!(fleet.moves.iter().all(|m| m.len() == 1), "{:?}", fleet.moves);
        assert_balanced(&fleet, &live, 0.05);
    }

    proptest! {
        #![proptest_config(crate::proptest_support::config(48))]

        /// 600 CRs over 3 shards: each shard holds its share within ±20%.
        #[test]
        fn six_hundred_crs_over_three_shards_balance_within_twenty_percent(
            live in proptest::collection::btree_set("[a-z0-9-]{1,20}", 3..=3),
        ) {
            let mut fleet = Fleet::new(600);
            fleet.settle(&live);
            assert_balanced(&fleet, &live, 0.2);
            prop_assert!(fleet.moves.iter().all(|m| m.len() == 1), "a CR moved while first assigned");
        }

        /// A shard leaving: only its CRs move, each once, and the rest stays balanced.
        #[test]
        fn a_leaving_shard_moves_only_its_crs(
            live in proptest::collection::btree_set("[a-z0-9-]{1,20}", 2..6),
            count in 50usize..400,
        ) {
            let mut fleet = Fleet::new(count);
            fleet.settle(&live);
            let gone = live.iter().next().unwrap().clone();
            let before = fleet.shard.clone();
            let mut after = live.clone();
            after.remove(&gone);
            fleet.settle(&after);
            for (i, was) in before.iter().enumerate() {
                let moved = *was != fleet.shard[i];
                prop_assert!(!moved || was.as_deref() == Some(gone.as_str()), "cr {i} moved from {was:?}");
            }
            assert_balanced(&fleet, &after, 0.2);
        }

        /// A shard joining: CRs move only to the new shard, and no more than its share.
        #[test]
        fn a_joining_shard_takes_only_its_share(
            live in proptest::collection::btree_set("[a-z0-9-]{1,20}", 1..5),
            new in "[A-Z]{1,8}",
            count in 50usize..400,
        ) {
            let mut fleet = Fleet::new(count);
            fleet.settle(&live);
            let before = fleet.shard.clone();
            let mut after = live.clone();
            after.insert(new.clone());
            fleet.settle(&after);
            let mut moved = 0;
            for (i, was) in before.iter().enumerate() {
                if *was != fleet.shard[i] {
                    moved += 1;
                    prop_assert_eq!(fleet.shard[i].as_deref(), Some(new.as_str()), "cr {} moved elsewhere", i);
                }
            }
            prop_assert!(moved <= count.div_ceil(after.len()), "{} moved for a share of {}", moved, count / after.len());
            assert_balanced(&fleet, &after, 0.2);
        }
    }
}
