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

/// Moves `dir/name` to `dir/lost/name` (replacing a file of that name
/// there) and makes the move durable. `why` is logged.
pub fn keep(fs: &dyn FileSystem, dir: &Path, name: &str, why: &str) -> Result<()> {
    let lost = dir.join(LOST_DIR);
    fs.create_dir_all(&lost)?;
    fs.rename(&dir.join(name), &lost.join(name))?;
    // The new name first: a crash in between leaves the file under both
    // names rather than under none.
    fs.sync_dir(&lost)?;
    fs.sync_dir(dir)?;
    log::warn!(
        "{}: kept {name} in {LOST_DIR}/ instead of deleting it: {why}",
        dir.display()
    );
    Ok(())
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
        keep(&fs, dir, "000007.sst", "test").unwrap();
        let after = fs.crash();
        assert!(!after.exists(&dir.join("000007.sst")));
        assert_eq!(
            after.read_all(&dir.join("lost/000007.sst")).unwrap(),
            b"table"
        );
    }
}
