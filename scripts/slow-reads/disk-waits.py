#!/usr/bin/env python3
"""The reading threads' waits in D state (disk reads), by duration, from
trace.sh's NAME.perf. usage: disk-waits.py NAME"""
import re,subprocess,sys,collections
name=sys.argv[1]
tids={int(l.split('\t')[2]) for l in open(f'{name}.slow')}
p=subprocess.Popen(["perf","script","-i",f"{name}.perf","--ns","--show-switch-events","-F","comm,tid,time,event,trace"],stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,text=True)
pend={}; durs=[]
for line in p.stdout:
    m=re.match(r'\s*\S+\s+(\d+)\s+(\d+)\.(\d+):\s+(.*)',line)
    if not m: continue
    tid=int(m.group(1))
    if tid not in tids: continue
    t=int(m.group(2))*10**9+int(m.group(3)); rest=m.group(4)
    if rest.startswith('sched:sched_switch') and 'prev_state=D' in rest: pend[tid]=t
    elif rest.startswith('PERF_RECORD_SWITCH IN') and tid in pend:
        durs.append((t-pend.pop(tid))/1e6)
durs.sort(); n=len(durs)
print(name, n, "D waits of the reader; median %.3f ms, p90 %.3f, p99 %.3f, max %.2f ms; total %.0f ms; over 1 ms: %d (%.0f ms)"%(durs[n//2],durs[int(n*.9)],durs[int(n*.99)],durs[-1],sum(durs),sum(d>1 for d in durs),sum(d for d in durs if d>1)))
