//! CPUs: pinning, CPU time, the time the hypervisor stole, and keeping idle CPUs polling.

use anyhow::Context;

/// Pins the calling thread (and threads it creates afterwards) to `cpu`, or unpins it.
pub(crate) fn pin(cpu: Option<usize>) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it;
    // sched_setaffinity reads it for the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        match cpu {
            Some(c) => libc::CPU_SET(c, &mut set),
            None => {
                for c in 0..cpus() {
                    libc::CPU_SET(c, &mut set);
                }
            }
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The number of CPUs this process may use (1 if unknown).
pub(crate) fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Whether this process runs as root (effective uid 0).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// This process's resident set in bytes (`/proc/self/statm`), if readable.
pub(crate) fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// CPU time of `clock` (this thread's or this process's), in ns.
fn cpu_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's CPU time, in ns.
pub(crate) fn thread_cpu_ns() -> u64 {
    cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// This process's CPU time, in ns.
pub(crate) fn process_cpu_ns() -> u64 {
    cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The machine's CPU time stolen by the hypervisor and all its CPU time so far, in ticks
/// (jiffies, all CPUs), from the `cpu` line of `/proc/stat`. The hypervisor running
/// something else on this machine's vCPUs stalls every process alike, and is what makes
/// one run differ from the next on a VM.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuTicks {
    steal: u64,
    total: u64,
}

impl CpuTicks {
    /// Now; `None` where `/proc/stat` is unavailable.
    pub(crate) fn now() -> Option<CpuTicks> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal ...
        Some(CpuTicks {
            steal: *v.get(7)?,
            total: v.iter().take(8).sum(),
        })
    }

    /// Percent of the CPU time since `earlier` that was stolen; `None` if no time passed.
    pub(crate) fn steal_pct_since(self, earlier: CpuTicks) -> Option<f64> {
        (self.total > earlier.total).then(|| {
            (self.steal - earlier.steal) as f64 * 100.0 / (self.total - earlier.total) as f64
        })
    }
}

/// Percent of CPU time stolen between two readings taken with [`CpuTicks::now`].
pub(crate) fn steal_pct(a: Option<CpuTicks>, b: Option<CpuTicks>) -> Option<f64> {
    b?.steal_pct_since(a?)
}

/// The kernel's PM QoS request file: reading it gives the latency every CPU is held to
/// now; writing adds a request that holds while the file stays open.
pub(crate) const CPU_DMA_LATENCY: &str = "/dev/cpu_dma_latency";

/// A PM QoS request that idle CPUs wake within 0 µs, which makes the kernel's idle loop
/// poll rather than halt. It holds while this lives.
pub(crate) struct PollIdle {
    _request: std::fs::File,
}

impl PollIdle {
    /// Holds the request (needs root).
    pub(crate) fn hold() -> anyhow::Result<PollIdle> {
        use std::io::Write;
        const PATH: &str = CPU_DMA_LATENCY;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(PATH)
            .with_context(|| format!("--poll-idle: opening {PATH} (needs root)"))?;
        f.write_all(&0i32.to_ne_bytes())
            .with_context(|| format!("--poll-idle: writing {PATH}"))?;
        Ok(PollIdle { _request: f })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--poll-idle` holds the kernel's CPU latency request at 0 µs for as long as the bench
    /// runs, and lets it go after.
    #[test]
    fn poll_idle_holds_the_latency_request_while_it_lives() {
        use std::io::Read;
        let read = || -> Option<i32> {
            let mut b = [0u8; 4];
            std::fs::File::open(CPU_DMA_LATENCY)
                .ok()?
                .read_exact(&mut b)
                .ok()?;
            Some(i32::from_ne_bytes(b))
        };
        let before = read();
        match PollIdle::hold() {
            Ok(g) => {
                assert_eq!(read(), Some(0));
                drop(g);
                assert_eq!(read(), before, "the request outlived the bench");
            }
            // Not root, or a kernel without PM QoS: the error says what was needed.
            Err(e) => {
                assert!(
                    !is_root() || before.is_none(),
                    "root could not hold the request: {e:#}"
                );
                assert!(format!("{e:#}").contains(CPU_DMA_LATENCY), "{e:#}");
            }
        }
    }

    /// Steal is the share of all CPU time that was stolen between two readings, and
    /// nothing when no time passed.
    #[test]
    fn steal_is_a_share_of_the_time_between_readings() {
        let a = CpuTicks {
            steal: 10,
            total: 1000,
        };
        let b = CpuTicks {
            steal: 30,
            total: 1400,
        };
        assert_eq!(steal_pct(Some(a), Some(b)), Some(5.0));
        assert_eq!(steal_pct(Some(a), Some(a)), None);
        assert_eq!(steal_pct(None, Some(b)), None);
        assert!(CpuTicks::now().is_some(), "Linux has /proc/stat");
    }
}
