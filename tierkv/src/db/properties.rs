//! Named properties (`Db::property`) and the stats snapshot (`Db::stats`).

use crate::stats::{LevelShape, Stats};

use super::Inner;

impl Inner {
    /// See `Db::property`.
    pub(super) fn property(&self, name: &str) -> Option<String> {
        let vs = self.versions.current_all();
        let several = vs.len() > 1;
        let level_count = self.opts.level_count;
        let level_tables = |l: usize| vs.iter().map(|v| v.levels[l].len()).sum::<usize>();
        match name {
            "tierkv.stats" => Some(self.stats_snapshot().to_table()),
            "tierkv.levels" => Some(
                (0..level_count)
                    .map(|i| {
                        let bytes: u64 = vs.iter().map(|v| v.level_bytes(i)).sum();
                        format!("L{i}: {} tables, {bytes} bytes\n", level_tables(i))
                    })
                    .collect(),
            ),
            "tierkv.tables" => Some(
                vs.iter()
                    .enumerate()
                    .flat_map(|(r, v)| {
                        v.levels
                            .iter()
                            .enumerate()
                            .flat_map(move |(i, l)| l.iter().map(move |t| (r, i, t)))
                    })
                    .map(|(r, i, t)| {
                        format!(
                            "{}L{i} #{} {} {} {:?} {:?}\n",
                            if several {
                                format!("R{r} ")
                            } else {
                                String::new()
                            },
                            t.meta.id,
                            t.meta.tier.name(),
                            t.meta.size_bytes,
                            String::from_utf8_lossy(t.smallest_user_key()),
                            String::from_utf8_lossy(t.largest_user_key())
                        )
                    })
                    .collect(),
            ),
            "tierkv.regions" => Some(
                vs.iter()
                    .enumerate()
                    .map(|(r, v)| {
                        let shape: Vec<String> =
                            v.levels.iter().map(|l| l.len().to_string()).collect();
                        format!("R{r}: {}\n", shape.join(" "))
                    })
                    .collect(),
            ),
            "tierkv.last-sequence" => Some(
                self.last_seq
                    .load(std::sync::atomic::Ordering::Acquire)
                    .to_string(),
            ),
            "tierkv.design" => Some(self.opts.design.name().to_string()),
            // Obsolete table files kept for reuse (version/recycle.rs): how
            // many new tables were written over one, how many are kept now.
            "tierkv.recycled-tables" => {
                let r = &self.versions.ctx().recycler;
                Some(format!("reused {}\nkept {}\n", r.reused(), r.kept()))
            }
            "tierkv.design-stats" => {
                let figures = self.design.stats(&vs);
                (!figures.is_empty()).then(|| {
                    figures
                        .iter()
                        .map(|(name, value)| format!("{name}: {value}\n"))
                        .collect()
                })
            }
            "tierkv.level-targets" => {
                let t = self.design.level_targets(vs.first()?)?;
                let mut out = String::new();
                if let Some(n) = t.l0_tables {
                    out.push_str(&format!("L0: {n} tables\n"));
                }
                for (l, b) in t.bytes.iter().enumerate().filter(|(_, b)| **b > 0) {
                    out.push_str(&format!("L{l}: {b} bytes\n"));
                }
                Some(out)
            }
            // What the pacer reads (db/control.rs): the design's headroom
            // per region, in user bytes; none for a design whose only
            // bounded resource is the memtables.
            "tierkv.headroom" => {
                let st = self.state.lock();
                let out: String = vs
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| {
                        let h = self.design.headroom(v, st.waiting_imms(i))?;
                        Some(format!(
                            "region {i}: free {} capacity {} step {}\n",
                            h.free_bytes, h.capacity_bytes, h.step_bytes
                        ))
                    })
                    .collect();
                (!out.is_empty()).then_some(out)
            }
            // RocksDB's names for the same four figures: together they tell
            // whether background work is done (a quiesced database).
            "tierkv.num-running-flushes" => Some(u8::from(self.state.lock().flushing).to_string()),
            "tierkv.num-running-compactions" => {
                Some(self.state.lock().compactions_running.to_string())
            }
            "tierkv.mem-table-flush-pending" => {
                Some(u8::from(self.state.lock().mem.imm_count() > 0).to_string())
            }
            "tierkv.compaction-pending" => Some(u8::from(self.compaction_pending()).to_string()),
            "tierkv.background-write-limit" => Some(match &self.limiter {
                None => "off".to_string(),
                Some(l) => match l.limit() {
                    (None, lowered) => format!("none (lowered in {lowered} windows so far)"),
                    (Some(b), lowered) => {
                        format!("{b} bytes/s (lowered in {lowered} windows so far)")
                    }
                },
            }),
            _ => {
                let n = name.strip_prefix("tierkv.num-files-at-level")?;
                let level: usize = n.parse().ok()?;
                (level < level_count).then(|| level_tables(level).to_string())
            }
        }
    }

    /// The stats with every region's level shape now, the design's level
    /// targets and its counters.
    pub(super) fn stats_snapshot(&self) -> Stats {
        let versions = self.versions.current_all();
        let shapes: Vec<Vec<LevelShape>> = versions.iter().map(|v| v.shape()).collect();
        let mut s = self.stats.snapshot_regions(shapes);
        s.level_targets = versions.first().and_then(|v| self.design.level_targets(v));
        if let Some(pm) = &self.pm {
            s.written.pm_metadata = pm.allocator().bytes_written();
        }
        s.design = self.design.stats(&versions);
        s.compaction_priority = self
            .compaction_cpu
            .as_ref()
            .map(|g| (g.switches(), g.is_idle()));
        s
    }
}
