//! Shared by the `rangetab`, `nvcache` and `tlsm` targets (each includes
//! it with `#[path]`): `Db::repair`'s reading of a fuzzed PM image.

use std::sync::Arc;

use tierkv::key;
use tierkv::storage::PmRegion;
use tierkv::Error;

const PAGE: u64 = 4096;

/// `Db::repair`'s reading of the region (`design::salvage::salvage_pm`,
/// every page from `first_page` on, as without a page allocator): never a
/// panic, each source's entries in internal-key order
/// and each a parseable internal key, every error a corruption naming the
/// region. Returns the entries read and whether any problem was reported.
pub fn salvage(region: &Arc<dyn PmRegion>, preset: tierkv::Preset, first_page: u64) -> (u64, bool) {
    let pages: Vec<u64> = (first_page..region.len() / PAGE).collect();
    let (mut entries, mut problems) = (0u64, false);
    for s in tierkv::design::salvage::salvage_pm(preset, region, &pages) {
        problems |= !s.problems.is_empty();
        let Some(mut it) = s.entries else {
            problems = true;
            continue;
        };
        it.seek_to_first();
        let mut last: Option<Vec<u8>> = None;
        while it.valid() {
            let k = it.key().to_vec();
            assert!(
                key::parse_internal_key(&k).is_some(),
                "{}: a bad key",
                s.name
            );
            if let Some(l) = &last {
                // Duplicates are harmless (repair keeps one); disorder is not.
                assert_ne!(
                    key::compare_internal(l, &k),
                    std::cmp::Ordering::Greater,
                    "{}: entries out of order",
                    s.name
                );
            }
            let _ = it.value().len();
            last = Some(k);
            entries += 1;
            it.next();
        }
        if let Err(e) = it.status() {
            problems = true;
            match &e {
                Error::Corruption { at, .. } => assert_eq!(at.source, region.name(), "{e}"),
                _ => panic!("not a corruption: {e}"),
            }
        }
    }
    (entries, problems)
}
