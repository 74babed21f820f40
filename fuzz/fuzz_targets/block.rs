//! Fuzzes `Block::new` and the block iterator on arbitrary bytes: decoding
//! must never panic or read out of bounds; errors must be `Corruption`.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tierkv::iter::InternalIterator;
use tierkv::sst::block::Block;

fuzz_target!(|data: &[u8]| {
    let Ok(block) = Block::new(data.to_vec(), Arc::from("fuzz"), 0) else {
        return;
    };
    let block = Arc::new(block);
    let mut keys = Vec::new();
    let mut it = block.iter();
    it.seek_to_first();
    while it.valid() {
        if keys.len() < 32 {
            keys.push(it.key().to_vec());
        }
        let _ = it.value();
        it.next();
    }
    check(&it);
    it.seek_to_last();
    while it.valid() {
        it.prev();
    }
    check(&it);
    keys.push(data.iter().rev().take(16).copied().collect());
    for k in &keys {
        it.seek(k);
        for _ in 0..4 {
            if !it.valid() {
                break;
            }
            it.prev();
        }
        if it.valid() {
            it.next();
        }
    }
    check(&it);
});

fn check(it: &tierkv::sst::block::BlockIter) {
    if let Err(e) = it.status() {
        assert!(e.is_corruption(), "{e}");
    }
}
