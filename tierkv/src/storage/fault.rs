//! A [`FileSystem`] wrapper that injects errors by rule.
//!
//! [`FaultFs`] forwards every call to an inner file system (usually
//! [`MemFs`](super::mem::MemFs) or [`PosixFs`](super::posix::PosixFs)) and,
//! before forwarding, checks its rules. A [`FaultRule`] names:
//!
//! * an operation kind ([`Op`]): `Create`, `Append`, `Sync`, `Rename`,
//!   `Remove`, `SyncDir`, `Read` (positional reads and `read_all`) or `Open`;
//! * a path filter ([`PathFilter`]): any path, a substring (`"MANIFEST"`) or a
//!   suffix (`".sst"`), matched against the path's full text (for `Rename`,
//!   against either the source or the destination; for `SyncDir`, the
//!   directory);
//! * when it fires: after `n` matching calls succeeded, then [`Repeat::Once`]
//!   or [`Repeat::Always`];
//! * the error ([`Fault`]): ENOSPC or EIO, reported as [`Error::Io`] with
//!   `io::Error::from_raw_os_error`, so `Error::is_no_space` works on it;
//!   or a delay ([`Fault::Delay`]): a slow device, not a failing one.
//!
//! A call that fires an error rule does not reach the inner file system:
//! nothing is appended, renamed, synced... A delay rule sleeps, then lets
//! the call through. The first rule (in insertion order) that fires wins;
//! every matching rule counts the call either way.
//!
//! Capacity: [`FaultFs::set_capacity_bytes`] simulates a full disk. Bytes
//! appended through the wrapper are counted; an append that would take the
//! count above the capacity fails with ENOSPC and appends nothing. Removing a
//! file gives its size back, as does truncating one with `create` or
//! replacing one with `rename`. `free_space` reports the smaller of the
//! inner answer and the remaining capacity.
//!
//! Worked example: `FaultRule::new(Op::Sync).path_suffix(".log").after(2)`
//! with the default `Repeat::Once` and `Fault::Io` lets the first two
//! `sync`s of WAL files succeed, fails the third with EIO, and lets every
//! later one succeed again.
//!
//! Concurrency: the state is shared (by `Arc`) with every file the wrapper
//! opened, so a test thread can add or clear rules or change the capacity
//! while the engine runs. Rules live behind a mutex that calls take only
//! while some rule is set; the capacity, the bytes in use and the counters
//! are atomics.
//!
//! Invariants:
//! 1. `used_bytes` = bytes appended through the wrapper minus bytes given
//!    back by removals and truncations (never below zero).
//! 2. A rule with `Repeat::Once` fires at most once.
//! 3. `injected(op)` counts every error the wrapper made up for `op`
//!    (rules and capacity), never errors of the inner file system.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{FileLock, FileSystem, RandomAccessFile, WritableFile, WriteHint};
use crate::error::{Error, Result};

/// ENOSPC on Linux.
const ENOSPC: i32 = 28;
/// EIO on Linux.
const EIO: i32 = 5;

/// The kind of operation a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`FileSystem::create`].
    Create,
    /// [`WritableFile::append`].
    Append,
    /// [`WritableFile::sync`].
    Sync,
    /// [`FileSystem::rename`].
    Rename,
    /// [`FileSystem::remove`].
    Remove,
    /// [`FileSystem::sync_dir`].
    SyncDir,
    /// [`RandomAccessFile::read_exact_at`] and [`FileSystem::read_all`].
    Read,
    /// [`FileSystem::open`].
    Open,
}

impl Op {
    const ALL: [Op; 8] = [
        Op::Create,
        Op::Append,
        Op::Sync,
        Op::Rename,
        Op::Remove,
        Op::SyncDir,
        Op::Read,
        Op::Open,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn verb(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Append => "append to",
            Op::Sync => "sync",
            Op::Rename => "rename",
            Op::Remove => "remove",
            Op::SyncDir => "sync dir",
            Op::Read => "read",
            Op::Open => "open",
        }
    }
}

/// Which paths a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathFilter {
    /// Every path.
    Any,
    /// Paths whose text contains this string (e.g. `"MANIFEST"`).
    Contains(String),
    /// Paths whose text ends with this string (e.g. `".sst"`).
    Suffix(String),
}

impl PathFilter {
    fn matches(&self, path: &Path) -> bool {
        match self {
            PathFilter::Any => true,
            PathFilter::Contains(s) => path.to_string_lossy().contains(s.as_str()),
            PathFilter::Suffix(s) => path.to_string_lossy().ends_with(s.as_str()),
        }
    }
}

/// How often a rule fires once armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// The first matching call after the `after` successes fails; later
    /// calls succeed.
    Once,
    /// Every matching call after the `after` successes fails.
    Always,
}

/// What a rule injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// ENOSPC: the device is full.
    NoSpace,
    /// EIO: a device error.
    Io,
    /// The call takes this much longer, then goes through (a slow device).
    Delay(std::time::Duration),
}

/// One error-injection rule; build with [`FaultRule::new`] and the setters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    /// The operation kind.
    pub op: Op,
    /// The paths it applies to.
    pub path: PathFilter,
    /// Matching calls that succeed before the rule fires.
    pub after: u64,
    /// Once or always.
    pub repeat: Repeat,
    /// The error.
    pub fault: Fault,
}

impl FaultRule {
    /// A rule for `op` on every path, firing at once, once, with EIO.
    pub fn new(op: Op) -> Self {
        FaultRule {
            op,
            path: PathFilter::Any,
            after: 0,
            repeat: Repeat::Once,
            fault: Fault::Io,
        }
    }

    /// Only paths containing `s`.
    pub fn path_contains(mut self, s: impl Into<String>) -> Self {
        self.path = PathFilter::Contains(s.into());
        self
    }

    /// Only paths ending with `s`.
    pub fn path_suffix(mut self, s: impl Into<String>) -> Self {
        self.path = PathFilter::Suffix(s.into());
        self
    }

    /// Fires after `n` matching calls succeeded.
    pub fn after(mut self, n: u64) -> Self {
        self.after = n;
        self
    }

    /// Fires on every matching call once armed.
    pub fn always(mut self) -> Self {
        self.repeat = Repeat::Always;
        self
    }

    /// Fires on one call only (the default).
    pub fn once(mut self) -> Self {
        self.repeat = Repeat::Once;
        self
    }

    /// Injects `fault`.
    pub fn fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }

    /// Injects ENOSPC.
    pub fn no_space(self) -> Self {
        self.fault(Fault::NoSpace)
    }
}

/// Identifies an added rule (for [`FaultFs::remove_rule`] and
/// [`FaultFs::rule_fired`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuleId(u64);

struct ActiveRule {
    id: RuleId,
    rule: FaultRule,
    /// Matching calls seen.
    seen: u64,
    /// Times it fired.
    fired: u64,
}

#[derive(Default)]
struct State {
    rules: Vec<ActiveRule>,
    next_id: u64,
}

struct Shared {
    /// The rules (the only state behind a lock).
    state: Mutex<State>,
    /// True when any rule is set (else calls skip the lock).
    armed: AtomicBool,
    /// Capacity in bytes; `u64::MAX` = unlimited.
    capacity_bytes: AtomicU64,
    /// Bytes appended minus bytes given back (invariant 1).
    used_bytes: AtomicU64,
    /// Injected errors per [`Op`].
    injected: [AtomicU64; Op::ALL.len()],
}

impl Shared {
    fn rearm(&self, st: &State) {
        self.armed.store(!st.rules.is_empty(), Ordering::Release);
    }

    /// Checks the rules for one call of `op` on `paths`.
    fn check(&self, op: Op, paths: &[&Path]) -> Result<()> {
        if !self.armed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut st = self.state.lock();
        let mut hit = None;
        for r in st.rules.iter_mut() {
            if r.rule.op != op || !paths.iter().any(|p| r.rule.path.matches(p)) {
                continue;
            }
            r.seen += 1;
            let armed = r.seen > r.rule.after;
            let spent = r.rule.repeat == Repeat::Once && r.fired > 0;
            if hit.is_none() && armed && !spent {
                r.fired += 1;
                hit = Some(r.rule.fault);
            }
        }
        drop(st);
        let Some(fault) = hit else {
            return Ok(());
        };
        self.injected[op.index()].fetch_add(1, Ordering::Relaxed);
        match fault {
            Fault::NoSpace => Err(injected_error(op, paths, ENOSPC)),
            Fault::Io => Err(injected_error(op, paths, EIO)),
            Fault::Delay(d) => {
                std::thread::sleep(d);
                Ok(())
            }
        }
    }

    /// Charges `n` appended bytes against the capacity.
    fn charge(&self, path: &Path, n: u64) -> Result<()> {
        let cap = self.capacity_bytes.load(Ordering::Acquire);
        let r = self
            .used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                let new = used.saturating_add(n);
                (cap == u64::MAX || new <= cap).then_some(new)
            });
        if r.is_err() {
            self.injected[Op::Append.index()].fetch_add(1, Ordering::Relaxed);
            return Err(injected_error(Op::Append, &[path], ENOSPC));
        }
        Ok(())
    }

    /// Gives `n` bytes back (a file was removed or truncated).
    fn release(&self, n: u64) {
        // The closure always returns Some, so this cannot fail.
        let _ = self
            .used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(n))
            });
    }
}

fn injected_error(op: Op, paths: &[&Path], errno: i32) -> Error {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    Error::io(
        format!("{} {} (injected)", op.verb(), names.join(" to ")),
        io::Error::from_raw_os_error(errno),
    )
}

/// The error-injecting wrapper. Cheap to clone (shared rules and counters).
#[derive(Clone)]
pub struct FaultFs {
    inner: Arc<dyn FileSystem>,
    shared: Arc<Shared>,
}

impl FaultFs {
    /// Wraps `inner` with no rules and no capacity limit.
    pub fn new(inner: Arc<dyn FileSystem>) -> Self {
        FaultFs {
            inner,
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                armed: AtomicBool::new(false),
                capacity_bytes: AtomicU64::new(u64::MAX),
                used_bytes: AtomicU64::new(0),
                injected: Default::default(),
            }),
        }
    }

    /// The wrapped file system.
    pub fn inner(&self) -> &Arc<dyn FileSystem> {
        &self.inner
    }

    /// Adds a rule; it applies to calls that start after this returns.
    pub fn add_rule(&self, rule: FaultRule) -> RuleId {
        let mut st = self.shared.state.lock();
        let id = RuleId(st.next_id);
        st.next_id += 1;
        st.rules.push(ActiveRule {
            id,
            rule,
            seen: 0,
            fired: 0,
        });
        self.shared.rearm(&st);
        id
    }

    /// Removes one rule; false if it was already gone.
    pub fn remove_rule(&self, id: RuleId) -> bool {
        let mut st = self.shared.state.lock();
        let before = st.rules.len();
        st.rules.retain(|r| r.id != id);
        self.shared.rearm(&st);
        st.rules.len() != before
    }

    /// Removes every rule (the capacity limit stays).
    pub fn clear_rules(&self) {
        let mut st = self.shared.state.lock();
        st.rules.clear();
        self.shared.rearm(&st);
    }

    /// Times rule `id` fired (0 if unknown).
    pub fn rule_fired(&self, id: RuleId) -> u64 {
        let st = self.shared.state.lock();
        st.rules.iter().find(|r| r.id == id).map_or(0, |r| r.fired)
    }

    /// Limits the bytes appended through the wrapper (`None`: unlimited).
    /// Appends that would take the bytes in use above it fail with ENOSPC.
    /// Bytes are counted whether or not a limit is set.
    pub fn set_capacity_bytes(&self, capacity: Option<u64>) {
        self.shared
            .capacity_bytes
            .store(capacity.unwrap_or(u64::MAX), Ordering::Release);
    }

    /// Bytes currently charged against the capacity (appended minus given back).
    pub fn used_bytes(&self) -> u64 {
        self.shared.used_bytes.load(Ordering::Acquire)
    }

    /// Errors injected for `op` so far (rules and capacity).
    pub fn injected(&self, op: Op) -> u64 {
        self.shared.injected[op.index()].load(Ordering::Relaxed)
    }

    /// Errors injected so far, all operations together.
    pub fn injected_total(&self) -> u64 {
        self.shared
            .injected
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Size of `path` if it exists in the inner file system (the bytes a
    /// removal or truncation gives back).
    fn existing_size(&self, path: &Path) -> Option<u64> {
        if !self.inner.exists(path) {
            return None;
        }
        self.inner.file_size(path).ok()
    }
}

struct FaultWritable {
    inner: Box<dyn WritableFile>,
    shared: Arc<Shared>,
}

impl WritableFile for FaultWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.shared.check(Op::Append, &[self.inner.path()])?;
        self.shared.charge(self.inner.path(), data.len() as u64)?;
        let r = self.inner.append(data);
        if r.is_err() {
            self.shared.release(data.len() as u64);
        }
        r
    }

    fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }

    fn sync(&mut self) -> Result<()> {
        self.shared.check(Op::Sync, &[self.inner.path()])?;
        self.inner.sync()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }
}

struct FaultReadable {
    inner: Arc<dyn RandomAccessFile>,
    shared: Arc<Shared>,
}

impl RandomAccessFile for FaultReadable {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.shared.check(Op::Read, &[self.inner.path()])?;
        self.inner.read_exact_at(offset, buf)
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }
}

impl FileSystem for FaultFs {
    fn create(&self, path: &Path, hint: WriteHint) -> Result<Box<dyn WritableFile>> {
        self.shared.check(Op::Create, &[path])?;
        let old = self.existing_size(path);
        let inner = self.inner.create(path, hint)?;
        if let Some(n) = old {
            self.shared.release(n);
        }
        Ok(Box::new(FaultWritable {
            inner,
            shared: Arc::clone(&self.shared),
        }))
    }

    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        self.shared.check(Op::Open, &[path])?;
        let inner = self.inner.open(path)?;
        Ok(Arc::new(FaultReadable {
            inner,
            shared: Arc::clone(&self.shared),
        }))
    }

    fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        self.shared.check(Op::Read, &[path])?;
        self.inner.read_all(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.shared.check(Op::Rename, &[from, to])?;
        let replaced = self.existing_size(to);
        self.inner.rename(from, to)?;
        if let Some(n) = replaced {
            self.shared.release(n);
        }
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        self.shared.check(Op::Remove, &[path])?;
        let size = self.existing_size(path);
        self.inner.remove(path)?;
        if let Some(n) = size {
            self.shared.release(n);
        }
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.inner.list(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.inner.create_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.shared.check(Op::SyncDir, &[dir])?;
        self.inner.sync_dir(dir)
    }

    fn file_size(&self, path: &Path) -> Result<u64> {
        self.inner.file_size(path)
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        self.inner.lock(path)
    }

    fn free_space(&self, dir: &Path) -> Result<u64> {
        let inner = self.inner.free_space(dir)?;
        let cap = self.shared.capacity_bytes.load(Ordering::Acquire);
        if cap == u64::MAX {
            return Ok(inner);
        }
        Ok(inner.min(cap.saturating_sub(self.used_bytes())))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::storage::mem::MemFs;

    fn setup() -> (FaultFs, &'static Path) {
        let mem = MemFs::new();
        let d = Path::new("/db");
        mem.create_dir_all(d).unwrap();
        (FaultFs::new(Arc::new(mem)), d)
    }

    fn errno(e: &Error) -> Option<i32> {
        match e {
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    #[test]
    fn a_delay_slows_the_call_and_lets_it_through() {
        let (fs, d) = setup();
        let p = d.join("000003.sst");
        let mut f = fs.create(&p, WriteHint::default()).unwrap();
        f.append(b"abc").unwrap();
        f.sync().unwrap();
        let delay = std::time::Duration::from_millis(20);
        let id = fs.add_rule(FaultRule::new(Op::Read).always().fault(Fault::Delay(delay)));
        let r = fs.open(&p).unwrap();
        let mut buf = [0u8; 3];
        let t0 = std::time::Instant::now();
        r.read_exact_at(0, &mut buf).unwrap();
        assert!(t0.elapsed() >= delay);
        assert_eq!(&buf, b"abc");
        assert_eq!(fs.rule_fired(id), 1);
    }

    #[test]
    fn rule_fires_after_n_once_on_matching_paths() {
        let (fs, d) = setup();
        let id = fs.add_rule(FaultRule::new(Op::Sync).path_suffix(".log").after(2));
        let mut log = fs
            .create(&d.join("000001.log"), WriteHint::default())
            .unwrap();
        let mut sst = fs
            .create(&d.join("000002.sst"), WriteHint::default())
            .unwrap();
        log.append(b"a").unwrap();
        log.sync().unwrap();
        sst.sync().unwrap(); // other suffix: not counted
        log.sync().unwrap();
        let e = log.sync().unwrap_err();
        assert_eq!(errno(&e), Some(EIO));
        assert!(e.to_string().contains("000001.log"), "{e}");
        log.sync().unwrap(); // once: spent
        assert_eq!(fs.rule_fired(id), 1);
        assert_eq!(fs.injected(Op::Sync), 1);
        assert_eq!(fs.injected_total(), 1);
    }

    #[test]
    fn always_rule_and_clear() {
        let (fs, d) = setup();
        fs.add_rule(
            FaultRule::new(Op::Append)
                .path_contains("MANIFEST")
                .always()
                .no_space(),
        );
        let mut m = fs
            .create(&d.join("MANIFEST-000003"), WriteHint::default())
            .unwrap();
        for _ in 0..3 {
            let e = m.append(b"edit").unwrap_err();
            assert!(e.is_no_space());
        }
        assert_eq!(m.len(), 0, "a failed append appends nothing");
        let mut other = fs
            .create(&d.join("000004.sst"), WriteHint::default())
            .unwrap();
        other.append(b"ok").unwrap();
        fs.clear_rules();
        m.append(b"edit").unwrap();
        assert_eq!(fs.injected(Op::Append), 3);
    }

    #[test]
    fn each_op_kind_can_fail() {
        let (fs, d) = setup();
        let a = d.join("a.sst");
        let b = d.join("b.sst");
        let mut f = fs.create(&a, WriteHint::default()).unwrap();
        f.append(b"xyz").unwrap();
        f.sync().unwrap();
        drop(f);
        for op in Op::ALL {
            let id = fs.add_rule(FaultRule::new(op));
            let r: Result<()> = match op {
                Op::Create => fs.create(&b, WriteHint::default()).map(|_| ()),
                Op::Append => fs
                    .create(&b, WriteHint::default())
                    .and_then(|mut f| f.append(b"1")),
                Op::Sync => fs
                    .create(&b, WriteHint::default())
                    .and_then(|mut f| f.sync()),
                Op::Rename => fs.rename(&a, &b),
                Op::Remove => fs.remove(&a),
                Op::SyncDir => fs.sync_dir(d),
                Op::Read => fs.open(&a).and_then(|f| f.read_exact_at(0, &mut [0; 3])),
                Op::Open => fs.open(&a).map(|_| ()),
            };
            assert_eq!(errno(&r.unwrap_err()), Some(EIO), "{op:?}");
            assert!(fs.remove_rule(id));
            assert_eq!(fs.injected(op), 1);
        }
        // Nothing reached the inner file system.
        assert_eq!(fs.read_all(&a).unwrap(), b"xyz");
    }

    #[test]
    fn capacity_fills_and_removal_frees() {
        let (fs, d) = setup();
        fs.set_capacity_bytes(Some(100));
        let p = d.join("1.sst");
        let mut f = fs.create(&p, WriteHint::default()).unwrap();
        f.append(&[0; 60]).unwrap();
        f.append(&[0; 40]).unwrap();
        let e = f.append(&[0; 1]).unwrap_err();
        assert!(e.is_no_space());
        assert_eq!(fs.used_bytes(), 100);
        assert_eq!(fs.free_space(d).unwrap(), 0);
        drop(f);
        fs.remove(&p).unwrap();
        assert_eq!(fs.used_bytes(), 0);
        let mut g = fs.create(&d.join("2.sst"), WriteHint::default()).unwrap();
        g.append(&[0; 100]).unwrap();
        // Truncating by re-creating gives the space back too.
        drop(g);
        let mut g = fs.create(&d.join("2.sst"), WriteHint::default()).unwrap();
        g.append(&[0; 10]).unwrap();
        assert_eq!(fs.used_bytes(), 10);
        fs.set_capacity_bytes(None);
        g.append(&[0; 1000]).unwrap();
        assert_eq!(fs.injected(Op::Append), 1);
    }

    #[test]
    fn rules_change_from_another_thread_while_writing() {
        let (fs, d) = setup();
        let fs2 = fs.clone();
        let mut f = fs.create(&d.join("w.log"), WriteHint::default()).unwrap();
        let writer = std::thread::spawn(move || {
            let mut n = 0u64;
            loop {
                match f.append(b"0123456789") {
                    Ok(()) => n += 1,
                    Err(e) => {
                        assert!(e.is_no_space());
                        return n;
                    }
                }
                if n > 10_000_000 {
                    return n;
                }
                std::thread::yield_now();
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
        fs2.add_rule(FaultRule::new(Op::Append).always().no_space());
        let n = writer.join().unwrap();
        assert!(n < 10_000_000);
        assert_eq!(fs2.injected(Op::Append), 1);
    }
}
