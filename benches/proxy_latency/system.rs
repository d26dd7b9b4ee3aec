//! What the operating system and the allocator tell about the process: CPU time per runtime, other
//! processes' CPU (the contention), accept-queue drops, resident memory, heap bytes and allocations per
//! runtime, and the open-file limit.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// The runtimes' thread names, as the OS shows them; also the allocator's groups (plus one for every other
/// thread, such as `main`). With several stores measured at once, each store's proxy runs on threads of its
/// own: the first store's are `proxy`, the others' `proxy-2` and `proxy-3` ([`PROXY_GROUPS`]).
pub const RUNTIMES: [&str; 5] = ["upstream", "proxy", "clients", "proxy-2", "proxy-3"];
pub const UPSTREAM: usize = 0;
pub const PROXY: usize = 1;
pub const CLIENTS: usize = 2;
/// The proxies' groups, the `n`th store's `n`th (at most three stores: memory, redb, redis).
pub const PROXY_GROUPS: [usize; 3] = [PROXY, 3, 4];
const GROUPS: usize = RUNTIMES.len() + 1;

fn is_proxy(group: usize) -> bool {
    PROXY_GROUPS.contains(&group)
}

/// What a step reports, out of every group's figure: the upstream's, the proxy's under test (`proxy`, one of
/// [`PROXY_GROUPS`]) and the clients', in that order, so that a step's figures are indexed by [`UPSTREAM`],
/// [`PROXY`] and [`CLIENTS`] whichever proxy it measured.
pub fn reported<T: Copy>(all: [T; RUNTIMES.len()], proxy: usize) -> [T; 3] {
    [all[UPSTREAM], all[proxy], all[CLIENTS]]
}

// ---------------------------------------------------------------------------------------------------------
// The counting allocator: live heap bytes and allocations, per runtime

/// The system allocator, counting per group of threads (each runtime tags its threads when they start).
/// Memory freed on another runtime's thread than the one that allocated it is counted against the freeing
/// group; the runtimes share nothing but sockets, so that is rare.
pub struct Counting;

thread_local! {
    static GROUP: Cell<usize> = const { Cell::new(RUNTIMES.len()) };
}

static LIVE_BYTES: [AtomicI64; GROUPS] = [const { AtomicI64::new(0) }; GROUPS];
static ALLOCATIONS: [AtomicU64; GROUPS] = [const { AtomicU64::new(0) }; GROUPS];

/// Tags the calling thread as one of [`RUNTIMES`] (a runtime's `on_thread_start`).
pub fn tag_thread(runtime: usize) {
    GROUP.with(|group| group.set(runtime));
    if let Some(placement) = PLACEMENT.get() {
        let cores = match is_proxy(runtime) {
            true => &placement.proxy,
            false => &placement.others,
        };
        // `place` pinned a thread already: pinning works here.
        let _ = pin(0, cores);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Placement: the proxy alone on its cores

/// The cores the proxy's threads run on, and those every other thread (upstream, clients) runs on.
pub struct Placement {
    pub proxy: Vec<usize>,
    pub others: Vec<usize>,
}

static PLACEMENT: std::sync::OnceLock<Placement> = std::sync::OnceLock::new();

/// From now on, threads tagged as the proxy's run on the last `proxy_threads` of the cores this process may
/// use and every other thread on the rest, this one included; `None` (nothing pinned) when there is no core
/// left for the rest, or pinning fails.
pub fn place(proxy_threads: usize) -> Option<&'static Placement> {
    let cores = allowed_cores();
    if proxy_threads >= cores.len() {
        return None;
    }
    let (others, proxy) = cores.split_at(cores.len() - proxy_threads);
    if let Err(error) = pin(0, others) {
        eprintln!("proxy_latency: nothing pinned: {error}");
        return None;
    }
    Some(PLACEMENT.get_or_init(|| Placement {
        proxy: proxy.to_vec(),
        others: others.to_vec(),
    }))
}

/// The cores this process may run on, by number.
#[cfg(target_os = "linux")]
fn allowed_cores() -> Vec<usize> {
    // SAFETY: the set is a plain bit mask filled by the kernel and read through libc's own macro.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&core| libc::CPU_ISSET(core, &set))
            .collect()
    }
}

#[cfg(not(target_os = "linux"))]
fn allowed_cores() -> Vec<usize> {
    Vec::new()
}

/// Pins process or thread `id` (0: the calling thread) to `cores`.
#[cfg(target_os = "linux")]
pub fn pin(id: u32, cores: &[usize]) -> std::io::Result<()> {
    // SAFETY: the set is a plain bit mask built through libc's own macro, passed by pointer.
    let pinned = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &core in cores {
            libc::CPU_SET(core, &mut set);
        }
        libc::sched_setaffinity(id as libc::pid_t, std::mem::size_of_val(&set), &set)
    };
    match pinned {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(not(target_os = "linux"))]
pub fn pin(_id: u32, _cores: &[usize]) -> std::io::Result<()> {
    Ok(())
}

fn group() -> usize {
    // A thread being torn down has no thread-locals left: count it with the others.
    GROUP.try_with(Cell::get).unwrap_or(RUNTIMES.len())
}

fn count(size: usize, sign: i64, allocation: bool) {
    let group = group();
    LIVE_BYTES[group].fetch_add(sign * size as i64, Ordering::Relaxed);
    if allocation {
        ALLOCATIONS[group].fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged; the counting only reads sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), 1, true);
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), 1, true);
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(layout.size(), -1, false);
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size, 1, true);
        count(layout.size(), -1, false);
        System.realloc(ptr, layout, new_size)
    }
}

/// Live heap bytes per runtime ([`RUNTIMES`] order).
pub fn live_bytes() -> [i64; RUNTIMES.len()] {
    std::array::from_fn(|i| LIVE_BYTES[i].load(Ordering::Relaxed))
}

/// Allocations made so far per runtime ([`RUNTIMES`] order).
pub fn allocations() -> [u64; RUNTIMES.len()] {
    std::array::from_fn(|i| ALLOCATIONS[i].load(Ordering::Relaxed))
}

// ---------------------------------------------------------------------------------------------------------
// /proc

/// The process's resident set size (`VmRSS`), in bytes.
pub fn rss_bytes() -> Option<u64> {
    vm_rss("/proc/self/status")
}

/// Process `pid`'s resident set size, in bytes.
pub fn process_rss(pid: u32) -> Option<u64> {
    vm_rss(&format!("/proc/{pid}/status"))
}

#[cfg(target_os = "linux")]
fn vm_rss(status: &str) -> Option<u64> {
    let status = std::fs::read_to_string(status).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(not(target_os = "linux"))]
fn vm_rss(_status: &str) -> Option<u64> {
    None
}

/// Per runtime, the sum over its threads of what `read` finds in each thread's `/proc` directory.
#[cfg(target_os = "linux")]
fn per_runtime(read: impl Fn(&std::path::Path) -> Option<u64>) -> Option<[u64; RUNTIMES.len()]> {
    let mut totals = [0; RUNTIMES.len()];
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let Ok(name) = std::fs::read_to_string(path.join("comm")) else {
            continue; // the thread ended meanwhile
        };
        let Some(group) = RUNTIMES.iter().position(|r| name.trim_end() == *r) else {
            continue;
        };
        totals[group] += read(&path).unwrap_or(0);
    }
    Some(totals)
}

/// CPU time used so far by each runtime's threads, from `/proc/self/task/*/schedstat` (ns on CPU).
#[cfg(target_os = "linux")]
pub fn runtime_cpu() -> Option<[Duration; RUNTIMES.len()]> {
    let on_cpu = per_runtime(|thread| {
        let stat = std::fs::read_to_string(thread.join("schedstat")).ok()?;
        stat.split_whitespace().next()?.parse().ok()
    })?;
    Some(on_cpu.map(Duration::from_nanos))
}

#[cfg(not(target_os = "linux"))]
pub fn runtime_cpu() -> Option<[Duration; RUNTIMES.len()]> {
    None
}

/// How often each runtime's threads went to sleep so far (voluntary context switches): each sleep is a
/// wake-up later, which costs the event that wakes the thread tens of µs on a VM.
#[cfg(target_os = "linux")]
pub fn runtime_sleeps() -> Option<[u64; RUNTIMES.len()]> {
    per_runtime(|thread| {
        let status = std::fs::read_to_string(thread.join("status")).ok()?;
        let sleeps = status
            .lines()
            .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))?;
        sleeps.trim().parse().ok()
    })
}

#[cfg(not(target_os = "linux"))]
pub fn runtime_sleeps() -> Option<[u64; RUNTIMES.len()]> {
    None
}

/// CPU time used so far by every other process on the machine: all busy time (`/proc/stat`) minus this
/// process's (`/proc/self/stat`), both in clock ticks.
#[cfg(target_os = "linux")]
pub fn others_cpu() -> Option<Duration> {
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let times: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice, already counted in user/nice]
    let busy: u64 = times.iter().take(8).sum::<u64>() - times.get(3)? - times.get(4)?;
    let own = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = own.rsplit_once(')')?.1.split_whitespace().collect();
    let own: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let ticks = busy.saturating_sub(own);
    Some(Duration::from_nanos(
        ticks * 1_000_000_000 / ticks_per_second,
    ))
}

#[cfg(not(target_os = "linux"))]
pub fn others_cpu() -> Option<Duration> {
    None
}

/// CPU time a single-threaded process `pid` used so far, from `/proc/<pid>/schedstat` (ns on CPU).
#[cfg(target_os = "linux")]
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    Some(Duration::from_nanos(
        stat.split_whitespace().next()?.parse().ok()?,
    ))
}

#[cfg(not(target_os = "linux"))]
pub fn process_cpu(_pid: u32) -> Option<Duration> {
    None
}

/// The kernel's count of connections dropped at a full accept queue (`TcpExt: ListenOverflows`).
#[cfg(target_os = "linux")]
pub fn listen_overflows() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/netstat").ok()?;
    let mut lines = text.lines().filter(|line| line.starts_with("TcpExt:"));
    let (names, values) = (lines.next()?, lines.next()?);
    let index = names
        .split_whitespace()
        .position(|name| name == "ListenOverflows")?;
    values.split_whitespace().nth(index)?.parse().ok()
}

#[cfg(not(target_os = "linux"))]
pub fn listen_overflows() -> Option<u64> {
    None
}

// ---------------------------------------------------------------------------------------------------------
// Descriptors

/// Raises the soft open-file limit toward `want` (up to the hard limit); returns the soft limit in force.
#[cfg(unix)]
#[allow(clippy::unnecessary_cast)] // `rlim_t` is not `u64` on every Unix.
pub fn raise_open_files(want: u64) -> Option<u64> {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by pointer.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        let want = want as libc::rlim_t;
        if limit.rlim_cur < want {
            let raised = libc::rlimit {
                rlim_cur: want.min(limit.rlim_max),
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit.rlim_cur = raised.rlim_cur;
            }
        }
        Some(limit.rlim_cur as u64)
    }
}

#[cfg(not(unix))]
pub fn raise_open_files(_want: u64) -> Option<u64> {
    None
}
