//! The inspection commands: stats, manifest, wal, sst, pm, verify.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tierkv::inspect::{self, Check, ManifestState, Node};
use tierkv::iter::InternalIterator;
use tierkv::key::{parse_internal_key, Kind};
use tierkv::sst::{sst_file_name, ReadConfig, Table};
use tierkv::storage::posix::PosixFs;
use tierkv::storage::{FileSystem, PmRegion};
use tierkv::version::edit::{TableMeta, VersionEdit};
use tierkv::wal::{self, FileLog, LogSource, PmLog};
use tierkv::{Db, Preset, WriteBatch};

use crate::out::{Fmt, Output};
use crate::{Failure, Global, Res};

/// Values longer than this are cut in text output (unless `--full`).
const CUT_BYTES: usize = 32;

// -------------------------------------------------------------------- stats

/// The level shape as JSON.
pub fn levels_json(db: &Db) -> Value {
    let s = db.stats();
    json!(s
        .levels
        .iter()
        .map(|l| json!({ "level": l.level, "tier": l.tier.name(), "tables": l.tables, "bytes": l.bytes }))
        .collect::<Vec<_>>())
}

/// `tierkv stats`.
pub fn stats(db: &Db, o: &mut Output) {
    let s = db.stats();
    let text = db.property("tierkv.stats").unwrap_or_default();
    o.json(json!({
        "design": db.property("tierkv.design"),
        "last_sequence": db.last_sequence(),
        "levels": levels_json(db),
        "user_ops": s.user_ops,
        "user_bytes": s.user_bytes,
        "ssd_write_amp": s.ssd_write_amp(),
        "stall_seconds": s.stall_total().as_secs_f64(),
        "flushes": s.flushes.len(),
        "compactions": s.compactions.len(),
        "block_cache_hits": s.block_cache_hits,
        "block_cache_misses": s.block_cache_misses,
        "text": text,
    }));
    o.line(&format!(
        "design {}, last sequence {}",
        db.property("tierkv.design").unwrap_or_default(),
        db.last_sequence()
    ));
    o.text(&db.property("tierkv.levels").unwrap_or_default());
    o.text(&text);
}

// ----------------------------------------------------------------- manifest

fn ikey(f: Fmt, k: &[u8]) -> String {
    match parse_internal_key(k) {
        Some(p) => format!(
            "{}@{}{}",
            f.bytes(p.user_key),
            p.seq,
            if p.kind == Kind::Delete { " del" } else { "" }
        ),
        None => format!("(bad internal key {})", f.bytes(k)),
    }
}

fn ikey_json(f: Fmt, k: &[u8]) -> Value {
    match parse_internal_key(k) {
        Some(p) => {
            json!({ "user_key": f.bytes(p.user_key), "seq": p.seq, "kind": if p.kind == Kind::Delete { "delete" } else { "put" } })
        }
        None => json!({ "bad": f.bytes(k) }),
    }
}

fn runs(t: &TableMeta) -> String {
    t.pm_pages
        .iter()
        .map(|r| format!("{}+{}", r.first, r.count))
        .collect::<Vec<_>>()
        .join(",")
}

fn table_text(f: Fmt, level: u32, t: &TableMeta) -> String {
    let mut s = format!(
        "L{level} #{} {} {:?} {} B {} .. {} seq {}..={} entries {} deletions {}",
        t.id,
        t.tier.name(),
        t.format,
        t.size_bytes,
        ikey(f, &t.smallest),
        ikey(f, &t.largest),
        t.seq_min,
        t.seq_max,
        t.entries,
        t.deletions
    );
    if !t.pm_pages.is_empty() {
        s.push_str(&format!(" pages {}", runs(t)));
    }
    s
}

fn table_json(f: Fmt, level: usize, t: &TableMeta) -> Value {
    json!({
        "level": level, "id": t.id, "tier": t.tier.name(), "format": format!("{:?}", t.format),
        "size_bytes": t.size_bytes, "smallest": ikey_json(f, &t.smallest), "largest": ikey_json(f, &t.largest),
        "seq_min": t.seq_min, "seq_max": t.seq_max, "entries": t.entries, "deletions": t.deletions,
        "pm_pages": t.pm_pages.iter().map(|r| json!([r.first, r.count])).collect::<Vec<_>>(),
    })
}

fn edit_lines(f: Fmt, e: &VersionEdit) -> Vec<String> {
    let mut v = Vec::new();
    let mut head = Vec::new();
    if let Some(n) = e.log_number {
        head.push(format!("log_number {n}"));
    }
    if let Some(n) = e.next_file_number {
        head.push(format!("next_file {n}"));
    }
    if let Some(n) = e.last_seqno {
        head.push(format!("last_seqno {n}"));
    }
    if !head.is_empty() {
        v.push(head.join("  "));
    }
    for (l, id) in &e.deleted_tables {
        v.push(format!("- L{l} #{id}"));
    }
    for (l, t) in &e.new_tables {
        v.push(format!("+ {}", table_text(f, *l, t)));
    }
    for (l, k) in &e.compact_cursors {
        v.push(format!("cursor L{l} {}", ikey(f, k)));
    }
    for w in &e.new_pm_wals {
        v.push(format!(
            "+ PM WAL {} at {:#x}",
            w.log_number, w.first_extent
        ));
    }
    for n in &e.deleted_pm_wals {
        v.push(format!("- PM WAL {n}"));
    }
    for (t, b) in &e.design_records {
        v.push(format!("design record {t:#x} ({} bytes)", b.len()));
    }
    if let Some(l) = &e.region_layout {
        v.push(format!(
            "layout: {} regions, {}",
            l.count,
            if l.boundaries.is_empty() {
                "hash-routed".to_string()
            } else {
                format!(
                    "split at {}",
                    l.boundaries
                        .iter()
                        .map(|b| f.bytes(b))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ));
    }
    if let Some(id) = &e.identity {
        v.push(format!(
            "identity: design {}",
            id.design.as_deref().unwrap_or("(none)")
        ));
    }
    v
}

fn edit_json(f: Fmt, e: &VersionEdit) -> Value {
    json!({
        "region": e.region,
        "log_number": e.log_number,
        "next_file_number": e.next_file_number,
        "last_seqno": e.last_seqno,
        "deleted_tables": e.deleted_tables.iter().map(|(l, id)| json!({"level": l, "id": id})).collect::<Vec<_>>(),
        "new_tables": e.new_tables.iter().map(|(l, t)| table_json(f, *l as usize, t)).collect::<Vec<_>>(),
        "compact_cursors": e.compact_cursors.iter().map(|(l, k)| json!({"level": l, "key": ikey_json(f, k)})).collect::<Vec<_>>(),
        "new_pm_wals": e.new_pm_wals.iter().map(|w| json!({"log_number": w.log_number, "first_extent": w.first_extent})).collect::<Vec<_>>(),
        "deleted_pm_wals": e.deleted_pm_wals,
        "design_records": e.design_records.iter().map(|(t, b)| json!({"tag": t, "bytes": b.len()})).collect::<Vec<_>>(),
        "region_layout": e.region_layout.as_ref().map(|l| json!({"count": l.count, "boundaries": l.boundaries.iter().map(|b| f.bytes(b)).collect::<Vec<_>>()})),
        "identity": e.identity.as_ref().map(|i| json!({"design": i.design})),
    })
}

fn state_json(f: Fmt, s: &ManifestState) -> Value {
    json!({
        "regions": s.regions.iter().map(|r| json!({
            "log_number": r.log_number,
            "levels": r.levels.iter().enumerate().map(|(l, ts)| ts.iter().map(|t| table_json(f, l, t)).collect::<Vec<_>>()).collect::<Vec<_>>(),
            "design_records": r.design_state.keys().collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "pm_wals": s.pm_wals.iter().map(|w| json!({"log_number": w.log_number, "first_extent": w.first_extent})).collect::<Vec<_>>(),
        "next_file_number": s.next_file_number,
        "last_seqno": s.last_seqno,
        "design": s.identity.design,
    })
}

/// `tierkv manifest`.
pub fn manifest(dir: &Path, f: Fmt, o: &mut Output) -> Res<()> {
    let d = inspect::read_manifest(&PosixFs::new(), dir)?;
    let inf = inspect::infer_design(&d.state);
    o.json(json!({
        "manifest": d.path.display().to_string(),
        "number": d.number,
        "design": inf.design.map(|p| p.name()),
        "design_how": inf.how,
        "records": d.records.iter().map(|r| json!({"offset": r.offset, "edits": r.edits.iter().map(|e| edit_json(f, e)).collect::<Vec<_>>()})).collect::<Vec<_>>(),
        "torn_tail": d.torn_tail,
        "state": state_json(f, &d.state),
    }));
    o.line(&format!(
        "{} (named by CURRENT): {} records; design {} ({})",
        d.path.display(),
        d.records.len(),
        inf.design.map_or("unknown", |p| p.name()),
        inf.how
    ));
    for (i, r) in d.records.iter().enumerate() {
        o.line(&format!(
            "record {i} at offset {}{}",
            r.offset,
            if i == 0 { " (snapshot)" } else { "" }
        ));
        let several = r.edits.len() > 1;
        for e in &r.edits {
            for l in edit_lines(f, e) {
                if several || e.region != 0 {
                    o.line(&format!("  [region {}] {l}", e.region));
                } else {
                    o.line(&format!("  {l}"));
                }
            }
        }
    }
    if let Some(t) = d.torn_tail {
        o.line(&format!(
            "torn tail at offset {t} (an edit that never took effect)"
        ));
    }
    o.line("state:");
    for (r, rs) in d.state.regions.iter().enumerate() {
        if d.state.regions.len() > 1 {
            o.line(&format!("  region {r}: log_number {}", rs.log_number));
        } else {
            o.line(&format!("  log_number {}", rs.log_number));
        }
        for (l, ts) in rs.levels.iter().enumerate() {
            if ts.is_empty() {
                continue;
            }
            let bytes: u64 = ts.iter().map(|t| t.size_bytes).sum();
            o.line(&format!("  L{l}: {} tables, {bytes} bytes", ts.len()));
            for t in ts {
                o.line(&format!("    {}", table_text(f, l as u32, t)));
            }
        }
    }
    for w in &d.state.pm_wals {
        o.line(&format!(
            "  PM WAL {} at {:#x}",
            w.log_number, w.first_extent
        ));
    }
    o.line(&format!(
        "  next_file_number {}  last_seqno {}",
        d.state.next_file_number, d.state.last_seqno
    ));
    Ok(())
}

// ---------------------------------------------------------------------- wal

/// The design of the database in `g` (given, or from its manifest).
fn design_of(g: &Global, state: &ManifestState) -> Res<Preset> {
    if let Some(d) = g.design {
        return Ok(d);
    }
    let inf = inspect::infer_design(state);
    inf.design.ok_or_else(|| {
        Failure(format!(
            "cannot tell the design: {}; give --design",
            inf.how
        ))
    })
}

fn dump_log<S: LogSource>(
    mut r: wal::Reader<S>,
    name: &str,
    f: Fmt,
    full: bool,
    o: &mut Output,
) -> Res<Value> {
    let mut recs = Vec::new();
    o.line(&format!("{name}:"));
    while let Some(payload) = r.next_record()? {
        let offset = r.last_record_offset();
        let b = WriteBatch::decode(payload, name, offset)?;
        let mut ops = Vec::new();
        let mut text = Vec::new();
        for (i, op) in b.iter().enumerate() {
            let (kind, k, v) = op?;
            let seq = b.seqno() + i as u64;
            match kind {
                Kind::Put => {
                    let shown = if full {
                        f.bytes(v)
                    } else {
                        f.cut(v, CUT_BYTES)
                    };
                    text.push(format!("put {} = {shown}", f.bytes(k)));
                    ops.push(
                        json!({"seq": seq, "op": "put", "key": f.bytes(k), "value": f.bytes(v)}),
                    );
                }
                Kind::Delete => {
                    text.push(format!("delete {}", f.bytes(k)));
                    ops.push(json!({"seq": seq, "op": "delete", "key": f.bytes(k)}));
                }
            }
        }
        o.line(&format!(
            "  @{offset} seq {}..={}: {}",
            b.seqno(),
            b.seqno() + u64::from(b.count()).saturating_sub(1),
            text.join("; ")
        ));
        recs.push(json!({"offset": offset, "seqno": b.seqno(), "count": b.count(), "ops": ops}));
    }
    if recs.is_empty() {
        o.line("  (no records)");
    }
    if let Some(t) = r.torn_tail() {
        o.line(&format!(
            "  torn tail at offset {t} (never acknowledged; recovery drops it)"
        ));
    }
    Ok(json!({"log": name, "records": recs, "torn_tail": r.torn_tail()}))
}

/// SSD WAL files of `dir`, in number order.
fn wal_files(fs: &dyn FileSystem, dir: &Path) -> Res<Vec<(u64, PathBuf)>> {
    let mut v: Vec<(u64, PathBuf)> = fs
        .list(dir)?
        .into_iter()
        .filter_map(|n| {
            let num = n.strip_suffix(".log")?.parse::<u64>().ok()?;
            Some((num, dir.join(n)))
        })
        .collect();
    v.sort();
    Ok(v)
}

/// `tierkv wal`.
pub fn wal(g: &Global, full: bool, o: &mut Output) -> Res<()> {
    let f = g.fmt();
    let dir = g.db_dir()?;
    let fs = PosixFs::new();
    let d = inspect::read_manifest(&fs, dir)?;
    let mut logs = Vec::new();
    for (n, path) in wal_files(&fs, dir)? {
        let name = path.display().to_string();
        let r = wal::Reader::new(FileLog::new(name.clone(), fs.read_all(&path)?), n);
        logs.push(dump_log(r, &name, f, full, o)?);
    }
    if !d.state.pm_wals.is_empty() {
        match &g.pm_dir {
            Some(p) => {
                let region = inspect::open_pm(p)?;
                for w in &d.state.pm_wals {
                    let r =
                        PmLog::open_for_read(Arc::clone(&region), w.first_extent, w.log_number)?;
                    let name = format!(
                        "PM WAL {} ({} at {:#x})",
                        w.log_number,
                        region.name(),
                        w.first_extent
                    );
                    logs.push(dump_log(r, &name, f, full, o)?);
                }
            }
            None => o.note(&format!(
                "{} PM WAL(s) not shown: give --pm-dir",
                d.state.pm_wals.len()
            )),
        }
    }
    if logs.is_empty() {
        o.line("no WAL holds records the tables do not");
    }
    o.json(json!(logs));
    Ok(())
}

// ---------------------------------------------------------------------- sst

fn open_table(g: &Global, table: &str) -> Res<(Arc<Table>, PathBuf)> {
    let path = match (table.parse::<u64>(), &g.db) {
        (Ok(id), Some(db)) => db.join(sst_file_name(id)),
        _ => PathBuf::from(table),
    };
    let id = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let fs = PosixFs::new();
    let t = Table::open(fs.open(&path)?, id, None, ReadConfig::default())?;
    Ok((t, path))
}

/// `tierkv sst`.
pub fn sst(g: &Global, table: &str, limit: Option<usize>, full: bool, o: &mut Output) -> Res<()> {
    let f = g.fmt();
    let (t, path) = open_table(g, table)?;
    let p = t.props().clone();
    o.line(&format!("{}:", path.display()));
    o.line(&format!(
        "  properties: {} entries ({} deletions), {} data blocks, keys {} B, values {} B, seq {}..={}",
        p.entries, p.deletions, p.data_block_count, p.raw_key_bytes, p.raw_value_bytes, p.seq_min, p.seq_max
    ));
    o.line(&format!(
        "  file {} B, index {} B, filter {} B; smallest {}, largest {}",
        p.file_size_bytes,
        p.index_size_bytes,
        p.filter_size_bytes,
        if p.entries > 0 {
            ikey(f, &p.smallest)
        } else {
            "-".into()
        },
        if p.entries > 0 {
            ikey(f, &p.largest)
        } else {
            "-".into()
        }
    ));
    let blocks = t.data_blocks()?;
    o.line("  index (separator -> data block):");
    for b in &blocks {
        o.line(&format!(
            "    {} -> offset {} size {} ({}, {} B raw)",
            ikey(f, &b.separator),
            b.handle.offset,
            b.handle.size,
            b.compression,
            b.raw_size_bytes
        ));
    }
    o.line("  entries:");
    let mut it = Arc::clone(&t).table_iter(false);
    it.seek_to_first();
    let mut entries = Vec::new();
    let max = limit.unwrap_or(usize::MAX);
    while it.valid() && entries.len() < max {
        let (k, v) = (it.key(), it.value());
        let shown = if full {
            f.bytes(v)
        } else {
            f.cut(v, CUT_BYTES)
        };
        o.line(&format!("    {} => {shown}", ikey(f, k)));
        entries.push(json!({"key": ikey_json(f, k), "value": f.bytes(v)}));
        it.next();
    }
    it.status()?;
    o.json(json!({
        "file": path.display().to_string(),
        "properties": {
            "entries": p.entries, "deletions": p.deletions, "data_blocks": p.data_block_count,
            "raw_key_bytes": p.raw_key_bytes, "raw_value_bytes": p.raw_value_bytes,
            "seq_min": p.seq_min, "seq_max": p.seq_max, "file_size_bytes": p.file_size_bytes,
            "index_size_bytes": p.index_size_bytes, "filter_size_bytes": p.filter_size_bytes,
            "smallest": if p.entries > 0 { ikey_json(f, &p.smallest) } else { Value::Null },
            "largest": if p.entries > 0 { ikey_json(f, &p.largest) } else { Value::Null },
        },
        "index": blocks.iter().map(|b| json!({
            "separator": ikey_json(f, &b.separator), "offset": b.handle.offset, "size": b.handle.size,
            "compression": b.compression.name(), "raw_size": b.raw_size_bytes,
        })).collect::<Vec<_>>(),
        "entries": entries,
    }));
    Ok(())
}

// ----------------------------------------------------------------------- pm

fn node_lines(n: &Node, depth: usize, o: &mut Output) {
    let mut s = format!("{}{}", "  ".repeat(depth), n.name);
    if let Some(off) = n.offset {
        s.push_str(&format!(" @{off:#x}"));
    }
    for (k, v) in &n.fields {
        s.push_str(&format!("  {k}={v}"));
    }
    o.line(&s);
    for c in &n.children {
        node_lines(c, depth + 1, o);
    }
}

fn node_json(n: &Node) -> Value {
    let mut fields = Map::new();
    for (k, v) in &n.fields {
        fields.insert(
            k.clone(),
            match v {
                inspect::Field::Num(x) => json!(x),
                inspect::Field::Text(t) => json!(t),
                inspect::Field::Bool(b) => json!(b),
            },
        );
    }
    json!({
        "name": n.name,
        "offset": n.offset,
        "fields": fields,
        "children": n.children.iter().map(node_json).collect::<Vec<_>>(),
    })
}

fn pm_region(g: &Global) -> Res<Arc<dyn PmRegion>> {
    let p = g.pm_dir.as_deref().ok_or_else(|| {
        Failure("the PM region is in the PM directory: give --pm-dir (or TIERKV_PM_DIR)".into())
    })?;
    Ok(inspect::open_pm(p)?)
}

/// `tierkv pm`.
pub fn pm(g: &Global, o: &mut Output) -> Res<()> {
    let d = inspect::read_manifest(&PosixFs::new(), g.db_dir()?)?;
    let design = design_of(g, &d.state)?;
    let region = pm_region(g)?;
    let root = inspect::describe_pm(&region, &d.state, design)?;
    node_lines(&root, 0, o);
    o.json(node_json(&root));
    Ok(())
}

// ------------------------------------------------------------------- verify

/// `tierkv verify`.
pub fn verify(g: &Global, o: &mut Output) -> Res<()> {
    let dir = g.db_dir()?;
    let fs = PosixFs::new();
    let mut checks: Vec<Check> = Vec::new();
    let d = match inspect::read_manifest(&fs, dir) {
        Ok(d) => {
            checks.push(Check::new(
                format!(
                    "CURRENT and {} ({} records)",
                    d.path.display(),
                    d.records.len()
                ),
                Ok(()),
            ));
            Some(d)
        }
        Err(e) => {
            checks.push(Check::new("CURRENT and the MANIFEST", Err(e)));
            None
        }
    };
    if let Some(d) = &d {
        // Tables the manifest lists.
        let mut listed = std::collections::HashSet::new();
        for (_, level, t) in d.state.tables() {
            if t.tier != tierkv::stats::Tier::Ssd {
                continue;
            }
            listed.insert(t.id);
            let path = dir.join(sst_file_name(t.id));
            let r = fs
                .open(&path)
                .and_then(|file| Table::open(file, t.id, None, ReadConfig::default()))
                .and_then(|table| table.verify())
                .map(|_| ());
            checks.push(Check::new(format!("L{level} {}", path.display()), r));
        }
        // SST files the manifest does not list (left by a crash; the next
        // open removes them) are checked too.
        for n in fs.list(dir)? {
            let Some(id) = n.strip_suffix(".sst").and_then(|s| s.parse::<u64>().ok()) else {
                continue;
            };
            if listed.contains(&id) {
                continue;
            }
            let path = dir.join(&n);
            let r = fs
                .open(&path)
                .and_then(|file| Table::open(file, id, None, ReadConfig::default()))
                .and_then(|table| table.verify())
                .map(|_| ());
            checks.push(Check::new(
                format!("{} (not in the MANIFEST)", path.display()),
                r,
            ));
        }
        // WAL files: every record (a torn tail is what a crash leaves, not damage).
        for (n, path) in wal_files(&fs, dir)? {
            let r = fs.read_all(&path).and_then(|bytes| {
                let mut r = wal::Reader::new(FileLog::new(path.display().to_string(), bytes), n);
                while r.next_record()?.is_some() {}
                Ok(())
            });
            checks.push(Check::new(format!("WAL {}", path.display()), r));
        }
        // After a clean close no log may have changed: CLOSED records
        // their lengths, and a torn tail is damage then (the next open
        // refuses it too).
        if let Some(r) = inspect::check_closed(&fs, dir, d) {
            checks.push(Check::new(
                format!("{} (a clean close)", dir.join("CLOSED").display()),
                r,
            ));
        }
        // The PM region.
        let needs_pm = d
            .state
            .tables()
            .any(|(_, _, t)| t.tier == tierkv::stats::Tier::Pm)
            || !d.state.pm_wals.is_empty();
        if needs_pm || g.pm_dir.is_some() {
            match (pm_region(g), design_of(g, &d.state)) {
                (Ok(region), Ok(design)) => {
                    checks.extend(inspect::verify_pm(&region, &d.state, design))
                }
                (Err(Failure(m)), _) | (_, Err(Failure(m))) => checks.push(Check::new(
                    "the PM region",
                    Err(tierkv::Error::InvalidArgument(format!("not checked: {m}"))),
                )),
            }
        }
    }
    let mut first: Option<String> = None;
    let mut rows = Vec::new();
    for c in &checks {
        match &c.result {
            Ok(()) => o.line(&format!("ok       {}", c.what)),
            Err(e) => {
                o.line(&format!("DAMAGED  {}: {e}", c.what));
                first.get_or_insert_with(|| format!("{}: {e}", c.what));
            }
        }
        rows.push(json!({"what": c.what, "ok": c.result.is_ok(), "error": c.result.as_ref().err().map(|e| e.to_string())}));
    }
    o.json(json!({"ok": first.is_none(), "checks": rows, "first_damage": first}));
    match first {
        None => {
            o.line(&format!("verify: {} checks, no damage", checks.len()));
            Ok(())
        }
        Some(m) => Err(Failure(format!("damage found: {m}"))),
    }
}
