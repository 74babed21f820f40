//! The `tierkv` tool run as a process (the built binary,
//! `CARGO_BIN_EXE_tierkv`): every command on a `classic` database it
//! creates and on a `triangle` database with a PM tier, text and JSON
//! output, exit statuses, and `verify` naming the first damage.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tierkv::{Db, Options, Preset};

fn tierkv(db: &Path, pm: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tierkv"));
    c.env_remove("TIERKV_DB").env_remove("TIERKV_PM_DIR");
    c.arg("--db").arg(db);
    if let Some(p) = pm {
        c.arg("--pm-dir").arg(p);
    }
    c.args(args).output().expect("run tierkv")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn failed(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(1),
        "stdout: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&ok(o).into_bytes()).expect("JSON output")
}

#[test]
fn classic_database_round_trip_through_the_tool() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    for (k, v) in [
        ("apple", "red"),
        ("banana", "yellow"),
        ("cherry", "dark red"),
        ("date", "brown"),
    ] {
        assert_eq!(ok(&tierkv(&db, None, &["put", k, v])), "OK\n");
    }
    assert_eq!(ok(&tierkv(&db, None, &["delete", "banana"])), "OK\n");
    assert_eq!(ok(&tierkv(&db, None, &["get", "cherry"])), "dark red\n");
    let e = failed(&tierkv(&db, None, &["get", "banana"]));
    assert!(e.contains("not found: banana"), "{e}");
    let g = tierkv(&db, None, &["--json", "get", "banana"]);
    assert_eq!(g.status.code(), Some(1));
    let g: Value = serde_json::from_slice(&g.stdout).unwrap();
    assert_eq!(g["found"], false);

    // scan: range, prefix, reverse, limit, keys only, hex, JSON.
    assert_eq!(
        ok(&tierkv(&db, None, &["scan"])),
        "apple => red\ncherry => dark red\ndate => brown\n"
    );
    assert_eq!(
        ok(&tierkv(&db, None, &["scan", "--from", "b", "--to", "d"])),
        "cherry => dark red\n"
    );
    assert_eq!(
        ok(&tierkv(
            &db,
            None,
            &["scan", "--reverse", "--limit", "2", "--keys-only"]
        )),
        "date\ncherry\n"
    );
    assert_eq!(
        ok(&tierkv(&db, None, &["scan", "--prefix", "da"])),
        "date => brown\n"
    );
    assert_eq!(
        ok(&tierkv(&db, None, &["--hex", "scan", "--prefix", "6170"])),
        "6170706c65 => 726564\n"
    );
    ok(&tierkv(&db, None, &["--hex", "put", "00ff", "0102"]));
    assert_eq!(
        ok(&tierkv(&db, None, &["--hex", "get", "0x00ff"])),
        "0102\n"
    );
    let s = json(&tierkv(&db, None, &["--json", "scan", "--limit", "1"]));
    assert_eq!(s[0]["key"], "\\x00\\xff");
    assert_eq!(s[0]["value"], "\\x01\\x02");

    // stats, compact, manifest, wal, sst.
    let st = ok(&tierkv(&db, None, &["stats"]));
    assert!(
        st.contains("design classic") && st.contains("** Levels **"),
        "{st}"
    );
    let st = json(&tierkv(&db, None, &["--json", "stats"]));
    assert_eq!(st["design"], "classic");
    let c = ok(&tierkv(&db, None, &["compact"]));
    assert!(c.contains("L6: 1 tables"), "{c}");
    let m = ok(&tierkv(&db, None, &["manifest"]));
    assert!(
        m.contains("design classic (recorded in the MANIFEST)"),
        "{m}"
    );
    assert!(
        m.contains("identity: design classic") && m.contains("L6: 1 tables"),
        "{m}"
    );
    let mj = json(&tierkv(&db, None, &["--json", "manifest"]));
    let l6 = &mj["state"]["regions"][0]["levels"][6];
    assert_eq!(l6.as_array().map(Vec::len), Some(1));
    let id = l6[0]["id"].as_u64().unwrap();
    ok(&tierkv(&db, None, &["put", "elderberry", "black"]));
    let w = ok(&tierkv(&db, None, &["wal"]));
    assert!(w.contains("put elderberry = black"), "{w}");
    let sst = ok(&tierkv(&db, None, &["sst", &id.to_string()]));
    assert!(
        sst.contains("properties: 4 entries") && sst.contains("cherry@"),
        "{sst}"
    );
    assert!(
        sst.contains("=> dark red") && sst.contains("(none, "),
        "{sst}"
    );
    let path = db.join(format!("{id:06}.sst"));
    let sj = json(&tierkv(
        &db,
        None,
        &["--json", "sst", path.to_str().unwrap(), "--limit", "2"],
    ));
    assert_eq!(sj["properties"]["entries"], 4);
    assert_eq!(sj["entries"].as_array().map(Vec::len), Some(2));

    // checkpoint, then the copy through the tool.
    let copy = tmp.path().join("copy");
    let c = ok(&tierkv(&db, None, &["checkpoint", copy.to_str().unwrap()]));
    assert!(c.contains("SSTs linked, 0 copied"), "{c}");
    assert_eq!(ok(&tierkv(&copy, None, &["get", "elderberry"])), "black\n");

    // verify: clean, then a flipped byte in the SST.
    let v = ok(&tierkv(&db, None, &["verify"]));
    assert!(
        v.contains("no damage") && v.contains(&format!("{id:06}.sst")),
        "{v}"
    );
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[10] ^= 0x40;
    // The copy shares the inode: write a new file in its place.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, bytes).unwrap();
    let o = tierkv(&db, None, &["verify"]);
    let e = failed(&o);
    assert!(
        e.contains("damage found") && e.contains(&format!("{id:06}.sst")) && e.contains("offset 0"),
        "{e}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("DAMAGED"));
    let vj = tierkv(&db, None, &["--json", "verify"]);
    assert_eq!(vj.status.code(), Some(1));
    let vj: Value = serde_json::from_slice(&vj.stdout).unwrap();
    assert_eq!(vj["ok"], false);
    // The copy kept the good table.
    assert!(ok(&tierkv(&copy, None, &["verify"])).contains("no damage"));
}

/// A triangle database as the benchmark leaves it: rows in PM, WAL in PM.
fn triangle_db(tmp: &Path) -> (PathBuf, PathBuf) {
    let (db, pm) = (tmp.join("db"), tmp.join("pm"));
    let d = Db::open(
        &db,
        Options {
            pm_dir: Some(pm.clone()),
            pm_size_bytes: 16 << 20,
            memtable_size_bytes: 1 << 20,
            sst_size_bytes: 1 << 20,
            ..Options::for_design(Preset::Triangle)
        },
    )
    .unwrap();
    // Out of order, so that flushes go to the container (a memtable that
    // overlaps nothing would bypass it to L1).
    for i in 0..6000u32 {
        let k = (i * 7919) % 6000;
        d.put(format!("key{k:06}").as_bytes(), &[b'v'; 512])
            .unwrap();
    }
    d.close().unwrap();
    (db, pm)
}

#[test]
fn triangle_database_pm_dump_and_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, pm) = triangle_db(tmp.path());
    // A PM database needs its PM directory, and says so.
    let e = failed(&tierkv(&db, None, &["get", "key000001"]));
    assert!(e.contains("--pm-dir") && e.contains("triangle"), "{e}");
    assert_eq!(
        ok(&tierkv(&db, Some(&pm), &["get", "key000001"])),
        format!("{}\n", "v".repeat(512))
    );
    let p = ok(&tierkv(&db, Some(&pm), &["pm"]));
    assert!(p.contains("page allocator") && p.contains("PM WAL"), "{p}");
    assert!(
        p.contains("PM container rows") && p.contains("row #"),
        "{p}"
    );
    assert!(p.contains("first_key=key"), "{p}");
    let pj = json(&tierkv(&db, Some(&pm), &["--json", "pm"]));
    assert_eq!(pj["fields"]["design"], "triangle");
    let rows = pj["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("PM container"))
        })
        .unwrap()["children"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!rows.is_empty());
    let v = ok(&tierkv(&db, Some(&pm), &["verify"]));
    assert!(
        v.contains("ok       row #") && v.contains("PM allocator superblock"),
        "{v}"
    );
    // Without the PM directory, verify cannot check everything: it fails.
    let e = failed(&tierkv(&db, None, &["verify"]));
    assert!(e.contains("--pm-dir"), "{e}");
    // A flipped byte in a row's metadata: verify names the region and the
    // row's offset.
    let meta = rows[0]["offset"].as_u64().unwrap();
    let region = pm.join("pm.region");
    let mut bytes = std::fs::read(&region).unwrap();
    bytes[meta as usize + 200] ^= 0x01;
    std::fs::write(&region, bytes).unwrap();
    let e = failed(&tierkv(&db, Some(&pm), &["verify"]));
    assert!(
        e.contains("damage found")
            && e.contains("pm.region")
            && e.contains(&format!("offset {}", meta + 64)),
        "{e}"
    );
    // A PM checkpoint through the tool, into its own PM directory.
    let copy = tmp.path().join("copy");
    let copy_pm = tmp.path().join("copy-pm");
    let (db2, pm2) = triangle_db(&tmp.path().join("second"));
    let c = ok(&tierkv(
        &db2,
        Some(&pm2),
        &[
            "checkpoint",
            copy.to_str().unwrap(),
            "--checkpoint-pm-dir",
            copy_pm.to_str().unwrap(),
        ],
    ));
    assert!(c.contains("PM bytes"), "{c}");
    assert!(ok(&tierkv(&copy, Some(&copy_pm), &["verify"])).contains("no damage"));
    assert_eq!(
        ok(&tierkv(&copy, Some(&copy_pm), &["scan", "--prefix", "key00599", "--keys-only"])),
        "key005990\nkey005991\nkey005992\nkey005993\nkey005994\nkey005995\nkey005996\nkey005997\nkey005998\nkey005999\n"
    );
}

#[test]
fn usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("none");
    let e = failed(&tierkv(&db, None, &["get", "k"]));
    assert!(e.contains("no CURRENT"), "{e}");
    let o = Command::new(env!("CARGO_BIN_EXE_tierkv"))
        .args(["--design", "nope", "get", "k"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown design"));
    let o = Command::new(env!("CARGO_BIN_EXE_tierkv"))
        .env_remove("TIERKV_DB")
        .args(["manifest"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("--db"));
    let e = failed(&tierkv(&db, None, &["--hex", "put", "xyz", "00"]));
    assert!(e.contains("not hexadecimal"), "{e}");
}

/// A file of `dir` whose name passes `pick`.
fn file_where(dir: &Path, pick: impl Fn(&str) -> bool) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| pick(&n.to_string_lossy())))
        .unwrap_or_else(|| panic!("no such file in {}", dir.display()))
}

/// The file of `dir` whose name starts with `prefix`.
fn file_starting(dir: &Path, prefix: &str) -> PathBuf {
    file_where(dir, |n| n.starts_with(prefix))
}

/// A classic database closed cleanly: 500 keys in a table, one in the WAL.
fn classic_db_with_a_wal(tmp: &Path) -> PathBuf {
    let db = tmp.join("db");
    let d = Db::open(&db, Options::default()).unwrap();
    for i in 0..500u32 {
        d.put(format!("k{i:04}").as_bytes(), b"v").unwrap();
    }
    d.flush().unwrap();
    d.put(b"in-the-wal", b"w").unwrap();
    d.close().unwrap();
    db
}

#[test]
fn verify_checks_what_a_clean_close_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let db = classic_db_with_a_wal(tmp.path());
    // CLOSED records the WAL's length: a WAL cut short by one byte (at a
    // record boundary or not) is damage, as the next open finds too.
    let v = ok(&tierkv(&db, None, &["verify"]));
    assert!(v.contains("CLOSED (a clean close)"), "{v}");
    let wal = file_where(&db, |n| n.ends_with(".log"));
    let whole = std::fs::read(&wal).unwrap();
    std::fs::write(&wal, &whole[..whole.len() - 1]).unwrap();
    let e = failed(&tierkv(&db, None, &["verify"]));
    assert!(e.contains("damage found") && e.contains(".log"), "{e}");
    let e = failed(&tierkv(&db, None, &["get", "in-the-wal"]));
    assert!(e.contains(".log") && e.contains("CLOSED"), "{e}");
    // Whole again: both agree (the failed open changed nothing, CLOSED
    // included).
    std::fs::write(&wal, &whole).unwrap();
    let v = ok(&tierkv(&db, None, &["verify"]));
    assert!(
        v.contains("no damage") && v.contains("CLOSED (a clean close)"),
        "{v}"
    );
    assert_eq!(ok(&tierkv(&db, None, &["get", "in-the-wal"])), "w\n");
}

#[test]
fn repair_rebuilds_a_classic_database_whose_manifest_is_damaged() {
    let tmp = tempfile::tempdir().unwrap();
    let db = classic_db_with_a_wal(tmp.path());
    // A flipped byte in the middle of the MANIFEST: corruption naming it.
    let manifest = file_starting(&db, "MANIFEST-");
    let mut bytes = std::fs::read(&manifest).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&manifest, bytes).unwrap();
    let e = failed(&tierkv(&db, None, &["get", "k0123"]));
    assert!(e.contains("MANIFEST-"), "{e}");
    // The MANIFEST cannot tell the design any more: the tool asks for it.
    let e = failed(&tierkv(&db, None, &["repair"]));
    assert!(e.contains("give the design"), "{e}");

    let r = ok(&tierkv(&db, None, &["--design", "classic", "repair"]));
    assert!(
        r.starts_with("repair: 2 sources, 501 entries read, 501 keys written into 1 tables"),
        "{r}"
    );
    assert!(
        r.contains("  table 0000") && r.contains("  WAL 0000") && r.contains(": 1 entries"),
        "{r}"
    );
    assert!(r.contains("everything found was recovered"), "{r}");
    assert!(
        r.contains("kept in lost/: ") && r.contains("MANIFEST-"),
        "{r}"
    );
    // The damaged manifest is kept, not deleted.
    assert!(file_starting(&db.join("lost"), "MANIFEST-").exists());

    // The repaired database: every key, through the tool and the library.
    assert_eq!(ok(&tierkv(&db, None, &["get", "k0123"])), "v\n");
    assert_eq!(ok(&tierkv(&db, None, &["get", "in-the-wal"])), "w\n");
    assert!(ok(&tierkv(&db, None, &["verify"])).contains("no damage"));
    {
        let d = Db::open(&db, Options::default()).unwrap();
        assert_eq!(d.range::<&[u8], _>(..).count(), 501);
        d.close().unwrap();
    }

    // A damaged table: repair keeps what it could read, lists the damage,
    // and JSON says the repair was incomplete (the manifest is readable:
    // the design is read from it).
    let m = json(&tierkv(&db, None, &["--json", "manifest"]));
    let id = m["state"]["regions"][0]["levels"][6][0]["id"]
        .as_u64()
        .unwrap();
    let table = db.join(format!("{id:06}.sst"));
    let mut bytes = std::fs::read(&table).unwrap();
    bytes[100] ^= 0x01;
    std::fs::write(&table, bytes).unwrap();
    let r = json(&tierkv(&db, None, &["--json", "repair"]));
    assert_eq!(r["complete"], false, "{r}");
    assert_eq!(r["sources"][0]["kind"], "table", "{r}");
    assert_eq!(r["sources"][0]["complete"], false, "{r}");
    let problems = r["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.as_str().unwrap().contains(&format!("{id:06}.sst"))),
        "{r}"
    );
    assert!(r["kept_in_lost"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n == &format!("{id:06}.sst")));
    // The database opens with what could be read.
    assert!(ok(&tierkv(&db, None, &["verify"])).contains("no damage"));
}

#[test]
fn repair_rebuilds_a_triangle_database_from_its_pm_tier_and_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, pm) = triangle_db(tmp.path());
    // Lose the MANIFEST and CURRENT: the directory is no database any more.
    std::fs::remove_file(file_starting(&db, "MANIFEST-")).unwrap();
    std::fs::remove_file(db.join("CURRENT")).unwrap();
    let e = failed(&tierkv(&db, Some(&pm), &["get", "key000001"]));
    assert!(e.contains("CURRENT"), "{e}");

    let r = json(&tierkv(
        &db,
        Some(&pm),
        &["--json", "--design", "triangle", "repair"],
    ));
    let kinds: Vec<&str> = r["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"PM row"), "{r}");
    assert_eq!(r["keys_written"], 6000, "{r}");
    assert!(r["kept_in_lost"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n == "pm.region"));

    // Every key is back; the database is verified and opens as triangle
    // (the new MANIFEST records its design).
    let keys = ok(&tierkv(&db, Some(&pm), &["scan", "--keys-only"]));
    assert_eq!(keys.lines().count(), 6000);
    assert_eq!(
        ok(&tierkv(&db, Some(&pm), &["get", "key004321"])),
        format!("{}\n", "v".repeat(512))
    );
    let m = ok(&tierkv(&db, None, &["manifest"]));
    assert!(
        m.contains("design triangle (recorded in the MANIFEST)"),
        "{m}"
    );
    assert!(ok(&tierkv(&db, Some(&pm), &["verify"])).contains("no damage"));
}

/// A `triangle` database is refused by `classic` naming both designs;
/// `tierkv migrate --to classic` moves it, and it opens without a PM tier;
/// `migrate --to triangle` takes it back onto a PM directory.
#[test]
fn migrate_moves_a_pm_database_to_ssd_and_back() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, pm) = triangle_db(tmp.path());
    let e = failed(&tierkv(
        &db,
        Some(&pm),
        &["--design", "classic", "get", "key000042"],
    ));
    assert!(
        e.contains("`triangle`") && e.contains("`classic`") && e.contains("migrate"),
        "{e}"
    );
    let m = json(&tierkv(
        &db,
        Some(&pm),
        &["--json", "migrate", "--to", "classic"],
    ));
    assert_eq!(
        (m["from"].as_str(), m["to"].as_str()),
        (Some("triangle"), Some("classic"))
    );
    assert_eq!(m["moved_pm_data"], true);
    assert_eq!(
        ok(&tierkv(&db, None, &["--hex", "get", "6b6579303030303432"])).len(),
        1025
    );
    let pm2 = tmp.path().join("pm2");
    let m = json(&tierkv(
        &db,
        None,
        &[
            "--json",
            "--pm-size",
            "16777216",
            "migrate",
            "--to",
            "triangle",
            "--to-pm-dir",
            pm2.to_str().unwrap(),
        ],
    ));
    assert_eq!(m["moved_pm_data"], false);
    let n = ok(&tierkv(&db, Some(&pm2), &["scan", "--keys-only"]))
        .lines()
        .count();
    assert_eq!(n, 6000);
}

/// The first node (depth first) whose name starts with `prefix` and that
/// has the field `field`.
fn find_node<'a>(n: &'a Value, prefix: &str, field: &str) -> Option<&'a Value> {
    if n["name"].as_str().is_some_and(|s| s.starts_with(prefix)) && !n["fields"][field].is_null() {
        return Some(n);
    }
    n["children"]
        .as_array()?
        .iter()
        .find_map(|c| find_node(c, prefix, field))
}

/// `pm` and `verify` on the designs whose PM structures are their own
/// (RangeTabs, NVTables and their logs, skip lists and the buffers they
/// link into): a healthy database is described, verified without damage
/// and has no allocated page nothing owns; a flipped byte inside one of
/// the design's structures is damage naming the PM region.
#[test]
fn pm_and_verify_read_every_designs_own_structures() {
    // (design, the node holding a table, the field it has, where in it to
    // flip a byte, what the description must mention)
    let cases = [
        (
            Preset::RangeTab,
            "RangeTab ",
            "table",
            64 + 40,
            "RangeTab layout",
        ),
        (Preset::NvCache, "NVTable #", "entries", 64, "NVTable logs"),
        (
            Preset::Tlsm,
            "skip list #",
            "entries",
            20,
            "persistent skip lists",
        ),
    ];
    for (design, node, field, delta, mentions) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let (db, pm) = (tmp.path().join("db"), tmp.path().join("pm"));
        let d = Db::open(
            &db,
            Options {
                pm_dir: Some(pm.clone()),
                pm_size_bytes: 32 << 20,
                memtable_size_bytes: 1 << 20,
                sst_size_bytes: 1 << 20,
                ..Options::for_design(design)
            },
        )
        .unwrap();
        for i in 0..6000u32 {
            let k = (i * 7919) % 6000;
            d.put(format!("key{k:06}").as_bytes(), &[b'v'; 512])
                .unwrap();
        }
        d.close().unwrap();
        let p = ok(&tierkv(&db, Some(&pm), &["pm"]));
        assert!(p.contains(mentions), "{design}: {p}");
        let pj = json(&tierkv(&db, Some(&pm), &["--json", "pm"]));
        let alloc = find_node(&pj, "page allocator", "unowned_runs").unwrap();
        assert_eq!(
            alloc["fields"]["unowned_runs"], "",
            "{design}: allocated pages no structure owns: {p}"
        );
        let v = ok(&tierkv(&db, Some(&pm), &["verify"]));
        assert!(v.contains("no damage"), "{design}: {v}");
        let table = find_node(&pj, node, field)
            .unwrap_or_else(|| panic!("{design}: no {node} node with {field}: {p}"));
        let at = table["offset"].as_u64().unwrap() + delta;
        let region = pm.join("pm.region");
        let mut bytes = std::fs::read(&region).unwrap();
        bytes[at as usize] ^= 0x01;
        std::fs::write(&region, bytes).unwrap();
        let e = failed(&tierkv(&db, Some(&pm), &["verify"]));
        assert!(
            e.contains("damage found") && e.contains("pm.region"),
            "{design}: {e}"
        );
    }
}

/// `put` creates a database of every PM design with the default
/// `--pm-size` (memtables sized to the region, as `open` sizes them), and
/// the next commands open it.
#[test]
fn put_creates_every_pm_design_with_the_default_pm_size() {
    for design in ["triangle", "matrix", "rangetab", "nvcache", "tlsm"] {
        let tmp = tempfile::tempdir().unwrap();
        let (db, pm) = (tmp.path().join("db"), tmp.path().join("pm"));
        ok(&tierkv(
            &db,
            Some(&pm),
            &["--design", design, "put", "apple", "red"],
        ));
        ok(&tierkv(&db, Some(&pm), &["put", "kiwi", "green"]));
        assert_eq!(ok(&tierkv(&db, Some(&pm), &["get", "apple"])), "red\n");
        assert!(ok(&tierkv(&db, Some(&pm), &["verify"])).contains("no damage"));
    }
}
