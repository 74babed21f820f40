//! Fuzzes the PM container's MANIFEST state (`ContainerState::decode`, the
//! design record of `triangle` and `matrix`): arbitrary bytes never panic; a
//! state that decodes re-encodes to the same bytes, answers
//! `consumed_through` and `consumed_ranges` consistently, and stays
//! well-formed under `consume` and `prune` driven by the rest of the input.
//! (Side plans travel in tasks as typed values, `Task::plan`: they have no
//! byte form to decode.)

#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv::design::container::ContainerState;

fuzz_target!(|data: &[u8]| {
    let mut s = match ContainerState::decode(data) {
        Ok(s) => s,
        Err(e) => {
            assert!(e.is_corruption(), "{e}");
            return;
        }
    };
    let again = s.encode();
    assert_eq!(ContainerState::decode(&again).ok().as_ref(), Some(&s));
    // Lookups at every step start and between.
    let starts: Vec<Vec<u8>> = s.steps.iter().map(|x| x.start.clone()).collect();
    for k in &starts {
        let t = s.consumed_through(k);
        let mut after = k.clone();
        after.push(0);
        let _ = s.consumed_through(&after);
        for r in s.consumed_ranges(t.max(1)) {
            assert!(r.1.is_none_or(|hi| r.0 < hi), "empty or reversed range");
        }
    }
    // Operations from the tail of the input.
    for chunk in data.chunks(5).take(64) {
        let lo = &chunk[..chunk.len().min(2)];
        let hi = (chunk.len() > 3).then(|| &chunk[2..4]);
        let through = u64::from(chunk[0]) * 17;
        if chunk[0] & 1 == 0 {
            s.consume(lo, hi, through);
        } else {
            s.prune(Some(through));
        }
        let b = s.encode();
        assert_eq!(
            ContainerState::decode(&b).ok().as_ref(),
            Some(&s),
            "a state changed by consume/prune must encode to a valid record"
        );
    }
});
