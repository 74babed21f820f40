//! `nvcache` in `tierkv pm` / `tierkv verify`: every completed NVTable
//! read through its offset array, and every log the MANIFEST lists walked
//! as recovery walks it (docs/format/pm.md, "NVTable").

use std::sync::Arc;

use super::log;
use super::TableCache;
use crate::design::inspect::scan;
use crate::error::Result;
use crate::inspect::{Check, ManifestState, Node};
use crate::stats::Tier;
use crate::storage::alloc::PageRun;
use crate::storage::PmRegion;
use crate::version::edit::{TableFormat, TableMeta};

fn tables(state: &ManifestState) -> impl Iterator<Item = (usize, usize, &TableMeta)> {
    state
        .tables()
        .filter(|(_, _, t)| t.tier == Tier::Pm && t.format == TableFormat::NvTable)
}

/// The segments of every log the MANIFEST lists (its writer's NVTable:
/// the engine's PM WAL list holds them, but they are no extent chains).
pub fn live_runs(region: &dyn PmRegion, state: &ManifestState) -> Vec<(String, PageRun)> {
    let mut out = Vec::new();
    for w in &state.pm_wals {
        if let Ok((segs, _)) = log::walk_segments(region, w.first_extent, w.log_number) {
            out.extend(
                segs.into_iter()
                    .map(|s| (format!("NVTable log {}", w.log_number), s)),
            );
        }
    }
    out
}

/// Every log and every completed NVTable.
pub fn describe(region: &Arc<dyn PmRegion>, state: &ManifestState) -> Result<Vec<Node>> {
    let mut logs = Node::new("NVTable logs (the active NVTables)");
    for w in &state.pm_wals {
        let mut n = Node::new(format!("log {}", w.log_number)).at(w.first_extent);
        match log::walk(region.as_ref(), w.first_extent, w.log_number) {
            Ok((segs, nodes)) => {
                n = n
                    .num("segments", segs.len() as u64)
                    .num("nodes", nodes.len() as u64)
            }
            Err(e) => n = n.text("error", e.to_string()),
        }
        logs = logs.child(n);
    }
    let cache = TableCache::new(Arc::clone(region), false);
    let mut tabs = Node::new("NVTables");
    for (r, l, t) in tables(state) {
        let mut n = Node::new(format!("NVTable #{}", t.id))
            .at(t
                .pm_pages
                .first()
                .map_or(0, |p| p.first * crate::storage::alloc::PAGE_SIZE_BYTES))
            .num("region", r as u64)
            .num("level", l as u64)
            .num("entries", t.entries)
            .num("bytes", t.size_bytes)
            .num("seq_min", t.seq_min)
            .num("seq_max", t.seq_max)
            .num("segments", t.pm_pages.len().saturating_sub(1) as u64);
        if let Err(e) = cache.open(t) {
            n = n.text("error", e.to_string());
        }
        tabs = tabs.child(n);
    }
    Ok(vec![logs, tabs])
}

/// Walks every listed log (segment headers, links, both checksums of
/// every node, the seal) and reads every NVTable whole (array run, every
/// node and value checksum).
pub fn verify(region: &Arc<dyn PmRegion>, state: &ManifestState) -> Vec<Check> {
    let mut out = Vec::new();
    for w in &state.pm_wals {
        out.push(Check::new(
            format!("NVTable log {}", w.log_number),
            log::walk(region.as_ref(), w.first_extent, w.log_number).map(|_| ()),
        ));
    }
    let cache = TableCache::new(Arc::clone(region), true);
    for (_, _, t) in tables(state) {
        out.push(Check::new(
            format!("NVTable #{} (seqnos {}..={})", t.id, t.seq_min, t.seq_max),
            cache.open(t).and_then(|t| scan(t).map(|_| ())),
        ));
    }
    out
}
