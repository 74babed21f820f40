//! The `lost/` directory: files the engine would otherwise delete, kept
//! for a person to decide about.
//!
//! An open whose MANIFEST ended in a torn record moves the tables its
//! version does not reference here instead of deleting them, and so does it
//! with the damaged MANIFEST itself and with every WAL that ended damaged
//! (a torn tail, or damage a point-in-time recovery stopped at). `Db::repair`
//! moves the files it rebuilt the database from here too. Nothing in
//! `lost/` is read by the engine; removing the directory is always safe for
//! the database (and loses what it holds).

use std::path::Path;

use crate::error::Result;
use crate::storage::FileSystem;

/// Name of the directory inside the database directory.
pub const LOST_DIR: &str = "lost";

/// A name in `dir/lost/` for `name` that no file has yet: `name`, else
/// `name.1`, `name.2`, …
pub fn free_name(fs: &dyn FileSystem, dir: &Path, name: &str) -> String {
    let lost = dir.join(LOST_DIR);
    let mut candidate = name.to_string();
    let mut i = 0u32;
    while fs.exists(&lost.join(&candidate)) {
        i += 1;
        candidate = format!("{name}.{i}");
    }
    candidate
}

/// Moves `dir/name` to `dir/lost/` (as `name`, or `name.<n>` if a file
/// kept earlier has that name) and makes the move durable; returns the
/// name it got there. `why` is logged.
pub fn keep(fs: &dyn FileSystem, dir: &Path, name: &str, why: &str) -> Result<String> {
    let lost = dir.join(LOST_DIR);
    fs.create_dir_all(&lost)?;
    let kept = free_name(fs, dir, name);
    fs.rename(&dir.join(name), &lost.join(&kept))?;
    // The new name first: a crash in between leaves the file under both
    // names rather than under none.
    fs.sync_dir(&lost)?;
    fs.sync_dir(dir)?;
    log::warn!(
        "{}: kept {name} as {LOST_DIR}/{kept} instead of deleting it: {why}",
        dir.display()
    );
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::mem::MemFs;
    use crate::storage::WriteHint;

    #[test]
    fn a_kept_file_survives_a_crash_under_lost() {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let mut f = fs
            .create(&dir.join("000007.sst"), WriteHint::default())
            .unwrap();
        f.append(b"table").unwrap();
        f.sync().unwrap();
        drop(f);
        fs.sync_dir(dir).unwrap();
        assert_eq!(keep(&fs, dir, "000007.sst", "test").unwrap(), "000007.sst");
        let after = fs.crash();
        assert!(!after.exists(&dir.join("000007.sst")));
        assert_eq!(
            after.read_all(&dir.join("lost/000007.sst")).unwrap(),
            b"table"
        );
        // A second file of that name does not replace the first.
        let mut f = fs
            .create(&dir.join("000007.sst"), WriteHint::default())
            .unwrap();
        f.append(b"again").unwrap();
        drop(f);
        assert_eq!(
            keep(&fs, dir, "000007.sst", "test").unwrap(),
            "000007.sst.1"
        );
        assert_eq!(fs.read_all(&dir.join("lost/000007.sst")).unwrap(), b"table");
    }
}
