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
//! # Spare buffers
//!
//! A cache much smaller than the data it serves turns every miss into one
//! block read and one eviction. Freeing the evicted block and allocating
//! the next one's buffer cost about a tenth of a read-heavy profile
//! (glibc's `free` of a cold 4 KiB chunk touches its header and its
//! neighbours' to coalesce them). So an evicted block that no iterator
//! still holds gives its buffer back to its shard, and [`BlockCache::lookup`]
//! hands such a spare to the miss that will read the next block. Spares
//! are bounded per shard by count ([`SPARES_PER_SHARD`]) and by bytes
//! (1/32 of the shard's capacity), are not charged, and a buffer too large
//! for that bound is freed: the cache's memory stays within 1 + 1/32 of its
//! capacity (the default 8 MiB: 16 shards of 512 KiB, up to 16 KiB of
//! spares each; a shard under 128 KiB keeps no 4 KiB block's buffer).
//!
//! # Invariants
//!
//! 1. Per shard, `usage` = the sum of the charges of the cached blocks and,
//!    after every insert, `usage <= capacity` (a block larger than a whole
//!    shard is not cached).
//! 2. Every slot in `map` is on the list exactly once; free slots are not.
//! 3. Capacity 0 disables the cache: `get` misses and `insert` does nothing.
//! 4. Per shard, `spare_bytes` = the sum of the spares' capacities
//!    `<= capacity / 32`, and there are at most [`SPARES_PER_SHARD`].
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
/// Most spare buffers a shard keeps (see "Spare buffers" above): a miss
/// takes one and the eviction it causes gives one back, so a few absorb
/// the blocks pinned by iterators, whose buffers do not come back.
pub const SPARES_PER_SHARD: usize = 4;
/// Spare buffers are allocated in multiples of this, so that blocks cut at
/// the same target size fit each other's buffers.
const SPARE_ROUND: usize = 256;

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
    spares: Vec<Vec<u8>>,
    spare_bytes: usize,
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
            spares: Vec::new(),
            spare_bytes: 0,
        }
    }

    /// A buffer to read a block of `need` bytes into: a spare that holds
    /// it, else a new one (capacity rounded up to [`SPARE_ROUND`]).
    fn take_spare(&mut self, need: usize) -> Vec<u8> {
        match self.spares.iter().position(|b| b.capacity() >= need) {
            Some(i) => {
                let buf = self.spares.swap_remove(i);
                self.spare_bytes -= buf.capacity();
                buf
            }
            None => Vec::with_capacity(need.next_multiple_of(SPARE_ROUND)),
        }
    }

    /// Keeps the buffer of an evicted block as a spare if no iterator
    /// holds the block and there is room (invariant 4); else drops it.
    fn keep_spare(&mut self, block: Arc<Block>) {
        if self.spares.len() >= SPARES_PER_SHARD {
            return;
        }
        if let Ok(block) = Arc::try_unwrap(block) {
            let mut buf = block.into_data();
            buf.clear();
            if self.spare_bytes + buf.capacity() <= self.capacity / 32 {
                self.spare_bytes += buf.capacity();
                self.spares.push(buf);
            }
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

    fn remove_slot(&mut self, i: u32) -> Option<Arc<Block>> {
        self.unlink(i);
        let node = &mut self.nodes[i as usize];
        let block = node.block.take();
        self.usage -= node.charge;
        node.charge = 0;
        self.free.push(i);
        block
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
            if let Some(block) = self.remove_slot(last) {
                self.keep_spare(block);
            }
        }
    }
}

/// What [`BlockCache::lookup`] found.
#[derive(Debug)]
pub enum Lookup {
    /// The cached block.
    Hit(Arc<Block>),
    /// Not cached: an empty buffer with room for the block.
    Miss(Vec<u8>),
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

    /// Like [`BlockCache::get`], but a miss returns a buffer with room for
    /// `need` bytes to read the block into (a spare of an evicted block
    /// when the shard has one; see the module doc), which the block then
    /// brings back through [`BlockCache::insert`].
    #[inline]
    pub fn lookup(&self, table_id: u64, block_offset: u64, need: usize) -> Lookup {
        if self.capacity_bytes == 0 {
            return Lookup::Miss(Vec::with_capacity(need));
        }
        let key = (table_id, block_offset);
        let mut shard = self.shard(key).lock();
        match shard.get(key) {
            Some(block) => Lookup::Hit(block),
            None => Lookup::Miss(shard.take_spare(need)),
        }
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

    /// Spare buffers held, and their bytes (see the module doc).
    pub fn spares(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(n, b), s| {
            let s = s.lock();
            (n + s.spares.len(), b + s.spare_bytes)
        })
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
            assert!(s.spares.len() <= SPARES_PER_SHARD);
            assert_eq!(
                s.spares.iter().map(Vec::capacity).sum::<usize>(),
                s.spare_bytes
            );
            assert!(s.spare_bytes <= s.capacity / 32);
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
    fn an_evicted_blocks_buffer_serves_the_next_miss() {
        let c = BlockCache::new(64 << 10);
        assert_eq!(c.shard_count(), 1);
        let mut first = None;
        let mut i = 0;
        // Fill the cache until it evicts the first block (into a spare).
        while c.spares().0 == 0 {
            let b = block(1000);
            if i == 0 {
                first = Some(b.data().as_ptr());
            }
            c.insert(1, i, b);
            i += 1;
        }
        assert!(c.get(1, 0).is_none());
        let Lookup::Miss(buf) = c.lookup(9, 9, 500) else {
            panic!("hit");
        };
        assert!(buf.is_empty() && buf.capacity() >= 500);
        assert_eq!(Some(buf.as_ptr()), first, "the evicted block's buffer");
        assert_eq!(c.spares(), (0, 0));
        // Nothing spare: a new buffer.
        let Lookup::Miss(buf) = c.lookup(9, 9, 500) else {
            panic!("hit");
        };
        assert!(buf.capacity() >= 500);
        assert!(matches!(c.lookup(1, i - 1, 500), Lookup::Hit(_)));
        c.check_invariants();
    }

    #[test]
    fn a_block_an_iterator_holds_is_not_recycled_and_spares_are_bounded() {
        let c = BlockCache::new(64 << 10);
        let held = block(1000);
        c.insert(1, 0, Arc::clone(&held));
        for i in 1..200 {
            c.insert(1, i, block(1000));
            c.check_invariants();
        }
        assert!(c.get(1, 0).is_none());
        assert_eq!(held.data().len(), block(1000).data().len(), "still whole");
        let (n, bytes) = c.spares();
        assert!(n <= SPARES_PER_SHARD && bytes <= (64 << 10) / 32);
        assert!(n >= 1);
        // A spare too small for the need is not handed out.
        let Lookup::Miss(buf) = c.lookup(9, 9, 100_000) else {
            panic!("hit");
        };
        assert!(buf.capacity() >= 100_000);
        assert_eq!(c.spares().0, n);
    }

    #[test]
    fn sharding() {
        assert_eq!(BlockCache::new(8 << 20).shard_count(), 16);
        assert_eq!(BlockCache::new(1 << 20).shard_count(), 2);
        assert_eq!(BlockCache::new(100 << 10).shard_count(), 1);
    }
}
