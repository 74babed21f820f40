//! The block cache: a sharded LRU of decoded blocks, keyed by
//! `(table_id, block_offset)` and charged by block size.
//!
//! # Structure
//!
//! ```text
//! BlockCache
//!   shards[2^b]  (b <= 4; each shard >= 512 KiB)   shard = hash(key) >> (64 - b)
//!     Mutex<Shard>
//!       map:   (table_id, offset) → slot
//!       slots: [Node { key, block, charge, prev, next }]    slot 0 = list head
//!              doubly linked through slot indices, most recent first
//!       free:  unused slots
//! ```
//!
//! Lookup, insert and eviction are O(1): a hit moves its node to the front,
//! an insert evicts from the back until the shard is within its capacity.
//! Evicting a block only drops the cache's reference: iterators holding the
//! `Arc<Block>` keep it alive. The blocks of a deleted table are not
//! erased: table ids are never reused, so nothing finds them again and they
//! age out of the LRU, as in RocksDB.
//!
//! # Invariants
//!
//! 1. Per shard, `usage` = the sum of the charges of the cached blocks and,
//!    after every insert, `usage <= capacity` (a block larger than a whole
//!    shard is not cached).
//! 2. Every slot in `map` is on the list exactly once; free slots are not.
//! 3. Capacity 0 disables the cache: `get` misses and `insert` does nothing.
//!
//! # Concurrency
//!
//! `BlockCache` is `Send + Sync`; each shard has its own mutex, held only
//! for the map and list updates (never across I/O).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use parking_lot::Mutex;

use super::block::Block;

/// Smallest capacity a shard gets when the cache is split.
const MIN_SHARD_BYTES: usize = 512 << 10;
/// Most shards (as a power of two).
const MAX_SHARD_BITS: u32 = 4;
const HEAD: u32 = 0;

type Key = (u64, u64);

/// A cheap hasher for `(u64, u64)` keys (they are not attacker-chosen).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        mix(self.0)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
}

#[inline]
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

#[inline]
fn key_hash(key: Key) -> u64 {
    mix(key.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ key.1)
}

struct Node {
    key: Key,
    block: Option<Arc<Block>>,
    charge: usize,
    prev: u32,
    next: u32,
}

struct Shard {
    map: HashMap<Key, u32, BuildHasherDefault<KeyHasher>>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    usage: usize,
    capacity: usize,
}

impl Shard {
    fn new(capacity: usize) -> Self {
        Shard {
            map: HashMap::default(),
            nodes: vec![Node {
                key: (0, 0),
                block: None,
                charge: 0,
                prev: HEAD,
                next: HEAD,
            }],
            free: Vec::new(),
            usage: 0,
            capacity,
        }
    }

    #[inline]
    fn unlink(&mut self, i: u32) {
        let (p, n) = {
            let node = &self.nodes[i as usize];
            (node.prev, node.next)
        };
        self.nodes[p as usize].next = n;
        self.nodes[n as usize].prev = p;
    }

    #[inline]
    fn push_front(&mut self, i: u32) {
        let first = self.nodes[HEAD as usize].next;
        {
            let node = &mut self.nodes[i as usize];
            node.prev = HEAD;
            node.next = first;
        }
        self.nodes[first as usize].prev = i;
        self.nodes[HEAD as usize].next = i;
    }

    fn get(&mut self, key: Key) -> Option<Arc<Block>> {
        let i = *self.map.get(&key)?;
        self.unlink(i);
        self.push_front(i);
        self.nodes[i as usize].block.clone()
    }

    fn remove_slot(&mut self, i: u32) {
        self.unlink(i);
        let node = &mut self.nodes[i as usize];
        node.block = None;
        self.usage -= node.charge;
        node.charge = 0;
        self.free.push(i);
    }

    fn insert(&mut self, key: Key, block: Arc<Block>, charge: usize) {
        if charge > self.capacity {
            return;
        }
        if let Some(&i) = self.map.get(&key) {
            // Replace (another reader loaded the same block concurrently).
            self.usage = self.usage - self.nodes[i as usize].charge + charge;
            let node = &mut self.nodes[i as usize];
            node.block = Some(block);
            node.charge = charge;
            self.unlink(i);
            self.push_front(i);
        } else {
            let node = Node {
                key,
                block: Some(block),
                charge,
                prev: HEAD,
                next: HEAD,
            };
            let i = match self.free.pop() {
                Some(i) => {
                    self.nodes[i as usize] = node;
                    i
                }
                None => {
                    self.nodes.push(node);
                    (self.nodes.len() - 1) as u32
                }
            };
            self.usage += charge;
            self.map.insert(key, i);
            self.push_front(i);
        }
        while self.usage > self.capacity {
            let last = self.nodes[HEAD as usize].prev;
            if last == HEAD {
                break;
            }
            let k = self.nodes[last as usize].key;
            self.map.remove(&k);
            self.remove_slot(last);
        }
    }
}

/// A sharded LRU cache of decoded blocks (see the module docs).
pub struct BlockCache {
    shards: Box<[Mutex<Shard>]>,
    shard_bits: u32,
    capacity_bytes: usize,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity_bytes", &self.capacity_bytes)
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl BlockCache {
    /// A cache holding at most `capacity_bytes` of blocks (0: disabled).
    pub fn new(capacity_bytes: usize) -> Self {
        let mut shard_bits = 0;
        while shard_bits < MAX_SHARD_BITS && (capacity_bytes >> (shard_bits + 1)) >= MIN_SHARD_BYTES
        {
            shard_bits += 1;
        }
        let n = 1usize << shard_bits;
        let per_shard = capacity_bytes / n;
        let shards = (0..n).map(|_| Mutex::new(Shard::new(per_shard))).collect();
        BlockCache {
            shards,
            shard_bits,
            capacity_bytes,
        }
    }

    #[inline]
    fn shard(&self, key: Key) -> &Mutex<Shard> {
        let i = if self.shard_bits == 0 {
            0
        } else {
            (key_hash(key) >> (64 - self.shard_bits)) as usize
        };
        &self.shards[i]
    }

    /// The cached block at `block_offset` of table `table_id`, if any
    /// (and marks it most recently used).
    #[inline]
    pub fn get(&self, table_id: u64, block_offset: u64) -> Option<Arc<Block>> {
        if self.capacity_bytes == 0 {
            return None;
        }
        let key = (table_id, block_offset);
        self.shard(key).lock().get(key)
    }

    /// Caches a block, charged by its size, evicting least recently used
    /// blocks as needed. Replaces an existing entry for the same key.
    pub fn insert(&self, table_id: u64, block_offset: u64, block: Arc<Block>) {
        if self.capacity_bytes == 0 {
            return;
        }
        let key = (table_id, block_offset);
        let charge = block.size_bytes();
        self.shard(key).lock().insert(key, block, charge);
    }

    /// Bytes charged by the cached blocks.
    pub fn usage_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().usage).sum()
    }

    /// Number of cached blocks.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    /// True if no block is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The configured capacity.
    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Checks invariants 1 and 2 (tests).
    #[cfg(any(test, feature = "invariants"))]
    pub fn check_invariants(&self) {
        for s in self.shards.iter() {
            let s = s.lock();
            let mut count = 0;
            let mut usage = 0;
            let mut i = s.nodes[HEAD as usize].next;
            while i != HEAD {
                let n = &s.nodes[i as usize];
                assert_eq!(s.map.get(&n.key), Some(&i));
                assert_eq!(s.nodes[n.next as usize].prev, i);
                usage += n.charge;
                count += 1;
                i = n.next;
            }
            assert_eq!(count, s.map.len());
            assert_eq!(usage, s.usage);
            assert!(s.usage <= s.capacity);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::sst::block::BlockBuilder;

    fn block(size: usize) -> Arc<Block> {
        let mut b = BlockBuilder::new(16);
        let key = crate::key::make_internal_key(b"k", 1, crate::key::Kind::Put);
        b.add(&key, &vec![7u8; size.saturating_sub(3 + key.len() + 8 + 2)]);
        Arc::new(Block::new(b.finish().to_vec(), Arc::from("t"), 0).unwrap())
    }

    #[test]
    fn lru_eviction_order_and_usage() {
        let c = BlockCache::new(10_000);
        assert_eq!(c.shard_count(), 1);
        let b = block(1000);
        let sz = b.size_bytes();
        for i in 0..9 {
            c.insert(1, i, Arc::clone(&b));
        }
        assert_eq!(c.usage_bytes(), 9 * sz);
        // Touch 0 so that 1 is the least recently used.
        assert!(c.get(1, 0).is_some());
        c.insert(1, 9, Arc::clone(&b));
        c.insert(1, 10, Arc::clone(&b));
        assert!(c.get(1, 0).is_some());
        assert!(c.get(1, 1).is_none());
        assert!(c.usage_bytes() <= 10_000);
        c.check_invariants();
    }

    #[test]
    fn disabled_and_oversized() {
        let c = BlockCache::new(0);
        c.insert(1, 0, block(100));
        assert!(c.get(1, 0).is_none());
        let c = BlockCache::new(500);
        c.insert(1, 0, block(1000));
        assert!(c.get(1, 0).is_none());
        assert_eq!(c.usage_bytes(), 0);
    }

    #[test]
    fn sharding() {
        assert_eq!(BlockCache::new(8 << 20).shard_count(), 16);
        assert_eq!(BlockCache::new(1 << 20).shard_count(), 2);
        assert_eq!(BlockCache::new(100 << 10).shard_count(), 1);
    }
}
