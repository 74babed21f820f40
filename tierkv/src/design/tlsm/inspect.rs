//! `tlsm` in `tierkv pm` / `tierkv verify`: every skip list the MANIFEST
//! lists, opened and read whole through the design's reader, with the
//! data runs its directory names (docs/format/pm.md, "TLSM persistent
//! skip lists").

use std::sync::Arc;

use super::format::{Layout, Origin};
use super::list::ListCache;
use crate::design::inspect::scan;
use crate::error::Result;
use crate::inspect::{Check, ManifestState, Node};
use crate::stats::Tier;
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::storage::PmRegion;
use crate::version::edit::{TableFormat, TableMeta};

fn lists(state: &ManifestState) -> impl Iterator<Item = (usize, usize, &TableMeta)> {
    state
        .tables()
        .filter(|(_, _, t)| t.tier == Tier::Pm && t.format == TableFormat::PmSkipList)
}

/// The data runs (buffers, or node runs holding inline entries) the
/// listed lists' directories name: no table lists them, every list that
/// links into them keeps them. (The runs of an in-flight compaction, which
/// the next open resumes, are not included.)
pub fn live_runs(region: &Arc<dyn PmRegion>, state: &ManifestState) -> Vec<(String, PageRun)> {
    let cache = ListCache::new(Arc::clone(region), false, 0);
    let mut out = Vec::new();
    for (_, _, t) in lists(state) {
        if let Ok(list) = cache.get(t) {
            out.extend(
                list.directory()
                    .data
                    .iter()
                    .map(|d| (format!("data run of skip list #{}", t.id), d.run)),
            );
        }
    }
    out
}

/// Every listed skip list: its header, directory and data runs.
pub fn describe(region: &Arc<dyn PmRegion>, state: &ManifestState) -> Result<Vec<Node>> {
    let cache = ListCache::new(Arc::clone(region), false, 0);
    let mut root = Node::new("persistent skip lists");
    for (r, l, t) in lists(state) {
        let mut n = Node::new(format!("skip list #{}", t.id))
            .at(t.pm_pages.first().map_or(0, |p| p.first * PAGE_SIZE_BYTES))
            .num("region", r as u64)
            .num("level", l as u64)
            .num("entries", t.entries)
            .num("entry_bytes", t.size_bytes)
            .num("seq_min", t.seq_min)
            .num("seq_max", t.seq_max);
        match cache.get(t) {
            Ok(list) => {
                let h = list.header();
                let d = list.directory();
                n = n
                    .text(
                        "variant",
                        match h.layout {
                            Layout::Ps => "ps",
                            Layout::PsBac => "ps_bac",
                            Layout::Full => "full",
                        },
                    )
                    .text(
                        "origin",
                        match h.origin {
                            Origin::Flush => "flush",
                            Origin::Compaction => "compaction",
                            Origin::CopyForward => "copy-forward",
                        },
                    )
                    .num("job", h.job)
                    .num("node_runs", d.node_runs.len() as u64)
                    .num("data_runs", d.data.len() as u64);
                for dr in &d.data {
                    n = n.child(
                        Node::new("data run")
                            .at(dr.run.first * PAGE_SIZE_BYTES)
                            .num("pages", dr.run.count)
                            .num("entry_bytes", dr.bytes),
                    );
                }
            }
            Err(e) => n = n.text("error", e.to_string()),
        }
        root = root.child(n);
    }
    Ok(vec![root])
}

/// Opens every listed skip list (header, directory, every link, the
/// sentinel's crc) and reads every entry (buffer and inline entry crcs).
pub fn verify(region: &Arc<dyn PmRegion>, state: &ManifestState) -> Vec<Check> {
    let cache = ListCache::new(Arc::clone(region), true, 0);
    lists(state)
        .map(|(_, l, t)| {
            Check::new(
                format!(
                    "L{l} skip list #{} (seqnos {}..={})",
                    t.id, t.seq_min, t.seq_max
                ),
                cache.get(t).and_then(|list| scan(list).map(|_| ())),
            )
        })
        .collect()
}
