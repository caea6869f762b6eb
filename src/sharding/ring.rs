//! The consistent-hash ring: each shard sits at many points (virtual nodes) on a 64-bit circle, and
//! a key's preference order is the shards met walking clockwise from the key's own point.
//!
//! The hash is FNV-1a with a 64-bit finaliser, defined here rather than taken from `std`, so every
//! replica and every version of the binary computes the same ring.

/// Points each shard takes on the ring: enough that each shard's share of the circle is within a
/// few percent of even.
pub const VIRTUAL_NODES: usize = 256;

/// A hash ring over a set of shards.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    /// `(point, shard index)`, sorted by point.
    points: Vec<(u64, usize)>,
    /// The shards, sorted by name.
    shards: Vec<String>,
}

impl Ring {
    /// The ring of `shards` (duplicates are ignored), `VIRTUAL_NODES` points each.
    pub fn new<I, S>(shards: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut shards: Vec<String> = shards.into_iter().map(Into::into).collect();
        shards.sort();
        shards.dedup();
        let mut points = Vec::with_capacity(shards.len() * VIRTUAL_NODES);
        for (index, shard) in shards.iter().enumerate() {
            for node in 0..VIRTUAL_NODES {
                points.push((hash(format!("{shard}#{node}").as_bytes()), index));
            }
        }
        points.sort_unstable();
        Self { points, shards }
    }

    /// The shards on the ring, sorted by name.
    pub fn shards(&self) -> &[String] {
        &self.shards
    }

    /// The shard that owns `key` on the bare ring (no load bound); `None` when the ring is empty.
    pub fn owner(&self, key: &str) -> Option<&str> {
        self.preference(key).next()
    }

    /// Every shard once, in the order met walking clockwise from `key`'s point.
    pub fn preference(&self, key: &str) -> impl Iterator<Item = &str> + '_ {
        let point = hash(key.as_bytes());
        let start = self.points.partition_point(|(p, _)| *p < point);
        let mut seen = vec![false; self.shards.len()];
        let mut order = Vec::with_capacity(self.shards.len());
        for (_, index) in self.points[start..].iter().chain(&self.points[..start]) {
            if !std::mem::replace(&mut seen[*index], true) {
                order.push(self.shards[*index].as_str());
                if order.len() == self.shards.len() {
                    break;
                }
            }
        }
        order.into_iter()
    }
}

/// FNV-1a over `bytes`, then the murmur3 finaliser so that similar keys spread over the circle.
pub fn hash(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = bytes.iter().fold(OFFSET, |h, byte| (h ^ u64::from(*byte)).wrapping_mul(PRIME));
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn an_empty_ring_owns_nothing() {
        assert_eq!(Ring::new(Vec::<String>::new()).owner("ns/a"), None);
    }

    #[test]
    fn the_preference_lists_every_shard_once_starting_with_the_owner() {
        let ring = Ring::new(["a", "b", "c", "b"]);
        let order: Vec<&str> = ring.preference("ns/x").collect();
        assert_eq!(order.len(), 3);
        assert_eq!(Some(order[0]), ring.owner("ns/x"));
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, ["a", "b", "c"]);
    }

    #[test]
    fn the_hash_is_stable_across_builds() {
        // Pinned: a change would reshuffle every fleet on upgrade.
        assert_eq!(hash(b""), 0xefd0_1f60_ba99_2926);
    }

    #[test]
    fn each_shard_holds_a_near_even_share_of_the_circle() {
        let ring = Ring::new(["replica-a", "replica-b", "replica-c"]);
        let mut counts = std::collections::HashMap::new();
        for i in 0..30_000 {
            *counts.entry(ring.owner(&format!("ns/cr-{i}")).unwrap().to_string()).or_insert(0) += 1;
        }
        for (shard, count) in counts {
            assert!((8_500..=11_500).contains(&count), "{shard}: {count} of 30000");
        }
    }

    proptest! {
        #![proptest_config(crate::proptest_support::config(64))]

        /// A shard joining takes keys only for itself: no key moves between the old shards.
        #[test]
        fn a_joining_shard_takes_keys_only_for_itself(
            shards in proptest::collection::btree_set("[a-z0-9]{1,12}", 1..6),
            new in "[a-z0-9]{1,12}",
        ) {
            prop_assume!(!shards.contains(&new));
            let before = Ring::new(shards.iter().cloned());
            let after = Ring::new(shards.iter().cloned().chain([new.clone()]));
            for i in 0..300 {
                let key = format!("ns/cr-{i}");
                let (was, is) = (before.owner(&key).unwrap(), after.owner(&key).unwrap());
                prop_assert!(was == is || is == new, "{key} moved {was} -> {is}");
            }
        }

        /// A shard leaving gives up only its own keys.
        #[test]
        fn a_leaving_shard_gives_up_only_its_keys(
            shards in proptest::collection::btree_set("[a-z0-9]{1,12}", 2..6),
        ) {
            let gone = shards.iter().next().unwrap().clone();
            let before = Ring::new(shards.iter().cloned());
            let after = Ring::new(shards.iter().filter(|s| **s != gone).cloned());
            for i in 0..300 {
                let key = format!("ns/cr-{i}");
                let (was, is) = (before.owner(&key).unwrap(), after.owner(&key).unwrap());
                prop_assert!(was == is || was == gone, "{key} moved {was} -> {is}");
            }
        }
    }
}
