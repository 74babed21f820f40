#!/usr/bin/env python3
"""Attributes every slow read (bench --slow_reads_file) to where its time went,
from `perf record -k CLOCK_MONOTONIC --switch-events -e sched:sched_switch
-e cpu-clock --call-graph dwarf` of the same run (trace.sh).
usage: attribute.py NAME [MIN_MS]   (reads NAME.slow and NAME.perf in this directory)"""
import collections, re, subprocess, sys, bisect

name = sys.argv[1]
minms = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
slow = []
for line in open(f"{name}.slow"):
    cfg, bench, tid, s, e = line.split("\t")
    if (int(e) - int(s)) / 1e6 >= minms:
        slow.append((bench, int(tid), int(s), int(e)))
tids = {t for _, t, _, _ in slow}

switches = collections.defaultdict(list)   # tid -> [(t, 'OUT'|'IN')]
outs = collections.defaultdict(list)       # tid -> [(t, state, next_comm, stack)]
samples = collections.defaultdict(list)    # tid -> [(t, stack)]

p = subprocess.Popen(["perf", "script", "-i", f"{name}.perf", "--ns", "--show-switch-events",
                      "-F", "comm,tid,time,event,trace,ip,sym"], stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL, text=True, bufsize=1 << 20)
head = re.compile(r"^\s*(\S.*?)\s+(\d+)\s+(\d+)\.(\d+):\s+(.*)$")
cur = None
def finish(c):
    if c is None:
        return
    kind, tid, t, extra, stack = c
    if kind == "switch":
        outs[tid].append((t, extra[0], extra[1], stack))
    elif kind == "clock":
        samples[tid].append((t, stack))
alltimes = []
for line in p.stdout:
    if line.startswith("\t") or line.startswith("        "):
        if cur is not None:
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                cur[4].append(parts[1])
        continue
    m = head.match(line)
    if not m:
        continue
    finish(cur); cur = None
    tid = int(m.group(2))
    t = int(m.group(3)) * 1_000_000_000 + int(m.group(4))
    alltimes.append(t)
    if tid not in tids:
        continue
    rest = m.group(5)
    if rest.startswith("PERF_RECORD_SWITCH"):
        switches[tid].append((t, "OUT" if " OUT" in rest else "IN"))
    elif rest.startswith("sched:sched_switch"):
        st = re.search(r"prev_state=(\S+)", rest).group(1)
        nc = re.search(r"next_comm=(.*?) next_pid", rest).group(1)
        cur = ("switch", tid, t, (st, nc), [])
    elif "cpu-clock" in rest:
        cur = ("clock", tid, t, None, [])
finish(cur)

GENERIC = ("__schedule", "schedule", "core::", "std::", "alloc::", "<alloc::", "<core::",
           "parking_lot", "<std::", "crossbeam_epoch", "__GI", "__libc", "syscall",
           "entry_SYSCALL", "do_syscall", "asm_", "irqentry", "exit_to_user", "[unknown]")
def label_off(state, nextc, stack):
    s = " ".join(stack)
    if state.startswith("R"):
        return f"preempted: runnable, CPU taken by {re.sub(r'[0-9]+$', '#', nextc)}"
    if "futex" in s:
        who = next((f for f in stack if f.startswith("tierkv") or f.startswith("<tierkv")), "?")
        return f"lock/condvar wait in {who[:110]}"
    if any(k in s for k in ("filemap_fault", "folio_wait", "io_schedule", "wait_on_page")):
        return "page-cache miss / I/O wait"
    if any(k in s for k in ("shrink_", "try_to_free", "__alloc_pages_slowpath", "reclaim")):
        return "memory reclaim"
    if "rwsem" in s or "mmap_lock" in s:
        return "mmap lock (rwsem)"
    k = next((f for f in stack if not f.startswith(GENERIC)), "?")
    return f"{state} in {k[:110]}"

def label_on(stack):
    leaf = stack[0] if stack else "?"
    who = next((f for f in stack if (f.startswith("tierkv") or f.startswith("<tierkv")) and "bench" not in f), None)
    return f"{leaf[:60]} <- {who[:90] if who else '?'}"

res = collections.defaultdict(lambda: collections.defaultdict(float))
cnt = collections.Counter(); tot = collections.Counter(); over10 = collections.Counter()
for bench, tid, s, e in slow:
    cnt[bench] += 1; tot[bench] += (e - s)
    if e - s > 10e6: over10[bench] += 1
    sw = switches[tid]; ts = [x[0] for x in sw]
    # state at s: last switch before s
    i = bisect.bisect_right(ts, s) - 1
    off_ns = 0
    ot = [x[0] for x in outs[tid]]
    j = i
    t_out = sw[i][0] if i >= 0 and sw[i][1] == "OUT" else None
    j = i + 1
    def add_off(a, b, when):
        k = bisect.bisect_left(ot, when - 50_000)
        lab = "off-CPU (no sched_switch sample)"
        if k < len(outs[tid]) and abs(outs[tid][k][0] - when) < 50_000:
            _, st, nc, stack = outs[tid][k]
            lab = label_off(st, nc, stack)
        res[bench]["OFF " + lab] += (b - a)
        return b - a
    while j < len(sw) and sw[j][0] < e:
        t, kind = sw[j]
        if kind == "OUT":
            t_out = t
        elif kind == "IN" and t_out is not None:
            off_ns += add_off(max(t_out, s), t, t_out)
            t_out = None
        j += 1
    if t_out is not None:
        off_ns += add_off(max(t_out, s), e, t_out)
    on_ns = (e - s) - off_ns
    # Gaps with no event from any CPU while this read was on: both vCPUs
    # silent (every busy thread is sampled each 2 ms of its CPU time).
    a = bisect.bisect_left(alltimes, s); b = bisect.bisect_right(alltimes, e)
    pts = [s] + alltimes[a:b] + [e]
    gap = sum(y - x for x, y in zip(pts, pts[1:]) if y - x > 4_000_000)
    gap = min(gap, on_ns)
    if gap:
        res[bench]["ON  vCPUs silent: no event on any CPU for > 4 ms (hypervisor)"] += gap
        on_ns -= gap
    ss = [x for x in samples[tid] if s <= x[0] <= e]
    if ss:
        for _, stack in ss:
            res[bench]["ON  " + label_on(stack)] += on_ns / len(ss)
    else:
        res[bench]["ON  (no sample)"] += on_ns

for bench in res:
    print(f"== {name} {bench}: {cnt[bench]} reads >= {minms} ms ({over10[bench]} > 10 ms), {tot[bench]/1e6:.1f} ms in them")
    for lab, ns in sorted(res[bench].items(), key=lambda x: -x[1])[:60]:
        print(f"  {ns/1e6:9.1f} ms {100*ns/tot[bench]:5.1f}%  {lab}")
