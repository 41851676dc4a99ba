//! Delay, jitter and so reordering of the IPv4 packets a [`Host`] receives, through
//! NFQUEUE.
//!
//! An iptables rule (table `mangle`, chain `PREROUTING`, on the host's veth) hands the
//! packets to a netfilter queue; a thread of this process, inside the host's namespace,
//! holds each one for the base delay plus a uniformly random part of the jitter and then
//! lets it go on (the ACCEPT verdict). A packet held longer than one that came after it
//! arrives after it: jitter larger than the gap between packets reorders them.
//!
//! Why not netem: this kernel has no `sch_netem`, and no nftables `queue` statement
//! (`CONFIG_NFT_QUEUE` is off), but the xtables `NFQUEUE` target and `nfnetlink_queue` are
//! built in; `iptables` (with its nftables backend, through `nft_compat`, or the legacy one)
//! reaches them.

use std::cmp::Ordering as Order;
use std::collections::BinaryHeap;
use std::io;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{COMMAND_TIMEOUT, Host, NetnsError, enter, run};
use crate::Rng;

/// The most packets one [`Delay`] holds at once; beyond it, a packet is let through at
/// once (and counted in [`DelayStats::over_cap`]), so memory stays bounded (each held
/// packet keeps a 4 KiB receive buffer of this process and its socket buffer in the
/// kernel: about 40 MiB and some tens of MiB at the cap).
pub const MAX_HELD: usize = 10_000;

/// How long the handler sleeps between looks at its socket while it holds packets (its
/// socket is non-blocking, so that it notices a stop promptly).
const BUSY_POLL: Duration = Duration::from_micros(250);

/// How long it sleeps between looks while it holds none.
const IDLE_POLL: Duration = Duration::from_millis(1);

/// Room in the kernel's queue beyond [`MAX_HELD`] for packets not yet read.
const KERNEL_SLACK: usize = 4_096;

/// Queue numbers, one per [`Delay`] of this process (each namespace has its own set, so
/// this only keeps two delays on one host apart).
static NEXT_QUEUE: AtomicU16 = AtomicU16::new(1);

/// Whether `iptables` is installed (for [`Host::delay_incoming`]).
pub fn have_iptables() -> bool {
    Command::new("iptables")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok()
}

impl Host {
    /// Holds `percent` % of the IPv4 packets arriving on this host's veth (chosen at random)
    /// for `delay` plus a uniformly random part of `jitter` (in [0, `jitter`]) each, then
    /// lets them go on: those held longer than a later one arrive after it. A packet is
    /// held after [`Host::drop_incoming`] has passed it (that rule is at the device, this
    /// one at IP's prerouting hook). Wakeups of the handler add up to a millisecond or so
    /// to a hold, never take from it.
    ///
    /// While the returned guard lives a thread of this process, inside the namespace,
    /// holds the packets; dropping it removes the rule, lets every held packet go and
    /// ends the thread. The rule passes packets on untouched when no handler listens
    /// (`--queue-bypass`), and the kernel lets a packet through undelayed when the handler
    /// falls behind (counted in [`DelayStats::missed`]), so a delay never loses packets.
    /// Needs `iptables` ([`have_iptables`]).
    pub fn delay_incoming(
        &self,
        delay: Duration,
        jitter: Duration,
        percent: u8,
    ) -> Result<Delay, NetnsError> {
        delay_on(self.name(), &self.dev, delay, jitter, percent)
    }
}

/// [`Host::delay_incoming`] on device `dev` of namespace `ns`: for a namespace with more
/// than one interface, such as a NAT's ([`super::sites`]).
pub(super) fn delay_on(
    ns: &str,
    dev: &str,
    delay: Duration,
    jitter: Duration,
    percent: u8,
) -> Result<Delay, NetnsError> {
    let queue = NEXT_QUEUE.fetch_add(1, Ordering::Relaxed);
    let shared = Arc::new(Shared::default());
    let (tx, rx) = mpsc::sync_channel(1);
    let hold = Hold { delay, jitter };
    let (name, sh) = (ns.to_string(), Arc::clone(&shared));
    let thread = std::thread::Builder::new()
        .name(format!("delay-{ns}"))
        .spawn(move || handle(&name, queue, hold, &sh, &tx))
        .map_err(|source| NetnsError::Os {
            what: "starting the delay handler thread".into(),
            source,
        })?;
    let mut guard = Delay {
        ns: ns.to_string(),
        rule: rule(dev, percent, queue),
        installed: false,
        shared,
        thread: Some(thread),
    };
    match rx.recv_timeout(COMMAND_TIMEOUT) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            // Left to itself: joining a thread stuck in the kernel would hang the caller.
            guard.thread = None;
            return Err(NetnsError::TimedOut {
                command: format!("opening netfilter queue {queue} in {ns}"),
                after: COMMAND_TIMEOUT,
            });
        }
    }
    iptables(&guard.ns, "-A", &guard.rule)?;
    guard.installed = true;
    Ok(guard)
}

/// The rule, as iptables takes it after `-A` or `-D`.
fn rule(dev: &str, percent: u8, queue: u16) -> Vec<String> {
    let mut r: Vec<String> = ["PREROUTING", "-i", dev].map(String::from).into();
    if percent < 100 {
        let p = format!("{:.4}", f64::from(percent) / 100.0);
        r.extend(["-m", "statistic", "--mode", "random", "--probability", &p].map(String::from));
    }
    let q = queue.to_string();
    r.extend(["-j", "NFQUEUE", "--queue-num", &q, "--queue-bypass"].map(String::from));
    r
}

/// `iptables -t mangle OP RULE…` inside namespace `ns`, bounded by [`COMMAND_TIMEOUT`].
fn iptables(ns: &str, op: &str, rule: &[String]) -> Result<(), NetnsError> {
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns", "exec", ns, "iptables", "-w", "5", "-t", "mangle", op,
    ])
    .args(rule);
    run(&mut cmd, None, COMMAND_TIMEOUT).map(drop)
}

/// A running [`Host::delay_incoming`]: dropping it (or [`Delay::finish`]) removes the rule,
/// lets every held packet go and ends the handler thread.
#[derive(Debug)]
#[must_use = "the delay ends when its guard drops"]
pub struct Delay {
    ns: String,
    rule: Vec<String>,
    installed: bool,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Delay {
    /// The counts so far (the handler goes on while they are read).
    pub fn stats(&self) -> DelayStats {
        self.shared.stats()
    }

    /// Ends the delay as dropping it does, and returns the final counts: every packet
    /// handed to the handler has been let go by then, so `passed` equals `queued` unless
    /// verdicts failed.
    pub fn finish(mut self) -> DelayStats {
        self.stop();
        self.shared.stats()
    }

    /// Removes the rule, then stops the thread, which lets what it holds go first.
    fn stop(&mut self) {
        if self.installed {
            // Failure (the namespace already gone) leaves nothing to remove.
            let _ = iptables(&self.ns, "-D", &self.rule);
            self.installed = false;
        }
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            // The thread notices within a poll interval; a panic in it is reported by its
            // own message, and the counts stay readable.
            let _ = t.join();
        }
    }
}

impl Drop for Delay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a [`Delay`]'s handler has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DelayStats {
    /// Packets the kernel handed to the handler.
    pub queued: u64,
    /// Packets let go (ACCEPT verdict given): after their hold, at once when the handler
    /// held [`MAX_HELD`], or early when the delay ended.
    pub passed: u64,
    /// Packets let go after one that was handed to the handler later: each was overtaken.
    pub reordered: u64,
    /// Packets let go at once because the handler already held [`MAX_HELD`].
    pub over_cap: u64,
    /// Packets the kernel let through without handing them over (its socket buffer was
    /// full; counted from gaps in the kernel's packet ids), so not delayed.
    pub missed: u64,
    /// Receive or verdict calls that failed.
    pub errors: u64,
}

/// The counters, shared by the handler thread and the guard, and the stop flag.
#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    queued: AtomicU64,
    passed: AtomicU64,
    reordered: AtomicU64,
    over_cap: AtomicU64,
    missed: AtomicU64,
    errors: AtomicU64,
}

impl Shared {
    fn stats(&self) -> DelayStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DelayStats {
            queued: get(&self.queued),
            passed: get(&self.passed),
            reordered: get(&self.reordered),
            over_cap: get(&self.over_cap),
            missed: get(&self.missed),
            errors: get(&self.errors),
        }
    }

    fn count(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// How long each packet is held.
#[derive(Debug, Clone, Copy)]
struct Hold {
    delay: Duration,
    jitter: Duration,
}

/// The handler thread: enters the namespace, opens and binds the queue (telling the
/// caller how that went), then holds packets until told to stop.
fn handle(
    ns: &str,
    num: u16,
    hold: Hold,
    shared: &Shared,
    ready: &mpsc::SyncSender<Result<(), NetnsError>>,
) {
    let queue = match open_queue(ns, num) {
        Ok(q) => q,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    if ready.send(Ok(())).is_err() {
        return;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ (u64::from(num) << 48);
    let mut holder = Holder {
        queue,
        held: BinaryHeap::new(),
        rng: Rng::new(seed),
        hold,
        next_seq: 0,
        released_max: None,
        last_id: None,
        shared,
    };
    holder.run();
}

/// The queue `num` of namespace `ns`, opened from a thread that has entered it.
fn open_queue(ns: &str, num: u16) -> Result<nfq::Queue, NetnsError> {
    enter(ns)?;
    let os = |what: &str| {
        let what = format!("{what} (netfilter queue {num} in {ns})");
        move |source: io::Error| NetnsError::Os { what, source }
    };
    let mut q = nfq::Queue::open().map_err(os("opening a netfilter queue socket"))?;
    q.bind(num).map_err(os("binding"))?;
    // Metadata only: the verdict needs the packet's id, not its bytes.
    q.set_copy_range(num, 0)
        .map_err(os("setting the copy range"))?;
    let max = u32::try_from(MAX_HELD + KERNEL_SLACK).unwrap_or(u32::MAX);
    q.set_queue_max_len(num, max)
        .map_err(os("setting the queue length"))?;
    // A packet the kernel cannot hand over (queue or socket full) passes instead of
    // being dropped: a delay adds no loss.
    q.set_fail_open(num, true)
        .map_err(os("setting fail-open"))?;
    q.set_nonblocking(true);
    Ok(q)
}

/// A packet held until `at`; `seq` is the order the handler received it in.
struct Held {
    at: Instant,
    seq: u64,
    msg: nfq::Message,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<Order> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    /// Reversed, so that the heap's top is the earliest release.
    fn cmp(&self, other: &Self) -> Order {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The handler's state.
struct Holder<'a> {
    queue: nfq::Queue,
    held: BinaryHeap<Held>,
    rng: Rng,
    hold: Hold,
    next_seq: u64,
    /// The highest `seq` let go so far.
    released_max: Option<u64>,
    /// The kernel's id of the last packet received.
    last_id: Option<u32>,
    shared: &'a Shared,
}

impl Holder<'_> {
    /// Takes packets and lets them go when due, until the stop flag is set; then lets go
    /// of everything, looks once more for packets queued as the rule went away, and
    /// returns (closing the socket).
    fn run(&mut self) {
        loop {
            let stopping = self.shared.stop.load(Ordering::Acquire);
            self.take();
            let now = Instant::now();
            self.release(now, stopping);
            if stopping {
                std::thread::sleep(BUSY_POLL);
                self.take();
                self.release(now, true);
                return;
            }
            let wait = self.held.peek().map_or(IDLE_POLL, |h| {
                h.at.saturating_duration_since(now).min(BUSY_POLL)
            });
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
        }
    }

    /// Reads every packet waiting on the socket and holds it (or lets it go at once past
    /// the cap).
    fn take(&mut self) {
        loop {
            match self.queue.recv() {
                Ok(msg) => self.hold(msg),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    Shared::count(&self.shared.errors, 1);
                    return;
                }
            }
        }
    }

    fn hold(&mut self, msg: nfq::Message) {
        let id = msg.get_packet_id();
        if let Some(last) = self.last_id {
            let gap = id.wrapping_sub(last);
            if gap > 1 && gap < 1 << 31 {
                Shared::count(&self.shared.missed, u64::from(gap - 1));
            }
        }
        self.last_id = Some(id);
        Shared::count(&self.shared.queued, 1);
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.held.len() >= MAX_HELD {
            Shared::count(&self.shared.over_cap, 1);
            self.accept(seq, msg);
            return;
        }
        let at = Instant::now() + self.hold.delay + self.rng.upto(self.hold.jitter);
        self.held.push(Held { at, seq, msg });
    }

    /// Lets go of the packets due by `now`, or of all when `all`, earliest first.
    fn release(&mut self, now: Instant, all: bool) {
        while self.held.peek().is_some_and(|h| all || h.at <= now) {
            if let Some(h) = self.held.pop() {
                self.accept(h.seq, h.msg);
            }
        }
    }

    fn accept(&mut self, seq: u64, mut msg: nfq::Message) {
        match self.released_max {
            Some(m) if seq < m => Shared::count(&self.shared.reordered, 1),
            _ => self.released_max = Some(seq),
        }
        msg.set_verdict(nfq::Verdict::Accept);
        match self.queue.verdict(msg) {
            Ok(()) => Shared::count(&self.shared.passed, 1),
            Err(_) => Shared::count(&self.shared.errors, 1),
        }
    }
}
