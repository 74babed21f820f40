//! `tierkv`: read, write, dump and verify a tierkv database from the shell
//! (RocksDB's `ldb` and `sst_dump` in one tool).
//!
//! ```text
//! tierkv --db DIR [--pm-dir DIR] [--design NAME] [--json] [--hex] COMMAND
//!   get KEY | put KEY VALUE | delete KEY
//!   scan [--from K] [--to K] [--prefix P] [--reverse] [--limit N] [--keys-only]
//!   stats | compact [--from K] [--to K] | checkpoint DIR [--checkpoint-pm-dir DIR]
//!   manifest | wal [--full] | sst FILE|ID [--limit N] | pm | verify
//!   repair | migrate --to NAME [--to-pm-dir DIR]
//! ```
//!
//! The design is read from the MANIFEST (its identity record, or for older
//! databases inferred from its tables: `tierkv::inspect::infer_design`); a
//! database with a PM tier needs its PM directory (`--pm-dir` or
//! `TIERKV_PM_DIR`): the database keeps no options file, and a PM
//! directory (a /dev/shm path, a DAX mount) is where the region is mapped
//! on this machine rather than a property of the data.
//!
//! `get`, `put`, `delete`, `scan`, `stats`, `compact` and `checkpoint` open
//! the database (recovering it as any open does, and taking its lock);
//! `manifest`, `wal`, `sst`, `pm` and `verify` only read its files and PM
//! region. `repair` rebuilds a database whose MANIFEST is damaged or lost
//! (`Db::repair`; the design from `--design` when the MANIFEST cannot tell
//! it). `migrate` moves a database to a design that cannot open it as it is
//! (its data in another PM layout: `Db::migrate`). Output is for people by default, JSON with `--json`. Exit status: 0
//! done, 1 failure (or a key not found, or damage found), 2 bad usage.

#![warn(clippy::unwrap_used)]

mod dump;
mod out;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde_json::json;
use tierkv::{CheckpointOptions, Db, Preset, RepairReport, WriteBatch, WriteOptions};

use out::{Fmt, Output};

/// Read, write, dump and verify a tierkv database.
#[derive(Parser, Debug)]
#[command(name = "tierkv", version, about)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    cmd: Cmd,
}

/// Options of every command.
#[derive(Args, Debug, Clone)]
pub struct Global {
    /// The database directory.
    #[arg(long, env = "TIERKV_DB", global = true)]
    db: Option<PathBuf>,
    /// The PM directory of a database with a PM tier (holds `pm.region`).
    #[arg(long = "pm-dir", env = "TIERKV_PM_DIR", global = true)]
    pm_dir: Option<PathBuf>,
    /// The design, when the MANIFEST cannot tell it (databases older than
    /// its identity record): classic, matrix, triangle, vlsm, ...
    #[arg(long, global = true, value_parser = parse_design)]
    design: Option<Preset>,
    /// JSON output, for scripts.
    #[arg(long, global = true)]
    json: bool,
    /// Keys and values in hexadecimal, on the command line and in output.
    #[arg(long, global = true)]
    hex: bool,
    /// The PM region's size in bytes when `put` creates a database with a
    /// PM tier (an existing region keeps its size).
    #[arg(long = "pm-size", global = true, default_value_t = 64 << 20)]
    pm_size: u64,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Print the value of KEY (exit status 1 if there is none).
    Get {
        /// The key.
        key: String,
    },
    /// Set KEY to VALUE (a synced write); creates the database if --db
    /// holds none (with --design, default classic, and --pm-dir/--pm-size).
    Put {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Delete KEY (a synced write).
    Delete {
        /// The key.
        key: String,
    },
    /// List keys and values in order: a range [--from, --to) or a prefix.
    Scan(ScanArgs),
    /// Print the database's statistics (the `tierkv.stats` property) and its level shape.
    Stats,
    /// Dump the MANIFEST: every record's edits, then the state they describe.
    Manifest,
    /// Dump the records of every WAL (SSD files, and PM WALs with --pm-dir).
    Wal {
        /// Print whole values (text output cuts them at 32 bytes).
        #[arg(long)]
        full: bool,
    },
    /// Dump an SST: properties, index, data blocks and entries.
    Sst {
        /// The file, or a table id in --db.
        table: String,
        /// Print at most N entries (default: all).
        #[arg(long)]
        limit: Option<usize>,
        /// Print whole values (text output cuts them at 32 bytes).
        #[arg(long)]
        full: bool,
    },
    /// Dump the PM region: allocator, PM WAL extents, the design's structures.
    Pm,
    /// Check every checksum of every file and PM structure; exit status 1
    /// naming the first damage.
    Verify,
    /// Compact a key range (default: everything) down the levels.
    Compact {
        /// First key (inclusive).
        #[arg(long)]
        from: Option<String>,
        /// Last key (inclusive).
        #[arg(long)]
        to: Option<String>,
    },
    /// Make a consistent copy of the database in DIR (hard-linked SSTs).
    Checkpoint {
        /// The copy's directory (absent or empty).
        dir: PathBuf,
        /// The copy's PM directory (databases with a PM tier).
        #[arg(long = "checkpoint-pm-dir")]
        checkpoint_pm_dir: Option<PathBuf>,
        /// Do not flush the memtables first (the copy then holds the WALs).
        #[arg(long)]
        no_flush: bool,
    },
    /// Rebuild a database whose MANIFEST is damaged or lost from the tables
    /// and logs found, and the PM tier's WALs and design structures
    /// (Db::repair); the files read are kept in DIR/lost/; prints what was
    /// recovered and what could not be. Without a readable MANIFEST, give
    /// --design (the database is rebuilt with one region).
    Repair,
    /// Move the database to design --to when that design cannot open it as
    /// it is (its data sits in another PM layout): flush, compact its PM
    /// data down to SSD under its own design, then switch (Db::migrate;
    /// crash-safe: a crash leaves either design's database, whole). Needs
    /// nothing for a switch that opens as is (an SSD-only database to a PM
    /// design opens with an empty PM tier).
    Migrate {
        /// The design to move to.
        #[arg(long, value_parser = parse_design)]
        to: Preset,
        /// The new design's PM directory, if it keeps data in PM (default:
        /// --pm-dir, the database's own).
        #[arg(long = "to-pm-dir")]
        to_pm_dir: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
struct ScanArgs {
    /// First key (inclusive).
    #[arg(long, conflicts_with = "prefix")]
    from: Option<String>,
    /// End key (exclusive).
    #[arg(long, conflicts_with = "prefix")]
    to: Option<String>,
    /// Only keys starting with this.
    #[arg(long)]
    prefix: Option<String>,
    /// Largest key first.
    #[arg(long)]
    reverse: bool,
    /// At most N entries.
    #[arg(long)]
    limit: Option<usize>,
    /// Print keys only.
    #[arg(long)]
    keys_only: bool,
}

fn parse_design(s: &str) -> Result<Preset, String> {
    Preset::from_name(s).ok_or_else(|| {
        let all: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
        format!("unknown design `{s}` (one of {})", all.join(", "))
    })
}

/// A failure to report: the message, and whether it is "not found" /
/// "damage found" rather than an error.
#[derive(Debug)]
pub struct Failure(pub String);

impl From<tierkv::Error> for Failure {
    fn from(e: tierkv::Error) -> Self {
        Failure(e.to_string())
    }
}

type Res<T> = Result<T, Failure>;

impl Global {
    fn fmt(&self) -> Fmt {
        Fmt { hex: self.hex }
    }

    fn db_dir(&self) -> Res<&Path> {
        self.db
            .as_deref()
            .ok_or_else(|| Failure("no database: give --db DIR (or TIERKV_DB)".into()))
    }

    /// A key or value from the command line (hex with `--hex`).
    fn bytes(&self, s: &str) -> Res<Vec<u8>> {
        if !self.hex {
            return Ok(s.as_bytes().to_vec());
        }
        let s = s.strip_prefix("0x").unwrap_or(s);
        if !s.len().is_multiple_of(2) {
            return Err(Failure(format!("`{s}` is not hexadecimal (odd length)")));
        }
        (0..s.len())
            .step_by(2)
            .map(|i| {
                u8::from_str_radix(&s[i..i + 2], 16)
                    .map_err(|_| Failure(format!("`{s}` is not hexadecimal")))
            })
            .collect()
    }

    /// Opens the database with the options its MANIFEST implies.
    fn open(&self, o: &mut Output) -> Res<Db> {
        let dir = self.db_dir()?;
        let (opts, inference) =
            tierkv::inspect::options_for(dir, self.pm_dir.as_deref(), self.design)?;
        if !inference.how.starts_with("recorded") {
            o.note(&format!("design {} ({})", opts.design, inference.how));
        }
        Ok(Db::open(dir, opts)?)
    }

    /// Opens the database, or creates it when `--db` holds none: with
    /// `--design` (default classic), and a PM tier of `--pm-size` bytes in
    /// `--pm-dir` if given.
    fn open_or_create(&self, o: &mut Output) -> Res<Db> {
        let dir = self.db_dir()?;
        if dir.join("CURRENT").exists() {
            return self.open(o);
        }
        let design = self.design.unwrap_or(Preset::Classic);
        let mut opts = tierkv::Options::for_design(design);
        if let Some(p) = &self.pm_dir {
            opts.pm_dir = Some(p.clone());
            opts.pm_size_bytes = self.pm_size;
            // As `open` will size them (`inspect::options_for`).
            tierkv::inspect::fit_memtables_to_pm(&mut opts);
        }
        o.note(&format!(
            "creating a `{design}` database in {}",
            dir.display()
        ));
        Ok(Db::open(dir, opts)?)
    }
}

fn run(cli: &Cli, o: &mut Output) -> Res<()> {
    let g = &cli.global;
    let f = g.fmt();
    match &cli.cmd {
        Cmd::Get { key } => {
            let db = g.open(o)?;
            let k = g.bytes(key)?;
            let v = db.get(&k)?;
            db.close()?;
            o.json(json!({ "key": f.bytes(&k), "found": v.is_some(), "value": v.as_deref().map(|v| f.bytes(v)) }));
            match v {
                Some(v) => {
                    o.line(&f.bytes(&v));
                    Ok(())
                }
                None => Err(Failure(format!("not found: {}", f.bytes(&k)))),
            }
        }
        Cmd::Put { key, value } => {
            let db = g.open_or_create(o)?;
            let (k, v) = (g.bytes(key)?, g.bytes(value)?);
            let mut b = WriteBatch::new();
            b.put(&k, &v);
            db.write(b, &WriteOptions { sync: true })?;
            db.close()?;
            o.json(json!({ "ok": true, "key": f.bytes(&k) }));
            o.line("OK");
            Ok(())
        }
        Cmd::Delete { key } => {
            let db = g.open(o)?;
            let k = g.bytes(key)?;
            let mut b = WriteBatch::new();
            b.delete(&k);
            db.write(b, &WriteOptions { sync: true })?;
            db.close()?;
            o.json(json!({ "ok": true, "key": f.bytes(&k) }));
            o.line("OK");
            Ok(())
        }
        Cmd::Scan(a) => scan(g, a, o),
        Cmd::Stats => {
            let db = g.open(o)?;
            dump::stats(&db, o);
            db.close()?;
            Ok(())
        }
        Cmd::Manifest => dump::manifest(g.db_dir()?, f, o),
        Cmd::Wal { full } => dump::wal(g, *full, o),
        Cmd::Sst { table, limit, full } => dump::sst(g, table, *limit, *full, o),
        Cmd::Pm => dump::pm(g, o),
        Cmd::Verify => dump::verify(g, o),
        Cmd::Compact { from, to } => {
            let db = g.open(o)?;
            let from = from.as_deref().map(|s| g.bytes(s)).transpose()?;
            let to = to.as_deref().map(|s| g.bytes(s)).transpose()?;
            db.compact_range(from.as_deref(), to.as_deref())?;
            let levels = db.property("tierkv.levels").unwrap_or_default();
            o.json(json!({ "ok": true, "levels": dump::levels_json(&db) }));
            o.line("compacted; levels now:");
            o.text(&levels);
            db.close()?;
            Ok(())
        }
        Cmd::Checkpoint {
            dir,
            checkpoint_pm_dir,
            no_flush,
        } => {
            let db = g.open(o)?;
            let s = db.checkpoint_with(
                dir,
                &CheckpointOptions {
                    flush: !no_flush,
                    pm_dir: checkpoint_pm_dir.clone(),
                    ..CheckpointOptions::default()
                },
            )?;
            db.close()?;
            o.json(json!({
                "dir": dir.display().to_string(),
                "pm_dir": checkpoint_pm_dir.as_ref().map(|p| p.display().to_string()),
                "ssts_linked": s.ssts_linked,
                "ssts_copied": s.ssts_copied,
                "wal_bytes": s.wal_bytes,
                "pm_bytes": s.pm_bytes,
                "last_seqno": s.last_seqno,
            }));
            o.line(&format!(
                "checkpoint in {}: {} SSTs linked, {} copied, {} WAL bytes, {} PM bytes, last seqno {}",
                dir.display(),
                s.ssts_linked,
                s.ssts_copied,
                s.wal_bytes,
                s.pm_bytes,
                s.last_seqno
            ));
            Ok(())
        }
        Cmd::Migrate { to, to_pm_dir } => {
            let dir = g.db_dir()?;
            let (from, inference) =
                tierkv::inspect::options_for(dir, g.pm_dir.as_deref(), g.design)?;
            if !inference.how.starts_with("recorded") {
                o.note(&format!("design {} ({})", from.design, inference.how));
            }
            let mut target = tierkv::Options::for_design(*to);
            target.level_count = from.level_count;
            target.regions = from.regions;
            target.region_boundaries = from.region_boundaries.clone();
            if to.needs_pm() {
                let pm = to_pm_dir.clone().or_else(|| g.pm_dir.clone()).ok_or_else(|| {
                    tierkv::Error::InvalidOptions(format!(
                        "design `{to}` keeps data in PM: give its PM directory (--to-pm-dir or --pm-dir)"
                    ))
                })?;
                target.pm_size_bytes = match std::fs::metadata(pm.join("pm.region")) {
                    Ok(m) => m.len(),
                    Err(_) => g.pm_size,
                };
                target.pm_dir = Some(pm);
                // As `inspect::options_for` sizes them.
                tierkv::inspect::fit_memtables_to_pm(&mut target);
            }
            let r = Db::migrate(dir, from, target)?;
            o.json(json!({
                "from": r.from.map(|p| p.name()),
                "to": r.to.map(|p| p.name()),
                "moved_pm_data": r.moved_pm_data,
                "ssd_bytes": r.ssd_bytes,
            }));
            o.line(&format!(
                "{}: {} -> {}{}; {} bytes of SSTs",
                dir.display(),
                r.from.map_or("?", |p| p.name()),
                r.to.map_or("?", |p| p.name()),
                if r.moved_pm_data {
                    ", its PM data moved to SSD"
                } else {
                    " (opened as it was)"
                },
                r.ssd_bytes
            ));
            Ok(())
        }
        Cmd::Repair => {
            let dir = g.db_dir()?;
            let (opts, inference) =
                tierkv::inspect::options_for_repair(dir, g.pm_dir.as_deref(), g.design)?;
            if !inference.how.starts_with("recorded") {
                o.note(&format!("design {} ({})", opts.design, inference.how));
            }
            let report = Db::repair(dir, opts)?;
            o.json(repair_json(&report));
            o.text(&report.to_string());
            Ok(())
        }
    }
}

/// The JSON document of `repair`.
fn repair_json(r: &RepairReport) -> serde_json::Value {
    let sources: Vec<_> = r
        .sources
        .iter()
        .map(|s| {
            json!({
                "kind": s.kind.name(),
                "name": s.name,
                "entries": s.entries,
                "complete": s.complete,
            })
        })
        .collect();
    json!({
        "complete": r.is_complete(),
        "sources": sources,
        "problems": r.problems,
        "entries_read": r.entries_read,
        "keys_written": r.keys_written,
        "tables_written": r.tables_written,
        "bytes_written": r.bytes_written,
        "last_seqno": r.last_seqno,
        "manifest_number": r.manifest_number,
        "kept_in_lost": r.kept_in_lost,
    })
}

fn scan(g: &Global, a: &ScanArgs, o: &mut Output) -> Res<()> {
    let f = g.fmt();
    let db = g.open(o)?;
    let range = match &a.prefix {
        Some(p) => db.prefix(g.bytes(p)?),
        None => {
            use std::ops::Bound;
            let lo = match &a.from {
                Some(k) => Bound::Included(g.bytes(k)?),
                None => Bound::Unbounded,
            };
            let hi = match &a.to {
                Some(k) => Bound::Excluded(g.bytes(k)?),
                None => Bound::Unbounded,
            };
            db.range((lo, hi))
        }
    };
    type Entries<'a> = Box<dyn Iterator<Item = tierkv::Result<(Vec<u8>, Vec<u8>)>> + 'a>;
    let items: Entries<'_> = if a.reverse {
        Box::new(range.rev())
    } else {
        Box::new(range)
    };
    let mut rows = Vec::new();
    let mut n = 0usize;
    for kv in items.take(a.limit.unwrap_or(usize::MAX)) {
        let (k, v) = kv?;
        n += 1;
        if a.keys_only {
            o.line(&f.bytes(&k));
            rows.push(json!({ "key": f.bytes(&k) }));
        } else {
            o.line(&format!("{} => {}", f.bytes(&k), f.bytes(&v)));
            rows.push(json!({ "key": f.bytes(&k), "value": f.bytes(&v) }));
        }
    }
    o.json(json!(rows));
    o.note(&format!("{n} entries"));
    db.close()?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Output::new(cli.global.json);
    let r = run(&cli, &mut o);
    o.finish();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(m)) => {
            eprintln!("tierkv: {m}");
            ExitCode::FAILURE
        }
    }
}
