//! Groups of threads whose CPU policy is switched together while they run:
//! the compaction threads under `Options::adaptive_compaction_priority`
//! (and the threads they start for one job: subcompactions, collectors).
//!
//! A thread joins its group ([`join`]) when it starts and takes the
//! group's policy at once; [`ThreadGroup::set_idle`] then moves every
//! member between Linux's `SCHED_IDLE` (it runs only on cores no other
//! thread wants, and a woken foreground thread preempts it at once) and
//! `SCHED_OTHER` (a fair share), keeping each thread's niceness. A thread
//! starting helpers passes its group on ([`current`]); a helper that
//! joins after a switch takes the policy of the moment, because joining
//! and switching hold the same lock.
//!
//! Leaving `SCHED_IDLE` needs a privilege ([`can_leave_idle`]); the
//! option that uses groups is refused at open without it, so that no
//! thread is left under `SCHED_IDLE` for good. A policy change that fails
//! anyway costs latency, not correctness: it is logged once per group, and
//! the threads go on.
//! Elsewhere than on Linux groups exist but change nothing.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// Threads sharing one CPU policy.
#[derive(Debug)]
pub struct ThreadGroup {
    /// Under `SCHED_IDLE` (else `SCHED_OTHER`). Written under `tids`.
    idle: AtomicBool,
    /// Members' thread ids.
    tids: Mutex<Vec<i64>>,
    /// Switches so far (`set_idle` calls that changed the policy).
    switches: AtomicU64,
    /// A policy change failed once (logged then, not again).
    warned: AtomicBool,
}

thread_local! {
    static GROUP: RefCell<Option<Arc<ThreadGroup>>> = const { RefCell::new(None) };
}

impl ThreadGroup {
    /// An empty group whose members will start under `SCHED_IDLE` if
    /// `idle`.
    pub fn new(idle: bool) -> Arc<ThreadGroup> {
        Arc::new(ThreadGroup {
            idle: AtomicBool::new(idle),
            tids: Mutex::new(Vec::new()),
            switches: AtomicU64::new(0),
            warned: AtomicBool::new(false),
        })
    }

    /// Puts every member under `SCHED_IDLE` (`true`) or `SCHED_OTHER`;
    /// returns whether the policy changed (nothing is done otherwise).
    pub fn set_idle(&self, idle: bool) -> bool {
        if self.idle.load(Ordering::Relaxed) == idle {
            return false;
        }
        let tids = self.tids.lock();
        if self.idle.swap(idle, Ordering::Relaxed) == idle {
            return false;
        }
        self.switches.fetch_add(1, Ordering::Relaxed);
        for &tid in tids.iter() {
            self.apply(tid, idle);
        }
        true
    }

    /// Whether the members run under `SCHED_IDLE` now.
    pub fn is_idle(&self) -> bool {
        self.idle.load(Ordering::Relaxed)
    }

    /// How many times the policy changed.
    pub fn switches(&self) -> u64 {
        self.switches.load(Ordering::Relaxed)
    }

    /// The members' thread ids now.
    #[cfg(test)]
    fn members(&self) -> Vec<i64> {
        self.tids.lock().clone()
    }

    fn apply(&self, tid: i64, idle: bool) {
        if let Err(e) = set_policy(tid, idle) {
            if !self.warned.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "could not move background thread {tid} to {}: {e}",
                    if idle { "SCHED_IDLE" } else { "SCHED_OTHER" }
                );
            }
        }
    }
}

/// Membership of the calling thread in a group, until dropped.
#[must_use = "the thread leaves the group when the membership drops"]
pub struct Member {
    group: Arc<ThreadGroup>,
    tid: i64,
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut tids = self.group.tids.lock();
        if let Some(i) = tids.iter().position(|&t| t == self.tid) {
            tids.swap_remove(i);
        }
        drop(tids);
        GROUP.with(|g| g.borrow_mut().take());
    }
}

/// Joins the calling thread to `group`: it takes the group's policy now
/// and follows it until the membership drops. [`current`] then returns
/// the group on this thread.
pub fn join(group: &Arc<ThreadGroup>) -> Member {
    let tid = this_tid();
    {
        let mut tids = group.tids.lock();
        tids.push(tid);
        if group.is_idle() {
            group.apply(tid, true);
        }
    }
    GROUP.with(|g| *g.borrow_mut() = Some(Arc::clone(group)));
    Member {
        group: Arc::clone(group),
        tid,
    }
}

/// The group the calling thread belongs to, for the helper threads it
/// starts to [`join`].
pub fn current() -> Option<Arc<ThreadGroup>> {
    GROUP.with(|g| g.borrow().clone())
}

/// The calling thread's id (0 elsewhere than on Linux).
#[cfg(target_os = "linux")]
pub(crate) fn this_tid() -> i64 {
    // SAFETY: gettid has no preconditions.
    i64::from(unsafe { libc::gettid() })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn this_tid() -> i64 {
    0
}

/// Whether this process may move a thread out of `SCHED_IDLE` again:
/// Linux lets an unprivileged thread leave it only within its
/// `RLIMIT_NICE` (20 for niceness 0; the default limit is 0), so this
/// needs `CAP_SYS_NICE` or a raised limit (systemd's `LimitNICE=`). Tried
/// on a short-lived thread. Always true elsewhere than on Linux.
pub fn can_leave_idle() -> bool {
    #[cfg(target_os = "linux")]
    {
        std::thread::spawn(|| {
            let tid = this_tid();
            set_policy(tid, true).is_ok() && set_policy(tid, false).is_ok()
        })
        .join()
        .unwrap_or(false)
    }
    #[cfg(not(target_os = "linux"))]
    {
        true
    }
}

/// Moves thread `tid` to `SCHED_IDLE` or `SCHED_OTHER` (its niceness
/// stays as it is).
#[cfg(target_os = "linux")]
pub(crate) fn set_policy(tid: i64, idle: bool) -> std::io::Result<()> {
    let policy = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a plain system call with a valid parameter block; a thread
    // id that has gone away is an error (ESRCH), not undefined behaviour.
    let r = unsafe { libc::sched_setscheduler(tid as libc::pid_t, policy, &param) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_policy(_tid: i64, _idle: bool) -> std::io::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn policy_of(tid: i64) -> i32 {
        // SAFETY: a plain system call on a live thread of this process.
        unsafe { libc::sched_getscheduler(tid as libc::pid_t) }
    }

    #[test]
    fn members_follow_the_group_and_helpers_inherit_it() {
        let group = ThreadGroup::new(true);
        let (to_main, from_members) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let g = Arc::clone(&group);
        let member = std::thread::spawn(move || {
            let _m = join(&g);
            assert_eq!(policy_of(0), libc::SCHED_IDLE);
            // A helper started by a member joins the same group.
            let inherited = current().expect("a member has a group");
            std::thread::scope(|s| {
                s.spawn(move || {
                    let _h = join(&inherited);
                    to_main.send(this_tid()).expect("send");
                    stop_rx.recv().expect("stop");
                });
            });
            drop(_m);
            assert!(current().is_none());
        });
        let helper = from_members.recv().expect("helper tid");
        assert_eq!(policy_of(helper), libc::SCHED_IDLE);
        assert_eq!(group.members().len(), 2);
        assert!(group.set_idle(false));
        assert!(!group.set_idle(false), "no change, no switch");
        assert_eq!(policy_of(helper), libc::SCHED_OTHER);
        assert!(group.set_idle(true));
        assert_eq!(policy_of(helper), libc::SCHED_IDLE);
        assert_eq!(group.switches(), 2);
        stop_tx.send(()).expect("stop");
        member.join().expect("member");
        assert!(group.members().is_empty(), "members left as they ended");
        // The caller of set_idle is never a member: untouched.
        assert_eq!(policy_of(0), libc::SCHED_OTHER);
    }
}
