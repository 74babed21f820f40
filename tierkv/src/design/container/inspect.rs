//! `triangle` and `matrix` in `tierkv pm` / `tierkv verify`: the rows of
//! the PM container (RowTables, docs/format/pm.md) and the container state
//! recorded in the MANIFEST (design record `CONTAINER_TAG`).

use std::sync::Arc;

use super::rowtable::{Expect, RowTable};
use super::{ContainerState, CONTAINER_TAG};
use crate::error::{Error, Result};
use crate::inspect::{escape, Check, ManifestState, Node};
use crate::stats::Tier;
use crate::storage::alloc::PAGE_SIZE_BYTES;
use crate::storage::PmRegion;
use crate::version::edit::{TableFormat, TableMeta};

/// The PM rows of a manifest state: `(region, meta)`, newest first.
fn rows(state: &ManifestState) -> impl Iterator<Item = (usize, &TableMeta)> {
    state
        .tables()
        .filter(|(_, _, t)| t.tier == Tier::Pm && t.format == TableFormat::RowTable)
        .map(|(r, _, t)| (r, t))
}

fn open_row(region: &Arc<dyn PmRegion>, t: &TableMeta, verify_data: bool) -> Result<RowTable> {
    let meta_run = *t.pm_pages.first().ok_or_else(|| {
        Error::corruption("MANIFEST", 0, format!("PM row {} lists no page runs", t.id))
    })?;
    RowTable::open(
        Arc::clone(region),
        meta_run,
        Expect {
            seq_min: t.seq_min,
            seq_max: t.seq_max,
            entries: t.entries,
        },
        &t.pm_pages,
        verify_data,
    )
}

fn state_node(region: usize, s: &ContainerState) -> Node {
    let mut n = Node::new(format!("container state (region {region})"))
        .text(
            "cursor",
            s.cursor.as_deref().map_or("(start)".to_string(), escape),
        )
        .num("steps", s.steps.len() as u64);
    if s.compactor_seq > 0 || !s.first_key_index.is_empty() {
        n = n.num("compactor_seq", s.compactor_seq).text(
            "first_key_index",
            s.first_key_index
                .iter()
                .map(|(seq, i)| format!("{seq}:{i}"))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    for st in &s.steps {
        n = n.child(
            Node::new("step")
                .text("from", escape(&st.start))
                .num("consumed_through_seq", st.through),
        );
    }
    n
}

/// The container state of every region and every row with its extents.
pub fn describe(region: &Arc<dyn PmRegion>, state: &ManifestState) -> Result<Vec<Node>> {
    let mut out = Vec::new();
    for (r, rs) in state.regions.iter().enumerate() {
        match rs.design_state.get(&CONTAINER_TAG) {
            Some(b) => out.push(match ContainerState::decode(b) {
                Ok(s) => state_node(r, &s),
                Err(e) => {
                    Node::new(format!("container state (region {r})")).text("error", e.to_string())
                }
            }),
            None => out.push(
                Node::new(format!("container state (region {r})"))
                    .text("state", "none recorded (nothing consumed)"),
            ),
        }
    }
    let mut container = Node::new("PM container rows (newest first)");
    for (r, t) in rows(state) {
        let mut n = Node::new(format!("row #{}", t.id))
            .at(t.pm_pages.first().map_or(0, |p| p.first * PAGE_SIZE_BYTES))
            .num("region", r as u64)
            .num("seq_min", t.seq_min)
            .num("seq_max", t.seq_max)
            .num("entries", t.entries)
            .num("bytes", t.size_bytes);
        match open_row(region, t, false) {
            Ok(row) => {
                n = n
                    .num("prev_seq_max", row.prev_seq_max())
                    .num("prev_entries", row.prev_len() as u64)
                    .num("value_bytes", row.data_bytes())
                    .num("meta_pages", row.meta_run().count);
                if !row.is_empty() {
                    n = n
                        .text("first_key", escape(row.user_key(0)))
                        .text("last_key", escape(row.user_key(row.len() - 1)));
                }
                for (i, e) in row.extents().iter().enumerate() {
                    n = n.child(
                        Node::new(format!("extent {i}"))
                            .at(e.run.first * PAGE_SIZE_BYTES)
                            .num("pages", e.run.count)
                            .num("first_entry", u64::from(e.first_entry))
                            .num("used_bytes", u64::from(e.used_bytes))
                            .text("crc32c", format!("{:#010x}", e.crc))
                            .flag("live", t.pm_pages.contains(&e.run)),
                    );
                }
            }
            Err(e) => n = n.text("error", e.to_string()),
        }
        container = container.child(n);
    }
    out.push(container);
    Ok(out)
}

/// Checks the container state records and every row: header and metadata
/// checksums, structure, and the checksum of every live data extent.
pub fn verify(region: &Arc<dyn PmRegion>, state: &ManifestState) -> Vec<Check> {
    let mut out = Vec::new();
    for (r, rs) in state.regions.iter().enumerate() {
        if let Some(b) = rs.design_state.get(&CONTAINER_TAG) {
            out.push(Check::new(
                format!("container state (region {r})"),
                ContainerState::decode(b).map(|_| ()),
            ));
        }
    }
    for (_, t) in rows(state) {
        out.push(Check::new(
            format!("row #{} (seqnos {}..={})", t.id, t.seq_min, t.seq_max),
            open_row(region, t, true).map(|_| ()),
        ));
    }
    out
}
