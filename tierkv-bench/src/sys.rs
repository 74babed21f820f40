//! Process measurements (CPU time, peak RSS) and free-space checks, from
//! `getrusage`, `/proc/self` and `statvfs`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{Error, Result};

/// User + system CPU seconds of this process so far (all threads).
pub fn cpu_seconds() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is a valid, writable `rusage`; getrusage only writes it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return 0.0;
    }
    // SAFETY: getrusage returned 0, so it initialized the struct (and it was
    // zeroed before in any case).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU seconds of the calling thread so far (`CLOCK_THREAD_CPUTIME_ID`),
/// or 0.
pub fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only
    // writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// The nominal CPU clock in Hz: the first `cpu MHz` of /proc/cpuinfo, or 0.
pub fn cpu_hz() -> f64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map_or(0.0, |mhz| mhz * 1e6)
}

/// Resets the kernel's peak-RSS mark so that [`peak_rss_bytes`] measures from
/// now (Linux `clear_refs` value 5). Best effort.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident set size since the last [`reset_peak_rss`] (VmHWM), or 0.
pub fn peak_rss_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Sets the calling thread's timer slack (Linux `PR_SET_TIMERSLACK`): how
/// late the kernel may wake a sleeping thread (default 50 µs). Best effort.
pub fn set_timer_slack_ns(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long argument and only
    // changes a per-thread scheduling attribute.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong) };
}

/// The calling thread's kernel id (what `perf` and `/proc` name it by).
pub fn thread_id() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds (the clock `Instant` reads and
/// `perf record -k CLOCK_MONOTONIC` stamps samples with), or 0.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only
    // writes it.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Raises the calling thread's CPU priority (nice value `nice`, e.g. −10)
/// so that a sleeping client thread gets the CPU back as soon as it wakes.
/// Needs CAP_SYS_NICE (root); returns false when refused.
pub fn raise_thread_priority(nice: i32) -> bool {
    // SAFETY: gettid has no preconditions; setpriority on our own thread id
    // only changes its scheduling weight.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice) == 0
    }
}

/// Bytes available to this user on the file system holding `path` (the
/// nearest existing ancestor is used).
pub fn free_bytes(path: &Path) -> Result<u64> {
    let mut p = path;
    while !p.exists() {
        p = p.parent().unwrap_or(Path::new("/"));
    }
    let c = CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::Usage(format!("path {} contains a NUL byte", p.display())))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(Error::Io {
            context: format!("statvfs {}", p.display()),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: statvfs returned 0 and initialized the struct.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // c_ulong / fsblkcnt_t differ by target
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    Ok(free)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measurements_are_sane() {
        let c0 = cpu_seconds();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(cpu_seconds() >= c0);
        reset_peak_rss();
        assert!(peak_rss_bytes() > 0);
        assert!(free_bytes(Path::new("/tmp/does/not/exist")).unwrap_or(0) > 0);
    }
}
