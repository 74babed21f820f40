//! The CLOSED file: what a clean close sealed.
//!
//! A crash can only cut the end of a log short, so recovery takes an
//! incomplete last record of the MANIFEST or of a WAL for a torn tail. The
//! same cut made *after* a clean close — a truncated file, a tail of zeros
//! — would then drop acknowledged data without an error. So a clean close
//! writes down how long the MANIFEST and every live SSD WAL were: any later
//! difference is damage, never a torn tail. (A PM WAL records the same in
//! its own seal, `docs/format/wal.md` §4.)
//!
//! ```text
//! CLOSED:
//!   MANIFEST-000007 1234\n     the manifest CURRENT names, and its length in bytes
//!   000012.log 4096\n          every SSD WAL at or above the log number, and its length
//!   crc32c:0a1b2c3d\n          crc32c of every byte before this line, 8 lowercase hex digits
//! ```
//!
//! Written at the end of `Db::close` (or the drop of a `Db`), after every
//! log and the manifest were synced and only if nothing failed: write
//! `CLOSED.tmp`, sync it, rename it to `CLOSED`, sync the directory. An
//! open reads it if it names the manifest CURRENT names, and checks the
//! manifest and every recorded WAL ([`Closed::check_wals`]) before it
//! writes anything: the open then starts a new manifest, which makes
//! CLOSED stale, so an open that failed after that point would leave the
//! next one without the checks. An open that succeeds removes the stale
//! CLOSED. A CLOSED that does not verify is ignored (logged): it only ever
//! adds checks.

use std::path::Path;

use crate::error::{Error, Result};
use crate::storage::{FileSystem, WriteHint};
use crate::wal::{FileLog, Reader};

use super::edit::manifest_file_name;
use super::set::wal_name;

/// File name of the seal.
pub const CLOSED_FILE_NAME: &str = "CLOSED";

/// What a clean close recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// The manifest's number and length in bytes.
    pub manifest: (u64, u64),
    /// Every live SSD WAL's number and length in bytes.
    pub wals: Vec<(u64, u64)>,
}

impl Closed {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!(
            "{} {}\n",
            manifest_file_name(self.manifest.0),
            self.manifest.1
        );
        for (n, len) in &self.wals {
            s.push_str(&format!("{} {len}\n", wal_name(*n)));
        }
        let crc = crate::coding::crc32c(s.as_bytes());
        s.push_str(&format!("crc32c:{crc:08x}\n"));
        s.into_bytes()
    }

    /// Parses the file; `None` for anything but the exact [`encode`]
    /// form.
    ///
    /// [`encode`]: Closed::encode
    pub fn decode(data: &[u8]) -> Option<Closed> {
        let text = std::str::from_utf8(data).ok()?;
        let body_end = text.strip_suffix('\n')?.rfind('\n')? + 1;
        let (body, crc_line) = text.split_at(body_end);
        let stored = crc_line
            .strip_prefix("crc32c:")?
            .strip_suffix('\n')
            .filter(|h| h.len() == 8 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .and_then(|h| u32::from_str_radix(h, 16).ok())?;
        if stored != crate::coding::crc32c(body.as_bytes()) {
            return None;
        }
        let mut lines = body.split_terminator('\n');
        let entry = |line: &str, prefix: &str, suffix: &str| -> Option<(u64, u64)> {
            let (name, len) = line.split_once(' ')?;
            let n = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
            Some((n.parse().ok()?, len.parse().ok()?))
        };
        let manifest = entry(lines.next()?, "MANIFEST-", "")?;
        let wals = lines
            .map(|l| entry(l, "", ".log"))
            .collect::<Option<Vec<_>>>()?;
        Some(Closed { manifest, wals })
    }

    /// Reads `dir/CLOSED` if it exists, verifies and names manifest
    /// `manifest_number`; `None` otherwise (a damaged one is logged).
    pub fn read(fs: &dyn FileSystem, dir: &Path, manifest_number: u64) -> Option<Closed> {
        let path = dir.join(CLOSED_FILE_NAME);
        if !fs.exists(&path) {
            return None;
        }
        match fs.read_all(&path).ok().as_deref().and_then(Closed::decode) {
            Some(c) if c.manifest.0 == manifest_number => Some(c),
            Some(_) => None,
            None => {
                log::warn!(
                    "{}: does not verify; ignored (it only adds checks)",
                    path.display()
                );
                None
            }
        }
    }

    /// Writes `dir/CLOSED` durably (module docs).
    pub fn write(&self, fs: &dyn FileSystem, dir: &Path) -> Result<()> {
        let tmp = dir.join("CLOSED.tmp");
        let mut f = fs.create(&tmp, WriteHint::default())?;
        f.append(&self.encode())?;
        f.sync()?;
        drop(f);
        fs.rename(&tmp, &dir.join(CLOSED_FILE_NAME))?;
        fs.sync_dir(dir)
    }

    /// Checks every WAL this close recorded as the next open needs it:
    /// present, exactly the recorded length, and read to its end without
    /// damage or a torn tail (the file rule, whatever `WalRecovery` says).
    /// Anything else is `Error::Corruption` naming the WAL and the offset.
    pub fn check_wals(&self, fs: &dyn FileSystem, dir: &Path) -> Result<()> {
        for &(n, recorded) in &self.wals {
            let path = dir.join(wal_name(n));
            let source = path.display().to_string();
            if !fs.exists(&path) {
                return Err(Error::corruption(
                    source,
                    0,
                    format!(
                        "missing, but the database was closed cleanly with it ({CLOSED_FILE_NAME})"
                    ),
                ));
            }
            let bytes = fs.read_all(&path)?;
            let len = bytes.len() as u64;
            let mut reader = Reader::new(FileLog::new(source.clone(), bytes), n);
            while reader.next_record()?.is_some() {}
            Closed::check_log(recorded, &source, len, reader.torn_tail())?;
        }
        Ok(())
    }

    /// Checks a log read back against its recorded length: `len` bytes on
    /// disk, `torn` where the reader found it damaged (a torn tail or, in
    /// point-in-time mode, damage). After a clean close neither may differ.
    pub fn check_log(recorded_len: u64, source: &str, len: u64, torn: Option<u64>) -> Result<()> {
        if len != recorded_len {
            return Err(Error::corruption(
                source,
                len.min(recorded_len),
                format!(
                    "{len} bytes, but the database was closed cleanly with {recorded_len} ({CLOSED_FILE_NAME}): the log was cut short or grew since"
                ),
            ));
        }
        if let Some(at) = torn {
            return Err(Error::corruption(
                source,
                at,
                format!(
                    "damaged record, not a torn tail: the database was closed cleanly with this log complete ({CLOSED_FILE_NAME})"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::mem::MemFs;

    #[test]
    fn roundtrip_and_every_damage_is_rejected() {
        let c = Closed {
            manifest: (7, 1234),
            wals: vec![(12, 4096), (15, 0)],
        };
        let b = c.encode();
        assert_eq!(
            std::str::from_utf8(&b).unwrap().lines().next(),
            Some("MANIFEST-000007 1234")
        );
        assert_eq!(Closed::decode(&b), Some(c.clone()));
        for i in 0..b.len() {
            for mask in [1u8, 0x20, 0x80] {
                let mut d = b.clone();
                d[i] ^= mask;
                assert_ne!(Closed::decode(&d), Some(c.clone()), "change at {i}");
            }
            assert_eq!(Closed::decode(&b[..i]), None);
        }
        let none = Closed {
            manifest: (3, 11),
            wals: Vec::new(),
        };
        assert_eq!(Closed::decode(&none.encode()), Some(none));
    }

    #[test]
    fn read_ignores_a_seal_of_another_manifest() {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let c = Closed {
            manifest: (7, 100),
            wals: vec![(9, 50)],
        };
        c.write(&fs, dir).unwrap();
        assert_eq!(Closed::read(&fs, dir, 7), Some(c));
        assert_eq!(Closed::read(&fs, dir, 8), None);
    }
}
