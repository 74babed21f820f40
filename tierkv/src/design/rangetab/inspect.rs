//! `rangetab` in `tierkv pm` / `tierkv verify`: the layout and buffer
//! records of each region's MANIFEST state, and every buffer table read
//! through the design's own reader (docs/format/pm.md, "RangeTab").

use std::sync::Arc;

use super::buffer::Readers;
use super::layout::{buffer_tag, BufferRecord, Layout, LAYOUT_TAG};
use crate::design::inspect::scan;
use crate::error::Result;
use crate::inspect::{escape, Check, ManifestState, Node};
use crate::stats::Tier;
use crate::storage::alloc::{PageRun, PAGE_SIZE_BYTES};
use crate::storage::PmRegion;
use crate::version::edit::TableFormat;

/// The layout of each region that records one.
fn layouts(state: &ManifestState) -> Vec<(usize, Result<Layout>)> {
    state
        .regions
        .iter()
        .enumerate()
        .filter_map(|(r, s)| {
            s.design_state
                .get(&LAYOUT_TAG)
                .map(|b| (r, Layout::decode(b)))
        })
        .collect()
}

/// A reader per region over `region`, for the layout of each region.
fn readers(region: &Arc<dyn PmRegion>, layout: &Layout, verify: bool) -> Readers {
    let readers = Readers::new(Arc::clone(region), verify, false);
    readers.set_layout(Arc::new(layout.clone()));
    readers
}

/// Every buffer run of the layouts: live whether or not a table lists it.
pub fn live_runs(state: &ManifestState) -> Vec<(String, PageRun)> {
    let mut out = Vec::new();
    for (r, layout) in layouts(state) {
        let Ok(layout) = layout else { continue };
        for t in 0..layout.count {
            for slot in 0..2u8 {
                out.push((
                    format!("region {r} RangeTab {t} buffer {slot}"),
                    layout.run(t, slot),
                ));
            }
        }
    }
    out
}

/// The layout, every buffer's state and its table.
pub fn describe(region: &Arc<dyn PmRegion>, state: &ManifestState) -> Result<Vec<Node>> {
    let mut out = Vec::new();
    for (r, layout) in layouts(state) {
        let layout = match layout {
            Ok(l) => l,
            Err(e) => {
                out.push(
                    Node::new(format!("RangeTab layout (region {r})")).text("error", e.to_string()),
                );
                continue;
            }
        };
        let readers = readers(region, &layout, false);
        let rs = &state.regions[r];
        let mut n = Node::new(format!("RangeTab layout (region {r})"))
            .num("rangetabs", u64::from(layout.count))
            .num("capacity_bytes", layout.capacity_bytes)
            .num("buffer_pages", layout.buffer_pages)
            .text("boundaries_from", layout.source.name())
            .text(
                "boundaries",
                layout
                    .boundaries
                    .iter()
                    .map(|b| escape(b))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        for t in 0..layout.count {
            for slot in 0..2u8 {
                let run = layout.run(t, slot);
                let mut b = Node::new(format!("RangeTab {t} buffer {slot}"))
                    .at(run.first * PAGE_SIZE_BYTES)
                    .num("pages", run.count);
                match rs
                    .design_state
                    .get(&buffer_tag(t, slot))
                    .map(|b| BufferRecord::decode(b))
                {
                    None => b = b.text("state", "init"),
                    Some(Ok(rec)) => {
                        b = b
                            .text("state", rec.state.name())
                            .num("order", rec.order)
                            .num("chunks", rec.chunks)
                    }
                    Some(Err(e)) => b = b.text("error", e.to_string()),
                }
                let table = rs
                    .levels
                    .iter()
                    .flatten()
                    .find(|m| m.tier == Tier::Pm && m.pm_pages.first() == Some(&run));
                if let Some(m) = table {
                    b = b
                        .num("table", m.id)
                        .num("used_bytes", m.size_bytes)
                        .num("entries", m.entries)
                        .num("seq_min", m.seq_min)
                        .num("seq_max", m.seq_max);
                    if let Err(e) = readers.get(m) {
                        b = b.text("error", e.to_string());
                    }
                }
                n = n.child(b);
            }
        }
        out.push(n);
    }
    Ok(out)
}

/// Checks each layout and buffer record, and every chunk of every buffer
/// table (header, crc, structure) and every entry through the reader.
pub fn verify(region: &Arc<dyn PmRegion>, state: &ManifestState) -> Vec<Check> {
    let mut out = Vec::new();
    for (r, layout) in layouts(state) {
        let layout = match layout {
            Ok(l) => l,
            Err(e) => {
                out.push(Check::new(format!("RangeTab layout (region {r})"), Err(e)));
                continue;
            }
        };
        out.push(Check::new(format!("RangeTab layout (region {r})"), Ok(())));
        let rs = &state.regions[r];
        for t in 0..layout.count {
            for slot in 0..2u8 {
                if let Some(b) = rs.design_state.get(&buffer_tag(t, slot)) {
                    out.push(Check::new(
                        format!("RangeTab {t} buffer {slot} record (region {r})"),
                        BufferRecord::decode(b).map(|_| ()),
                    ));
                }
            }
        }
        let readers = readers(region, &layout, true);
        for m in rs
            .levels
            .iter()
            .flatten()
            .filter(|m| m.tier == Tier::Pm && m.format == TableFormat::RangeTab)
        {
            let what = format!(
                "RangeTab buffer table #{} (seqnos {}..={})",
                m.id, m.seq_min, m.seq_max
            );
            let checked = readers.get(m).and_then(|t| scan(t).map(|_| ()));
            out.push(Check::new(what, checked));
        }
    }
    out
}
